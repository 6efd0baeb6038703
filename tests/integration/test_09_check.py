"""``gpunode check`` on the shared lab's two nodes, made ready first by ``gpunode up``.

Through the real CLI (``python -m toolkit``), real SSH (the lab's sudo login) and the lab's GPU
emulation. In order:

1. both nodes ready and clean: ``check`` passes on both and records its first AER reading in
   each node's state; its wall time for the two is printed (``-s`` shows it), never asserted:
   on a busy machine a timed assertion fails the machine, not the check;
2. node 1 logs a critical XID (the `xid` fault) and one of its NICs' links flaps and settles
   (`link-flap`), and node 2's PCIe AER counters move (the `aer` fault): ``check`` turns both
   not ready with `health.xid`, `nic.link_downed` (naming the port and +3) and `pcie.aer` as
   reasons, written through the node state, and records the run;
3. with the faults cleared a check is clean again, yet the nodes stay not ready: only
   acceptance makes a node ready;
4. node 1's GPU board is replaced (the `swapped-gpu` fault): ``gpunode node history`` flags
   the swap, naming the slot and both serials, beside the acceptance run ``up`` recorded;
5. node 2 remaps one more row at each restart (the `remap-rising` fault): after three boots,
   each checked, ``gpunode node history`` flags its rising remaps;
6. node 1's GPU fails (`ecc`), is replaced (`swapped-gpu`, and the lab restarts the node)
   and comes back in another slot (`returned-gpu`), each state checked: ``gpunode node
   history`` flags the swap after the restart and names the returned serial with
   `failed-part-returned`, in JSON and in text.

The fixture's acceptance signs a certificate per node: it carries the node's passport.
The nodes are left not ready; no module after this one needs them ready.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit import cert
from toolkit.check import healthcheck
from toolkit.lab import lab as lab_core
from toolkit.report import prometheus

pytestmark = pytest.mark.lab

LAB = os.environ.get("GPUNODE_TEST_LAB", "gpunode-test")


def gpunode(ctx: dict[str, Any], *args: str, timeout: float = 2400) -> tuple[Any, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        cwd=REPO,
        env={**os.environ, "GPUNODE_STATE_DIR": str(ctx["state_dir"]), "COLUMNS": "200"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return proc, time.perf_counter() - started


def node_state(node: str) -> dict[str, Any]:
    out = lab_core.ssh_run(LAB, node, "cat /etc/gpunode/state.json 2>/dev/null || echo '{}'")
    return dict(json.loads(out.stdout))


@pytest.fixture(scope="module")
def ready(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The shared lab's nodes, fault-free and ready (``gpunode up`` does what is missing)."""
    state = lab_core.require(LAB)
    names = [n.name for n in sorted(state.nodes, key=lambda n: n.index)][:2]
    inventory = tmp_path_factory.mktemp("check") / "inventory"
    shutil.copytree(state.inventory_dir or lab_core.default_inventory_dir(LAB), inventory)
    for name in names:
        lab_core.set_faults(LAB, name, [])
    ctx = {"inventory": inventory, "names": names, "state_dir": tmp_path_factory.mktemp("st")}
    proc, took = gpunode(ctx, "up", "-i", str(inventory), "--yes")
    print(f"\ngpunode up (to make both nodes ready): {took:.0f}s")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [node_state(n)["state"] for n in names] == ["ready", "ready"]
    # `up` skips acceptance on nodes an earlier module left ready: one acceptance run of both
    # nodes in this state folder, so each passport has its figures whatever ran before.
    key = tmp_path_factory.mktemp("key") / "provider"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    args = ("accept", "-i", str(inventory), "--limit", ",".join(names), "--sign-key", str(key))
    proc, took = gpunode(ctx, *args)
    print(f"gpunode accept (the passports' figures): {took:.0f}s")
    assert proc.returncode == 0, proc.stderr[-4000:] + proc.stdout[-2000:]
    try:
        yield ctx
    finally:
        for name in names:
            lab_core.set_faults(LAB, name, [])


def check(ctx: dict[str, Any]) -> tuple[Any, dict[str, Any], float]:
    proc, took = gpunode(ctx, "check", "-i", str(ctx["inventory"]), "--json", timeout=120)
    return proc, json.loads(proc.stdout), took


