"""The converge plan (toolkit/node/converge.py): a component is skipped only on intact facts.

The probe and the stamp writer are the very programs that run on nodes; here they run with
the local python3 against a temporary stamp directory, so the round trip stamp -> facts ->
decision is exercised without a node.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.node import converge
from toolkit.node.nodefacts import PROBE_SCRIPT, node_facts
from toolkit.plugins.action import gpunode_converge_stamp
from toolkit.plugins.filter.gpunode import gpunode_dpkg_held

INPUTS = "a" * 64


def write_stamp(stamp_dir: Path, stamp: dict[str, Any]) -> None:
    """Write a stamp with the plugin's own node-side program (it hashes the files)."""
    payload = base64.b64encode(json.dumps(stamp).encode()).decode()
    path = stamp_dir / f"{stamp['component']}.json"
    subprocess.run(
        [sys.executable, "-c", gpunode_converge_stamp._WRITE, payload, str(path)], check=True
    )


def probe(stamp_dir: Path) -> dict[str, Any] | str:
    """Run the node-side probe against ``stamp_dir`` and parse it as the facts action does."""
    program = converge.PROBE.replace(repr(converge.STAMP_DIR), repr(str(stamp_dir)), 1)
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    return converge.parse_probe(out.returncode, out.stdout)


NODE = {
    "installed": {"libnccl2": "2.21.5-1+cuda12.4", "libnccl-dev": "2.21.5-1+cuda12.4"},
    "held": ["libnccl-dev", "libnccl2"],
    "loaded_driver": {"version": "550.127.05"},
}


@pytest.fixture
def nccl(tmp_path: Path) -> tuple[Path, Path]:
    """A converged NCCL component: its preferences file and its stamp in a stamp dir."""
    stamp_dir = tmp_path / "converged"
    pref = tmp_path / "gpunode-nccl.pref"
    pref.write_text("Package: libnccl2\nPin: version 2.21.5-1+cuda12.4\n")
    write_stamp(
        stamp_dir,
        converge.stamp(
            "nccl",
            INPUTS,
            {str(pref): ""},
            {"libnccl2": "2.21.5-1+cuda12.4", "libnccl-dev": "2.21.5-1+cuda12.4"},
            [],
        ),
    )
    return stamp_dir, pref


def test_an_intact_converge_is_up_to_date(nccl: tuple[Path, Path]) -> None:
    stamp_dir, pref = nccl
    facts = probe(stamp_dir)
    assert isinstance(facts, dict)
    digest = hashlib.sha256(pref.read_bytes()).hexdigest()
    assert facts["nccl"]["stamp"]["files"] == {str(pref): digest}
    decision = converge.decide("nccl", INPUTS, facts, NODE)
    assert decision == converge.Decision("nccl", False, "up to date", INPUTS)
    assert decision.line() == "nccl: up to date"


def test_a_changed_or_missing_file_runs_the_role(nccl: tuple[Path, Path]) -> None:
    stamp_dir, pref = nccl
    pref.write_text(pref.read_text() + "# local edit\n")
    changed = converge.decide("nccl", INPUTS, probe(stamp_dir), NODE)
    assert changed.run and changed.reason == f"{pref} changed"
    pref.unlink()
    missing = converge.decide("nccl", INPUTS, probe(stamp_dir), NODE)
    assert missing.run and missing.reason == f"{pref} is missing"
    assert missing.line() == f"nccl: runs ({pref} is missing)"


