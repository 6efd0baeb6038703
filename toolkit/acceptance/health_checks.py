"""Checks of a node's health: memory errors (``memory_health.py`` holds the rules), the PCIe
links, clock throttling and critical XIDs in the kernel log.

Standard library only (the node-side health check ships it): the thresholds come in as any
object with :class:`HealthSpec`'s fields (``floors.AcceptanceSpec`` on the control
machine) and the critical XIDs' names as a table (``thresholds.critical_xids()``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from toolkit.acceptance import failure, memory_health
from toolkit.acceptance.check import Check, some
from toolkit.node import nodestate


class HealthSpec(Protocol):
    """The thresholds these checks read (``floors.AcceptanceSpec`` has them all)."""

    @property
    def check_pcie(self) -> bool: ...
    @property
    def check_throttle(self) -> bool: ...
    @property
    def pcie_gen(self) -> int | None: ...
    @property
    def pcie_width(self) -> int | None: ...
    @property
    def critical_xids(self) -> list[int] | None: ...
    @property
    def xid_window_h(self) -> float | None: ...


class XidInfo(Protocol):
    """One catalogued XID's name, NVIDIA's action for it (the catalog's bucket), and what
    gpunode makes of that: the failure class and the action in words
    (``thresholds.CatalogXid``)."""

    @property
    def name(self) -> str: ...
    @property
    def action(self) -> str: ...
    @property
    def failure_class(self) -> str: ...
    @property
    def todo(self) -> str: ...
    @property
    def fails(self) -> bool: ...


# NVIDIA's Xid catalog bucket of the XIDs it says to ignore: shown, never failed, unless a
# profile lists them in `critical_xids`.
IGNORE = "IGNORE"


# `clocks_throttle_reasons.active` bits that mean the hardware is slowing itself down
# (nvidia-smi --help-query-gpu: 0x8 HW slowdown, 0x20 SW thermal slowdown, 0x40 HW thermal
# slowdown, 0x80 HW power brake slowdown). Idle (0x1), application clocks (0x4) and the
# software power cap (0x2) are normal states.
BAD_THROTTLE_BITS = {
    0x8: "HW slowdown",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
}


def health_checks(
    result: dict[str, Any], spec: HealthSpec, xids: Mapping[int, XidInfo]
) -> list[Check]:
    """Memory errors, PCIe links and throttling (as the profile asks) and critical XIDs
    (``xids``: the shipped critical XIDs by number, ``thresholds.critical_xids()``)."""
    gpus = result.get("gpus") or {}
    listed = gpus.get("list") or []
    checks = []
    if gpus.get("ok"):
        # The memory-error rules and their sources live in memory_health.py.
        checks += [
            Check(
                f.check,
                f.ok,
                f.message,
                measured=f.measured or None,
                failure_class=failure.HARDWARE if f.actions else None,
                action="; ".join(f.actions) or None,
                action_source="; ".join(f.sources) or None,
            )
            for f in memory_health.judge(listed, gpus.get("memory_error"))
        ]
        if spec.check_pcie:
            checks.append(_pcie_check(listed, result.get("gpu_perf") or {}, spec))
        if spec.check_throttle:
            throttled = []
            for g in listed:
                mask = g.get("throttle_active") or 0
                names = [n for bit, n in BAD_THROTTLE_BITS.items() if mask & bit]
                if names:
                    throttled.append(f"GPU {g['index']}: {', '.join(names)}")
            checks.append(
                Check(
                    "health.throttle",
                    not throttled,
                    "; ".join(throttled) or "no hardware or thermal slowdown",
                )
            )
    checks.append(_xid_check(result, spec, xids))
    return checks


def _link(gen: Any, width: Any) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _pcie_check(listed: list[dict[str, Any]], perf: dict[str, Any], spec: HealthSpec) -> Check:
    """Judge each GPU's *maximum* link, and the link sampled under load where one was.

    The current link "may be reduced when the GPU is not in use" (nvidia-smi
    --help-query-gpu, pcie.link.gen.current), so the idle value is shown, never judged.
    ``pcie.link.gen.max`` is the lower of the GPU's (``gpumax``) and the root port's
    (``hostmax``) maximum: a host that caps a GPU's link fails as a slow slot would.
    """
    loaded = {s.get("gpu"): s for s in perf.get("pcie_under_load") or []}
    bad: list[str] = []
    shown: list[str] = []
    for g in listed:
        gen_max, width_max = g.get("pcie_gen_max"), g.get("pcie_width_max")
        gpu_max, host_max = g.get("pcie_gen_gpu_max"), g.get("pcie_gen_host_max")
        label = f"GPU {g['index']} ({g['bus_id']})"
        want_gen = spec.pcie_gen or gpu_max
        problems = []
        if gen_max is not None and want_gen is not None and gen_max < want_gen:
            problems.append(
                f"max link Gen{gen_max} < Gen{want_gen}"
                + (f" (GPU max Gen{gpu_max}, host port max Gen{host_max})" if host_max else "")
            )
        if width_max is not None and spec.pcie_width and width_max < spec.pcie_width:
            problems.append(f"max width x{width_max} < x{spec.pcie_width}")
        sample = loaded.get(g.get("index"))
        under_load = "not measured"
        if sample is not None:
            under_load = sample.get("error") or _link(sample.get("gen"), sample.get("width"))
            if sample.get("error"):
                problems.append(f"link under load not sampled: {sample['error']}")
            elif (sample.get("gen") or 0) < (gen_max or 0) or (sample.get("width") or 0) < (
                width_max or 0
            ):
                problems.append(f"under load {under_load} < max {_link(gen_max, width_max)}")
        detail = (
            f"{label}: max {_link(gen_max, width_max)}, under load {under_load}, idle "
            f"{_link(g.get('pcie_gen_current'), g.get('pcie_width_current'))} (not judged)"
        )
        if problems:
            bad.append(f"{label}: {'; '.join(problems)}")
        shown.append(detail)
    message = "; ".join(bad) if bad else "every link at its maximum"
    if shown:
        message += " | " + some(shown, 2)
    return Check(
        "health.pcie",
        not bad,
        message,
        measured=[
            {
                "gpu": g.get("index"),
                "max": [g.get("pcie_gen_max"), g.get("pcie_width_max")],
                "idle": [g.get("pcie_gen_current"), g.get("pcie_width_current")],
                "under_load": [
                    loaded[g.get("index")].get("gen"),
                    loaded[g.get("index")].get("width"),
                ]
                if g.get("index") in loaded
                else None,
            }
            for g in listed
        ],
        floor=[spec.pcie_gen, spec.pcie_width],
    )


def _when(text: Any) -> datetime | None:
    """An ISO 8601 time from a result or state file (UTC when it names no zone)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)