def test_clean_check_passes_on_two_ready_nodes(ready: dict[str, Any]) -> None:
    proc, doc, took = check(ready)
    print(f"\ngpunode check, 2 ready lab nodes: {took:.2f}s wall (CLI), {doc['wall_s']:.2f}s core")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for name in ready["names"]:
        node = doc["nodes"][name]
        assert node["ok"] and node["state"] == "ready" and not node["turned_not_ready"]
        names = {c["name"] for c in node["checks"]}
        for expected in (
            "gpu.count",
            "versions.installed",
            "versions.driver_loaded",
            "health.ecc",
            "health.row_remap",
            "health.xid",
            "health.throttle",
            "pcie.aer",
            "nic.link",
            "services.active",
        ):
            assert expected in names, (expected, names)
        services = next(c for c in node["checks"] if c["name"] == "services.active")
        assert "nvidia-persistenced" in services["message"]
        assert "nvidia-fabricmanager" in services["message"]
        state = node_state(name)
        assert state["state"] == "ready"
        assert state["check"]["time"] and state["check"]["aer"], state.get("check")
        # The passport's share of a check: each GPU's serial and UUID.
        assert all(g["serial"] and g["uuid"] for g in node["facts"]["gpus"])
    assert (ready["state_dir"] / "runs" / doc["run_id"] / "check.json").is_file()


def test_provision_installs_the_timer_that_checks_without_slurm_and_removes_it_when_off(
    ready: dict[str, Any],
) -> None:
    """The inventory's switch turned on: ``gpunode provision`` (its Ansible role
    ``slurm_healthcheck``, the timer's one installer) installs, enables and starts the timer on
    node 1, whose service, started by the node's systemd (PID 1 in a lab node), writes the node
    state and the textfile. Turned off: the next provision stops, disables and removes the
    units and the textfile. The program and its settings go too afterwards: later tests count
    on no check but theirs."""
    name = ready["names"][0]
    switch = ready["inventory"] / "host_vars" / name / "check_timer.yml"
    units = [f"/etc/systemd/system/gpunode-healthcheck.{kind}" for kind in ("service", "timer")]
    textfile = prometheus.CHECK_TEXTFILE_PATH
    before = (node_state(name).get("check") or {}).get("time") or ""
    args = ("provision", "-i", str(ready["inventory"]), "--limit", name, "--json")
    args += ("--tags", "slurm_healthcheck")
    try:
        switch.write_text("gpunode_check_timer: true\ngpunode_check_timer_interval: 1h\n")
        on, took_on = gpunode(ready, *args, timeout=300)
        assert on.returncode == 0, on.stderr[-3000:] + on.stdout[-2000:]
        done = lab_core.ssh_run(
            LAB,
            name,
            f"systemd-analyze verify {' '.join(units)} && "
            "systemctl start gpunode-healthcheck.service && "  # a oneshot: returns when it ran
            f"systemctl is-enabled gpunode-healthcheck.timer && cat {textfile}",
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-1000:]
        assert done.stdout.startswith("enabled\n"), done.stdout  # is-enabled: the timer
        text = done.stdout.removeprefix("enabled\n")
        assert 'gpunode_check_node_ready{state="ready"} 1\n' in text, text
        assert "gpunode_check_failures 0\n" in text and "gpunode_check_failed{" in text, text
        assert 'gpunode_check_failed{check="health.xid"} 0\n' in text, text
        state = node_state(name)
        assert state["state"] == "ready" and state["check"]["time"] > before, state
        active = lab_core.ssh_run(LAB, name, "systemctl is-active gpunode-healthcheck.timer")
        assert active.stdout == "active\n", active.stdout

        switch.write_text("gpunode_check_timer: false\n")
        off, took_off = gpunode(ready, *args, timeout=300)
        assert off.returncode == 0, off.stderr[-3000:] + off.stdout[-2000:]
        print(f"\nprovision, timer on: {took_on:.1f}s; timer off: {took_off:.1f}s")
        left = " ".join(f"test -e {path} && echo left {path};" for path in (*units, textfile))
        gone = lab_core.ssh_run(
            LAB,
            name,
            f"{left} echo links $(ls /etc/systemd/system/timers.target.wants | "
            "grep -c gpunode-healthcheck); systemctl is-active gpunode-healthcheck.timer",
            check=False,
        ).stdout
        # No unit or textfile left, no link in timers.target.wants (disabled), stopped.
        assert gone == "links 0\ninactive\n", gone
    finally:
        switch.unlink(missing_ok=True)
        lab_core.ssh_run(
            LAB,
            name,
            "systemctl disable --now gpunode-healthcheck.timer 2>/dev/null; "
            f"rm -f {' '.join(units)} {healthcheck.PROGRAM_PATH} {healthcheck.SETTINGS_PATH} "
            f"{textfile}; systemctl daemon-reload",
            check=False,
        )


