"""The node-side runner: its fact parsers, the /data test, the GPU queries against the lab's
stand-in nvidia-smi (the only GPU emulation allowed), and a real gloo all-reduce when a
Python with torch is at hand (``GPUNODE_TORCH_PYTHON`` or this interpreter)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO, torch_python

from toolkit.acceptance.check import NodeExpectation
from toolkit.acceptance.node_runner.collective import (
    busbw_factor,
    free_port,
    pattern_value,
    reduced_scale,
)
from toolkit.acceptance.node_runner.facts import (
    boot_time,
    parse_xids,
    query_gpus,
    query_identity,
    query_topology,
    query_versions,
    read_kernel_log,
    this_boot_only,
)
from toolkit.acceptance.node_runner.gpu import link_under_load
from toolkit.acceptance.node_runner.storage import data_throughput
from toolkit.acceptance.node_runner.train import prepare_loop
from toolkit.acceptance.topology import judge as judge_topology
from toolkit.acceptance.topology import read_section
from toolkit.acceptance.verdict import judge
from toolkit.lab.inventory import lab_profile
from toolkit.lab.package_spec import nvidia_smi_files
from toolkit.profile.floors import AcceptanceSpec

STANDIN = REPO / "toolkit" / "lab" / "standins" / "nvidia_smi.py"


def test_parse_xids() -> None:
    log = (
        "[  12.345678] kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off the bus.\n"
        "[  13.000000] kernel: nvidia-modeset: Loading\n"
        "Nov 29 10:00:00 node kernel: NVRM: Xid (PCI:0000:2a:00): 119, pid=2417, name=python3, "
        "Timeout after 6s\n"
    )
    events = parse_xids(log)
    assert [(e["bus_id"], e["xid"]) for e in events] == [("0000:18:00", 79), ("0000:2a:00", 119)]
    assert [e["time"] for e in events] == [None, None]  # no boot time, no year: not placed


@pytest.mark.parametrize(
    ("line", "when"),
    [
        # `journalctl -k -b -o short-monotonic` and dmesg: seconds since boot.
        (
            "[ 3600.500000] node kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0",
            "2025-06-01T11:00:00Z",
        ),
        ("[    0.000000] NVRM: Xid (PCI:0000:18:00): 79, pid=0", "2025-06-01T10:00:00Z"),
        # `journalctl -o short-iso`: wall-clock, with its offset.
        (
            "2025-06-01T14:30:00+0200 node kernel: NVRM: Xid (PCI:0000:18:00): 119, x",
            "2025-06-01T12:30:00Z",
        ),
        (
            "2025-06-01T12:30:00.123456+00:00 node kernel: NVRM: Xid (PCI:0000:18:00): 119, x",
            "2025-06-01T12:30:00Z",
        ),
    ],
)
def test_xid_times_are_wall_clock(line: str, when: str) -> None:
    boot = datetime(2025, 6, 1, 10, 0, 0, tzinfo=timezone.utc).timestamp()
    (event,) = parse_xids(line + "\n", boot)
    assert event["time"] == when


def test_parse_xids_places_lines_by_boot() -> None:
    """journalctl prints "-- Boot <id> --" between boots: lines before the last marker are
    an earlier boot's (their monotonic stamps are that boot's, never dated with this one)."""
    log = (
        "[ 5.000000] host kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=0, fallen off the bus\n"
        "-- Boot 0123456789abcdef0123456789abcdef --\n"
        "[ 7.000000] host kernel: NVRM: Xid (PCI:0000:18:00): 95, pid=0, uncontained\n"
        "host kernel: NVRM: Xid (PCI:0000:2a:00): 154, GPU recovery action changed\n"
    )
    boot = datetime(2025, 6, 1, 10, 0, 0, tzinfo=timezone.utc).timestamp()
    events = parse_xids(log, boot)
    assert [(e["xid"], e["boot"], e["time"]) for e in events] == [
        (79, "previous", None),
        (95, "this", "2025-06-01T10:00:07Z"),
        (154, "this", None),
    ]
    # No marker: this boot when the command reads this boot only, unknown otherwise.
    line = "NVRM: Xid (PCI:0000:18:00): 48, DBE\n"
    assert parse_xids(line, boot, this_boot=True)[0]["boot"] == "this"
    assert parse_xids(line, boot)[0]["boot"] is None


@pytest.mark.parametrize(
    ("command", "this_boot"),
    [
        ("journalctl -k -b -o short-monotonic --no-pager", True),  # the default
        ("journalctl -b -t kernel -o short-monotonic --no-pager", True),  # the lab's
        ("journalctl -k -o short-iso", True),  # -k implies -b (journalctl(1))
        ("journalctl --boot=0 -t kernel", True),
        ("dmesg", True),
        ("journalctl -k -b -1", False),
        ("journalctl -b all -k", False),
        ("journalctl -o short-iso", False),
        ("journalctl -k --file /var/log/journal/x.journal", False),
        ("grep NVRM /var/log/kern.log", False),
    ],
)
def test_this_boot_only(command: str, this_boot: bool) -> None:
    assert this_boot_only(command) is this_boot


def test_boot_time_is_now_less_uptime() -> None:
    boot = boot_time()
    assert boot is not None
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    assert abs((time.time() - uptime) - boot) < 5


def test_kernel_log_falls_back_and_reports() -> None:
    out = read_kernel_log("printf 'NVRM: Xid (PCI:0000:18:00): 48, DBE\\n'")
    assert out["ok"] and out["xid_events"][0]["xid"] == 48
    bad = read_kernel_log("exit 3")
    # dmesg may or may not be readable here; either way the result says what happened.
    assert bad["ok"] is (bad["command"] == "dmesg") or bad["error"]


def test_data_throughput(tmp_path: Path) -> None:
    out = data_throughput(str(tmp_path), 8 << 20)
    assert out["error"] is None
    assert out["write_mbps"] > 0 and out["read_mbps"] > 0
    assert list(tmp_path.iterdir()) == []  # the test file is removed


def test_data_throughput_missing_path(tmp_path: Path) -> None:
    out = data_throughput(str(tmp_path / "nope"), 1 << 20)
    assert out["error"].endswith("does not exist") and out["write_mbps"] is None


def test_busbw_factor() -> None:
    assert [busbw_factor(n) for n in (1, 2, 4, 8)] == [0.0, 1.0, 1.5, 1.75]


def test_pattern_sums_are_exact_in_float32() -> None:
    # The largest reduced value must stay below 2**24 for float32 to be exact.
    ranks = 64
    assert sum(pattern_value(r, 6) for r in range(ranks)) < 2**24


def _f32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _reduce_f32(values: list[float], order: list[int]) -> float:
    total = 0.0
    for r in order:
        total = _f32(total + values[r])
    return total


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_the_timed_rounds_are_checked_only_where_float32_adds_them_exactly(world: int) -> None:
    """reduced_scale: the pattern after every round, added in float32 in two orders (a ring's
    and its reverse), is exactly the scale it gives; past 2**24 it gives none."""
    for rounds in range(1, 30):
        scale = reduced_scale(world, rounds)
        exact = world * (world + 1) // 2 * world ** (rounds - 1)
        if scale is None:
            assert 7 * exact > 2**24
            continue
        assert scale == exact and 7 * scale <= 2**24
        for k in range(7):
            for order in (list(range(world)), list(reversed(range(world)))):
                values = [pattern_value(r, k) for r in range(world)]
                for _ in range(rounds):
                    values = [_reduce_f32(values, order)] * world
                assert values[0] == (k + 1) * scale


def test_the_benchmark_checks_its_timed_rounds_and_gpus_their_own_pass() -> None:
    # 2 CPU ranks, 5 iterations after 1 warmup (the acceptance benchmark): 7 * 96 <= 2**24.
    assert reduced_scale(2, 6) == 96.0
    # A node's 8 GPUs at the default 20 + 5: one more all-reduce of the pattern is checked.
    assert reduced_scale(8, 25) is None and reduced_scale(2, 0) is None


def _standin(tmp_path: Path, faults: list[str], version: str = "550.127.05") -> dict[str, str]:
    """A PATH with the lab's stand-in nvidia-smi reading a lab hardware file."""
    if not STANDIN.exists():
        pytest.skip("the lab's stand-in nvidia-smi is not in this tree")
    from toolkit.lab.hardware import NodeHardware

    root = tmp_path / "root"
    state = root / "var/lib/gpunode-lab"
    state.mkdir(parents=True)
    hardware = NodeHardware.for_node("H100", 8, True, faults)
    (state / "hardware.json").write_text(hardware.to_json())
    (state / "loaded-driver-version").write_text(version + "\n")
    for file in nvidia_smi_files(version, "12.4", "12.550"):
        path = root / file.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(file.content)
    bindir = root / "usr/bin"
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\n" + smi.read_text())
    smi.chmod(0o755)
    return {"PATH": f"{bindir}:{os.environ['PATH']}", "GPUNODE_LAB_ROOT": str(root)}


