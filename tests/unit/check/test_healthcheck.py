"""The node-side health check (``toolkit.check.healthcheck``, Slurm's HealthCheckProgram).

The program is run for real, as slurmd runs it (a bare ``python3 -I -S`` on the installed
file, the settings file beside it), on a fake node root (the lab's stand-in nvidia-smi and
hardware file, ``test_check.FakeNodeRoot``) with a stand-in ``scontrol`` that answers with
real ``scontrol show node`` captures (tests/data/real/slurm/) and logs what it was asked. The
decision (drain, leave, nothing) is also tested in-process with those captures.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.acceptance import payload
from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.hooks import CommandResult
from toolkit.acceptance.thresholds import critical_xids, effective
from toolkit.check import healthcheck, plan, rules
from toolkit.inventory import Host, load_inventory
from toolkit.lab.hardware import NodeHardware
from toolkit.node import nodestate
from toolkit.stack import catalog
from toolkit.stack.systems import os_id_of_release
from unit.check.test_check import FakeNodeRoot

REAL = REPO / "tests" / "data" / "real" / "slurm"
IDLE = (REAL / "scontrol-show-node-idle.txt").read_text()
DRAINED_BY_HAND = (REAL / "scontrol-show-node-drained.txt").read_text()  # maintenance window
ROLE = REPO / "roles" / "slurm_healthcheck"
V550 = "550.127.05"
NODE = "hsl-dev-node-1"


def _settings(root: FakeNodeRoot, hw: NodeHardware, scontrol: str) -> healthcheck.Settings:
    system = os_id_of_release(Path("/etc/os-release").read_text())
    assert system is not None, "this machine's OS is not one gpunode supports"
    host = Host(NODE, "10.0.0.1", 22, None, None, None, ("gpu",), {})
    expect = NodeExpectation(NODE, "abc", "H100", len(hw.gpus), V550, {})
    resolved = {"fabric_manager": {"enabled": True}}
    node = plan.NodePlan(
        host,
        {system: rules.Expected(expect, plan.required_units(host, resolved))},
        effective(None),
        {
            "packages": [],
            "kernel_log_command": f"cat {root.log}",
            "dmi_dir": str(root.root / "dmi"),
            "pci_dir": str(root.pci),
            "rdma_dir": str(root.root / "infiniband"),
            "units": ["nvidia-fabricmanager", "nvidia-persistenced"],
        },
    )
    settings = plan.healthcheck_settings(node, NODE, scontrol)
    return healthcheck.Settings(**{**settings.__dict__, "state_file": str(root.root / "state")})


class Node:
    """A fake node with the installed program, its settings, a state file and a stand-in
    scontrol that prints ``show`` (a real capture) and logs every call."""

    def __init__(self, tmp: Path, faults: list[str], show: str, state: dict[str, Any]) -> None:
        hw = NodeHardware.for_node("H100", 8, True, faults, seed="hc", index=1)
        self.root = FakeNodeRoot(tmp, hw)
        (tmp / "show.txt").write_text(show)
        self.calls = tmp / "scontrol.log"
        scontrol = self.root.bin / "scontrol"
        scontrol.write_text(
            f'#!/bin/sh\nprintf "%s\\n" "$*" >> {self.calls}\n'
            f'[ "$1" = show ] && cat {tmp / "show.txt"}\nexit 0\n'
        )
        scontrol.chmod(0o755)
        self.settings = _settings(self.root, hw, str(scontrol))
        self.settings_file = tmp / "healthcheck.json"
        self.settings_file.write_text(plan.render_settings(self.settings))
        self.program = tmp / "gpunode-healthcheck"
        self.program.write_text(plan.healthcheck_program())
        self.program.chmod(0o755)
        self.state_file = Path(self.settings.state_file)
        self.state_file.write_text(nodestate.render(state))

    def run(self, *options: str) -> subprocess.CompletedProcess[str]:
        # As slurmd runs it: root's program with its own interpreter, no site-packages
        # (``options``: as the timer's service runs it).
        return subprocess.run(
            [sys.executable, "-I", "-S", str(self.program), *options, str(self.settings_file)],
            env={"PATH": f"{self.root.bin}:/usr/bin:/bin", "GPUNODE_LAB_ROOT": str(self.root.root)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def scontrol_calls(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    def state(self) -> dict[str, Any]:
        return dict(json.loads(self.state_file.read_text()))


READY = {
    "state": "ready",
    "reason": [],
    "stack_id": "abc",
    "provisioned_at": "2000-01-01T00:00:00+00:00",
}


def test_a_clean_ready_node_stays_ready_and_slurm_is_not_touched(tmp_path: Path) -> None:
    node = Node(tmp_path, [], IDLE, READY)
    done = node.run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "gpunode health check: ready, clean"
    state = node.state()
    assert state["state"] == "ready" and state["check"]["time"]  # the next check's baseline
    assert node.scontrol_calls() == []  # success does nothing: resuming is `gpunode up`'s


def test_an_xid_turns_a_ready_node_not_ready_and_drains_it_with_gpunode_reason(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path, ["xid"], IDLE, READY)
    done = node.run()
    assert done.returncode == 0, done.stderr
    state = node.state()
    assert state["state"] == "not-ready"
    assert [r.split(":")[:2] for r in state["reason"]] == [["check", " health.xid"]]
    show, update = node.scontrol_calls()
    assert show == f"show node {NODE}"
    drain = f"update NodeName={NODE} State=DRAIN Reason=gpunode[hardware]: health.xid: "
    assert update.startswith(drain)
    # The lab's `xid` fault is XID 119 (GSP RPC timeout), named in the reason.
    assert "XID 119 on " in update and len(update.split("Reason=", 1)[1]) <= 200
    assert "slurm: drained" in done.stdout
    # The next interval: the XID was seen, the check is clean, nothing changes or resumes.
    (tmp_path / "scontrol.log").unlink()
    again = node.run()
    assert again.returncode == 0 and again.stdout.startswith("gpunode health check: not-ready")
    assert node.state()["reason"] == state["reason"] and node.scontrol_calls() == []


def test_a_node_drained_by_hand_keeps_its_reason(tmp_path: Path) -> None:
    node = Node(tmp_path, ["xid"], DRAINED_BY_HAND, READY)
    done = node.run()
    assert done.returncode == 0, done.stderr
    assert node.state()["state"] == "not-ready"  # the node's own truth is written all the same
    assert node.scontrol_calls() == ["show node " + NODE]  # no update
    assert "drained by someone else ('maintenance window')" in done.stdout


def test_a_node_not_ready_for_acceptance_is_left_for_acceptance_to_mark(tmp_path: Path) -> None:
    # ECC errors on a node acceptance already failed: its re-acceptance must stay possible.
    failed = {**READY, "state": "not-ready", "reason": ["health.ecc: GPU 3: 2 uncorrectable"]}
    node = Node(tmp_path, ["ecc"], IDLE, failed)
    done = node.run()
    assert done.returncode == 0, done.stderr
    assert node.state()["reason"] == failed["reason"] and node.scontrol_calls() == []


def test_unusable_settings_exit_2_naming_the_file(tmp_path: Path) -> None:
    node = Node(tmp_path, [], IDLE, READY)
    node.settings_file.write_text('{"schema": 1}')
    done = node.run()
    assert done.returncode == 2 and str(node.settings_file) in done.stderr
    assert "malformed settings" in done.stderr


# --- the decision, with real scontrol output -------------------------------------------------


class Scontrol:
    """A command runner answering ``show node`` with a capture, recording every call."""

    def __init__(self, show: str) -> None:
        self.show = show
        self.calls: list[list[str]] = []

    def __call__(self, argv: Any) -> CommandResult:
        self.calls.append(list(argv))
        return CommandResult(0, self.show if argv[1] == "show" else "", "")


def _bare_settings() -> healthcheck.Settings:
    return healthcheck.Settings(NODE, {}, {}, healthcheck.Thresholds(), {}, {})


NOT_READY_BY_CHECK = {"state": "not-ready", "reason": ["check: health.xid: 1 critical XID"]}
OURS = IDLE.replace("State=IDLE ", "State=IDLE+DRAIN ").rstrip() + (
    "\n   Reason=gpunode: health.xid: earlier [root@2026-12-03T09:41:09]\n"
)


@pytest.mark.parametrize(
    ("failures", "state", "show", "action", "updated"),
    [
        (["health.xid: XID 79"], NOT_READY_BY_CHECK, IDLE, "drained", True),
        (["health.xid: XID 79"], NOT_READY_BY_CHECK, OURS, "drained", True),  # reason renewed
        (["health.xid: XID 79"], NOT_READY_BY_CHECK, DRAINED_BY_HAND, "left", False),
        ([], NOT_READY_BY_CHECK, IDLE, None, False),  # clean: nothing, never a resume
        ([], {"state": "ready", "reason": []}, DRAINED_BY_HAND, None, False),
        (["health.ecc: 2"], {"state": "not-ready", "reason": ["health.ecc: 2"]}, IDLE, None, False),
        (["gpu.count: 7 != 8"], {"state": "provisioned", "reason": []}, IDLE, None, False),
    ],
)
def test_mark(
    failures: list[str], state: dict[str, Any], show: str, action: str | None, updated: bool
) -> None:
    runner = Scontrol(show)
    checks = [Check(name, False, message) for name, message in (f.split(": ", 1) for f in failures)]
    done = healthcheck.mark(_bare_settings(), checks, state, runner)
    assert (done.action if done else None) == action
    updates = [c for c in runner.calls if c[1] == "update"]
    assert bool(updates) is updated
    if updated:
        assert updates == [
            [
                "scontrol",
                "update",
                f"NodeName={NODE}",
                "State=DRAIN",
                # The class leads the reason (issue 38): an XID the check fails is hardware.
                f"Reason=gpunode[hardware]: {failures[0]}",
            ]
        ]


# --- what is installed -------------------------------------------------------------------------


def test_the_role_installs_where_the_program_and_slurm_conf_say() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["slurm_healthcheck_program_path"] == healthcheck.PROGRAM_PATH
    assert defaults["slurm_healthcheck_settings_path"] == healthcheck.SETTINGS_PATH


def test_the_settings_file_reads_back_as_written_and_names_the_inventory_s_node() -> None:
    sample = REPO / "inventories/sample"
    inventory = load_inventory(sample)
    host = inventory.hosts_for(None)[0]
    node = plan.plan_node(inventory, host)
    settings = plan.healthcheck_settings(node, "gpu-a-001")
    text = plan.render_settings(settings)
    again = healthcheck.settings_from(json.loads(text))
    assert again == settings
    assert again.expected == node.expected and again.probe == node.probe_spec
    assert set(again.xids) == set(critical_xids()) and 79 in again.xids
    assert again.model_of("NVIDIA H100 80GB HBM3") == catalog.model_of("NVIDIA H100 80GB HBM3")
    assert again.model_of("NVIDIA A100-SXM4-40GB") == "A100"
    assert text == plan.render_settings(plan.healthcheck_settings(node, "gpu-a-001"))


def test_the_program_is_the_same_text_from_the_same_sources_and_standard_library_only() -> None:
    program = plan.healthcheck_program()
    assert program == plan.healthcheck_program() and program.startswith("#!/usr/bin/python3\n")
    files = payload.runner_files(payload.SHIPPED_MODULES + plan.HEALTHCHECK_MODULES)
    carried = {name[:-3].replace("/", ".").removesuffix(".__init__") for name in files}
    for module in plan.HEALTHCHECK_MODULES:
        tree = ast.parse(files[module.replace(".", "/") + ".py"])
        for item in ast.walk(tree):
            if isinstance(item, ast.Import):
                wanted = [alias.name for alias in item.names]
            elif isinstance(item, ast.ImportFrom) and item.level == 0:
                package = str(item.module)
                if package in carried or package.split(".")[0] in sys.stdlib_module_names:
                    continue
                wanted = [f"{package}.{alias.name}" for alias in item.names]  # its modules
            else:
                continue
            for name in wanted:
                ok = name.split(".")[0] in sys.stdlib_module_names or name in carried
                assert ok, f"{module} imports {name}, which the program does not carry"
