"""Adaptive fault isolation across many nodes: screen groups, bisect the failing ones, confirm
each suspect with a known-good node, and name the bad node or the bad link.

NVIDIA's Cluster Readiness Engine replaced all-pairs testing with this (design
055-adaptive-fault-isolation, github.com/NVIDIA/cluster-readiness-engine @ 908cb14,
docs/designs/055-adaptive-fault-isolation.md): stage 1 tests every topology domain (rack,
NVLink clique) as one group, or without topology disjoint groups of ceil(sqrt N) nodes, all at
once, then one set of a representative of every passing group (the fabric between them);
stage 2 bisects every failing group, both halves side by side; stage 3 pairs each suspect with
a known-healthy node, a different one per suspect so that all run at once: a failing pair
confirms the suspect, a passing one clears it. It counts about 22-57 tests for 232 nodes where
all pairs are 26,796: the cost grows with d log N (d bad nodes), not with N squared.

Here, on top of that:

- Bisection goes down to one node, and a half of one node is tested beside a known-good node:
  that test is the confirmation (a suspect is accused only by a failing set in which every
  other member passed elsewhere).
- A bad node fails every set it is in (the design's "OR-model"). A failing set whose two
  halves both pass therefore holds no bad node: it is run again. Passing, the failure was
  transient (a flaky node) and nobody is accused; failing again, the fault lies between the
  halves, a bad link, found by halving one side against the whole other side, then the other
  side against the one end; it is named as a link and neither end is accused. (The design
  leaves pair-specific faults out; a link between two groups shows only when both ends are
  their groups' representatives.)
- While no node is known good (every set so far failed), lone suspects run in pairs with
  each other, each at most ``PAIRINGS`` times: a passing pair gives known-good nodes. Where
  none passes, the suspects are accused unconfirmed: nothing tells them apart.
- The halves of a failing set are lines of their own: a lone half waiting rounds for a free
  known-good node never holds up the bisection of its sibling.

A round is the sets run at once: no node in two of them, at most ``max_concurrent`` of them.
Pure: no I/O. The caller runs each round's sets and records their outcomes
(toolkit/acceptance/multinode.py, with the checks of every set).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

Outcome = Literal["pass", "slow", "fail"]

# How often a lone suspect runs beside another when no node is known good: a second time
# after a failing pair, whose other node may have been the bad one.
PAIRINGS = 2
Stage = Literal["screen", "inter", "bisect", "confirm", "retest", "link"]


@dataclass(frozen=True)
class Probe:
    """One set of nodes to run together."""

    id: int
    stage: Stage
    members: tuple[str, ...]  # the nodes run together, the reference included
    reference: str | None = None  # the known-good node beside a single suspect


@dataclass(frozen=True)
class SetResult:
    """What one set's run showed."""

    outcome: Outcome  # pass; slow (below a busbw or scaling floor); fail (wrong values, no run)
    busbw_gbps: float | None = None  # the slowest floor size's busbw, where measured


@dataclass(frozen=True)
class Record:
    """One probe, the round it ran in and its result."""

    probe: Probe
    round: int
    result: SetResult

    @property
    def ok(self) -> bool:
        """The set passed."""
        return self.result.outcome == "pass"


@dataclass(frozen=True)
class Accusation:
    """A node found bad, and the set that shows it."""

    node: str
    evidence: Record | None  # None: never run in a set (no node known good to run it with)
    confirmed: bool  # beside a known-good node; False: no node is known good


@dataclass(frozen=True)
class LinkFinding:
    """Two nodes that pass with others and fail together."""

    ends: tuple[str, str]
    evidence: Record


@dataclass
class Isolation:
    """Everything a plan found."""

    records: list[Record]
    rounds: int
    accused: dict[str, Accusation]
    links: list[LinkFinding]
    transient: list[tuple[str, ...]]  # sets that failed once and passed when run again
    unresolved: list[tuple[str, ...]]  # failed twice, but no pair of their nodes fails
    good: list[str]  # nodes that passed in some set, in the order they did


# What a stream asks for: its suspects, and whether a known-good node goes beside them.
@dataclass(frozen=True)
class _Ask:
    stage: Stage
    members: tuple[str, ...]

    @property
    def needs_reference(self) -> bool:
        return len(self.members) == 1


