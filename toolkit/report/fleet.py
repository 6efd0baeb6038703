"""The fleet report: every node of an inventory across the recorded acceptance runs.

``gpunode report`` reads the acceptance runs kept under the runs folder (``toolkit.records.runs``:
they are evidence, never rotated away by routine runs), and renders one self-contained HTML
page: the readiness table from each node's latest verdict, every check of that verdict (not
only the failed ones), the busbw-by-size plot of the latest run, and each node's history (run
after run, with verdict and stack id) so a degrading node shows before it fails.

Each node's passport (``toolkit.records.passport``, the one reader of a node's identity and figures
over time) gives the rest: its flags (a GPU swapped, a failed part back, remaps rising, a
figure below the node's own baseline or the fleet's) and a plot of its figures run after run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from toolkit.records import runs
from toolkit.records.passport import FIGURES, Passport
from toolkit.report.html import (
    FLOOR_COLOUR,
    OUTCOME_CLASS,
    PLOT_W,
    SERIES_COLOUR,
    STYLE,
    render_svg,
    value_cell,
)
from toolkit.report.text import OUTCOME_WORDS, outcome_of


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
        path = info.path / runs.RECORD
        if os.path.lexists(path):  # a run that was cut short has no record
            yield runs.read_record(path)


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


def fleet_summary(
    history: dict[str, NodeHistory], passports: Mapping[str, Passport]
) -> dict[str, Any]:
    """JSON-ready data: per node, its latest verdict, its busbw history and its passport's
    flags."""
    nodes = {}
    for host, node in sorted(history.items()):
        latest = node.latest
        card = passports.get(host)
        nodes[host] = {
            "flags": [f.to_dict() for f in card.flags] if card else [],
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
    problems = {p for card in passports.values() for p in card.problems}
    return {
        "nodes": nodes,
        "all_ready": bool(nodes) and all(n["verdict"] == "ready" for n in nodes.values()),
        # Run files that could not be read (each names its run, node, file and key path).
        "problems": [p.to_dict() for p in sorted(problems, key=lambda p: (p.run_id, p.message))],
    }


# The figures plot: one panel per figure the passport records, stacked, runs along x.
PANEL_H, PANEL_GAP, AXIS_L, AXIS_B = 90, 22, 60, 22


def render_figures(card: Passport) -> str:
    """A node's acceptance figures run after run (the passport's), as inline SVG: one panel
    per figure with any value, its name, unit and range; a point per run (red: not ready),
    titled with the run id and the value."""
    accepted = [o for o in card.observations if o.kind == "accept"]
    shown = [name for name in FIGURES if any(name in o.figures for o in accepted)]
    width = PLOT_W
    inner_w = width - AXIS_L - 10
    height = max(1, len(shown)) * (PANEL_H + PANEL_GAP) + AXIS_B
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(card.host)}: acceptance figures, run after run">'
    ]
    if not shown:
        parts.append(
            f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no figures</text>'
        )
        return "".join(parts) + "</svg>"
    step = inner_w / max(1, len(accepted) - 1)
    for panel, name in enumerate(shown):
        unit, higher = FIGURES[name]
        top_y = panel * (PANEL_H + PANEL_GAP) + PANEL_GAP
        values = [o.figures[name] for o in accepted if name in o.figures]
        low, high = min(values), max(values)
        pad = (high - low) * 0.1 or abs(high) * 0.1 or 1.0
        low, high = max(0.0, low - pad), high + pad

        def y(value: float, top_y: float = top_y, low: float = low, high: float = high) -> float:
            return top_y + PANEL_H - (value - low) / (high - low) * PANEL_H

        better = "higher is better" if higher else "lower is better"
        parts.append(
            f'<text x="{AXIS_L}" y="{top_y - 6}" font-size="11" font-weight="bold">'
            f"{escape(name)} ({escape(unit)}, {better})</text>"
            f'<rect x="{AXIS_L}" y="{top_y}" width="{inner_w}" height="{PANEL_H}" fill="none" '
            'stroke="#999"/>'
        )
        for value in (low, high):
            parts.append(
                f'<text x="{AXIS_L - 5}" y="{y(value) + 3:.1f}" font-size="10" '
                f'text-anchor="end">{value:.4g}</text>'
            )
        points = [(i, o) for i, o in enumerate(accepted) if name in o.figures]
        parts.append(
            f'<polyline fill="none" stroke="{SERIES_COLOUR}" stroke-width="2" points="'
            + " ".join(f"{AXIS_L + i * step:.1f},{y(o.figures[name]):.1f}" for i, o in points)
            + '"/>'
        )
        for i, obs in points:
            value = obs.figures[name]
            colour = SERIES_COLOUR if obs.ok else FLOOR_COLOUR
            parts.append(
                f'<circle cx="{AXIS_L + i * step:.1f}" cy="{y(value):.1f}" r="4" fill="{colour}">'
                f"<title>{escape(obs.run_id)}: {name} {value:g} {escape(unit)}"
                f"{'' if obs.ok else ' (not ready)'}</title></circle>"
            )
    parts.append(
        f'<text x="{AXIS_L + inner_w / 2}" y="{height - 5}" font-size="11" '
        f'text-anchor="middle">{len(accepted)} acceptance run(s), oldest first</text>'
    )
    return "".join(parts) + "</svg>"


def _flags_html(card: Passport | None) -> str:
    if card is None or not card.flags:
        return "<p>Passport: no flags.</p>"
    items = "".join(
        f"<li><b>{escape(f.kind)}</b>: {escape(f.message)} "
        f"(run <code>{escape(f.run_id)}</code>)</li>"
        for f in card.flags
    )
    return f"<p>Passport flags:</p><ul class='flags'>{items}</ul>"


def render_fleet_html(
    inventory: str, history: dict[str, NodeHistory], passports: Mapping[str, Passport]
) -> str:
    """The fleet as one HTML page (no scripts, no external assets)."""
    summary = fleet_summary(history, passports)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>gpunode fleet {escape(inventory)}</title><style>{STYLE}</style></head><body>",
        f"<h1>gpunode fleet report: <code>{escape(inventory)}</code></h1>",
        "<h2>Readiness (latest acceptance of each node)</h2><table><tr><th>node</th>"
        "<th>verdict</th><th>when</th><th>stack id</th><th>busbw at largest size (GB/s)</th>"
        "<th>failed checks</th><th>passport flags</th><th>runs</th></tr>",
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
            f"<td>{escape(', '.join(sorted({f['kind'] for f in node['flags']})) or '-')}</td>"
            f"<td>{node['runs']}</td></tr>"
        )
    out.append("</table>")
    if summary["problems"]:
        items = "".join(
            f"<li>run <code>{escape(str(p['run_id']))}</code>: {escape(p['message'])}</li>"
            for p in summary["problems"]
        )
        out.append(f"<h2>Run files that could not be read</h2><ul class='flags'>{items}</ul>")
    for host, node in sorted(history.items()):
        latest = node.latest
        out.append(f"<h2>{escape(host)}</h2>")
        out.append(_flags_html(passports.get(host)))
        if latest is None:
            out.append("<p>No recorded acceptance run.</p>")
            continue
        out.append(
            f"<p>Latest run <code>{escape(str(latest['run_id']))}</code>, "
            f"{escape(str(latest['started']))}.</p>"
            "<table><tr><th>check</th><th>outcome</th><th>message</th><th>measured</th>"
            "<th>floor</th></tr>"
        )
        for check in latest.get("checks") or []:
            outcome = outcome_of(check)
            out.append(
                f"<tr><td>{escape(str(check.get('name')))}</td>"
                f'<td class="{OUTCOME_CLASS[outcome]}">{OUTCOME_WORDS[outcome]}</td>'
                f"<td class='v'>{escape(str(check.get('message')))}</td>"
                f"<td class='v'>{value_cell(check.get('measured'))}</td>"
                f"<td class='v'>{value_cell(check.get('floor'))}</td></tr>"
            )
        out.append("</table><div class='plots'>")
        out.append(
            "<figure><figcaption>busbw by message size (latest run)</figcaption>"
            f"{render_svg(latest.get('allreduce_rows') or [], latest.get('floors'))}</figure>"
        )
        card = passports.get(host)
        if card is not None:
            out.append(
                "<figure><figcaption>figures, run after run (passport)</figcaption>"
                f"{render_figures(card)}</figure>"
            )
        out.append("</div>")
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
