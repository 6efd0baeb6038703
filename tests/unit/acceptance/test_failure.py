"""Failure classes and next actions (issue 38, item 3): every failed check is classed
(configuration, hardware, transient, harness) with the recommended action and its source;
XIDs follow NVIDIA's Xid catalog (IGNORE XIDs shown, never failed by default); DCGM failures
follow DCGM's severity; the class leads gpunode's Slurm reason, and the older classless reason
is still gpunode's; ``up --accept-only`` leaves a node held for hardware."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance import failure
from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.executors.slurm import drained_by_gpunode
from toolkit.acceptance.hooks import (
    KubernetesHook,
    NodeMark,
    SlurmHook,
    drain_reason,
    is_gpunode_reason,
)
from toolkit.acceptance.thresholds import critical_xids
from toolkit.acceptance.verdict import judge
from toolkit.check.healthcheck import XidName
from toolkit.check.plan import HEALTHCHECK_MODULES
from toolkit.lab import faults
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.inventory import lab_profile
from toolkit.node import nodestate
from toolkit.profile.floors import AcceptanceSpec, DcgmDiagSpec
from toolkit.report.junit import render_junit
from toolkit.steps import up as up_step
from unit.acceptance.test_hooks import Recorder
from unit.acceptance.test_verdict import EXPECT, SPEC, _xids, healthy

REAL = REPO / "tests" / "data" / "real"
DCGM_ALLOWED = REAL / "dcgm" / "dcgm4-glimmer-gb10-level2-plugins-allowed.json"
DRAINED = (REAL / "slurm" / "scontrol-show-node-drained.txt").read_text()


def _ecc_fault(result: dict[str, Any]) -> None:
    """What the lab's `ecc` fault leaves on one GPU: uncorrectable ECC errors since the driver
    loaded and a pending row remap (toolkit/lab/hardware.py)."""
    gpu = result["gpus"]["list"][1]
    gpu.update(
        ecc_uncorrected_volatile=faults.ECC_FAULT_UNCORRECTED,
        ecc_uncorrected_aggregate=faults.ECC_FAULT_UNCORRECTED,
    )
    gpu["remapped_rows"].update(pending=True, uncorrectable=1)


def test_the_ecc_fault_fails_as_hardware_with_nvidias_actions() -> None:
    result = healthy()
    _ecc_fault(result)
    verdict = judge(result, EXPECT, SPEC)
    failed = {c.name: c for c in verdict.failed}
    assert set(failed) == {"health.ecc", "health.row_remap"}
    assert {c.failure_class for c in failed.values()} == {"hardware"}
    assert failed["health.ecc"].action == "reset the GPU (nvidia-smi -r) or reboot the node"
    assert (
        failed["health.row_remap"].action == "reset the GPU (nvidia-smi -r) to activate the remap"
    )
    assert "NVIDIA GPU Memory Error Management" in str(failed["health.row_remap"].action_source)
    assert verdict.failure_class == "hardware"
    document = verdict.to_dict()
    assert document["failure_class"] == "hardware"
    ecc = next(f for f in document["failed_checks"] if f["check"] == "health.ecc")
    assert (ecc["failure_class"], ecc["action"]) == ("hardware", failed["health.ecc"].action)
    assert verdict.advised_reasons()[0].endswith(
        "-> [hardware] reset the GPU (nvidia-smi -r) or reboot the node"
    )


def test_a_passed_check_has_no_class_and_a_failed_one_always_has() -> None:
    verdict = judge(healthy(), EXPECT, SPEC)
    assert verdict.ready and verdict.failure_class is None
    assert all(c.failure_class is None and c.action is None for c in verdict.checks)
    odd = Check("something.new", False, "what no rule names")
    assert (odd.failure_class, odd.action) == (
        failure.DEFAULT.failure_class,
        failure.DEFAULT.action,
    )


@pytest.mark.parametrize("xid", [63, 92])
def test_an_xid_the_catalog_says_to_ignore_is_shown_and_the_node_stays_ready(xid: int) -> None:
    assert critical_xids()[xid].action == "IGNORE"
    verdict = judge(_xids((xid, "2025-06-02T11:00:00Z")), EXPECT, SPEC)
    assert verdict.ready, verdict.reasons()
    check = next(c for c in verdict.checks if c.name == "health.xid")
    assert check.ok and check.measured == []
    assert f"XID {xid} on 0000:18:00 at 2025-06-02T11:00:00Z" in check.message
    assert "(not judged: NVIDIA's catalog says to ignore it)" in check.message
    assert "NVIDIA's action: IGNORE" in check.message


def test_a_stricter_profile_still_fails_an_ignored_xid() -> None:
    strict = SPEC.model_copy(update={"critical_xids": [63, 79]})
    verdict = judge(_xids((63, "2025-06-02T11:00:00Z")), EXPECT, strict)
    check = next(c for c in verdict.failed if c.name == "health.xid")
    assert check.measured == [63] and "NVIDIA's action: IGNORE" in check.message


@pytest.mark.parametrize(
    ("xid", "todo"),
    [
        (48, "reset the GPU or reboot the node (XID 48 workflow)"),
        (79, "reboot the node"),
        (94, "restart the application, and reset the GPU (nvidia-smi -r) before the node takes"),
        (95, "reset the GPU (nvidia-smi -r)"),
        (119, "reset the GPU (nvidia-smi -r)"),
        (54, "check mechanicals"),
    ],
)
def test_hardware_xids_are_classed_hardware_with_the_catalogs_action(xid: int, todo: str) -> None:
    verdict = judge(_xids((xid, "2025-06-02T11:00:00Z")), EXPECT, SPEC)
    check = next(c for c in verdict.failed if c.name == "health.xid")
    assert check.failure_class == "hardware"
    assert str(check.action).startswith(f"XID {xid}: {todo}")
    assert check.action_source == failure.XID_CATALOG


def test_an_application_xid_is_transient_and_a_hardware_one_leads() -> None:
    verdict = judge(_xids((69, "2025-06-02T11:00:00Z")), EXPECT, SPEC)
    check = next(c for c in verdict.failed if c.name == "health.xid")
    assert (check.failure_class, check.action) == (
        "transient",
        "XID 69: restart the application: re-accept",
    )
    both = judge(_xids((69, "2025-06-02T11:00:00Z"), (79, "2025-06-02T11:30:00Z")), EXPECT, SPEC)
    check = next(c for c in both.failed if c.name == "health.xid")
    assert (check.failure_class, check.action) == ("hardware", "XID 79: reboot the node")


def test_every_catalogued_xid_has_a_class_and_an_action() -> None:
    for number, xid in critical_xids().items():
        assert xid.failure_class in failure.CLASSES, number
        assert xid.todo, number


def test_dcgm_persistence_mode_config_is_a_configuration_failure() -> None:
    result: dict[str, Any] = {
        "gpus": {"ok": True, "list": [], "count": 0},
        "dcgm": {"level": 2, "raw_output": DCGM_ALLOWED.read_text(), "rc": 226, "error": None},
    }
    spec = lab_profile().acceptance.model_copy(update={"dcgm_diag": DcgmDiagSpec(level=2)})
    verdict = judge(result, NodeExpectation(host="n1", stack_id="s"), spec)
    software = next(c for c in verdict.checks if c.name == "dcgm.software")
    assert not software.ok and "DCGM_FR_PERSISTENCE_MODE, severity CONFIG" in software.message
    assert software.failure_class == "configuration"
    assert software.action == "run gpunode provision, then re-accept"
    assert "dcgm_errors.h" in str(software.action_source)


@pytest.mark.parametrize(
    ("severity", "expected"),
    [
        ("CONFIG", "configuration"),
        ("RESET", "hardware"),
        ("ISOLATE", "hardware"),
        ("TRIAGE", "hardware"),
        ("MONITOR", "transient"),
    ],
)
def test_dcgm_severities_map_to_classes(severity: str, expected: str) -> None:
    assert failure.DCGM_SEVERITY[severity].failure_class == expected


@pytest.mark.parametrize(
    ("change", "check"),
    [
        (lambda r: r["versions"].update(driver_loaded="550.90.07"), "versions.driver_loaded"),
        (
            lambda r: r["versions"]["packages"].update(libnccl2="2.20.3-1+cuda12.4"),
            "versions.installed",
        ),
        (lambda r: r["state"].update(stack_id="0123456789ab"), "stack_id"),
    ],
)
def test_what_gpunode_owns_is_configuration_and_never_rma(change: Any, check: str) -> None:
    result = healthy()
    change(result)
    failed = next(c for c in judge(result, EXPECT, SPEC).failed if c.name == check)
    assert failed.failure_class == "configuration"
    assert "gpunode provision" in str(failed.action) and "support" not in str(failed.action)


def test_a_runner_that_gave_nothing_is_the_harness() -> None:
    verdict = judge(None, EXPECT, SPEC, runner_error="node-1: connection refused")
    assert verdict.failure_class == "harness"


# --- the scheduler's reason -------------------------------------------------------------------


HW = NodeMark("gpu-5", "gpu-5", False, ("health.ecc: GPU 1",), failure_class="hardware")


def test_the_class_leads_the_drain_reason_and_the_annotation() -> None:
    assert drain_reason(["health.ecc: GPU 1"], "hardware") == "gpunode[hardware]: health.ecc: GPU 1"
    rec = Recorder()
    assert SlurmHook(rec).apply(HW).action == "drained"
    assert rec.commands[-1][-1] == "Reason=gpunode[hardware]: health.ecc: GPU 1"
    annotate = KubernetesHook(Recorder()).commands(HW)[1]
    assert annotate[4] == "gpunode.io/reason=gpunode[hardware]: health.ecc: GPU 1"


@pytest.mark.parametrize(
    ("reason", "ours"),
    [
        ("gpunode: health.xid: 1 critical XID(s)", True),  # written before the class
        ("gpunode[hardware]: health.ecc: GPU 1", True),
        ("gpunode[configuration]: versions.installed: x", True),
        ("gpunode[transient]: x", True),
        ("gpunode[harness]: runner: x", True),
        ("gpunode[rma]: x", False),
        ("gpunodes: x", False),
        ("admin: gpunode[hardware]: x", False),
        ("maintenance window", False),
        ("", False),
        (None, False),
    ],
)
def test_gpunode_s_reasons_old_and_new_and_nobody_else_s(reason: str | None, ours: bool) -> None:
    assert is_gpunode_reason(reason) is ours


@pytest.mark.parametrize(
    "reason", ["gpunode: health.ecc: GPU 2", "gpunode[hardware]: health.ecc: GPU 2"]
)
def test_a_node_drained_by_gpunode_old_or_new_is_resumed_when_ready(reason: str) -> None:
    rec = Recorder("IDLE+DRAIN", reason)
    done = SlurmHook(rec).apply(NodeMark("gpu-5", "gpu-5", True))
    assert done.action == "resumed"
    assert rec.commands[-1] == ["scontrol", "update", "NodeName=gpu-5", "State=RESUME"]


def test_a_real_drained_node_with_a_classed_gpunode_reason_is_gpunode_s() -> None:
    text = DRAINED.replace("Reason=maintenance window", "Reason=gpunode[hardware]: health.ecc: x")
    assert drained_by_gpunode(text) == "gpunode[hardware]: health.ecc: x"
    someone = DRAINED.replace("Reason=maintenance window", "Reason=gpunode[ops]: replace fan")
    assert drained_by_gpunode(someone) is None
    assert SlurmHook(Recorder("IDLE+DRAIN", "gpunode[ops]: fan")).apply(
        NodeMark("gpu-5", "gpu-5", True)
    ).action == ("left")


# --- the node state and up --accept-only -------------------------------------------------------


def _after(passed: bool, failure_class: str | None, state: Any = None) -> dict[str, Any]:
    return nodestate.after_acceptance(
        state or {"state": "provisioned", "stack_id": "s1"},
        passed=passed,
        reasons=[] if passed else ["health.ecc: x -> [hardware] reset the GPU"],
        accepted_stack_id="s1",
        run_id="r1",
        now=datetime(2026, 1, 1, tzinfo=timezone.utc),
        valid_hours=24,
        failure_class=failure_class,
    )


def test_the_state_keeps_the_failure_class_only_while_not_ready() -> None:
    held = _after(False, "hardware")
    assert held["state"] == "not-ready" and held["failure_class"] == "hardware"
    assert "failure_class" in nodestate.KEYS
    again = _after(True, None, held)
    assert again["state"] == "ready" and "failure_class" not in again
    # A passing verdict for another stack than the installed one is a configuration's.
    other = _after(True, None, {"state": "provisioned", "stack_id": "s0"})
    assert other["state"] == "not-ready" and other["failure_class"] == "configuration"


def test_accept_only_re_accepts_what_can_heal_and_reports_a_hardware_hold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nodes = {
        "hw": up_step.NodeUp("hw", "s1", state=_after(False, "hardware")),
        "cfg": up_step.NodeUp("cfg", "s1", state=_after(False, "configuration")),
        "flaky": up_step.NodeUp("flaky", "s1", state=_after(False, "transient")),
    }
    accepted: list[str] = []
    monkeypatch.setattr(up_step, "_survey", lambda *a: ([], sorted(nodes)))
    monkeypatch.setattr(up_step, "_accept", lambda o, i, n, hosts, *a: accepted.extend(hosts))
    found: Any = SimpleNamespace(inventory=None)  # what the precheck read: not read here
    opts = up_step.UpOptions(inventory=tmp_path, engine="host", accept_only=True)
    outcome = up_step.UpOutcome("r", tmp_path, tmp_path, "", "", 0.0, nodes)
    up_step._stages(opts, found, nodes, outcome, up_step._Stop(), lambda _m: None)
    assert accepted == ["cfg", "flaky"]
    stage = nodes["hw"].stages["accept"]
    assert stage.status == "failed"
    assert "failed for hardware" in stage.detail and "[hardware] reset the GPU" in stage.detail
    assert "without --accept-only" in stage.detail
    # Without --accept-only the operator's run re-accepts it.
    accepted.clear()
    forced = up_step.UpOptions(inventory=tmp_path, engine="host")
    up_step._stages(forced, found, nodes, outcome, up_step._Stop(), lambda _m: None)
    assert accepted == ["cfg", "flaky", "hw"]


# --- the health check's settings, the reports, the lab -----------------------------------------


def test_health_check_settings_carry_the_class_and_read_older_settings() -> None:
    # Settings written before the class (name and action only) read as hardware.
    older = XidName(**{"name": "GSP RPC Timeout", "action": "RESET_GPU"})
    assert older.failure_class == "hardware"
    shipped = {
        n: XidName(x.name, x.action, x.failure_class, x.todo) for n, x in critical_xids().items()
    }
    roundtrip = {n: XidName(**json.loads(json.dumps(asdict(x)))) for n, x in shipped.items()}
    assert roundtrip == shipped and roundtrip[63].failure_class == "transient"
    assert "toolkit.acceptance.failure" in HEALTHCHECK_MODULES


def test_junit_failure_names_the_class_and_the_action() -> None:
    result = healthy()
    _ecc_fault(result)
    verdict = judge(result, EXPECT, SPEC)
    summary = {"run_id": "r1", "nodes": [{"host": "node-1", "checks": verdict.to_dict()["checks"]}]}
    text = render_junit(summary)
    assert 'type="hardware"' in text
    assert "next action: reset the GPU (nvidia-smi -r) or reboot the node" in text


def test_the_lab_s_xid63_fault_logs_xid_63_and_the_node_stays_ready() -> None:
    assert faults.KERNEL_LOG_FAULTS["xid63"] == 63 and "xid63" in faults.FAULTS
    hw = NodeHardware.for_node("H100", 2, False, ["xid63"], seed="x", index=0)
    (event,) = hw.xid_events
    assert (event.fault, event.xid) == ("xid63", 63)
    assert ": 63, pid=2417, Row Remapper: New row marked for remapping" in event.kernel_line
    result = _xids((63, "2025-06-02T11:00:00Z"))
    result["kernel_log"]["xid_events"][0]["line"] = event.kernel_line
    assert judge(result, EXPECT, AcceptanceSpec.model_validate(SPEC.model_dump())).ready
