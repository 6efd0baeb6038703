#!/usr/bin/python3
"""nvidia-container-cli of the gpunode lab: `--version` and `info` from the GPU emulation.

`info` asks the node's nvidia-smi (the lab's emulation) for the driver and the GPUs, and
fails with the real tool's NVML errors when the driver is missing or mismatched. Stdlib only.
"""

from __future__ import annotations

import subprocess
import sys

VERSION = "@VERSION@"
COMMIT = "@COMMIT@"


def nvidia_smi(*args: str) -> tuple[int, str]:
    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, check=False, timeout=30
        )
    except OSError:
        return 127, ""
    return done.returncode, done.stdout


def info() -> int:
    code, out = nvidia_smi("--version")
    if code != 0:
        if "mismatch" in out:
            reason = "nvml error: driver/library version mismatch"
        elif code == 127:
            reason = "load library failed: libnvidia-ml.so.1: cannot open shared object file"
        else:
            reason = "nvml error: driver not loaded"
        sys.stderr.write(f"nvidia-container-cli: initialization error: {reason}\n")
        return 1
    versions = dict(
        (key.strip(), value.strip())
        for key, _, value in (line.partition(":") for line in out.splitlines())
    )
    code, out = nvidia_smi(
        "--query-gpu=index,minor_number,name,uuid,pci.bus_id,compute_cap",
        "--format=csv,noheader",
    )
    if code != 0:
        sys.stderr.write("nvidia-container-cli: detection error: nvml error: unknown error\n")
        return 1
    print(f"NVRM version:   {versions.get('DRIVER version', '')}")
    print(f"CUDA version:   {versions.get('CUDA Version', '')}")
    for line in out.splitlines():
        index, minor, name, uuid, bus, cap = (part.strip() for part in line.split(","))
        print(
            f"\nDevice Index:   {index}\nDevice Minor:   {minor}\nModel:          {name}\n"
            f"Brand:          Nvidia\nGPU UUID:       {uuid}\nBus Location:   {bus}\n"
            f"Architecture:   {cap}"
        )
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] in (["--version"], ["-V"]):
        print(
            f"cli-version: {VERSION}\nlib-version: {VERSION}\n"
            f"build date: 2024-09-24T20:31+00:00\nbuild revision: {COMMIT}\n"
            "build compiler: x86_64-linux-gnu-gcc-7 7.5.0\nbuild platform: x86_64\n"
            "build flags: -D_GNU_SOURCE -D_FORTIFY_SOURCE=2 -DNDEBUG -std=gnu11 -O2 -g"
        )
        return 0
    if argv[:1] == ["info"]:
        return info()
    sys.stderr.write(
        "Usage: nvidia-container-cli [OPTION...] info | --version\n"
        "(the gpunode lab's stand-in supports `info` and `--version`)\n"
    )
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
