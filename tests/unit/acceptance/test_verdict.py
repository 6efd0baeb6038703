"""Verdicts: a runner result held against the node's expectation and floors."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance.check import NodeExpectation
from toolkit.acceptance.health_checks import xid_window_start
from toolkit.acceptance.perf_checks import allreduce_checks, normalise_allreduce
from toolkit.acceptance.thresholds import critical_xids
from toolkit.acceptance.verdict import judge
from toolkit.node import nodestate
from toolkit.profile.floors import AcceptanceSpec

DATA = REPO / "tests" / "unit" / "data" / "nccl"
BUS = ["00000000:18:00.0", "00000000:2A:00.0"]


def healthy() -> dict[str, Any]:
    """A runner result of a healthy 2-GPU H100 node (the shape node_runner writes)."""
    gpus = [
        {
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-{i}",
            "bus_id": BUS[i],
            "driver_version": "550.127.05",
            "ecc_uncorrected_volatile": 0,
            "ecc_uncorrected_aggregate": 0,
            "retired_pages_pending": None,
            "remapped_rows": {
                "correctable": 0,
                "uncorrectable": 0,
                "pending": False,
                "failure": False,
            },
            "recovery_action": "None",
            "pcie_gen_current": 5,
            "pcie_gen_max": 5,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
            "pcie_gen_gpu_max": 5,
            "pcie_gen_host_max": 5,
            "throttle_active": 0x1,
        }
        for i in range(2)
    ]
    return {
        "schema": 1,
        "host": "node-1",
        "gpus": {
            "ok": True,
            "error": None,
            "count": 2,
            "list": gpus,
        },
        "versions": {
            "driver_loaded": "550.127.05",
            "driver_proc": "550.127.05",
            "nvml_error": None,
            "nvml_library": None,
            "packages": {"nvidia-driver-550-open": "550.127.05-1", "libnccl2": "2.21.5-1+cuda12.4"},
            "nccl_loaded": None,
        },
        "kernel_log": {"ok": True, "command": "journalctl -k", "error": None, "xid_events": []},
        "state": {"state": "provisioned", "stack_id": "abcdef012345"},
        "cuda_device_count": 0,
        "allreduce": {
            "engine": "torch-gloo",
            "ranks": 2,
            "error": None,
            "rows": [
                {
                    "size_bytes": 1 << 20,
                    "time_us": 900.0,
                    "algbw_gbps": 1.16,
                    "busbw_gbps": 1.16,
                    "wrong": 0,
                    "correct": True,
                },
                {
                    "size_bytes": 16 << 20,
                    "time_us": 9000.0,
                    "algbw_gbps": 1.86,
                    "busbw_gbps": 1.86,
                    "wrong": 0,
                    "correct": True,
                },
            ],
        },
        "gpu_perf": None,
        "data": {
            "path": "/data",
            "size_bytes": 1 << 26,
            "write_mbps": 300.0,
            "read_mbps": 900.0,
            "error": None,
        },
    }


EXPECT = NodeExpectation(
    host="node-1",
    stack_id="abcdef012345",
    gpu_model="H100",
    gpu_count=2,
    driver_version="550.127.05",
    packages={"nvidia-driver-550-open": "550.127.05-1", "libnccl2": "2.21.5-1+cuda12.4"},
    nccl_version="2.21.5",
)
SPEC = AcceptanceSpec.model_validate(
    {
        "allreduce": [{"size": "16MiB", "min_busbw_gbps": 0.5}],
        "min_data_read_mbps": 100,
        "min_data_write_mbps": 100,
    }
)


def test_healthy_node_is_ready() -> None:
    verdict = judge(healthy(), EXPECT, SPEC)
    assert verdict.ready, verdict.reasons()
    names = {c.name for c in verdict.checks}
    assert {
        "gpu.count",
        "gpu.model",
        "versions.installed",
        "versions.driver_loaded",
        "health.ecc",
        "health.row_remap",
        "health.retired_pages",
        "health.recovery_action",
        "health.pcie",
        "health.throttle",
        "health.xid",
        "allreduce.correctness",
        "allreduce.busbw@16MiB",
        "data.read",
        "data.write",
        "stack_id",
    } <= names


def _gpu(i: int, **values: Any) -> Callable[[dict[str, Any]], None]:
    def change(r: dict[str, Any]) -> None:
        r["gpus"]["list"][i].update(values)

    return change


def _drop_gpu(r: dict[str, Any]) -> None:
    r["gpus"]["list"].pop()
    r["gpus"]["count"] = 1


def _xid(code: int) -> Callable[[dict[str, Any]], None]:
    def change(r: dict[str, Any]) -> None:
        r["kernel_log"]["xid_events"] = [
            {"bus_id": "0000:18:00", "xid": code, "line": f"NVRM: Xid (PCI:0000:18:00): {code}"}
        ]

    return change


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(r: dict[str, Any]) -> None:
        node = r
        keys = path.split(".")
        for key in keys[:-1]:
            node = node[int(key)] if key.isdigit() else node[key]
        last = keys[-1]
        node[int(last) if last.isdigit() else last] = value

    return change


FAULTS: list[tuple[str, Callable[[dict[str, Any]], None], str, str]] = [
    ("missing gpu", _drop_gpu, "gpu.count", "1 GPUs != 2 expected"),
    ("wrong model", _gpu(1, name="NVIDIA A100-SXM4-80GB"), "gpu.model", "A100"),
    (
        "ecc volatile",
        _gpu(0, ecc_uncorrected_volatile=3, ecc_uncorrected_aggregate=3),
        "health.ecc",
        "ecc.errors.uncorrected.volatile.total = 3",
    ),
    (
        "row remap pending",
        _set("gpus.list.0.remapped_rows.pending", True),
        "health.row_remap",
        "GPU 0 (00000000:18:00.0): remapped_rows.pending = Yes: a row remap waits",
    ),
    (
        "row remap failure",
        _set("gpus.list.1.remapped_rows.failure", True),
        "health.row_remap",
        "remapped_rows.failure = Yes: a row remapping failed: the GPU meets NVIDIA's RMA policy",
    ),
    (
        "pages pending",
        _gpu(0, retired_pages_pending=True),
        "health.retired_pages",
        "retired_pages.pending = Yes",
    ),
    (
        "recovery action",
        _gpu(1, recovery_action="Reboot"),
        "health.recovery_action",
        "gpu_recovery_action = Reboot",
    ),
    (
        "pcie max",
        _gpu(1, pcie_gen_max=3, pcie_width_max=8, pcie_gen_current=3, pcie_width_current=8),
        "health.pcie",
        "max link Gen3 < Gen5",
    ),
    ("thermal", _gpu(0, throttle_active=0x40), "health.throttle", "HW thermal slowdown"),
    ("xid", _xid(119), "health.xid", "XID 119 on 0000:18:00"),
    (
        "kernel log",
        _set("kernel_log", {"ok": False, "error": "no journal"}),
        "health.xid",
        "kernel log unreadable",
    ),
    (
        "nvml mismatch",
        _set("versions.nvml_error", "Failed to initialize NVML: Driver/library version mismatch"),
        "versions.driver_loaded",
        "Driver/library version mismatch",
    ),
    (
        "old driver loaded",
        _set("versions.driver_loaded", "550.90.07"),
        "versions.driver_loaded",
        "loaded 550.90.07",
    ),
    (
        "package drift",
        _set("versions.packages.libnccl2", "2.23.4-1+cuda12.6"),
        "versions.installed",
        "libnccl2: installed 2.23.4-1+cuda12.6, pinned 2.21.5-1+cuda12.4",
    ),
    (
        "package missing",
        _set("versions.packages.libnccl2", None),
        "versions.installed",
        "installed none",
    ),
    (
        "nvidia-smi fails",
        _set("gpus", {"ok": False, "error": "No devices were found"}),
        "gpu.query",
        "No devices were found",
    ),
    (
        "wrong values",
        _set(
            "allreduce.rows.1",
            {"size_bytes": 16 << 20, "busbw_gbps": 2.0, "wrong": 12, "correct": False},
        ),
        "allreduce.correctness",
        "12 wrong values (sizes 16MiB)",
    ),
    (
        "slow",
        _set("allreduce.rows.1.busbw_gbps", 0.2),
        "allreduce.busbw@16MiB",
        "busbw 0.200 GB/s < floor 0.5 GB/s at 16MiB",
    ),
    (
        "size missing",
        _set(
            "allreduce.rows",
            [{"size_bytes": 1 << 20, "busbw_gbps": 1.0, "wrong": 0, "correct": True}],
        ),
        "allreduce.busbw@16MiB",
        "size 16MiB was not measured",
    ),
    (
        "allreduce error",
        _set("allreduce.error", "rank 1: exit 1"),
        "allreduce.run",
        "rank 1: exit 1",
    ),
    ("slow disk", _set("data.write_mbps", 12.5), "data.write", "12.50 MB/s < floor 100"),
    (
        "no data",
        _set("data", {"error": "/data does not exist"}),
        "data.run",
        "/data does not exist",
    ),
    (
        "stack drift",
        _set("state.stack_id", "999999999999"),
        "stack_id",
        "installed 999999999999 != inventory abcdef012345",
    ),
    ("never provisioned", _set("state", None), "stack_id", "no /etc/gpunode/state.json"),
]


@pytest.mark.parametrize(("label", "change", "check", "text"), FAULTS, ids=[f[0] for f in FAULTS])
def test_each_fault_fails_its_check_only(
    label: str, change: Callable[[dict[str, Any]], None], check: str, text: str
) -> None:
    result = healthy()
    change(result)
    verdict = judge(result, EXPECT, SPEC)
    assert not verdict.ready
    failed = {c.name: c for c in verdict.failed}
    assert check in failed, verdict.reasons()
    assert text in failed[check].message
    others = set(failed) - {check, "allreduce.busbw@16MiB"}
    assert not others, f"{label} also failed {others}"


def test_ignored_xid_does_not_fail() -> None:
    result = healthy()
    _xid(13)(result)
    assert judge(result, EXPECT, SPEC).ready


def test_every_failed_check_is_reported() -> None:
    result = healthy()
    _drop_gpu(result)
    _xid(79)(result)
    _set("allreduce.rows.1.busbw_gbps", 0.1)(result)
    verdict = judge(result, EXPECT, SPEC)
    assert {c.name for c in verdict.failed} == {"gpu.count", "health.xid", "allreduce.busbw@16MiB"}
    slow = next(c for c in verdict.failed if c.name == "allreduce.busbw@16MiB")
    assert (slow.measured, slow.floor, slow.unit) == (0.1, 0.5, "GB/s")
    assert verdict.to_dict()["verdict"] == "not-ready"


def test_no_result_is_not_ready_with_the_reason() -> None:
    verdict = judge(None, EXPECT, SPEC, runner_error="node-1: connection refused")
    assert verdict.reasons() == ["runner: node-1: connection refused"]


def test_gpu_floors_without_a_usable_cuda_device_fail() -> None:
    spec = AcceptanceSpec(min_gemm_tflops=500)
    verdict = judge(healthy(), EXPECT, spec)
    assert "gpu_perf.run" in {c.name for c in verdict.failed}


def test_gpu_perf_floors_and_straggler() -> None:
    result = healthy()
    result["cuda_device_count"] = 4
    result["gpu_perf"] = {
        "error": None,
        "gemm": [{"gpu": i, "tflops": t} for i, t in enumerate([700.0, 705.0, 690.0, 520.0])],
        "mem_bw": [{"gpu": i, "gbps": 2900.0} for i in range(4)],
        "h2d": [{"gpu": i, "gbps": g} for i, g in enumerate([53.0, 54.0, 40.0, 53.5])],
    }
    spec = AcceptanceSpec(min_gemm_tflops=500, min_mem_bw_gbps=1905, min_h2d_gbps=48)
    failed = {c.name: c for c in judge(result, EXPECT, spec).failed}
    assert set(failed) == {"gemm.straggler", "h2d.gpu2", "h2d.straggler"}
    assert "GPU 3 520.0 TFLOPS" in failed["gemm.straggler"].message
    assert failed["h2d.gpu2"].measured == 40.0 and failed["h2d.gpu2"].floor == 48


def test_nccl_loaded_must_match_the_pin() -> None:
    result = healthy()
    result["versions"]["nccl_loaded"] = "2.20.5"
    failed = {c.name for c in judge(result, EXPECT, SPEC).failed}
    assert failed == {"versions.nccl_loaded"}


def test_nccl_tests_output_is_normalised_to_the_same_rows() -> None:
    section = {
        "engine": "nccl-tests",
        "raw_output": (DATA / "current_wrong_failed.txt").read_text(),
        "error": None,
    }
    data = normalise_allreduce(section)
    assert [r["size_bytes"] for r in data["rows"]] == [1 << 20, 16 << 20, 256 << 20, 4 << 30]
    row = data["rows"][2]
    assert row["busbw_gbps"] == 270.24 and row["wrong"] == 1048580 and row["correct"] is False
    assert data["ranks"] == 4 and data["nccl_version"] == "2.26.2"
    assert "FAILED" in data["error"]


def test_nccl_tests_healthy_rows_pass_floors() -> None:
    section = {"engine": "nccl-tests", "raw_output": (DATA / "h200_8gpu_json.json").read_text()}
    # The JSON document is not text: the runner ships text, so this is refused cleanly.
    checks = allreduce_checks(section, [])
    assert checks[0].name == "allreduce.run" and not checks[0].ok


def test_unvalidated_nccl_tests_output_fails_correctness() -> None:
    section = {"engine": "nccl-tests", "raw_output": (DATA / "srun_padded_na.txt").read_text()}
    checks = {c.name: c for c in allreduce_checks(section, [])}
    assert not checks["allreduce.correctness"].ok
    assert checks["allreduce.correctness"].message == "results were not validated"


def test_result_is_not_mutated() -> None:
    result = healthy()
    before = copy.deepcopy(result)
    judge(result, EXPECT, SPEC)
    assert result == before


# --- PCIe: the maximum and the link under load are judged, the idle link is only shown -----


def _link_result(
    gen_max: int = 5,
    width_max: int = 16,
    idle: tuple[int, int] = (1, 16),
    gpu_max: int | None = 5,
    host_max: int | None = 5,
    under_load: tuple[int, int] | None = None,
) -> dict[str, Any]:
    r = healthy()
    for g in r["gpus"]["list"]:
        g.update(
            pcie_gen_max=gen_max,
            pcie_width_max=width_max,
            pcie_gen_current=idle[0],
            pcie_width_current=idle[1],
            pcie_gen_gpu_max=gpu_max,
            pcie_gen_host_max=host_max,
        )
    if under_load is not None:
        r["gpu_perf"] = {
            "gemm": [],
            "mem_bw": [],
            "h2d": [],
            "pcie_under_load": [
                {"gpu": g["index"], "gen": under_load[0], "width": under_load[1], "error": None}
                for g in r["gpus"]["list"]
            ],
        }
    return r


PCIE_CASES = [
    # label, result, spec keys, ok, text in the message
    ("idle Gen1 is not judged", _link_result(), {}, True, "idle Gen1 x16 (not judged)"),
    ("idle, full under load", _link_result(under_load=(5, 16)), {}, True, "under load Gen5 x16"),
    ("slow under load", _link_result(under_load=(3, 16)), {}, False, "under load Gen3 x16 < max"),
    ("narrow under load", _link_result(under_load=(5, 8)), {}, False, "under load Gen5 x8 < max"),
    (
        "host caps the GPU",
        _link_result(gen_max=4, host_max=4),
        {},
        False,
        "max link Gen4 < Gen5 (GPU max Gen5, host port max Gen4)",
    ),
    (
        "max below the profile",
        _link_result(gen_max=4, gpu_max=None),
        {"pcie_gen": 5},
        False,
        "< Gen5",
    ),
    ("width below the profile", _link_result(width_max=8), {"pcie_width": 16}, False, "x8 < x16"),
    (
        "older driver: no gpumax",
        _link_result(gpu_max=None, host_max=None),
        {},
        True,
        "max Gen5 x16",
    ),
]


@pytest.mark.parametrize(
    ("label", "result", "keys", "ok", "text"), PCIE_CASES, ids=[c[0] for c in PCIE_CASES]
)
def test_pcie_judges_max_and_under_load(
    label: str, result: dict[str, Any], keys: dict[str, Any], ok: bool, text: str
) -> None:
    spec = AcceptanceSpec.model_validate({**SPEC.model_dump(exclude_unset=True), **keys})
    check = next(c for c in judge(result, EXPECT, spec).checks if c.name == "health.pcie")
    assert check.ok is ok, check.message
    assert text in check.message


# --- XIDs: a critical list within a window; every XID is shown -----------------------------


def _xids(
    *events: tuple[int, str | None],
    provisioned: str | None = None,
    boot: str | None = None,
) -> dict[str, Any]:
    r = healthy()
    r["started"] = "2025-06-02T12:00:00Z"
    if provisioned:
        r["state"]["provisioned_at"] = provisioned
    r["kernel_log"]["xid_events"] = [
        {
            "bus_id": "0000:18:00",
            "xid": xid,
            "time": when,
            "boot": boot,
            "line": f"NVRM: Xid ...: {xid}",
        }
        for xid, when in events
    ]
    return r


XID_CASES = [
    ("critical, recent", _xids((79, "2025-06-02T11:00:00Z")), {}, False),
    ("not critical", _xids((13, "2025-06-02T11:00:00Z")), {}, True),
    (
        "critical before the provision",
        _xids((79, "2025-06-01T09:00:00Z"), provisioned="2025-06-01T10:00:00Z"),
        {},
        True,
    ),
    (
        "critical after the provision",
        _xids((119, "2025-06-01T11:00:00Z"), provisioned="2025-06-01T10:00:00Z"),
        {},
        False,
    ),
    (
        "outside the hours window",
        _xids((119, "2025-06-02T09:00:00Z"), provisioned="2025-06-01T10:00:00Z"),
        {"xid_window_h": 2},
        True,
    ),
    ("inside the hours window", _xids((119, "2025-06-02T10:30:00Z")), {"xid_window_h": 2}, False),
    # An XID line without a time: judged when it is from this boot (or its boot is unknown),
    # never when the runner places it in an earlier boot (journalctl's boot markers).
    ("no time, boot unknown: counted", _xids((48, None)), {}, False),
    ("no time, this boot: counted", _xids((48, None), boot="this"), {}, False),
    ("no time, an earlier boot: not judged", _xids((79, None), boot="previous"), {}, True),
    # NVIDIA's Xid catalog: 94 contained ECC error (reset "when convenient"), 154 the GPU's
    # recovery action changed, 95/140 RESET_GPU.
    ("94 contained ECC", _xids((94, "2025-06-02T11:00:00Z")), {}, False),
    ("154 recovery action", _xids((154, "2025-06-02T11:00:00Z")), {}, False),
    ("140 ECC unrecovered", _xids((140, "2025-06-02T11:00:00Z")), {}, False),
    ("the profile's own list", _xids((13, "2025-06-02T11:00:00Z")), {"critical_xids": [13]}, False),
    # NVLink5 (B100/GB200): 150 is RESET_GPU for every decode in the catalog; 144-149 depend on
    # the intrInfo/errorStatus decode (or are IGNORE for every decode): shown, not failed.
    ("150 NVLink5 MSE", _xids((150, "2025-06-02T11:00:00Z")), {}, False),
    ("144 NVLink5 SAW, decode-dependent", _xids((144, "2025-06-02T11:00:00Z")), {}, True),
    ("149 NVLink5 NETIR, decode-dependent", _xids((149, "2025-06-02T11:00:00Z")), {}, True),
]


@pytest.mark.parametrize(
    ("label", "result", "keys", "ok"), XID_CASES, ids=[c[0] for c in XID_CASES]
)
def test_xid_window_and_critical_list(
    label: str, result: dict[str, Any], keys: dict[str, Any], ok: bool
) -> None:
    spec = AcceptanceSpec.model_validate({**SPEC.model_dump(exclude_unset=True), **keys})
    check = next(c for c in judge(result, EXPECT, spec).checks if c.name == "health.xid")
    assert check.ok is ok, check.message
    xid = result["kernel_log"]["xid_events"][0]["xid"]
    assert f"XID {xid} on 0000:18:00" in check.message  # every XID is shown, judged or not


def test_xid_window_is_the_later_of_provision_and_hours() -> None:
    result = _xids(provisioned="2025-06-02T11:30:00Z")
    spec = AcceptanceSpec.model_validate({"xid_window_h": 2})
    start, why = xid_window_start(result, spec)
    assert start is not None and start.isoformat() == "2025-06-02T11:30:00+00:00"
    assert "provision" in why
    start, why = xid_window_start(_xids(provisioned="2025-06-01T00:00:00Z"), spec)
    assert start is not None and start.isoformat() == "2025-06-02T10:00:00+00:00"
    assert xid_window_start(_xids(), AcceptanceSpec()) == (None, "since boot")


def test_xids_a_passive_check_acted_on_are_history_to_a_re_acceptance() -> None:
    # A check turned the node not ready at 11:30 for the XID of 11:00 (Slurm drained it); the
    # fault is cleared and acceptance runs again: that XID does not count, a later one does.
    result = _xids((119, "2025-06-02T11:00:00Z"), provisioned="2025-06-01T00:00:00Z")
    turned = "2025-06-02T11:30:00+00:00"
    result["state"] |= {"state": "not-ready", "reason": ["check: health.xid: 1"], "time": turned}
    start, why = xid_window_start(result, AcceptanceSpec())
    assert start is not None and start.isoformat() == turned and "passive check" in why
    check = next(c for c in judge(result, EXPECT, SPEC).checks if c.name == "health.xid")
    assert check.ok and "not judged: outside the window" in check.message
    later = _xids((119, "2025-06-02T11:45:00Z"), provisioned="2025-06-01T00:00:00Z")
    later["state"] |= {"state": "not-ready", "reason": ["check: health.xid: 1"], "time": turned}
    assert not next(c for c in judge(later, EXPECT, SPEC).checks if c.name == "health.xid").ok
    # Not ready for acceptance's own reasons: the window stays the provision's.
    failed = _xids((119, "2025-06-02T11:00:00Z"), provisioned="2025-06-01T00:00:00Z")
    failed["state"] |= {"state": "not-ready", "reason": ["health.xid: 1"], "time": turned}
    assert not next(c for c in judge(failed, EXPECT, SPEC).checks if c.name == "health.xid").ok


def test_an_xid_of_the_second_a_check_turned_the_node_is_judged_by_the_lines_it_read() -> None:
    # Seen in test_08 under load: the XID was logged at 09:30:38.23, the health check read it
    # and turned the node not ready at 09:30:38.9; both are written in whole seconds. The
    # check's state names the lines it had read from the second it started (turned_seen).
    base = {"time": "2026-12-06T09:30:38Z", "aer": {}, "xid_seen": ["NVRM: Xid ...: 119"]}
    ready = {"state": "ready", "reason": [], "stack_id": "abc", "provisioned_at": "2026-12-01"}
    turned = nodestate.after_check(ready, ["health.xid: 1 critical XID(s)"], base)
    assert turned["turned_seen"] == ["NVRM: Xid ...: 119"] and turned["time"] >= base["time"]
    result = _xids((119, turned["time"]))
    result["state"] = turned
    check = next(c for c in judge(result, EXPECT, SPEC).checks if c.name == "health.xid")
    assert check.ok, check.message
    assert "(not judged: read by the passive check that turned the node not ready)" in (
        check.message
    )
    # A line of that second the check had not read is new: it fails the re-acceptance.
    result["kernel_log"]["xid_events"][0]["line"] = "NVRM: Xid ...: 119, a later line"
    assert not next(c for c in judge(result, EXPECT, SPEC).checks if c.name == "health.xid").ok
    # The acceptance's verdict replaces the check's standing, and its lines with it.
    accepted = nodestate.after_acceptance(
        turned,
        passed=True,
        reasons=[],
        accepted_stack_id="abc",
        run_id="r2",
        now=datetime(2026, 12, 6, 9, 31, tzinfo=timezone.utc),
        valid_hours=24,
    )
    assert accepted["state"] == "ready" and "turned_seen" not in accepted


def test_critical_xids_carry_their_sources() -> None:
    table = critical_xids()
    assert {48, 79, 94, 95, 119, 154}.issubset(table) and not {13, 31, 43} & set(table)
    assert all(entry.sources and entry.name and entry.action for entry in table.values())
    # The catalog's reset/reboot class is all there (immediate action RESET_GPU, RESTART_BM).
    assert {46, 62, 64, 109, 110, 120, 136, 140, 143, 155, 156, 158} <= set(table)
    assert table[79].action == "RESTART_BM" and table[95].action == "RESET_GPU"


def test_xid_messages_name_the_xid_and_nvidias_action() -> None:
    result = _xids((154, "2025-06-02T11:00:00Z"))
    result["kernel_log"]["xid_events"].append(
        {"bus_id": "0000:2a:00", "xid": 79, "time": None, "boot": "previous", "line": "..."}
    )
    check = next(c for c in judge(result, EXPECT, SPEC).checks if c.name == "health.xid")
    assert not check.ok and check.measured == [154]
    assert (
        "XID 154 on 0000:18:00 at 2025-06-02T11:00:00Z (GPU Recovery Action Changed; "
        "NVIDIA's action: XID_154)" in check.message
    )
    assert "XID 79 on 0000:2a:00 an earlier boot (not judged: an earlier boot)" in check.message


def test_a_row_remapped_long_ago_is_ready() -> None:
    """Review N6a: a GPU whose uncorrectable error was remapped and reset long ago (aggregate
    and remapped counts above 0, volatile 0, nothing pending, no failure) is ready, and its
    history is shown."""
    result = healthy()
    result["gpus"]["list"][1].update(
        ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=2,
        remapped_rows={"correctable": 0, "uncorrectable": 1, "pending": False, "failure": False},
        recovery_action="None",
    )
    verdict = judge(result, EXPECT, SPEC)
    assert verdict.ready, verdict.reasons()
    ecc = next(c for c in verdict.checks if c.name == "health.ecc")
    assert "GPU 1 (00000000:2A:00.0): aggregate uncorrectable ECC 2" in ecc.message
    assert "rows remapped (uncorrectable) 1" in ecc.message
    assert "history, not judged" in ecc.message


def test_unreported_counters_are_shown_not_failed() -> None:
    result = healthy()
    for gpu in result["gpus"]["list"]:
        gpu.update(
            ecc_uncorrected_volatile=None,
            ecc_uncorrected_aggregate=None,
            remapped_rows=None,
            recovery_action=None,
        )
    verdict = judge(result, EXPECT, SPEC)
    assert verdict.ready, verdict.reasons()
    checks = {c.name: c for c in verdict.checks}
    assert "not reported: gpu_recovery_action on GPU 0" in checks["health.recovery_action"].message
    assert "remapped_rows.failure on GPU 0" in checks["health.row_remap"].message
    result["gpus"]["memory_error"] = "nvidia-smi -q exited 15"
    check = next(c for c in judge(result, EXPECT, SPEC).checks if c.name == "health.ecc")
    assert check.ok and "(nvidia-smi -q: nvidia-smi -q exited 15)" in check.message


TOPO = (REPO / "tests" / "unit" / "data" / "topo" / "h100-sxm-8.txt").read_text()


def _topology_spec(rules: object) -> AcceptanceSpec:
    return AcceptanceSpec.model_validate({**SPEC.model_dump(), "topology": rules})


def test_topology_checks_follow_the_profile_rules() -> None:
    result = {**healthy(), "topology": {"raw_output": TOPO, "error": None}}
    verdict = judge(result, EXPECT, _topology_spec({"gpu_link": "NV18", "numa_balanced": True}))
    checks = {c.name: c for c in verdict.checks if c.name.startswith("topology.")}
    assert set(checks) == {"topology.gpu_link", "topology.numa_balanced"}
    assert all(c.ok for c in checks.values()) and verdict.ready
    # No rules, no check (the section is kept for the report all the same).
    assert not [c for c in judge(result, EXPECT, SPEC).checks if c.name.startswith("topology")]


def test_topology_failure_names_the_pair_the_link_and_the_rule() -> None:
    cut = TOPO.replace(
        "GPU2    NV18    NV18     X      NV18    NV18    NV18    NV18    NV18",
        "GPU2    NV18    NV18     X      NV18    NV18    NV18    SYS     NV18",
    )
    result = {**healthy(), "topology": {"raw_output": cut, "error": None}}
    verdict = judge(result, EXPECT, _topology_spec({"gpu_link": "NV18"}))
    [failed] = verdict.failed
    assert failed.name == "topology.gpu_link"
    assert failed.message == (
        "1 of 28 GPU pairs farther than NV18: GPU2-GPU6 SYS (rule: NVLink with at least 18 links)"
    )
    assert failed.measured == [{"pair": ["GPU2", "GPU6"], "link": "SYS"}]
    assert failed.floor == "NV18"
    assert verdict.reasons() == [f"topology.gpu_link: {failed.message}"]


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (None, "nvidia-smi topo -m was not run"),
        ({"raw_output": "", "error": "exited 9"}, "nvidia-smi topo -m failed: exited 9"),
        (
            {"raw_output": "GPU0 GPU1\nGPU0 X NV18\n\nLegend:\n", "error": None},
            "nvidia-smi topo -m output unreadable: line 1: the header names GPU1 but no such",
        ),
    ],
)
def test_topology_missing_or_unreadable_fails_when_rules_ask(
    section: dict[str, Any] | None, message: str
) -> None:
    result = healthy()
    if section is not None:
        result["topology"] = section
    verdict = judge(result, EXPECT, _topology_spec({"nic_gpu_link": "PXB"}))
    [failed] = verdict.failed
    assert failed.name == "topology.read" and failed.message.startswith(message), failed.message


@pytest.mark.parametrize("xid", [144, 145, 146, 147, 148, 149])
def test_nvlink5_xids_are_shown_with_their_name_and_why_they_are_not_judged(xid: int) -> None:
    check = next(
        c
        for c in judge(_xids((xid, "2025-06-02T11:00:00Z")), EXPECT, SPEC).checks
        if c.name == "health.xid"
    )
    assert check.ok, check.message
    assert "NVLINK: " in check.message and "WORKFLOW_NVLINK5_ERR" in check.message
    assert "depends on the message's decode" in check.message


def test_nvlink5_xid_150_fails_with_the_catalogs_reset() -> None:
    check = next(
        c
        for c in judge(_xids((150, "2025-06-02T11:00:00Z")), EXPECT, SPEC).checks
        if c.name == "health.xid"
    )
    assert not check.ok and check.failure_class == "hardware"
    assert "NVLINK: MSE Error" in check.message and "nvidia-smi -r" in (check.action or "")
