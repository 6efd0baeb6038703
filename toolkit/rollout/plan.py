"""The rollout plan: which nodes move onto the lock, what changes on each, and in which wave.

Pure: it reads what one drift run (check mode: nothing written) found on each node, never a
node itself. A node **differs from the lock** when the drift check reports anything for it
(a package not at its locked version, missing or not held, or a loaded driver module that is
not the locked one: ``toolkit.node.drift``, the comparison ``gpunode status`` and ``drift`` show)
or when its state file says it was provisioned or accepted for another stack id than the one
pinned now, or that a provision was interrupted on it. Nodes on the lock are left alone; so
are nodes that cannot be read, nodes gpunode never provisioned (``gpunode up`` brings those
up) and nodes whose state file is unreadable: each is listed with why.

The waves:

- the **canary** is wave 1 on its own: the first changing node in inventory order, or the
  nodes ``--canary`` names; nothing else starts until it is ready on the new stack;
- every later wave holds at most ``--max-unavailable`` nodes: ``N`` nodes in all, or ``N%``
  of each stack group (rounded down, at least one node: a group can always move), counted
  over the group's hosts in the inventory, whatever ``--limit`` selects;
- with ``gpunode_accept_domain`` set (the node's rack or NVLink domain), a wave never holds
  two nodes of one domain unless ``--allow-same-domain``;
- a reboot is planned where the loaded driver module is not the locked one (the rule of the
  ``nvidia_driver`` role's ``nvidia_driver_reboot_required``), or the node already waits for
  one (its state's ``reboot_pending``).

Without domains, the waves follow the inventory's order (each node into the first wave with
room). With domains and ``N`` nodes in all, the fewest waves possible: ``max(ceil(nodes /
N), the largest domain's nodes)``, the nodes dealt in turn onto that many waves, one domain
after the other (largest first), so no domain lands twice in a wave. With domains and ``N%``
(a bound per group as well), nodes are placed in domain rounds (the first node of each domain,
largest domain first, then the second of each ...; nodes without a domain last) into the first
wave with room, a new wave opened only when none has.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import ConfigError

# A node that is not read, or whose state says it was never provisioned, has no stack to move.
LEFT_ALONE_STATES = ("new", "unknown")

_MAX_UNAVAILABLE_RE = re.compile(r"(?P<number>[0-9]{1,9})(?P<percent>%?)\Z")


@dataclass(frozen=True)
class MaxUnavailable:
    """``--max-unavailable``: nodes out of service at once, in all or per group."""

    number: int
    percent: bool = False

    @property
    def text(self) -> str:
        """As the option is written."""
        return f"{self.number}{'%' if self.percent else ''}"

    def group_limit(self, group_size: int) -> int:
        """The most nodes of a group of ``group_size`` hosts in one wave (percent only):
        rounded down, at least 1, so a small group still moves."""
        return max(1, self.number * group_size // 100)


def parse_max_unavailable(text: str | int) -> MaxUnavailable:
    """``N`` (nodes in all, 1 or more) or ``N%`` (of each group, 1% to 100%).

    Raises:
        ConfigError: Anything else, naming the option, the value and the rule.
    """
    value = str(text).strip()
    match = _MAX_UNAVAILABLE_RE.match(value)
    rule = "expected N nodes (1 or more) or N% of each group (1% to 100%)"
    if not match:
        raise ConfigError(f"--max-unavailable {value!r}: {rule}")
    number, percent = int(match["number"]), bool(match["percent"])
    if number < 1:
        raise ConfigError(
            f"--max-unavailable {value}: a rollout that may take no node out of service "
            f"never moves one; {rule}"
        )
    if percent and number > 100:
        raise ConfigError(f"--max-unavailable {value}: more than a whole group; {rule}")
    return MaxUnavailable(number, percent)


def parse_max_failures(value: int) -> int:
    """``--max-failures``: failed nodes after which the rollout stops (1 or more).

    Raises:
        ConfigError: Below 1 (naming the option and the rule).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"--max-failures {value!r}: expected 1 or more (the failed nodes after which the "
            "rollout stops; 1 stops it at the first, a failed canary included)"
        )
    return value


def parse_canary(text: str | None) -> tuple[str, ...]:
    """``--canary HOST,...``: the host names, in order, each once.

    Raises:
        ConfigError: An empty name or a name given twice.
    """
    if text is None:
        return ()
    names = [part.strip() for part in text.split(",")]
    if not text.strip() or any(not name for name in names):
        raise ConfigError(f"--canary {text!r}: expected host names separated by commas")
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"--canary: {', '.join(twice)} named more than once")
    return tuple(names)


