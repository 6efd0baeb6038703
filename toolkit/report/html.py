"""The HTML report: a table of nodes, busbw against message size per node (inline SVG), the
topology matrix per node, and every failed check. One self-contained file: no scripts, no
external assets."""

from __future__ import annotations

import math
from html import escape
from typing import Any

from toolkit.acceptance.topology import LEGEND
from toolkit.report.text import (
    OUTCOME_WORDS,
    counts_text,
    outcome_counts,
    outcome_of,
    value_lines,
)

PLOT_W, PLOT_H = 520, 260
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 60, 20, 20, 40

# The colour of every plot's data series, and of the floors a series is held against.
SERIES_COLOUR = "#1f77b4"
FLOOR_COLOUR = "#d62728"
# The background of each link kind in the topology matrix: nearest green, farthest red (the
# legend under the matrices repeats nvidia-smi's own meanings); X is the device itself.
LINK_COLOURS = {
    "NV": "#9fd89f",
    "PIX": "#cdeccd",
    "PXB": "#eef5b8",
    "PHB": "#fbe3a6",
    "NODE": "#f9c98d",
    "SYS": "#f29a8e",
    "X": "#dddddd",
}
FAIL_OUTLINE = "#dd0000"


def value_cell(value: Any) -> str:
    """A measured value or floor as escaped text, one line per record (never a repr)."""
    return "<br>".join(escape(line) for line in value_lines(value))


STYLE = (
    """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0;max-width:100%}
td,th{border:1px solid #ccc;padding:4px 8px}
td.v,code{overflow-wrap:anywhere}
th{background:#f3f3f3}.ready{color:#116611;font-weight:bold}
.not-ready{color:#aa1111;font-weight:bold}.not-measured{color:#8a5a00;font-style:italic}.plots{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0}figcaption{font-weight:bold}
table.topo td{text-align:center;font-family:monospace;padding:2px 5px}
"""
    + f"table.topo td.fail{{outline:3px solid {FAIL_OUTLINE};outline-offset:-3px;"
    + "font-weight:bold}\n"
    + "".join(f".k-{kind.lower()}{{background:{colour}}}" for kind, colour in LINK_COLOURS.items())
    + "\n"
)


def _kind_class(link: str) -> str:
    """The colour class of a matrix cell (``X``, ``NV#`` or a PCIe kind)."""
    kind = "NV" if link.startswith("NV") else link
    return f"k-{kind.lower()}" if kind in LINK_COLOURS else ""


def _size_label(size: int) -> str:
    for unit, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= factor:
            value = size / factor
            return f"{value:g}{unit}"
    return f"{size}B"