def test_faults_turn_ready_nodes_not_ready_and_a_clean_check_does_not_undo_it(
    ready: dict[str, Any],
) -> None:
    xid_node, aer_node = ready["names"]
    check(ready)  # the baseline the faults move from
    lab_core.set_faults(LAB, xid_node, ["xid", "link-flap"])
    lab_core.set_faults(LAB, aer_node, ["aer"])
    proc, doc, took = check(ready)
    print(f"\ngpunode check with faults on both nodes: {took:.2f}s wall")
    assert proc.returncode == 1, proc.stderr[-2000:]
    for name, failed in (
        (xid_node, ["health.xid", "nic.link_downed"]),
        (aer_node, ["pcie.aer"]),
    ):
        node = doc["nodes"][name]
        assert node["turned_not_ready"] and node["state"] == "not-ready", node
        bad = {c["name"]: c["message"] for c in node["checks"] if not c["ok"]}
        assert sorted(bad) == sorted(failed), bad
        state = node_state(name)
        assert state["state"] == "not-ready"
        assert sorted(state["reason"]) == sorted(f"check: {f}: {bad[f]}" for f in failed)
    assert "XID 119" in doc["nodes"][xid_node]["reason"][0]
    assert "nonfatal +2" in doc["nodes"][aer_node]["reason"][0]
    # The flapped link is up again (nic.link passes); its counter names the port and the delta.
    [flap] = [
        r for r in doc["nodes"][xid_node]["reason"] if r.startswith("check: nic.link_downed: ")
    ]
    assert re.search(r"mlx5_\d+/1: link down \+3 since the last check", flap), flap
    assert next(c for c in doc["nodes"][xid_node]["checks"] if c["name"] == "nic.link")["ok"]
    for name in ready["names"]:
        lab_core.set_faults(LAB, name, [])
    proc, doc, _took = check(ready)
    failed = {n: [c for c in d["checks"] if not c["ok"]] for n, d in doc["nodes"].items()}
    assert proc.returncode == 0, failed
    for name in ready["names"]:
        assert doc["nodes"][name]["ok"] and doc["nodes"][name]["state"] == "not-ready"
        assert node_state(name)["state"] == "not-ready"


