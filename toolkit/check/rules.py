"""The passive checks' own rules (PCIe AER deltas, RDMA port states and link-down deltas,
required units) and
:func:`judge`, which holds one probe (``probe.main``) to every passive rule.

Pure, each rule with its source; standard library only, so the node-side health check
(``healthcheck``) ships it and judges on the node exactly as ``gpunode check`` judges on the
control machine. What acceptance already judges (GPU count and model, versions, memory
errors, PCIe maximum link, throttling, XIDs) is judged by
``toolkit.acceptance.passive.passive_checks``, not here: one rule, one owner.

Counters that only grow while the machine runs (AER statistics, link downs) are judged as
deltas since
the last check, whose readings the node's state keeps (``nodestate.after_check``). A reading
below the last one means the counters restarted (a reboot or a driver reload): that reading
is then the delta, as a counter counts from zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolkit.acceptance.check import Check, NodeExpectation, not_measured
from toolkit.acceptance.health_checks import HealthSpec, XidInfo
from toolkit.acceptance.passive import passive_checks
from toolkit.stack.systems import os_id_of_release

# Linux, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats: each file lists one
# counter a line ("Receiver Error 2"; names may hold spaces) and ends with its total:
# TOTAL_ERR_COR, TOTAL_ERR_NONFATAL, TOTAL_ERR_FATAL.
AER_TOTALS = {
    "aer_dev_correctable": ("correctable", "TOTAL_ERR_COR"),
    "aer_dev_nonfatal": ("nonfatal", "TOTAL_ERR_NONFATAL"),
    "aer_dev_fatal": ("fatal", "TOTAL_ERR_FATAL"),
}
# Which deltas fail a node. Linux, Documentation/PCI/pcieaer-howto.rst, "AER error types":
# correctable errors "pose no impacts on the functionality of the interface" (the hardware
# recovers them), uncorrectable non-fatal errors make a transaction unreliable and fatal ones
# the link itself; so an uncorrectable error since the last check fails the node and the
# correctable count is shown (its rise is in the message and the passport), not judged.
AER_JUDGED = ("nonfatal", "fatal")
# Linux, Documentation/ABI/stable/sysfs-class-infiniband: a port's ``state`` is
# "<n>: <name>" with DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER, and ``phys_state`` "<n>: <name>"
# with LinkUp among Sleep, Polling, Disabled, ...: only an ACTIVE port with its link up carries
# traffic.
RDMA_ACTIVE = "ACTIVE"
RDMA_LINK_UP = "LinkUp"
# The same file, ports/<port>/counters/link_downed: "Total number of times the Port Training
# state machine has failed the link error recovery process and downed the link" (the port's
# PortCounters LinkDownedCounter, InfiniBand Architecture Specification). A link that flaps
# and settles is ACTIVE, LinkUp again at the next check: only this counter tells, so any
# link down since the last check fails the node (NVIDIA/NVSentinel#1236: flaps after bring-up).
LINK_DOWNED = "counters/link_downed"


def parse_aer(text: str) -> dict[str, int]:
    """One AER statistics file as ``{counter: count}`` (lines that end in no number skipped)."""
    counters: dict[str, int] = {}
    for line in text.splitlines():
        name, _, count = line.strip().rpartition(" ")
        if name and count.isdigit():
            counters[name.strip()] = int(count)
    return counters


def aer_totals(devices: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, int]]:
    """Per device, the totals of each kind it reports (``correctable``, ``nonfatal``,
    ``fatal``)."""
    out: dict[str, dict[str, int]] = {}
    for device, files in devices.items():
        for filename, (kind, total) in AER_TOTALS.items():
            value = parse_aer(files.get(filename) or "").get(total)
            if value is not None:
                out.setdefault(device, {})[kind] = value
    return out


def deltas(
    now: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]] | None
) -> dict[str, dict[str, int]] | None:
    """How far each counter moved since ``before`` (None: no earlier reading, nothing to
    compare); a counter below its last reading restarted, so it moved by its whole value."""
    if before is None:
        return None
    out: dict[str, dict[str, int]] = {}
    for device, counters in now.items():
        earlier = before.get(device) or {}
        for kind, value in counters.items():
            last = earlier.get(kind)
            moved = value if last is None or value < last else value - last
            if moved:
                out.setdefault(device, {})[kind] = moved
    return out


def aer_check(
    aer: Mapping[str, Any], before: Mapping[str, Mapping[str, int]] | None, names: Mapping[str, str]
) -> tuple[Check, dict[str, dict[str, int]]]:
    """``pcie.aer``: uncorrectable AER errors since the last check fail; and the totals read
    now (the next check's baseline). ``names``: PCI address -> what it is (``GPU 3``)."""
    totals = aer_totals(aer.get("devices") or {})
    source = f"{aer.get('dir')}/<device>/aer_dev_*"
    if aer.get("error") and not totals:
        why = f"{source} unreadable: {aer['error']}"
        return not_measured("pcie.aer", why, f"not judged: {why}"), totals
    if not totals:
        why = f"no AER statistics under {source}"
        return not_measured("pcie.aer", why, f"not judged: {why}"), totals
    moved = deltas(totals, before)
    if moved is None:
        return (
            not_measured(
                "pcie.aer",
                "first reading: the baseline the next check judges against",
                f"first reading of {len(totals)} device(s) ({source}): the next check "
                "judges what moves from here",
            ),
            totals,
        )

    def label(device: str) -> str:
        return f"{names[device]} ({device})" if device in names else device

    bad = [
        f"{label(d)}: {', '.join(f'{k} +{c[k]}' for k in AER_JUDGED if k in c)}"
        for d, c in sorted(moved.items())
        if any(k in c for k in AER_JUDGED)
    ]
    shown = [
        f"{label(d)}: correctable +{c['correctable']}"
        for d, c in sorted(moved.items())
        if "correctable" in c
    ]
    if bad:
        message = "uncorrectable PCIe errors since the last check: " + "; ".join(bad)
    else:
        message = f"no uncorrectable PCIe error since the last check on {len(totals)} device(s)"
    if shown:
        message += " | shown, not judged: " + "; ".join(shown)
    return (
        Check("pcie.aer", not bad, f"{message} ({source})", measured=moved or None),
        totals,
    )


def rdma_check(rdma: Mapping[str, Any], wanted: list[str] | None) -> Check:
    """``nic.link``: every compute RDMA port (``wanted`` device names, else all) is ACTIVE with
    its physical link up."""
    ports = dict(rdma.get("ports") or {})
    source = f"{rdma.get('dir')}/<device>/ports/<n>/state"
    if wanted:
        ports = {p: v for p, v in ports.items() if p.split("/", 1)[0] in wanted}
        missing = sorted(set(wanted) - {p.split("/", 1)[0] for p in ports})
        if missing:
            return Check("nic.link", False, f"no RDMA port of {', '.join(missing)} ({source})")
    if not ports:
        why = f"no RDMA port under {source}"
        return not_measured("nic.link", why, f"not judged: {why}")
    bad = []
    for port, files in sorted(ports.items()):
        state = (files.get("state") or "").partition(":")[2].strip() or files.get("state")
        phys = (files.get("phys_state") or "").partition(":")[2].strip() or files.get("phys_state")
        if state != RDMA_ACTIVE or phys != RDMA_LINK_UP:
            bad.append(f"{port}: {state or 'no state'}, {phys or 'no phys_state'}")
    message = "; ".join(bad) if bad else f"{len(ports)} RDMA port(s) ACTIVE, LinkUp"
    return Check("nic.link", not bad, f"{message} ({source})", measured=bad or None)


def link_downed_counts(
    rdma: Mapping[str, Any], wanted: list[str] | None
) -> dict[str, dict[str, int]]:
    """Per compute RDMA port (``wanted`` device names, else all), its link-down count, as
    ``{port: {"link_downed": n}}`` (the shape :func:`deltas` compares); unreadable counters
    left out."""
    out: dict[str, dict[str, int]] = {}
    for port, files in sorted(dict(rdma.get("ports") or {}).items()):
        if wanted and port.split("/", 1)[0] not in wanted:
            continue
        text = str((files or {}).get(LINK_DOWNED) or "").strip()
        if text.isdigit():
            out[port] = {"link_downed": int(text)}
    return out


def link_flap_check(
    rdma: Mapping[str, Any],
    wanted: list[str] | None,
    before: Mapping[str, Mapping[str, int]] | None,
) -> tuple[Check, dict[str, dict[str, int]]]:
    """``nic.link_downed``: a compute RDMA port whose link went down since the last check
    fails, named with how many times; and the counts read now (the next check's baseline)."""
    counts = link_downed_counts(rdma, wanted)
    source = f"{rdma.get('dir')}/<device>/ports/<n>/{LINK_DOWNED}"
    if not counts:
        why = f"no link-down counter under {source}"
        return not_measured("nic.link_downed", why, f"not judged: {why}"), counts
    moved = deltas(counts, before)
    if moved is None:
        message = (
            f"first reading of {len(counts)} port(s) ({source}): the next check judges "
            "what moves from here"
        )
        why = "first reading: the baseline the next check judges against"
        return not_measured("nic.link_downed", why, message), counts
    bad = [
        f"{port}: link down +{c['link_downed']} since the last check "
        f"(link_downed {counts[port]['link_downed']})"
        for port, c in sorted(moved.items())
    ]
    message = (
        "; ".join(bad) if bad else f"no link down since the last check on {len(counts)} port(s)"
    )
    return (
        Check("nic.link_downed", not bad, f"{message} ({source})", measured=moved or None),
        counts,
    )


def units_check(states: Mapping[str, str], required: Mapping[str, str]) -> Check:
    """``services.active``: every required unit is active (``required``: unit -> why)."""
    if not required:
        return Check("services.active", True, "no unit required")
    bad = [
        f"{unit} is {states.get(unit) or 'unknown'} ({why})"
        for unit, why in required.items()
        if states.get(unit) != "active"
    ]
    message = "; ".join(bad) if bad else f"active: {', '.join(required)}"
    return Check("services.active", not bad, f"{message} (systemctl is-active)")


@dataclass(frozen=True)
class Expected:
    """What a node must be on one OS: the expectation and the units that must be active
    (unit -> why)."""

    node: NodeExpectation
    units: dict[str, str] = field(default_factory=dict)


def judge(
    probe: Mapping[str, Any],
    expected: Mapping[str, Expected],
    spec: HealthSpec,
    before: Mapping[str, Any] | None,
    *,
    compute_nics: list[str] | None,
    xids: Mapping[int, XidInfo],
    model_of: Callable[[str], str | None],
) -> tuple[list[Check], dict[str, Any]]:
    """The checks of one node's probe, and the baseline the next check starts from.

    Args:
        probe: What ``probe.main`` read.
        expected: What the node must be, per OS id it may run (its OS is read by the probe).
        spec: The thresholds in force.
        before: The last check's baseline (the state's ``check``), None before the first.
        compute_nics: The RDMA devices that carry training traffic (None: every port).
        xids: The critical XIDs by number.
        model_of: A GPU name's model in the catalogue.
    """
    system = os_id_of_release(probe.get("os_release"))
    checks: list[Check] = []
    if system is None or system not in expected:
        checks.append(
            Check(
                "os.supported",
                False,
                f"the node runs {system or 'an unsupported OS'}; its group is pinned for "
                f"{', '.join(expected)}",
            )
        )
        return checks, {"time": probe.get("started")}
    want = expected[system]
    # XIDs since the last check: after its start time, less the lines it already saw (times
    # are whole seconds, so a line of the second the last check started may be old or new).
    log = dict(probe.get("kernel_log") or {})
    events = list(log.get("xid_events") or [])
    seen = set((before or {}).get("xid_seen") or [])
    log["xid_events"] = [e for e in events if e.get("line") not in seen]
    result = {**probe, "kernel_log": log, "xid_since": (before or {}).get("time")}
    checks += passive_checks(result, want.node, spec, xids=xids, model_of=model_of)
    listed = (probe.get("gpus") or {}).get("list") or []
    names = {str(g.get("bus_id") or "")[4:].lower(): f"GPU {g.get('index')}" for g in listed}
    aer, totals = aer_check(probe.get("aer") or {}, (before or {}).get("aer"), names)
    checks.append(aer)
    checks.append(rdma_check(probe.get("rdma") or {}, compute_nics))
    flaps, downs = link_flap_check(
        probe.get("rdma") or {}, compute_nics, (before or {}).get("link_downed")
    )
    checks.append(flaps)
    checks.append(units_check(probe.get("units") or {}, want.units))
    started = str(probe.get("started") or "")
    recent = sorted({str(e.get("line")) for e in events if str(e.get("time") or "~") >= started})
    baseline = {"time": probe.get("started"), "aer": totals, "xid_seen": recent}
    return checks, {**baseline, "link_downed": downs}
