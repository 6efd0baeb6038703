"""Reports of an acceptance run: JSON, HTML (with inline SVG plots), JUnit XML, Prometheus.

Every writer takes the run summary (``AcceptanceRun.summary()``): plain JSON-ready data, so
reports can be rebuilt later from a recorded ``run.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.report.html import render_html
from toolkit.report.junit import render_junit
from toolkit.report.prometheus import render_textfile

__all__ = ["render_html", "render_junit", "render_textfile", "write_reports"]


def write_reports(summary: dict[str, Any], directory: Path) -> dict[str, Path]:
    """Write ``run.json``, ``report.html`` and ``junit.xml`` into ``directory``.

    Returns:
        The paths written, by kind.
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": directory / "run.json",
        "html": directory / "report.html",
        "junit": directory / "junit.xml",
    }
    paths["json"].write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    paths["html"].write_text(render_html(summary), encoding="utf-8")
    paths["junit"].write_text(render_junit(summary), encoding="utf-8")
    return paths
