"""The check every step runs before it touches a host: the stack and, for changes, its locks.

The same checker as ``gpunode stack check``, over the hosts a step targets (each host's
merged ``stack`` and ``hardware``): an incoherent stack stops the step with exit 2 and
nothing is changed. Steps that install (provision, ``up``) check the stack locks as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toolkit.errors import StackError
from toolkit.inventory import Inventory, load_inventory
from toolkit.inventory.targets import LockOutcome, check_locks
from toolkit.node import nodestate
from toolkit.stack import models
from toolkit.stack.check import check
from toolkit.stack.check import security as check_security
from toolkit.stack.resolve import stack_id


@dataclass
class Precheck:
    """What the check found for the targeted hosts, and the inventory it read: the stages
    after it take this object rather than reading the inventory's files again."""

    inventory: Inventory
    hosts: list[str] = field(default_factory=list)
    stack_ids: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Each host's `gpunode_revalidate_after_days` (nodestate.REVALIDATE_VAR), when set.
    revalidate_days: dict[str, float] = field(default_factory=dict)


def check_inventory(inventory: Path, limit: str | None = None) -> Precheck:
    """Check the stack of every host the command targets.

    Args:
        inventory: The inventory directory.
        limit: The command's ``--limit`` pattern.

    Returns:
        The hosts, their stack ids and the warnings (shown, not fatal).

    Raises:
        ConfigError: The inventory or a stack file is malformed, or the limit matches nothing.
        StackError: A stack violates the compatibility matrix or is below a security floor
            whose CVEs the host's ``gpunode_accepted_risks`` does not accept; the message
            lists every violation with the hosts that share it.
    """
    inv = load_inventory(inventory)
    hosts = inv.hosts_for(limit)
    if not hosts:
        raise StackError(f"{inventory}: no host matches {limit or 'all'!r}")
    result = Precheck(inventory=inv)
    errors: dict[str, list[str]] = {}
    seen_warnings: set[str] = set()
    for host in hosts:
        stack, hardware = inv.host_config(host)
        result.hosts.append(host.name)
        result.stack_ids[host.name] = stack_id(stack, hardware)
        merged = inv.host_vars(host.name)
        source = f"{merged.sources.get(models.ACCEPTED_RISKS_KEY, inventory)} (host {host.name})"
        accepted = models.parse_accepted_risks(
            merged.values.get(models.ACCEPTED_RISKS_KEY, []), source
        )
        days = nodestate.revalidate_after_days(
            merged.values.get(nodestate.REVALIDATE_VAR),
            f"{merged.sources.get(nodestate.REVALIDATE_VAR, inventory)} (host {host.name})",
        )
        if days is not None:
            result.revalidate_days[host.name] = days
        for violation in check(stack, hardware) + check_security(stack, accepted):
            if violation.severity == "warning":
                if violation.message not in seen_warnings:
                    seen_warnings.add(violation.message)
                    result.warnings.append(violation.message)
            else:
                errors.setdefault(violation.message, []).append(host.name)
    if errors:
        lines = [f"{msg} (hosts: {', '.join(names)})" for msg, names in errors.items()]
        raise StackError(
            f"the stack of {len({h for v in errors.values() for h in v})} host(s) is incoherent; "
            "nothing was changed:\n  " + "\n  ".join(lines)
        )
    return result


def precheck(
    inventory: Path, limit: str | None = None, *, locks: bool = False, relock: bool = False
) -> tuple[Precheck, list[LockOutcome]]:
    """Before any node changes: the stack check and, with ``locks``, the stack locks.

    Returns:
        The stack check's result and the locks written (only with ``relock``).

    Raises:
        ConfigError, StackError: Bad inventory, incoherent stack, or a missing or stale lock
            or one the repositories no longer carry (without ``relock``); nothing touched.
    """
    found = check_inventory(inventory, limit)
    written = (
        check_locks(inventory, limit=limit, relock=relock, inventory=found.inventory)
        if locks
        else []
    )
    if written:  # the lock files changed under the loaded inventory: read it as it is now
        found.inventory = load_inventory(inventory)
    return found, written
