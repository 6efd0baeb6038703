"""``gpunode check``: the passive checks of every node, one SSH command each, in parallel.

Per node: one command (the acceptance runner and ``probe.py`` as one Python program on its
stdin) reads every signal; the control machine judges them (acceptance's own rules through
``verdict.passive_checks``, and ``rules``) and writes the node's state through
``nodestate.after_check`` in a second command: a ready node that fails a check turns not
ready with the reasons; a clean check changes no standing (re-acceptance proves readiness).
The state also keeps this check's counters and time, where the next check's deltas and XID
window start. Each check is a run (kind ``check``) with ``check.json``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from toolkit.acceptance.check import Check
from toolkit.check import plan
from toolkit.errors import ConfigError, RemoteError
from toolkit.inventory import load_inventory
from toolkit.node import nodestate
from toolkit.records import runs
from toolkit.remote import open_node, parallel

PROBE_TIMEOUT_S = 120


@dataclass
class NodeCheck:
    """One node's passive check."""

    host: str
    checks: list[Check] = field(default_factory=list)
    state_before: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    turned_not_ready: bool = False
    error: str | None = None
    duration_s: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)  # what the passport keeps

    @property
    def ok(self) -> bool:
        """Every check passed and the node could be read."""
        return self.error is None and all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        """Why the check failed, a line each."""
        return ([self.error] if self.error else []) + [
            f"{c.name}: {c.message}" for c in self.checks if not c.ok
        ]

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "host": self.host,
            "ok": self.ok,
            "error": self.error,
            "state_before": self.state_before,
            "state": self.state.get("state"),
            "reason": list(self.state.get("reason") or []),
            "turned_not_ready": self.turned_not_ready,
            "duration_s": round(self.duration_s, 3),
            "checks": [c.to_dict() for c in self.checks],
            "facts": self.facts,
        }


@dataclass
class CheckRun:
    """Every node's passive check, and the run that records them."""

    run_id: str
    run_dir: Path
    nodes: list[NodeCheck]
    wall_s: float

    @property
    def ok(self) -> bool:
        """Every node passed."""
        return all(n.ok for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (``check.json``, ``--json``)."""
        return {
            "run_id": self.run_id,
            "ok": self.ok,
            "wall_s": round(self.wall_s, 3),
            "nodes": {n.host: n.to_dict() for n in self.nodes},
        }


def run_check(
    inventory_dir: Path, limit: str | None = None, runs_dir: Path | None = None
) -> CheckRun:
    """Check every targeted node (read, judge, write its state) and record the run.

    Raises:
        ConfigError: The inventory, a stack or a profile is malformed, or no host matches
            (before any node is touched).
    """
    started = time.perf_counter()
    inventory = load_inventory(inventory_dir)
    hosts = inventory.hosts_for(limit)
    if not hosts:
        raise ConfigError(f"{inventory_dir}: no hosts match {limit or 'all'!r}")
    plans = {h.name: plan.plan_node(inventory, h) for h in hosts}
    now = datetime.now(timezone.utc)
    run_dir = runs.start_run("check", runs_dir, now)
    results = parallel(hosts, lambda h: _check_node(plans[h.name], run_dir.name))
    nodes = []
    for host in hosts:
        value = results[host.name]
        nodes.append(
            value if isinstance(value, NodeCheck) else NodeCheck(host.name, error=value.message)
        )
    run = CheckRun(run_dir.name, run_dir, nodes, time.perf_counter() - started)
    (run_dir / "check.json").write_text(json.dumps(run.to_dict(), indent=1, sort_keys=True) + "\n")
    return run


def passport_facts(probe: dict[str, Any], totals: dict[str, Any] | None) -> dict[str, Any]:
    """What the node passport keeps of a check: identity and counters."""
    gpus = [
        {
            "index": g.get("index"),
            "uuid": g.get("uuid"),
            "serial": g.get("serial"),
            "bus_id": g.get("bus_id"),
            "remapped_rows": g.get("remapped_rows"),
            "ecc_uncorrected_aggregate": g.get("ecc_uncorrected_aggregate"),
        }
        for g in (probe.get("gpus") or {}).get("list") or []
    ]
    xids = [
        {k: e.get(k) for k in ("xid", "bus_id", "time", "boot")}
        for e in (probe.get("kernel_log") or {}).get("xid_events") or []
    ]
    return {"gpus": gpus, "identity": probe.get("identity"), "aer": totals, "xids": xids}


def _check_node(node_plan: plan.NodePlan, run_id: str) -> NodeCheck:
    started = time.perf_counter()
    outcome = NodeCheck(node_plan.host.name)
    node = open_node(node_plan.host)
    try:
        res = node.run_with_input(
            "python3 -", [plan.probe_program(node_plan.probe_spec)], timeout=PROBE_TIMEOUT_S
        )
        if not res.ok:
            raise RemoteError(
                f"{node_plan.host.name}: the check's probe exited {res.returncode}: "
                f"{(res.stderr or res.stdout).strip()[-500:]}"
            )
        try:
            probe = json.loads(res.stdout)
        except ValueError as err:
            raise RemoteError(f"{node_plan.host.name}: the probe printed no JSON: {err}") from None
        current = probe.get("state") or nodestate.new()
        outcome.state_before = current.get("state")
        before = current.get("check") if isinstance(current.get("check"), dict) else None
        outcome.checks, baseline = plan.judge(node_plan, probe, before)
        outcome.facts = passport_facts(probe, baseline.get("aer"))
        failures = [f"{c.name}: {c.message}" for c in outcome.checks if not c.ok]
        state = nodestate.after_check(current, failures, baseline, run_id=run_id)
        outcome.state = state
        outcome.turned_not_ready = current.get("state") == "ready" and state["state"] != "ready"
        if probe.get("state") is not None:  # a node gpunode never wrote to keeps no file
            nodestate.write_over(node, state)
    except RemoteError:
        raise
    except Exception as err:  # one node's surprise must not cost the other nodes their check
        outcome.error = f"internal error checking this node: {err!r} (rerun with --debug)"
    finally:
        node.close()
        outcome.duration_s = time.perf_counter() - started
    return outcome
