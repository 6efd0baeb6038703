"""The training-shaped checks in the reports: latency as a distribution, scaling as a curve,
checkpoint and data-loader figures as values (HTML), every check in JUnit, the measurements in
run.json."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from shared_fixtures import healthy_training

from toolkit.acceptance.node_runner.storage import LATENCY_BUCKETS_MS, latency_histogram
from toolkit.acceptance.summary import training_summary
from toolkit.acceptance.train_checks import training_checks
from toolkit.lab.inventory import lab_profile
from toolkit.report import render_html, render_junit, write_reports
from toolkit.report.html import render_latency_svg, render_scaling_svg

LAB = lab_profile().acceptance


def _summary(*results: dict[str, Any]) -> dict[str, Any]:
    nodes = []
    for i, result in enumerate(results, 1):
        checks = [c.to_dict() for c in training_checks(result, LAB)]
        failed = [c for c in checks if not c["ok"]]
        nodes.append(
            {
                "host": f"node-{i}",
                "verdict": "not-ready" if failed else "ready",
                "checks": checks,
                "failed_checks": [
                    {
                        "check": c["name"],
                        "message": c["message"],
                        "measured": c["measured"],
                        "floor": c["floor"],
                    }
                    for c in failed
                ],
                "allreduce_rows": [],
                "floors": [],
                "training": training_summary(result),
            }
        )
    return {"run_id": "r1", "nodes": nodes}


def test_latency_histogram_bars_follow_the_counts() -> None:
    svg = render_latency_svg(latency_histogram([0.3] * 30 + [4.0] * 3), limit_ms=50)
    ET.fromstring(svg)
    bars = re.findall(
        r'<rect x="[^"]+" y="[^"]+" width="[^"]+" height="([^"]+)" fill="#1f77b4"', svg
    )
    heights = [float(h) for h in bars]
    assert len(heights) == len(LATENCY_BUCKETS_MS) + 1
    assert max(heights) == heights[2]  # 0.3 ms falls in the "<= 0.5" bucket, the tallest
    assert "&lt;= 0.5 ms: 30 reads" in svg and "&lt;= 5 ms: 3 reads" in svg
    assert "p99 limit 50 ms" in svg
    assert "no data" in render_latency_svg([])


def test_scaling_curve_with_ideal_line_and_efficiency() -> None:
    points = [
        {"ranks": 1, "samples_per_s": 100.0, "efficiency": 1.0},
        {"ranks": 2, "samples_per_s": 190.0, "efficiency": 0.95},
        {"ranks": 4, "samples_per_s": 200.0, "efficiency": 0.5},
    ]
    svg = render_scaling_svg(points, floor=0.8)
    ET.fromstring(svg)
    assert "linear scaling from 1 rank" in svg
    assert "4 ranks: 200.0 samples/s, efficiency 0.50" in svg
    # The point below the floor is drawn in red, the others in blue.
    assert svg.count('fill="#d62728"') == 1 and svg.count('r="4" fill="#1f77b4"') == 2
    assert "no data" in render_scaling_svg([])


def test_html_shows_each_node_passed_or_not() -> None:
    html = render_html(
        _summary(healthy_training(), healthy_training(p99_ms=205.0, latencies=[205.0] * 20))
    )
    assert "<h2>Training-shaped checks</h2>" in html and "<script" not in html
    assert html.count("read latency distribution") == 2
    assert html.count("training loop throughput against ranks") == 2
    assert "bit-identical" in html and "4.0%" in html
    assert "not measured: CPU ranks" in html
    section = html.split("<h3>node-2</h3>")[1]
    assert "<td>storage.read_p99</td><td class='not-ready'>failed</td>" in section
    assert "p99 205 ms &gt; limit 150.0 ms" in section


def test_junit_and_run_json_carry_the_new_checks(tmp_path: Path) -> None:
    data = _summary(healthy_training(), healthy_training(p99_ms=205.0, latencies=[205.0] * 20))
    root = ET.fromstring(render_junit(data))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    names = {c.get("name") for c in suites["node-1"].iter("testcase")}
    assert {"storage.read_p99", "checkpoint.roundtrip", "train.data_wait"} <= names
    failure = suites["node-2"].find("testcase[@name='storage.read_p99']/failure")
    assert failure is not None and "measured: 205.0; floor: 150.0" in (failure.text or "")
    paths = write_reports(data, tmp_path)
    recorded = json.loads(paths["json"].read_text())
    training = recorded["nodes"][0]["training"]
    assert training["reads"]["p99_ms"] == 4.0 and training["checkpoint"]["identical"] is True
    assert [p["ranks"] for p in training["scaling"]] == [1, 2]


def test_training_summary_without_storage_is_none() -> None:
    assert training_summary(None) is None
    assert training_summary({"allreduce": {}}) is None


def test_html_lists_the_all_reduce_at_each_scaling_point() -> None:
    result = healthy_training()
    result["train"]["scaling"]["points"] = [
        {"ranks": 1, "samples_per_s": 100.0, "efficiency": 1.0, "allreduce_busbw_gbps": None},
        {"ranks": 2, "samples_per_s": 190.0, "efficiency": 0.95, "allreduce_busbw_gbps": 1.5},
        {"ranks": 4, "samples_per_s": 360.0, "efficiency": 0.9, "allreduce_busbw_gbps": None},
    ]
    html = render_html(_summary(result))
    assert "<td>all-reduce busbw by ranks</td><td>2: 1.500 GB/s</td>" in html
    assert "<td>all-reduce busbw by ranks</td><td>-</td>" in render_html(
        _summary(healthy_training())
    )


def test_html_says_which_figure_is_emulated_and_which_measured() -> None:
    result = healthy_training()
    loop = result["train"]["loop"]
    loop["compute"] = {"kind": "emulated", "step_s": 0.224}
    loop["gpu_step"] = {"gemm_n": 8192, "gemms": 120, "at_floor_s": 0.2244, "measured_s": 0.17}
    html = render_html(_summary(result))
    assert (
        "<td>accelerator utilisation</td><td>96.0% (emulated compute: 0.224 s per step, "
        "the MLPerf Storage method; 1 - data-loader wait share)</td>"
    ) in html
    assert (
        "<td>GPU step</td><td>120 bf16 GEMMs of 8192: 0.224 s at the GEMM floor "
        "(computed), 0.17 s here (measured)</td>"
    ) in html
    assert "<td>GPU utilisation (measured, nvidia-smi)</td>" in html
    plain = render_html(_summary(healthy_training()))
    assert "<td>accelerator utilisation</td><td>not emulated: the steps ran the model only" in plain
    assert "<td>GPU step</td><td>-</td>" in plain