@pytest.fixture
def lab_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    def make(faults: list[str], version: str = "550.127.05") -> str:
        env = _standin(tmp_path / "-".join(faults or ["ok"]), faults, version)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        return str(Path(env["PATH"].split(":")[0]) / "nvidia-smi")

    return make


def test_query_gpus_healthy(lab_env: Any) -> None:
    out = query_gpus(lab_env([]))
    assert out["ok"] and out["count"] == 8 and out["unsupported_fields"] == []
    # The report itself is kept for the RMA evidence pack (toolkit/report/evidence.py).
    assert out["smi_q"].count("Remapped Rows") == 8
    gpu = out["list"][0]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert (gpu["pcie_gen_current"], gpu["pcie_gen_max"]) == (5, 5)
    assert gpu["ecc_uncorrected_volatile"] == 0
    # The memory counters, from the stand-in's `nvidia-smi -q`.
    assert all(
        g["remapped_rows"]
        == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
        and g["recovery_action"] == "None"
        for g in out["list"]
    )
    # The board identity the handover certificate carries.
    assert all(len(g["serial"]) == 13 and g["serial"].startswith("1") for g in out["list"])
    assert gpu["vbios_version"] == "96.00.99.00.01"
    assert len({g["uuid"] for g in out["list"]}) == 8


