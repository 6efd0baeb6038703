"""Verdicts an operator can act on, on the shared lab (issue 38): every failure classed with
NVIDIA's next action, an XID the catalog says to ignore shown and not failed, what was not
measured never shown as passed, the coverage a profile requires, and the RMA evidence pack of
a failed node, verified offline.

One acceptance run with the ``ecc`` fault on one node and ``xid63`` on the other carries most
of the assertions; a second one, with a profile that requires ``train.gpu_util``, shows
coverage. The nodes are left without faults.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_04_accept import _lab_ref

from toolkit import cert
from toolkit.cert.signature import split
from toolkit.inventory import load_inventory
from toolkit.steps.accept.options import AcceptOptions
from toolkit.steps.accept.record import AcceptanceRun
from toolkit.steps.accept.run import run_acceptance

LAB = os.environ.get("GPUNODE_TEST_LAB", "gpunode-test")

pytestmark = pytest.mark.usefixtures("training_image")


@pytest.fixture(scope="module")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The provider's signing key (private key file, .pub beside)."""
    key = tmp_path_factory.mktemp("keys") / "provider"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.fixture(scope="module")
def lab_inventory(
    tmp_path_factory: pytest.TempPathFactory, signing_key: Path
) -> Iterator[tuple[Path, list[str]]]:
    """A copy of the lab's inventory that signs with the provider's key, and its 2 nodes."""
    from toolkit.lab import lab as lab_core

    state = lab_core.require(LAB)
    source = state.inventory_dir or lab_core.default_inventory_dir(LAB)
    target = tmp_path_factory.mktemp("verdicts") / "inventory"
    shutil.copytree(source, target)
    (target / "group_vars" / "all" / "sign.yml").write_text(
        yaml.safe_dump({cert.SIGN_KEY_VAR: str(signing_key)})
    )
    names = [h.name for h in load_inventory(target).hosts_for(None)][:2]
    for node in names:
        lab_core.set_faults(LAB, _lab_ref(state, node), [])
    yield target, names
    for node in names:
        lab_core.set_faults(LAB, _lab_ref(state, node), [])


def _accept(inventory: Path, names: list[str], runs: Path) -> AcceptanceRun:
    return run_acceptance(
        AcceptOptions(inventory=inventory, limit=",".join(names), multi_node=False, runs_dir=runs)
    )


def _node(run: AcceptanceRun, host: str) -> dict[str, Any]:
    return next(n for n in run.summary()["nodes"] if n["host"] == host)


def _check(node: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in node["checks"] if c["name"] == name)


def _records(value: Any) -> Iterator[dict[str, Any]]:
    """Every check record of a certificate (a mapping with a name and an outcome)."""
    if isinstance(value, dict):
        if "name" in value and "outcome" in value:
            yield value
        for item in value.values():
            yield from _records(item)
    elif isinstance(value, list):
        for item in value:
            yield from _records(item)


def _gpunode(*args: str | Path, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GPUNODE_STATE_DIR": str(state)},
        timeout=300,
    )


