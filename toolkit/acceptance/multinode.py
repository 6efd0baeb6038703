"""Multi-node acceptance: the plan (ring, pairs, re-pairing) and blaming the slow node.

A slow all-reduce between nodes says that *some* node is slow, not which. Pairs narrow it;
a suspect is then re-paired with a node that passed (Google's cluster-health-scanner
approach, domain.md section 3). When no node is known good (two nodes, or every pair
slow), the direction of a point-to-point transfer names the node whose link sends slowly.
Pure: the tests themselves are run by a callable the orchestrator passes in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.acceptance.check import Check
from toolkit.acceptance.nccllog import TransportSpec
from toolkit.acceptance.perf_checks import allreduce_checks, transport_checks
from toolkit.acceptance.thresholds import BusbwFloor
from toolkit.acceptance.train_checks import multi_node_scaling_check

# A direction is "slow" when it moves less than this share of the faster direction: shaping
# or a bad cable on one side shows as asymmetry, noise does not reach a factor of two.
ASYMMETRY_RATIO = 0.5


@dataclass
class PairOutcome:
    """One all-reduce over a set of nodes (a pair or the ring)."""

    hosts: tuple[str, ...]
    result: dict[str, Any]  # the runner's all-reduce section from node 0 of the set
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every correctness and floor check passed."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "hosts": list(self.hosts),
            "ok": self.ok,
            "rows": self.result.get("rows", []),
            "p2p_gbps": self.result.get("p2p_gbps"),
            # The training loop across these nodes: efficiency against 1 rank per point.
            "scaling": ((self.result.get("train") or {}).get("scaling") or {}).get("points"),
            "error": self.result.get("error"),
            "checks": [c.to_dict() for c in self.checks],
        }


RunSet = Callable[[Sequence[str], bool], dict[str, Any]]


def pairs(hosts: Sequence[str]) -> list[tuple[str, str]]:
    """Disjoint neighbour pairs; an odd node out is paired with the first node."""
    out = [(hosts[i], hosts[i + 1]) for i in range(0, len(hosts) - 1, 2)]
    if len(hosts) % 2 == 1 and len(hosts) > 1:
        out.append((hosts[-1], hosts[0]))
    return out


@dataclass
class MultiNodeReport:
    """Everything the multi-node stage found."""

    ring: PairOutcome | None
    pairs: list[PairOutcome]
    repairs: list[PairOutcome]
    blame: dict[str, list[Check]]
    # Passing checks of the nodes not blamed, from a set they passed in (reports and JUnit
    # show that a node was tested across nodes, not only that it was not blamed).
    passed: dict[str, list[Check]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "ring": self.ring.to_dict() if self.ring else None,
            "pairs": [p.to_dict() for p in self.pairs],
            "repairs": [p.to_dict() for p in self.repairs],
            "blame": {h: [c.to_dict() for c in cs] for h, cs in self.blame.items()},
        }


def run_multi_node(
    hosts: Sequence[str],
    floors: list[BusbwFloor],
    run_set: RunSet,
    min_scaling: float | None = None,
    transport: TransportSpec | None = None,
) -> MultiNodeReport:
    """Ring, then pairs, then re-pair suspects with a known-good node.

    Args:
        hosts: The group's nodes that passed their single-node checks, in inventory order.
        floors: The multi-node busbw floors.
        run_set: Runs one all-reduce over the given hosts (one rank set per node, launched
            together), then the training loop at every scaling point, and returns rank 0's
            section (all-reduce rows and ``train``); the flag asks for the point-to-point
            direction test (pairs only).
        min_scaling: The floor of the loop's efficiency across nodes (None: shown only).
        transport: The profile's transport rules, held against each set's NCCL log.

    Returns:
        The report, with failed checks blamed on the responsible nodes only.
    """

    def outcome_of(members: Sequence[str], p2p: bool) -> PairOutcome:
        result = run_set(members, p2p)
        checks = allreduce_checks(result, floors, prefix="multinode")
        checks += transport_checks(result, transport, prefix="multinode")
        checks.append(multi_node_scaling_check(result, min_scaling))
        return PairOutcome(tuple(members), result, checks)

    blame: dict[str, list[Check]] = {}
    if len(hosts) < 2:
        return MultiNodeReport(None, [], [], blame)
    ring = outcome_of(hosts, len(hosts) == 2)
    # The ring of two nodes is their pair.
    pair_outcomes = [ring] if len(hosts) == 2 else [outcome_of(p, True) for p in pairs(hosts)]
    good = [h for p in pair_outcomes if p.ok for h in p.hosts]
    suspects = [h for p in pair_outcomes if not p.ok for h in p.hosts if h not in good]
    repairs: list[PairOutcome] = []
    if good:
        reference = good[0]
        for suspect in dict.fromkeys(suspects):
            outcome = outcome_of((reference, suspect), True)
            repairs.append(outcome)
            if not outcome.ok:
                blame.setdefault(suspect, []).extend(
                    _named(c, f"with known-good {reference}") for c in outcome.checks if not c.ok
                )
    else:
        for outcome in pair_outcomes:
            if outcome.ok:
                continue
            for host, check in _blame_by_direction(outcome):
                blame.setdefault(host, []).append(check)
    passed: dict[str, list[Check]] = {}
    for outcome in [*pair_outcomes, *repairs]:
        if outcome.ok:
            for host in outcome.hosts:
                if host not in blame:
                    passed.setdefault(host, list(outcome.checks))
    return MultiNodeReport(ring, pair_outcomes if len(hosts) > 2 else [], repairs, blame, passed)


def _named(check: Check, context: str) -> Check:
    return Check(
        check.name,
        check.ok,
        f"{check.message} ({context})",
        check.measured,
        check.floor,
        check.unit,
    )


def _blame_by_direction(outcome: PairOutcome) -> list[tuple[str, Check]]:
    """Blame within one failed pair when no node is known good.

    Correctness failures and runs that did not complete are blamed on both (nothing tells
    them apart); a slow pair is blamed on the node whose sending direction is slow.
    """
    a, b = outcome.hosts[0], outcome.hosts[1]
    failed = [c for c in outcome.checks if not c.ok]
    # Slow: below a busbw floor or scaling badly across the pair (both measure the link).
    slow_only = all(c.name.startswith(("multinode.busbw@", "multinode.scaling")) for c in failed)
    p2p = outcome.result.get("p2p_gbps") or {}
    ab, ba = p2p.get("0->1"), p2p.get("1->0")
    if slow_only and ab and ba:
        if ba < ASYMMETRY_RATIO * ab:
            return [
                (b, _named(c, f"paired with {a}; {b} sends at {ba:.3f} GB/s, {a} at {ab:.3f} GB/s"))
                for c in failed
            ]
        if ab < ASYMMETRY_RATIO * ba:
            return [
                (a, _named(c, f"paired with {b}; {a} sends at {ab:.3f} GB/s, {b} at {ba:.3f} GB/s"))
                for c in failed
            ]
    return [
        (h, _named(c, f"pair {a}+{b}; the slow side cannot be told apart"))
        for h in (a, b)
        for c in failed
    ]