def test_query_identity_reads_dmi_disks_and_nics(tmp_path: Path) -> None:
    dmi = tmp_path / "dmi"
    dmi.mkdir()
    (dmi / "product_serial").write_text("S123\n")
    (dmi / "product_name").write_text("SYS-821GE-TNHR\n")
    out = query_identity(str(dmi), by_id_dir=str(tmp_path / "no-by-id"))
    assert out["dmi"] == {
        "sys_vendor": None,
        "product_name": "SYS-821GE-TNHR",
        "product_serial": "S123",
        "board_serial": None,
    }
    assert out["by_id"] == []
    assert "lo" not in {n["name"] for n in out["nics"]}
    assert out["lsblk"] is not None or out["lsblk_error"]


@pytest.mark.parametrize(
    ("fault", "check", "text"),
    [
        ("missing-gpu", "gpu.count", "7 GPUs != 8 expected"),
        ("ecc", "health.ecc", "ecc.errors.uncorrected.volatile.total = 2"),
        ("remap-failure", "health.row_remap", "remapped_rows.failure = Yes"),
        ("xid154", "health.recovery_action", "gpu_recovery_action = Reset"),
        ("pcie", "health.pcie", "max link Gen3 < Gen5 (GPU max Gen5, host port max Gen3)"),
    ],
)
def test_lab_faults_reach_the_verdict(lab_env: Any, fault: str, check: str, text: str) -> None:
    smi = lab_env([fault])
    result = {
        "gpus": query_gpus(smi),
        "versions": query_versions(smi, []),
        "kernel_log": {"ok": True, "xid_events": []},
        "state": {"stack_id": "s"},
        "allreduce": {
            "engine": "torch-gloo",
            "error": None,
            "rows": [{"size_bytes": 1 << 20, "busbw_gbps": 1.0, "wrong": 0, "correct": True}],
        },
    }
    expect = NodeExpectation("n", "s", gpu_model="H100", gpu_count=8, driver_version="550.127.05")
    verdict = judge(result, expect, AcceptanceSpec())
    failed = {c.name: c.message for c in verdict.failed}
    assert check in failed and text in failed[check], failed
    if fault == "ecc":
        # The lab's ECC fault leaves a pending remap too.
        assert "remapped_rows.pending = Yes" in failed["health.row_remap"]


