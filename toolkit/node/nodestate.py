"""The node's state file: its path, its schema and the only transitions allowed.

``/etc/gpunode/state.json`` on each node says where the node stands:

- ``new``: gpunode never provisioned it;
- ``provisioned``: the pinned stack is installed (``reboot_pending`` says when the loaded
  driver is not the installed one until a reboot);
- ``ready``: an acceptance verdict passed **for the stack id installed now**;
- ``not-ready``: acceptance failed, the stack changed since it passed, or the node drifted.

Every writer goes through this module: the ``node_state`` role (through the
``gpunode_node_state`` action plugin) after provisioning and drift checks, acceptance
after its verdict, ``gpunode check`` after its passive checks, and the node-side health check
(Slurm's or the timer's). Readers (``gpunode status``, acceptance, reports) parse it here too.
The file is replaced whole under its lock (:func:`write`, :func:`write_program`,
``nodefile``): on the node by the health check, on the control machine's behalf by a
program it runs there.
Nothing becomes ``ready`` except :func:`after_acceptance` with a passing verdict whose stack
id is the one installed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from toolkit.errors import ConfigError, RemoteError
from toolkit.facts.probe import Fact, Status
from toolkit.node import nodefile

PATH = "/etc/gpunode/state.json"
STATES = ("new", "provisioned", "ready", "not-ready")
# Keys a writer may set (anything else found in a file is kept as it is, for newer writers).
KEYS = (
    "state",
    "reason",
    "stack_id",
    "run_id",
    "time",
    "valid_until",
    "results_digest",
    "image_id",
    "accepted_run_id",
    "accepted_at",
    "provisioned_at",
    "busbw_at_largest_gbps",
    "suspended",
    "reboot_pending",
    "check",
    "turned_seen",
    "failure_class",
)
# The reason a ready node carries while a provision run is changing it (see begin_provision).
IN_PROGRESS = "provision in progress"
# The reason prefix of a node that a passive check (``gpunode check``) turned not ready.
CHECK_PREFIX = "check: "
# ``check``: the last passive check's time and the counters it read (PCIe AER ...), the
# baseline the next check's deltas start from; kept while the standing is unchanged.
# ``turned_seen``: the kernel log's XID lines that the check which turned the node not ready
# had read from the second it started (its baseline's ``xid_seen``). Times are whole seconds,
# so a line of the second the state's ``time`` names may be one it acted on or a new one; a
# re-acceptance tells them apart by these lines (``health_checks``).
# ``failure_class``: the leading class of the last acceptance's failed checks (configuration,
# hardware, transient, harness: toolkit/acceptance/failure.py) while that verdict holds the
# node not ready; `up --accept-only` does not re-accept a node held for hardware.
# ``reboot_pending``: {"loaded": <driver version the kernel runs>, "installed": <the pinned one>}
# while the node runs another driver than the one installed; absent once it runs the pin.
REBOOT_KEYS = ("loaded", "installed")

State = dict[str, Any]


def new() -> State:
    """The state of a node gpunode never wrote to."""
    return {"state": "new", "reason": []}


def parse(text: str | bytes | None) -> State:
    """The state from the file's content (``None``: no file, so ``new``).

    Returns:
        The state; an unreadable file gives state ``unknown`` with the reason (never raises:
        a broken file on one node must not stop reading the others).
    """
    if text is None:
        return new()
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as err:
        return {"state": "unknown", "reason": [f"{PATH} is not valid JSON: {err}"]}
    if not isinstance(data, dict) or data.get("state") not in STATES:
        return {"state": "unknown", "reason": [f"{PATH} has no valid state (one of {STATES})"]}
    reason = data.get("reason")
    data["reason"] = [str(r) for r in reason] if isinstance(reason, list) else []
    return data


def from_probe(rc: Status, text: str) -> State:
    """The state as the probe's ``state`` section read it (``cat`` fails only when there is none).

    A file that exists but cannot be read gives ``unknown`` with the reason.
    """
    if rc == 0:
        return parse(text)
    if rc is not None and "No such file" in text:
        return new()
    return {"state": "unknown", "reason": [f"{PATH} could not be read: {text[:200]}"]}


# The state file as a probe fact: the node facts probe reads it, and so does the state write.
FACT = Fact("state", ("cat", PATH), from_probe)


def render(state: Mapping[str, Any]) -> str:
    """The file's content: sorted, indented JSON with a final newline."""
    return json.dumps(dict(state), indent=2, sort_keys=True) + "\n"


