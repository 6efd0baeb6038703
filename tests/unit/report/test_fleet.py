"""The fleet report: history across recorded acceptance runs, every check, and each node's
passport (its flags and a plot of its figures over runs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from shared_fixtures import run_cli

from toolkit.errors import ConfigError
from toolkit.lab.hardware import NodeHardware
from toolkit.records import runs
from toolkit.records.passport import passports
from toolkit.report.fleet import fleet_history, fleet_summary, render_figures, render_fleet_html
from toolkit.report.html import FLOOR_COLOUR, SERIES_COLOUR
from unit.records.test_passport import HW, OTHER, History

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=timezone.utc)


def _node(host: str, busbw: float, ok: bool) -> dict[str, Any]:
    checks = [
        {"name": "gpus.count", "ok": True, "message": "8 of 8", "measured": 8, "floor": 8},
        {
            "name": "allreduce.busbw",
            "ok": ok,
            "message": f"{busbw} GB/s",
            "measured": busbw,
            "floor": 0.5,
        },
    ]
    return {
        "host": host,
        "verdict": "ready" if ok else "not-ready",
        "installed_stack_id": "caadaeb64790",
        "checks": checks,
        "failed_checks": [] if ok else [{"check": "allreduce.busbw", "message": "slow"}],
        "allreduce_rows": [{"size_bytes": 1 << 20, "busbw_gbps": busbw}],
        "floors": [{"size_bytes": 1 << 20, "min_busbw_gbps": 0.5}],
        "busbw_at_largest_gbps": busbw,
    }


def _record(runs_dir: Path, hour: int, nodes: list[dict[str, Any]]) -> str:
    when = T0 + timedelta(hours=hour)
    run_dir = runs.start_run("accept", runs_dir, when)
    summary = {"run_id": run_dir.name, "started": when.isoformat(), "nodes": nodes}
    (run_dir / "run.json").write_text(json.dumps(summary))
    return run_dir.name


def test_history_follows_each_node_across_runs(tmp_path: Path) -> None:
    first = _record(tmp_path, 0, [_node("n1", 0.92, True), _node("n2", 0.90, True)])
    _record(tmp_path, 1, [_node("n1", 0.91, True)])
    last = _record(tmp_path, 2, [_node("n1", 0.31, False)])
    runs.start_run("status", tmp_path)  # routine runs are not acceptance results
    runs.start_run("accept", tmp_path, T0)  # cut short: no run.json yet
    history = fleet_history(tmp_path, ["n1", "n2", "n3"])
    assert [e["busbw_at_largest_gbps"] for e in history["n1"].entries] == [0.92, 0.91, 0.31]
    cards = passports(["n1", "n2", "n3"], tmp_path)
    summary = fleet_summary(history, cards)
    assert summary["nodes"]["n1"]["verdict"] == "not-ready"
    assert summary["nodes"]["n1"]["run_id"] == last
    assert summary["nodes"]["n2"]["run_id"] == first and summary["nodes"]["n2"]["runs"] == 1
    assert summary["nodes"]["n3"]["verdict"] is None
    assert summary["all_ready"] is False
    html = render_fleet_html("inventories/lab", history, cards)
    assert html.count("gpus.count") == 2  # every check, passed ones too, of n1 and n2
    assert "No recorded acceptance run." in html  # n3
    assert "(not ready)" in html and html.count("<svg") == 4  # 2 plots for n1 and n2 each


def _circles(svg: str) -> list[tuple[float, str, str]]:
    """Each point of a plot: (cy, fill, title)."""
    found = re.findall(
        r'<circle cx="[0-9.]+" cy="([0-9.]+)" r="4" fill="([^"]+)"><title>([^<]*)', svg
    )
    return [(float(cy), fill, title) for cy, fill, title in found]


def _section(html: str, host: str) -> str:
    """One node's part of the page, from its heading to the next one."""
    return html.split(f"<h2>{host}</h2>", 1)[1].split("<h2>", 1)[0]


