"""Marking hooks, run after the verdict: tell the scheduler which nodes may take work.

- Slurm: a not-ready node is drained with ``Reason="gpunode[<class>]: ..."``, the verdict's
  leading failure class first (``hardware``, ``configuration``, ``transient``, ``harness``:
  ``failure.py``), so an operator sees whether to repair, reprovision or just wait; a ready
  node is resumed only when gpunode drained it (its drain reason starts with ``gpunode[<a
  class>]:``, or ``gpunode:`` as written before the class and without one), never when
  somebody else did (the LBNL NHC rule). A node drained by someone else keeps its reason.
- Kubernetes: label ``gpunode.io/ready=true|false``; a not-ready node gets the taint
  ``gpunode.io/not-ready:NoSchedule`` and the same reason as an annotation; a ready node
  loses the taint.

Commands run through a :class:`CommandRunner` (locally by default: ``scontrol``/``kubectl``
on the control machine, talking to the cluster), so a site can run them elsewhere: acceptance
runs Slurm's on the inventory's submit host (``executors.slurm_commands``), and the node-side
health check (``toolkit.check.healthcheck``) runs this very Slurm hook on the node itself.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from toolkit.acceptance import failure
from toolkit.errors import AcceptanceError

REASON_PREFIX = "gpunode:"
# gpunode's reasons: ``gpunode:`` (written before the failure class, and without a class) or
# ``gpunode[<class>]:`` with one of failure.CLASSES, nothing else (``gpunode[x]:`` is not ours).
_OURS_RE = re.compile(r"^gpunode(?:\[(?:" + "|".join(failure.CLASSES) + r")\])?:")
K8S_LABEL = "gpunode.io/ready"
K8S_TAINT = "gpunode.io/not-ready"
K8S_REASON_ANNOTATION = "gpunode.io/reason"
MAX_REASON = 200  # slurmctld keeps reasons short; the full list is in the report


@dataclass(frozen=True)
class CommandResult:
    """What one command returned."""

    returncode: int
    stdout: str
    stderr: str


class CommandRunner(Protocol):
    """Runs one command (argv, no shell)."""

    def __call__(self, argv: Sequence[str]) -> CommandResult: ...


def local_runner(argv: Sequence[str]) -> CommandResult:
    """Run a command on this machine."""
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=60)
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"{argv[0]}: timed out")
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


@dataclass(frozen=True)
class NodeMark:
    """The verdict a hook acts on."""

    host: str
    scheduler_name: str  # the node's name in Slurm/Kubernetes
    ready: bool
    reasons: tuple[str, ...] = ()
    failure_class: str | None = None  # the verdict's leading class (failure.CLASSES)


@dataclass
class HookAction:
    """What a hook did (or refused to do) for one node."""

    hook: str
    node: str
    action: str  # resumed | drained | left | labelled | tainted | failed
    detail: str
    commands: list[list[str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready data."""
        return {
            "hook": self.hook,
            "node": self.node,
            "action": self.action,
            "detail": self.detail,
            "commands": self.commands,
        }


def reason_prefix(failure_class: str | None = None) -> str:
    """gpunode's reason prefix: ``gpunode[hardware]:`` with a class, ``gpunode:`` without."""
    return f"gpunode[{failure_class}]:" if failure_class else REASON_PREFIX


def is_gpunode_reason(reason: str | None) -> bool:
    """Whether a drain reason is gpunode's own, with a class or in the older classless form."""
    return bool(reason) and _OURS_RE.match(reason or "") is not None


def drain_reason(reasons: Sequence[str], failure_class: str | None = None) -> str:
    """The Slurm drain reason: gpunode's prefix (with the leading failure class when there is
    one), then the failed checks, shortened."""
    text = f"{reason_prefix(failure_class)} " + ("; ".join(reasons) or "not ready")
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


@dataclass(frozen=True)
class SlurmNodeState:
    """The parts of ``scontrol show node`` the hook needs."""

    state: str
    reason: str | None

    @property
    def drained(self) -> bool:
        """DRAIN is among the state flags (sinfo's DRAINED/DRAINING spellings too)."""
        return any(flag.startswith("DRAIN") for flag in self.state.upper().split("+"))


_STATE_RE = re.compile(r"(?:^|\s)State=(\S+)")
_REASON_RE = re.compile(r"(?:^|\s)Reason=(.*?)(?:\s+\[[^\]]*\])?\s*$", re.MULTILINE)


def parse_scontrol_node(text: str) -> SlurmNodeState:
    """Read ``scontrol show node NAME`` (its ``State=`` and ``Reason=`` fields).

    The reason runs to the end of its line, with a ``[user@time]`` stamp that slurmctld adds.

    Raises:
        AcceptanceError: There is no ``State=`` field.
    """
    state = _STATE_RE.search(text)
    if not state:
        raise AcceptanceError(f"scontrol output has no State= field: {text.strip()[:200]!r}")
    reason = _REASON_RE.search(text)
    value = reason.group(1).strip() if reason else None
    return SlurmNodeState(state.group(1), value or None)