def render_svg(rows: list[dict[str, Any]], floors: list[dict[str, Any]] | None = None) -> str:
    """A line plot of busbw (GB/s) against message size (log2 axis) as inline SVG.

    Args:
        rows: ``{"size_bytes", "busbw_gbps"}`` per size.
        floors: ``{"size_bytes", "min_busbw_gbps"}`` markers to draw.

    Returns:
        The ``<svg>`` element (an empty-plot note when there are no rows).
    """
    points = sorted(
        (int(r["size_bytes"]), float(r["busbw_gbps"])) for r in rows if int(r["size_bytes"]) > 0
    )
    inner_w = PLOT_W - MARGIN_L - MARGIN_R
    inner_h = PLOT_H - MARGIN_T - MARGIN_B
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_W}" height="{PLOT_H}" '
        f'role="img" aria-label="busbw against message size">',
        f'<rect x="{MARGIN_L}" y="{MARGIN_T}" width="{inner_w}" height="{inner_h}" '
        'fill="none" stroke="#999"/>',
    ]
    if not points:
        parts.append(f'<text x="{PLOT_W / 2}" y="{PLOT_H / 2}" text-anchor="middle">no data</text>')
        return "".join(parts) + "</svg>"
    floor_points = [
        (int(f["size_bytes"]), float(f["min_busbw_gbps"])) for f in floors or [] if f["size_bytes"]
    ]
    lo = math.log2(min(p[0] for p in points + floor_points))
    hi = math.log2(max(p[0] for p in points + floor_points))
    top = max([p[1] for p in points + floor_points] + [1e-9]) * 1.1

    def x(size: int) -> float:
        span = hi - lo or 1.0
        return MARGIN_L + (math.log2(size) - lo) / span * inner_w

    def y(value: float) -> float:
        return MARGIN_T + inner_h - value / top * inner_h

    path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
    parts.append(
        f'<polyline fill="none" stroke="{SERIES_COLOUR}" stroke-width="2" points="{path}"/>'
    )
    for s, v in points:
        parts.append(
            f'<circle cx="{x(s):.1f}" cy="{y(v):.1f}" r="3" fill="{SERIES_COLOUR}">'
            f"<title>{_size_label(s)}: {v:.3f} GB/s</title></circle>"
        )
    for s, v in floor_points:
        parts.append(
            f'<line x1="{x(s) - 8:.1f}" x2="{x(s) + 8:.1f}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            f'stroke="{FLOOR_COLOUR}" stroke-width="3"><title>floor {v:g} GB/s at {_size_label(s)}'
            "</title></line>"
        )
    for s, _v in points[:: max(1, len(points) // 6)]:
        parts.append(
            f'<text x="{x(s):.1f}" y="{PLOT_H - MARGIN_B + 15}" font-size="10" '
            f'text-anchor="middle">{_size_label(s)}</text>'
        )
    for frac in (0.0, 0.5, 1.0):
        value = top / 1.1 * frac
        parts.append(
            f'<text x="{MARGIN_L - 5}" y="{y(value) + 3:.1f}" font-size="10" '
            f'text-anchor="end">{value:.3g}</text>'
        )
    parts.append(
        f'<text x="{PLOT_W / 2}" y="{PLOT_H - 5}" font-size="11" text-anchor="middle">'
        "message size (bytes)</text>"
        f'<text x="12" y="{PLOT_H / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {PLOT_H / 2})">busbw (GB/s)</text>'
    )
    return "".join(parts) + "</svg>"


def _axes(x_label: str, y_label: str, y_top: float) -> list[str]:
    """The frame, the axis labels and three y ticks of a plot."""
    inner_h = PLOT_H - MARGIN_T - MARGIN_B
    parts = [
        f'<rect x="{MARGIN_L}" y="{MARGIN_T}" width="{PLOT_W - MARGIN_L - MARGIN_R}" '
        f'height="{inner_h}" fill="none" stroke="#999"/>',
        f'<text x="{PLOT_W / 2}" y="{PLOT_H - 5}" font-size="11" text-anchor="middle">'
        f"{escape(x_label)}</text>",
        f'<text x="12" y="{PLOT_H / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {PLOT_H / 2})">{escape(y_label)}</text>',
    ]
    for frac in (0.0, 0.5, 1.0):
        y = MARGIN_T + inner_h - frac * inner_h
        parts.append(
            f'<text x="{MARGIN_L - 5}" y="{y + 3:.1f}" font-size="10" text-anchor="end">'
            f"{y_top * frac:.3g}</text>"
        )
    return parts


def render_latency_svg(histogram: list[dict[str, Any]], limit_ms: float | None = None) -> str:
    """The read latency distribution as bars per bucket (counts), the p99 limit marked.

    Args:
        histogram: ``{"le_ms", "count"}`` per bucket, the last one's bound None (the rest).
        limit_ms: The profile's p99 limit, drawn on the bucket it falls in.
    """
    label = "read latency distribution (count per bucket)"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_W}" height="{PLOT_H}" '
        f'role="img" aria-label="{label}">'
    ]
    if not histogram or not any(int(b.get("count") or 0) for b in histogram):
        parts += _axes("read latency (ms)", "reads", 1.0)
        parts.append(f'<text x="{PLOT_W / 2}" y="{PLOT_H / 2}" text-anchor="middle">no data</text>')
        return "".join(parts) + "</svg>"
    top = max(int(b.get("count") or 0) for b in histogram)
    parts += _axes("read latency (ms, upper bound of each bucket)", "reads", float(top))
    inner_w = PLOT_W - MARGIN_L - MARGIN_R
    inner_h = PLOT_H - MARGIN_T - MARGIN_B
    width = inner_w / len(histogram)
    lower = 0.0
    for i, bucket in enumerate(histogram):
        count = int(bucket.get("count") or 0)
        bound = bucket.get("le_ms")
        name = f"<= {bound:g} ms" if bound is not None else f"> {lower:g} ms"
        height = count / top * inner_h
        x = MARGIN_L + i * width
        parts.append(
            f'<rect x="{x + 1:.1f}" y="{MARGIN_T + inner_h - height:.1f}" '
            f'width="{width - 2:.1f}" height="{height:.1f}" fill="{SERIES_COLOUR}">'
            f"<title>{escape(name)}: {count} reads</title></rect>"
            f'<text x="{x + width / 2:.1f}" y="{PLOT_H - MARGIN_B + 14}" font-size="9" '
            f'text-anchor="middle">{escape(f"{bound:g}" if bound is not None else "more")}</text>'
        )
        if limit_ms is not None and lower < limit_ms <= (bound if bound is not None else 1e18):
            parts.append(
                f'<line x1="{x + width / 2:.1f}" x2="{x + width / 2:.1f}" y1="{MARGIN_T}" '
                f'y2="{MARGIN_T + inner_h}" stroke="{FLOOR_COLOUR}" stroke-width="2" '
                f'stroke-dasharray="4 3"><title>p99 limit {limit_ms:g} ms</title></line>'
            )
        lower = float(bound) if bound is not None else lower
    return "".join(parts) + "</svg>"


