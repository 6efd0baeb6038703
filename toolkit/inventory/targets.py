"""What ``gpunode stack`` works on: a one-file stack, or every stack group of an inventory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from functools import cached_property
from pathlib import Path
from typing import Any

from toolkit.errors import ConfigError, StackError
from toolkit.inventory import Inventory, load_inventory
from toolkit.profile.floors import looser_floors
from toolkit.profile.hardware import HardwareProfile, load_stack_file
from toolkit.stack.aptindex import Fetch, fetch_url
from toolkit.stack.check import Violation, check, has_errors, security
from toolkit.stack.lock import (
    LOCK_KEY,
    OS_VARIABLE,
    StackLock,
    apply_lock,
    dump_lock,
    lock_from_vars,
    lock_path,
    lock_state,
    resolve_lock,
    stack_arch,
    stack_systems,
    verify_lock,
    write_lock,
)
from toolkit.stack.models import (
    ACCEPTED_RISKS_KEY,
    AcceptedRisk,
    Stack,
    parse_accepted_risks,
)
from toolkit.stack.resolve import repository_variables, resolve, stack_id

# Where a lock came from when no file is known (a `stack_lock` given inline).
LOCK_FILE_UNKNOWN = "group_vars (stack_lock)"

# A group's floor looser than its profile's: a warning (the site may know better), never
# silent (issue 38: thresholds that know the SKU, one source per floor).
FLOOR_RULE = "floors.below_profile"
FLOOR_RULE_TEXT = "a group's acceptance floor is at least the one its profile ships"


def _number(value: float | None) -> str:
    return "none (the floor is dropped)" if value is None else f"{value:g}"


def floor_violations(hardware: HardwareProfile, group: str | None) -> list[Violation]:
    """Each floor the hardware profile sets looser than the shipped profile it names, as a
    warning naming the group, the key, both values and the profile's source.

    Raises:
        ConfigError: The shipped profile's data is malformed.
    """
    if hardware.acceptance is None:
        return []
    who = f"group {group}" if group is not None else "the stack file"
    found = []
    for loose in looser_floors(hardware.acceptance):
        text = (
            f"{who} sets {loose.key} {_number(loose.own)}, looser than profile "
            f"{loose.profile}'s {loose.profile_value:g}"
        )
        message = f"{text} [rule {FLOOR_RULE}: {FLOOR_RULE_TEXT}; source: {loose.source}]"
        found.append(Violation(FLOOR_RULE, "warning", message, loose.source))
    return found


@dataclass(frozen=True)
class Target:
    """One stack with its hardware: a one-file stack (group ``None``) or an inventory group."""

    group: str | None
    stack: Stack
    hardware: HardwareProfile
    repo_vars: Mapping[str, Any] = field(default_factory=dict)
    # Hosts of the group whose host vars replace its `stack` or `hardware` (the lab's nodes
    # add their own data disks): name -> their own stack and hardware.
    host_overrides: Mapping[str, tuple[Stack, HardwareProfile]] = field(default_factory=dict)
    # The group's variables (its lock `stack_lock` and OSes `gpunode_stack_os` among them).
    group_vars: Mapping[str, Any] = field(default_factory=dict)
    # The CVEs whose risk the group (or the one-file stack) accepts: `gpunode_accepted_risks`.
    accepted_risks: tuple[AcceptedRisk, ...] = ()
    # The file the group's `stack_lock` came from (named in every message about it).
    lock_source: str = LOCK_FILE_UNKNOWN

    @cached_property
    def lock(self) -> StackLock | None:
        """The group's stack lock (``group_vars/<group>/stack.lock.yml``), if any, validated.

        Raises:
            ConfigError: A lock that breaks the schema (naming the file and key): every
                command refuses it, none reads past it.
        """
        return lock_from_vars(self.group_vars, self.lock_source)

    def resolve_locked(self, os_id: str, arch: str | None = None) -> dict[str, Any]:
        """The resolved stack at the locked versions when the group's lock is current
        (``locked: True``), else at its requirements (``locked: False``).

        Raises:
            ConfigError: A lock that breaks the schema.
        """
        resolved = self.resolve(os_id, arch)
        lock = self.lock
        if (
            lock is None
            or lock_state(lock, resolved["stack_id"]) != "current"
            or os_id not in lock.systems
        ):
            return resolved | {"locked": False}
        return apply_lock(resolved, lock) | {"locked": True}

    def systems(self) -> list[str]:
        """The OSes of the group's nodes (``gpunode_stack_os``)."""
        return stack_systems(str(self.group), self.group_vars)

    def resolved_by_os(self) -> dict[str, dict[str, Any]]:
        """The resolved stack for each OS of the group."""
        return {os_id: self.resolve(os_id) for os_id in self.systems()}

    def lock_violations(self) -> list[Violation]:
        """A missing or stale lock, as warnings (``provision`` refuses them)."""
        if self.group is None:
            return []
        state = lock_state(self.lock, self.stack_id())
        if state == "current":
            return []
        text = {
            "missing": f"group {self.group} has no stack lock",
            "stale": f"the stack lock of group {self.group} was resolved for stack "
            f"{self.lock.stack_id if self.lock else None}, not {self.stack_id()}",
        }[state]
        rule = f"lock.{state}"
        hint = f"run `gpunode stack lock -i INVENTORY` ({OS_VARIABLE} names the OSes)"
        return [Violation(rule, "warning", f"{text}: {hint} [rule {rule}]", "gpunode stack lock")]

    def violations(self, today: date | None = None) -> list[Violation]:
        """Every violation of the compatibility matrix and the security floors, the group's
        and its hosts' own."""
        found = self._violations(self.stack, self.hardware, today) + self.lock_violations()
        found += floor_violations(self.hardware, self.group)
        seen = {(v.rule, v.message) for v in found}
        for host, (stack, hardware) in self.host_overrides.items():
            own = self._violations(stack, hardware, today) + floor_violations(hardware, self.group)
            for violation in own:
                if (violation.rule, violation.message) not in seen:
                    seen.add((violation.rule, violation.message))
                    found.append(replace(violation, message=f"host {host}: {violation.message}"))
        return found

    def _violations(
        self, stack: Stack, hardware: HardwareProfile, today: date | None
    ) -> list[Violation]:
        return check(stack, hardware, today=today) + security(
            stack, self.accepted_risks, today=today
        )

    def stack_id(self) -> str:
        """The stack id."""
        return stack_id(self.stack, self.hardware)

    def report(self, today: date | None = None) -> dict[str, Any]:
        """``{"ok", "stack_id", "violations"}`` as ``gpunode stack check --json`` prints it."""
        violations = self.violations(today)
        return {
            "ok": not has_errors(violations),
            "stack_id": self.stack_id(),
            "violations": [v.to_dict() for v in violations],
        }

    def resolve(self, os_id: str, arch: str | None = None) -> dict[str, Any]:
        """The resolved stack for one OS, with this target's repository variables."""
        arch = arch or stack_arch(str(self.group), self.group_vars)
        return resolve(self.stack, self.hardware, os_id, arch=arch, repo_vars=self.repo_vars)


