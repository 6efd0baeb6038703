"""The HTML report looked at in a real browser: headless Chromium lays it out, and a full-page
screenshot must show every figure drawn in its colours (the all-reduce curve, the read-latency
histogram, the scaling curve, the topology matrix), for a node that passed and one that did
not. The topology is a real public capture (tests/unit/data/topo/SOURCES.md)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import browser
import pytest
from shared_fixtures import REPO, healthy_training

from toolkit.acceptance.thresholds import effective
from toolkit.acceptance.topology import report as topology_report
from toolkit.profile.floors import AcceptanceSpec
from toolkit.records.passport import passports
from toolkit.report import render_html
from toolkit.report.fleet import fleet_history, render_fleet_html
from toolkit.report.html import FAIL_OUTLINE, LINK_COLOURS, SERIES_COLOUR
from unit.report.test_fleet import _node as _fleet_node
from unit.report.test_fleet import _record as _fleet_record
from unit.report.test_training import _summary

CAPTURE = REPO / "tests" / "unit" / "data" / "topo" / "h100-sxm-8.txt"
PLOT_INK = {SERIES_COLOUR}
LINK_INK = {c for kind, c in LINK_COLOURS.items() if kind != "X"}

needs_chromium = pytest.mark.skipif(
    browser.chromium() is None and not os.environ.get("CI"),
    reason="no Chromium here (scripts/setup-host installs it; CI requires it)",
)


@needs_chromium
def test_every_figure_of_the_report_renders_in_chromium(tmp_path: Path) -> None:
    spec = effective(AcceptanceSpec(profile="h100-sxm-8")).topology
    healthy = topology_report({"raw_output": CAPTURE.read_text(), "error": None}, spec)
    # The same node with one NVLink pair fallen to SYS (what the lab's `topo` fault shows).
    broken_text = CAPTURE.read_text().replace("NV18", "SYS", 1)
    broken = topology_report({"raw_output": broken_text, "error": None}, spec)
    assert healthy and broken and healthy["failing"] == [] and broken["failing"]
    summary = _summary(healthy_training(), healthy_training(p99_ms=205.0, latencies=[205.0] * 20))
    for node, topo in zip(summary["nodes"], (healthy, broken), strict=True):
        node["topology"] = topo
        node["allreduce_rows"] = [
            {"size_bytes": 1 << s, "busbw_gbps": 0.1 * s} for s in range(18, 25, 2)
        ]
    page = tmp_path / "report.html"
    page.write_text(render_html(summary))

    shot = browser.render(page)
    (tmp_path / "report.png").write_bytes(shot.png)
    kinds = [(f.kind, f.caption.split(",")[0]) for f in shot.figures]
    assert len(kinds) == 8, kinds  # per node: all-reduce, latency, scaling, topology
    assert sum(k == "table" for k, _ in kinds) == 2
    for figure in shot.figures:
        _x, y, width, height = figure.box
        assert width > 100 and height > 50 and y + height <= shot.size[1], figure
        ink = browser.ink(shot.png, figure.box, LINK_INK if figure.kind == "table" else PLOT_INK)
        assert ink > 150, f"{figure.caption}: {ink} pixels of its colours on the screenshot"
    # The broken pair is outlined in red in the second matrix only.
    tables = [f for f in shot.figures if f.kind == "table"]
    red = [browser.ink(shot.png, t.box, {FAIL_OUTLINE}) for t in tables]
    assert red[0] == 0 and red[1] > 20, red


def test_a_browser_that_never_sends_the_event_times_out() -> None:
    """A DevTools pipe whose writer stays open and silent after an unrelated event: waiting
    for the page's load event fails after the timeout, naming the event, instead of hanging."""
    receive, chromium_writes = os.pipe()
    chromium_reads, send = os.pipe()
    try:
        unrelated = {"method": "Page.frameNavigated", "sessionId": "s1", "params": {}}
        os.write(chromium_writes, json.dumps(unrelated).encode() + b"\0")
        pipe = browser._Pipe(send, receive, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"no Page.loadEventFired event within 0.3 s"):
            pipe.wait_for("Page.loadEventFired", "s1")
        with pytest.raises(TimeoutError, match=r"no reply to Page.navigate within 0.3 s"):
            pipe.call("Page.navigate", "s1", url="about:blank")
        assert 0.6 <= time.monotonic() - started < 10
    finally:
        for fd in (receive, chromium_writes, chromium_reads, send):
            os.close(fd)


@needs_chromium
def test_the_fleet_report_fits_the_window_and_reads_as_text(tmp_path: Path) -> None:
    """The fleet report at 1280 px: no horizontal scrollbar, and a measured value made of one
    record per GPU reads as text (``gpu: 0, max: 5/16``), not a Python repr."""
    pcie = [
        {"gpu": g, "max": [5, 16], "idle": [1, 16], "under_load": [5, 16] if g else [3, 8]}
        for g in range(8)
    ]
    node = _fleet_node("node-1", 0.9, True)
    node["checks"] += [
        {
            "name": "health.pcie",
            "ok": False,
            "message": "GPU 0: under load Gen3 x8 < max Gen5 x16"
            + " | "
            + "; ".join(
                f"GPU {g} (00000000:{g:02X}:00.0): max Gen5 x16, under load "
                "not measured, idle Gen5 x16 (not judged)"
                for g in range(2)
            ),
            "measured": pcie,
            "floor": [5, 16],
        },
        {
            "name": "versions.nccl_loaded",
            "ok": True,
            "measured": "2.21.5",
            "floor": "2.21.5",
            "message": "the framework loads NCCL 2.21.5 (/usr/local/lib/python3.11/dist-packages/"
            "nvidia/nccl/lib/libnccl.so.2), pinned 2.21.5",
        },
        {
            "name": "container.start",
            "ok": True,
            "message": "ranks ran in sha256:9d260d6f11d0",
            "measured": "sha256:9d260d6f11d04222cdec26620dc06c3d67f22ac17caad36b22b9f8331069b5ad",
            "floor": None,
        },
    ]  # the checks of a lab node's real run, as run.json records them
    runs_dir = tmp_path / "runs"
    _fleet_record(runs_dir, 0, [node])
    page = tmp_path / "fleet.html"
    history = fleet_history(runs_dir, ["node-1"])
    page.write_text(render_fleet_html("inventories/lab", history, passports(["node-1"], runs_dir)))

    shot = browser.render(page, width=1280)
    assert shot.scroll_width <= 1280, f"the page is {shot.scroll_width} px wide in a 1280 window"
    assert "gpu: 0, max: 5/16, idle: 1/16, under load: 3/8" in shot.text
    assert "{'" not in shot.text and "[{" not in shot.text
