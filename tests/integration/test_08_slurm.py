"""Acceptance through the lab's real Slurm cluster (``gpunode lab up --slurm``).

A lab of its own (``$GPUNODE_TEST_LAB-slurm``): 3 bare nodes with one data disk each, node 2
with uncorrectable ECC errors, slurmctld, slurmdbd and MariaDB on node 1 and slurmd + MUNGE on
all three, from Debian's packages. Through the real CLI, real SSH, real Ansible and real
Slurm, in order:

0. the cluster is up: every node in the partition with its emulated GPUs as GRES over the
   device files the lab made (``/dev/nvidia<i>`` 195:<i>), the license, the cluster registered
   in slurmdbd, whose configuration (with the database password) only the Slurm user reads;

1. ``gpunode up --executor slurm`` provisions the nodes and accepts them as Slurm jobs that
   ask for every GPU of the profile (``--gres=gpu:8``): nodes 1 and 3 ready, node 2 not ready
   because of its ECC errors;
2. ``gpunode accept --executor ssh`` on nodes 1 and 2 gives the same verdicts, with the same
   checks and reasons;
3. node 3 is drained in Slurm, then ``gpunode accept`` (the executor from the inventory, which
   the lab wrote) runs while the test watches ``squeue``: every acceptance job sits at
   priority 1 with the maximum nice, the lowest a job can have; node 3 comes out not-tested
   with Slurm's drain reason, never failed, and keeps its state file and its drain; once
   they are done, ``sacct`` (slurmdbd's records) has both jobs completed on their nodes at
   priority 1, submitted with the maximum nice, given every GPU of the node (``AllocTRES``
   with ``gres/gpu=8``), and none for node 3;
4. a job that cannot start (somebody's job holds node 3 whole) is cancelled after the
   inventory's start timeout and the node comes out not-tested with Slurm's pending reason;
5. gpunode's health check, which provision installed and the lab's slurm.conf runs every
   interval: nodes 1 and 3 (ready) log a critical XID (the ``xid`` fault), node 3 drained by
   hand first; within one interval slurmd's health check drains node 1 with gpunode's reason
   naming the XID and turns both not ready, keeping node 3's own reason; with the faults
   cleared, ``gpunode up --accept-only --hook slurm`` (the scheduled re-validation's command)
   re-accepts node 1 (over SSH: Slurm starts no job on a drained node) and resumes it, and
   leaves node 3 drained, reported not tested with its reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance.executors.slurm import MAX_NICE
from toolkit.acceptance.hooks import parse_scontrol_node
from toolkit.acceptance.verdict import NOT_TESTED_CHECK
from toolkit.lab import lab as lab_core
from toolkit.lab import nodes as lab_nodes
from toolkit.lab import paths as lab_paths
from toolkit.lab import slurm as lab_slurm
from toolkit.lab.spec import build_spec

pytestmark = pytest.mark.lab

LAB = os.environ.get("GPUNODE_TEST_LAB", "gpunode-test") + "-slurm"
RUNS: dict[str, dict[str, Any]] = {}
TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def slurm_lab(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A fresh 3-node Slurm lab (the shared ``lab`` fixture only makes sure Docker is there)."""
    if lab_core.lab_state.load(LAB) is not None:
        lab_core.down(LAB)
    started = time.monotonic()
    spec = build_spec(
        name=LAB,
        nodes=3,
        disks=1,
        disk_size=2 * 1024**3,
        faults=((2, "ecc"),),
        ca_bundle=lab_nodes.host_ca_bundle(),
        slurm=True,
    )
    inventory = tmp_path_factory.mktemp("slurm") / "inventory"
    state = lab_core.up(spec, inventory_dir=inventory)
    TIMES["lab up --slurm"] = time.monotonic() - started
    names = [n.name for n in sorted(state.nodes, key=lambda n: n.index)]
    try:
        yield {
            "inventory": inventory,
            "names": names,
            "gpus": spec.gpus,
            "state_dir": tmp_path_factory.mktemp("slurm-state"),
        }
    finally:
        print("\ntest_08 wall times: " + ", ".join(f"{k} {v:.0f}s" for k, v in TIMES.items()))
        if os.environ.get("GPUNODE_TEST_KEEP_LAB") != "1":
            lab_core.down(LAB)


