"""Measured values and floors as text a person reads (never a Python repr)."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.report.junit import render_junit
from toolkit.report.text import value_lines, value_text

PCIE = [
    {"gpu": 0, "max": [5, 16], "idle": [1, 16], "under_load": [5, 16]},
    {"gpu": 1, "max": [5, 16], "idle": [1, 16], "under_load": None},
]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        (True, "yes"),
        (0, "0"),
        (1905.0, "1905.0"),
        (0.00012345, "0.0001234"),
        (0.12345678, "0.1235"),
        (float("nan"), "-"),
        ([], "none"),
        ([3, 5], "3, 5"),
        (["NVIDIA H100 80GB HBM3"], "NVIDIA H100 80GB HBM3"),
        ({0: 12.34, 1: 0.5}, "0: 12.34, 1: 0.5"),
        ({"gpu": 2, "max": [4, 8]}, "gpu: 2, max: 4/8"),
        ("550.127.05", "550.127.05"),
    ],
)
def test_values_read_as_text(value: Any, text: str) -> None:
    assert value_text(value) == text


def test_one_line_per_record_and_no_repr() -> None:
    lines = value_lines(PCIE)
    assert lines == [
        "gpu: 0, max: 5/16, idle: 1/16, under load: 5/16",
        "gpu: 1, max: 5/16, idle: 1/16, under load: -",
    ]
    assert not any(c in "".join(lines) for c in "{}[]'")


def test_junit_failure_text_is_readable() -> None:
    summary = {
        "run_id": "r1",
        "nodes": [
            {
                "host": "n1",
                "checks": [
                    {"name": "health.pcie", "ok": False, "message": "bad", "measured": PCIE,
                     "floor": [5, 16]},
                ],
            }
        ]
    }  # fmt: skip
    xml = render_junit(summary)
    assert "measured: gpu: 0, max: 5/16" in xml and "floor: 5, 16" in xml
    assert "{'gpu'" not in xml
