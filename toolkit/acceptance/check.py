"""One check of one node, what the inventory says the node must be, and the floor helpers
every family of checks judges its figures with (``verdict.py`` puts the families together).

Standard library only: the node-side health check ships it (``payload.HEALTHCHECK_MODULES``);
what a node must be is computed from the inventory by ``expectation.expected_node``."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from toolkit.acceptance import failure

# Every check ends in one of three outcomes (design.md, "outcome"). Not measured covers
# skipped, not judged, not covered and emulated: the check says why in ``reason``, it never
# fails the node by itself (a profile's ``require_measured`` does: ``coverage_check``) and it
# is never shown or counted as passed.
PASSED, FAILED, NOT_MEASURED = "passed", "failed", "not_measured"
OUTCOMES = (PASSED, FAILED, NOT_MEASURED)
Outcome = Literal["passed", "failed", "not_measured"]
COVERAGE_CHECK = "coverage"


@dataclass(frozen=True)
class Check:
    """One check of one node.

    ``outcome`` is passed, failed or not measured; ``ok`` means "not failed" (a not-measured
    check is ok: it does not fail the node), so no reader may take ``ok`` for passed: read
    ``outcome``. Build a not-measured check with :func:`not_measured`, which gives the reason.

    A failed check carries its failure class and the recommended next action with its source
    (``failure.py``): set by the check where what it read decides them (an XID's catalog
    action, a DCGM severity), else from ``failure.RULES`` by its name. A passed or not-measured
    check has none.
    """

    name: str
    ok: bool
    message: str
    measured: Any = None
    floor: Any = None
    unit: str | None = None
    failure_class: str | None = None
    action: str | None = None
    action_source: str | None = None
    # Set from ``ok`` (passed or failed) unless the check says not measured.
    outcome: str = ""
    # Why a check was not measured (None for passed and failed).
    reason: str | None = None

    def __post_init__(self) -> None:
        if self.outcome == NOT_MEASURED:
            if not self.ok or not self.reason:
                raise ValueError(f"{self.name}: a not-measured check is ok and says why")
        elif self.outcome not in ("", PASSED if self.ok else FAILED):
            raise ValueError(f"{self.name}: outcome {self.outcome!r} with ok={self.ok}")
        else:
            object.__setattr__(self, "outcome", PASSED if self.ok else FAILED)
        if self.ok:
            advice = None
        elif self.failure_class is not None and self.action is not None:
            return
        else:
            advice = failure.advice_for(self.name)
        # Frozen: the class is part of the record from the start, set once here.
        object.__setattr__(self, "failure_class", advice.failure_class if advice else None)
        object.__setattr__(self, "action", advice.action if advice else None)
        object.__setattr__(self, "action_source", advice.source if advice else None)

    @property
    def passed(self) -> bool:
        """Whether the check was measured and passed (not merely not failed)."""
        return self.outcome == PASSED

    @property
    def measured_outcome(self) -> bool:
        """Whether the check was measured (passed or failed)."""
        return self.outcome != NOT_MEASURED

    @property
    def advice(self) -> str:
        """``[class] action`` of a failed check, empty for a passed one."""
        return f"[{self.failure_class}] {self.action}" if self.failure_class else ""

    def to_dict(self) -> dict[str, Any]:
        """The check as JSON-ready data."""
        return asdict(self)


def not_measured(name: str, reason: str, message: str | None = None, **fields: Any) -> Check:
    """A check that was not measured (skipped, not judged, not covered, emulated), and why;
    ``message`` defaults to ``not measured: <reason>``."""
    return Check(
        name,
        True,
        message or f"not measured: {reason}",
        outcome=NOT_MEASURED,
        reason=reason,
        **fields,
    )


def counts(checks: list[Check]) -> dict[str, int]:
    """How many checks passed, failed and were not measured."""
    return {o: sum(c.outcome == o for c in checks) for o in OUTCOMES}


def covers(required: str, name: str) -> bool:
    """Whether a check's name falls under a required name: the same name, or a check of that
    family (``gemm`` covers ``gemm.gpu0``, ``allreduce`` covers ``allreduce.busbw@16GiB``)."""
    return name == required or name.startswith(required + ".")


def coverage_check(checks: list[Check], required: list[str] | tuple[str, ...]) -> Check | None:
    """The profile's required coverage held against a node's checks: every required name must
    have been measured (passed or failed) by at least one check, and by no check not measured.
    Below it the node is not ready for ``coverage``, naming each required check that was not
    measured and why (class harness: make the check measurable). None when nothing is
    required."""
    if not required:
        return None
    missing: list[str] = []
    for name in required:
        under = [c for c in checks if covers(name, c.name)]
        unmeasured = [c for c in under if c.outcome == NOT_MEASURED]
        if not under:
            missing.append(f"{name} (no such check ran)")
        elif unmeasured:
            missing += [f"{c.name} ({c.reason})" for c in unmeasured]
    if not missing:
        return Check(
            COVERAGE_CHECK,
            True,
            "every required check was measured: " + ", ".join(required),
            measured=list(required),
            floor=list(required),
        )
    return Check(
        COVERAGE_CHECK,
        False,
        "required but not measured: " + "; ".join(missing),
        measured=[m.split(" (", 1)[0] for m in missing],
        floor=list(required),
    )


@dataclass(frozen=True)
class NodeExpectation:
    """What the inventory says one node must be."""

    host: str
    stack_id: str | None
    gpu_model: str | None = None
    gpu_count: int | None = None
    driver_version: str | None = None
    # package name -> exact apt version, for every pinned package the runner was asked about
    packages: dict[str, str] = field(default_factory=dict)
    nccl_version: str | None = None  # "2.21.5" (without the +cuda build)


def floor_check(
    name: str,
    value: float | None,
    floor: float | None,
    unit: str,
    *,
    at_most: bool = False,
    what: str = "",
) -> Check | None:
    """A figure judged against its floor, or with ``at_most`` against a limit it must stay at
    or below (``floor`` is then that limit); ``what`` leads the message. None without one."""
    if floor is None:
        return None
    if value is None:
        return Check(name, False, "not measured", floor=floor, unit=unit)
    if at_most:
        ok = value <= floor
        message = f"{what}{value:.3g} {unit} {'<=' if ok else '>'} limit {floor} {unit}"
    else:
        ok = value >= floor
        message = f"{what}{value:.2f} {unit} {'>=' if ok else '<'} floor {floor} {unit}"
    return Check(
        name, ok, message, measured=round(value, 4 if at_most else 3), floor=floor, unit=unit
    )


def floor_checks(
    values: dict[str, Any], floors: tuple[tuple[str, str, float | None], ...], unit: str
) -> list[Check]:
    """One floor check per ``(check name, key of values, floor)`` whose floor is set."""
    checks = (floor_check(name, values.get(key), floor, unit) for name, key, floor in floors)
    return [check for check in checks if check is not None]


def per_gpu(
    kind: str,
    entries: list[dict[str, Any]],
    key: str,
    floor: float | None,
    unit: str,
    tolerance: float,
) -> list[Check]:
    """Each GPU's figure against its floor, and the GPUs below ``1 - tolerance`` of the
    node's median (stragglers) once there are two to compare."""
    checks = []
    values = [float(e[key]) for e in entries if e.get(key) is not None]
    for entry in entries:
        check = floor_check(f"{kind}.gpu{entry['gpu']}", entry.get(key), floor, unit)
        if check is not None:
            checks.append(check)
    if len(values) >= 2:
        median = statistics.median(values)
        slow = [e for e in entries if float(e[key]) < (1 - tolerance) * median]
        message = (
            "; ".join(f"GPU {e['gpu']} {float(e[key]):.1f} {unit}" for e in slow)
            + f" below {(1 - tolerance):.0%} of the node median {median:.1f} {unit}"
            if slow
            else f"every GPU within {tolerance:.0%} of the median {median:.1f} {unit}"
        )
        checks.append(
            Check(f"{kind}.straggler", not slow, message, measured=[e["gpu"] for e in slow])
        )
    return checks


def some(items: list[str], limit: int) -> str:
    """The first ``limit`` items joined, and how many more there are."""
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more