def render_scaling_svg(
    points: list[dict[str, Any]], floor: float | None = None, min_nodes: int = 1
) -> str:
    """Scaling as a curve: samples per second at 1, 2, 4 ... ranks against ideal linear
    scaling from 1 rank, each point labelled with its efficiency; a point the floor judges
    (more than one rank, at least ``min_nodes`` nodes) below it is drawn in the floor's
    colour."""
    label = "training loop throughput against ranks"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_W}" height="{PLOT_H}" '
        f'role="img" aria-label="{label}">'
    ]
    measured = [
        (int(p["ranks"]), float(p["samples_per_s"])) for p in points if p.get("samples_per_s")
    ]
    if not measured:
        parts += _axes("GPUs (ranks)", "samples/s", 1.0)
        parts.append(f'<text x="{PLOT_W / 2}" y="{PLOT_H / 2}" text-anchor="middle">no data</text>')
        return "".join(parts) + "</svg>"
    base = measured[0][1] / measured[0][0]
    most = max(r for r, _ in measured)
    top = max([v for _, v in measured] + [base * most]) * 1.1
    parts += _axes("GPUs (ranks)", "samples/s", top)
    inner_w = PLOT_W - MARGIN_L - MARGIN_R
    inner_h = PLOT_H - MARGIN_T - MARGIN_B

    def x(ranks: int) -> float:
        span = math.log2(most) if most > 1 else 1.0
        return (
            MARGIN_L + (math.log2(ranks) / span) * inner_w if most > 1 else MARGIN_L + inner_w / 2
        )

    def y(value: float) -> float:
        return MARGIN_T + inner_h - value / top * inner_h

    ideal = " ".join(f"{x(r):.1f},{y(base * r):.1f}" for r, _ in measured)
    parts.append(
        f'<polyline fill="none" stroke="#999" stroke-dasharray="5 4" points="{ideal}">'
        "<title>linear scaling from 1 rank</title></polyline>"
    )
    line = " ".join(f"{x(r):.1f},{y(v):.1f}" for r, v in measured)
    parts.append(
        f'<polyline fill="none" stroke="{SERIES_COLOUR}" stroke-width="2" points="{line}"/>'
    )
    by_ranks = {int(p["ranks"]): p for p in points}
    for r, v in measured:
        eff = by_ranks[r].get("efficiency")
        nodes = int(by_ranks[r].get("nodes") or 1)
        low = floor is not None and eff is not None and r > 1 and nodes >= min_nodes and eff < floor
        color = FLOOR_COLOUR if low else SERIES_COLOUR
        where = f"{r} ranks" + (f" on {nodes} nodes" if nodes > 1 else "")
        parts.append(
            f'<circle cx="{x(r):.1f}" cy="{y(v):.1f}" r="4" fill="{color}">'
            f"<title>{where}: {v:.1f} samples/s, efficiency "
            f"{'-' if eff is None else f'{eff:.2f}'}</title></circle>"
            f'<text x="{x(r):.1f}" y="{PLOT_H - MARGIN_B + 15}" font-size="10" '
            f'text-anchor="middle">{r}</text>'
            f'<text x="{x(r):.1f}" y="{y(v) - 8:.1f}" font-size="10" text-anchor="middle">'
            f"{'' if eff is None else f'{eff:.0%}'}</text>"
        )
    return "".join(parts) + "</svg>"


