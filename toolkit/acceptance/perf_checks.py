"""Checks of a node's performance and fabric: the all-reduce (correctness and busbw floors,
nccl-tests output read by ``nccltests``), the NCCL transports, per-GPU GEMM, memory and
host-to-device floors, the topology rules and DCGM's diagnostic."""

from __future__ import annotations

from typing import Any

from toolkit.acceptance import dcgm, nccllog, topology
from toolkit.acceptance.check import Check, not_measured, per_gpu
from toolkit.acceptance.nccltests import NotNcclTestsOutput, parse_text
from toolkit.profile.floors import AcceptanceSpec, BusbwFloor, TransportSpec, format_size


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
    rules: TransportSpec | None,
    prefix: str = "allreduce",
    *,
    across_nodes: bool = False,
) -> list[Check]:
    """The profile's transport rules (``nccllog.py`` holds them) against the NCCL log of one
    all-reduce: a rule the log cannot answer, or a run without a log, is not judged; a log
    under a profile without rules is shown. No rules and no log: no check.

    ``across_nodes``: the all-reduce spanned nodes, so the fabric rules apply too; a single
    node's run is held to the others only.
    """
    summary = nccllog.read_section(section)
    name = f"{prefix}.transport"
    judged = rules is not None and (rules.has_rules if across_nodes else rules.has_node_rules)
    if summary is None:
        if not judged:
            return []
        engine = (section or {}).get("engine") or "no all-reduce"
        why = f"the all-reduce ({engine}) left no NCCL log"
        return [not_measured(name, why, f"not judged: {why}")]
    shown = summary.to_dict()
    if rules is None or not judged:
        return [
            not_measured(
                name,
                "the profile sets no transport rule",
                f"{summary.describe()} (shown, not judged)",
                measured=shown,
            )
        ]
    checks = [Check(name, True, summary.describe(), measured=shown)]
    for finding in nccllog.judge(summary, rules, across_nodes=across_nodes):
        rule = getattr(rules, finding.rule)
        where = f"profile rule transport.{finding.rule}: {rule}"
        measured = shown.get(
            {"network": "network_kind", "nvls": "nvls_channels"}.get(finding.rule, finding.rule)
        )
        if finding.ok is None:
            checks.append(
                not_measured(
                    f"{name}.{finding.rule}",
                    f"the NCCL log cannot tell: {finding.message}",
                    f"not judged: {finding.message} ({where})",
                    measured=measured,
                    floor=rule,
                )
            )
            continue
        checks.append(
            Check(
                f"{name}.{finding.rule}",
                finding.ok,
                f"{finding.message} ({where})",
                measured=measured,
                floor=rule,
            )
        )
    return checks


def gpu_perf_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """Per-GPU GEMM, memory and host-to-device floors, and their stragglers."""
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
    checks += per_gpu("gemm", perf.get("gemm") or [], "tflops", spec.min_gemm_tflops, "TFLOPS", tol)
    checks += per_gpu("mem_bw", perf.get("mem_bw") or [], "gbps", spec.min_mem_bw_gbps, "GB/s", tol)
    checks += per_gpu("h2d", perf.get("h2d") or [], "gbps", spec.min_h2d_gbps, "GB/s", tol)
    return checks


def topology_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """The profile's topology rules (``topology.py`` holds them) against the node's
    ``nvidia-smi topo -m``; no rules, no check."""
    rules = spec.topology
    if rules is None or not rules.has_rules:
        return []
    section = result.get("topology")
    topo, error = topology.read_section(section)
    if topo is None:
        return [Check("topology.read", False, str(error))]
    facts = topology.nic_facts(section.get("rdma") if isinstance(section, dict) else None)
    return [
        Check(f"topology.{f.rule}", f.ok, f.message, measured=f.measured, floor=f.floor)
        for f in topology.judge(topo, rules, facts)
    ]


def dcgm_checks(result: dict[str, Any], spec: AcceptanceSpec) -> list[Check]:
    """The node's ``dcgmi diag -j`` (``dcgm.py`` holds the parser and the rule), one check per
    plugin; a plugin that ran on no GPU, or dcgmi missing where the profile does not require
    it, is not measured (a profile that needs it says so in ``require_measured``); no
    ``dcgm_diag`` in the profile, no check."""
    rule = spec.dcgm_diag
    if rule is None:
        return []
    diag, finding = dcgm.read_section(result.get("dcgm"), rule)
    findings = [finding] if diag is None and finding is not None else []
    if diag is not None:
        findings = dcgm.judge(diag, rule)
    checks = []
    for f in findings:
        if f.ok is None:
            # Not measured, never passed: the profile's required coverage decides readiness.
            checks.append(
                not_measured(
                    f"dcgm.{f.plugin}",
                    f.message.removeprefix(f"{f.plugin}: ").removeprefix("not measured: "),
                    f"level {rule.level}: {f.message}",
                    measured=f.measured,
                    floor=f.floor,
                )
            )
            continue
        # DCGM's severity of what it found decides the class (dcgm.advice); else the name.
        advice = dcgm.advice(f)
        checks.append(
            Check(
                f"dcgm.{f.plugin}",
                f.ok is True,
                f"level {rule.level}: {f.message}",
                measured=f.measured,
                floor=f.floor,
                failure_class=advice.failure_class if advice else None,
                action=advice.action if advice else None,
                action_source=advice.source if advice else None,
            )
        )
    return checks
