"""Verdicts: a node's runner result held against its hardware profile, its pins and floors.

Pure: the inputs are the runner's JSON result (``node_runner``), what the inventory says
the node must be (:class:`NodeExpectation`) and the thresholds in force. Every check that
fails is kept, with the measured value and the floor it missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolkit.acceptance import failure
from toolkit.acceptance.check import (
    NOT_MEASURED,
    Check,
    NodeExpectation,
    counts,
    coverage_check,
)
from toolkit.acceptance.fabric_checks import fabric_checks
from toolkit.acceptance.node_checks import stack_check
from toolkit.acceptance.passive import passive_checks
from toolkit.acceptance.perf_checks import (
    allreduce_checks,
    dcgm_checks,
    gpu_perf_checks,
    topology_checks,
    transport_checks,
)
from toolkit.acceptance.thresholds import critical_xids
from toolkit.acceptance.train_checks import data_checks, training_checks
from toolkit.profile.floors import AcceptanceSpec
from toolkit.stack import catalog

READY = "ready"
NOT_READY = "not-ready"
# The executor could not test the node (drained before the run, its job never started or was
# preempted): no verdict on the node, which keeps its state and its scheduler mark.
NOT_TESTED = "not-tested"
NOT_TESTED_CHECK = "executor.not-tested"


@dataclass
class Verdict:
    """The verdict of one node."""

    host: str
    checks: list[Check]
    tested: bool = True

    @property
    def ready(self) -> bool:
        """Ready only when no check failed (and there was at least one); a check not measured
        does not fail the node, the profile's required coverage does (the ``coverage``
        check)."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def verdict(self) -> str:
        """``ready``, ``not-ready`` or ``not-tested``."""
        if not self.tested:
            return NOT_TESTED
        return READY if self.ready else NOT_READY

    @property
    def failed(self) -> list[Check]:
        """Every failed check."""
        return [c for c in self.checks if not c.ok]

    @property
    def not_measured(self) -> list[Check]:
        """Every check that was not measured (never counted as passed)."""
        return [c for c in self.checks if c.outcome == NOT_MEASURED]

    def counts(self) -> dict[str, int]:
        """How many checks passed, failed and were not measured."""
        return counts(self.checks)

    def reasons(self) -> list[str]:
        """One line per failed check: ``check: message``."""
        return [f"{c.name}: {c.message}" for c in self.failed]

    def advised_reasons(self) -> list[str]:
        """One line per failed check with its class and next action (the node state's
        reasons): ``check: message -> [class] action``."""
        return [f"{c.name}: {c.message} -> {c.advice}" for c in self.failed]

    @property
    def failure_class(self) -> str | None:
        """The leading class of the failed checks (``failure.CLASSES`` order), None when
        every check passed."""
        return failure.leading([c.failure_class for c in self.failed])

    def to_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready data."""
        return {
            "host": self.host,
            "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks],
            "outcomes": self.counts(),
            "failure_class": self.failure_class,
            "failed_checks": [
                {
                    "check": c.name,
                    "message": c.message,
                    "measured": c.measured,
                    "floor": c.floor,
                    "failure_class": c.failure_class,
                    "action": c.action,
                    "action_source": c.action_source,
                }
                for c in self.failed
            ],
            "not_measured_checks": [
                {"check": c.name, "message": c.message, "reason": c.reason}
                for c in self.not_measured
            ],
        }


def not_tested_verdict(host: str, reason: str) -> Verdict:
    """The outcome of a node the executor could not test: one failed check saying why."""
    return Verdict(host, [Check(NOT_TESTED_CHECK, False, reason)], tested=False)


def judge(
    result: dict[str, Any] | None,
    expect: NodeExpectation,
    spec: AcceptanceSpec,
    *,
    runner_error: str | None = None,
    extra: list[Check] | None = None,
) -> Verdict:
    """Give one node's verdict.

    Args:
        result: The runner's JSON result (None when the runner failed).
        expect: What the inventory says the node must be.
        spec: The thresholds in force (``thresholds.effective``).
        runner_error: Why there is no result, when there is none.
        extra: Checks decided elsewhere (multi-node blame) to add to this node's.

    Returns:
        The verdict with every check.
    """
    checks: list[Check] = []
    if result is None:
        checks.append(Check("runner", False, runner_error or "the runner produced no result"))
        checks.extend(extra or [])
        return Verdict(expect.host, checks)
    checks += passive_checks(result, expect, spec, xids=critical_xids(), model_of=catalog.model_of)
    # The host-to-container contract first: a container without the host's devices measures
    # the harness, and the figures below are read with that in mind.
    checks += fabric_checks(result, spec)
    checks += allreduce_checks(result.get("allreduce"), spec.allreduce)
    checks += transport_checks(result.get("allreduce"), spec.transport)
    checks += gpu_perf_checks(result, spec)
    checks += data_checks(result, spec)
    checks += training_checks(result, spec)
    checks += topology_checks(result, spec)
    checks += dcgm_checks(result, spec)
    checks.append(stack_check(result, expect))
    checks.extend(extra or [])
    # Last: the profile's required coverage, over every check above.
    coverage = coverage_check(checks, spec.require_measured)
    checks += [coverage] if coverage is not None else []
    return Verdict(expect.host, checks)
