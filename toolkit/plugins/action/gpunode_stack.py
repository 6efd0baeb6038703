"""Action plugin ``gpunode_stack``: check and resolve a host's pinned stack on the controller.

It runs the same checker as ``gpunode stack check`` on the host's ``stack`` and ``hardware``
variables, maps the node's OS to NVIDIA's OS id, resolves the stack with the repository
variables and applies the group's stack lock (the variable ``stack_lock`` from
``group_vars/<group>/stack.lock.yml``): the fact ``gpunode_stack`` (the dict described in
docs/architecture.md) carries exactly the locked versions. A missing or stale lock fails.
Every violation is reported, not only the first; warnings are shown as Ansible warnings.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from toolkit.ansible.values import plain
from toolkit.config import validate
from toolkit.errors import ToolkitError
from toolkit.profile.hardware import HardwareProfile
from toolkit.stack.check import check
from toolkit.stack.lock import LOCK_FILE, LOCK_KEY, apply_lock, lock_from_vars, lock_state
from toolkit.stack.models import Stack
from toolkit.stack.resolve import repository_variables, resolve
from toolkit.stack.systems import UnsupportedOS, os_id


def _issues(checked: Any) -> tuple[list[str], list[str]]:
    """(errors, warnings) from what ``toolkit.stack.check`` returns."""
    items: list[Any]
    if hasattr(checked, "violations"):
        items = list(checked.violations) + list(getattr(checked, "warnings", []) or [])
    else:
        items = list(checked or [])
    errors: list[str] = []
    warnings: list[str] = []
    for item in items:
        severity = str(getattr(item, "severity", getattr(item, "level", "error"))).lower()
        rule = getattr(item, "rule", "")
        message = str(getattr(item, "message", item))
        text = f"{rule}: {message}" if rule else message
        (warnings if severity.startswith("warn") else errors).append(text)
    return errors, warnings


class ActionModule(ActionBase):
    """Check the host's stack against the compatibility matrix and resolve it for its OS."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("stack", "hardware", "os_id", "require_lock"))

    def _require_lock(self) -> bool:
        value = self._task.args.get("require_lock", True)
        return str(value).strip().lower() not in ("false", "no", "0", "off")

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Return ``ansible_facts.gpunode_stack`` or fail naming every violation."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        host = task_vars.get("inventory_hostname", "?")
        stack_data = self._task.args.get("stack", task_vars.get("stack"))
        hardware_data = self._task.args.get("hardware", task_vars.get("hardware"))
        missing = [
            name
            for name, value in (("stack", stack_data), ("hardware", hardware_data))
            if not value
        ]
        if missing:
            result["failed"] = True
            result["msg"] = (
                f"host {host} has no {' and no '.join(missing)} variable; set them in "
                "group_vars/<group>/stack.yml and hardware.yml (docs/architecture.md)"
            )
            return result

        target_os = self._task.args.get("os_id")
        try:
            if not target_os:
                target_os = os_id(
                    str(task_vars.get("ansible_distribution", "")),
                    str(task_vars.get("ansible_distribution_version", "")),
                )
        except UnsupportedOS as err:
            result["failed"] = True
            result["msg"] = f"host {host}: {err}"
            return result

        try:
            source = f"host vars of {host}"
            stack = validate(Stack, plain(stack_data), source, prefix=("stack",))
            hardware = validate(HardwareProfile, plain(hardware_data), source, prefix=("hardware",))
            errors, warnings = _issues(check(stack, hardware))
            if errors:
                result["failed"] = True
                result["msg"] = f"the stack of {host} is incoherent:\n  " + "\n  ".join(errors)
                result["violations"] = errors
                result["warnings"] = warnings
                return result
            machine = str(task_vars.get("ansible_architecture", ""))
            resolved = resolve(
                stack,
                hardware,
                target_os,
                # NVIDIA's repository names Arm servers sbsa, never aarch64.
                arch={"aarch64": "sbsa", "x86_64": "x86_64"}.get(machine),
                repo_vars={
                    name: task_vars[name] for name in repository_variables() if task_vars.get(name)
                },
            )
            # The one schema of the lock (toolkit.stack.lock): a broken lock fails the play
            # with the key named, before any version reaches apt.
            lock = lock_from_vars(
                {LOCK_KEY: plain(task_vars.get(LOCK_KEY))}, f"{LOCK_FILE} of host {host}"
            )
            if lock_state(lock, resolved["stack_id"]) == "current" or self._require_lock():
                resolved = apply_lock(resolved, lock)
        except ToolkitError as err:
            result["failed"] = True
            result["msg"] = err.message
            return result

        if warnings:
            result["warnings"] = warnings
        result["ansible_facts"] = {"gpunode_stack": plain(resolved)}
        result["msg"] = f"stack {resolved.get('stack_id')} for {target_os}"
        return result
