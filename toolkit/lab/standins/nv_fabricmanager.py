#!/usr/bin/python3
"""nv-fabricmanager of the gpunode lab: Fabric Manager's start-up checks, then it idles.

The real daemon refuses to run when its version differs from the loaded driver's (the
commonest Fabric Manager failure in the field), when the node has no NVSwitch, or, on a
fourth-generation NVSwitch system (HGX B200/B300), when the NVLink Subnet Manager is not
installed (its start-up launches NVLSM) or ib_umad, NVLSM's way to the switches, is not loaded;
this stand-in does the same from the lab's emulation
state, so `systemctl start
nvidia-fabricmanager` fails where it would on a real node. GPUNODE_LAB_ROOT (default "/")
relocates its paths for tests. Stdlib only.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

VERSION = "@VERSION@"
# The GPUs (as nvidia-smi names them) whose NVSwitch generation needs NVLSM (gpus.yml `nvlsm`).
NVLSM_GPUS = set("@NVLSM_GPUS@".split("|"))  # noqa: SIM905 (a marker filled when built)
NVLSM = "@NVLSM@"
# Where the lab shows a loaded kernel module (toolkit/lab/kmods.py): NVLSM reaches the
# NVSwitches through ib_umad, which NVIDIA's driver container waits for before it starts
# Fabric Manager on an NVLink5 system.
MODULE_DIR = "@MODULE_DIR@"
ROOT = Path(os.environ.get("GPUNODE_LAB_ROOT", "/"))
STATE = ROOT / "var/lib/gpunode-lab"
DEFAULT_CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"


def read_config(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; `#` starts a comment."""
    config: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            config[key.strip()] = value.strip()
    return config


def log(config: dict[str, str], message: str) -> None:
    name = config.get("LOG_FILE_NAME", "/var/log/fabricmanager.log")
    path = ROOT / name.lstrip("/")
    stamp = time.strftime("[%b %d %Y %H:%M:%S]")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            handle.write(f"{stamp} [INFO] [tid {os.getpid()}] {message}\n")
    except OSError:
        pass


def preflight(config: dict[str, str]) -> str | None:
    """The reason the daemon cannot start, or None."""
    try:
        loaded = (STATE / "loaded-driver-version").read_text().strip()
    except OSError:
        loaded = ""
    if not loaded:
        return "fabric manager failed to open the NVIDIA driver: the driver is not loaded"
    if loaded != VERSION:
        return (
            f"fabric manager NVIDIA GPU driver interface version {VERSION} don't match with "
            f"driver version {loaded}. Please update with matching NVIDIA driver package."
        )
    try:
        hardware = json.loads((STATE / "hardware.json").read_text())
    except (OSError, ValueError):
        hardware = {}
    if not hardware.get("nvswitch"):
        return (
            "fabric manager did not find any NVSwitch devices: NVSwitch based system is not "
            "detected. Fabric Manager is needed only on NVSwitch based systems."
        )
    names = {str(gpu.get("name")) for gpu in hardware.get("gpus") or [] if isinstance(gpu, dict)}
    if names & NVLSM_GPUS and not (ROOT / NVLSM.lstrip("/")).is_file():
        return (
            f"{NVLSM} does not exist: NVLink Subnet Manager is required on this system, "
            "install nvlsm package"
        )
    if names & NVLSM_GPUS and not (ROOT / MODULE_DIR.lstrip("/") / "ib_umad").is_dir():
        # The lab's wording: NVLSM, started by Fabric Manager, finds no umad device.
        return (
            "NVLink Subnet Manager cannot reach the NVSwitches: kernel module ib_umad is not loaded"
        )
    return None


def idle(config: dict[str, str]) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    log(
        config,
        "Successfully configured all the available NVSwitches to route GPU NVLink traffic. "
        "NVLink Peer-to-Peer support will be enabled once the GPUs are successfully "
        "registered with the NVLink fabric.",
    )
    while True:
        time.sleep(3600)


def main(argv: list[str]) -> int:
    if VERSION.startswith("@"):
        sys.stderr.write("nv-fabricmanager: this stand-in was not built (version unset)\n")
        return 255
    config_path = DEFAULT_CONFIG
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-v", "--version"):
            print(f"Fabric Manager version is : {VERSION}")
            return 0
        if arg in ("-h", "--help"):
            print("usage: nv-fabricmanager [-c CONFIG] [-v]")
            return 0
        if arg in ("-c", "--config") and args:
            config_path = args.pop(0)
        else:
            sys.stderr.write(f"nv-fabricmanager: unknown argument {arg!r}\n")
            return 1
    try:
        config = read_config(ROOT / config_path.lstrip("/"))
    except OSError as err:
        sys.stderr.write(f"failed to open config file {config_path}: {err.strerror}\n")
        return 1
    reason = preflight(config)
    if reason is not None:
        log(config, reason)
        sys.stderr.write(reason + "\n")
        return 1
    print(f"Starting Fabric Manager with {config_path}")
    sys.stdout.flush()
    if config.get("DAEMONIZE", "1") == "1":
        # Forking like the real daemon (the unit is Type=forking): the parent returns once
        # the checks passed, the child stays resident.
        if os.fork() > 0:
            return 0
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    idle(config)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