def _number(value: Any, fmt: str = ".3g", unit: str = "") -> str:
    return "-" if value is None else f"{value:{fmt}}{unit}"


def _training_section(summary: dict[str, Any]) -> list[str]:
    """Per node: read latency as a distribution, scaling as a curve, checkpoint round trip
    and data-loader figures as values, with each check's outcome."""
    out = ["<h2>Training-shaped checks</h2>"]
    for node in summary["nodes"]:
        training = node.get("training")
        out.append(f"<h3>{escape(node['host'])}</h3>")
        if not training:
            out.append("<p>Not measured (no data path, or the runner gave no result).</p>")
            continue
        checks = {
            c["name"]: c
            for c in node.get("checks") or []
            if str(c["name"]).split(".")[0] in ("storage", "checkpoint", "train", "scaling")
        }
        reads = training.get("reads") or {}
        ckpt = training.get("checkpoint") or {}
        loop = training.get("loop") or {}
        util = (loop.get("gpu_util") or {}) if loop else {}
        p99 = checks.get("storage.read_p99") or {}
        scaling = checks.get("scaling.efficiency") or {}
        out.append(
            "<div class='plots'><figure><figcaption>read latency, "
            f"{escape(str(reads.get('reads')))} reads by {escape(str(reads.get('workers')))} "
            f"workers ({escape(str(reads.get('cache')))})</figcaption>"
            f"{render_latency_svg(reads.get('histogram') or [], p99.get('floor'))}</figure>"
            "<figure><figcaption>scaling against 1 rank</figcaption>"
            f"{render_scaling_svg(training.get('scaling') or [], scaling.get('floor'))}"
            "</figure></div>"
        )
        util_text = (
            ", ".join(f"GPU {i}: {v:.0f}%" for i, v in sorted((util.get("per_gpu") or {}).items()))
            if util.get("measured")
            else f"not measured: {util.get('reason') or '-'}"
        )
        # Which figure is emulated and which measured (issue 23): the loop's compute is a
        # sleep of the profile's figure (MLPerf Storage's method), the GPU step's time at the
        # floor is computed from its FLOPs, its time here and the utilisation are measured.
        compute = loop.get("compute") or {}
        wait = loop.get("data_wait_share")
        accel_text = (
            f"{_number(1 - wait, '.1%')} (emulated compute: {_number(compute.get('step_s'))} s "
            "per step, the MLPerf Storage method; 1 - data-loader wait share)"
            if compute.get("kind") == "emulated" and isinstance(wait, int | float)
            else "not emulated: the steps ran the model only"
        )
        step = loop.get("gpu_step") or {}
        step_text = (
            f"{step.get('gemms')} bf16 GEMMs of {step.get('gemm_n')}: "
            f"{_number(step.get('at_floor_s'))} s at the GEMM floor (computed), "
            f"{_number(step.get('measured_s'))} s here (measured)"
            if step
            else "-"
        )
        rows = [
            (
                "read latency p50 / p99",
                f"{_number(reads.get('p50_ms'))} / {_number(reads.get('p99_ms'))} ms",
            ),
            ("files per second", _number(reads.get("files_per_s"), ".0f")),
            (
                "checkpoint round trip",
                "bit-identical"
                if ckpt.get("identical")
                else f"NOT identical {ckpt.get('error') or ''}",
            ),
            (
                "checkpoint write",
                f"{_number(ckpt.get('write_s'))} s, "
                f"{_number(ckpt.get('write_mbps'), '.0f')} MB/s "
                f"({_number(ckpt.get('bytes'), 'd')} bytes)",
            ),
            (
                "checkpoint restore (fresh process)",
                f"{_number(ckpt.get('restore_s'))} s, "
                f"{_number(ckpt.get('restore_mbps'), '.0f')} MB/s",
            ),
            ("data-loader wait share", _number(loop.get("data_wait_share"), ".1%")),
            (
                "loop throughput",
                f"{_number(loop.get('samples_per_s'), '.1f')} samples/s on "
                f"{escape(str(loop.get('ranks')))} {escape(str(loop.get('device')))} ranks",
            ),
            ("accelerator utilisation", accel_text),
            ("GPU utilisation (measured, nvidia-smi)", util_text),
            ("GPU step", step_text),
            (
                "all-reduce busbw by ranks",
                ", ".join(
                    f"{p['ranks']}: {p['allreduce_busbw_gbps']:.3f} GB/s"
                    for p in training.get("scaling") or []
                    if p.get("allreduce_busbw_gbps") is not None
                )
                or "-",
            ),
        ]
        out.append("<table><tr><th>measure</th><th>value</th></tr>")
        out += [f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows]
        out.append("</table><table><tr><th>check</th><th>result</th><th>message</th></tr>")
        for name, check in sorted(checks.items()):
            outcome = outcome_of(check)
            out.append(
                f"<tr><td>{escape(name)}</td><td class='{OUTCOME_CLASS[outcome]}'>"
                f"{OUTCOME_WORDS[outcome]}</td>"
                f"<td>{escape(str(check['message']))}</td></tr>"
            )
        out.append("</table>")
    return out


