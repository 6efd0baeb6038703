"""The node state: parsing, and the only transitions allowed (table-driven)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from toolkit.node import nodestate

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "state"),
    [
        (None, "new"),
        ('{"state": "ready", "stack_id": "a"}', "ready"),
        ('{"state": "provisioned", "reason": "not a list"}', "provisioned"),
        ("{not json", "unknown"),
        ('["state", "ready"]', "unknown"),
        ('{"state": "happy"}', "unknown"),
        (b'{"state": "not-ready", "reason": ["ecc"]}', "not-ready"),
    ],
)
def test_parse(text: str | bytes | None, state: str) -> None:
    parsed = nodestate.parse(text)
    assert parsed["state"] == state
    assert isinstance(parsed["reason"], list)


def test_render_round_trips() -> None:
    state = {"state": "ready", "reason": [], "stack_id": "abc", "time": "t"}
    assert nodestate.parse(nodestate.render(state)) == state
    assert nodestate.render(state).endswith("}\n")
    assert list(json.loads(nodestate.render(state))) == sorted(state)


REBOOT = {"loaded": "550.127.05", "installed": "580.95.05"}
# (current state, stack id in the file, changed, reboot pending) -> (state, reason contains)
PROVISION_CASES: list[tuple[str, str | None, bool, dict[str, str], str, str | None]] = [
    ("new", None, True, {}, "provisioned", None),
    ("new", None, False, REBOOT, "provisioned", "needs reboot: loaded NVIDIA module 550.127.05"),
    ("provisioned", "s1", False, {}, "provisioned", None),
    ("ready", "s1", False, {}, "ready", None),  # the verdict stands
    ("not-ready", "s1", False, {}, "not-ready", "ecc"),  # so does a failed one
    ("ready", "s0", True, {}, "not-ready", "stack changed from s0 to s1"),
    ("ready", "s1", True, {}, "not-ready", "stack reinstalled"),
    ("ready", "s1", False, REBOOT, "not-ready", "installed and pinned 580.95.05"),
    ("not-ready", "s0", True, {}, "provisioned", None),
]


@pytest.mark.parametrize(("before", "stack", "changed", "reboot", "after", "why"), PROVISION_CASES)
def test_after_provision(
    before: str,
    stack: str | None,
    changed: bool,
    reboot: dict[str, str],
    after: str,
    why: str | None,
) -> None:
    current: dict[str, Any] = {"state": before, "reason": ["ecc"] if before == "not-ready" else []}
    if stack:
        current["stack_id"] = stack
    new = nodestate.after_provision(
        current, stack_id="s1", changed=changed, reboot=reboot, run_id="r1", now=NOW
    )
    assert new["state"] == after
    assert new.get("reboot_pending") == (reboot or None)
    assert nodestate.proven_provisioned(new, "s1", []) == (not reboot)
    assert new["stack_id"] == "s1"
    if why:
        assert any(why in r for r in new["reason"]), new["reason"]
    assert new["state"] != "ready" or before == "ready"  # provisioning never makes ready


def test_unchanged_provision_writes_nothing() -> None:
    current = {
        "state": "ready",
        "reason": [],
        "stack_id": "s1",
        "time": "t0",
        "provisioned_at": "t",
    }
    assert nodestate.after_provision(current, stack_id="s1", changed=False) == current
    first = nodestate.after_provision(nodestate.new(), stack_id="s1", changed=True, now=NOW)
    assert first["time"] == first["provisioned_at"] == "2026-12-01T12:00:00Z"
    assert nodestate.after_provision(first, stack_id="s1", changed=False) == first


@pytest.mark.parametrize(
    ("before", "drift", "after"),
    [
        ("ready", ["n1: libnccl2 2.21.5 installed, 2.26.2 pinned"], "not-ready"),
        ("ready", [], "ready"),
        ("provisioned", ["n1: drift"], "provisioned"),
        ("not-ready", ["n1: drift"], "not-ready"),
    ],
)
def test_after_drift(before: str, drift: list[str], after: str) -> None:
    new = nodestate.after_drift({"state": before, "reason": []}, drift, run_id="r", now=NOW)
    assert new["state"] == after
    if after == "not-ready" and before == "ready":
        assert new["reason"] == drift


def _accept(current: dict[str, Any], passed: bool, stack: str | None) -> dict[str, Any]:
    return nodestate.after_acceptance(
        current,
        passed=passed,
        reasons=[] if passed else ["health.ecc: 3 uncorrectable"],
        accepted_stack_id=stack,
        run_id="r9",
        now=NOW,
        valid_hours=24,
        results_digest="sha256:x",
        image_id="sha256:img",
    )


def test_ready_only_for_the_stack_installed_now() -> None:
    installed = {"state": "provisioned", "reason": [], "stack_id": "s1"}
    ready = _accept(installed, True, "s1")
    assert ready["state"] == "ready" and ready["reason"] == []
    assert ready["valid_until"] == "2026-12-02T12:00:00+00:00"
    assert ready["image_id"] == "sha256:img" and ready["accepted_run_id"] == "r9"
    other = _accept(installed, True, "s2")
    assert other["state"] == "not-ready"
    assert "verdict was for stack s2 but s1 is installed" in other["reason"]
    nothing = _accept(nodestate.new(), True, "s1")
    assert nothing["state"] == "not-ready"
    failed = _accept(installed, False, "s1")
    assert failed["state"] == "not-ready" and failed["reason"] == ["health.ecc: 3 uncorrectable"]


READY = {"state": "ready", "reason": [], "stack_id": "s1", "time": "t0"}


def test_begin_suspends_ready_and_a_no_op_provision_restores_it() -> None:
    during = nodestate.begin_provision(READY, run_id="r2", now=NOW)
    assert during["state"] == "not-ready"
    assert during["reason"] == [f"{nodestate.IN_PROGRESS} (run r2)"]
    assert nodestate.standing(during) == {"state": "ready", "reason": [], "stack_id": "s1"}
    after = nodestate.after_provision(during, stack_id="s1", changed=False, run_id="r2", now=NOW)
    assert after["state"] == "ready" and "suspended" not in after
    assert nodestate.same_standing(after, READY)


def test_a_provision_that_changed_things_does_not_restore_ready() -> None:
    during = nodestate.begin_provision(READY, run_id="r2", now=NOW)
    after = nodestate.after_provision(during, stack_id="s1", changed=True, now=NOW)
    assert after["state"] == "not-ready"
    assert after["reason"] == ["stack reinstalled since the last acceptance"]
    upgraded = nodestate.after_provision(during, stack_id="s2", changed=True, now=NOW)
    assert upgraded["reason"] == ["stack changed from s1 to s2 since the last acceptance"]


def test_an_interrupted_provision_counts_as_changed() -> None:
    interrupted = nodestate.begin_provision(READY, run_id="r2", now=NOW)  # then SIGTERM
    rerun = nodestate.begin_provision(interrupted, run_id="r3", now=NOW)
    assert rerun["state"] == "not-ready" and rerun["suspended"]["interrupted"] is True
    after = nodestate.after_provision(rerun, stack_id="s1", changed=False, now=NOW)
    assert after["state"] == "not-ready"
    assert after["reason"] == ["stack reinstalled since the last acceptance"]


@pytest.mark.parametrize("before", ["new", "provisioned", "not-ready"])
def test_begin_leaves_other_states_alone(before: str) -> None:
    current = {"state": before, "reason": []}
    assert nodestate.begin_provision(current, run_id="r") == current


def test_acceptance_supersedes_a_provision_in_progress() -> None:
    during = nodestate.begin_provision(READY, run_id="r2", now=NOW)
    after = _accept(during, True, "s1")
    assert after["state"] == "ready" and "suspended" not in after


def test_provisioned_at_moves_only_when_a_provision_installed_something() -> None:
    first = nodestate.after_provision(nodestate.new(), stack_id="s1", changed=True, now=NOW)
    later = datetime(2026, 12, 5, tzinfo=timezone.utc)
    same = nodestate.after_provision(first, stack_id="s1", changed=False, now=later)
    assert same["provisioned_at"] == "2026-12-01T12:00:00Z"
    moved = nodestate.after_provision(first, stack_id="s1", changed=True, now=later)
    assert moved["provisioned_at"] == "2026-12-05T00:00:00Z"
    accepted = _accept({**moved, "state": "provisioned"}, True, "s1")
    assert accepted["provisioned_at"] == moved["provisioned_at"]


def test_a_reboot_clears_the_pending_field_and_its_reason() -> None:
    """The next provision after the node rebooted into the pinned driver drops both."""
    waiting = nodestate.after_provision(
        nodestate.new(), stack_id="s1", changed=True, reboot=REBOOT, now=NOW
    )
    assert waiting["reboot_pending"] == REBOOT
    assert not nodestate.proven_provisioned(waiting, "s1", [])
    rebooted = nodestate.after_provision(waiting, stack_id="s1", changed=False, now=NOW)
    assert "reboot_pending" not in rebooted
    assert rebooted["reason"] == []
    assert nodestate.proven_provisioned(rebooted, "s1", [])


def test_a_reason_alone_is_not_a_pending_reboot() -> None:
    """The structured field decides, not the text of a reason."""
    state = {"state": "provisioned", "stack_id": "s1", "reason": ["needs reboot (old text)"]}
    assert nodestate.reboot_pending(state) is None
    assert nodestate.proven_provisioned(state, "s1", [])
    assert nodestate.reboot_pending({**state, "reboot_pending": {"loaded": "550"}}) == {
        "loaded": "550",
        "installed": "?",
    }