@dataclass(frozen=True)
class RolloutOptions:
    """What the rollout is bounded by."""

    max_unavailable: MaxUnavailable = MaxUnavailable(1)
    max_failures: int = 1
    canary: tuple[str, ...] = ()
    allow_same_domain: bool = False

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "max_unavailable": self.max_unavailable.text,
            "max_failures": self.max_failures,
            "canary": list(self.canary),
            "allow_same_domain": self.allow_same_domain,
        }


@dataclass(frozen=True)
class NodeSurvey:
    """What the plan reads of one node: the inventory's view and one drift run's."""

    host: str
    group: str  # its stack group (``all`` when it has none)
    locked_stack_id: str  # the stack id pinned, and locked, now
    state: Mapping[str, Any]  # its state file as the drift run read it (nodestate)
    drift: Sequence[Mapping[str, Any]] = ()  # drift_report's entries: component, package ...
    domain: str | None = None  # gpunode_accept_domain
    error: str | None = None  # the node could not be read (unreachable, failed preflight)


@dataclass(frozen=True)
class Change:
    """One difference between a node and the lock."""

    component: str
    package: str
    installed: str  # "" when not installed
    locked: str
    kind: str  # version | missing | not-held | loaded (toolkit.node.drift.Drift.kind)

    def to_dict(self) -> dict[str, str]:
        """As JSON-ready data."""
        return {
            "component": self.component,
            "package": self.package,
            "installed": self.installed,
            "locked": self.locked,
            "kind": self.kind,
        }

    @property
    def text(self) -> str:
        """For people: ``libnccl2 2.21.5-1+cuda12.4 -> 2.23.4-1+cuda12.4``."""
        if self.kind == "not-held":
            return f"{self.package} {self.installed}: hold"
        if self.kind == "loaded":
            return f"driver module {self.installed or 'none'} -> {self.locked}"
        return f"{self.package} {self.installed or '(none)'} -> {self.locked}"


@dataclass
class NodePlan:
    """One node in the plan."""

    host: str
    group: str
    domain: str | None
    state: str  # the node's state now (new, provisioned, ready, not-ready, unknown)
    from_stack: str | None  # the stack id its state file records
    to_stack: str  # the stack id pinned now
    changes: list[Change] = field(default_factory=list)
    reboot: str | None = None  # why the node reboots (None: no reboot)
    wave: int | None = None  # 1 is the canary; None: the node is left alone
    status: str = "pending"  # pending | skipped (the record's first status)
    reason: str = ""

    @property
    def changing(self) -> bool:
        """The node is moved onto the lock."""
        return self.wave is not None

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "host": self.host,
            "group": self.group,
            "domain": self.domain,
            "state": self.state,
            "from_stack": self.from_stack,
            "to_stack": self.to_stack,
            "changes": [c.to_dict() for c in self.changes],
            "reboot": self.reboot,
            "wave": self.wave,
            "canary": self.wave == 1,
            "status": self.status,
            "reason": self.reason,
        }


