"""Multi-node acceptance: the plans, the choice between them, and blaming the slow node.

A slow all-reduce between nodes says that *some* node is slow, not which. Two plans narrow it:

- up to ``ADAPTIVE_FROM`` nodes, the ring, then pairs, then each suspect re-paired with a node
  that passed (Google's cluster-health-scanner approach, domain.md section 3). When no node is
  known good (two nodes, or every pair slow), the direction of a point-to-point transfer names
  the node whose link sends slowly;
- from ``ADAPTIVE_FROM`` nodes, adaptive group testing (toolkit/acceptance/isolation.py:
  screen groups, bisect the failing ones, confirm each suspect with a known-good node).

:func:`run_multi_node` is the one place that chooses. Pure: the tests themselves are run by a
callable the orchestrator passes in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from toolkit.acceptance.check import Check
from toolkit.acceptance.isolation import AdaptivePlan, Isolation, Probe, SetResult, run_plan
from toolkit.acceptance.perf_checks import allreduce_checks, transport_checks
from toolkit.acceptance.train_checks import multi_node_scaling_check
from toolkit.profile.floors import BusbwFloor, TransportSpec

# A direction is "slow" when it moves less than this share of the faster direction: shaping
# or a bad cable on one side shows as asymmetry, noise does not reach a factor of two.
ASYMMETRY_RATIO = 0.5

# From this many nodes the adaptive plan replaces ring, pairs and re-pairs. Measured by
# tests/bench/test_bench_isolation.py (network model, mean of 20 placements of slow nodes, no
# limit on sets at once): at 16 nodes the adaptive plan runs 9.0 tests in 3 rounds with 1 bad
# node (pairs plan 11.0 in 4) and 14.9 in 3 with 3 bad (14.5 in 7.5); at 32 nodes 21.6 in 4
# (22.8 in 7.8). Below 16 it saves rounds but not tests (8 nodes, 3 bad: 11.2 against 10.4),
# and with most of a few nodes bad (4 nodes, 3 bad) it cannot prove the good one, where the
# pairs plan's transfer directions still name the slow senders; the lab's 2-3 nodes keep it.
ADAPTIVE_FROM = 16


@dataclass
class PairOutcome:
    """One all-reduce over a set of nodes (a pair or the ring)."""

    hosts: tuple[str, ...]
    result: dict[str, Any]  # the runner's all-reduce section from node 0 of the set
    checks: list[Check] = field(default_factory=list)
    # Which step of its plan ran it (ring, pair, re-pair; screen, inter, bisect, confirm,
    # retest, link) and in which round (the adaptive plan runs a round's sets at once).
    stage: str | None = None
    round: int | None = None

    @property
    def ok(self) -> bool:
        """Every correctness and floor check passed."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "hosts": list(self.hosts),
            "ok": self.ok,
            "stage": self.stage,
            "round": self.round,
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
    plan: str = "pairs"  # or "adaptive"
    rounds: int | None = None  # the adaptive plan's rounds of sets run at once
    # Bad links: two nodes that pass with others and fail together; neither is blamed.
    links: dict[tuple[str, str], list[Check]] = field(default_factory=dict)
    # Sets that failed once and passed when run again (a flaky node; nobody blamed), and sets
    # that failed twice though no pair of their nodes fails.
    transient: list[tuple[str, ...]] = field(default_factory=list)
    unresolved: list[tuple[str, ...]] = field(default_factory=list)

    @classmethod
    def merged(cls, reports: Sequence[MultiNodeReport]) -> MultiNodeReport:
        """The reports of several groups as one (the groups run one after another): each
        ring among the sets, rounds added up, plans named."""
        out = cls(None, [], [], {}, plan="+".join(dict.fromkeys(r.plan for r in reports)))
        out.rounds = sum(r.rounds or 0 for r in reports)
        for report in reports:
            if report.ring is not None:
                out.pairs.append(report.ring)
            out.pairs.extend(report.pairs)
            out.repairs.extend(report.repairs)
            for host, checks in report.blame.items():
                out.blame.setdefault(host, []).extend(checks)
            out.passed.update(report.passed)
            out.links.update(report.links)
            out.transient.extend(report.transient)
            out.unresolved.extend(report.unresolved)
        return out

    @property
    def tests(self) -> int:
        """The sets run."""
        return (1 if self.ring else 0) + len(self.pairs) + len(self.repairs)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "plan": self.plan,
            "tests": self.tests,
            "rounds": self.rounds,
            "ring": self.ring.to_dict() if self.ring else None,
            "pairs": [p.to_dict() for p in self.pairs],
            "repairs": [p.to_dict() for p in self.repairs],
            "blame": {h: [c.to_dict() for c in cs] for h, cs in self.blame.items()},
            "links": [
                {"hosts": list(ends), "checks": [c.to_dict() for c in checks]}
                for ends, checks in self.links.items()
            ],
            "transient": [list(s) for s in self.transient],
            "unresolved": [list(s) for s in self.unresolved],
        }


