"""Re-validation after N days (``gpunode_revalidate_after_days``): a ready node whose last
acceptance is older is re-accepted by ``gpunode up`` even when its verdict has not expired."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.errors import ConfigError
from toolkit.node import nodestate
from toolkit.steps.precheck import check_inventory
from toolkit.steps.status import NodeStatus
from toolkit.steps.up import NodeUp

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
READY = {
    "state": "ready",
    "reason": [],
    "stack_id": "s1",
    "valid_until": "2027-12-01T00:00:00+00:00",  # a year's verdict: expiry is not the reason
    "accepted_at": "2026-11-21T12:00:00Z",  # ten days before NOW
}
SAMPLE = REPO / "inventories" / "sample"


@pytest.mark.parametrize(
    ("days", "change", "why"),
    [
        (None, {}, None),  # the site does not re-validate by age
        (30, {}, None),
        (10.5, {}, None),
        (10, {}, "more than 10 days (gpunode_revalidate_after_days) ago: re-validated"),
        (7, {}, "last accepted at 2026-11-21T12:00:00+00:00, more than 7 days"),
        (0.5, {"accepted_at": "2026-12-01T00:00:00Z"}, "more than 0.5 days"),
        (7, {"accepted_at": None}, "no acceptance time recorded; the site re-validates every 7"),
        (7, {"accepted_at": "last week"}, "no acceptance time recorded"),
        (None, {"accepted_at": None}, None),  # states written before accepted_at existed
    ],
)
def test_a_ready_node_is_re_validated_once_its_acceptance_is_older_than_the_site_allows(
    days: float | None, change: dict[str, Any], why: str | None
) -> None:
    state = {**READY, **change}
    reasons = nodestate.not_proven_ready(state, "s1", [], NOW, revalidate_days=days)
    if why is None:
        assert reasons == []
        assert nodestate.proven_ready(state, "s1", [], NOW, revalidate_days=days)
    else:
        assert len(reasons) == 1 and why in reasons[0], reasons
        assert not nodestate.proven_ready(state, "s1", [], NOW, revalidate_days=days)
        shown = nodestate.proven_state(state, "s1", NOW, revalidate_days=days)
        assert shown["state"] == "not-ready" and why in shown["reason"][-1]


def test_up_and_status_read_the_same_rule() -> None:
    up = NodeUp("n1", "s1", state=dict(READY), now=NOW, revalidate_days=7)
    status = NodeStatus("n1", dict(READY), stack_id="s1", now=NOW, revalidate_days=7)
    assert not up.ready and not status.ready
    assert up.shown == status.shown
    assert NodeUp("n1", "s1", state=dict(READY), now=NOW, revalidate_days=30).ready


def test_acceptance_records_when_it_accepted() -> None:
    state = nodestate.after_acceptance(
        {"state": "provisioned", "reason": [], "stack_id": "s1"},
        passed=True,
        reasons=[],
        accepted_stack_id="s1",
        run_id="r1",
        now=NOW,
        valid_hours=24,
    )
    assert state["accepted_at"] == "2026-12-01T12:00:00Z" and "accepted_at" in nodestate.KEYS
    later = NOW + timedelta(days=2)
    assert nodestate.proven_ready(state, "s1", [], NOW + timedelta(hours=1), revalidate_days=1)
    assert not nodestate.proven_ready(state, "s1", [], later, revalidate_days=30)  # expired


@pytest.mark.parametrize("value", [7, 0.25, None])
def test_valid_values(value: float | None) -> None:
    assert nodestate.revalidate_after_days(value) == value


@pytest.mark.parametrize("value", [0, -3, "7", "7d", True, [7], float("nan")])
def test_a_bad_value_is_refused_naming_the_key(value: Any) -> None:
    with pytest.raises(ConfigError, match="gpunode_revalidate_after_days must be a positive"):
        nodestate.revalidate_after_days(value, "group_vars/all/site.yml (host n1)")


def _inventory(tmp: Path, value: Any) -> Path:
    target = tmp / "inventory"
    shutil.copytree(SAMPLE, target)
    (target / "group_vars" / "all" / "revalidate.yml").write_text(
        yaml.safe_dump({nodestate.REVALIDATE_VAR: value})
    )
    return target


def test_the_inventory_sets_it_per_host_and_a_bad_value_stops_before_any_node(
    tmp_path: Path,
) -> None:
    found = check_inventory(_inventory(tmp_path / "good", 14))
    assert found.hosts and found.revalidate_days == dict.fromkeys(found.hosts, 14.0)
    assert check_inventory(SAMPLE).revalidate_days == {}
    with pytest.raises(ConfigError) as bad:
        check_inventory(_inventory(tmp_path / "bad", "two weeks"))
    message = str(bad.value.message)
    assert "revalidate.yml" in message and "gpunode_revalidate_after_days" in message
    assert "'two weeks'" in message