@dataclass
class RolloutPlan:
    """Every targeted node, the waves and the bounds they keep."""

    options: RolloutOptions
    nodes: dict[str, NodePlan]  # in inventory order
    waves: list[list[str]]  # waves[0] is the canary
    limits: dict[str, int]  # per group the most nodes in one wave; "*": in all (N, not N%)

    @property
    def changing(self) -> list[str]:
        """The nodes that move, in wave order."""
        return [host for wave in self.waves for host in wave]

    @property
    def left_alone(self) -> list[str]:
        """The nodes the rollout does not touch, in inventory order."""
        return [h for h, n in self.nodes.items() if not n.changing]

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (``gpunode rollout --dry-run --json``)."""
        return {
            **self.options.to_dict(),
            "limits": dict(self.limits),
            "waves": [list(w) for w in self.waves],
            "changing": len(self.changing),
            "left_alone": len(self.left_alone),
            "reboots": sum(1 for h in self.changing if self.nodes[h].reboot),
            "nodes": {h: n.to_dict() for h, n in self.nodes.items()},
        }


def _changes(drift: Sequence[Mapping[str, Any]]) -> list[Change]:
    return [
        Change(
            component=str(d.get("component") or ""),
            package=str(d.get("package") or ""),
            installed=str(d.get("found") or ""),
            locked=str(d.get("pinned") or ""),
            kind=str(d.get("kind") or "version"),
        )
        for d in drift
    ]


def _reboot(changes: list[Change], state: Mapping[str, Any]) -> str | None:
    loaded = next((c for c in changes if c.kind == "loaded"), None)
    if loaded is not None:
        return f"driver module loaded {loaded.installed or 'none'}, locked {loaded.locked}"
    pending = state.get("reboot_pending")
    if isinstance(pending, Mapping) and pending:
        return (
            f"reboot pending: loaded {pending.get('loaded') or '?'}, "
            f"installed {pending.get('installed') or '?'}"
        )
    return None


def survey_node(survey: NodeSurvey) -> NodePlan:
    """One node's plan before waves: what differs and what changes, or why it is left alone."""
    state = str(survey.state.get("state") or "new") if not survey.error else "unknown"
    from_stack = survey.state.get("stack_id")
    node = NodePlan(
        host=survey.host,
        group=survey.group,
        domain=survey.domain,
        state=state,
        from_stack=str(from_stack) if from_stack else None,
        to_stack=survey.locked_stack_id,
    )
    if survey.error:
        node.status, node.reason = "skipped", f"could not be read: {survey.error}"
        return node
    if state == "unknown":
        why = "; ".join(str(r) for r in survey.state.get("reason") or []) or "unreadable"
        node.status, node.reason = "skipped", f"state file unreadable: {why}"
        return node
    node.changes = _changes(survey.drift)
    node.reboot = _reboot(node.changes, survey.state)
    if state == "new":
        node.status = "skipped"
        node.reason = "never provisioned: gpunode up brings it up"
        return node
    other_stack = node.from_stack != survey.locked_stack_id
    # A provision that was interrupted may have changed packages: the node is not proven on
    # the lock (nodestate.begin_provision keeps its standing under ``suspended``).
    interrupted = bool(survey.state.get("suspended"))
    if not node.changes and not other_stack and not node.reboot and not interrupted:
        node.status, node.reason = "skipped", f"on the lock (stack {survey.locked_stack_id})"
        return node
    parts = []
    if other_stack:
        parts.append(f"stack {node.from_stack or '?'} -> {survey.locked_stack_id}")
    if node.changes:
        parts.append(f"{len(node.changes)} difference(s) from the lock")
    if interrupted:
        parts.append("a provision was interrupted")
    if node.reboot:
        parts.append("reboot")
    node.reason = "; ".join(parts)
    return node


def plan_rollout(
    surveys: Sequence[NodeSurvey],
    options: RolloutOptions,
    group_sizes: Mapping[str, int] | None = None,
) -> RolloutPlan:
    """The rollout's plan for the surveyed nodes (inventory order).

    Args:
        surveys: Every targeted node, as the drift run read it.
        options: The bounds (``--max-unavailable``, ``--canary`` ...).
        group_sizes: Hosts per stack group in the whole inventory (the base of ``N%``);
            a group missing here counts its surveyed nodes.

    Raises:
        ConfigError: A canary that is not among the surveyed nodes, does not change, or
            breaks a bound on its own (naming the option, the host and the rule).
    """
    nodes = {s.host: survey_node(s) for s in surveys}
    moving = [n for n in nodes.values() if n.status == "pending"]
    sizes = dict(group_sizes or {})
    for node in moving:
        sizes.setdefault(node.group, sum(1 for n in nodes.values() if n.group == node.group))
    mu = options.max_unavailable
    limits = (
        {g: mu.group_limit(sizes[g]) for g in sorted({n.group for n in moving})}
        if mu.percent
        else {"*": mu.number}
    )
    canary = _canary(options, nodes, moving, limits)
    rest = [n for n in moving if n.host not in canary]
    waves = [canary] if canary else []
    waves += _waves(rest, limits, options.allow_same_domain)
    for number, wave in enumerate(waves, start=1):
        for host in wave:
            nodes[host].wave = number
    return RolloutPlan(options=options, nodes=nodes, waves=waves, limits=limits)


def _canary(
    options: RolloutOptions,
    nodes: Mapping[str, NodePlan],
    moving: list[NodePlan],
    limits: Mapping[str, int],
) -> list[str]:
    if not options.canary:
        return [moving[0].host] if moving else []
    for host in options.canary:
        if host not in nodes:
            raise ConfigError(f"--canary {host}: not among the nodes this rollout targets")
        if nodes[host].status != "pending":
            raise ConfigError(
                f"--canary {host}: {nodes[host].reason}; a canary must be a node that moves "
                "onto the lock"
            )
    chosen = [nodes[h] for h in options.canary]
    problem = _breaks(chosen, limits, options.allow_same_domain)
    if problem:
        raise ConfigError(f"--canary {','.join(options.canary)}: {problem}")
    return [n.host for n in moving if n.host in options.canary]  # inventory order


