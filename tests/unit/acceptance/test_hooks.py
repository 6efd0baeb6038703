"""Marking hooks: the exact scontrol/kubectl commands, through a recorded command runner.

The same Slurm hook runs against a real slurmctld in tests/integration/test_04_accept.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from toolkit.acceptance import executors
from toolkit.acceptance.hooks import (
    CommandResult,
    KubernetesHook,
    NodeMark,
    SlurmHook,
    drain_reason,
    parse_scontrol_node,
    run_hooks,
)
from toolkit.errors import AcceptanceError

SHOW = """NodeName={name} Arch=x86_64 CoresPerSocket=1
   NodeAddr=10.0.0.5 NodeHostName=gpu-5 Version=22.05.8
   State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu
{reason}"""


class Recorder:
    """Records every command and answers `scontrol show node` with a scripted state."""

    def __init__(self, state: str = "IDLE", reason: str | None = None, fail: str = "") -> None:
        self.state = state
        self.reason = reason
        self.fail = fail
        self.commands: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.commands.append(list(argv))
        if self.fail and self.fail in argv:
            return CommandResult(1, "", f"error: {self.fail} refused")
        if list(argv[:3]) == ["scontrol", "show", "node"]:
            reason = f"   Reason={self.reason} [root@2026-11-29T10:00:00]" if self.reason else ""
            return CommandResult(0, SHOW.format(name=argv[3], state=self.state, reason=reason), "")
        return CommandResult(0, "", "")


READY = NodeMark("gpu-5", "gpu-5", True)
NOT_READY = NodeMark(
    "gpu-5", "gpu-5", False, ("gpu.count: 7 GPUs != 8 expected", "health.xid: XID 79 on 0000:18:00")
)
REASON = "Reason=gpunode: gpu.count: 7 GPUs != 8 expected; health.xid: XID 79 on 0000:18:00"


@pytest.mark.parametrize(
    ("state", "reason", "mark", "action", "last"),
    [
        (
            "IDLE",
            None,
            NOT_READY,
            "drained",
            ["scontrol", "update", "NodeName=gpu-5", "State=DRAIN", REASON],
        ),
        (
            "IDLE+DRAIN",
            "gpunode: health.ecc: GPU 2",
            NOT_READY,
            "drained",
            ["scontrol", "update", "NodeName=gpu-5", "State=DRAIN", REASON],
        ),
        (
            "IDLE+DRAIN",
            "gpunode: health.ecc: GPU 2",
            READY,
            "resumed",
            ["scontrol", "update", "NodeName=gpu-5", "State=RESUME"],
        ),
        (
            "MIXED+DRAIN",
            "gpunode: slow",
            READY,
            "resumed",
            ["scontrol", "update", "NodeName=gpu-5", "State=RESUME"],
        ),
        ("IDLE+DRAIN", "admin: replace fan", READY, "left", None),
        ("DOWN+DRAIN", "hw ticket 4411", NOT_READY, "left", None),
        ("IDLE", None, READY, "left", None),
        ("ALLOCATED", None, READY, "left", None),
    ],
)
def test_slurm_commands(
    state: str, reason: str | None, mark: NodeMark, action: str, last: list[str] | None
) -> None:
    rec = Recorder(state, reason)
    done = SlurmHook(rec).apply(mark)
    assert done.action == action, done.detail
    assert rec.commands[0] == ["scontrol", "show", "node", "gpu-5"]
    if last is None:
        assert len(rec.commands) == 1, "nothing may change on a node gpunode did not drain"
    else:
        assert rec.commands[1:] == [last]


def test_slurm_never_resumes_someone_elses_drain() -> None:
    rec = Recorder("IDLE+DRAIN", "maintenance by ops")
    done = SlurmHook(rec).apply(READY)
    assert done.action == "left" and "someone else" in done.detail
    assert all("State=RESUME" not in c for c in rec.commands)


def test_slurm_failure_is_reported() -> None:
    rec = Recorder("IDLE", None, fail="State=DRAIN")
    done = SlurmHook(rec).apply(NOT_READY)
    assert done.action == "failed" and "refused" in done.detail


def test_slurm_unknown_node() -> None:
    def runner(argv: Sequence[str]) -> CommandResult:
        return CommandResult(1, "", "Node gpu-9 not found")

    done = SlurmHook(runner).apply(READY)
    assert done.action == "failed" and "not found" in done.detail


@pytest.mark.parametrize(
    ("text", "state", "reason", "drained"),
    [
        (SHOW.format(name="n", state="IDLE", reason=""), "IDLE", None, False),
        (
            SHOW.format(
                name="n",
                state="IDLE+DRAIN",
                reason="   Reason=gpunode: x; y [root@2026-11-29T10:00:00]",
            ),
            "IDLE+DRAIN",
            "gpunode: x; y",
            True,
        ),
        (
            "   State=DOWN+DRAIN+NOT_RESPONDING\n   Reason=Not responding",
            "DOWN+DRAIN+NOT_RESPONDING",
            "Not responding",
            True,
        ),
        ("   State=DRAINED\n", "DRAINED", None, True),
        ("   State=IDLE+CLOUD\n", "IDLE+CLOUD", None, False),
    ],
)
def test_parse_scontrol_node(text: str, state: str, reason: str | None, drained: bool) -> None:
    parsed = parse_scontrol_node(text)
    assert (parsed.state, parsed.reason, parsed.drained) == (state, reason, drained)


def test_parse_scontrol_without_state() -> None:
    with pytest.raises(AcceptanceError):
        parse_scontrol_node("garbage")


def test_drain_reason_is_prefixed_and_short() -> None:
    assert drain_reason([]) == "gpunode: not ready"
    long = drain_reason(["x" * 500])
    assert long.startswith("gpunode: ") and len(long) == 200 and long.endswith("...")
    assert drain_reason(["a:\n  b"]) == "gpunode: a: b"


def test_kubernetes_not_ready_commands() -> None:
    rec = Recorder()
    done = KubernetesHook(rec).apply(NOT_READY)
    assert done.action == "tainted"
    assert rec.commands == [
        ["kubectl", "label", "node", "gpu-5", "gpunode.io/ready=false", "--overwrite"],
        [
            "kubectl",
            "annotate",
            "node",
            "gpu-5",
            "gpunode.io/reason=" + REASON.removeprefix("Reason="),
            "--overwrite",
        ],
        [
            "kubectl",
            "taint",
            "node",
            "gpu-5",
            "gpunode.io/not-ready=gpu.count:NoSchedule",
            "--overwrite",
        ],
    ]


def test_kubernetes_ready_commands_tolerate_missing_taint() -> None:
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> CommandResult:
        calls.append(list(argv))
        if argv[1] == "taint":
            return CommandResult(1, "", 'error: taint "gpunode.io/not-ready:NoSchedule" not found')
        return CommandResult(0, "", "")

    done = KubernetesHook(runner).apply(READY)
    assert done.action == "labelled"
    assert calls == [
        ["kubectl", "label", "node", "gpu-5", "gpunode.io/ready=true", "--overwrite"],
        ["kubectl", "annotate", "node", "gpu-5", "gpunode.io/reason-"],
        ["kubectl", "taint", "node", "gpu-5", "gpunode.io/not-ready:NoSchedule-"],
    ]


def test_kubernetes_label_failure_stops() -> None:
    def runner(argv: Sequence[str]) -> CommandResult:
        return CommandResult(1, "", 'Error from server (NotFound): nodes "gpu-5" not found')

    done = KubernetesHook(runner).apply(READY)
    assert done.action == "failed" and len(done.commands) == 1


def test_run_hooks_order_and_unknown_name() -> None:
    rec = Recorder()
    actions = run_hooks(["kubernetes", "slurm"], [READY, NOT_READY], rec)
    assert [(a.hook, a.action) for a in actions] == [
        ("kubernetes", "labelled"),
        ("kubernetes", "tainted"),
        ("slurm", "left"),
        ("slurm", "drained"),
    ]
    with pytest.raises(AcceptanceError):
        run_hooks(["pbs"], [READY], rec)


def test_a_hook_s_own_runner_runs_its_commands_and_the_others_use_the_default() -> None:
    local, submit_host = Recorder(), Recorder()
    run_hooks(["kubernetes", "slurm"], [NOT_READY], local, {"slurm": submit_host})
    assert {c[0] for c in local.commands} == {"kubectl"}
    assert {c[0] for c in submit_host.commands} == {"scontrol"}


def test_slurm_commands_run_here_without_a_submit_host() -> None:
    # With one, over SSH on it: tests/integration/test_08_slurm.py (the lab's head node).
    local = Recorder()
    with executors.slurm_commands({}, {}, local) as runner:
        assert runner is local