def run_multi_node(
    hosts: Sequence[str],
    floors: list[BusbwFloor],
    run_set: RunSet,
    min_scaling: float | None = None,
    transport: TransportSpec | None = None,
    *,
    domains: Mapping[str, str] | None = None,
    max_concurrent: int | None = None,
) -> MultiNodeReport:
    """The multi-node stage over one group's nodes, by the plan that fits their number.

    Args:
        hosts: The group's nodes that passed their single-node checks, in inventory order.
        floors: The multi-node busbw floors.
        run_set: Runs one all-reduce over the given hosts (one rank set per node, launched
            together), then the training loop at every scaling point, and returns rank 0's
            section (all-reduce rows and ``train``); the flag asks for the point-to-point
            direction test (pairs only). Called from several threads at once by the adaptive
            plan, never with a node in two sets at once.
        min_scaling: The floor of the loop's efficiency across nodes (None: shown only).
        transport: The profile's transport rules, held against each set's NCCL log.
        domains: Each node's topology domain (rack, NVLink clique) where the inventory gives
            one: the adaptive plan screens a domain as one group.
        max_concurrent: The most sets the adaptive plan runs at once (None: no bound but the
            nodes themselves).

    Returns:
        The report, with failed checks blamed on the responsible nodes only.
    """
    if len(hosts) >= ADAPTIVE_FROM:
        return run_adaptive(hosts, floors, run_set, min_scaling, transport, domains, max_concurrent)
    return run_pairs(hosts, floors, run_set, min_scaling, transport)


def _outcome_of(
    run_set: RunSet,
    floors: list[BusbwFloor],
    min_scaling: float | None,
    transport: TransportSpec | None,
) -> Callable[[Sequence[str], bool], PairOutcome]:
    def outcome_of(members: Sequence[str], p2p: bool) -> PairOutcome:
        result = run_set(members, p2p)
        checks = allreduce_checks(result, floors, prefix="multinode")
        checks += transport_checks(result, transport, prefix="multinode", across_nodes=True)
        checks.append(multi_node_scaling_check(result, min_scaling))
        return PairOutcome(tuple(members), result, checks)

    return outcome_of


def run_pairs(
    hosts: Sequence[str],
    floors: list[BusbwFloor],
    run_set: RunSet,
    min_scaling: float | None = None,
    transport: TransportSpec | None = None,
) -> MultiNodeReport:
    """Ring, then pairs, then re-pair suspects with a known-good node (arguments as
    :func:`run_multi_node`'s); one set at a time."""
    run = _outcome_of(run_set, floors, min_scaling, transport)

    def outcome_of(members: Sequence[str], p2p: bool, stage: str) -> PairOutcome:
        outcome = run(members, p2p)
        outcome.stage = stage
        return outcome

    blame: dict[str, list[Check]] = {}
    if len(hosts) < 2:
        return MultiNodeReport(None, [], [], blame)
    ring = outcome_of(hosts, len(hosts) == 2, "ring")
    # The ring of two nodes is their pair.
    pair_outcomes = (
        [ring] if len(hosts) == 2 else [outcome_of(p, True, "pair") for p in pairs(hosts)]
    )
    good = [h for p in pair_outcomes if p.ok for h in p.hosts]
    suspects = [h for p in pair_outcomes if not p.ok for h in p.hosts if h not in good]
    repairs: list[PairOutcome] = []
    if good:
        reference = good[0]
        for suspect in dict.fromkeys(suspects):
            outcome = outcome_of((reference, suspect), True, "re-pair")
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
    shown = pair_outcomes if len(hosts) > 2 else []
    return MultiNodeReport(
        ring, shown, repairs, blame, passed, rounds=1 + len(shown) + len(repairs)
    )


