"""``gpunode check``: its rules, its state transition, and its probe run for real.

The probe is the very program a node runs (``plan.probe_program``: the acceptance runner and
``probe.py`` on the stdin of ``python3 -``), run here against the lab's stand-in ``nvidia-smi``
(rendered as the repository build renders it, on PATH, reading a temporary root through
``GPUNODE_LAB_ROOT``) and the lab's sysfs-shaped AER files: the GPU is the only thing that
cannot exist here, and the lab's emulation stands in for it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO, run_cli

from toolkit.acceptance.thresholds import effective
from toolkit.acceptance.verdict import NodeExpectation
from toolkit.check import plan, rules
from toolkit.inventory import Host, load_inventory
from toolkit.lab.faults import LINK_FLAP_DOWNS
from toolkit.lab.hardware import NodeHardware, aer_files, rdma_files
from toolkit.lab.package_spec import nvidia_smi_files
from toolkit.node import nodestate
from toolkit.steps import check as flow

V550 = "550.127.05"
REAL_AER = REPO / "tests" / "data/real/pcie-aer"

# --- rules ---------------------------------------------------------------------------------


def test_parse_aer_reads_the_kernels_sample_with_spaces_in_names() -> None:
    text = (REAL_AER / "aer_dev_correctable").read_text()
    counters = rules.parse_aer(text)
    assert counters["Receiver Error"] == 2
    assert counters["RELAY_NUM Rollover"] == 0
    assert counters["TOTAL_ERR_COR"] == 2


@pytest.mark.parametrize(
    ("now", "before", "expected"),
    [
        ({"a": {"nonfatal": 3}}, None, None),  # no earlier reading: nothing to compare
        ({"a": {"nonfatal": 3}}, {"a": {"nonfatal": 3}}, {}),
        ({"a": {"nonfatal": 5}}, {"a": {"nonfatal": 3}}, {"a": {"nonfatal": 2}}),
        # below the last reading: the counters restarted (a reboot), all of it is new
        ({"a": {"nonfatal": 1}}, {"a": {"nonfatal": 3}}, {"a": {"nonfatal": 1}}),
        ({"a": {"nonfatal": 0}}, {"a": {"nonfatal": 3}}, {}),
        ({"b": {"fatal": 1}}, {"a": {"fatal": 0}}, {"b": {"fatal": 1}}),  # a new device
    ],
)
def test_deltas(now: Any, before: Any, expected: Any) -> None:
    assert rules.deltas(now, before) == expected


def _aer_devices(hw: NodeHardware) -> dict[str, dict[str, str]]:
    devices: dict[str, dict[str, str]] = {}
    for path, text in aer_files(hw).items():
        device, name = path.split("/")
        devices.setdefault(device, {})[name] = text
    return devices


def test_aer_check_fails_on_uncorrectable_moves_and_shows_correctable_ones() -> None:
    clean = NodeHardware.for_node("H100", 8, True, seed="aer", index=1)
    faulty = NodeHardware.for_node("H100", 8, True, ["aer"], seed="aer", index=1)
    first, base = rules.aer_check({"dir": "/pci", "devices": _aer_devices(clean)}, None, {})
    assert first.ok and "first reading of 8 device(s)" in first.message
    same, _ = rules.aer_check({"dir": "/pci", "devices": _aer_devices(clean)}, base, {})
    assert same.ok and "no uncorrectable PCIe error since the last check" in same.message
    [gpu] = [g for g in faulty.gpus if g.aer_nonfatal]
    address = gpu.pci_bus_id[4:].lower()
    moved, now = rules.aer_check(
        {"dir": "/pci", "devices": _aer_devices(faulty)}, base, {address: f"GPU {gpu.index}"}
    )
    assert not moved.ok
    assert f"GPU {gpu.index} ({address}): nonfatal +2" in moved.message
    assert "correctable +41" in moved.message and "shown, not judged" in moved.message
    assert now[address] == {"correctable": 41, "nonfatal": 2, "fatal": 0}
    none, _ = rules.aer_check({"dir": "/pci", "devices": {}, "error": None}, base, {})
    assert none.ok and none.message.startswith("not judged: no AER statistics")


@pytest.mark.parametrize(
    ("ports", "wanted", "ok", "words"),
    [
        ({}, None, True, "not judged: no RDMA port"),
        ({"mlx5_0/1": {"state": "4: ACTIVE", "phys_state": "5: LinkUp"}}, None, True, "1 RDMA"),
        (
            {"mlx5_0/1": {"state": "1: DOWN", "phys_state": "3: Disabled"}},
            None,
            False,
            "mlx5_0/1: DOWN, Disabled",
        ),
        (
            {
                "mlx5_0/1": {"state": "4: ACTIVE", "phys_state": "5: LinkUp"},
                "mlx5_4/1": {"state": "1: DOWN", "phys_state": "2: Polling"},
            },
            ["mlx5_0"],
            True,
            "1 RDMA port(s) ACTIVE",
        ),
        ({"mlx5_0/1": {"state": "4: ACTIVE", "phys_state": "5: LinkUp"}}, ["mlx5_1"], False, ""),
    ],
)
def test_rdma_check(ports: Any, wanted: Any, ok: bool, words: str) -> None:
    result = rules.rdma_check({"dir": "/ib", "ports": ports}, wanted)
    assert result.ok is ok and words in result.message


def _ports(downs: dict[str, int | str | None]) -> dict[str, Any]:
    up = {"state": "4: ACTIVE", "phys_state": "5: LinkUp"}
    return {
        "dir": "/ib",
        "ports": {p: {**up, rules.LINK_DOWNED: n} for p, n in downs.items()},
    }


@pytest.mark.parametrize(
    ("now", "before", "wanted", "ok", "words"),
    [
        ({}, None, None, True, "not judged: no link-down counter under /ib/"),
        ({"mlx5_0/1": "0\n"}, None, None, True, "first reading of 1 port(s)"),
        ({"mlx5_0/1": "4\n"}, {"mlx5_0/1": 4}, None, True, "no link down since the last check"),
        (
            {"mlx5_0/1": "0\n", "mlx5_3/1": "3\n"},
            {"mlx5_0/1": 0, "mlx5_3/1": 0},
            None,
            False,
            "mlx5_3/1: link down +3 since the last check (link_downed 3)",
        ),
        ({"mlx5_3/1": "7\n"}, {"mlx5_3/1": 5}, None, False, "mlx5_3/1: link down +2 since"),
        # a counter below its last reading restarted (a reboot): all of it is new
        ({"mlx5_3/1": "1\n"}, {"mlx5_3/1": 5}, None, False, "mlx5_3/1: link down +1 since"),
        ({"mlx5_3/1": "0\n"}, {"mlx5_3/1": 3}, None, True, "no link down"),  # the fault cleared
        # only the compute NICs are judged
        ({"mlx5_0/1": "0\n", "mlx5_3/1": "3\n"}, {"mlx5_0/1": 0}, ["mlx5_0"], True, "1 port"),
        ({"mlx5_0/1": None, "mlx5_1/1": "x"}, None, None, True, "not judged"),  # unreadable
    ],
)
def test_link_flap_check_fails_on_link_downs_since_the_last_check_naming_port_and_delta(
    now: Any, before: Any, wanted: Any, ok: bool, words: str
) -> None:
    earlier = None if before is None else {p: {"link_downed": n} for p, n in before.items()}
    check, counts = rules.link_flap_check(_ports(now), wanted, earlier)
    assert check.ok is ok and words in check.message, check.message
    assert check.name == "nic.link_downed"
    judged = {p: n for p, n in now.items() if not wanted or p.split("/")[0] in wanted}
    assert counts == {
        p: {"link_downed": int(n)} for p, n in judged.items() if str(n).strip().isdigit()
    }


def test_link_flap_fault_moves_one_nic_s_counter_and_leaves_every_port_up() -> None:
    clean = NodeHardware.for_node("H100", 8, True, seed="flap", index=1)
    flapped = NodeHardware.for_node("H100", 8, True, ["link-flap"], seed="flap", index=1)
    assert [n.link_downed for n in clean.nics] == [0] * len(clean.nics)
    [nic] = [n for n in flapped.nics if n.link_downed]
    assert nic.link_downed == LINK_FLAP_DOWNS
    files = rdma_files(flapped)
    assert files[f"{nic.name}/ports/1/counters/link_downed"] == f"{LINK_FLAP_DOWNS}\n"
    ports = {}
    for path, text in files.items():
        device, _ports_dir, number, name = path.split("/", 3)
        ports.setdefault(f"{device}/{number}", {})[name] = text
    assert rules.rdma_check({"dir": "/ib", "ports": ports}, None).ok  # settled: all up
    before = {f"{n.name}/1": {"link_downed": 0} for n in clean.nics}
    check, _ = rules.link_flap_check({"dir": "/ib", "ports": ports}, None, before)
    assert not check.ok and check.message.startswith(
        f"{nic.name}/1: link down +{LINK_FLAP_DOWNS} since the last check"
    )


def test_units_check_names_each_unit_that_is_not_active_and_why() -> None:
    required = {"nvidia-persistenced": "driver", "nvidia-fabricmanager": "NVSwitch"}
    ok = rules.units_check(
        {"nvidia-persistenced": "active", "nvidia-fabricmanager": "active"}, required
    )
    assert ok.ok
    bad = rules.units_check(
        {"nvidia-persistenced": "active", "nvidia-fabricmanager": "failed"}, required
    )
    assert not bad.ok and bad.message.startswith("nvidia-fabricmanager is failed (NVSwitch)")


# --- the state transition ------------------------------------------------------------------


def test_after_check_turns_only_a_ready_node_not_ready_and_never_makes_one_ready() -> None:
    ready = {"state": "ready", "reason": [], "stack_id": "abc"}
    base = {"time": "2026-01-01T00:00:00Z", "aer": {}}
    failed = nodestate.after_check(ready, ["pcie.aer: moved"], base, run_id="r1")
    assert failed["state"] == "not-ready" and failed["reason"] == ["check: pcie.aer: moved"]
    assert failed["check"] == base and failed["run_id"] == "r1" and failed["stack_id"] == "abc"
    clean = nodestate.after_check(ready, [], base)
    assert clean["state"] == "ready" and clean["check"] == base
    not_ready = {"state": "not-ready", "reason": ["earlier"]}
    assert nodestate.after_check(not_ready, [], base)["state"] == "not-ready"
    kept = nodestate.after_check(not_ready, ["health.xid: new"], base)
    assert kept["reason"] == ["earlier"]  # its standing is acceptance's to change
    # Later writers keep the baseline (a provision that changes nothing).
    after = nodestate.after_provision(clean, stack_id="abc", changed=False)
    assert after["check"] == base


# --- the probe, run for real ---------------------------------------------------------------


class FakeNodeRoot:
    """A node's / in a temporary folder: the stand-in nvidia-smi on PATH, its hardware file,
    the AER and RDMA port files, a units stand-in for systemctl and a kernel log."""

    def __init__(self, root: Path, hw: NodeHardware) -> None:
        self.root = root
        state = root / "var/lib/gpunode-lab"
        state.mkdir(parents=True)
        (state / "hardware.json").write_text(hw.to_json())
        (state / "loaded-driver-version").write_text(V550 + "\n")
        for file in nvidia_smi_files(V550, "12.4", "550.127"):
            path = root / file.path.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(file.content)
            path.chmod(file.mode)
        self.bin = root / "usr/bin"
        # systemctl is-active: one state a line, in order (systemctl(1)).
        systemctl = self.bin / "systemctl"
        systemctl.write_text('#!/bin/sh\nshift; shift\nfor u in "$@"; do echo active; done\n')
        systemctl.chmod(0o755)
        self.pci = root / "pci"
        for path, text in aer_files(hw).items():
            (self.pci / path).parent.mkdir(parents=True, exist_ok=True)
            (self.pci / path).write_text(text)
        self.rdma = root / "infiniband"
        for path, text in rdma_files(hw).items():
            (self.rdma / path).parent.mkdir(parents=True, exist_ok=True)
            (self.rdma / path).write_text(text)
        self.log = root / "kernel.log"
        self.log.write_text(
            "".join(f"[  100.000000] kernel: {line}\n" for line in hw.kernel_messages())
        )

    def probe(self, state_file: str = "/nonexistent") -> dict[str, Any]:
        spec = {
            "packages": [],
            "kernel_log_command": f"cat {self.log}",
            "state_file": state_file,
            "dmi_dir": str(self.root / "dmi"),
            "pci_dir": str(self.pci),
            "rdma_dir": str(self.rdma),
            "units": ["nvidia-persistenced", "nvidia-fabricmanager"],
        }
        env = {
            **os.environ,
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "GPUNODE_LAB_ROOT": str(self.root),
        }
        done = subprocess.run(
            ["python3", "-"],
            input=plan.probe_program(spec),
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        return dict(json.loads(done.stdout))


def _plan(hw: NodeHardware) -> Any:
    host = Host("node-1", "10.0.0.1", 22, None, None, None, ("gpu",), {})
    expect = NodeExpectation(
        host="node-1",
        stack_id="abc",
        gpu_model="H100",
        gpu_count=len(hw.gpus),
        driver_version=V550,
        packages={},
    )
    resolved = {"fabric_manager": {"enabled": True}, "imex": {"enabled": False}}
    expected = rules.Expected(expect, plan.required_units(host, resolved))
    return plan.NodePlan(host, {"debian12": expected}, effective(None), {})


def _with_debian(probe: dict[str, Any]) -> dict[str, Any]:
    return {**probe, "os_release": 'ID=debian\nVERSION_ID="12"\n'}


def test_probe_of_a_clean_node_passes_every_check(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 8, True, seed="probe", index=1)
    probe = _with_debian(FakeNodeRoot(tmp_path, hw).probe())
    assert probe["gpus"]["ok"] and probe["gpus"]["count"] == 8
    checks, baseline = plan.judge(_plan(hw), probe, None)
    failing = {c.name: c.message for c in checks if not c.ok}
    assert failing == {}
    names = [c.name for c in checks]
    expected = {"gpu.count", "versions.driver_loaded", "health.ecc", "health.row_remap"}
    expected |= {"health.xid", "health.throttle", "pcie.aer", "nic.link", "services.active"}
    expected |= {"nic.link_downed"}
    assert set(expected) <= set(names)
    assert len(baseline["aer"]) == 8 and baseline["time"] == probe["started"]
    # The lab's NICs, one RDMA port each, read through the probe: up, and counted from here.
    link = next(c for c in checks if c.name == "nic.link")
    assert link.message.startswith(f"{len(hw.nics)} RDMA port(s) ACTIVE, LinkUp"), link.message
    assert baseline["link_downed"] == {f"{n.name}/1": {"link_downed": 0} for n in hw.nics}
    facts = flow.passport_facts(probe, baseline["aer"])
    assert [g["serial"] for g in facts["gpus"]] == [g.serial for g in hw.gpus]


@pytest.mark.parametrize(
    ("fault", "failing"),
    [
        ("ecc", {"health.ecc", "health.row_remap"}),
        ("remap-failure", {"health.row_remap"}),
        ("xid", {"health.xid"}),
        ("xid154", {"health.xid", "health.recovery_action"}),
        ("missing-gpu", {"gpu.count"}),
        ("aer", {"pcie.aer"}),
        ("link-flap", {"nic.link_downed"}),  # up again: only its counter moved
        ("remapped", set()),  # history, not a reason
    ],
)
def test_probe_of_a_faulty_node_fails_the_faults_check(
    tmp_path: Path, fault: str, failing: set[str]
) -> None:
    clean = NodeHardware.for_node("H100", 8, True, seed="probe", index=1)
    hw = NodeHardware.for_node("H100", 8, True, [fault], seed="probe", index=1)
    # The baseline of a check taken before the fault (its AER and link-down counters all zero).
    clean_probe = _with_debian(FakeNodeRoot(tmp_path / "clean", clean).probe())
    _, base = plan.judge(_plan(clean), clean_probe, None)
    base["time"] = "2000-01-01T00:00:00Z"
    probe = _with_debian(FakeNodeRoot(tmp_path, hw).probe())
    checks, _ = plan.judge(_plan(clean), probe, base)
    assert {c.name for c in checks if not c.ok} == failing, [c for c in checks if not c.ok]


def test_xid_before_the_last_check_is_not_counted_again(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["xid"], seed="probe", index=1)
    probe = _with_debian(FakeNodeRoot(tmp_path, hw).probe())
    # The log's lines are 100 s after boot, long before a check taken a second ago.
    later = {"time": probe["started"], "aer": {}}
    checks, _ = plan.judge(_plan(hw), probe, later)
    xid = next(c for c in checks if c.name == "health.xid")
    assert xid.ok and "since the last check" in xid.message and "not judged" in xid.message


def test_an_unsupported_os_fails_before_any_rule(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 8, True, seed="probe", index=1)
    probe = {"os_release": "ID=fedora\nVERSION_ID=40\n", "started": "x"}
    [check], _ = plan.judge(_plan(hw), probe, None)
    assert check.name == "os.supported" and not check.ok


def test_required_units_follow_the_stack_and_the_driver_option() -> None:
    host = Host("n", "a", 22, None, None, None, (), {"nvidia_driver_persistenced": False})
    units = plan.required_units(
        host, {"fabric_manager": {"enabled": True}, "imex": {"enabled": True}}
    )
    assert list(units) == ["nvidia-fabricmanager", "nvidia-imex"]
    host = Host("n", "a", 22, None, None, None, (), {})
    assert list(plan.required_units(host, {})) == ["nvidia-persistenced"]


def test_remap_rising_fault_adds_a_row_per_lab_restart() -> None:
    rows = []
    for boots in range(3):
        hw = NodeHardware.for_node(
            "H100", 8, True, ["remap-rising"], seed="r", index=1, boots=boots
        )
        [gpu] = [g for g in hw.gpus if g.remapped_rows_correctable]
        rows.append(gpu.remapped_rows_correctable)
        assert not gpu.remapped_rows_pending and gpu.ecc_uncorrected_volatile == 0
    assert rows == [1, 2, 3]
    clean = NodeHardware.for_node("H100", 8, True, seed="r", index=1, boots=5)
    assert all(g.remapped_rows_correctable == 0 for g in clean.gpus)


def test_check_cli_refuses_a_limit_matching_no_host_before_touching_any(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    gpu:\n      hosts:\n        n1: {ansible_host: 10.0.0.1}\n"
    )
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path / "state"))
    code, _out, err = run_cli(capsys, "check", "-i", str(inventory), "--limit", "nope")
    assert code == 2 and "'nope' matches no host or group" in err
    assert not (tmp_path / "state" / "runs").exists()  # no run recorded, no node touched


def test_a_driver_upgraded_without_reboot_fails_versions_driver_loaded(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 8, True, seed="probe", index=1)
    root = FakeNodeRoot(tmp_path, hw)
    (tmp_path / "var/lib/gpunode-lab/loaded-driver-version").write_text("550.90.07\n")
    checks, _ = plan.judge(_plan(hw), _with_debian(root.probe()), None)
    failing = {c.name: c.message for c in checks if not c.ok}
    assert "Driver/library version mismatch" in failing["versions.driver_loaded"]
    assert "gpu.query" in failing  # nvidia-smi lists nothing while NVML cannot start


def test_plan_of_the_sample_inventory_asks_for_its_locked_packages_and_units() -> None:
    sample = REPO / "inventories/sample"
    inventory = load_inventory(sample)
    by_group = {}
    for host in inventory.hosts_for(None):
        by_group.setdefault(host.groups[-1], plan.plan_node(inventory, host))
    sxm = next(p for g, p in by_group.items() if "h100" in g)
    pcie = next(p for g, p in by_group.items() if "l40s" in g)
    assert list(sxm.expected) == ["ubuntu2204"]
    expect = sxm.expected["ubuntu2204"].node
    assert expect.driver_version and expect.packages
    assert set(expect.packages) <= set(sxm.probe_spec["packages"])
    assert set(sxm.expected["ubuntu2204"].units) == {"nvidia-fabricmanager", "nvidia-persistenced"}
    assert sxm.probe_spec["units"] == ["nvidia-fabricmanager", "nvidia-persistenced"]
    assert pcie.probe_spec["units"] == ["nvidia-persistenced"]  # no NVSwitch, no FM
    assert sxm.probe_spec["pci_dir"] == "/sys/bus/pci/devices"
    assert sxm.probe_spec["rdma_dir"] == "/sys/class/infiniband"


def test_an_xid_of_the_second_the_last_check_started_counts_once(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["xid"], seed="probe", index=1)
    probe = _with_debian(FakeNodeRoot(tmp_path, hw).probe())
    [event] = probe["kernel_log"]["xid_events"]
    # Logged in the very second a check started (times are whole seconds): new to that check.
    event["time"] = probe["started"]
    first, baseline = plan.judge(_plan(hw), probe, {"time": probe["started"], "aer": {}})
    assert not next(c for c in first if c.name == "health.xid").ok
    assert baseline["xid_seen"] == [event["line"]]
    # The next check (same log) started in the same second: the line was seen, not new.
    again, _ = plan.judge(_plan(hw), probe, baseline)
    assert next(c for c in again if c.name == "health.xid").ok
