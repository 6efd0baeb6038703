"""The fleet report: every node of an inventory across the recorded acceptance runs.

``gpunode report`` reads the acceptance runs kept under the runs folder (``toolkit.runs``:
they are evidence, never rotated away by routine runs), and renders one self-contained HTML
page: the readiness table from each node's latest verdict, every check of that verdict (not
only the failed ones), the busbw-by-size plot of the latest run, and each node's history (its
busbw at the largest size run after run, with verdict and stack id) so a degrading node
shows before it fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolkit import runs
from toolkit.config import load_json, validate
from toolkit.report.html import PLOT_H, PLOT_W, STYLE, render_svg, value_cell

RECORD = "run.json"  # an acceptance run's record (toolkit.report.write_reports writes it)


# --- the run record, as this report reads it ------------------------------------------------
# Only the keys read here are checked; a record carries more (acceptance's run summary), kept
# as they are. Numbers are strict: "fast" is no busbw, 1.5 no size.


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Check(_Entry):
    name: str
    ok: bool
    message: str | None = None


class _Failed(_Entry):
    check: str
    message: str | None = None


class _Row(_Entry):
    size_bytes: int = Field(ge=0)
    busbw_gbps: float = Field(ge=0)


class _Floor(_Entry):
    size_bytes: int = Field(ge=0)
    min_busbw_gbps: float = Field(ge=0)


class _Node(_Entry):
    host: str
    verdict: str
    installed_stack_id: str | None = None
    busbw_at_largest_gbps: float | None = Field(default=None, ge=0)
    checks: list[_Check] = []
    failed_checks: list[_Failed] = []
    allreduce_rows: list[_Row] = []
    floors: list[_Floor] | None = None


class RunRecord(_Entry):
    """An acceptance run's ``run.json``: the keys the fleet report reads."""

    run_id: str
    started: str | None = None
    nodes: list[_Node]


def read_record(path: Path) -> dict[str, Any]:
    """One acceptance run's record, checked against :class:`RunRecord`.

    Raises:
        ConfigError: Not a regular file, too large, not strict JSON, or not a run record
            (the file, the key path and the rule are named; exit 2).
    """
    return validate(RunRecord, load_json(path, "run record"), path).model_dump()


@dataclass
class NodeHistory:
    """One node's acceptance results, oldest first (each a node summary of a run)."""

    host: str
    entries: list[dict[str, Any]] = field(default_factory=list)

    @property
    def latest(self) -> dict[str, Any] | None:
        """The most recent result."""
        return self.entries[-1] if self.entries else None


def _acceptance_summaries(runs_dir: Path) -> Iterable[dict[str, Any]]:
    for info in runs.list_runs(runs_dir):
        if info.kind not in ("accept", None):
            continue
        path = info.path / RECORD
        if os.path.lexists(path):  # a run that was cut short has no record
            yield read_record(path)


def fleet_history(runs_dir: Path, hosts: Iterable[str]) -> dict[str, NodeHistory]:
    """Per host of the inventory: its results from every recorded acceptance run.

    Raises:
        ConfigError: A recorded run's ``run.json`` is unreadable or malformed (named).
    """
    history = {host: NodeHistory(host) for host in hosts}
    for summary in sorted(_acceptance_summaries(runs_dir), key=lambda s: str(s.get("started"))):
        for node in summary["nodes"]:
            entry = history.get(str(node.get("host")))
            if entry is not None:
                entry.entries.append(
                    {**node, "run_id": summary.get("run_id"), "started": summary.get("started")}
                )
    return history


def fleet_summary(history: dict[str, NodeHistory]) -> dict[str, Any]:
    """JSON-ready data: per node, its latest verdict and its busbw history."""
    nodes = {}
    for host, node in sorted(history.items()):
        latest = node.latest
        nodes[host] = {
            "runs": len(node.entries),
            "verdict": latest["verdict"] if latest else None,
            "run_id": latest["run_id"] if latest else None,
            "when": latest["started"] if latest else None,
            "stack_id": latest.get("installed_stack_id") if latest else None,
            "busbw_at_largest_gbps": latest.get("busbw_at_largest_gbps") if latest else None,
            "failed_checks": [c["check"] for c in latest.get("failed_checks") or []]
            if latest
            else [],
            "history": [
                {
                    "run_id": e["run_id"],
                    "started": e["started"],
                    "verdict": e["verdict"],
                    "busbw_at_largest_gbps": e.get("busbw_at_largest_gbps"),
                }
                for e in node.entries
            ],
        }
    return {
        "nodes": nodes,
        "all_ready": bool(nodes) and all(n["verdict"] == "ready" for n in nodes.values()),
    }