def run_adaptive(
    hosts: Sequence[str],
    floors: list[BusbwFloor],
    run_set: RunSet,
    min_scaling: float | None = None,
    transport: TransportSpec | None = None,
    domains: Mapping[str, str] | None = None,
    max_concurrent: int | None = None,
) -> MultiNodeReport:
    """Screen groups, bisect the failing ones, confirm each suspect with a known-good node
    (arguments as :func:`run_multi_node`'s); the sets of a round run at once."""
    run = _outcome_of(run_set, floors, min_scaling, transport)
    outcomes: dict[int, PairOutcome] = {}

    def run_round(probes: list[Probe]) -> list[SetResult]:
        def one(probe: Probe) -> PairOutcome:
            # The reference first: it is rank 0, whose section comes back.
            members = probe.members[::-1] if probe.reference else probe.members
            return run(members, len(members) == 2)

        if len(probes) == 1:
            done = [one(probes[0])]
        else:
            with ThreadPoolExecutor(max_workers=len(probes)) as pool:
                done = list(pool.map(one, probes))
        for probe, outcome in zip(probes, done, strict=True):
            outcome.stage = probe.stage
            outcomes[probe.id] = outcome
        return [set_result(o) for o in done]

    found = run_plan(AdaptivePlan(hosts, domains, max_concurrent), run_round)
    for record in found.records:
        outcomes[record.probe.id].round = record.round
    blame = _adaptive_blame(found, outcomes)
    links = {
        link.ends: [
            _named(c, f"link {link.ends[0]} - {link.ends[1]}: each passes with other nodes")
            for c in outcomes[link.evidence.probe.id].checks
            if not c.ok
        ]
        for link in found.links
    }
    ordered = [outcomes[r.probe.id] for r in found.records]
    passed: dict[str, list[Check]] = {}
    for outcome in ordered:
        if outcome.ok:
            for host in outcome.hosts:
                if host not in blame:
                    passed.setdefault(host, list(outcome.checks))
    return MultiNodeReport(
        None,
        [o for o in ordered if o.stage != "confirm"],
        [o for o in ordered if o.stage == "confirm"],
        blame,
        passed,
        plan="adaptive",
        rounds=found.rounds,
        links=links,
        transient=found.transient,
        unresolved=found.unresolved,
    )


def set_result(outcome: PairOutcome) -> SetResult:
    """What the isolation plan reads of one set: passed, slow (only busbw or scaling floors
    failed; the slowest busbw measured) or failed."""
    if outcome.ok:
        return SetResult("pass")
    failed = [c for c in outcome.checks if not c.ok]
    if failed and _slow_only(failed):
        busbw = [
            float(c.measured)
            for c in failed
            if c.name.startswith("multinode.busbw@") and isinstance(c.measured, int | float)
        ]
        return SetResult("slow", min(busbw) if busbw else None)
    return SetResult("fail")


def _adaptive_blame(found: Isolation, outcomes: dict[int, PairOutcome]) -> dict[str, list[Check]]:
    """The failed checks of the set that names each accused node."""
    blame: dict[str, list[Check]] = {}
    for node, accusation in found.accused.items():
        if accusation.evidence is None:
            blame[node] = [
                Check("multinode.run", False, "not run across nodes: no node is known good")
            ]
            continue
        outcome = outcomes[accusation.evidence.probe.id]
        if accusation.confirmed:
            context = f"with known-good {accusation.evidence.probe.reference}"
        else:
            context = (
                f"set {' + '.join(outcome.hosts)}: no node is known good, so its nodes "
                "cannot be told apart"
            )
        blame[node] = [_named(c, context) for c in outcome.checks if not c.ok]
    return blame


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
    slow_only = _slow_only(failed)
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


def _slow_only(failed: list[Check]) -> bool:
    """Slow, not broken: below a busbw floor or scaling badly across the set (both measure
    the links)."""
    return all(c.name.startswith(("multinode.busbw@", "multinode.scaling")) for c in failed)