# A check's outcome as the report's cell class: not measured has its own, never green.
OUTCOME_CLASS = {"passed": "ready", "failed": "not-ready", "not_measured": "not-measured"}


def _not_measured_section(summary: dict[str, Any]) -> list[str]:
    """Every check that was not measured (skipped, not judged, not covered), per node, with
    why: what the verdict does not prove."""
    out = ["<h2>Not measured</h2>"]
    for node in summary["nodes"]:
        checks = [c for c in node.get("checks") or [] if outcome_of(c) == "not_measured"]
        if not checks:
            continue
        out.append(
            f"<h3>{escape(node['host'])}</h3><table><tr><th>check</th><th>outcome</th>"
            "<th>reason</th><th>message</th></tr>"
        )
        out += [
            f"<tr><td>{escape(str(c['name']))}</td><td class='not-measured'>not measured</td>"
            f"<td class='v'>{escape(str(c.get('reason') or '-'))}</td>"
            f"<td class='v'>{escape(str(c['message']))}</td></tr>"
            for c in checks
        ]
        out.append("</table>")
    if len(out) == 1:
        out.append("<p>None: every check of every node was measured.</p>")
    return out


def _multinode_section(multinode: dict[str, Any]) -> list[str]:
    """Every set of nodes tested together (ring, pairs, re-pairs; or the adaptive plan's
    screens, bisections and confirmations by round): its outcome, the scaling of the training
    loop across its nodes, and that scaling as a curve; then the bad links and the sets that
    failed only once."""
    sets = ([multinode["ring"]] if multinode.get("ring") else []) + multinode.get("pairs", [])
    sets += multinode.get("repairs", [])
    if multinode.get("plan") == "adaptive":
        sets.sort(key=lambda item: item.get("round") or 0)
    out = [
        f"<h2>Multi-node</h2><p>plan: {escape(str(multinode.get('plan') or 'pairs'))}, "
        f"{len(sets)} sets in {escape(str(multinode.get('rounds') or len(sets)))} rounds</p>"
        "<table><tr><th>round</th><th>stage</th><th>set</th><th>ok</th>"
        "<th>scaling across nodes</th><th>error</th></tr>"
    ]
    figures = []
    for item in sets:
        hosts = " + ".join(item["hosts"])
        scaling: dict[str, Any] = next(
            (c for c in item.get("checks") or [] if c["name"] == "multinode.scaling"), {}
        )
        out.append(
            f"<tr><td>{escape(str(item.get('round') or '-'))}</td>"
            f"<td>{escape(str(item.get('stage') or '-'))}</td>"
            f"<td>{escape(hosts)}</td><td>{item['ok']}</td>"
            f"<td>{escape(str(scaling.get('message') or '-'))}</td>"
            f"<td>{escape(str(item.get('error') or ''))}</td></tr>"
        )
        if item.get("scaling"):
            figures.append(
                f"<figure><figcaption>scaling across {escape(hosts)}</figcaption>"
                f"{render_scaling_svg(item['scaling'], scaling.get('floor'), min_nodes=2)}"
                "</figure>"
            )
    out.append("</table>")
    for link in multinode.get("links") or []:
        reasons = "; ".join(str(c["message"]) for c in link.get("checks") or [])
        out.append(
            f"<p class='not-ready'>bad link {escape(' - '.join(link['hosts']))} (neither node "
            f"blamed): {escape(reasons)}</p>"
        )
    for members in multinode.get("transient") or []:
        out.append(
            f"<p>failed once, passed when run again (nobody blamed): "
            f"{escape(' + '.join(members))}</p>"
        )
    for members in multinode.get("unresolved") or []:
        out.append(
            f"<p class='not-ready'>failed twice, but no pair of its nodes fails: "
            f"{escape(' + '.join(members))}</p>"
        )
    if figures:
        out.append(f"<div class='plots'>{''.join(figures)}</div>")
    return out


