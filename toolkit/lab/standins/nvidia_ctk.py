#!/usr/bin/python3
"""nvidia-ctk of the gpunode lab: `runtime configure` edits Docker's daemon.json for real.

Like the real tool it adds the `nvidia` runtime (`nvidia-container-runtime`, which in the lab
execs runc) to /etc/docker/daemon.json, keeps every other key, optionally makes it the
default runtime, and writes the file with four-space indentation. Only the Docker runtime is
supported in the lab. Stdlib only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

VERSION = "@VERSION@"
COMMIT = "@COMMIT@"
DEFAULT_CONFIG = {"docker": "/etc/docker/daemon.json"}


def info(message: str) -> None:
    sys.stderr.write(f"INFO[0000] {message}\n")


def fail(message: str) -> int:
    sys.stderr.write(f"ERROR[0000] {message}\n")
    return 1


def parse_flags(args: list[str]) -> dict[str, str] | str:
    """`--name=value`, `--name value` and boolean `--name`; returns an error text on failure."""
    booleans = {"set-as-default", "dry-run", "cdi.enabled"}
    valued = {"runtime", "config", "nvidia-runtime-name", "runtime-path", "config-source"}
    flags: dict[str, str] = {}
    while args:
        arg = args.pop(0)
        if not arg.startswith("-"):
            return f"unexpected argument {arg!r}"
        name, eq, value = arg.lstrip("-").partition("=")
        if name in booleans:
            flags[name] = value if eq else "true"
        elif name in valued:
            if not eq:
                if not args:
                    return f"flag needs an argument: -{name}"
                value = args.pop(0)
            flags[name] = value
        else:
            return f"flag provided but not defined: -{name}"
    return flags


def configure_docker(flags: dict[str, str]) -> int:
    path = Path(flags.get("config", DEFAULT_CONFIG["docker"]))
    name = flags.get("nvidia-runtime-name", "nvidia")
    runtime_path = flags.get("runtime-path", "nvidia-container-runtime")
    config: dict[str, Any]
    if path.exists():
        info(f"Loading config from {path}")
        text = path.read_text()
        try:
            config = json.loads(text) if text.strip() else {}
        except ValueError as err:
            return fail(f"unable to load config: invalid JSON in {path}: {err}")
        if not isinstance(config, dict):
            return fail(f"unable to load config: {path} does not hold a JSON object")
    else:
        info("Config file does not exist; using empty config")
        config = {}
    runtimes = config.get("runtimes")
    if runtimes is None:
        runtimes = {}
    if not isinstance(runtimes, dict):
        return fail(f'unable to update config: "runtimes" in {path} is not an object')
    runtimes[name] = {"args": [], "path": runtime_path}
    config["runtimes"] = runtimes
    if flags.get("set-as-default", "false") == "true":
        config["default-runtime"] = name
    elif config.get("default-runtime") == name:
        # The real tool resets a default it no longer sets.
        del config["default-runtime"]
    if flags.get("cdi.enabled", "false") == "true":
        features = config.setdefault("features", {})
        features["cdi"] = True
    output = json.dumps(config, indent=4) + "\n"
    if flags.get("dry-run", "false") == "true":
        sys.stdout.write(output)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(output)
    tmp.replace(path)
    info(f"Wrote updated config to {path}")
    info("It is recommended that docker daemon be restarted.")
    return 0


def main(argv: list[str]) -> int:
    if VERSION.startswith("@"):
        sys.stderr.write("nvidia-ctk: this stand-in was not built (version unset)\n")
        return 255
    if argv[:1] in (["--version"], ["-v"]):
        print(f"NVIDIA Container Toolkit CLI version {VERSION}\ncommit: {COMMIT}")
        return 0
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(
            "NAME:\n   NVIDIA Container Toolkit CLI\n\nUSAGE:\n   nvidia-ctk runtime configure"
            " --runtime=docker [--config=PATH] [--set-as-default] [--dry-run]"
        )
        return 0
    if argv[:2] != ["runtime", "configure"]:
        return fail(
            "the gpunode lab's nvidia-ctk supports only `runtime configure`, "
            f"not {' '.join(argv)!r}"
        )
    flags = parse_flags(argv[2:])
    if isinstance(flags, str):
        return fail(flags)
    runtime = flags.get("runtime", "docker")
    if runtime != "docker":
        return fail(f"unrecognized runtime '{runtime}' (the gpunode lab supports docker only)")
    return configure_docker(flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