# A stream is one line of reasoning (a group's screen, then its bisection ...): it yields the
# sets it needs at once and receives their records (None: no node known good to run with).
_Answers = list["Record | None"]
_Gen = Generator[list[_Ask], _Answers, None]


@dataclass
class _Stream:
    gen: _Gen
    asks: list[_Ask] = field(default_factory=list)
    answers: _Answers = field(default_factory=list)
    unplaced: list[int] = field(default_factory=list)
    in_flight: int = 0


def screening_groups(
    hosts: Sequence[str], domains: Mapping[str, str] | None = None
) -> list[tuple[str, ...]]:
    """Stage 1's groups: one per domain where the inventory gives one, else ceil(sqrt N) nodes.

    Nodes without a domain are grouped among themselves by size. Groups of size K =
    ceil(sqrt(N)) are design 055's choice for an unknown number of bad nodes (it balances the
    screening tests against the bisection's); here N // K groups of balanced sizes, so that no
    group is a single node (which cannot be run alone).
    """
    groups: dict[str, list[str]] = {}
    loose: list[str] = []
    for host in hosts:
        domain = (domains or {}).get(host)
        if domain:
            groups.setdefault(domain, []).append(host)
        else:
            loose.append(host)
    out = [tuple(g) for g in groups.values()]
    if loose:
        count = max(1, len(loose) // math.ceil(math.sqrt(len(loose))))
        size, extra = divmod(len(loose), count)
        start = 0
        for i in range(count):
            end = start + size + (1 if i < extra else 0)
            out.append(tuple(loose[start:end]))
            start = end
    return out


def _halves(nodes: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    middle = len(nodes) // 2
    return nodes[:middle], nodes[middle:]


class AdaptivePlan:
    """Rounds of sets, each planned from the outcomes of the rounds before.

    Drive it::

        plan = AdaptivePlan(hosts, domains, max_concurrent)
        while probes := plan.next_round():
            plan.record([run(p.members) for p in probes])  # the sets of a round run at once
        found = plan.result()
    """

    def __init__(
        self,
        hosts: Sequence[str],
        domains: Mapping[str, str] | None = None,
        max_concurrent: int | None = None,
    ) -> None:
        """Plan stage 1.

        Raises:
            ValueError: Fewer than 2 nodes, a node twice, or a limit below 1.
        """
        if len(set(hosts)) != len(hosts):
            raise ValueError("a node is listed twice")
        if len(hosts) < 2:
            raise ValueError("isolation needs 2 or more nodes")
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"max_concurrent must be 1 or more, not {max_concurrent}")
        self.max_concurrent = max_concurrent
        self.groups = screening_groups(hosts, domains)
        self._streams: list[_Stream] = []
        self._good: dict[str, None] = {}  # ordered: references rotate through it
        self._passed_groups: list[tuple[str, ...]] = []
        self._screens_left = len(self.groups)
        self._inter_started = False
        self._next_id = 0
        self._round = 0
        # Each set of the round and the asks it answers (two for a pair of lone suspects).
        self._in_flight: list[tuple[Probe, list[tuple[_Stream, int]]]] = []
        self._pairs_run: set[frozenset[str]] = set()
        self._paired: dict[str, int] = {}  # how often each lone suspect ran beside another
        self._records: list[Record] = []
        self._accused: dict[str, Accusation] = {}
        self._links: list[LinkFinding] = []
        self._transient: list[tuple[str, ...]] = []
        self._unresolved: list[tuple[str, ...]] = []
        for group in self.groups:
            self._spawn(self._screen(group))

    # --- driving -------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """No set is left to run."""
        return not self._streams and not self._in_flight

    def next_round(self) -> list[Probe]:
        """The sets to run now, at once (empty: the plan is done).

        Raises:
            RuntimeError: The previous round's outcomes were not recorded.
        """
        if self._in_flight:
            raise RuntimeError("record the outcomes of the previous round first")
        while self._streams:
            probes = self._place()
            if not probes:
                # Nothing fits and nothing runs: every set left is a lone suspect waiting for
                # a known-good node, and none is known. Lone suspects run in pairs, each at
                # most PAIRINGS times: a passing pair gives two good nodes.
                probes = self._pair_lone_suspects()
            if probes:
                self._round += 1
                return probes
            # Still nothing: no node is known good and every lone suspect was run beside
            # another. They are answered "no reference".
            for stream in list(self._streams):
                if stream.unplaced and not stream.in_flight:
                    for index in stream.unplaced:
                        stream.answers[index] = None
                    stream.unplaced = []
                    self._advance(stream, stream.answers)
        return []

    def record(self, results: Sequence[SetResult]) -> None:
        """The outcomes of the sets :meth:`next_round` gave, in its order.

        Raises:
            ValueError: Not one result per set.
        """
        if len(results) != len(self._in_flight):
            raise ValueError(f"{len(results)} result(s) for {len(self._in_flight)} set(s)")
        finished: list[_Stream] = []
        for (probe, asks), result in zip(self._in_flight, results, strict=True):
            record = Record(probe, self._round, result)
            self._records.append(record)
            if record.ok:
                for node in probe.members:
                    self._good.setdefault(node, None)
            for stream, index in asks:
                stream.in_flight -= 1
                if len(asks) > 1 and not record.ok:
                    stream.unplaced.append(index)  # a failing pair of suspects tells nothing
                    continue
                stream.answers[index] = record
                if not stream.in_flight and not stream.unplaced:
                    finished.append(stream)
        self._in_flight = []
        for stream in finished:
            self._advance(stream, stream.answers)

    def result(self) -> Isolation:
        """What the plan found.

        Raises:
            RuntimeError: Sets are left to run.
        """
        if not self.done:
            raise RuntimeError("the plan has sets left to run")
        return Isolation(
            records=list(self._records),
            rounds=self._round,
            accused=dict(self._accused),
            links=list(self._links),
            transient=list(self._transient),
            unresolved=list(self._unresolved),
            good=[n for n in self._good if n not in self._accused],
        )

    def _place(self) -> list[Probe]:
        busy: set[str] = set()
        probes: list[Probe] = []
        for stream in self._streams:
            for index in list(stream.unplaced):
                if self.max_concurrent is not None and len(probes) >= self.max_concurrent:
                    return probes
                ask = stream.asks[index]
                if busy.intersection(ask.members):
                    continue
                reference = None
                if ask.needs_reference:
                    reference = next(
                        (g for g in self._good if g not in busy and g not in ask.members), None
                    )
                    if reference is None:
                        continue
                members = ask.members + ((reference,) if reference else ())
                probe = Probe(self._next_id, ask.stage, members, reference)
                self._next_id += 1
                if len(members) == 2:
                    self._pairs_run.add(frozenset(members))
                busy.update(members)
                probes.append(probe)
                self._in_flight.append((probe, [(stream, index)]))
                stream.unplaced.remove(index)
                stream.in_flight += 1
        return probes

    def _pair_lone_suspects(self) -> list[Probe]:
        lone = [(s, i) for s in self._streams for i in s.unplaced]
        lone = [(s, i) for s, i in lone if self._paired.get(s.asks[i].members[0], 0) < PAIRINGS]
        probes: list[Probe] = []
        while len(lone) >= 2:
            if self.max_concurrent is not None and len(probes) >= self.max_concurrent:
                break
            (stream, index), *rest = lone
            node = stream.asks[index].members[0]
            mates = [
                (s, i)
                for s, i in rest
                if frozenset((node, s.asks[i].members[0])) not in self._pairs_run
            ]
            lone = rest
            if not mates:
                continue
            other, other_index = mates[0]
            lone.remove(mates[0])
            mate = other.asks[other_index].members[0]
            for paired in (node, mate):
                self._paired[paired] = self._paired.get(paired, 0) + 1
            probe = Probe(self._next_id, "confirm", (node, mate))
            self._next_id += 1
            self._pairs_run.add(frozenset(probe.members))
            probes.append(probe)
            self._in_flight.append((probe, [(stream, index), (other, other_index)]))
            for s, i in ((stream, index), (other, other_index)):
                s.unplaced.remove(i)
                s.in_flight += 1
        return probes

    def _start_inter(self) -> None:
        # Stage 1b starts once every group's screen has its outcome.
        if not self._screens_left and not self._inter_started:
            self._inter_started = True
            self._spawn(self._inter())

    def _spawn(self, gen: _Gen) -> None:
        stream = _Stream(gen)
        self._streams.append(stream)
        self._step(stream, lambda: next(gen))

    def _advance(self, stream: _Stream, answers: _Answers) -> None:
        self._step(stream, lambda: stream.gen.send(list(answers)))

    def _step(self, stream: _Stream, resume: Callable[[], list[_Ask]]) -> None:
        try:
            asks = resume()
        except StopIteration:
            self._streams.remove(stream)
            return
        stream.asks = list(asks)
        stream.answers = [None] * len(asks)
        stream.unplaced = list(range(len(asks)))

    # --- the reasoning -------------------------------------------------------------------------

    @staticmethod
    def _ask(stage: Stage, members: tuple[str, ...]) -> _Ask:
        return _Ask("confirm" if len(members) == 1 and stage == "bisect" else stage, members)

    def _screen(self, group: tuple[str, ...]) -> _Gen:
        (record,) = yield [self._ask("screen", group)]
        if record is not None and record.ok:
            self._passed_groups.append(group)
        self._screens_left -= 1
        self._start_inter()
        if record is None:  # a lone node with no node known good to run it with
            self._accuse(group[0], None, confirmed=False)
        elif len(group) == 1 and not record.ok:
            self._accuse(group[0], record, confirmed=True)
        elif not record.ok:
            self._bisect(group, record)

    def _inter(self) -> _Gen:
        representatives = tuple(group[0] for group in self._passed_groups)
        if len(representatives) < 2:
            return
        (record,) = yield [self._ask("inter", representatives)]
        if record is not None and not record.ok:
            self._bisect(representatives, record)

    def _bisect(self, suspects: tuple[str, ...], failed: Record) -> None:
        """Both halves of a failing set, each a line of its own (neither waits for the other:
        a lone half may wait rounds for a known-good node)."""
        halves = _halves(suspects)
        seen: dict[int, Record | None] = {}
        for side in (0, 1):
            self._spawn(self._half(suspects, halves, side, failed, seen))

    def _half(
        self,
        suspects: tuple[str, ...],
        halves: tuple[tuple[str, ...], tuple[str, ...]],
        side: int,
        failed: Record,
        seen: dict[int, Record | None],
    ) -> _Gen:
        half = halves[side]
        (record,) = yield [self._ask("bisect", half)]
        seen[side] = record
        if record is None:  # a lone half, and no node is known good
            self._accuse(half[0], failed, confirmed=False)
        elif not record.ok and len(half) == 1:
            self._accuse(half[0], record, confirmed=True)
        elif not record.ok:
            self._bisect(half, record)
        elif len(seen) == 2 and all(r is not None and r.ok for r in seen.values()):
            # Both halves pass (this one last): no bad node among them. Run the set again.
            (again,) = yield [self._ask("retest", suspects)]
            assert again is not None  # two or more nodes need no reference
            if again.ok:
                self._transient.append(suspects)
            else:
                yield from self._link(*halves)

    def _link(self, a: tuple[str, ...], b: tuple[str, ...]) -> _Gen:
        """The two ends of a fault between ``a`` and ``b``, each of which passes alone."""
        side = a
        while len(side) > 1:
            first, second = _halves(side)
            (record,) = yield [self._ask("link", first + b)]
            assert record is not None
            side = second if record.ok else first
        other = b
        while len(other) > 1:
            first, second = _halves(other)
            (record,) = yield [self._ask("link", side + first)]
            assert record is not None
            other = second if record.ok else first
        (record,) = yield [self._ask("link", side + other)]
        assert record is not None
        if record.ok:
            self._unresolved.append(a + b)
        else:
            self._links.append(LinkFinding((side[0], other[0]), record))

    def _accuse(self, node: str, evidence: Record | None, confirmed: bool) -> None:
        self._accused.setdefault(node, Accusation(node, evidence, confirmed))


def run_plan(
    plan: AdaptivePlan, run_round: Callable[[list[Probe]], Sequence[SetResult]]
) -> Isolation:
    """Drive ``plan`` to its end: ``run_round`` runs one round's sets (at once) in order."""
    while probes := plan.next_round():
        plan.record(run_round(probes))
    return plan.result()