@pytest.mark.lab
def test_a_classed_failure_an_ignored_xid_and_an_rma_pack(
    lab_inventory: tuple[Path, list[str]], tmp_path: Path, signing_key: Path
) -> None:
    from toolkit.lab import lab as lab_core

    inventory, names = lab_inventory
    ignored, broken = names
    state = lab_core.require(LAB)
    lab_core.set_faults(LAB, _lab_ref(state, ignored), ["xid63"])
    lab_core.set_faults(LAB, _lab_ref(state, broken), ["ecc"])
    try:
        run = _accept(inventory, names, tmp_path / "state" / "runs")
    finally:
        lab_core.set_faults(LAB, _lab_ref(state, ignored), [])
        lab_core.set_faults(LAB, _lab_ref(state, broken), [])

    # The ecc node: not ready, classed hardware, with NVIDIA's recommended action.
    bad = _node(run, broken)
    assert bad["verdict"] == "not-ready"
    [ecc] = [f for f in bad["failed_checks"] if f["check"] == "health.ecc"]
    assert ecc["failure_class"] == "hardware", ecc
    assert ecc["action"] and "reset" in ecc["action"].lower(), ecc
    assert ecc["action_source"], ecc
    assert run.summary()["nodes"] and bad["outcomes"]["failed"] >= 1

    # The XID 63 node: the catalog says to ignore it, so it is shown, and the node is ready.
    good = _node(run, ignored)
    assert good["verdict"] == "ready", good["failed_checks"]
    xid = _check(good, "health.xid")
    assert xid["ok"] and "63" in xid["message"], xid

    # The host-to-container contract held: the ranks saw the node's RDMA devices, and the run
    # record keeps what they saw beside what the host has.
    fabric = _check(good, "container.fabric")
    assert fabric["outcome"] == "passed" and "uverbs0" in fabric["message"], fabric
    record = json.loads((run.run_dir / "nodes" / f"{ignored}.result.json").read_text())
    host_files = [f["path"] for f in record["fabric"]["host"]["rdma_files"]]
    assert "/dev/infiniband/uverbs0" in host_files and "/dev/infiniband/rdma_cm" in host_files
    assert [f["path"] for f in record["fabric"]["container"]["rdma_files"]] == host_files

    # What the lab cannot measure is not measured in every output, never passed.
    gpu_util = _check(good, "train.gpu_util")
    assert gpu_util["outcome"] == "not_measured" and gpu_util["reason"], gpu_util
    assert "train.gpu_util" in {c["check"] for c in good["not_measured_checks"]}
    junit = (run.run_dir / "junit.xml").read_text()
    case = junit.split('name="train.gpu_util"', 1)[1].split("</testcase>", 1)[0]
    assert "<skipped" in case, case
    # A certificate is its JSON document with the provider's SSH signature after it.
    document, _signature = split(Path(good["certificate"]).read_bytes())
    records = list(_records(json.loads(document)))
    assert [r["outcome"] for r in records if r.get("name") == "train.gpu_util"] == [
        "not_measured"
    ], records

    # The RMA evidence pack of the ecc node, written offline from the run and verified.
    home = tmp_path / "state"
    made = _gpunode("node", "evidence", broken, "-i", inventory, "--json", state=home)
    assert made.returncode == 0, made.stderr
    pack = Path(json.loads(made.stdout)["path"])
    assert pack.is_file()
    with tarfile.open(pack) as archive:
        members = {Path(m.name).name: m for m in archive.getmembers()}
        assert {"failure.json", "nvidia-smi-q.txt", "xid.json", "memory.json"} <= set(members)
        assert {"MANIFEST.json", "SHA256SUMS"} <= set(members)
        failure = archive.extractfile(members["failure.json"])
        assert failure is not None and b"health.ecc" in failure.read()
        private = signing_key.read_bytes()
        body = [line for line in private.splitlines() if line and not line.startswith(b"---")]
        for member in archive.getmembers():
            data = archive.extractfile(member)
            content = data.read() if data else b""
            assert b"PRIVATE KEY" not in content, member.name
            assert not any(line in content for line in body), member.name
    public = Path(f"{signing_key}.pub")
    verified = _gpunode("node", "evidence", "--verify", pack, "--key", public, state=home)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    changed = tmp_path / "changed.tar.gz"
    data = bytearray(pack.read_bytes())
    data[len(data) // 2] ^= 0xFF
    changed.write_bytes(bytes(data))
    refused = _gpunode("node", "evidence", "--verify", changed, "--key", public, state=home)
    assert refused.returncode != 0, refused.stdout


def _require(inventory: Path, checks: list[str]) -> None:
    """Make every hardware profile of the copied lab inventory require these checks."""
    for path in inventory.rglob("hardware.yml"):
        data = yaml.safe_load(path.read_text())
        acceptance = data["hardware"].setdefault("acceptance", {})
        acceptance["require_measured"] = [*acceptance.get("require_measured", []), *checks]
        path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.mark.lab
def test_a_profile_that_requires_what_was_not_measured_is_not_ready_for_coverage(
    lab_inventory: tuple[Path, list[str]], tmp_path: Path
) -> None:
    inventory, names = lab_inventory
    copy = tmp_path / "inventory"
    shutil.copytree(inventory, copy)
    _require(copy, ["train.gpu_util"])
    run = _accept(copy, names[:1], tmp_path / "runs")
    node = _node(run, names[0])
    assert node["verdict"] == "not-ready"
    [coverage] = [f for f in node["failed_checks"] if f["check"] == "coverage"]
    assert "train.gpu_util" in coverage["message"], coverage
    assert coverage["failure_class"] == "harness", coverage
    # Nothing else failed: the node is healthy, only its proof falls short.
    assert {f["check"] for f in node["failed_checks"]} == {"coverage"}, node["failed_checks"]
    assert node["certificate"] is None


@pytest.mark.lab
def test_a_container_without_the_rdma_devices_is_a_harness_problem_not_the_node(
    lab_inventory: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """The `no-rdma-passthrough` fault: the node's runtime drops the RDMA devices it was
    asked to pass; the ranks' check catches it before the all-reduce, names what is missing,
    and the node's failure is the harness's."""
    from toolkit.lab import lab as lab_core

    inventory, names = lab_inventory
    state = lab_core.require(LAB)
    lab_core.set_faults(LAB, _lab_ref(state, names[0]), ["no-rdma-passthrough"])
    try:
        run = _accept(inventory, names[:1], tmp_path / "runs")
    finally:
        lab_core.set_faults(LAB, _lab_ref(state, names[0]), [])
    node = _node(run, names[0])
    assert node["verdict"] == "not-ready" and node["failure_class"] == "harness", node
    assert {f["failure_class"] for f in node["failed_checks"]} == {"harness"}, node
    [fabric] = [f for f in node["failed_checks"] if f["check"] == "container.fabric"]
    assert "/dev/infiniband/uverbs0 (231:192" in fabric["message"], fabric
    assert "/dev/infiniband/rdma_cm (10:58" in fabric["message"], fabric
    record = json.loads((run.run_dir / "nodes" / f"{names[0]}.result.json").read_text())
    assert (
        record["fabric"]["host"]["rdma_files"] and not record["fabric"]["container"]["rdma_files"]
    )
