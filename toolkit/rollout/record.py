"""The rollout record: ``<run>/rollout.json``, one owner for its schema, statuses and writes.

A rollout's run folder (``toolkit.records.runs``) holds its record: the options, the waves and, per
node, its wave, its status and why. ``gpunode rollout --dry-run`` records its plan in a run
of kind ``rollout_plan`` (routine: rotated like other routine runs); a rollout that changes
nodes records itself in a run of kind ``rollout``, an evidence kind, so that routine runs never
rotate away a record a later run must resume from.

Statuses, and the only moves between them (:data:`TRANSITIONS`): a node is ``pending`` until
its wave starts; then ``draining`` (its scheduler drains it; its running jobs end),
``changing`` (provisioned to the lock, rebooted where the driver module changes),
``accepting`` (the acceptance test) and ``ready``; ``failed`` from any step that fails;
``skipped`` for a node the rollout leaves alone (on the lock, unreadable) or whose jobs did not
end in time. ``ready``, ``failed`` and ``skipped`` are final. A node found ``draining``,
``changing`` or ``accepting`` by a later run was interrupted there: that run finishes it.

The file is replaced whole (``nodefile.replace``: a temporary file, fsync, rename), so a reader
never sees half a record, and is read back through the one bounded read and checked against
:class:`RolloutRecord` (a file that does not match is a ``ConfigError`` naming the file and the
key path).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolkit.config import load_json, validate
from toolkit.errors import ConfigError
from toolkit.node import nodefile
from toolkit.records import runs
from toolkit.rollout.plan import RolloutPlan

RECORD = "rollout.json"
SCHEMA = 1
ROLLOUT_KIND = "rollout"  # a rollout that changes nodes (an evidence kind: runs.EVIDENCE_KINDS)
PLAN_KIND = "rollout_plan"  # gpunode rollout --dry-run (routine)

STATUSES = ("pending", "draining", "changing", "accepting", "ready", "failed", "skipped")
FINAL = frozenset({"ready", "failed", "skipped"})
ACTIVE = frozenset({"draining", "changing", "accepting"})
TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"draining", "skipped", "failed"}),
    # Jobs that did not end by --drain-timeout: the node is skipped, not changed.
    "draining": frozenset({"changing", "skipped", "failed"}),
    "changing": frozenset({"accepting", "failed"}),
    "accepting": frozenset({"ready", "failed"}),
    "ready": frozenset(),
    "failed": frozenset(),
    "skipped": frozenset(),
}

Status = Literal["pending", "draining", "changing", "accepting", "ready", "failed", "skipped"]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Change(_Entry):
    component: str
    package: str
    installed: str
    locked: str
    kind: str


class RolloutNode(_Entry):
    """One node of the record."""

    group: str
    domain: str | None = None
    wave: int | None = Field(default=None, ge=1)
    status: Status
    reason: str = ""
    from_stack: str | None = None
    to_stack: str
    reboot: str | None = None
    changes: list[_Change] = []
    updated: str


class _Options(_Entry):
    max_unavailable: str
    max_failures: int = Field(ge=1)
    canary: list[str] = []
    allow_same_domain: bool = False


class RolloutRecord(_Entry):
    """``rollout.json``."""

    schema_version: int = Field(alias="schema", ge=1)
    rollout_id: str
    inventory: str
    limit: str | None = None
    dry_run: bool
    created: str
    updated: str
    stopped: str | None = None  # why the rollout stopped (the failure budget spent ...)
    options: _Options
    limits: dict[str, int]
    waves: list[list[str]]
    nodes: dict[str, RolloutNode]


def _now(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat()


def new_record(
    plan: RolloutPlan,
    *,
    rollout_id: str,
    inventory: Path | str,
    limit: str | None,
    dry_run: bool,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The record of a rollout about to start (or of a dry run's plan): every node at its
    first status (``pending``, or ``skipped`` with why)."""
    when = _now(now)
    nodes = {}
    for host, node in plan.nodes.items():
        entry = node.to_dict()
        nodes[host] = {
            key: entry[key]
            for key in (
                "group",
                "domain",
                "wave",
                "status",
                "reason",
                "from_stack",
                "to_stack",
                "reboot",
                "changes",
            )
        }
        nodes[host]["updated"] = when
    record = {
        "schema": SCHEMA,
        "rollout_id": rollout_id,
        "inventory": str(inventory),
        "limit": limit,
        "dry_run": dry_run,
        "created": when,
        "updated": when,
        "stopped": None,
        "options": plan.options.to_dict(),
        "limits": dict(plan.limits),
        "waves": [list(w) for w in plan.waves],
        "nodes": nodes,
    }
    return check(record, RECORD)