def _transport_section(summary: dict[str, Any]) -> list[str]:
    """What each node's all-reduce ran over, from its NCCL log (none: no section)."""
    nodes = [n for n in summary["nodes"] if n.get("transport")]
    if not nodes:
        return []
    out = [
        "<h2>Transport (NCCL log)</h2><table><tr><th>node</th><th>NCCL</th><th>network</th>"
        "<th>GPUDirect RDMA</th><th>NVLS</th><th>between local GPUs</th><th>check</th></tr>"
    ]
    for node in nodes:
        t = node["transport"]
        net = t.get("network_kind")
        over = ", ".join(sorted(k for k in t.get("connections") or {} if k.startswith("NET/"))[:3])
        over = over or t.get("network")
        network = "-" if net is None else f"{net} ({over})" if over else str(net)
        nvls = t.get("nvls_channels")
        nvls_text = (
            f"{nvls} channels"
            if nvls is not None
            else {True: "multicast available", False: "not available", None: "-"}[
                t.get("nvls_multicast")
            ]
        )
        checks = [
            c
            for c in node.get("checks") or []
            if c["name"].startswith("allreduce.transport.") and not c["ok"]
        ]
        verdict = "; ".join(f"{c['name']}: {c['message']}" for c in checks) or "passed"
        out.append(
            f"<tr><td>{escape(node['host'])}</td><td>{escape(str(t.get('version') or '-'))}</td>"
            f"<td>{escape(network)}</td><td>{value_cell(t.get('gpudirect_rdma'))}</td>"
            f"<td>{escape(nvls_text)}</td><td class='v'>{value_cell(t.get('local_transports'))}"
            f"</td><td class='v'>{escape(verdict)}</td></tr>"
        )
    out.append("</table>")
    return out


