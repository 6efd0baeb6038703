"""Benchmark: how fast `gpunode --help` starts, next to a bare Python interpreter.

Prints the figures; asserts only that the commands run (timings depend on the machine).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 7


def median_seconds(command: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - start)
        assert result.returncode == 0, result.stderr
    return statistics.median(times)


def test_bench_help_startup() -> None:
    bare = median_seconds([sys.executable, "-c", "pass"])
    figures = {
        "gpunode --help": median_seconds([sys.executable, "-m", "toolkit", "--help"]),
        "gpunode stack --help": median_seconds(
            [sys.executable, "-m", "toolkit", "stack", "--help"]
        ),
    }
    print(f"\npython -c pass: median {bare * 1000:.0f} ms over {RUNS} runs")
    for name, seconds in figures.items():
        print(
            f"{name}: median {seconds * 1000:.0f} ms over {RUNS} runs, {seconds / bare:.1f}x bare"
        )
    assert bare > 0
    assert all(seconds > 0 for seconds in figures.values())
