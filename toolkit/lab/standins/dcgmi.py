#!/usr/bin/python3
"""dcgmi of the gpunode lab: ``dcgmi diag -r <level> -j`` for the node's emulated GPUs.

Installed as /usr/bin/dcgmi on every lab node (the real tool comes with NVIDIA's
datacenter-gpu-manager packages, ``datacenter-gpu-manager-4-core`` in DCGM 4: DCGM user guide,
"Installation"). It reads /var/lib/gpunode-lab/hardware.json (toolkit/lab/hardware.py) and
prints DCGM 4's document (DCGM @ 72fa3fe, nvvs/include/NvvsJsonStrings.h, dcgmi/Diag.cpp):
``DCGM Diagnostic`` > ``test_categories`` > ``tests`` > ``results`` with ``entity_group``,
``entity_id``, ``status`` and ``warnings``. A GPU whose ``dcgm_failing_plugin`` is set (the
lab's ``dcgm-fail`` fault) fails that plugin with DCGM's own error
(dcgmlib/dcgm_errors.h: DCGM_FR_FAULTY_MEMORY, 52), and dcgmi then exits 226
(DCGM_ST_NVVS_ERROR, -30, as an unsigned byte: NVIDIA/DCGM issue 158) after printing the
document, as the real tool does (Diag::GetFailureResult).

GPUNODE_LAB_ROOT (default "/") relocates the hardware file, so tests run it without a node.
Stdlib only: it runs on the node's system Python.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

VERSION = "4.2.3"
HARDWARE = Path(os.environ.get("GPUNODE_LAB_ROOT", "/")) / "var/lib/gpunode-lab/hardware.json"
EXIT_NVVS_ERROR = 226
# The plugins of each run level and their categories (DCGM user guide, "DCGM Diagnostics",
# Run Levels and Tests; nvvs/include/PluginStrings.h for the categories).
LEVELS: dict[int, tuple[tuple[str, str], ...]] = {
    1: (("Deployment", "software"),),
    2: (("Deployment", "software"), ("Integration", "pcie"), ("Hardware", "memory")),
    3: (
        ("Deployment", "software"),
        ("Integration", "pcie"),
        ("Hardware", "memory"),
        ("Hardware", "diagnostic"),
        ("Stress", "targeted_stress"),
        ("Stress", "targeted_power"),
        ("Stress", "memory_bandwidth"),
    ),
}
LEVELS[4] = (*LEVELS[3], ("Hardware", "memtest"), ("Stress", "pulse_test"))
# dcgmlib/dcgm_errors.h: DCGM_FR_FAULTY_MEMORY (52), DCGM_FR_EC_HARDWARE_MEMORY (10),
# DCGM_ERROR_ISOLATE (2).
FAULTY_MEMORY = {"error_category": 10, "error_id": 52, "error_severity": 2}
FAULTY_MEMORY_MSG = "Found {count} faulty memory elements on GPU {gpu}"
USAGE = "Usage: dcgmi diag -r <level> -j (the lab stand-in prints JSON only)\n"


def _result(gpu: dict[str, Any], plugin: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"entity_group": "GPU", "entity_group_id": 1}
    entry["entity_id"] = gpu["index"]
    if gpu.get("dcgm_failing_plugin") == plugin:
        warning = FAULTY_MEMORY_MSG.format(count=1, gpu=gpu["index"])
        entry.update(status="Fail", warnings=[{**FAULTY_MEMORY, "warning": warning}])
    else:
        entry["status"] = "Pass"
    return entry


def document(hardware: dict[str, Any], level: int) -> tuple[dict[str, Any], bool]:
    """The JSON document and whether a plugin failed."""
    gpus = hardware["gpus"]
    categories: dict[str, list[dict[str, Any]]] = {}
    failed = False
    for category, plugin in LEVELS[level]:
        results = [_result(gpu, plugin) for gpu in gpus]
        status = "Fail" if any(r["status"] == "Fail" for r in results) else "Pass"
        failed = failed or status == "Fail"
        categories.setdefault(category, []).append(
            {"name": plugin, "results": results, "test_summary": {"status": status}}
        )
    return {
        "DCGM Diagnostic": {
            "test_categories": [{"category": c, "tests": t} for c, t in categories.items()],
            "version": VERSION,
        },
        "entity_groups": [
            {
                "entities": [
                    {"device_id": "", "entity_id": g["index"], "serial_num": g["serial"]}
                    for g in gpus
                ],
                "entity_group": "GPU",
                "entity_group_id": 1,
            }
        ],
        "metadata": {"version": VERSION},
    }, failed


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] != "diag" or argv[1] not in ("-r", "--run"):
        sys.stderr.write(USAGE)
        return 1
    try:
        level = int(argv[2])
    except ValueError:
        level = 0
    # The table dcgmi prints without -j is not emulated: gpunode reads only the JSON.
    if level not in LEVELS or argv[3:] not in (["-j"], ["--json"]):
        sys.stderr.write(USAGE)
        return 1
    try:
        hardware = json.loads(HARDWARE.read_text())
    except OSError:
        sys.stdout.write("Error: unable to connect to the host engine\n")
        return 1
    doc, failed = document(hardware, level)
    # dcgmi prints its JSON with tabs and " : " (jsoncpp's styled writer).
    sys.stdout.write(json.dumps(doc, indent="\t", separators=(",", " : ")) + "\n")
    return EXIT_NVVS_ERROR if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