def gpunode(ctx: dict[str, Any], *args: str) -> subprocess.Popen[str]:
    """The real CLI, started (``finish`` waits for it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "toolkit", *args],
        cwd=REPO,
        # PYTHONFAULTHANDLER: a SIGABRT (``finish`` on a timeout) prints every thread's stack.
        env={
            **os.environ,
            "GPUNODE_STATE_DIR": str(ctx["state_dir"]),
            "COLUMNS": "200",
            "PYTHONFAULTHANDLER": "1",
        },
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str], what: str, timeout: float = 600) -> tuple[int, str, str]:
    """Wait for the CLI (the longest step, provision and acceptance of 3 nodes, takes about
    150 s); one that hangs fails with where each of its threads stood and the nodes' processes.
    """
    started = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        out, err = proc.communicate(timeout=60)
        nodes = "\n".join(
            lab_core.ssh_run(LAB, index, "ps -eo pid,ppid,etimes,args --forest").stdout
            for index in (1, 2, 3)
        )
        pytest.fail(f"{what}: no answer in {timeout:.0f}s\n{err[-12000:]}\n{nodes[-6000:]}")
    TIMES[what] = time.monotonic() - started
    return proc.returncode, out, err


def head(command: str) -> str:
    """A command on the head node (slurmctld), as root over SSH."""
    return lab_core.ssh_run(LAB, 1, command).stdout


def by_host(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["host"]: n for n in document["nodes"]}


def failed(node: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["check"], f["message"]) for f in node["failed_checks"]]


def node_state(index: int) -> dict[str, Any]:
    return dict(json.loads(lab_core.ssh_run(LAB, index, "cat /etc/gpunode/state.json").stdout))


def standing(index: int) -> dict[str, Any]:
    """The node's state file less the health check's baseline, which slurmd's health check
    renews every interval (``check``: its time, counters and XIDs seen)."""
    return {k: v for k, v in node_state(index).items() if k != "check"}


def sacct(since: str, jobids: list[str], timeout: float = 30) -> dict[str, dict[str, str]]:
    """``sacct``'s record of every job (its allocation, not its steps) that ran since
    ``since`` (the head node's clock), once slurmdbd has ``jobids`` finished (slurmctld sends
    the records as the jobs end)."""
    fields = (
        "JobID", "JobName", "Partition", "Priority", "State", "NodeList", "AllocTRES",
        "SubmitLine",
    )  # fmt: skip
    command = (
        f"sacct --allusers --allocations --noheader --parsable2 --starttime={since} "
        f"--format={','.join(fields)}"
    )
    deadline = time.monotonic() + timeout
    while True:
        rows = [line.split("|", len(fields) - 1) for line in head(command).splitlines() if line]
        records = {row[0]: dict(zip(fields[1:], row[1:], strict=True)) for row in rows}
        done = all(
            records.get(j, {}).get("State") not in (None, "PENDING", "RUNNING") for j in jobids
        )
        if done or time.monotonic() > deadline:
            break
        time.sleep(1)
    for record in records.values():
        nice = [arg for arg in record.pop("SubmitLine").split() if arg.startswith("--nice=")]
        record["Nice"] = nice[0].removeprefix("--nice=") if nice else ""
    return records


def test_lab_runs_slurm_with_every_node(slurm_lab: dict[str, Any]) -> None:
    names = slurm_lab["names"]
    rows = head("sinfo --noheader --Node --format='%N %P %T %c'").split("\n")
    assert sorted(r.split()[0] for r in rows if r) == sorted(names)
    assert all(r.split()[1] == f"{lab_slurm.PARTITION}*" for r in rows if r)
    assert f"{lab_slurm.LICENSE}" in head("scontrol show licenses")
    # The emulated GPUs are GRES over the device files the driver would make (195:<minor>;
    # stat prints the numbers in hex: c3 is 195).
    gpus = slurm_lab["gpus"]
    assert head("sinfo --noheader --Node --format=%G").split() == [f"gpu:{gpus}"] * len(names)
    devices = head("stat -c '%n %t:%T' /dev/nvidia[0-9]* /dev/nvidiactl").split("\n")
    assert sorted(filter(None, devices)) == sorted(
        [f"/dev/nvidia{i} c3:{i:x}" for i in range(gpus)] + ["/dev/nvidiactl c3:ff"]
    )
    slurm_yml = (slurm_lab["inventory"] / "group_vars" / "all" / "slurm.yml").read_text()
    assert "gpunode_accept_executor: slurm" in slurm_yml
    # Accounting: slurmctld reports to slurmdbd, which has the cluster registered.
    assert "accounting_storage/slurmdbd" in head(
        "scontrol show config | grep AccountingStorageType"
    )
    clusters = head("sacctmgr --noheader --parsable2 list cluster format=Cluster").split()
    assert clusters == [lab_slurm.cluster_name(LAB)]
    # The database password: readable by the Slurm user only, and in nothing the lab wrote on
    # the control machine (its state, keys and inventory).
    assert head(f"stat -c '%a %U' {lab_slurm.DBD_CONF_PATH}").strip() == "600 slurm"
    password = head(f"sed -n 's/^StoragePass=//p' {lab_slurm.DBD_CONF_PATH}").strip()
    assert len(password) >= 32
    assert head(f"test -e {lab_slurm.GRANT_PATH} || echo gone").strip() == "gone"
    written = [
        path
        for top in (lab_paths.lab_dir(LAB), slurm_lab["inventory"])
        for path in Path(top).rglob("*")
        if path.is_file() and path.stat().st_size < 2**20  # not the nodes' disk images
    ]
    assert len(written) > 5 and not [p for p in written if password.encode() in p.read_bytes()]


def test_up_accepts_through_slurm(slurm_lab: dict[str, Any]) -> None:
    names = slurm_lab["names"]
    proc = gpunode(
        slurm_lab, "up", "-i", str(slurm_lab["inventory"]), "--yes", "--executor", "slurm",
        "--engine", "host", "--json",
    )  # fmt: skip
    code, out, err = finish(proc, "up --executor slurm (provision + accept)")
    assert code == 1, err[-3000:]  # node 2 is not ready
    outcome = json.loads(out)
    run_dir = Path(outcome["report"]).parent
    run = json.loads((run_dir / "run.json").read_text())
    nodes = by_host(run)
    reasons = {n: failed(nodes[n]) for n in names}
    assert [nodes[n]["verdict"] for n in names] == ["ready", "not-ready", "ready"], (
        reasons,
        err[-3000:],
    )
    assert any(check.startswith("health.ecc") for check, _ in failed(nodes[names[1]]))
    for name in names:
        job = nodes[name]["job"]
        assert job["executor"] == "slurm" and job["nodelist"] == name
        assert job["jobstate"] == "COMPLETED" and job["priority"] == 1
        assert f"gres/gpu={slurm_lab['gpus']}" in job["tres"].split(","), job
    RUNS["slurm"] = run


def test_ssh_executor_gives_the_same_verdicts(slurm_lab: dict[str, Any]) -> None:
    assert "slurm" in RUNS, "needs the run through Slurm first"
    # Nodes 1 and 2: two at once, as the Slurm run's license let them run (the lab profile's
    # storage floors are measured for two nodes' checks at once on this machine's cores).
    names = slurm_lab["names"][:2]
    proc = gpunode(
        slurm_lab, "accept", "-i", str(slurm_lab["inventory"]), "--executor", "ssh",
        "--limit", ",".join(names), "--engine", "host", "--json",
    )  # fmt: skip
    code, out, err = finish(proc, "accept --executor ssh (nodes 1, 2)")
    assert code == 1, err[-3000:]
    ssh, slurm = by_host(json.loads(out)), by_host(RUNS["slurm"])
    for name in names:
        assert ssh[name]["verdict"] == slurm[name]["verdict"]
        assert ssh[name]["job"] is None
        assert [c["name"] for c in ssh[name]["checks"]] == [
            c["name"] for c in slurm[name]["checks"]
        ]
        # The same reasons; measured figures (timings) differ from run to run.
        assert [c for c, _ in failed(ssh[name])] == [c for c, _ in failed(slurm[name])]
    ecc = [m for c, m in failed(ssh[slurm_lab["names"][1]]) if c.startswith("health.ecc")]
    assert ecc == [m for c, m in failed(slurm[slurm_lab["names"][1]]) if c.startswith("health.ecc")]


def test_a_drained_node_is_not_tested_and_jobs_run_at_the_lowest_priority(
    slurm_lab: dict[str, Any],
) -> None:
    names = slurm_lab["names"]
    state_before = standing(3)
    since = head("date +%Y-%m-%dT%H:%M:%S").strip()
    head(f"scontrol update NodeName={names[2]} State=DRAIN Reason='site maintenance'")
    seen: dict[str, str] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            out = lab_core.ssh_run(
                LAB, 1, "squeue --noheader --format='%i|%j|%N|%Q|%y|%T|%r'", check=False
            ).stdout
            for line in out.splitlines():
                if "gpunode-accept-" in line:
                    seen[line.split("|")[0]] = line
            time.sleep(1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        proc = gpunode(
            slurm_lab, "accept", "-i", str(slurm_lab["inventory"]), "--engine", "host", "--json"
        )
        code, out, err = finish(proc, "accept (inventory's executor: slurm), node 3 drained")
    finally:
        stop.set()
        watcher.join()
    assert code == 1, err[-3000:]
    nodes = by_host(json.loads(out))
    assert [nodes[n]["verdict"] for n in names] == ["ready", "not-ready", "not-tested"]
    drained = nodes[names[2]]
    # Not tested is transient (issue 38's classes): re-accept once the scheduler can run it.
    assert drained["failed_checks"] == [
        {
            "check": NOT_TESTED_CHECK,
            "message": "Slurm node state IDLE+DRAIN (Reason=site maintenance) before the run: "
            "not submitted",
            "measured": None,
            "floor": None,
            "failure_class": "transient",
            "action": "re-accept when the scheduler can run the node's job",
            "action_source": (
                "toolkit/acceptance/executors: a node the executor could not test has no verdict"
            ),
        }
    ]
    assert drained["job"] is None and drained["not_tested"]
    # Not failed: its state file is the one the earlier run wrote, its drain is untouched.
    assert standing(3) == state_before
    assert "Reason=site maintenance" in head(f"scontrol show node {names[2]}")
    # squeue saw the two jobs, at the lowest priority and the highest nice.
    rows = [line.split("|") for line in seen.values()]
    assert sorted(r[1] for r in rows) == [
        f"gpunode-accept-{names[0]}",
        f"gpunode-accept-{names[1]}",
    ]
    assert all(r[3] == "1" and r[4] == str(MAX_NICE) for r in rows), rows
    # sacct (slurmdbd's records) after the jobs: the two jobs completed on their nodes, at
    # priority 1, submitted with the maximum nice (sacct has no Nice field: the submit line
    # says it), accounted with every GPU of the node, and none for the drained node.
    jobs = {nodes[n]["job"]["jobid"]: n for n in names[:2]}
    records = sacct(since, list(jobs))
    gpus = f"gres/gpu={slurm_lab['gpus']}"
    assert all(gpus in r.pop("AllocTRES").split(",") for r in records.values()), records
    assert records == {
        jobid: {
            "JobName": f"gpunode-accept-{name}",
            "Partition": lab_slurm.PARTITION,
            "Priority": "1",
            "State": "COMPLETED",
            "NodeList": name,
            "Nice": str(MAX_NICE),
        }
        for jobid, name in jobs.items()
    }


def test_a_job_that_never_starts_is_not_tested_and_cancelled(slurm_lab: dict[str, Any]) -> None:
    names = slurm_lab["names"]
    head(f"scontrol update NodeName={names[2]} State=RESUME")
    # Somebody's job holds node 3 whole: the acceptance job waits behind it ("partition full").
    head(f"sbatch --job-name=user-job --nodelist={names[2]} --exclusive --wrap='sleep 600'")
    inventory = slurm_lab["inventory"]
    (inventory / "group_vars" / "all" / "start.yml").write_text(
        "gpunode_slurm_start_timeout_s: 15\n"
    )
    try:
        proc = gpunode(
            slurm_lab, "accept", "-i", str(inventory), "--limit", names[2], "--engine", "host",
            "--json",
        )  # fmt: skip
        code, out, err = finish(proc, "accept, node 3 busy (15 s start timeout)")
    finally:
        head("scancel --name=user-job")
    assert code == 1, err[-3000:]
    node = by_host(json.loads(out))[names[2]]
    assert node["verdict"] == "not-tested"
    assert node["not_tested"].startswith(
        f"Slurm job {node['job']['jobid']} did not start within 15s"
    )
    assert "Reason=Resources" in node["not_tested"] and node["not_tested"].endswith("cancelled")
    assert "gpunode-accept" not in head("squeue --noheader --format=%j")


def test_the_health_check_drains_a_faulty_node_and_up_resumes_it_once_clean(
    slurm_lab: dict[str, Any],
) -> None:
    names = slurm_lab["names"]
    first, third = names[0], names[2]
    assert node_state(1)["state"] == node_state(3)["state"] == "ready"
    assert "gpunode-healthcheck" in lab_core.ssh_run(LAB, 1, "ls /usr/local/sbin").stdout
    head(f"scontrol update NodeName={third} State=DRAIN Reason='hand: disk swap'")
    started = time.monotonic()
    lab_core.set_faults(LAB, 1, ["xid"])
    lab_core.set_faults(LAB, 3, ["xid"])
    try:
        # Within one interval (slurmd runs every node's check at once), plus the check's run.
        deadline = started + lab_slurm.HEALTHCHECK_INTERVAL_S + 15
        while "Reason=gpunode" not in (shown := head(f"scontrol show node {first}")):
            assert time.monotonic() < deadline, shown
            time.sleep(1)
        TIMES["health check drained node 1 after the fault"] = time.monotonic() - started
        assert "State=IDLE+DRAIN " in shown and "Reason=gpunode[hardware]: health.xid: " in shown
        assert "XID 119 on " in shown, shown
        while node_state(3)["state"] != "not-ready":  # the same round of checks
            assert time.monotonic() < deadline + 5, node_state(3)
            time.sleep(1)
        for index in (1, 3):
            state = node_state(index)
            assert state["state"] == "not-ready" and state["reason"][0].startswith(
                "check: health.xid: "
            ), state
        assert "Reason=hand: disk swap " in head(f"scontrol show node {third}")
        lab_core.set_faults(LAB, 1, [])
        lab_core.set_faults(LAB, 3, [])
        # The scheduled re-validation's command (gpunode schedule): --accept-only.
        proc = gpunode(
            slurm_lab, "up", "-i", str(slurm_lab["inventory"]), "--accept-only", "--limit",
            f"{first},{third}", "--engine", "host", "--hook", "slurm", "--json",
        )  # fmt: skip
        code, out, err = finish(proc, "up --accept-only --hook slurm (re-accept node 1)")
        assert code == 1, err[-3000:]  # node 3 stays not ready
        nodes = json.loads(out)["nodes"]
        accepted = nodes[first]["stages"]["accept"]
        assert nodes[first]["ready"] and nodes[first]["state"] == "ready", nodes[first]
        assert accepted["status"] == "done" and "; slurm: resumed (" in accepted["detail"]
        assert node_state(1)["state"] == "ready"
        resumed = parse_scontrol_node(head(f"scontrol show node {first}"))
        assert not resumed.drained and resumed.reason is None, resumed  # resumed, no reason
        # Drained by hand: never resumed, reported with its reason, its state kept.
        left = nodes[third]["stages"]["accept"]
        assert left["status"] == "skipped" and left["detail"] == (
            "not tested: Slurm node state IDLE+DRAIN (Reason=hand: disk swap) before the run: "
            "not submitted"
        ), left
        assert node_state(3)["state"] == "not-ready"
        assert "Reason=hand: disk swap " in head(f"scontrol show node {third}")
    finally:
        lab_core.set_faults(LAB, 1, [])
        lab_core.set_faults(LAB, 3, [])
        head(f"scontrol update NodeName={third} State=RESUME")
    TIMES["health check test"] = time.monotonic() - started
