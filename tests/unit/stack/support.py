"""Support for the stack tests: a coherent base stack with overrides (no tests here)."""

from __future__ import annotations

import copy
from datetime import date
from typing import Any

from toolkit.profile.hardware import HardwareProfile, StackFile
from toolkit.stack.check import Violation, check
from toolkit.stack.models import Stack

# The day end-of-life rules are judged on in these tests (R535 and R610 are past their EOL).
TODAY = date(2026, 11, 29)

BASE: dict[str, Any] = {
    "stack": {
        "driver": {"version": "580.95.05", "flavour": "open"},
        "cuda": "12.8.1",
        "nccl": "2.26.2-1+cuda12.8",
        "fabric_manager": "auto",
        "container_toolkit": "1.17.8",
    },
    "hardware": {"gpu": {"model": "H100", "count": 8, "nvswitch": True}},
}


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """Deep-merge ``changes`` into a copy of ``base``; a value of ``None`` deletes the key."""
    result = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merge(result[key], value)
        else:
            result[key] = value
    return result


def make(
    stack: dict[str, Any] | None = None, hardware: dict[str, Any] | None = None
) -> tuple[Stack, HardwareProfile]:
    data = merge(BASE, {"stack": stack or {}, "hardware": hardware or {}})
    parsed = StackFile.model_validate(data)
    return parsed.stack, parsed.hardware


def violations(
    stack: dict[str, Any] | None = None, hardware: dict[str, Any] | None = None
) -> list[Violation]:
    return check(*make(stack, hardware), today=TODAY)


def by_rule(found: list[Violation], rule: str) -> list[Violation]:
    return [v for v in found if v.rule == rule]


def lock_for(
    stack: Stack, hardware: HardwareProfile, os_ids: tuple[str, ...] = ("debian12",)
) -> dict[str, Any]:
    """A stack lock (the ``stack_lock`` value) as if every package carried revision ``-1``."""
    from toolkit.stack.lock import requirements
    from toolkit.stack.resolve import resolve

    systems = {}
    for os_id in os_ids:
        resolved = resolve(stack, hardware, os_id)
        systems[os_id] = {
            "arch": resolved["arch"],
            "repositories": {r["name"]: r["uri"] for r in resolved["repositories"]},
            "packages": {
                name: {
                    "version": wanted.replace("-*", "-1"),
                    "architecture": "amd64",
                    "sha256": "0" * 64,
                    "repository": "cuda",
                    "filename": f"./{name}_{wanted.replace('-*', '-1')}_amd64.deb",
                }
                for name, wanted in requirements(resolved).items()
            },
        }
    return {"group": "g", "stack_id": resolve(stack, hardware, os_ids[0])["stack_id"],
            "systems": systems}  # fmt: skip
