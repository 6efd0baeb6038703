"""Benchmark: reading a fleet's history for the passport, the first time and after.

Every acceptance reads the passport of each node it accepts: every earlier acceptance and
check run of the fleet. A history of 150 acceptance runs of 8 nodes (1,200 runner results)
plus 150 check runs is written in the shapes their writers give; the fleet's observations
are read once (each run parsed, what was read kept in its folder) and again (each run's
kept observations, its files only looked at). Printed as a ratio of the first read; asserted
only that both reads agree.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from toolkit.lab.hardware import NodeHardware
from toolkit.records import runs
from toolkit.records.passport import fleet_observations

RUNS = 150
NODES = 8
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _result(hw: NodeHardware, run: int) -> dict[str, Any]:
    """A runner result with what the passport reads and the sweep's rows around it."""
    gpus = [
        {
            "index": g.index,
            "bus_id": g.pci_bus_id,
            "serial": g.serial,
            "uuid": g.uuid,
            "remapped_rows": {"correctable": run % 3, "uncorrectable": 0},
        }
        for g in hw.gpus
    ]
    rows = [
        {"size_bytes": 1 << k, "time_us": 10.0 + k, "busbw_gbps": 300.0 + k, "correct": True}
        for k in range(10, 34)
    ]
    return {
        "gpus": {"ok": True, "list": gpus},
        "identity": {
            "dmi": {"product_serial": hw.system.product_serial},
            "nics": [
                {"name": f"ib{n}", "mac": f"02:00:00:00:00:{n:02x}", "physical": True}
                for n in range(8)
            ],
            "lsblk": {"blockdevices": [{"name": "nvme0n1", "type": "disk", "serial": "S1"}]},
        },
        "gpu_perf": {
            "gemm": [{"gpu": g.index, "tflops": 700.0} for g in hw.gpus],
            "mem_bw": [{"gpu": g.index, "gbps": 3000.0} for g in hw.gpus],
        },
        "allreduce": {"rows": rows},
    }


def _history(root: Path) -> None:
    hardware = {
        f"n{i}": NodeHardware.for_node("H100", 8, True, seed="bench", index=i) for i in range(NODES)
    }
    for run in range(RUNS):
        when = T0 + timedelta(hours=2 * run)
        path = root / runs.new_run_id("accept", when)
        (path / "nodes").mkdir(parents=True)
        summaries = []
        for host, hw in hardware.items():
            summaries.append(
                {
                    "host": host,
                    "group": "h100",
                    "verdict": "ready",
                    "busbw_at_largest_gbps": 400.0,
                    "failed_checks": [],
                    "training": {"reads": {"p99_ms": 2.0}},
                }
            )
            (path / "nodes" / f"{host}.result.json").write_text(json.dumps(_result(hw, run)))
        (path / runs.RECORD).write_text(
            json.dumps({"run_id": path.name, "started": when.isoformat(), "nodes": summaries})
        )
        check = root / runs.new_run_id("check", when + timedelta(hours=1))
        check.mkdir()
        nodes = {
            host: {
                "ok": True,
                "error": None,
                "checks": [],
                "facts": {"gpus": _result(hw, run)["gpus"]["list"], "identity": {}},
            }
            for host, hw in hardware.items()
        }
        (check / "check.json").write_text(json.dumps({"run_id": check.name, "nodes": nodes}))


def test_bench_passport_history(tmp_path: Path) -> None:
    _history(tmp_path)
    size = sum(p.stat().st_size for p in tmp_path.rglob("*.json"))
    start = time.perf_counter()
    first = fleet_observations(tmp_path)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    again = fleet_observations(tmp_path)
    warm = time.perf_counter() - start
    assert {h: [o.to_dict() for o in v] for h, v in first.items()} == {
        h: [o.to_dict() for o in v] for h, v in again.items()
    }
    assert all(len(v) == 2 * RUNS for v in first.values()) and len(first) == NODES
    print(
        f"\npassport history: {RUNS} acceptance runs x {NODES} nodes + {RUNS} check runs "
        f"({size / 1e6:.1f} MB of records): first read {cold:.2f} s (parsed, kept), "
        f"again {warm:.2f} s ({warm / cold:.2f} of the first)"
    )
