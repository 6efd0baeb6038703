"""The data-disk step: plan every node, confirm, apply where the plan allows.

``playbooks/disks.yml`` (preflight, then the ``data_disks`` role) does the work on the nodes;
the plan of each node is read back from the fact ``gpunode_data_disks`` that the role's action
sets (the planning itself is :mod:`toolkit.disks`, pure). A refused node is never changed;
the others go ahead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.ansible.events import RunResult
from toolkit.ansible.runner import run_playbook
from toolkit.progress import Display

FACT = "gpunode_data_disks"
PLAYBOOK = "disks"


@dataclass
class NodeDisks:
    """One node's plan (None when its profile has no data disks) and its run errors."""

    plan: dict[str, Any] | None
    errors: list[str] = field(default_factory=list)

    @property
    def refused(self) -> bool:
        """The node cannot be applied: an error or a refusal."""
        return bool(self.errors) or bool(self.plan and self.plan.get("refused"))

    @property
    def has_work(self) -> bool:
        """The plan has actions to apply."""
        return bool(self.plan and self.plan.get("actions"))

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {"plan": self.plan, "errors": list(self.errors)}


@dataclass
class DisksOutcome:
    """The result of planning (and maybe applying) the data disks."""

    run_id: str | None
    check: bool
    artifact_dir: str | None
    nodes: dict[str, NodeDisks]
    applied: bool = False
    declined: bool = False  # the confirmation was refused: nothing was changed

    @property
    def ok(self) -> bool:
        """Every node can be (or was) applied and nothing failed."""
        return bool(self.nodes) and not self.refused and not self.declined

    @property
    def refused(self) -> list[str]:
        """Nodes refused or failed."""
        return sorted(h for h, n in self.nodes.items() if n.refused)

    @property
    def todo(self) -> list[str]:
        """Nodes with something to apply."""
        return sorted(h for h, n in self.nodes.items() if n.has_work and not n.refused)

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (the document ``gpunode disks ... --json`` prints)."""
        return {
            "ok": self.ok,
            "run_id": self.run_id,
            "check": self.check,
            "applied": self.applied,
            "artifact_dir": self.artifact_dir,
            "nodes": {h: n.to_dict() for h, n in self.nodes.items()},
        }


def _run(
    inventory: Path,
    limit: str | None,
    *,
    check: bool,
    display: Display | None,
    cancel: Callable[[], bool] | None,
) -> RunResult:
    return run_playbook(
        PLAYBOOK,
        inventory,
        limit=limit,
        check=check,
        diff=False,
        extravars={"data_disks_report_only": True} if check else None,
        display=display,
        cancel=cancel,
    )


def _outcome(result: RunResult) -> DisksOutcome:
    nodes: dict[str, NodeDisks] = {}
    for host in sorted(result.hosts):
        fact = result.host_facts(host, FACT)
        nodes[host] = NodeDisks(plan=dict(fact) if isinstance(fact, dict) else None)
    for failure in result.failures:
        entry = nodes.setdefault(failure.host, NodeDisks(plan=None))
        where = "unreachable" if failure.unreachable else failure.task
        entry.errors.append(f"{where}: {failure.message}")
    return DisksOutcome(
        run_id=result.run_id,
        check=result.check,
        artifact_dir=result.artifact_dir,
        nodes=nodes,
        applied=not result.check,
    )


def plan(
    inventory: Path,
    limit: str | None = None,
    display: Display | None = None,
    cancel: Callable[[], bool] | None = None,
) -> DisksOutcome:
    """Plan every node's data disks; change nothing."""
    return _outcome(_run(inventory, limit, check=True, display=display, cancel=cancel))


def apply(
    inventory: Path,
    limit: str | None = None,
    *,
    confirm: Callable[[DisksOutcome], bool] | None = None,
    display: Display | None = None,
    cancel: Callable[[], bool] | None = None,
) -> DisksOutcome:
    """Apply the data-disk layout; with ``confirm``, plan and ask first.

    The ``data_disks`` role plans again on each node before it changes anything and refuses
    a node whose plan is refused, so without ``confirm`` every node that can be applied is,
    and the refused ones are reported (never changed).

    Args:
        confirm: Asked with the plan before anything changes (None: no question). A plan with
            any refusal, or with nothing to do, is returned without asking; returning False
            leaves every node as it is (``declined``).
    """
    if confirm is not None:
        planned = plan(inventory, limit, display, cancel)
        if planned.refused or not planned.todo:
            return planned
        if not confirm(planned):
            planned.declined = True
            return planned
    return _outcome(_run(inventory, limit, check=False, display=display, cancel=cancel))