def load_targets(path: str | Path) -> tuple[bool, list[Target]]:
    """Read PATH: a one-file stack, or an inventory directory.

    Returns:
        ``(is_inventory, targets)``; for an inventory, one target per group that has hosts
        and a stack or hardware profile, in inventory order.

    Raises:
        ConfigError: Malformed files (naming file and key path), or an inventory without
            any stack group.
    """
    path = Path(path)
    if path.is_dir():
        return True, inventory_targets(load_inventory(path))
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory")
    stack_file = load_stack_file(path)
    risks = tuple(stack_file.gpunode_accepted_risks)
    return False, [Target(None, stack_file.stack, stack_file.hardware, accepted_risks=risks)]


def inventory_targets(inventory: Inventory) -> list[Target]:
    """One target per group of a loaded inventory that has hosts and a stack or hardware
    profile, in inventory order.

    Raises:
        ConfigError: Malformed files (naming file and key path), or no stack group.
    """
    targets = []
    for group in inventory.stack_groups():
        stack, hardware = inventory.group_config(group)
        info = inventory.groups[group]
        repo_vars = {k: info.vars[k] for k in repository_variables() if k in info.vars}
        overrides = {}
        for host in info.hosts:
            sources = inventory.host_vars(host).sources
            if any(sources.get(key) != info.sources.get(key) for key in ("stack", "hardware")):
                overrides[host] = inventory.host_config(host)
        risks = _accepted_risks(info.vars, info.sources, group)
        source = info.sources.get(LOCK_KEY, LOCK_FILE_UNKNOWN)
        targets.append(
            Target(group, stack, hardware, repo_vars, overrides, info.vars, risks, source)
        )
    if not targets:
        raise ConfigError(
            f"{inventory.path}: no group has hosts and a `stack:` (group_vars/<group>/stack.yml)"
        )
    return targets