def test_lab_remapped_long_ago_is_ready(lab_env: Any) -> None:
    """The `remapped` fault (lifetime counts above 0, nothing since the driver loaded, nothing
    pending) reaches the verdict as history, not as a reason."""
    gpus = query_gpus(lab_env(["remapped"]))
    (gpu,) = [g for g in gpus["list"] if g["ecc_uncorrected_aggregate"]]
    assert gpu["ecc_uncorrected_volatile"] == 0 and gpu["ecc_uncorrected_aggregate"] == 2
    assert gpu["remapped_rows"] == {
        "correctable": 0,
        "uncorrectable": 1,
        "pending": False,
        "failure": False,
    }
    from toolkit.acceptance import memory_health

    findings = {f.check: f for f in memory_health.judge(gpus["list"])}
    assert all(f.ok for f in findings.values()), findings
    assert "aggregate uncorrectable ECC 2" in findings["health.ecc"].message


@pytest.mark.parametrize("faults", [[], ["topo"]])
def test_topology_is_shipped_raw_and_judged_by_the_controller(
    lab_env: Any, faults: list[str]
) -> None:
    section = query_topology(lab_env(faults))
    assert section["error"] is None and section["raw_output"].startswith("\tGPU0\tGPU1")
    rules = lab_profile().acceptance.topology
    topo, error = read_section(section)
    assert topo is not None and rules is not None, error
    findings = {f.rule: f for f in judge_topology(topo, rules)}
    assert set(findings) == {"gpu_link_same_numa", "nic_gpu_link", "numa_balanced"}
    assert findings["nic_gpu_link"].ok and findings["numa_balanced"].ok
    same_numa = findings["gpu_link_same_numa"]
    assert same_numa.ok is not bool(faults), same_numa.message
    if faults:
        assert same_numa.message.endswith("SYS (rule: NODE or nearer)")
    missing = query_topology(None)
    assert missing["raw_output"] == "" and missing["error"] == "nvidia-smi not found"
    assert missing["duration_s"] >= 0


def test_driver_mismatch_is_reported(lab_env: Any, tmp_path: Path) -> None:
    smi = lab_env([])
    loaded = Path(os.environ["GPUNODE_LAB_ROOT"]) / "var/lib/gpunode-lab/loaded-driver-version"
    loaded.write_text("550.90.07\n")
    versions = query_versions(smi, [])
    assert "Driver/library version mismatch" in versions["nvml_error"]
    assert versions["nvml_library"] == "12.550"


def lab_spec(folder: Path) -> dict[str, Any]:
    """A runner spec at lab sizes, everything under ``folder`` (data path and work folder)."""
    return {
        "sizes": [1 << 16, 1 << 20],
        "iters": 2,
        "warmup_iters": 1,
        "cpu_ranks_per_node": 2,
        "kernel_log_command": "true",
        "data_path": str(folder),
        "data_size_bytes": 4 << 20,
        "workdir": str(folder),
        "packages": ["dpkg"],
        "state_file": str(folder / "state.json"),
        # The training-shaped checks at lab sizes, run by the all-reduce's own ranks.
        "storage": {
            "files": 8,
            "file_bytes": 256 << 10,
            "reads": 24,
            "workers": 2,
            "min_read_bytes": 4096,
            "max_read_bytes": 256 << 10,
            "checkpoint_bytes": 1 << 20,
        },
        "train": {
            "steps": 2,
            "batch": 2,
            "sample_bytes": 64 << 10,
            "loader_workers": 1,
            "hidden": 64,
            # The accelerator's compute of a step, emulated (a sleep, MLPerf Storage's method).
            "compute_s": 0.02,
            "gpu_step": None,
        },
    }