def xid_window_start(result: dict[str, Any], spec: HealthSpec) -> tuple[datetime | None, str]:
    """Where the XID window opens, and why: the node's last provision, the last passive check
    (``xid_since``, set by ``gpunode check``), the passive check that turned the node not
    ready (its state's time, when every reason is a check's), or the last ``xid_window_h``
    hours, whichever is latest; the boot (the log's own start) otherwise."""
    state = result.get("state") or {}
    provisioned = _when(state.get("provisioned_at"))
    now = _when(result.get("started"))
    checked = _when(result.get("xid_since"))
    starts: list[tuple[datetime, str]] = []
    if provisioned is not None:
        starts.append((provisioned, f"since the last provision ({provisioned.isoformat()})"))
    if checked is not None:
        starts.append((checked, f"since the last check ({checked.isoformat()})"))
    turned = _when(state.get("time")) if nodestate.held_by_check(state) else None
    if turned is not None:
        # The XIDs a passive check already acted on (it turned the node not ready, and Slurm
        # drained it) are history to a re-acceptance: the node is proven again from there,
        # not held not-ready for ever by a line the kernel log keeps until the next boot.
        starts.append(
            (
                turned,
                f"since the passive check that turned the node not ready ({turned.isoformat()})",
            )
        )
    if spec.xid_window_h is not None and now is not None:
        starts.append(
            (now - timedelta(hours=spec.xid_window_h), f"within the last {spec.xid_window_h:g} h")
        )
    if not starts:
        return None, "since boot"
    return max(starts, key=lambda s: s[0])