def test_a_file_absent_when_stamped_must_stay_absent(tmp_path: Path) -> None:
    stamp_dir, dropin = tmp_path / "converged", tmp_path / "dropin.conf"
    write_stamp(stamp_dir, converge.stamp("driver", INPUTS, {str(dropin): ""}, {}, []))
    assert not converge.decide("driver", INPUTS, probe(stamp_dir), NODE).run
    dropin.write_text("[Service]\n")
    assert converge.decide("driver", INPUTS, probe(stamp_dir), NODE).reason == (f"{dropin} changed")


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        (
            {**NODE, "installed": {**NODE["installed"], "libnccl2": "2.23.4-1+cuda12.4"}},
            "libnccl2: installed 2.23.4-1+cuda12.4, pinned 2.21.5-1+cuda12.4",
        ),
        (
            {**NODE, "installed": {"libnccl-dev": "2.21.5-1+cuda12.4"}},
            "libnccl2: installed nothing, pinned 2.21.5-1+cuda12.4",
        ),
        ({**NODE, "held": ["libnccl-dev"]}, "libnccl2 is not held"),
        ({**NODE, "held": None}, "facts unreadable: installed packages and holds"),
    ],
)
def test_package_facts_that_differ_run_the_role(
    nccl: tuple[Path, Path], node: dict[str, Any], reason: str
) -> None:
    decision = converge.decide("nccl", INPUTS, probe(nccl[0]), node)
    assert decision.run and decision.reason == reason


def test_other_inputs_or_another_stamp_version_run_the_role(nccl: tuple[Path, Path]) -> None:
    facts = probe(nccl[0])
    assert converge.decide("nccl", "b" * 64, facts, NODE).reason == (
        "the stack, the lock or the role's settings changed since its last converge"
    )
    assert isinstance(facts, dict)
    facts["nccl"]["stamp"]["version"] = converge.STAMP_VERSION + 1
    assert converge.decide("nccl", INPUTS, facts, NODE).run


def test_never_converged_and_unreadable_facts_run_the_role(nccl: tuple[Path, Path]) -> None:
    stamp_dir, _ = nccl
    assert converge.decide("cuda", INPUTS, probe(stamp_dir), NODE).reason == (
        "never converged by gpunode on this node"
    )
    (stamp_dir / "nccl.json").write_text("{not json")
    broken = converge.decide("nccl", INPUTS, probe(stamp_dir), NODE)
    assert broken.run and broken.reason.startswith("facts unreadable: ")
    assert str(stamp_dir / "nccl.json") in broken.reason
    assert converge.decide("nccl", INPUTS, None, NODE).reason == "no facts were read"
    for rc, text in ((None, ""), (1, "Traceback"), (0, "not json"), (0, "[1, 2]")):
        unreadable = converge.decide("nccl", INPUTS, converge.parse_probe(rc, text), NODE)
        assert unreadable.run and unreadable.reason.startswith("facts unreadable: ")


def test_services_must_be_enabled_and_active(tmp_path: Path) -> None:
    stamp = converge.stamp("container_runtime", INPUTS, {}, {}, ["docker", "containerd"])
    good = {"enabled": "enabled", "active": "active"}
    facts: dict[str, Any] = {
        "container_runtime": {
            "stamp": stamp,
            "files": {},
            "services": {"docker": good, "containerd": good},
        }
    }
    assert not converge.decide("container_runtime", INPUTS, facts, NODE).run
    facts["container_runtime"]["services"]["docker"] = {"enabled": "disabled", "active": "inactive"}
    assert converge.decide("container_runtime", INPUTS, facts, NODE).reason == (
        "service docker is disabled, inactive"
    )
    facts["container_runtime"]["services"] = {"containerd": good}
    assert converge.decide("container_runtime", INPUTS, facts, NODE).reason == (
        "service docker is unknown, unknown"
    )


def test_the_driver_must_be_loaded_at_its_pin() -> None:
    stamp = converge.stamp("driver", INPUTS, {}, {}, [], loaded_driver="550.127.05")
    facts = {"driver": {"stamp": stamp, "files": {}, "services": {}}}
    assert not converge.decide("driver", INPUTS, facts, NODE).run
    other = {**NODE, "loaded_driver": {"version": "550.54.15"}}
    assert converge.decide("driver", INPUTS, facts, other).reason == (
        "loaded NVIDIA module 550.54.15, pinned 550.127.05"
    )
    assert converge.decide("driver", INPUTS, facts, {**NODE, "loaded_driver": {}}).run