def test_run_node_with_gloo(tmp_path: Path, runner_pyz: Path) -> None:
    python = torch_python()
    if python is None:
        pytest.skip("no Python with torch (set GPUNODE_TORCH_PYTHON)")
    spec = lab_spec(tmp_path)
    (tmp_path / "state.json").write_text('{"state": "provisioned", "stack_id": "abc"}')
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, PATH="/usr/bin:/bin")  # no nvidia-smi here: a CPU node
    proc = subprocess.run(
        [
            python,
            str(runner_pyz),
            "run",
            "--spec",
            str(tmp_path / "spec.json"),
            "--out",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["gpus"]["ok"] is False and "nvidia-smi" in result["gpus"]["error"]
    assert result["topology"]["error"] == "nvidia-smi not found"
    assert result["topology"]["raw_output"] == ""
    assert result["state"] == {"state": "provisioned", "stack_id": "abc"}
    ar = result["allreduce"]
    assert ar["error"] is None and ar["engine"] == "torch-gloo" and ar["ranks"] == 2
    assert [r["size_bytes"] for r in ar["rows"]] == [1 << 16, 1 << 20]
    assert all(r["correct"] and r["wrong"] == 0 and r["busbw_gbps"] > 0 for r in ar["rows"])
    assert result["data"]["error"] is None and result["data"]["write_mbps"] > 0
    assert result["versions"]["packages"]["dpkg"]
    assert result["gpu_perf"] is None and result["cuda_device_count"] == 0
    storage = result["storage"]
    assert storage["error"] is None and storage["reads"]["reads"] == 24
    assert storage["reads"]["p99_ms"] > 0 and storage["reads"]["files_per_s"] > 0
    # Restored by rank 0 of the launch: another process than the framework's, which wrote it.
    ckpt = result["checkpoint"]
    assert ckpt["error"] is None and ckpt["identical"] and ckpt["fresh_process"]
    assert ckpt["write_s"] > 0 and ckpt["restore_s"] > 0
    train = result["train"]
    assert train["error"] is None, train
    assert [p["ranks"] for p in train["scaling"]["points"]] == [1, 2]
    assert train["scaling"]["points"][0]["efficiency"] == 1.0
    loop = train["loop"]
    assert loop["ranks"] == 2 and loop["device"] == "cpu" and 0 <= loop["data_wait_share"] < 1
    assert loop["gpu_util"]["measured"] is False and "CPU ranks" in loop["gpu_util"]["reason"]
    # Every step slept the emulated compute: the steps took at least that long.
    assert loop["compute"] == {"kind": "emulated", "step_s": 0.02} and loop["gpu_step"] is None
    assert loop["samples_per_s"] <= loop["batch"] / 0.02 * loop["ranks"]
    # The data set and checkpoint are gone; only the sequential test's folder stays empty.
    assert not list(tmp_path.glob(".gpunode-accept-train-*"))


def test_the_loop_scales_across_two_nodes_each_reading_its_own_data(
    tmp_path: Path, runner_pyz: Path
) -> None:
    """Two ``allreduce`` launches on this machine stand for two nodes (one CPU rank each):
    after the all-reduce the ranks run the loop at 1 and 2 ranks, the point of 2 spanning
    both nodes, each node's loader reading the data set it wrote on its own data path."""
    python = torch_python()
    if python is None:
        pytest.skip("no Python with torch (set GPUNODE_TORCH_PYTHON)")
    port = free_port()
    procs = []
    for rank in (0, 1):
        folder = tmp_path / f"node{rank}"
        folder.mkdir()
        (folder / "spec.json").write_text(json.dumps(lab_spec(folder)))
        argv = [python, str(runner_pyz), "allreduce", "--nnodes", "2", "--node-rank", str(rank)]
        argv += ["--nproc", "1", "--master-addr", "127.0.0.1", "--master-port", str(port)]
        argv += ["--iters", "2", "--warmup", "1", "--timeout", "120", "--sizes", str(1 << 16)]
        argv += ["--train-from", str(folder / "spec.json"), "--out", str(folder / "out.json")]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output
    result = json.loads((tmp_path / "node0" / "out.json").read_text())
    assert result["error"] is None and result["ranks"] == 2
    train = result["train"]
    assert train["error"] is None and train["checkpoint"] is None, train
    points = train["scaling"]["points"]
    assert [(p["ranks"], p["nodes"]) for p in points] == [(1, 1), (2, 2)]
    assert points[0]["efficiency"] == 1.0 and points[1]["efficiency"] > 0
    assert train["loop"]["ranks"] == 2 and train["loop"]["nodes"] == 2
    # Each node removed its data set and the ranks' train spec.
    for rank in (0, 1):
        folder = tmp_path / f"node{rank}"
        assert not list(folder.glob(".gpunode-accept-train-*"))
        assert not list(folder.glob("train-spec-*"))


def test_a_node_without_its_data_path_runs_no_loop_and_says_why(tmp_path: Path) -> None:
    spec = lab_spec(tmp_path / "absent")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    loop = prepare_loop(str(tmp_path / "spec.json"), [1 << 16])
    assert loop["file"] is None and loop["storage"] is None
    assert loop["error"] == f"no data path {tmp_path / 'absent'} here"
    assert prepare_loop(str(tmp_path / "nothing.json"), [1])["error"].startswith("cannot read spec")


def test_runner_refuses_a_bad_spec(tmp_path: Path, runner_pyz: Path) -> None:
    (tmp_path / "spec.json").write_text("{not json")
    proc = subprocess.run(
        [
            sys.executable,
            str(runner_pyz),
            "run",
            "--spec",
            str(tmp_path / "spec.json"),
            "--out",
            str(tmp_path / "o.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "cannot read spec" in proc.stderr


def test_pattern_fill_and_check_across_chunks(runner_pyz: Path) -> None:
    python = torch_python()
    if python is None:
        pytest.skip("no Python with torch (set GPUNODE_TORCH_PYTHON)")
    script = f"""
import sys, torch
sys.path.insert(0, {str(runner_pyz)!r})
from toolkit.acceptance.node_runner import collective as nr
nr.PATTERN_CHUNK = 5
buf = torch.zeros(23)
nr.fill_pattern(torch, buf, 3.0)
assert buf.tolist()[:8] == [3.0, 6.0, 9.0, 12.0, 15.0, 18.0, 21.0, 3.0], buf.tolist()
print(nr.check_pattern(torch, buf, 3.0))
buf[11] += 0.5
buf[22] = float("nan")
print(nr.check_pattern(torch, buf, 3.0)[0])
"""
    out = subprocess.run([python, "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["(0, 0.0)", "2"]


def test_ranks_check_their_own_pass_where_the_timed_rounds_outgrow_float32(
    tmp_path: Path, runner_pyz: Path
) -> None:
    """2 CPU ranks, 20 iterations after 1 warmup: the timed rounds' sum would pass 2**24, so
    the ranks check one more all-reduce of the pattern (the GPUs' path at their defaults)."""
    python = torch_python()
    if python is None:
        pytest.skip("no Python with torch (set GPUNODE_TORCH_PYTHON)")
    assert reduced_scale(2, 21) is None
    argv = [python, str(runner_pyz), "allreduce", "--nnodes", "1", "--node-rank", "0"]
    argv += ["--nproc", "2", "--device", "cpu", "--master-addr", "127.0.0.1"]
    argv += ["--master-port", str(free_port()), "--iters", "20", "--warmup", "1"]
    argv += ["--sizes", str(1 << 16), "--out", str(tmp_path / "out.json")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["error"] is None and result["ranks"] == 2
    assert [(r["size_bytes"], r["correct"], r["wrong"]) for r in result["rows"]] == [
        (1 << 16, True, 0)
    ]


def test_link_is_sampled_while_the_work_runs(tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    # A stand-in that reports the full link only while the work's marker exists.
    smi.write_text(
        f"#!/bin/sh\nif [ -e {tmp_path}/busy ]; then echo '5, 16'; else echo '1, 16'; fi\n"
    )
    smi.chmod(0o755)
    calls = []

    def work() -> None:
        (tmp_path / "busy").touch()
        calls.append(1)
        time.sleep(0.01)

    sample = link_under_load(str(smi), 0, work, settle_s=0.1)
    assert sample == {"gpu": 0, "gen": 5, "width": 16, "error": None}
    assert calls
    assert link_under_load(None, 0, work) is None

    def broken() -> None:
        raise RuntimeError("CUDA error")

    (tmp_path / "busy").unlink()
    failed = link_under_load(str(smi), 1, broken, settle_s=0.05)
    assert failed is not None and failed["error"] == "RuntimeError: CUDA error"