def critical_set(spec: HealthSpec, named: Mapping[int, XidInfo]) -> set[int]:
    """The XIDs that fail a node: the profile's list, else every catalogued XID but those
    NVIDIA's catalog says to ignore (63, 92 ...)."""
    if spec.critical_xids is not None:
        return set(spec.critical_xids)
    return {n for n, x in named.items() if x.action != IGNORE and x.fails}


def _xid_check(result: dict[str, Any], spec: HealthSpec, named: Mapping[int, XidInfo]) -> Check:
    """Critical XIDs (``xids.yml`` or the profile's list) within the window fail the node,
    classed and with NVIDIA's action; every XID of the boot is still shown, with its action."""
    log = result.get("kernel_log") or {}
    if not log.get("ok"):
        harness = failure.HARNESS_RUN
        return Check(
            "health.xid",
            False,
            f"kernel log unreadable: {log.get('error')}",
            failure_class=harness.failure_class,
            action=harness.action,
            action_source=harness.source,
        )
    critical = critical_set(spec, named)
    start, window = xid_window_start(result, spec)
    events = list(log.get("xid_events") or [])
    state = result.get("state") or {}
    # The lines the passive check that turned the node not ready had read (nodestate's
    # ``turned_seen``): acted on, even where one shares its whole second with the state's time.
    acted = set(state.get("turned_seen") or []) if nodestate.held_by_check(state) else set()

    def in_window(event: dict[str, Any]) -> bool:
        if event.get("line") in acted:
            return False
        when = _when(event.get("time"))
        if when is not None:
            return start is None or when >= start
        # Without a time an event cannot be placed in the window: one of an earlier boot
        # (the runner tells by journalctl's boot markers) never counts, one of this boot or
        # of an unknown boot does.
        return event.get("boot") != "previous"

    def why_not(event: dict[str, Any]) -> str:
        if event.get("xid") not in critical:
            known = named.get(event["xid"])
            if known is not None and known.action == IGNORE:
                return "NVIDIA's catalog says to ignore it"
            if known is not None and not known.fails:
                return f"its action depends on the message's decode: {known.todo}"
            return "not critical"
        if event.get("line") in acted:
            return "read by the passive check that turned the node not ready"
        return "an earlier boot" if event.get("boot") == "previous" else "outside the window"

    def when(event: dict[str, Any]) -> str:
        if event.get("time"):
            return f"at {event['time']}"
        return {"this": "this boot, time unknown", "previous": "an earlier boot"}.get(
            event.get("boot") or "", "time and boot unknown"
        )

    def about(event: dict[str, Any]) -> str:
        known = named.get(event["xid"])
        return f"{known.name}; NVIDIA's action: {known.action}" if known else ""

    def advice(xid: int) -> failure.Advice:
        known = named.get(xid)
        if known is None:  # a profile's own critical XID the catalog table does not hold
            return failure.advice_for("health.xid")
        return failure.Advice(known.failure_class, f"XID {xid}: {known.todo}", failure.XID_CATALOG)

    failing = [e for e in events if e.get("xid") in critical and in_window(e)]
    shown = [
        f"XID {e['xid']} on {e['bus_id']} {when(e)}"
        + (
            f" ({about(e)})"
            if e in failing
            else f" (not judged: {why_not(e)})" + (f" [{about(e)}]" if about(e) else "")
        )
        for e in events
    ]
    chosen = failure.worst([advice(x) for x in dict.fromkeys(e["xid"] for e in failing)])
    message = f"{len(failing)} critical XID(s) {window}" if failing else f"no critical XID {window}"
    if shown:
        message += ": " + some(shown, 5)
    return Check(
        "health.xid",
        not failing,
        message,
        measured=[e["xid"] for e in failing],
        floor=start.isoformat() if start else None,
        failure_class=chosen.failure_class if chosen else None,
        action=chosen.action if chosen else None,
        action_source=chosen.source if chosen else None,
    )