def test_each_node_shows_its_passport_flags_and_a_plot_of_its_figures(tmp_path: Path) -> None:
    h = History(tmp_path)
    ids = [h.accept({"n1": {"hw": HW, "busbw": b}, "n2": {"hw": OTHER}}) for b in (400, 410, 395)]
    why = f"GPU 0 ({HW.gpus[0].pci_bus_id}): ecc.errors.uncorrected.volatile.total = 2"
    ids.append(h.accept({"n1": {"hw": HW, "busbw": 405.0, "p99": 2.4, "failed": [why]}}))
    ids.append(h.accept({"n1": {"hw": HW, "busbw": 280.0}, "n2": {"hw": OTHER}}))
    swapped = h.check(
        "n2", NodeHardware.for_node("H100", 8, True, ["swapped-gpu"], seed="pp", index=2)
    )
    history = fleet_history(tmp_path, ["n1", "n2"])
    cards = passports(["n1", "n2"], tmp_path)
    html = render_fleet_html("inventories/lab", history, cards)
    summary = fleet_summary(history, cards)
    assert [f["kind"] for f in summary["nodes"]["n1"]["flags"]] == ["below-baseline"]
    assert [f["kind"] for f in summary["nodes"]["n2"]["flags"]] == ["gpu-swapped"]
    # The readiness table names each node's flags; each node's part lists them whole.
    assert re.search(r"<td>n1</td>.*<td>below-baseline</td>", html)
    assert re.search(r"<td>n2</td>.*<td>gpu-swapped</td>", html)
    n1, n2 = _section(html, "n1"), _section(html, "n2")
    assert "<li><b>below-baseline</b>: busbw_gbps 280 GB/s in run " + ids[-1] in n1
    assert "<li><b>gpu-swapped</b>: GPU in slot " in n2 and f"(run <code>{swapped}</code>)" in n2
    assert "gpu-swapped" not in n1 and "below-baseline" not in n2
    # n1's figures: a panel per recorded figure (no memory bandwidth here), a point per run.
    [plot] = re.findall(r"<svg[^>]*acceptance figures.*?</svg>", n1)
    assert "busbw_gbps (GB/s, higher is better)" in plot
    assert "gemm_tflops (TFLOPS, higher is better)" in plot
    assert "storage_p99_ms (ms, lower is better)" in plot
    assert "mem_bw_gbps" not in plot
    assert "5 acceptance run(s), oldest first" in plot
    points = _circles(plot)
    busbw = [(cy, fill, t) for cy, fill, t in points if "busbw_gbps" in t]
    assert [t for _cy, _f, t in busbw] == [
        f"{run}: busbw_gbps {v} GB/s" + (" (not ready)" if run == ids[3] else "")
        for run, v in zip(ids, (400, 410, 395, 405, 280), strict=True)
    ]
    assert [f for _cy, f, _t in busbw] == [SERIES_COLOUR] * 3 + [FLOOR_COLOUR, SERIES_COLOUR]
    heights = [cy for cy, _f, _t in busbw]  # SVG y grows downwards: 280 is the lowest point
    assert heights[4] == max(heights) and heights[1] == min(heights)
    assert len([t for *_x, t in points if "gemm_tflops 700 TFLOPS" in t]) == 5
    assert [t.split(": ")[1] for *_x, t in points if "storage_p99" in t][3] == (
        "storage_p99_ms 2.4 ms (not ready)"
    )
    # n2: four acceptance runs (it sat one out) and the check that saw the swap.
    [plot2] = re.findall(r"<svg[^>]*acceptance figures.*?</svg>", n2)
    assert "4 acceptance run(s), oldest first" in plot2
    assert len([t for *_x, t in _circles(plot2) if "busbw_gbps" in t]) == 4


