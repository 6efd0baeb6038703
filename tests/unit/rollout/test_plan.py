"""The rollout plan (issue 39): which nodes move onto the lock, what changes, the canary and
the waves, and every bad option refused naming the option and the rule.

Property tests (hypothesis, the profiles of ``core/test_properties.py``): whatever the fleet and
the bounds, every changing node is in exactly one wave, the canary is wave 1 alone, no wave
exceeds ``--max-unavailable`` (in all, or per group for ``N%``), and no wave holds two nodes
of one ``gpunode_accept_domain`` unless ``--allow-same-domain``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolkit.errors import ConfigError
from toolkit.rollout.plan import (
    MaxUnavailable,
    NodeSurvey,
    RolloutOptions,
    RolloutPlan,
    parse_canary,
    parse_max_failures,
    parse_max_unavailable,
    plan_rollout,
)
from unit.core.test_properties import configured

OLD, NEW = "0ld0ld0ld0ld", "n3wn3wn3wn3w"
READY_OLD = {"state": "ready", "reason": [], "stack_id": OLD}
READY_NEW = {"state": "ready", "reason": [], "stack_id": NEW}
DRIVER = [
    {
        "component": "driver",
        "package": "nvidia-driver",
        "pinned": "550.144.03-1",
        "found": "550.127.05-1",
        "kind": "version",
    },
    {
        "component": "driver",
        "package": "kernel module",
        "pinned": "550.144.03",
        "found": "550.127.05",
        "kind": "loaded",
    },
]
NCCL = [
    {
        "component": "nccl",
        "package": "libnccl2",
        "pinned": "2.23.4-1+cuda12.4",
        "found": "2.21.5-1+cuda12.4",
        "kind": "version",
    }
]


def _node(
    host: str,
    *,
    group: str = "g",
    domain: str | None = None,
    state: dict[str, Any] | None = None,
    drift: list[dict[str, Any]] | None = None,
    error: str | None = None,
) -> NodeSurvey:
    return NodeSurvey(
        host=host,
        group=group,
        locked_stack_id=NEW,
        state=READY_OLD if state is None else state,
        drift=DRIVER if drift is None else drift,
        domain=domain,
        error=error,
    )


def _options(
    max_unavailable: str = "1",
    canary: str | None = None,
    allow_same_domain: bool = False,
    max_failures: int = 1,
) -> RolloutOptions:
    return RolloutOptions(
        max_unavailable=parse_max_unavailable(max_unavailable),
        max_failures=parse_max_failures(max_failures),
        canary=parse_canary(canary),
        allow_same_domain=allow_same_domain,
    )


# --- options ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("1", MaxUnavailable(1)),
        (" 12 ", MaxUnavailable(12)),
        ("25%", MaxUnavailable(25, percent=True)),
        ("100%", MaxUnavailable(100, percent=True)),
        (3, MaxUnavailable(3)),
    ],
)
def test_max_unavailable_reads_nodes_or_a_percentage(text: str, parsed: MaxUnavailable) -> None:
    assert parse_max_unavailable(text) == parsed


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("0", "may take no node out of service"),
        ("0%", "may take no node out of service"),
        ("101%", "more than a whole group"),
        ("-1", "expected N nodes"),
        ("1.5", "expected N nodes"),
        ("", "expected N nodes"),
        ("25 %", "expected N nodes"),
        ("%", "expected N nodes"),
        ("two", "expected N nodes"),
        ("1\n2", "expected N nodes"),
    ],
)
def test_max_unavailable_refuses_naming_the_option_and_the_rule(text: str, rule: str) -> None:
    with pytest.raises(ConfigError, match="--max-unavailable") as err:
        parse_max_unavailable(text)
    assert rule in err.value.message
    assert err.value.exit_code == 2


def test_percentage_rounds_down_but_never_below_one_node() -> None:
    assert MaxUnavailable(25, percent=True).group_limit(8) == 2
    assert MaxUnavailable(25, percent=True).group_limit(7) == 1
    assert MaxUnavailable(10, percent=True).group_limit(3) == 1
    assert MaxUnavailable(100, percent=True).group_limit(5) == 5


@pytest.mark.parametrize("value", [0, -1, True])
def test_max_failures_below_one_is_refused(value: int) -> None:
    with pytest.raises(ConfigError, match=r"--max-failures .*expected 1 or more"):
        parse_max_failures(value)


def test_max_failures_is_carried_in_the_plan() -> None:
    plan = plan_rollout([_node("n1")], _options(max_failures=3))
    assert plan.to_dict()["max_failures"] == 3


@pytest.mark.parametrize(
    ("text", "rule"),
    [("", "expected host names"), ("n1,,n2", "expected host names"), ("n1,n1", "more than once")],
)
def test_canary_option_refuses_empty_and_repeated_names(text: str, rule: str) -> None:
    with pytest.raises(ConfigError, match="--canary") as err:
        parse_canary(text)
    assert rule in err.value.message


# --- what differs ---------------------------------------------------------------------------


def test_nodes_on_the_lock_are_left_alone_and_the_others_say_what_changes() -> None:
    plan = plan_rollout(
        [
            _node("n1"),
            _node("n2", state=READY_NEW, drift=[]),
            _node("n3", drift=NCCL),
        ],
        _options(),
    )
    assert plan.waves == [["n1"], ["n3"]]
    assert plan.left_alone == ["n2"]
    n1, n2, n3 = (plan.nodes[h] for h in ("n1", "n2", "n3"))
    assert n2.status == "skipped" and n2.wave is None and n2.reason == f"on the lock (stack {NEW})"
    assert [c.text for c in n1.changes] == [
        "nvidia-driver 550.127.05-1 -> 550.144.03-1",
        "driver module 550.127.05 -> 550.144.03",
    ]
    assert n1.reboot == "driver module loaded 550.127.05, locked 550.144.03"
    assert n3.reboot is None  # NCCL alone never reboots
    assert n1.from_stack == OLD and n1.to_stack == NEW
    assert n1.to_dict()["canary"] is True and n3.to_dict()["canary"] is False


def test_a_node_accepted_for_another_stack_moves_even_with_no_package_difference() -> None:
    plan = plan_rollout([_node("n1", drift=[])], _options())
    assert plan.waves == [["n1"]]
    assert plan.nodes["n1"].changes == [] and plan.nodes["n1"].reboot is None
    assert plan.nodes["n1"].reason == f"stack {OLD} -> {NEW}"


def test_a_hold_missing_and_a_pending_reboot_are_differences() -> None:
    held = [
        {
            "component": "nccl",
            "package": "libnccl2",
            "pinned": "2",
            "found": "2",
            "kind": "not-held",
        }
    ]
    pending = {**READY_NEW, "reboot_pending": {"loaded": "550.90.07", "installed": "550.127.05"}}
    plan = plan_rollout(
        [_node("n1", state=READY_NEW, drift=held), _node("n2", state=pending, drift=[])],
        _options(max_unavailable="2"),
    )
    assert plan.changing == ["n1", "n2"]
    assert plan.nodes["n1"].changes[0].text == "libnccl2 2: hold"
    assert plan.nodes["n2"].reboot == "reboot pending: loaded 550.90.07, installed 550.127.05"


def test_an_interrupted_provision_is_not_on_the_lock() -> None:
    suspended = {
        **READY_NEW,
        "state": "not-ready",
        "reason": ["provision in progress (run r0)"],
        "suspended": {"state": "ready", "reason": [], "stack_id": NEW},
    }
    plan = plan_rollout([_node("n1", state=suspended, drift=[])], _options())
    assert plan.changing == ["n1"]
    assert plan.nodes["n1"].reason == "a provision was interrupted"


@pytest.mark.parametrize(
    ("survey", "reason"),
    [
        (_node("n9", error="Gather: ssh: no route"), "could not be read: Gather: ssh: no route"),
        (_node("n9", state={"state": "new", "reason": []}), "never provisioned"),
        (
            _node("n9", state={"state": "unknown", "reason": ["not valid JSON"]}),
            "state file unreadable: not valid JSON",
        ),
    ],
)
def test_nodes_the_rollout_cannot_move_are_skipped_with_why(
    survey: NodeSurvey, reason: str
) -> None:
    plan = plan_rollout([_node("n1"), survey], _options())
    assert plan.changing == ["n1"]
    assert plan.nodes["n9"].status == "skipped"
    assert reason in plan.nodes["n9"].reason


def test_nothing_to_do_is_an_empty_plan() -> None:
    plan = plan_rollout([_node("n1", state=READY_NEW, drift=[])], _options())
    assert plan.waves == [] and plan.changing == [] and plan.left_alone == ["n1"]
    assert plan.to_dict()["changing"] == 0


# --- canary and waves ----------------------------------------------------------------------


def test_default_canary_is_the_first_changing_node_alone_then_waves_in_inventory_order() -> None:
    hosts = [_node(f"n{i}") for i in range(1, 8)]
    plan = plan_rollout(hosts, _options(max_unavailable="2"))
    assert plan.waves == [["n1"], ["n2", "n3"], ["n4", "n5"], ["n6", "n7"]]
    assert plan.limits == {"*": 2}
    assert plan.nodes["n1"].wave == 1 and plan.nodes["n7"].wave == 4


def test_named_canaries_form_wave_one_in_inventory_order() -> None:
    hosts = [_node(f"n{i}") for i in range(1, 6)]
    plan = plan_rollout(hosts, _options(max_unavailable="2", canary="n4,n2"))
    assert plan.waves[0] == ["n2", "n4"]
    assert plan.waves[1:] == [["n1", "n3"], ["n5"]]


@pytest.mark.parametrize(
    ("canary", "surveys", "rule"),
    [
        ("n9", [_node("n1")], "--canary n9: not among the nodes this rollout targets"),
        (
            "n2",
            [_node("n1"), _node("n2", state=READY_NEW, drift=[])],
            "--canary n2: on the lock",
        ),
        ("n1,n2", [_node("n1"), _node("n2")], "2 nodes at once, --max-unavailable allows 1"),
        (
            "n1,n2",
            [_node("n1", domain="rack-1"), _node("n2", domain="rack-1")],
            "share gpunode_accept_domain rack-1",
        ),
    ],
)
def test_a_canary_that_cannot_be_one_is_refused(
    canary: str, surveys: list[NodeSurvey], rule: str
) -> None:
    with pytest.raises(ConfigError) as err:
        plan_rollout(
            surveys, _options(max_unavailable="2" if "rack" in rule else "1", canary=canary)
        )
    assert rule in err.value.message


def test_same_domain_canaries_pass_when_allowed() -> None:
    surveys = [_node("n1", domain="r"), _node("n2", domain="r"), _node("n3", domain="r")]
    plan = plan_rollout(surveys, _options("2", canary="n1,n2", allow_same_domain=True))
    assert plan.waves == [["n1", "n2"], ["n3"]]


def test_one_wave_never_takes_two_nodes_of_one_domain() -> None:
    surveys = [
        _node("a1", domain="rack-a"),
        _node("a2", domain="rack-a"),
        _node("a3", domain="rack-a"),
        _node("b1", domain="rack-b"),
        _node("b2", domain="rack-b"),
        _node("x1"),
    ]
    plan = plan_rollout(surveys, _options("3"))
    assert plan.waves[0] == ["a1"]
    for wave in plan.waves:
        domains = [plan.nodes[h].domain for h in wave if plan.nodes[h].domain]
        assert len(domains) == len(set(domains)), wave
    # a2 and a3 need a wave each; b1, b2 and x1 fit beside them: 3 waves, the least possible.
    assert len(plan.waves) == 3
    allowed = plan_rollout(surveys, _options("3", allow_same_domain=True))
    assert allowed.waves == [["a1"], ["a2", "a3", "b1"], ["b2", "x1"]]


def test_domains_interleave_to_the_fewest_waves() -> None:
    """Three racks of two with two nodes a wave: three waves, not the four that filling the
    waves in inventory order would take."""
    surveys = [_node(f"{r}{i}", domain=r) for r in "abc" for i in (1, 2)]
    plan = plan_rollout(surveys, _options("2", canary="a1,b1"))
    assert plan.waves[0] == ["a1", "b1"]
    assert len(plan.waves) == 3


def test_percentage_is_of_each_group_counted_over_the_whole_inventory() -> None:
    surveys = [_node(f"h{i}", group="h100") for i in range(1, 6)] + [
        _node(f"l{i}", group="l40s") for i in range(1, 4)
    ]
    # 50% of 8 H100s (three are outside --limit) is 4 at once; 50% of 3 L40S is 1.
    plan = plan_rollout(surveys, _options("50%"), group_sizes={"h100": 8, "l40s": 3})
    assert plan.limits == {"h100": 4, "l40s": 1}
    assert plan.waves == [["h1"], ["h2", "h3", "h4", "h5", "l1"], ["l2"], ["l3"]]


def test_percentage_without_sizes_counts_the_surveyed_nodes_of_the_group() -> None:
    surveys = [_node(f"n{i}") for i in range(1, 5)]
    plan = plan_rollout(surveys, _options("50%"))
    assert plan.limits == {"g": 2}
    assert plan.waves == [["n1"], ["n2", "n3"], ["n4"]]


def test_the_plan_as_json_data() -> None:
    plan = plan_rollout([_node("n1"), _node("n2", drift=NCCL)], _options("2", max_failures=2))
    data = plan.to_dict()
    assert data["max_unavailable"] == "2" and data["max_failures"] == 2
    assert data["waves"] == [["n1"], ["n2"]] and data["reboots"] == 1
    assert data["nodes"]["n2"]["changes"] == [
        {
            "component": "nccl",
            "package": "libnccl2",
            "installed": "2.21.5-1+cuda12.4",
            "locked": "2.23.4-1+cuda12.4",
            "kind": "version",
        }
    ]


# --- properties -----------------------------------------------------------------------------


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[NodeSurvey], RolloutOptions, dict[str, int]]:
    count = draw(st.integers(min_value=0, max_value=30))
    groups = draw(st.lists(st.sampled_from(["g1", "g2", "g3"]), min_size=count, max_size=count))
    domains = draw(
        st.lists(
            st.one_of(st.none(), st.sampled_from(["r1", "r2", "r3", "r4", "r5"])),
            min_size=count,
            max_size=count,
        )
    )
    on_lock = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    surveys = [
        _node(
            f"n{i}",
            group=groups[i],
            domain=domains[i],
            state=READY_NEW if on_lock[i] else READY_OLD,
            drift=[] if on_lock[i] else DRIVER,
        )
        for i in range(count)
    ]
    percent = draw(st.booleans())
    number = draw(st.integers(min_value=1, max_value=100 if percent else 6))
    allow = draw(st.booleans())
    sizes = {
        g: sum(1 for s in surveys if s.group == g) + draw(st.integers(0, 5)) for g in set(groups)
    }
    return surveys, RolloutOptions(MaxUnavailable(number, percent), 1, (), allow), sizes


def _group_limit(plan: RolloutPlan, group: str) -> float:
    return plan.limits.get(group, math.inf)


@configured
@given(fleets())
def test_no_wave_exceeds_max_unavailable_or_holds_two_nodes_of_one_domain(
    fleet: tuple[list[NodeSurvey], RolloutOptions, dict[str, int]],
) -> None:
    surveys, options, sizes = fleet
    plan = plan_rollout(surveys, options, sizes)
    moving = [s.host for s in surveys if s.state is READY_OLD]
    assert sorted(plan.changing) == sorted(moving)  # each changing node in exactly one wave
    assert len(plan.changing) == len(set(plan.changing))
    assert sorted(plan.left_alone) == sorted(s.host for s in surveys if s.state is READY_NEW)
    if moving:
        assert plan.waves[0] == [moving[0]]  # the canary: the first that changes, alone
    for number, wave in enumerate(plan.waves, start=1):
        assert wave, "no empty wave"
        assert all(plan.nodes[h].wave == number for h in wave)
        assert len(wave) <= plan.limits.get("*", math.inf)
        for group, count in Counter(plan.nodes[h].group for h in wave).items():
            assert count <= _group_limit(plan, group)
            if options.max_unavailable.percent:
                expected = max(1, options.max_unavailable.number * sizes[group] // 100)
                assert plan.limits[group] == expected
        if not options.allow_same_domain:
            domains = [plan.nodes[h].domain for h in wave if plan.nodes[h].domain is not None]
            assert len(domains) == len(set(domains)), (wave, domains)


@configured
@given(fleets())
def test_without_domains_the_waves_are_as_few_as_the_bound_allows(
    fleet: tuple[list[NodeSurvey], RolloutOptions, dict[str, int]],
) -> None:
    surveys, options, sizes = fleet
    surveys = [NodeSurvey(s.host, s.group, s.locked_stack_id, s.state, s.drift) for s in surveys]
    plan = plan_rollout(surveys, options, sizes)
    rest = plan.changing[1:]
    if not rest:
        assert len(plan.waves) == len(plan.changing)
        return
    if options.max_unavailable.percent:
        per_group = Counter(plan.nodes[h].group for h in rest)
        least = max(math.ceil(n / plan.limits[g]) for g, n in per_group.items())
    else:
        least = math.ceil(len(rest) / options.max_unavailable.number)
    assert len(plan.waves) == 1 + least


@configured
@given(fleets())
def test_with_n_in_all_the_waves_are_as_few_as_the_bound_and_the_domains_allow(
    fleet: tuple[list[NodeSurvey], RolloutOptions, dict[str, int]],
) -> None:
    """``N`` in all: max(ceil(nodes / N), the largest domain's nodes) waves after the canary."""
    surveys, options, sizes = fleet
    options = RolloutOptions(MaxUnavailable(options.max_unavailable.number % 6 + 1))
    plan = plan_rollout(surveys, options, sizes)
    rest = plan.changing[1:]
    if not rest:
        return
    per_domain = Counter(plan.nodes[h].domain for h in rest if plan.nodes[h].domain is not None)
    least = max([math.ceil(len(rest) / options.max_unavailable.number), *per_domain.values()])
    assert len(plan.waves) == 1 + least
