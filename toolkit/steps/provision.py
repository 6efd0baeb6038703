"""The provision and drift steps: converge nodes to their pinned stack, read what drifted.

Both check the stack first (:mod:`toolkit.steps.precheck`: exit 2, nothing touched, when it
is incoherent; the caller checks the stack locks before provisioning), then run their
playbook. The outcomes are typed so that ``gpunode provision``/``drift`` and ``gpunode up``
read them the same way; the drift report is built here from the drift run's facts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.ansible.events import RunResult
from toolkit.ansible.runner import run_playbook
from toolkit.node import nodestate
from toolkit.progress import Display
from toolkit.steps.precheck import Precheck, check_inventory


@dataclass
class ProvisionOutcome:
    """A provision run: the stack check, the playbook's result, the nodes needing a reboot."""

    precheck: Precheck
    result: RunResult
    reboots: dict[str, list[str]]

    @property
    def ok(self) -> bool:
        """Every targeted node converged."""
        return self.result.ok

    def plan(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per node, each component's decision (``run`` and ``reason``) as the run planned it
        (:mod:`toolkit.node.converge`); a node the run never planned is left out."""
        plans: dict[str, dict[str, dict[str, Any]]] = {}
        for host in sorted(self.result.facts):
            fact = self.result.host_facts(host, "gpunode_plan")
            if isinstance(fact, dict):
                plans[host] = {
                    name: {"run": bool(d.get("run")), "reason": str(d.get("reason"))}
                    for name, d in fact.items()
                    if isinstance(d, dict)
                }
        return plans

    def failed(self) -> dict[str, str]:
        """Per failed or unreachable node: the first failure's message."""
        out: dict[str, str] = {}
        for failure in self.result.failures:
            where = "unreachable" if failure.unreachable else f"task '{failure.task}'"
            out.setdefault(failure.host, f"{where}: {failure.message}")
        return out


@dataclass
class DriftOutcome:
    """A drift run: per node the versions, the drift and the node state read on the way."""

    precheck: Precheck
    result: RunResult
    report: dict[str, Any]

    def state(self, host: str) -> dict[str, Any] | None:
        """The node's state file as the drift run read (and maybe updated) it."""
        fact = self.result.host_facts(host, "gpunode_node_state")
        return dict(fact) if isinstance(fact, dict) else None

    def drift(self, host: str) -> list[str]:
        """The node's drift messages (empty: installed == pinned == loaded)."""
        node = self.report["nodes"].get(host) or {}
        return [str(d["message"]) for d in node.get("drift", [])]


def converge(
    inventory: Path,
    limit: str | None = None,
    *,
    tags: Sequence[str] = (),
    check: bool = False,
    diff: bool = False,
    display: Display | None = None,
    verbosity: int = 0,
    cancel: Callable[[], bool] | None = None,
    precheck: Precheck | None = None,
) -> ProvisionOutcome:
    """Check the stack, then run the provision playbook.

    Raises:
        ConfigError, StackError: Bad inventory or incoherent stack (nothing touched).
        PlaybookError: The playbook could not start.
    """
    found = precheck or check_inventory(inventory, limit)
    result = run_playbook(
        "provision",
        inventory,
        limit=limit,
        tags=list(tags) or None,
        check=check,
        diff=diff,
        display=display,
        verbosity=verbosity,
        cancel=cancel,
    )
    reboots = {}
    for host, facts in result.facts.items():
        pending = nodestate.reboot_pending(facts.get("gpunode_node_state") or {})
        if pending and not check:
            reboots[host] = [nodestate.reboot_reason(pending)]
    return ProvisionOutcome(precheck=found, result=result, reboots=reboots)


def read_drift(
    inventory: Path,
    limit: str | None = None,
    *,
    display: Display | None = None,
    cancel: Callable[[], bool] | None = None,
    precheck: Precheck | None = None,
) -> DriftOutcome:
    """Check the stack, then compare pinned, installed and loaded versions on every node.

    A ready node that drifted becomes not-ready (the drift playbook's node_state step).
    """
    found = precheck or check_inventory(inventory, limit)
    result = run_playbook("drift", inventory, limit=limit, display=display, cancel=cancel)
    return DriftOutcome(precheck=found, result=result, report=drift_report(result))


def drift_report(result: RunResult) -> dict[str, Any]:
    """Per node: stack id, pinned/installed/held/loaded versions and drift, from a drift run.

    Nodes the run could not read (failed preflight, unreachable) are listed under
    ``errors`` with the failure message.
    """
    nodes: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for failure in result.failures:
        errors.setdefault(failure.host, f"{failure.task}: {failure.message}")
    for host in sorted(result.hosts):
        node = result.host_facts(host, "gpunode_node")
        stack = result.host_facts(host, "gpunode_stack") or {}
        if not isinstance(node, dict) or "versions" not in node:
            errors.setdefault(host, "no versions were read")
            continue
        drift = [
            {**item, "host": host, "message": f"{host}: {item['message'].removeprefix('drift: ')}"}
            for item in node.get("drift", [])
        ]
        nodes[host] = {
            "stack_id": stack.get("stack_id"),
            "versions": node["versions"],
            "drift": drift,
        }
    drifted = sorted(h for h, n in nodes.items() if n["drift"])
    return {
        "ok": not drifted and not errors,
        "drifted": drifted,
        "nodes": nodes,
        "errors": errors,
    }
