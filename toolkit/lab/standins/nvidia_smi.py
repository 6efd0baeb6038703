#!/usr/bin/python3
"""nvidia-smi of the gpunode lab: reports the node's emulated GPUs like the real tool.

Installed as /usr/bin/nvidia-smi by the stand-in nvidia-smi package, with the
package's own driver version baked in. It reads:

- /var/lib/gpunode-lab/hardware.json: the emulated GPUs and injected faults (written by the
  lab, see toolkit/lab/hardware.py);
- /var/lib/gpunode-lab/loaded-driver-version: the version of the "loaded kernel module",
  written by the kernel-module package at install time (when nothing was loaded) and at
  (emulated) boot. When it differs from this script's version, NVML cannot initialise, as
  on a real node after an upgrade without a reboot.

GPUNODE_LAB_ROOT (default "/") relocates every path, so tests run it without a node.
Stdlib only: it runs on the node's system Python. This file parses the command line; what it
prints is in its parts, ``smi/`` (``state``, ``fields``, ``report``, ``topo``), which the
package installs under ``/usr/lib/gpunode-lab/nvidia-smi/`` (``toolkit.lab.package_spec``).
"""

from __future__ import annotations

import sys
from pathlib import Path

VERSION = "@VERSION@"  # the installed user-space driver (this package's version)
CUDA_VERSION = "@CUDA_VERSION@"  # the highest CUDA version this driver supports
NVML_VERSION = "@NVML_VERSION@"  # major.minor, as the real tool prints it

# The parts: /usr/lib/gpunode-lab/nvidia-smi/smi/ on a node (/usr/bin's sibling lib/), the
# `smi` folder beside this file in the source tree. No bytecode: the package owns its files,
# and a __pycache__ left beside them would outlive the package.
HERE = Path(__file__).resolve().parent
PARTS = HERE.parent / "lib" / "gpunode-lab" / "nvidia-smi"
sys.path.insert(0, str(PARTS if PARTS.is_dir() else HERE))
sys.dont_write_bytecode = True

from smi.fields import REMAPPED_ROWS_FIELDS, query, query_compute_apps  # noqa: E402
from smi.report import full_query, list_gpus, summary_table  # noqa: E402
from smi.state import (  # noqa: E402
    EXIT_INVALID,
    Driver,
    SmiExit,
    load_gpus,
    loaded_version,
    select,
    set_persistence,
)
from smi.topo import topology  # noqa: E402

DRIVER = Driver(VERSION, CUDA_VERSION, NVML_VERSION)


def version_text() -> str:
    return (
        f"NVIDIA-SMI version  : {VERSION}\n"
        f"NVML version        : {NVML_VERSION}\n"
        f"DRIVER version      : {VERSION}\n"
        f"CUDA Version        : {CUDA_VERSION}\n"
    )


HELP = """NVIDIA System Management Interface -- v{version} (gpunode lab emulation)

nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...

    -h,   --help                Print usage information and exit.
          --version             Print version information and exit.
    -L,   --list-gpus           Display a list of GPUs connected to the system.
    -q,   --query               Display GPU or Unit info.
    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus id).
    -d,   --display=            Display only selected information: MEMORY, UTILIZATION, ECC,
                                TEMPERATURE, POWER, CLOCK, COMPUTE, PIDS, PERFORMANCE,
                                PAGE_RETIREMENT, ROW_REMAPPER.
    --query-gpu=                Information about GPU (see the real tool's --help-query-gpu).
    --query-remapped-rows=      Information about remapped rows.
    --query-compute-apps=       Information about currently active compute processes.
    --format=                   csv[,noheader][,nounits]
    -pm,  --persistence-mode=   Set persistence mode: 0/DISABLED, 1/ENABLED
    topo -m                     Display the GPU topology matrix.
"""

INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"


def parse(argv: list[str]) -> dict[str, str | None]:
    """The real tool's option style: `--opt=value`, `--opt value`, `-i 0`."""
    takes_value = {
        "-i": "id",
        "--id": "id",
        "-d": "display",
        "--display": "display",
        "--query-gpu": "query_gpu",
        "--query-remapped-rows": "query_remapped_rows",
        "--query-compute-apps": "query_compute_apps",
        "--format": "format",
        "-pm": "persistence",
        "--persistence-mode": "persistence",
    }
    flags = {
        "-h": "help",
        "--help": "help",
        "--version": "version",
        "-L": "list",
        "--list-gpus": "list",
        "-q": "query",
        "--query": "query",
    }
    opts: dict[str, str | None] = {}
    args = list(argv)
    if args[:1] == ["topo"]:
        if len(args) >= 2 and args[1] in ("-m", "--matrix"):
            return {"topo": "1"}
        raise SmiExit(INVALID, EXIT_INVALID)
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in takes_value:
            if not eq:
                if not args:
                    raise SmiExit(f'Option "{name}" requires an argument.\n{INVALID}', EXIT_INVALID)
                value = args.pop(0)
            opts[takes_value[name]] = value
        elif arg in flags:
            opts[flags[arg]] = "1"
        else:
            raise SmiExit(INVALID, EXIT_INVALID)
    return opts


def run(argv: list[str]) -> str:
    opts = parse(argv)
    if "help" in opts:
        return HELP.format(version=DRIVER.version)
    loaded_version(DRIVER)
    if "version" in opts:
        return version_text()
    gpus = select(load_gpus(), opts.get("id"))
    if "topo" in opts:
        return topology(gpus)
    if opts.get("persistence") is not None:
        return set_persistence(gpus, str(opts["persistence"]))
    if opts.get("query_gpu") is not None:
        return query(gpus, str(opts["query_gpu"]), opts.get("format"), None, DRIVER)
    if opts.get("query_remapped_rows") is not None:
        return query(
            gpus,
            str(opts["query_remapped_rows"]),
            opts.get("format"),
            REMAPPED_ROWS_FIELDS,
            DRIVER,
        )
    if opts.get("query_compute_apps") is not None:
        return query_compute_apps(str(opts["query_compute_apps"]), opts.get("format"))
    if "list" in opts:
        return list_gpus(gpus)
    if "query" in opts:
        return full_query(gpus, opts.get("display"), DRIVER)
    if "display" in opts or "format" in opts:
        raise SmiExit(INVALID, EXIT_INVALID)
    return summary_table(gpus, DRIVER)


def main(argv: list[str]) -> int:
    if VERSION.startswith("@"):
        sys.stderr.write("nvidia-smi: this stand-in was not built (its version is unset)\n")
        return 255
    try:
        sys.stdout.write(run(argv))
    except SmiExit as stop:
        sys.stdout.write(stop.message)
        return stop.code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