def render_trend(points: list[tuple[str, float | None, bool]]) -> str:
    """busbw at the largest size, run after run, as inline SVG (red points: not ready)."""
    width, height, left, bottom, top_pad = PLOT_W, PLOT_H // 2 + 20, 50, 25, 10
    inner_w, inner_h = width - left - 10, height - bottom - top_pad
    values = [v for _l, v, _ok in points if v is not None]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="busbw at the largest size, run after run">',
        f'<rect x="{left}" y="{top_pad}" width="{inner_w}" height="{inner_h}" fill="none" '
        'stroke="#999"/>',
    ]
    if not values:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text>')
        return "".join(parts) + "</svg>"
    top = max(values) * 1.1 or 1.0
    step = inner_w / max(1, len(points) - 1)

    def xy(index: int, value: float) -> tuple[float, float]:
        return left + index * step, top_pad + inner_h - value / top * inner_h

    line = [xy(i, v) for i, (_l, v, _ok) in enumerate(points) if v is not None]
    parts.append(
        '<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="'
        + " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
        + '"/>'
    )
    for index, (label, value, ok) in enumerate(points):
        if value is None:
            continue
        x, y = xy(index, value)
        colour = "#1f77b4" if ok else "#d62728"
        parts.append(
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"><title>{escape(label)}: '
            f"{value:.3f} GB/s{'' if ok else ' (not ready)'}</title></circle>"
        )
    for frac in (0.0, 0.5, 1.0):
        value = top / 1.1 * frac
        parts.append(
            f'<text x="{left - 5}" y="{xy(0, value)[1] + 3:.1f}" font-size="10" '
            f'text-anchor="end">{value:.3g}</text>'
        )
    parts.append(
        f'<text x="{left + inner_w / 2}" y="{height - 5}" font-size="11" text-anchor="middle">'
        "acceptance runs, oldest first</text>"
    )
    return "".join(parts) + "</svg>"


def render_fleet_html(inventory: str, history: dict[str, NodeHistory]) -> str:
    """The fleet as one HTML page (no scripts, no external assets)."""
    summary = fleet_summary(history)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>gpunode fleet {escape(inventory)}</title><style>{STYLE}</style></head><body>",
        f"<h1>gpunode fleet report: <code>{escape(inventory)}</code></h1>",
        "<h2>Readiness (latest acceptance of each node)</h2><table><tr><th>node</th>"
        "<th>verdict</th><th>when</th><th>stack id</th><th>busbw at largest size (GB/s)</th>"
        "<th>failed checks</th><th>runs</th></tr>",
    ]
    for host, node in summary["nodes"].items():
        verdict = str(node["verdict"] or "never accepted")
        css = verdict if verdict in ("ready", "not-ready") else ""
        busbw = node["busbw_at_largest_gbps"]
        out.append(
            f'<tr><td>{escape(host)}</td><td class="{css}">{escape(verdict)}</td>'
            f"<td>{escape(str(node['when'] or '-'))}</td>"
            f"<td>{escape(str(node['stack_id'] or '-'))}</td>"
            f"<td>{'-' if busbw is None else f'{busbw:.3f}'}</td>"
            f"<td>{escape(', '.join(node['failed_checks']) or '-')}</td>"
            f"<td>{node['runs']}</td></tr>"
        )
    out.append("</table>")
    for host, node in sorted(history.items()):
        latest = node.latest
        out.append(f"<h2>{escape(host)}</h2>")
        if latest is None:
            out.append("<p>No recorded acceptance run.</p>")
            continue
        out.append(
            f"<p>Latest run <code>{escape(str(latest['run_id']))}</code>, "
            f"{escape(str(latest['started']))}.</p>"
            "<table><tr><th>check</th><th>ok</th><th>message</th><th>measured</th>"
            "<th>floor</th></tr>"
        )
        for check in latest.get("checks") or []:
            ok = bool(check.get("ok"))
            out.append(
                f"<tr><td>{escape(str(check.get('name')))}</td>"
                f'<td class="{"ready" if ok else "not-ready"}">{"yes" if ok else "no"}</td>'
                f"<td class='v'>{escape(str(check.get('message')))}</td>"
                f"<td class='v'>{value_cell(check.get('measured'))}</td>"
                f"<td class='v'>{value_cell(check.get('floor'))}</td></tr>"
            )
        out.append("</table><div class='plots'>")
        out.append(
            "<figure><figcaption>busbw by message size (latest run)</figcaption>"
            f"{render_svg(latest.get('allreduce_rows') or [], latest.get('floors'))}</figure>"
        )
        trend = [
            (str(e["run_id"]), e.get("busbw_at_largest_gbps"), e.get("verdict") == "ready")
            for e in node.entries
        ]
        out.append(
            "<figure><figcaption>busbw at the largest size, run after run</figcaption>"
            f"{render_trend(trend)}</figure></div>"
        )
        out.append(
            "<table><tr><th>run</th><th>when</th><th>verdict</th><th>stack id</th>"
            "<th>busbw (GB/s)</th></tr>"
        )
        for entry in reversed(node.entries):
            busbw = entry.get("busbw_at_largest_gbps")
            out.append(
                f"<tr><td>{escape(str(entry['run_id']))}</td>"
                f"<td>{escape(str(entry['started']))}</td>"
                f'<td class="{escape(str(entry["verdict"]))}">{escape(str(entry["verdict"]))}</td>'
                f"<td>{escape(str(entry.get('installed_stack_id') or '-'))}</td>"
                f"<td>{'-' if busbw is None else f'{busbw:.3f}'}</td></tr>"
            )
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