class SlurmHook:
    """Drain and resume nodes in Slurm with ``scontrol``."""

    name = "slurm"

    def __init__(self, runner: CommandRunner = local_runner, scontrol: str = "scontrol") -> None:
        self.runner = runner
        self.scontrol = scontrol

    def apply(self, mark: NodeMark) -> HookAction:
        """Act on one node's verdict."""
        show = [self.scontrol, "show", "node", mark.scheduler_name]
        result = self.runner(show)
        if result.returncode != 0:
            return HookAction(
                self.name, mark.host, "failed", (result.stderr or result.stdout).strip(), [show]
            )
        current = parse_scontrol_node(result.stdout)
        ours = is_gpunode_reason(current.reason)
        if mark.ready:
            if not current.drained:
                return HookAction(
                    self.name, mark.host, "left", f"not drained ({current.state})", [show]
                )
            if not ours:
                return HookAction(
                    self.name,
                    mark.host,
                    "left",
                    f"drained by someone else ({current.reason!r}); not resumed",
                    [show],
                )
            cmd = [self.scontrol, "update", f"NodeName={mark.scheduler_name}", "State=RESUME"]
            return self._run(mark, cmd, "resumed", [show])
        if current.drained and not ours:
            return HookAction(
                self.name,
                mark.host,
                "left",
                f"already drained by someone else ({current.reason!r}); reason kept",
                [show],
            )
        reason = drain_reason(mark.reasons, mark.failure_class)
        cmd = [
            self.scontrol,
            "update",
            f"NodeName={mark.scheduler_name}",
            "State=DRAIN",
            f"Reason={reason}",
        ]
        return self._run(mark, cmd, "drained", [show])

    def _run(
        self, mark: NodeMark, cmd: list[str], action: str, before: list[list[str]]
    ) -> HookAction:
        result = self.runner(cmd)
        if result.returncode != 0:
            return HookAction(
                self.name,
                mark.host,
                "failed",
                (result.stderr or result.stdout).strip(),
                [*before, cmd],
            )
        return HookAction(self.name, mark.host, action, " ".join(cmd[2:]), [*before, cmd])


def _label_value(text: str) -> str:
    # Label and taint values: at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric.
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")
    return value or "failed"


class KubernetesHook:
    """Label, taint and annotate nodes with ``kubectl``."""

    name = "kubernetes"

    def __init__(self, runner: CommandRunner = local_runner, kubectl: str = "kubectl") -> None:
        self.runner = runner
        self.kubectl = kubectl

    def commands(self, mark: NodeMark) -> list[list[str]]:
        """The kubectl commands for one verdict, in order."""
        node = mark.scheduler_name
        k = self.kubectl
        if mark.ready:
            return [
                [k, "label", "node", node, f"{K8S_LABEL}=true", "--overwrite"],
                [k, "annotate", "node", node, f"{K8S_REASON_ANNOTATION}-"],
                [k, "taint", "node", node, f"{K8S_TAINT}:NoSchedule-"],
            ]
        first = mark.reasons[0].split(":", 1)[0] if mark.reasons else "not-ready"
        return [
            [k, "label", "node", node, f"{K8S_LABEL}=false", "--overwrite"],
            [
                k,
                "annotate",
                "node",
                node,
                f"{K8S_REASON_ANNOTATION}={drain_reason(mark.reasons, mark.failure_class)}",
                "--overwrite",
            ],
            [
                k,
                "taint",
                "node",
                node,
                f"{K8S_TAINT}={_label_value(first)}:NoSchedule",
                "--overwrite",
            ],
        ]

    def apply(self, mark: NodeMark) -> HookAction:
        """Act on one node's verdict."""
        done: list[list[str]] = []
        for cmd in self.commands(mark):
            result = self.runner(cmd)
            done.append(cmd)
            removing = cmd[-1].endswith("-") and cmd[1] in {"taint", "annotate"}
            # Removing a taint or annotation that is not there is not a failure.
            if result.returncode != 0 and not (removing and "not found" in result.stderr):
                return HookAction(
                    self.name, mark.host, "failed", (result.stderr or result.stdout).strip(), done
                )
        action = "labelled" if mark.ready else "tainted"
        return HookAction(
            self.name, mark.host, action, f"{K8S_LABEL}={str(mark.ready).lower()}", done
        )


HOOKS: dict[str, type[SlurmHook] | type[KubernetesHook]] = {
    "slurm": SlurmHook,
    "kubernetes": KubernetesHook,
}


def run_hooks(
    names: Sequence[str],
    marks: Sequence[NodeMark],
    runner: CommandRunner = local_runner,
    runners: Mapping[str, CommandRunner] | None = None,
) -> list[HookAction]:
    """Run the named hooks for every node's verdict (``runners``: a hook's own runner by its
    name, such as Slurm's submit host; ``runner`` for the others).

    Raises:
        AcceptanceError: An unknown hook name.
    """
    actions = []
    for name in names:
        if name not in HOOKS:
            raise AcceptanceError(f"unknown hook {name!r}; known: {', '.join(sorted(HOOKS))}")
        hook = HOOKS[name]((runners or {}).get(name, runner))
        for mark in marks:
            actions.append(hook.apply(mark))
    return actions
