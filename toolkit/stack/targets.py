"""What ``gpunode stack`` works on: a one-file stack, or every stack group of an inventory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

from toolkit.errors import ConfigError
from toolkit.stack.check import Violation, check, has_errors
from toolkit.stack.models import HardwareProfile, Stack, load_stack_file
from toolkit.stack.resolve import resolve, stack_id

# Inventory variables that choose the repositories (docs/architecture.md).
REPO_VARS = ("gpunode_nvidia_repo_url", "gpunode_container_toolkit_repo_url")


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

    def violations(self, today: date | None = None) -> list[Violation]:
        """Every violation of the compatibility matrix, the group's and its hosts' own."""
        found = check(self.stack, self.hardware, today=today)
        seen = {(v.rule, v.message) for v in found}
        for host, (stack, hardware) in self.host_overrides.items():
            for violation in check(stack, hardware, today=today):
                if (violation.rule, violation.message) not in seen:
                    seen.add((violation.rule, violation.message))
                    found.append(replace(violation, message=f"host {host}: {violation.message}"))
        return found

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
        from toolkit.inventory import load_inventory

        inventory = load_inventory(path)
        targets = []
        for group in inventory.stack_groups():
            stack, hardware = inventory.group_config(group)
            info = inventory.groups[group]
            repo_vars = {k: info.vars[k] for k in REPO_VARS if k in info.vars}
            overrides = {}
            for host in info.hosts:
                sources = inventory.host_vars(host).sources
                if any(sources.get(key) != info.sources.get(key) for key in ("stack", "hardware")):
                    overrides[host] = inventory.host_config(host)
            targets.append(Target(group, stack, hardware, repo_vars, overrides))
        if not targets:
            raise ConfigError(
                f"{path}: no group has hosts and a `stack:` (group_vars/<group>/stack.yml)"
            )
        return True, targets
    if not path.exists():
        raise ConfigError(f"{path}: no such file or directory")
    stack_file = load_stack_file(path)
    return False, [Target(None, stack_file.stack, stack_file.hardware)]
