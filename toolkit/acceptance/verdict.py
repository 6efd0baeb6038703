"""Verdicts: a node's runner result held against its hardware profile, its pins and floors.

Pure: the inputs are the runner's JSON result (``node_runner.py``), what the inventory says
the node must be (:class:`NodeExpectation`) and the thresholds in force. Every check that
fails is kept, with the measured value and the floor it missed.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from toolkit import nodestate
from toolkit.acceptance import dcgm, memory_health, nccllog, topology
from toolkit.acceptance.nccltests import NotNcclTestsOutput, parse_text
from toolkit.acceptance.thresholds import AcceptanceSpec, BusbwFloor, critical_xids, format_size
from toolkit.stack.debversion import satisfies

READY = "ready"
NOT_READY = "not-ready"
# The executor could not test the node (drained before the run, its job never started or was
# preempted): no verdict on the node, which keeps its state and its scheduler mark.
NOT_TESTED = "not-tested"
NOT_TESTED_CHECK = "executor.not-tested"

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


@dataclass(frozen=True)
class Check:
    """One check of one node."""

    name: str
    ok: bool
    message: str
    measured: Any = None
    floor: Any = None
    unit: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The check as JSON-ready data."""
        return asdict(self)


@dataclass(frozen=True)
class NodeExpectation:
    """What the inventory says one node must be."""

    host: str
    stack_id: str | None
    gpu_model: str | None = None
    gpu_count: int | None = None
    driver_version: str | None = None
    # package name -> exact apt version, for every pinned package the runner was asked about
    packages: dict[str, str] = field(default_factory=dict)
    nccl_version: str | None = None  # "2.21.5" (without the +cuda build)