def _breaks(wave: Sequence[NodePlan], limits: Mapping[str, int], allow_same_domain: bool) -> str:
    """Why one wave breaks a bound ('' when it keeps them all)."""
    if "*" in limits and len(wave) > limits["*"]:
        return f"{len(wave)} nodes at once, --max-unavailable allows {limits['*']}"
    for group in sorted({n.group for n in wave}):
        count = sum(1 for n in wave if n.group == group)
        if group in limits and count > limits[group]:
            return (
                f"{count} nodes of group {group} at once, --max-unavailable allows "
                f"{limits[group]} of it"
            )
    if not allow_same_domain:
        for domain in sorted({n.domain for n in wave if n.domain is not None}):
            hosts = [n.host for n in wave if n.domain == domain]
            if len(hosts) > 1:
                return (
                    f"{', '.join(hosts)} share gpunode_accept_domain {domain}; one wave takes "
                    "one node of a domain unless --allow-same-domain"
                )
    return ""


def _by_domain(nodes: list[NodePlan]) -> tuple[list[list[NodePlan]], list[NodePlan]]:
    """The nodes of each domain, largest domain first (stable: inventory order), and those
    without a domain."""
    domains: dict[str, list[NodePlan]] = {}
    loose = []
    for node in nodes:
        if node.domain is None:
            loose.append(node)
        else:
            domains.setdefault(node.domain, []).append(node)
    return sorted(domains.values(), key=lambda members: -len(members)), loose


def _domain_rounds(nodes: list[NodePlan], allow_same_domain: bool) -> list[NodePlan]:
    """The order nodes are placed in: one node of each domain per round, largest first."""
    if allow_same_domain:
        return list(nodes)
    ranked, loose = _by_domain(nodes)
    ordered = []
    for round_ in range(max((len(m) for m in ranked), default=0)):
        ordered += [members[round_] for members in ranked if round_ < len(members)]
    return ordered + loose


def _dealt(nodes: list[NodePlan], total: int, order: Mapping[str, int]) -> list[list[str]]:
    """``N`` in all, with domains: the nodes, one domain after the other (largest first, then
    those without a domain), dealt in turn onto the fewest waves that can hold them. A domain
    has at most as many nodes as there are waves, and its nodes are dealt one after the other,
    so they land in different waves; no wave gets more than ``ceil(nodes / waves) <= N``."""
    ranked, loose = _by_domain(nodes)
    dealt = [node for members in ranked for node in members] + loose
    count = max(math.ceil(len(dealt) / total), max(len(m) for m in ranked))
    waves: list[list[str]] = [[] for _ in range(count)]
    for index, node in enumerate(dealt):
        waves[index % count].append(node.host)
    return [sorted(wave, key=order.__getitem__) for wave in waves]


def _waves(
    nodes: list[NodePlan], limits: Mapping[str, int], allow_same_domain: bool
) -> list[list[str]]:
    """The nodes after the canary in waves: each placed in the first wave with room."""
    order = {n.host: i for i, n in enumerate(nodes)}
    total = limits.get("*")
    if total is not None and not allow_same_domain and any(n.domain for n in nodes):
        return _dealt(nodes, total, order)
    waves: list[list[str]] = []
    counts: list[dict[str, int]] = []  # per wave: nodes per group
    domains: list[set[str]] = []
    sizes: list[int] = []
    open_waves: list[int] = []  # waves not yet full in all (a full one never takes another)
    for node in _domain_rounds(nodes, allow_same_domain):
        limit = limits.get(node.group)
        chosen = None
        for index in open_waves:
            if limit is not None and counts[index].get(node.group, 0) >= limit:
                continue
            if not allow_same_domain and node.domain is not None and node.domain in domains[index]:
                continue
            chosen = index
            break
        if chosen is None:
            chosen = len(waves)
            waves.append([])
            counts.append({})
            domains.append(set())
            sizes.append(0)
            open_waves.append(chosen)
        waves[chosen].append(node.host)
        counts[chosen][node.group] = counts[chosen].get(node.group, 0) + 1
        if node.domain is not None:
            domains[chosen].add(node.domain)
        sizes[chosen] += 1
        if total is not None and sizes[chosen] >= total:
            open_waves.remove(chosen)
    return [sorted(wave, key=order.__getitem__) for wave in waves]
