"""Benchmark: how soon the loaders refuse input past their limits (issue 27).

Prints the figures (the bar: under 2 s and under 200 MB each); asserts only the refusals
(timings depend on the machine).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from shared_fixtures import REPO

# Runs one load in a fresh interpreter: prints seconds, peak RSS (KiB) and the outcome.
_LOAD = """
import resource, sys, time
from toolkit.config import load_yaml
from toolkit.errors import ConfigError
from toolkit.inventory import load_inventory
load = load_yaml if sys.argv[1] == "yaml" else load_inventory
start = time.perf_counter()
try:
    load(sys.argv[2])
    outcome = "loaded"
except ConfigError as err:
    outcome = "refused: " + err.message[-120:]
print(f"{time.perf_counter() - start:.2f}")
# VmHWM: the peak of this process's own memory (ru_maxrss would count the pytest
# process that forked it, whose memory the child shares until exec).
print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))
print(outcome)
"""


def measure(kind: str, path: Path) -> tuple[float, float, str]:
    """(seconds, peak RSS in MB, outcome) of loading ``path`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _LOAD, kind, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    seconds, rss_kib, outcome = done.stdout.strip().split("\n", 2)
    return float(seconds), int(rss_kib) / 1024, outcome


def test_bench_limits(tmp_path: Path) -> None:
    flow = tmp_path / "list.yml"
    flow.write_text("[" + "1," * 1_999_999 + "1]\n")
    cases = {"YAML list of 2 million items (4 MiB)": ("yaml", flow)}
    for lines in (1, 5, 10):
        inventory = tmp_path / f"ranges-{lines}"
        inventory.mkdir()
        (inventory / "hosts.yml").write_text(
            "all:\n  hosts:\n" + "".join(f'    "p{n}-[0:9999]": {{}}\n' for n in range(lines))
        )
        cases[f"inventory of {lines} x [0:9999]"] = ("inventory", inventory)
    outcomes = {}
    for name, (kind, path) in cases.items():
        seconds, rss_mb, outcome = measure(kind, path)
        outcomes[name] = outcome
        print(f"\n{name}: {seconds:.2f} s, peak RSS {rss_mb:.0f} MB, {outcome}")
    assert outcomes["YAML list of 2 million items (4 MiB)"].startswith("refused")
    assert outcomes["inventory of 1 x [0:9999]"] == "loaded"
    assert outcomes["inventory of 10 x [0:9999]"].startswith("refused")