def test_a_node_without_figures_says_so(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.check("n1", HW)  # a passive check: identity, no figures
    card = passports(["n1"], tmp_path)["n1"]
    assert "no figures" in render_figures(card) and "<circle" not in render_figures(card)


def test_cli_writes_the_report(tmp_path: Path, monkeypatch: Any, repo_root: Path) -> None:
    from toolkit.cli import cli

    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path))
    inventory = repo_root / "inventories" / "sample"
    result = CliRunner().invoke(cli, ["report", "-i", str(inventory), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert Path(document["report"]).is_file()
    assert document["all_ready"] is False and document["nodes"]


# --- malformed run records (issue 27): exit 2 naming the file and the key -------------------------

SAMPLE_HOST = "h100-01"  # a host of inventories/sample


def _bad(change: Any) -> dict[str, Any]:
    node = _node(SAMPLE_HOST, 0.9, True)
    change(node)
    return node


@pytest.mark.parametrize(
    ("node", "named"),
    [
        ("node-1", r"nodes\[0\]: expected a mapping"),
        (_bad(lambda n: n.pop("verdict")), r"nodes\[0\]\.verdict: required key is missing"),
        (_bad(lambda n: n.update(busbw_at_largest_gbps="fast")), r"nodes\[0\]\.busbw_at_largest"),
        (
            _bad(lambda n: n["allreduce_rows"][0].update(size_bytes="1M")),
            r"nodes\[0\]\.allreduce_rows\[0\]\.size_bytes",
        ),
        (
            _bad(lambda n: n["floors"][0].update(size_bytes=-1)),
            r"nodes\[0\]\.floors\[0\]\.size_bytes: Input should be greater than or equal to 0",
        ),
        (_bad(lambda n: n.update(checks="all ok")), r"nodes\[0\]\.checks: expected a list"),
        (_bad(lambda n: n["checks"][0].pop("ok")), r"nodes\[0\]\.checks\[0\]\.ok"),
    ],
)
def test_a_malformed_node_entry_exits_2_naming_the_key(
    tmp_path: Path,
    monkeypatch: Any,
    capsys: pytest.CaptureFixture[str],
    repo_root: Path,
    node: Any,
    named: str,
) -> None:
    run_id = _record(tmp_path / "runs", 0, [node])
    with pytest.raises(ConfigError, match=named):
        fleet_history(tmp_path / "runs", [SAMPLE_HOST])
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path))
    code, out, err = run_cli(capsys, "report", "-i", str(repo_root / "inventories" / "sample"))
    assert code == 2, out + err
    assert f"{run_id}/run.json" in err and re.search(named, err), err
    assert not (tmp_path / "runs" / "fleet-report.html").exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        ('{"run_id": "r", "nodes": [], "x": NaN}', "NaN is not a JSON number"),
        ('{"run_id": "r", "nodes": [], "x": 1e999}', "out of range"),
        ("{not json", "not JSON"),
        ("[]", "expected a mapping"),
    ],
)
def test_a_run_json_that_is_no_record_exits_2(tmp_path: Path, text: str, problem: str) -> None:
    run_dir = runs.start_run("accept", tmp_path, T0)
    (run_dir / "run.json").write_text(text)
    with pytest.raises(ConfigError, match=problem) as raised:
        fleet_history(tmp_path, ["n1"])
    assert str(run_dir / "run.json") in raised.value.message


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_run_json_that_is_no_regular_file_exits_2(
    tmp_path: Path, repo_root: Path, kind: str
) -> None:
    path = runs.start_run("accept", tmp_path / "runs", T0) / "run.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "toolkit", "report", "-i", str(repo_root / "inventories/sample")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,  # a FIFO read without a writer would block for ever
        env={**os.environ, "GPUNODE_STATE_DIR": str(tmp_path)},
    )
    assert done.returncode == 2, done.stderr
    assert f"{path}: " in done.stderr and "internal error" not in done.stderr