def test_passport_shows_the_gpu_swapped_in_the_lab(ready: dict[str, Any]) -> None:
    node = ready["names"][0]
    before = {g["bus_id"]: g["serial"] for g in check(ready)[1]["nodes"][node]["facts"]["gpus"]}
    lab_core.set_faults(LAB, node, ["swapped-gpu"])
    try:
        proc, doc, _took = check(ready)
    finally:
        lab_core.set_faults(LAB, node, [])
    after = {g["bus_id"]: g["serial"] for g in doc["nodes"][node]["facts"]["gpus"]}
    [slot] = [s for s in before if before[s] != after[s]]
    proc, _took = gpunode(ready, "node", "history", node, "-i", str(ready["inventory"]), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads(proc.stdout)
    swaps = [f["message"] for f in card["flags"] if f["kind"] == "gpu-swapped"]
    assert len(swaps) == 1 and f"slot {slot}: serial {before[slot]}" in swaps[0], card["flags"]
    assert f"serial {after[slot]}" in swaps[0]
    # The acceptance run `up` recorded is in the passport with its figures.
    accepted = [o for o in card["observations"] if o["kind"] == "accept"]
    assert accepted and accepted[-1]["figures"].get("busbw_gbps"), accepted
    assert accepted[-1]["system"]["product_serial"]


def test_passport_flags_remaps_rising_boot_after_boot(ready: dict[str, Any]) -> None:
    node = ready["names"][1]
    lab_core.set_faults(LAB, node, ["remap-rising"])
    try:
        readings = []
        for boot in range(3):
            if boot:
                lab_core.restart_node(LAB, node)
            proc, doc, _took = check(ready)
            rows = [g["remapped_rows"] for g in doc["nodes"][node]["facts"]["gpus"]]
            readings.append(sum((r or {}).get("correctable") or 0 for r in rows))
    finally:
        lab_core.set_faults(LAB, node, [])
    assert readings == sorted(set(readings)) and len(readings) == 3, readings
    proc, _took = gpunode(ready, "node", "history", node, "-i", str(ready["inventory"]), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    flags = [f for f in json.loads(proc.stdout)["flags"] if f["kind"] == "remaps-rising"]
    assert len(flags) == 1, flags
    assert all(f"{n} (run " in flags[0]["message"] for n in readings), flags[0]


def test_passport_names_the_serial_of_a_failed_gpu_that_returns(ready: dict[str, Any]) -> None:
    node = ready["names"][0]
    started = time.perf_counter()
    seen = []
    try:
        for fault in ("ecc", "swapped-gpu", "returned-gpu"):
            lab_core.set_faults(LAB, node, [fault])
            if fault == "swapped-gpu":
                lab_core.restart_node(LAB, node)  # a board is replaced with the node down
            proc, doc, _took = check(ready)
            seen.append((doc["run_id"], doc["nodes"][node]))
    finally:
        lab_core.set_faults(LAB, node, [])
    (failed_run, failing), (gone_run, swapped), (back_run, back) = seen
    bad = [c["message"] for c in failing["checks"] if c["name"] == "health.ecc" and not c["ok"]]
    [gpu] = [g for g in failing["facts"]["gpus"] if bad and g["bus_id"] in bad[0]]
    assert gpu["serial"] not in {g["serial"] for g in swapped["facts"]["gpus"]}
    [now] = [g for g in back["facts"]["gpus"] if g["serial"] == gpu["serial"]]
    assert now["uuid"] == gpu["uuid"] and now["bus_id"] != gpu["bus_id"]
    assert back["ok"], [c for c in back["checks"] if not c["ok"]]  # it passes: only history
    args = ("node", "history", node, "-i", str(ready["inventory"]))
    proc, _took = gpunode(ready, *args, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    card = json.loads(proc.stdout)
    [swap] = [f for f in card["flags"] if f["kind"] == "gpu-swapped" and f["run_id"] == gone_run]
    [new] = [g for g in swapped["facts"]["gpus"] if g["bus_id"] == gpu["bus_id"]]
    assert f"slot {gpu['bus_id']}: serial {gpu['serial']} ({gpu['uuid']})" in swap["message"]
    assert f"serial {new['serial']} ({new['uuid']}) in run {gone_run}" in swap["message"]
    flags = [f for f in card["flags"] if f["kind"] == "failed-part-returned"]
    assert [f["run_id"] for f in flags] == [back_run], flags
    message = flags[0]["message"]
    assert message.startswith(f"GPU serial {gpu['serial']} (now slot {now['bus_id']}, UUID "), (
        message
    )
    # The serial's first failure in this module's runs, then the first run without it.
    found = re.search(
        r"failed on (\S+) in run (\S+), was gone from it in run (\S+), and is back", message
    )
    assert found and found[1] == node, message
    assert found[2] <= failed_run < gone_run and found[2] < found[3] <= gone_run, message
    proc, _took = gpunode(ready, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "failed-part-returned:" in proc.stdout and gpu["serial"] in proc.stdout, proc.stdout
    print(f"\nfailed, swapped, returned, checked and shown: {time.perf_counter() - started:.1f}s")
    # The fleet report reads the same passport: the node's flags and its figures' plot.
    page = ready["state_dir"] / "fleet.html"
    proc, _took = gpunode(ready, "report", "-i", str(ready["inventory"]), "-o", str(page), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = json.loads(proc.stdout)["nodes"][node]["flags"]
    assert [f for f in shown if f["kind"] == "failed-part-returned"] == flags, shown
    part = page.read_text().split(f"<h2>{node}</h2>", 1)[1].split("<h2>", 1)[0]
    assert f"<li><b>failed-part-returned</b>: GPU serial {gpu['serial']} " in part
    assert "busbw_gbps (GB/s, higher is better)" in part and "<circle " in part
    # The fixture's acceptance signed each node's certificate with its passport at issue time.
    certificate = sorted((ready["state_dir"] / "runs").glob(f"*-accept-*/certs/{node}.cert"))[-1]
    document = cert.load(certificate)
    assert document.version == 2 and document.passport is not None
    assert document.passport.since <= certificate.parent.parent.name
    seen = {g.serial for g in document.passport.gpus_seen}
    assert seen == {g["serial"] for g in failing["facts"]["gpus"]}, seen