def test_inputs_digest_follows_values_content_and_controller_files(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("one")
    first = converge.inputs_digest("c", {"ca": converge.file_value(str(bundle))}, "0.1.0")
    assert first == converge.inputs_digest("c", {"ca": converge.file_value(str(bundle))}, "0.1.0")
    bundle.write_text("two")  # same path, other certificates
    assert first != converge.inputs_digest("c", {"ca": converge.file_value(str(bundle))}, "0.1.0")
    assert first != converge.inputs_digest("d", {"ca": converge.file_value(str(bundle))}, "0.1.0")
    assert converge.file_value("/no/such/file") == "/no/such/file"
    assert converge.file_value(["/etc"]) == ["/etc"]


def test_content_digest_changes_with_any_role_file(tmp_path: Path) -> None:
    (tmp_path / "one" / "tasks").mkdir(parents=True)
    (tmp_path / "one" / "tasks" / "main.yml").write_text("---\n")
    before = converge.content_digest(tmp_path, ("one",))
    (tmp_path / "one" / "defaults").mkdir()
    (tmp_path / "one" / "defaults" / "main.yml").write_text("one_x: 1\n")
    assert converge.content_digest(tmp_path, ("one",)) != before


def test_controller_files_are_role_options() -> None:
    # Only these count by content; any other absolute path is a plain value (a path that
    # happens to exist on the controller must not make the plan depend on the controller).
    roles_dir = REPO / "roles"
    options = set()
    for spec in roles_dir.glob("*/meta/argument_specs.yml"):
        options |= set(yaml.safe_load(spec.read_text())["argument_specs"]["main"]["options"])
    assert converge.CONTROLLER_FILES and options >= converge.CONTROLLER_FILES


def test_every_component_has_its_role_in_the_repository() -> None:
    roles_dir = REPO / "roles"
    for component, roles in converge.ROLES.items():
        for role in roles:
            assert (roles_dir / role / "tasks" / "main.yml").is_file(), (component, role)
        assert component in converge.EXTRA_INPUTS


def test_plan_lines_and_stamped_packages(nccl: tuple[Path, Path]) -> None:
    facts = probe(nccl[0])
    decisions = converge.plan({"nccl": INPUTS, "cuda": INPUTS}, facts, NODE)
    assert converge.plan_lines(converge.plan_dicts(decisions)) == [
        "cuda: runs (never converged by gpunode on this node)",
        "nccl: up to date",
    ]
    assert converge.stamped_packages(facts) == {"libnccl2", "libnccl-dev"}
    assert converge.stamped_packages("unreadable") == set()


def test_node_facts_report_every_stamped_package(nccl: tuple[Path, Path]) -> None:
    # runc is no NVIDIA package, but the container runtime pinned it: its version is a fact.
    stamp = converge.stamp("container_runtime", INPUTS, {}, {"runc": "1.1.5+ds1-1+deb12u1"}, [])
    converged = json.dumps({"container_runtime": {"stamp": stamp, "files": {}, "services": {}}})
    sections = {
        "dpkg": (0, "runc\t1.1.5+ds1-1+deb12u1\thi \nvim\t2:9.0\tii "),
        "holds": (0, "runc\n"),
        "converged": (0, converged),
    }
    facts = node_facts(sections, None)
    assert facts["installed"] == {"runc": "1.1.5+ds1-1+deb12u1"}
    assert not converge.decide("container_runtime", INPUTS, facts["converged"], facts).run


def test_the_probe_script_reads_the_stamps_last() -> None:
    assert "section converged python3 -c " in PROBE_SCRIPT
    assert converge.STAMP_DIR in PROBE_SCRIPT


def test_dpkg_held_reads_the_desired_state() -> None:
    text = "libnccl2\t2.21.5-1+cuda12.4\thi \nlibnccl-dev\t2.21.5-1+cuda12.4\tii \nx:amd64\t1\thi "
    assert gpunode_dpkg_held(text) == ["libnccl2", "x"]
