"""``gpunode rollout``: the plan that moves a fleet's nodes onto its stack lock (issue 39).

This increment plans; it changes no node. The flow:

1. the options are checked against the inventory before anything else (a ``--canary`` host
   that is not in it, or not among the hosts ``--limit`` selects, is refused: exit 2);
2. the stack check and the stack locks (``toolkit.steps.precheck``, as ``provision`` and
   ``up`` run it: exit 2, nothing touched, when a lock is missing, stale or gone from its
   repositories), since a rollout moves nodes onto the lock;
3. one drift run in check mode (read-only, as ``gpunode status``: each node's state file,
   and its pinned, installed, held and loaded versions against the lock);
4. the plan (``toolkit.rollout.plan``), recorded as a ``rollout_plan`` run
   (``toolkit.rollout.record``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from toolkit.ansible.runner import run_playbook
from toolkit.config import did_you_mean
from toolkit.errors import ConfigError
from toolkit.inventory import Host, Inventory, load_inventory
from toolkit.inventory.values import multi_node_vars
from toolkit.node import nodestate
from toolkit.progress import Display
from toolkit.records import runs
from toolkit.rollout import record
from toolkit.rollout.plan import NodeSurvey, RolloutOptions, RolloutPlan, plan_rollout
from toolkit.steps.precheck import Precheck, precheck
from toolkit.steps.provision import drift_report


@dataclass
class RolloutOutcome:
    """A planned rollout: the plan, and where its record was written."""

    plan: RolloutPlan
    precheck: Precheck
    run_dir: Path | None  # None: not recorded

    @property
    def record_path(self) -> Path | None:
        """The record's file."""
        return self.run_dir / record.RECORD if self.run_dir else None


def check_canary(inventory: Inventory, hosts: list[Host], canary: tuple[str, ...]) -> None:
    """Every ``--canary`` host is in the inventory and among the targeted hosts.

    Raises:
        ConfigError: Naming the option, the host and the rule (with the closest names).
    """
    targeted = {h.name for h in hosts}
    for name in canary:
        if name not in inventory.hosts:
            raise ConfigError(
                f"--canary {name}: no such host in {inventory.hosts_file}"
                + did_you_mean(name, list(inventory.hosts))
            )
        if name not in targeted:
            raise ConfigError(
                f"--canary {name}: not among the hosts --limit selects; a canary must be a node "
                "the rollout moves"
            )


def plan_fleet(
    inventory: Path,
    options: RolloutOptions,
    limit: str | None = None,
    *,
    display: Display | None = None,
    runs_dir: Path | None = None,
    now: datetime | None = None,
) -> RolloutOutcome:
    """Read the targeted nodes (nothing changed) and plan their move onto the lock; the plan
    is recorded as a ``rollout_plan`` run.

    Raises:
        ConfigError, StackError: Bad inventory or options, an incoherent stack, or a missing,
            stale or vanished lock (exit 2; no node read or touched).
    """
    inv = load_inventory(inventory)
    hosts = inv.hosts_for(limit)
    check_canary(inv, hosts, options.canary)
    domains = {h.name: multi_node_vars(h)[0] for h in hosts}
    found, _written = precheck(inventory, limit, locks=True)
    result = run_playbook("drift", inventory, limit=limit, check=True, display=display)
    report = drift_report(result)
    group_sizes: dict[str, int] = {}
    for host in inv.hosts.values():
        group = inv.stack_group_of(host.name)
        group_sizes[group] = group_sizes.get(group, 0) + 1
    surveys = []
    for host in hosts:
        fact = result.host_facts(host.name, "gpunode_node_state")
        entry = report["nodes"].get(host.name) or {}
        surveys.append(
            NodeSurvey(
                host=host.name,
                group=inv.stack_group_of(host.name),
                locked_stack_id=found.stack_ids[host.name],
                state=dict(fact) if isinstance(fact, dict) else nodestate.new(),
                drift=list(entry.get("drift") or []),
                domain=domains[host.name],
                error=report["errors"].get(host.name),
            )
        )
    plan = plan_rollout(surveys, options, group_sizes)
    run_dir = runs.start_run(record.PLAN_KIND, runs_dir, now or datetime.now(timezone.utc))
    record.write(
        run_dir,
        record.new_record(
            plan, rollout_id=run_dir.name, inventory=inventory, limit=limit, dry_run=True, now=now
        ),
    )
    return RolloutOutcome(plan=plan, precheck=found, run_dir=run_dir)