def _accepted_risks(
    group_vars: Mapping[str, Any], sources: Mapping[str, str], group: str
) -> tuple[AcceptedRisk, ...]:
    """The group's ``gpunode_accepted_risks``, validated (errors name the file and key)."""
    if ACCEPTED_RISKS_KEY not in group_vars:
        return ()
    source = f"{sources.get(ACCEPTED_RISKS_KEY, 'group_vars')} (group {group})"
    return parse_accepted_risks(group_vars[ACCEPTED_RISKS_KEY], source)


@dataclass(frozen=True)
class LockOutcome:
    """One group's lock as ``gpunode stack lock`` (or ``provision --relock``) wrote it."""

    group: str
    path: Path
    stack_id: str
    packages: dict[str, dict[str, str]]  # os -> package -> exact version
    changed: bool

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``gpunode stack lock --json``."""
        return {
            "group": self.group,
            "path": str(self.path),
            "stack_id": self.stack_id,
            "changed": self.changed,
            "packages": self.packages,
        }


def _inventory_targets(
    path: Path, limit: str | None, inventory: Inventory | None = None
) -> list[Target]:
    if inventory is None:
        if not path.exists():
            raise ConfigError(f"{path}: no such file or directory")
        if not path.is_dir():
            raise ConfigError(f"{path}: a stack lock belongs to an inventory directory, not a file")
        inventory = load_inventory(path)
    targets = inventory_targets(inventory)
    if limit is None:
        return targets
    groups = {g for host in inventory.hosts_for(limit) for g in host.groups}
    return [t for t in targets if t.group in groups]


def lock_inventory(
    path: str | Path, *, limit: str | None = None, fetch: Fetch = fetch_url
) -> list[LockOutcome]:
    """Resolve every stack group's lock from its repositories and write it.

    Every group is resolved before any lock is written, so a failure leaves every lock as
    it was.

    Raises:
        ConfigError: Not an inventory, or a group without ``gpunode_stack_os``.
        StackError: An incoherent stack, or a repository problem naming the packages.
    """
    path = Path(path)
    documents = []
    for target in _inventory_targets(path, limit):
        report = target.report()
        if not report["ok"]:
            raise StackError(
                f"group {target.group}: the stack is incoherent; see `gpunode stack check`"
            )
        group = str(target.group)
        lock = resolve_lock(group, target.stack_id(), target.resolved_by_os(), fetch)
        documents.append((target, lock))
    outcomes = []
    for target, lock in documents:
        group = str(target.group)
        file = lock_path(path, group)
        before = file.read_text(encoding="utf-8") if file.exists() else None
        write_lock(path, group, lock)
        outcomes.append(
            LockOutcome(
                group=group,
                path=file,
                stack_id=target.stack_id(),
                packages={
                    os_id: {p: e.version for p, e in system.packages.items()}
                    for os_id, system in lock.systems.items()
                },
                changed=before != dump_lock(lock),
            )
        )
    return outcomes


def check_locks(
    path: str | Path,
    *,
    limit: str | None = None,
    relock: bool = False,
    fetch: Fetch = fetch_url,
    inventory: Inventory | None = None,
) -> list[LockOutcome]:
    """Before nodes change: every targeted group's lock is current and still in its repositories.

    Args:
        path: The inventory directory.
        limit: The command's ``--limit``: only the groups of those hosts.
        relock: Resolve and write the locks again instead of refusing a missing or stale one.
        fetch: Reads a URL.
        inventory: ``path`` as loaded already (read again when not given).

    Returns:
        The locks written (with ``relock``).

    Raises:
        StackError: A missing or stale lock (without ``relock``), or locked packages the
            repositories lack or republished with another SHA256, each named.
    """
    path = Path(path)
    targets = _inventory_targets(path, limit, inventory)
    if relock:
        groups = ",".join(str(t.group) for t in targets)
        return lock_inventory(path, limit=groups or None, fetch=fetch)
    problems: list[str] = []
    for target in targets:
        lock = target.lock
        state = lock_state(lock, target.stack_id())
        if state != "current" or lock is None:
            problems.append(
                f"group {target.group}: the stack lock is {state} (stack {target.stack_id()})"
            )
            continue
        problems += verify_lock(str(target.group), lock, target.resolved_by_os(), fetch)
    if problems:
        raise StackError(
            "the stack locks do not hold; nothing was changed:\n  "
            + "\n  ".join(problems)
            + "\nrun `gpunode stack lock -i INVENTORY` or pass --relock to resolve them again"
        )
    return []
