#!/usr/bin/python3
"""dcgmi of the gpunode lab: ``dcgmi diag -r <level> -j`` for the node's emulated GPUs.

Installed as /usr/bin/dcgmi on every lab node (the real tool comes with NVIDIA's
datacenter-gpu-manager packages, ``datacenter-gpu-manager-4-core`` in DCGM 4: DCGM user guide,
"Installation"). It reads /var/lib/gpunode-lab/hardware.json (toolkit/lab/hardware.py) and
prints DCGM 4's document as a real DCGM 4 prints it and nothing more (DCGM @ 72fa3fe,
nvvs/include/NvvsJsonStrings.h, dcgmi/Diag.cpp ``HelperJsonBuildOutput``; compared field by field
with the real DCGM 4.2.3 and 4.5.2 captures in tests/data/real/dcgm/): ``DCGM Diagnostic`` holds
only ``test_categories`` > ``tests`` (``name``, ``results`` with ``entity_group``,
``entity_group_id``, ``entity_id``, ``status`` and, on a failure, ``warnings``;
``test_summary``); beside it ``entity_groups`` and ``metadata`` (``version`` and, when the
driver is loaded, ``Driver Version Detected``). Keys are sorted, as jsoncpp writes them.

A GPU whose ``dcgm_failing_plugin`` is set (the lab's ``dcgm-fail`` fault) fails that plugin
with DCGM's own error (dcgmlib/dcgm_errors.h: DCGM_FR_FAULTY_MEMORY, 52), and dcgmi then exits
226 (DCGM_ST_NVVS_ERROR, -30, as an unsigned byte: NVIDIA/DCGM issue 158) after printing the
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
STATE = Path(os.environ.get("GPUNODE_LAB_ROOT", "/")) / "var/lib/gpunode-lab"
HARDWARE = STATE / "hardware.json"
# The loaded kernel module's version (the stand-in nvidia-smi's, smi/state.py): what DCGM
# reports as the driver it detected, left out as DCGM leaves it out when it has none.
LOADED = STATE / "loaded-driver-version"
EXIT_NVVS_ERROR = 226
# Each plugin's category (nvvs/include/PluginStrings.h, <PLUGIN>_PLUGIN_CATEGORY).
CATEGORY = {
    "software": "Deployment",
    "memory": "Hardware",
    "diagnostic": "Hardware",
    "pulse_test": "Hardware",
    "pcie": "Integration",
    "targeted_stress": "Stress",
    "targeted_power": "Stress",
    "memory_bandwidth": "Stress",
    "memtest": "Stress",
}
# The plugins of each run level (DCGM user guide, "DCGM Diagnostics", Run Levels and Tests), in
# the order DCGM runs them: a category is printed where its first test is recorded
# (nvvs/src/DcgmNvvsResponseWrapper.cpp), so a real level 2 prints Deployment (software),
# Hardware (memory), Integration (pcie), as the DCGM 4.5.2 capture does.
LEVELS: dict[int, tuple[str, ...]] = {
    1: ("software",),
    2: ("software", "memory", "pcie"),
    3: (
        "software",
        "memory",
        "diagnostic",
        "pcie",
        "targeted_stress",
        "targeted_power",
        "memory_bandwidth",
    ),
}
LEVELS[4] = (*LEVELS[3], "memtest", "pulse_test")
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


def _device_id(gpu: dict[str, Any]) -> str:
    """DCGM's ``device_id``: the SKU's PCI device id, four lower-case hex digits (``2330``),
    from nvidia-smi's ``0x233010DE`` (device, then vendor)."""
    return str(gpu["pci_device_id"])[2:6].lower()


def _driver() -> str | None:
    try:
        return LOADED.read_text().strip() or None
    except OSError:
        return None


def document(hardware: dict[str, Any], level: int) -> tuple[dict[str, Any], bool]:
    """The JSON document and whether a plugin failed."""
    gpus = hardware["gpus"]
    categories: dict[str, list[dict[str, Any]]] = {}
    failed = False
    for plugin in LEVELS[level]:
        results = [_result(gpu, plugin) for gpu in gpus]
        status = "Fail" if any(r["status"] == "Fail" for r in results) else "Pass"
        failed = failed or status == "Fail"
        categories.setdefault(CATEGORY[plugin], []).append(
            {"name": plugin, "results": results, "test_summary": {"status": status}}
        )
    metadata = {"version": VERSION}
    driver = _driver()
    if driver:
        metadata["Driver Version Detected"] = driver
    return {
        "DCGM Diagnostic": {
            "test_categories": [{"category": c, "tests": t} for c, t in categories.items()],
        },
        "entity_groups": [
            {
                "entities": [
                    {"device_id": _device_id(g), "entity_id": g["index"], "serial_num": g["serial"]}
                    for g in gpus
                ],
                "entity_group": "GPU",
                "entity_group_id": 1,
            }
        ],
        "metadata": metadata,
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
    sys.stdout.write(json.dumps(doc, indent="\t", separators=(",", " : "), sort_keys=True) + "\n")
    return EXIT_NVVS_ERROR if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