@dataclass
class Verdict:
    """The verdict of one node."""

    host: str
    checks: list[Check]
    tested: bool = True

    @property
    def ready(self) -> bool:
        """Ready only when every check passed (and there was at least one)."""
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def verdict(self) -> str:
        """``ready``, ``not-ready`` or ``not-tested``."""
        if not self.tested:
            return NOT_TESTED
        return READY if self.ready else NOT_READY

    @property
    def failed(self) -> list[Check]:
        """Every failed check."""
        return [c for c in self.checks if not c.ok]

    def reasons(self) -> list[str]:
        """One line per failed check: ``check: message``."""
        return [f"{c.name}: {c.message}" for c in self.failed]

    def to_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready data."""
        return {
            "host": self.host,
            "verdict": self.verdict,
            "checks": [c.to_dict() for c in self.checks],
            "failed_checks": [
                {"check": c.name, "message": c.message, "measured": c.measured, "floor": c.floor}
                for c in self.failed
            ],
        }


def normalise_allreduce(section: dict[str, Any] | None) -> dict[str, Any]:
    """The all-reduce section in one shape whichever engine produced it.

    nccl-tests output is parsed here (the runner ships it raw); each size gets the lower of
    its two placements and its wrong count summed, as torch rows already are.
    """
    if not section:
        return {"engine": None, "rows": [], "error": "no all-reduce was run", "ranks": None}
    if section.get("engine") != "nccl-tests" or not section.get("raw_output"):
        return section
    try:
        parsed = parse_text(str(section["raw_output"]))
    except NotNcclTestsOutput as err:
        error = section.get("error") or f"all_reduce_perf output unreadable: {err.message}"
        return {**section, "rows": [], "error": error}
    rows = []
    for row in parsed.rows:
        placements = row.placements()
        slowest = max(placements, key=lambda p: p.time_us)
        wrong = sum(p.wrong or 0 for p in placements)
        rows.append(
            {
                "size_bytes": row.size_bytes,
                "time_us": slowest.time_us,
                "algbw_gbps": min(p.algbw_gbps for p in placements),
                "busbw_gbps": min(p.busbw_gbps for p in placements),
                "wrong": wrong,
                "correct": wrong == 0,
            }
        )
    error = section.get("error")
    if parsed.footer_failed and not error:
        error = f"nccl-tests footer: {parsed.out_of_bounds} out-of-bounds results (FAILED)"
    reasons = [*parsed.errors, *parsed.problems]
    if reasons and not error:
        error = "nccl-tests output not trusted: " + "; ".join(reasons[:3])
    return {
        **section,
        "rows": rows,
        "ranks": parsed.ranks or section.get("ranks"),
        "nccl_version": parsed.nccl_version,
        "validated": parsed.validated,
        "error": error,
    }


def allreduce_checks(
    section: dict[str, Any] | None, floors: list[BusbwFloor], prefix: str = "allreduce"
) -> list[Check]:
    """Correctness (exact) and busbw floors at named sizes of one all-reduce result."""
    data = normalise_allreduce(section)
    if data.get("error"):
        return [Check(f"{prefix}.run", False, str(data["error"]))]
    rows = data.get("rows") or []
    if not rows:
        return [Check(f"{prefix}.run", False, "the all-reduce produced no result rows")]
    checks = []
    wrong = sum(int(r.get("wrong") or 0) for r in rows)
    unchecked = [r["size_bytes"] for r in rows if r.get("correct") is None]
    if data.get("validated") is False:
        checks.append(Check(f"{prefix}.correctness", False, "results were not validated"))
    elif wrong or unchecked:
        bad = [format_size(r["size_bytes"]) for r in rows if r.get("correct") is False]
        checks.append(
            Check(
                f"{prefix}.correctness",
                False,
                f"{wrong} wrong values (sizes {', '.join(bad) or 'unknown'})",
                measured=wrong,
                floor=0,
            )
        )
    else:
        checks.append(
            Check(f"{prefix}.correctness", True, "every reduced value exact", measured=0, floor=0)
        )
    by_size = {int(r["size_bytes"]): r for r in rows}
    for floor in floors:
        name = f"{prefix}.busbw@{floor.size}"
        row = by_size.get(floor.size_bytes)
        if row is None:
            checks.append(Check(name, False, f"size {floor.size} was not measured"))
            continue
        busbw = float(row["busbw_gbps"])
        ok = busbw >= floor.min_busbw_gbps
        checks.append(
            Check(
                name,
                ok,
                f"busbw {busbw:.3f} GB/s {'>=' if ok else '<'} floor {floor.min_busbw_gbps} GB/s"
                f" at {floor.size}",
                measured=round(busbw, 4),
                floor=floor.min_busbw_gbps,
                unit="GB/s",
            )
        )
    return checks


def transport_checks(
    section: dict[str, Any] | None,
    rules: nccllog.TransportSpec | None,
    prefix: str = "allreduce",
) -> list[Check]:
    """The profile's transport rules (``nccllog.py`` holds them) against the NCCL log of one
    all-reduce: a rule the log cannot answer, or a run without a log, is not judged; a log
    under a profile without rules is shown. No rules and no log: no check."""
    summary = nccllog.read_section(section)
    name = f"{prefix}.transport"
    judged = rules is not None and rules.has_rules
    if summary is None:
        if not judged:
            return []
        engine = (section or {}).get("engine") or "no all-reduce"
        return [Check(name, True, f"not judged: the all-reduce ({engine}) left no NCCL log")]
    shown = summary.to_dict()
    if rules is None or not judged:
        return [Check(name, True, f"{summary.describe()} (shown, not judged)", measured=shown)]
    checks = [Check(name, True, summary.describe(), measured=shown)]
    for finding in nccllog.judge(summary, rules):
        rule = getattr(rules, finding.rule)
        where = f"profile rule transport.{finding.rule}: {rule}"
        checks.append(
            Check(
                f"{name}.{finding.rule}",
                finding.ok is not False,
                f"{finding.message} ({where})"
                if finding.ok is not None
                else f"not judged: {finding.message} ({where})",
                measured=shown.get(
                    {"network": "network_kind", "nvls": "nvls_channels"}.get(
                        finding.rule, finding.rule
                    )
                ),
                floor=rule,
            )
        )
    return checks


def _floor_check(
    name: str,
    value: float | None,
    floor: float | None,
    unit: str,
    *,
    at_most: bool = False,
    what: str = "",
) -> Check | None:
    """A figure judged against its floor, or with ``at_most`` against a limit it must stay at
    or below (``floor`` is then that limit); ``what`` leads the message. None without one."""
    if floor is None:
        return None
    if value is None:
        return Check(name, False, "not measured", floor=floor, unit=unit)
    if at_most:
        ok = value <= floor
        message = f"{what}{value:.3g} {unit} {'<=' if ok else '>'} limit {floor} {unit}"
    else:
        ok = value >= floor
        message = f"{what}{value:.2f} {unit} {'>=' if ok else '<'} floor {floor} {unit}"
    return Check(
        name, ok, message, measured=round(value, 4 if at_most else 3), floor=floor, unit=unit
    )


def _floor_checks(
    values: dict[str, Any], floors: tuple[tuple[str, str, float | None], ...], unit: str
) -> list[Check]:
    """One floor check per ``(check name, key of values, floor)`` whose floor is set."""
    checks = (_floor_check(name, values.get(key), floor, unit) for name, key, floor in floors)
    return [check for check in checks if check is not None]


def _per_gpu(
    kind: str,
    entries: list[dict[str, Any]],
    key: str,
    floor: float | None,
    unit: str,
    tolerance: float,
) -> list[Check]:
    checks = []
    values = [float(e[key]) for e in entries if e.get(key) is not None]
    for entry in entries:
        check = _floor_check(f"{kind}.gpu{entry['gpu']}", entry.get(key), floor, unit)
        if check is not None:
            checks.append(check)
    if len(values) >= 2:
        median = statistics.median(values)
        slow = [e for e in entries if float(e[key]) < (1 - tolerance) * median]
        message = (
            "; ".join(f"GPU {e['gpu']} {float(e[key]):.1f} {unit}" for e in slow)
            + f" below {(1 - tolerance):.0%} of the node median {median:.1f} {unit}"
            if slow
            else f"every GPU within {tolerance:.0%} of the median {median:.1f} {unit}"
        )
        checks.append(
            Check(f"{kind}.straggler", not slow, message, measured=[e["gpu"] for e in slow])
        )
    return checks


def not_tested_verdict(host: str, reason: str) -> Verdict:
    """The outcome of a node the executor could not test: one failed check saying why."""
    return Verdict(host, [Check(NOT_TESTED_CHECK, False, reason)], tested=False)


def judge(
    result: dict[str, Any] | None,
    expect: NodeExpectation,
    spec: AcceptanceSpec,
    *,
    runner_error: str | None = None,
    extra: list[Check] | None = None,
) -> Verdict:
    """Give one node's verdict.

    Args:
        result: The runner's JSON result (None when the runner failed).
        expect: What the inventory says the node must be.
        spec: The thresholds in force (``thresholds.effective``).
        runner_error: Why there is no result, when there is none.
        extra: Checks decided elsewhere (multi-node blame) to add to this node's.

    Returns:
        The verdict with every check.
    """
    checks: list[Check] = []
    if result is None:
        checks.append(Check("runner", False, runner_error or "the runner produced no result"))
        checks.extend(extra or [])
        return Verdict(expect.host, checks)
    checks += _inventory_checks(result, expect)
    checks += _version_checks(result, expect)
    checks += _health_checks(result, spec)
    checks += allreduce_checks(result.get("allreduce"), spec.allreduce)
    checks += transport_checks(result.get("allreduce"), spec.transport)
    checks += _perf_checks(result, spec)
    checks += _data_checks(result, spec)
    checks += training_checks(result, spec)
    checks += _topology_checks(result, spec)
    checks += _dcgm_checks(result, spec)
    checks.append(_stack_check(result, expect))
    checks.extend(extra or [])
    return Verdict(expect.host, checks)


def _inventory_checks(result: dict[str, Any], expect: NodeExpectation) -> list[Check]:
    gpus = result.get("gpus") or {}
    if not gpus.get("ok"):
        return [Check("gpu.query", False, f"nvidia-smi failed: {gpus.get('error')}")]
    checks = []
    listed = gpus.get("list") or []
    count = len(listed)
    if expect.gpu_count is not None:
        ok = count == expect.gpu_count
        checks.append(
            Check(
                "gpu.count",
                ok,
                f"{count} GPUs {'==' if ok else '!='} {expect.gpu_count} expected",
                measured=count,
                floor=expect.gpu_count,
            )
        )
    if expect.gpu_model is not None:
        from toolkit.stack import catalog

        want = catalog.lookup_gpu(expect.gpu_model)
        wrong = [
            g["name"]
            for g in listed
            if (catalog.lookup_gpu(str(g.get("name") or "")) or None) != want
        ]
        checks.append(
            Check(
                "gpu.model",
                not wrong,
                f"found {', '.join(sorted(set(wrong)))}; expected {expect.gpu_model}"
                if wrong
                else f"every GPU is a {expect.gpu_model}",
                measured=sorted({str(g.get("name")) for g in listed}),
                floor=expect.gpu_model,
            )
        )
    return checks


def _version_checks(result: dict[str, Any], expect: NodeExpectation) -> list[Check]:
    versions = result.get("versions") or {}
    checks = []
    packages = versions.get("packages") or {}
    if expect.packages:
        bad = {
            name: packages.get(name)
            for name, want in expect.packages.items()
            if not satisfies(want, str(packages.get(name) or ""))
        }
        checks.append(
            Check(
                "versions.installed",
                not bad,
                "; ".join(
                    f"{n}: installed {v or 'none'}, pinned {expect.packages[n]}"
                    for n, v in sorted(bad.items())
                )
                if bad
                else "every pinned package installed at its pinned version",
                measured=bad or None,
            )
        )
    if expect.driver_version is not None:
        loaded = versions.get("driver_loaded")
        if versions.get("nvml_error"):
            lib = versions.get("nvml_library")
            checks.append(
                Check(
                    "versions.driver_loaded",
                    False,
                    f"{versions['nvml_error']}"
                    + (f" (user space {lib}, pinned {expect.driver_version})" if lib else ""),
                )
            )
        else:
            ok = loaded == expect.driver_version
            proc = versions.get("driver_proc")
            if proc and proc != expect.driver_version:
                ok = False
            checks.append(
                Check(
                    "versions.driver_loaded",
                    ok,
                    f"loaded {loaded or 'none'} (/proc: {proc or 'n/a'}), pinned "
                    f"{expect.driver_version}",
                    measured=loaded,
                    floor=expect.driver_version,
                )
            )
    nccl_loaded = versions.get("nccl_loaded")
    if expect.nccl_version is not None and nccl_loaded:
        ok = nccl_loaded == expect.nccl_version
        checks.append(
            Check(
                "versions.nccl_loaded",
                ok,
                f"the framework loads NCCL {nccl_loaded} "
                f"({(versions.get('nccl') or {}).get('path') or 'file unknown'}), "
                f"pinned {expect.nccl_version}",
                measured=nccl_loaded,
                floor=expect.nccl_version,
            )
        )
    return checks


def _health_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    gpus = result.get("gpus") or {}
    listed = gpus.get("list") or []
    checks = []
    if gpus.get("ok"):
        # The memory-error rules and their sources live in memory_health.py.
        checks += [
            Check(f.check, f.ok, f.message, measured=f.measured or None)
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
    checks.append(_xid_check(result, spec))
    return checks


def _some(items: list[str], limit: int) -> str:
    """The first ``limit`` items joined, and how many more there are."""
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def _link(gen: Any, width: Any) -> str:
    return f"Gen{gen if gen is not None else '?'} x{width if width is not None else '?'}"


def _pcie_check(listed: list[dict[str, Any]], perf: dict[str, Any], spec: AcceptanceSpec) -> Check:
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
        message += " | " + _some(shown, 2)
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


def xid_window_start(result: dict[str, Any], spec: AcceptanceSpec) -> tuple[datetime | None, str]:
    """Where the XID window opens, and why: the node's last provision, or the last
    ``xid_window_h`` hours when that is later; the boot (the log's own start) otherwise."""
    provisioned = _when((result.get("state") or {}).get("provisioned_at"))
    now = _when(result.get("started"))
    starts: list[tuple[datetime, str]] = []
    if provisioned is not None:
        starts.append((provisioned, f"since the last provision ({provisioned.isoformat()})"))
    if spec.xid_window_h is not None and now is not None:
        starts.append(
            (now - timedelta(hours=spec.xid_window_h), f"within the last {spec.xid_window_h:g} h")
        )
    if not starts:
        return None, "since boot"
    return max(starts, key=lambda s: s[0])


def _xid_check(result: dict[str, Any], spec: AcceptanceSpec) -> Check:
    """Critical XIDs (``xids.yml`` or the profile's list) within the window fail the node;
    every XID of the boot is still shown."""
    log = result.get("kernel_log") or {}
    if not log.get("ok"):
        return Check("health.xid", False, f"kernel log unreadable: {log.get('error')}")
    named = critical_xids()
    critical = set(spec.critical_xids) if spec.critical_xids is not None else set(named)
    start, window = xid_window_start(result, spec)
    events = list(log.get("xid_events") or [])

    def in_window(event: dict[str, Any]) -> bool:
        when = _when(event.get("time"))
        if when is not None:
            return start is None or when >= start
        # Without a time an event cannot be placed in the window: one of an earlier boot
        # (the runner tells by journalctl's boot markers) never counts, one of this boot or
        # of an unknown boot does.
        return event.get("boot") != "previous"

    def why_not(event: dict[str, Any]) -> str:
        if event.get("xid") not in critical:
            return "not critical"
        return "an earlier boot" if event.get("boot") == "previous" else "outside the window"

    def when(event: dict[str, Any]) -> str:
        if event.get("time"):
            return f"at {event['time']}"
        return {"this": "this boot, time unknown", "previous": "an earlier boot"}.get(
            event.get("boot") or "", "time and boot unknown"
        )

    def about(event: dict[str, Any]) -> str:
        known = named.get(event["xid"])
        return f" ({known.name}; NVIDIA's action: {known.action})" if known else ""

    failing = [e for e in events if e.get("xid") in critical and in_window(e)]
    shown = [
        f"XID {e['xid']} on {e['bus_id']} {when(e)}"
        + (about(e) if e in failing else f" (not judged: {why_not(e)})")
        for e in events
    ]
    message = f"{len(failing)} critical XID(s) {window}" if failing else f"no critical XID {window}"
    if shown:
        message += ": " + _some(shown, 5)
    return Check(
        "health.xid",
        not failing,
        message,
        measured=[e["xid"] for e in failing],
        floor=start.isoformat() if start else None,
    )


def _perf_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    perf = result.get("gpu_perf")
    if not perf:
        # No CUDA device (the lab, or torch missing): GPU floors cannot be proven.
        floors = [
            name
            for name, value in (
                ("gemm", spec.min_gemm_tflops),
                ("mem_bw", spec.min_mem_bw_gbps),
                ("h2d", spec.min_h2d_gbps),
            )
            if value is not None
        ]
        if (
            floors
            and int(result.get("cuda_device_count") or 0) == 0
            and ((result.get("gpus") or {}).get("count"))
        ):
            return [
                Check(
                    "gpu_perf.run",
                    False,
                    f"floors set for {', '.join(floors)} but no CUDA device is usable by torch",
                )
            ]
        return []
    checks: list[Check] = []
    if perf.get("error"):
        checks.append(Check("gpu_perf.run", False, str(perf["error"])))
    tol = spec.straggler_tolerance
    checks += _per_gpu(
        "gemm", perf.get("gemm") or [], "tflops", spec.min_gemm_tflops, "TFLOPS", tol
    )
    checks += _per_gpu(
        "mem_bw", perf.get("mem_bw") or [], "gbps", spec.min_mem_bw_gbps, "GB/s", tol
    )
    checks += _per_gpu("h2d", perf.get("h2d") or [], "gbps", spec.min_h2d_gbps, "GB/s", tol)
    return checks


def _data_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    data = result.get("data")
    if spec.min_data_read_mbps is None and spec.min_data_write_mbps is None:
        return []
    if not data or data.get("error"):
        return [Check("data.run", False, (data or {}).get("error") or "not measured")]
    return _floor_checks(
        data,
        (
            ("data.write", "write_mbps", spec.min_data_write_mbps),
            ("data.read", "read_mbps", spec.min_data_read_mbps),
        ),
        "MB/s",
    )


def training_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """Storage under a training read pattern, the checkpoint round trip, the data-loader
    wait, GPU utilisation and scaling (the runner's ``storage``, ``checkpoint``, ``train``).

    A round trip that does not restore bit-identical state always fails; the other figures
    are judged where the profile sets a floor and shown otherwise.
    """
    storage = result.get("storage")
    if storage is None:
        # No data path on this node: only floors that were asked for are a failure.
        asked = [
            name
            for name in (
                "max_read_p99_ms",
                "min_files_per_s",
                "min_checkpoint_write_mbps",
                "min_checkpoint_restore_mbps",
                "max_data_wait_share",
                "min_gpu_util_pct",
                "min_scaling_efficiency",
            )
            if getattr(spec, name) is not None
        ]
        if asked:
            return [
                Check("storage.run", False, f"not measured (no {spec.data_path}): {asked[0]} set")
            ]
        return []
    checks: list[Check] = []
    reads = storage.get("reads") or {}
    if storage.get("error"):
        checks.append(Check("storage.run", False, str(storage["error"])))
    else:
        cache = {"o_direct": "O_DIRECT", "fadvise": "page cache dropped (fadvise)"}.get(
            str(reads.get("cache")), str(reads.get("cache"))
        )
        detail = (
            f"{reads.get('reads')} reads of {format_size(int(reads.get('min_read_bytes') or 0))}"
            f"-{format_size(int(reads.get('max_read_bytes') or 0))} by "
            f"{reads.get('workers')} workers, {cache}: "
        )
        p99 = _floor_check(
            "storage.read_p99",
            reads.get("p99_ms"),
            spec.max_read_p99_ms,
            "ms",
            at_most=True,
            what=detail + "p99 ",
        )
        checks += [p99] if p99 else []
        files = _floor_check(
            "storage.files_per_s", reads.get("files_per_s"), spec.min_files_per_s, "files/s"
        )
        checks += [files] if files else []
    checks += _checkpoint_checks(result.get("checkpoint"), spec)
    checks += _loop_checks(result.get("train"), spec)
    return checks


def _checkpoint_checks(ckpt: dict[str, Any] | None, spec: AcceptanceSpec) -> list[Check]:
    if ckpt is None:
        return [Check("checkpoint.roundtrip", False, "no checkpoint round trip was run")]
    if ckpt.get("error") and not ckpt.get("mismatched"):
        return [Check("checkpoint.roundtrip", False, str(ckpt["error"]))]
    wrong = [*(ckpt.get("mismatched") or []), *(ckpt.get("missing") or [])]
    wrong += ckpt.get("unexpected") or []
    size = f"{int(ckpt.get('bytes') or 0) / 2**20:.1f} MiB"
    ok = bool(ckpt.get("identical")) and not wrong
    checks = [
        Check(
            "checkpoint.roundtrip",
            ok,
            f"{size} in {ckpt.get('tensors')} tensors restored bit-identical in a fresh process"
            if ok
            else "restored state differs from what was written: "
            + "; ".join(
                [f"{n}: bytes differ" for n in ckpt.get("mismatched") or []]
                + [f"{n}: missing" for n in ckpt.get("missing") or []]
                + [f"{n}: not written" for n in ckpt.get("unexpected") or []]
            ),
            measured=sorted(wrong),
            floor=[],
        )
    ]
    floors = (
        ("checkpoint.write", "write_mbps", spec.min_checkpoint_write_mbps),
        ("checkpoint.restore", "restore_mbps", spec.min_checkpoint_restore_mbps),
    )
    return checks + _floor_checks(ckpt, floors, "MB/s")


def _loop_checks(train: dict[str, Any] | None, spec: AcceptanceSpec) -> list[Check]:
    floors = (spec.max_data_wait_share, spec.min_gpu_util_pct, spec.min_scaling_efficiency)
    if not train or train.get("error") or not train.get("loop"):
        reason = (train or {}).get("error") or "the training loop did not run"
        return (
            [Check("train.run", False, str(reason))] if any(f is not None for f in floors) else []
        )
    loop = train["loop"]
    checks: list[Check] = []
    wait = _floor_check(
        "train.data_wait",
        loop.get("data_wait_share"),
        spec.max_data_wait_share,
        "of step time",
        at_most=True,
        what=f"{loop.get('ranks')} ranks, {loop.get('loader_workers')} loader workers: waiting ",
    )
    checks += [wait] if wait else []
    util = loop.get("gpu_util") or {}
    per_gpu = util.get("per_gpu") or {}
    if spec.min_gpu_util_pct is not None:
        if not util.get("measured"):
            checks.append(
                Check(
                    "train.gpu_util",
                    False,
                    f"not measured: {util.get('reason') or 'no sample'}",
                    floor=spec.min_gpu_util_pct,
                    unit="%",
                )
            )
        else:
            low = {i: v for i, v in per_gpu.items() if v < spec.min_gpu_util_pct}
            checks.append(
                Check(
                    "train.gpu_util",
                    not low,
                    "; ".join(f"GPU {i} {v:.0f}%" for i, v in sorted(low.items()))
                    + f" below floor {spec.min_gpu_util_pct}%"
                    if low
                    else f"every GPU >= {spec.min_gpu_util_pct}% busy during the loop",
                    measured={i: round(v, 1) for i, v in per_gpu.items()},
                    floor=spec.min_gpu_util_pct,
                    unit="%",
                )
            )
    elif not util.get("measured"):
        # Shown, never judged: say what was (not) measured rather than print a number.
        checks.append(Check("train.gpu_util", True, f"not judged: {util.get('reason')}"))
    if spec.min_scaling_efficiency is not None:
        points = (train.get("scaling") or {}).get("points") or []
        checks.append(scaling_check("scaling.efficiency", points, spec.min_scaling_efficiency))
    return checks


def scaling_check(
    name: str, points: list[dict[str, Any]], floor: float | None, min_nodes: int = 1
) -> Check:
    """The worst scaling efficiency against 1 rank over the points of more than one rank
    that span at least ``min_nodes`` nodes, against ``floor`` (None: shown, not judged)."""
    scored = [p for p in points if p.get("ranks", 0) > 1 and int(p.get("nodes") or 1) >= min_nodes]
    if not scored:
        what = "one GPU (or rank)" if min_nodes == 1 else f"no point spans {min_nodes} nodes"
        return Check(name, True, f"{what}: nothing to scale", floor=floor)
    worst = min(scored, key=lambda p: p.get("efficiency") or 0.0)
    value = float(worst.get("efficiency") or 0.0)
    ok = floor is None or value >= floor
    where = f"{worst['ranks']} ranks" + (
        f" on {worst['nodes']} nodes" if int(worst.get("nodes") or 1) > 1 else ""
    )
    judged = (
        "not judged (no floor set)" if floor is None else f"{'>=' if ok else '<'} floor {floor}"
    )
    return Check(
        name,
        ok,
        f"{value:.2f} at {where} against 1 {judged} ("
        + ", ".join(f"{p['ranks']}: {float(p.get('efficiency') or 0):.2f}" for p in points)
        + ")",
        measured=round(value, 3),
        floor=floor,
        unit="fraction",
    )


def multi_node_scaling_check(section: dict[str, Any], floor: float | None) -> Check:
    """Scaling across nodes: the loop of a multi-node set (the runner's ``train`` section of
    rank 0), judged at the points that span more than one node."""
    train = section.get("train") or {}
    if train.get("error") or not train.get("scaling"):
        reason = train.get("error") or section.get("error") or "the ranks ran no training loop"
        return Check("multinode.scaling", floor is None, f"not measured: {reason}", floor=floor)
    points = train["scaling"].get("points") or []
    return scaling_check("multinode.scaling", points, floor, min_nodes=2)


def _topology_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """The profile's topology rules (``topology.py`` holds them) against the node's
    ``nvidia-smi topo -m``; no rules, no check."""
    rules = spec.topology
    if rules is None or not rules.has_rules:
        return []
    topo, error = topology.read_section(result.get("topology"))
    if topo is None:
        return [Check("topology.read", False, str(error))]
    return [
        Check(f"topology.{f.rule}", f.ok, f.message, measured=f.measured, floor=f.floor)
        for f in topology.judge(topo, rules)
    ]


def _dcgm_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """The node's ``dcgmi diag -j`` (``dcgm.py`` holds the parser and the rule), one check per
    plugin; no ``dcgm_diag`` in the profile, no check."""
    rule = spec.dcgm_diag
    if rule is None:
        return []
    diag, finding = dcgm.read_section(result.get("dcgm"), rule)
    findings = [finding] if diag is None and finding is not None else []
    if diag is not None:
        findings = dcgm.judge(diag, rule)
    return [
        Check(f"dcgm.{f.plugin}", f.ok, f"level {rule.level}: {f.message}", f.measured, f.floor)
        for f in findings
    ]


def _stack_check(result: dict[str, Any], expect: NodeExpectation) -> Check:
    state = result.get("state") or {}
    installed = state.get("stack_id")
    if expect.stack_id is None:
        return Check("stack_id", False, "the inventory's stack could not be resolved")
    ok = installed == expect.stack_id
    return Check(
        "stack_id",
        ok,
        f"installed {installed or f'unknown (no {nodestate.PATH})'}"
        f" {'==' if ok else '!='} inventory {expect.stack_id}",
        measured=installed,
        floor=expect.stack_id,
    )