def render_topology(topo: dict[str, Any]) -> str:
    """One node's ``nvidia-smi topo -m`` as a coloured table; pairs that broke a rule are
    outlined in red (both cells of the pair).

    Args:
        topo: The node summary's ``topology`` (``toolkit.acceptance.topology.report``).

    Returns:
        The ``<table>`` (or a note saying why there is no matrix).
    """
    if topo.get("error"):
        return f"<p class='not-ready'>{escape(str(topo['error']))}</p>"
    devices = topo.get("devices") or []
    labels = [str(d["label"]) for d in devices]
    failing = {tuple(p) for p in topo.get("failing") or []}
    failing |= {(b, a) for a, b in failing}
    out = ["<table class='topo'><tr><th></th>"]
    out += [f"<th>{escape(label)}</th>" for label in labels]
    out.append("<th>CPU affinity</th><th>NUMA</th></tr>")
    for device, row in zip(devices, topo.get("matrix") or [], strict=False):
        label = str(device["label"])
        out.append(f"<tr><th>{escape(str(device.get('shown') or label))}</th>")
        for column, link in zip(labels, row, strict=False):
            classes = _kind_class(str(link)) + (" fail" if (label, column) in failing else "")
            out.append(f"<td class='{classes.strip()}'>{escape(str(link))}</td>")
        out.append(
            f"<td>{escape(str(device.get('cpu_affinity') or '-'))}</td>"
            f"<td>{escape(str(device.get('numa_affinity') or '-'))}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def render_html(summary: dict[str, Any]) -> str:
    """The run as one HTML page.

    Args:
        summary: The run summary.

    Returns:
        The HTML document.
    """
    run_id = escape(str(summary["run_id"]))
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>gpunode acceptance {run_id}</title><style>{STYLE}</style></head><body>",
        f"<h1>gpunode acceptance, run {run_id}</h1>",
        f"<p>Started {escape(str(summary.get('started')))}, finished "
        f"{escape(str(summary.get('finished')))}; inventory "
        f"<code>{escape(str(summary.get('inventory')))}</code>; multi-node: "
        f"{'yes' if summary.get('multi_node') else 'no'}.</p>",
        "<h2>Nodes</h2><table><tr><th>node</th><th>group</th><th>verdict</th>"
        "<th>stack id (inventory / installed)</th><th>busbw at largest size (GB/s)</th>"
        "<th>checks</th><th>failed checks</th><th>not measured</th></tr>",
    ]
    for node in summary["nodes"]:
        verdict = str(node["verdict"])
        counts = outcome_counts(node.get("checks") or [])
        busbw = node.get("busbw_at_largest_gbps")
        out.append(
            f"<tr><td>{escape(node['host'])}</td><td>{escape(str(node.get('group') or ''))}</td>"
            f'<td class="{escape(verdict)}">{escape(verdict)}</td>'
            f"<td>{escape(str(node.get('stack_id')))} / "
            f"{escape(str(node.get('installed_stack_id')))}</td>"
            f"<td>{'-' if busbw is None else f'{busbw:.3f}'}</td>"
            f"<td>{escape(counts_text(counts))}</td>"
            f"<td>{len(node.get('failed_checks') or [])}</td>"
            f"<td class='not-measured'>{counts['not_measured']}</td></tr>"
        )
    out.append("</table><h2>All-reduce bus bandwidth by message size</h2><div class='plots'>")
    for node in summary["nodes"]:
        out.append(
            f"<figure><figcaption>{escape(node['host'])}</figcaption>"
            f"{render_svg(node.get('allreduce_rows') or [], node.get('floors'))}</figure>"
        )
    out.append("</div>")
    out += _training_section(summary)
    topologies = [n for n in summary["nodes"] if n.get("topology") is not None]
    if topologies:
        out.append("<h2>Topology (nvidia-smi topo -m)</h2><div class='plots'>")
        for node in topologies:
            out.append(
                f"<figure><figcaption>{escape(node['host'])} "
                f"<span class='{escape(str(node['verdict']))}'>{escape(str(node['verdict']))}"
                f"</span></figcaption>{render_topology(node['topology'])}</figure>"
            )
        out.append("</div><p>")
        out += [
            f"<span class='{_kind_class(k.replace('#', '1'))}'>{escape(k)}</span> "
            f"{escape(text)}<br>"
            for k, text in LEGEND.items()
        ]
        out.append("Outlined in red: a pair that breaks the profile's topology rules.</p>")
    out += _transport_section(summary)
    out.append("<h2>Failed checks</h2>")
    failed_any = False
    for node in summary["nodes"]:
        failed = node.get("failed_checks") or []
        if not failed:
            continue
        failed_any = True
        out.append(
            f"<h3>{escape(node['host'])}</h3><table><tr><th>check</th><th>message</th>"
            "<th>class: next action</th><th>measured</th><th>floor</th></tr>"
        )
        for check in failed:
            advice = (
                f"{check['failure_class']}: {check.get('action') or '-'}"
                if check.get("failure_class")
                else "-"
            )
            out.append(
                f"<tr><td>{escape(str(check['check']))}</td>"
                f"<td class='v'>{escape(str(check['message']))}</td>"
                f"<td title='{escape(str(check.get('action_source') or ''))}'>"
                f"{escape(advice)}</td>"
                f"<td class='v'>{value_cell(check.get('measured'))}</td>"
                f"<td class='v'>{value_cell(check.get('floor'))}</td></tr>"
            )
        out.append("</table>")
    if not failed_any:
        out.append("<p>None: no node failed a check.</p>")
    out += _not_measured_section(summary)
    multinode = summary.get("multinode")
    if multinode:
        out += _multinode_section(multinode)
    out.append("</body></html>")
    return "\n".join(out) + "\n"