def check(data: Any, source: str | Path) -> dict[str, Any]:
    """A record checked against :class:`RolloutRecord` and against itself (every host of a
    wave is a node planned in that wave).

    Raises:
        ConfigError: Naming ``source``, the key path and the rule.
    """
    record = validate(RolloutRecord, data, source).model_dump(by_alias=True)
    for number, wave in enumerate(record["waves"], start=1):
        for host in wave:
            node = record["nodes"].get(host)
            if node is None or node["wave"] != number:
                raise ConfigError(
                    f"{source}: waves.{number - 1}: {host} is not a node of wave {number}"
                )
    return record


def advance(
    record: Mapping[str, Any],
    host: str,
    status: str,
    reason: str = "",
    now: datetime | None = None,
) -> dict[str, Any]:
    """The record with ``host`` moved to ``status`` (with why).

    Raises:
        ConfigError: An unknown host or status, or a move :data:`TRANSITIONS` does not allow
            (naming the host, both statuses and the rule).
    """
    nodes = record["nodes"]
    if host not in nodes:
        raise ConfigError(f"rollout {record['rollout_id']}: no node {host}")
    if status not in STATUSES:
        raise ConfigError(f"{host}: unknown rollout status {status!r}; one of {STATUSES}")
    current = nodes[host]["status"]
    if status not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none: it is final"
        raise ConfigError(
            f"{host}: a rollout node cannot go from {current} to {status} ({allowed})"
        )
    when = _now(now)
    node = {**nodes[host], "status": status, "reason": reason, "updated": when}
    return {**record, "nodes": {**nodes, host: node}, "updated": when}


def failures(record: Mapping[str, Any]) -> list[str]:
    """The failed nodes."""
    return [h for h, n in record["nodes"].items() if n["status"] == "failed"]


def budget_spent(record: Mapping[str, Any]) -> bool:
    """The failure budget is spent: no further node may be touched."""
    return len(failures(record)) >= record["options"]["max_failures"]


def unfinished(record: Mapping[str, Any]) -> list[str]:
    """The nodes not at a final status (pending or interrupted mid-step)."""
    return [h for h, n in record["nodes"].items() if n["status"] not in FINAL]


def progress(record: Mapping[str, Any]) -> dict[str, Any]:
    """How far the rollout is: nodes per status, the current wave, whether it stopped."""
    counts = {status: 0 for status in STATUSES}
    for node in record["nodes"].values():
        counts[node["status"]] += 1
    waves = record["waves"]
    current = next(
        (
            number
            for number, wave in enumerate(waves, start=1)
            if any(record["nodes"][h]["status"] not in FINAL for h in wave)
        ),
        None,
    )
    return {
        "rollout_id": record["rollout_id"],
        "waves": len(waves),
        "wave": current,
        "counts": counts,
        "stopped": record.get("stopped"),
        "finished": not unfinished(record),
    }


def write(run_dir: Path, record: Mapping[str, Any]) -> Path:
    """Replace ``<run_dir>/rollout.json`` with the checked record, whole.

    Raises:
        ConfigError: The record does not match its schema (nothing is written).
    """
    path = run_dir / RECORD
    checked = check(dict(record), path)
    nodefile.replace(str(path), json.dumps(checked, indent=1, sort_keys=True) + "\n")
    return path


def read(path: Path) -> dict[str, Any]:
    """A rollout record, through the one bounded read, checked.

    Raises:
        ConfigError: Not a regular file, too large, not strict JSON, or not a rollout record.
    """
    return check(load_json(path, "rollout record", follow=False), path)


def in_progress(runs_dir: Path | None = None) -> dict[str, Any] | None:
    """The newest rollout (not a dry run) with nodes not at a final status, as
    :func:`progress` gives it, or None. A record that cannot be read is skipped here (the
    rollout that owns it names the problem when it resumes)."""
    for info in reversed(runs.list_runs(runs_dir, ROLLOUT_KIND)):
        path = info.path / RECORD
        if not path.is_file():
            continue
        try:
            record = read(path)
        except ConfigError:
            continue
        if not record["dry_run"] and unfinished(record):
            return progress(record)
    return None
