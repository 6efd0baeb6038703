#!/usr/bin/python3
"""nvidia-imex of the gpunode lab: the IMEX daemon's start-up checks, then it idles.

The real daemon checks that the loaded driver stack is its own version and aborts otherwise
(NVIDIA IMEX guide, "Getting Started"), and reads its node list (IMEX_NODE_CONFIG_FILE) at
start; this stand-in does the same from the lab's emulation state. GPUNODE_LAB_ROOT (default
"/") relocates its paths for tests. Stdlib only.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

VERSION = "@VERSION@"
ROOT = Path(os.environ.get("GPUNODE_LAB_ROOT", "/"))
STATE = ROOT / "var/lib/gpunode-lab"
DEFAULT_CONFIG = "/etc/nvidia-imex/config.cfg"


def read_config(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; `#` starts a comment."""
    config: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            config[key.strip()] = value.strip()
    return config


def preflight(config: dict[str, str]) -> str | None:
    """The reason the daemon cannot start, or None."""
    try:
        loaded = (STATE / "loaded-driver-version").read_text().strip()
    except OSError:
        loaded = ""
    if loaded != VERSION:
        return (
            f"IMEX {VERSION} is not compatible with the loaded driver stack "
            f"({loaded or 'no driver loaded'})"
        )
    nodes_file = config.get("IMEX_NODE_CONFIG_FILE", "/etc/nvidia-imex/nodes_config.cfg")
    try:
        nodes = [n.strip() for n in (ROOT / nodes_file.lstrip("/")).read_text().splitlines()]
    except OSError as err:
        return f"failed to read the node configuration file {nodes_file}: {err.strerror}"
    if not [n for n in nodes if n]:
        return f"the node configuration file {nodes_file} lists no node"
    return None


def main(argv: list[str]) -> int:
    if VERSION.startswith("@"):
        sys.stderr.write("nvidia-imex: this stand-in was not built (version unset)\n")
        return 255
    config_path = DEFAULT_CONFIG
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in ("-v", "--version"):
            print(f"IMEX version is: {VERSION}")
            return 0
        if arg in ("-c", "--config") and args:
            config_path = args.pop(0)
        else:
            sys.stderr.write(f"nvidia-imex: unknown argument {arg!r}\n")
            return 1
    try:
        config = read_config(ROOT / config_path.lstrip("/"))
    except OSError as err:
        sys.stderr.write(f"failed to open config file {config_path}: {err.strerror}\n")
        return 1
    reason = preflight(config)
    if reason is not None:
        sys.stderr.write(reason + "\n")
        return 1
    if config.get("DAEMONIZE", "1") == "1" and os.fork() > 0:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