def write(state: Mapping[str, Any], path: str = PATH) -> None:
    """Replace the state file with ``state``, on the node, under its lock."""
    nodefile.write_locked(path, render(state))


def write_program(state: Mapping[str, Any], path: str = PATH) -> bytes:
    """The ``python3 -`` program that does :func:`write` on the node (the control machine's
    writers run it over SSH, with sudo where the node needs it)."""
    return nodefile.write_program(path, render(state))


def write_over(node: Any, state: Mapping[str, Any]) -> None:
    """Replace the state file on a connected node (a ``toolkit.remote`` node: its
    ``run_with_input`` runs as root, through sudo where the login needs it) with
    :func:`write_program`: one round trip, under the lock the node's health check takes too.

    Raises:
        RemoteError: The write failed on the node (named, with what it printed).
    """
    res = node.run_with_input("python3 -", [write_program(state)], timeout=60)
    if not res.ok:
        raise RemoteError(
            f"{node.host.name}: writing {PATH} exited {res.returncode}: "
            f"{(res.stderr or res.stdout).strip()[-300:]}"
        )


def _utc(now: datetime | None) -> str:
    return (
        (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    )


def _stamp(state: State, run_id: str | None, now: datetime | None) -> State:
    state["run_id"] = run_id or state.get("run_id") or ""
    state["time"] = _utc(now)
    return state


def same_standing(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two states say the same (state, reasons, stack id): no need to write."""
    return all(a.get(k) == b.get(k) for k in ("state", "reason", "stack_id")) and list(
        a.get("reason") or []
    ) == list(b.get("reason") or [])


def begin_provision(
    current: Mapping[str, Any], *, run_id: str | None = None, now: datetime | None = None
) -> State:
    """The state while a provision run may change the node: a ready node is not ready.

    Ctrl-C, SIGTERM or a lost connection in the middle of a provision must never leave a
    node ``ready`` with a half-changed stack, so a ready node is marked not-ready before any
    change, its standing kept under ``suspended``; :func:`after_provision` restores it when
    the run changed nothing. A node found still in progress was interrupted: its run may have
    changed packages, so it counts as changed (``suspended.interrupted``).
    """
    if current.get("suspended"):
        suspended = {**current["suspended"], "interrupted": True}
        return _stamp({**current, "suspended": suspended}, run_id, now)
    if current.get("state") != "ready":
        return dict(current)
    suspended = {k: current.get(k) for k in ("state", "reason", "stack_id")}
    state = {
        **current,
        "state": "not-ready",
        "reason": [f"{IN_PROGRESS} (run {run_id or '?'})"],
        "suspended": suspended,
    }
    return _stamp(state, run_id, now)


def standing(current: Mapping[str, Any]) -> dict[str, Any]:
    """The node's standing apart from a provision in progress (state, reason, stack id)."""
    base = current.get("suspended") or current
    return {k: base.get(k) for k in ("state", "reason", "stack_id")}


def reboot_pending(state: Mapping[str, Any]) -> dict[str, str] | None:
    """The driver change that waits for a reboot (``loaded``, ``installed``), or None."""
    pending = state.get("reboot_pending")
    if not isinstance(pending, Mapping) or not pending:
        return None
    return {key: str(pending.get(key) or "?") for key in REBOOT_KEYS}


def reboot_reason(pending: Mapping[str, Any]) -> str:
    """The reason a node with a pending reboot carries, for people."""
    return (
        f"needs reboot: loaded NVIDIA module {pending.get('loaded') or '?'}, installed and "
        f"pinned {pending.get('installed') or '?'}"
    )


def after_provision(
    current: Mapping[str, Any],
    *,
    stack_id: str,
    changed: bool,
    reboot: Mapping[str, Any] | None = None,
    run_id: str | None = None,
    now: datetime | None = None,
) -> State:
    """The state once a provision run converged the node to ``stack_id``.

    ``reboot``: the driver change that waits for a reboot (``loaded``, ``installed``), kept as
    ``reboot_pending`` with its reason; None or empty when the node runs the pinned driver.

    A node ready (or not ready) for this very stack, with nothing changed and nothing to
    report, keeps its verdict. A ready node whose stack changed, or that was reinstalled,
    becomes not-ready: acceptance must run again. Anything else is ``provisioned``.
    """
    pending = reboot_pending({"reboot_pending": reboot})
    reasons = [reboot_reason(pending)] if pending else []
    suspended = current.get("suspended") or {}
    if suspended:
        changed = changed or bool(suspended.get("interrupted"))
        current = {**{k: v for k, v in current.items() if k != "suspended"}, **standing(current)}
    previous = current.get("state")
    same_stack = current.get("stack_id") == stack_id
    if previous in ("ready", "not-ready") and same_stack and not changed and not reasons:
        wanted: State = {"state": previous, "reason": list(current.get("reason") or [])}
    elif previous == "ready":
        why = (
            f"stack changed from {current.get('stack_id') or '?'} to {stack_id} "
            "since the last acceptance"
            if not same_stack
            else "stack reinstalled since the last acceptance"
            if changed
            else None
        )
        wanted = {"state": "not-ready", "reason": ([why] if why else []) + reasons}
    else:
        wanted = {"state": "provisioned", "reason": reasons}
    wanted["stack_id"] = stack_id
    merged = {k: v for k, v in {**current, **wanted}.items() if k != "reboot_pending"}
    if pending:
        merged["reboot_pending"] = pending
    if changed or "provisioned_at" not in current:
        # Acceptance's XID window opens at the last provision that installed something.
        merged["provisioned_at"] = _utc(now)
    elif same_standing(current, merged):
        return dict(current)
    return _stamp(merged, run_id, now)


def after_drift(
    current: Mapping[str, Any],
    drift: Iterable[str],
    *,
    run_id: str | None = None,
    now: datetime | None = None,
) -> State:
    """The state after a drift check: a ready node that drifted becomes not-ready."""
    messages = [str(m) for m in drift]
    if current.get("state") != "ready" or not messages:
        return dict(current)
    return _stamp({**current, "state": "not-ready", "reason": messages}, run_id, now)


def after_check(
    current: Mapping[str, Any],
    failures: Iterable[str],
    baseline: Mapping[str, Any],
    *,
    run_id: str | None = None,
    now: datetime | None = None,
) -> State:
    """The state after a passive check (``gpunode check``): a ready node that failed one
    becomes not-ready with the failures (each prefixed ``check: ``); the check's counters are
    kept as ``check`` for the next one's deltas.

    A clean check never makes a node ready, nor changes a node that is not ready: only
    :func:`after_acceptance` proves readiness again.
    """
    messages = [f"{CHECK_PREFIX}{m}" for m in failures]
    state = {**current, "check": dict(baseline)}
    if current.get("state") == "ready" and messages:
        turned = {
            **state,
            "state": "not-ready",
            "reason": messages,
            "turned_seen": list(baseline.get("xid_seen") or []),
        }
        return _stamp(turned, run_id, now)
    return state


def held_by_check(state: Mapping[str, Any]) -> bool:
    """Whether the node is not ready because of a passive check (every reason is a check's,
    :data:`CHECK_PREFIX`): the standing the Slurm health check marks, and whose XIDs a
    re-acceptance takes as already acted on. A node new, provisioned, ready, or not ready for
    another reason (a failed acceptance, a provision in progress) is not."""
    reasons = [str(r) for r in state.get("reason") or []]
    return (
        state.get("state") == "not-ready"
        and bool(reasons)
        and all(r.startswith(CHECK_PREFIX) for r in reasons)
    )


def after_acceptance(
    current: Mapping[str, Any],
    *,
    passed: bool,
    reasons: Iterable[str],
    accepted_stack_id: str | None,
    run_id: str,
    now: datetime,
    valid_hours: float,
    results_digest: str | None = None,
    image_id: str | None = None,
    busbw_gbps: float | None = None,
    failure_class: str | None = None,
) -> State:
    """The state after an acceptance verdict.

    ``ready`` only when the verdict passed **and** the stack id the node has installed (the
    one in its state file) is the one the verdict was given for; otherwise ``not-ready``
    with the reasons (a passing verdict for another stack says so) and ``failure_class``, the
    verdict's leading class (a passing verdict for another stack is a configuration's).
    """
    reasons = [str(r) for r in reasons]
    installed = current.get("stack_id")
    ready = passed and installed is not None and installed == accepted_stack_id
    if passed and not ready:
        reasons.append(
            f"verdict was for stack {accepted_stack_id or '?'} but {installed or 'no stack'} "
            "is installed"
        )
    state = {
        **current,
        "state": "ready" if ready else "not-ready",
        "reason": [] if ready else reasons,
        "stack_id": installed,
        "accepted_run_id": run_id,
        "accepted_at": _utc(now),
        "valid_until": (now + timedelta(hours=valid_hours)).isoformat(),
        "results_digest": results_digest,
        "busbw_at_largest_gbps": busbw_gbps,
    }
    if image_id is not None:
        state["image_id"] = image_id
    state.pop("failure_class", None)
    if not ready:
        state["failure_class"] = failure_class or ("configuration" if passed else None)
    state.pop("suspended", None)  # a new verdict supersedes a provision left in progress
    state.pop("turned_seen", None)  # and the passive check that turned the node not ready
    return _stamp(state, run_id, now)


# What a node has proven, judged from its state file: the one rule for `gpunode up` (which
# skips what is proven and reports what each node ended as) and `gpunode status` (which
# shows it).


# A site may require re-validation: a ready node whose last acceptance is older than this many
# days is re-accepted by `gpunode up`, even when its verdict has not expired.
REVALIDATE_VAR = "gpunode_revalidate_after_days"


def revalidate_after_days(value: Any, source: str = REVALIDATE_VAR) -> float | None:
    """The inventory's :data:`REVALIDATE_VAR` (None: unset, no re-validation by age).

    Raises:
        ConfigError: Not a positive number of days (``source`` says where it was set).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(
            f"{source}: {REVALIDATE_VAR} must be a positive number of days, not {value!r}"
        )
    return float(value)


def not_proven_ready(
    state: Mapping[str, Any],
    stack_id: str | None,
    drift: Iterable[str],
    now: datetime,
    image_id: str | None = None,
    revalidate_days: float | None = None,
) -> list[str]:
    """Why ``state`` does not prove the node ready for ``stack_id`` (and for the training image
    ``image_id``, when one is used) at ``now``; empty when it does. A verdict proves readiness
    for what was installed when it was given, with no drift since, until it expires, and, when
    the site re-validates (``revalidate_days``, :data:`REVALIDATE_VAR`), for that many days
    after the acceptance (``accepted_at``; a state with none is re-validated)."""
    if state.get("state") != "ready":
        return [f"the node is {state.get('state') or 'new'}"]
    why = [str(d) for d in drift]
    if stack_id is not None and state.get("stack_id") != stack_id:
        why.append(f"accepted for stack {state.get('stack_id')}, pinned now {stack_id}")
    if image_id is not None and state.get("image_id") != image_id:
        why.append(f"accepted in image {state.get('image_id')}, current image {image_id}")
    until = _time(state.get("valid_until"))
    if until is None:
        why.append("the verdict has no valid expiry time")
    elif until <= now:
        why.append(f"the verdict expired at {until.isoformat()}")
    if revalidate_days is not None:
        accepted = _time(state.get("accepted_at"))
        every = f"{revalidate_days:g} days ({REVALIDATE_VAR})"
        if accepted is None:
            why.append(f"no acceptance time recorded; the site re-validates every {every}")
        elif now - accepted >= timedelta(days=revalidate_days):
            why.append(
                f"last accepted at {accepted.isoformat()}, more than {every} ago: re-validated"
            )
    return why


def proven_ready(
    state: Mapping[str, Any],
    stack_id: str | None,
    drift: Iterable[str],
    now: datetime,
    image_id: str | None = None,
    revalidate_days: float | None = None,
) -> bool:
    """Ready for this stack id (and image), no drift, verdict not expired nor due for
    re-validation."""
    return not not_proven_ready(state, stack_id, drift, now, image_id, revalidate_days)


def proven_state(
    state: Mapping[str, Any],
    stack_id: str | None,
    now: datetime,
    image_id: str | None = None,
    revalidate_days: float | None = None,
) -> State:
    """The state as what it proves at ``now``: a file that says ready but no longer proves it
    (:func:`not_proven_ready`: the verdict expired, another stack or image is pinned) reads
    ``not-ready`` with why; any other state reads as it is. What ``gpunode status`` shows and
    what ``gpunode up`` reports a node ended as."""
    why = not_proven_ready(state, stack_id, [], now, image_id, revalidate_days)
    if state.get("state") != "ready" or not why:
        return dict(state)
    return {**state, "state": "not-ready", "reason": [*(state.get("reason") or []), *why]}


def proven_provisioned(state: Mapping[str, Any], stack_id: str, drift: Iterable[str]) -> bool:
    """Provisioned with this stack id (state file written at the end of a provision run),
    not in the middle of one, no drift, no reboot pending."""
    return (
        state.get("state") in ("provisioned", "ready", "not-ready")
        and state.get("stack_id") == stack_id
        and not state.get("suspended")
        and not list(drift)
        and reboot_pending(state) is None
    )


def _time(text: Any) -> datetime | None:
    if not text:
        return None
    try:
        when = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
