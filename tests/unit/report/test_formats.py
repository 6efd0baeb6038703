"""Reports: JSON, HTML with inline SVG, JUnit XML, the Prometheus textfile."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from toolkit.report import render_html, render_junit, render_textfile, write_reports
from toolkit.report.html import render_svg


def summary() -> dict[str, Any]:
    ok_check = {
        "name": "gpu.count",
        "ok": True,
        "message": "8 GPUs == 8 expected",
        "measured": 8,
        "floor": 8,
        "unit": None,
    }
    bad = {
        "name": "allreduce.busbw@16GiB",
        "ok": False,
        "message": "busbw 92.330 GB/s < floor 460 GB/s at 16GiB",
        "measured": 92.33,
        "floor": 460,
        "unit": "GB/s",
    }
    rows = [
        {"size_bytes": 1 << s, "busbw_gbps": b, "time_us": 1.0, "algbw_gbps": b / 1.75, "wrong": 0}
        for s, b in ((20, 19.6), (24, 72.7), (30, 92.0), (34, 92.33))
    ]
    return {
        "run_id": "20261129T160000Z-abc123",
        "inventory": "inventories/lab",
        "started": "2026-11-29T16:00:00+00:00",
        "finished": "2026-11-29T16:01:00+00:00",
        "multi_node": False,
        "multinode": None,
        "nodes": [
            {
                "host": "node-1",
                "group": "gpu",
                "verdict": "ready",
                "stack_id": "abcdef012345",
                "installed_stack_id": "abcdef012345",
                "checks": [ok_check],
                "failed_checks": [],
                "allreduce_rows": rows,
                "busbw_at_largest_gbps": 92.33,
                "floors": [{"size_bytes": 1 << 34, "min_busbw_gbps": 80}],
            },
            {
                "host": "node-<2>",
                "group": "gpu",
                "verdict": "not-ready",
                "stack_id": "abcdef012345",
                "installed_stack_id": None,
                "checks": [ok_check, bad],
                "failed_checks": [
                    {
                        "check": bad["name"],
                        "message": bad["message"],
                        "measured": 92.33,
                        "floor": 460,
                    }
                ],
                "allreduce_rows": [],
                "busbw_at_largest_gbps": None,
                "floors": [],
            },
        ],
    }


def test_html_has_table_plot_and_failures_escaped() -> None:
    html = render_html(summary())
    assert html.startswith("<!DOCTYPE html>")
    assert '<td class="ready">ready</td>' in html and '<td class="not-ready">not-ready</td>' in html
    assert "node-&lt;2&gt;" in html and "node-<2>" not in html
    assert html.count("<svg") == 2
    assert "busbw 92.330 GB/s &lt; floor 460 GB/s at 16GiB" in html
    assert "<script" not in html


def _device(label: str, name: str, cpus: str | None, numa: str | None) -> dict[str, Any]:
    kind = "GPU" if label.startswith("GPU") else "NIC"
    shown = label if name == label else f"{label} ({name})"
    return {
        "label": label,
        "kind": kind,
        "name": name,
        "shown": shown,
        "cpu_affinity": cpus,
        "numa_affinity": numa,
    }


TOPOLOGY = {
    "devices": [
        _device("GPU0", "GPU0", "0-47", "0"),
        _device("GPU1", "GPU1", "0-47", "0"),
        _device("NIC0", "mlx5_0", None, None),
    ],
    "matrix": [["X", "SYS", "PIX"], ["SYS", "X", "PIX"], ["PIX", "PIX", "X"]],
    "failing": [["GPU0", "GPU1"]],
    "error": None,
}


def test_html_draws_the_topology_of_every_node_with_failing_pairs_marked() -> None:
    data = summary()
    data["nodes"][0]["topology"] = {**TOPOLOGY, "failing": []}
    data["nodes"][1]["topology"] = TOPOLOGY
    html = render_html(data)
    assert "<h2>Topology (nvidia-smi topo -m)</h2>" in html
    assert html.count("<table class='topo'>") == 2
    assert html.count("<td class='k-sys fail'>SYS</td>") == 2  # both cells of the pair
    assert "<td class='k-sys'>SYS</td>" in html  # the ready node: coloured, not marked
    assert "<th>NIC0 (mlx5_0)</th>" in html and "<td class='k-pix'>PIX</td>" in html
    assert "Connection traversing a bonded set of # NVLinks" in html
    data["nodes"][1]["topology"] = {"error": "nvidia-smi topo -m failed: exited 9"}
    assert "nvidia-smi topo -m failed: exited 9" in render_html(data)


def test_junit_carries_the_topology_checks() -> None:
    data = summary()
    data["nodes"][1]["checks"].append(
        {
            "name": "topology.gpu_link",
            "ok": False,
            "message": "1 of 28 GPU pairs farther than NV18: GPU2-GPU6 SYS",
            "measured": [{"pair": ["GPU2", "GPU6"], "link": "SYS"}],
            "floor": "NV18",
            "unit": None,
        }
    )
    root = ET.fromstring(render_junit(data))
    failure = root.find(".//testcase[@name='topology.gpu_link']/failure")
    assert failure is not None and "GPU2-GPU6 SYS" in failure.get("message", "")
    assert "measured: pair: GPU2/GPU6, link: SYS; floor: NV18" in (failure.text or "")


def test_svg_points_follow_the_data() -> None:
    svg = render_svg(
        [{"size_bytes": 1 << 20, "busbw_gbps": 1.0}, {"size_bytes": 1 << 30, "busbw_gbps": 10.0}]
    )
    points = re.search(r'points="([^"]+)"', svg)
    assert points is not None
    (x1, y1), (x2, y2) = (tuple(map(float, p.split(","))) for p in points.group(1).split())
    assert x2 > x1 and y2 < y1  # larger size to the right, higher busbw higher up
    assert "1G: 10.000 GB/s" in svg
    ET.fromstring(svg)  # well-formed


def test_svg_without_rows_says_so() -> None:
    assert "no data" in render_svg([])


def test_svg_draws_floors() -> None:
    svg = render_svg(
        [{"size_bytes": 1 << 30, "busbw_gbps": 5.0}], [{"size_bytes": 1 << 30, "min_busbw_gbps": 8}]
    )
    assert "floor 8 GB/s at 1G" in svg


def test_junit_counts_and_failures() -> None:
    root = ET.fromstring(render_junit(summary()))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures")) == ("3", "1")
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["node-1"].get("failures") == "0"
    failure = suites["node-<2>"].find("testcase[@name='allreduce.busbw@16GiB']/failure")
    assert failure is not None and "floor 460" in failure.get("message", "")
    assert "measured: 92.33" in (failure.text or "")


def test_junit_node_without_checks_fails() -> None:
    data = summary()
    data["nodes"][0]["checks"] = []
    root = ET.fromstring(render_junit(data))
    assert root.get("failures") == "2"


def test_prometheus_textfile() -> None:
    node = summary()["nodes"][0]
    text = render_textfile(node, "run-1", 1_764_432_000.4)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [
        'gpunode_node_ready{stack_id="abcdef012345",run_id="run-1"} 1',
        'gpunode_allreduce_busbw_gbps{stack_id="abcdef012345",size="1048576"} 19.6',
        'gpunode_allreduce_busbw_gbps{stack_id="abcdef012345",size="16777216"} 72.7',
        'gpunode_allreduce_busbw_gbps{stack_id="abcdef012345",size="1073741824"} 92',
        'gpunode_allreduce_busbw_gbps{stack_id="abcdef012345",size="17179869184"} 92.33',
        'gpunode_failed_checks{stack_id="abcdef012345"} 0',
        # Every check by outcome, and each check's (issue 38: three outcomes).
        'gpunode_acceptance_checks{stack_id="abcdef012345",outcome="passed"} 1',
        'gpunode_acceptance_checks{stack_id="abcdef012345",outcome="failed"} 0',
        'gpunode_acceptance_checks{stack_id="abcdef012345",outcome="not_measured"} 0',
        'gpunode_acceptance_check{stack_id="abcdef012345",check="gpu.count",outcome="passed"} 1',
        'gpunode_acceptance_timestamp_seconds{stack_id="abcdef012345"} 1764432000',
    ]
    assert "# TYPE gpunode_node_ready gauge" in text and text.endswith("\n")


def test_prometheus_not_ready_and_label_escaping() -> None:
    node = summary()["nodes"][1]
    node["stack_id"] = 'we"ird\\id'
    text = render_textfile(node, "r", 0)
    assert 'gpunode_node_ready{stack_id="we\\"ird\\\\id",run_id="r"} 0' in text
    assert 'gpunode_failed_checks{stack_id="we\\"ird\\\\id"} 1' in text


def test_write_reports(tmp_path: Path) -> None:
    paths = write_reports(summary(), tmp_path / "run")
    assert json.loads(paths["json"].read_text())["run_id"] == "20261129T160000Z-abc123"
    assert paths["html"].read_text().count("<svg") == 2
    ET.parse(paths["junit"])
