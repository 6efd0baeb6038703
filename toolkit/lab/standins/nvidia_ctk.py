#!/usr/bin/python3
"""nvidia-ctk of the gpunode lab: `runtime configure` and `cdi generate|list`, for real.

Like the real tool, `runtime configure --runtime=docker` adds the `nvidia` runtime
(`nvidia-container-runtime`, which in the lab execs runc) to /etc/docker/daemon.json, keeps
every other key, optionally makes it the default runtime, and writes the file with four-space
indentation. `--runtime=containerd` writes containerd's version 2 configuration: the `nvidia`
runtime of the CRI plugin (runc v2 with BinaryName nvidia-container-runtime, the layout
nvidia-container-toolkit#497 prints) and, with `--cdi.enabled`, `enable_cdi` and its spec
directories. `cdi generate` writes a CDI specification (kind nvidia.com/gpu: one device per
GPU index and UUID, and `all`) of the lab's emulated GPUs; `cdi list` lists the devices of the
specifications found. GPUNODE_LAB_ROOT (default "/") relocates the lab's state. Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

VERSION = "@VERSION@"
COMMIT = "@COMMIT@"
DEFAULT_CONFIG = {"docker": "/etc/docker/daemon.json", "containerd": "/etc/containerd/config.toml"}
ROOT = Path(os.environ.get("GPUNODE_LAB_ROOT", "/"))
STATE = ROOT / "var/lib/gpunode-lab"
# Where CDI specifications are read from (the CDI specification: /etc/cdi and /var/run/cdi).
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
CDI_KIND = "nvidia.com/gpu"
CRI = 'plugins."io.containerd.grpc.v1.cri"'


def info(message: str) -> None:
    sys.stderr.write(f"INFO[0000] {message}\n")


def fail(message: str) -> int:
    sys.stderr.write(f"ERROR[0000] {message}\n")
    return 1


def parse_flags(args: list[str]) -> dict[str, str] | str:
    """`--name=value`, `--name value` and boolean `--name`; returns an error text on failure."""
    booleans = {"set-as-default", "dry-run", "cdi.enabled"}
    valued = {"runtime", "config", "nvidia-runtime-name", "runtime-path", "config-source", "output"}
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
    return write_config(path, json.dumps(config, indent=4) + "\n", flags, "docker")


def write_config(path: Path, output: str, flags: dict[str, str], daemon: str) -> int:
    """Print it (--dry-run) or replace the file atomically, saying what the real tool says."""
    if flags.get("dry-run", "false") == "true":
        sys.stdout.write(output)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(output)
    tmp.replace(path)
    info(f"Wrote updated config to {path}")
    info(f"It is recommended that {daemon} daemon be restarted.")
    return 0


def configure_containerd(flags: dict[str, str]) -> int:
    """Add the nvidia runtime (and CDI) to containerd's version 2 configuration, keeping the
    rest of the file: top-level keys stay first, the tables gpunode owns are replaced."""
    path = Path(flags.get("config", DEFAULT_CONFIG["containerd"]))
    name = flags.get("nvidia-runtime-name", "nvidia")
    binary = flags.get("runtime-path", "/usr/bin/nvidia-container-runtime")
    lines = path.read_text().splitlines() if path.exists() else []
    info(
        f"Loading config from {path}" if lines else "Config file does not exist; using empty config"
    )
    top, tables, current = [], [], None
    for line in lines:
        if line.strip().startswith("["):
            current = line.strip()
        if current is None:
            if not line.startswith("version"):
                top.append(line)
        elif not current.startswith(f"[{CRI}"):
            tables.append(line)
    info("Using config version 2")
    info('Using CRI runtime plugin name "io.containerd.grpc.v1.cri"')
    out = ["version = 2", *[line for line in top if line.strip()], ""]
    out += [f"[{CRI}]"]
    if flags.get("cdi.enabled", "false") == "true":
        out += ["  enable_cdi = true", f"  cdi_spec_dirs = {json.dumps(list(CDI_DIRS))}"]
    out += [
        f"  [{CRI}.containerd]",
        *(
            [f'    default_runtime_name = "{name}"']
            if flags.get("set-as-default") == "true"
            else []
        ),
        f"    [{CRI}.containerd.runtimes.{name}]",
        "      privileged_without_host_devices = false",
        '      runtime_type = "io.containerd.runc.v2"',
        f"      [{CRI}.containerd.runtimes.{name}.options]",
        f'        BinaryName = "{binary}"',
    ]
    if tables:
        out += ["", *tables]
    return write_config(path, "\n".join(out).rstrip("\n") + "\n", flags, "containerd")


def _gpus() -> list[dict[str, Any]]:
    try:
        hardware = json.loads((STATE / "hardware.json").read_text())
    except (OSError, ValueError):
        return []
    return [g for g in hardware.get("gpus") or [] if isinstance(g, dict)]


def cdi_generate(flags: dict[str, str]) -> int:
    """A CDI specification of the node's GPUs (cdiVersion 0.5.0, kind nvidia.com/gpu)."""
    gpus = _gpus()
    if not gpus:
        return fail("failed to generate CDI spec: failed to initialize NVML: no GPUs found")
    devices: list[dict[str, Any]] = []
    for gpu in gpus:
        index = int(gpu.get("index", len(devices)))
        edits = {"deviceNodes": [{"path": f"/dev/nvidia{index}"}]}
        devices.append({"name": str(index), "containerEdits": edits})
        if gpu.get("uuid"):
            devices.append({"name": str(gpu["uuid"]), "containerEdits": edits})
    nodes = [{"path": f"/dev/nvidia{int(g.get('index', i))}"} for i, g in enumerate(gpus)]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": nodes}})
    spec = {
        "cdiVersion": "0.5.0",
        "kind": CDI_KIND,
        "devices": devices,
        "containerEdits": {
            "deviceNodes": [
                {"path": "/dev/nvidiactl"},
                {"path": "/dev/nvidia-uvm"},
                {"path": "/dev/nvidia-uvm-tools"},
            ],
        },
    }
    # JSON is YAML: the real tool writes YAML for a .yaml output and JSON for a .json one.
    text = json.dumps(spec, indent=2) + "\n"
    output = flags.get("output")
    if not output:
        sys.stdout.write(text)
        return 0
    path = ROOT / output.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    info("Generated CDI spec with version 0.5.0")
    return 0


def cdi_list() -> int:
    """The device names of every specification in the CDI directories."""
    names = []
    for folder in CDI_DIRS:
        for path in sorted((ROOT / folder.lstrip("/")).glob("*")):
            try:
                spec = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            kind = spec.get("kind")
            names += [f"{kind}={d.get('name')}" for d in spec.get("devices") or []]
    info(f"Found {len(names)} CDI devices")
    for name in names:
        print(name)
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
    if argv[:2] not in (["runtime", "configure"], ["cdi", "generate"], ["cdi", "list"]):
        return fail(
            "the gpunode lab's nvidia-ctk supports `runtime configure`, `cdi generate` and "
            f"`cdi list`, not {' '.join(argv)!r}"
        )
    flags = parse_flags(argv[2:])
    if isinstance(flags, str):
        return fail(flags)
    if argv[0] == "cdi":
        return cdi_generate(flags) if argv[1] == "generate" else cdi_list()
    runtime = flags.get("runtime", "docker")
    if runtime == "containerd":
        return configure_containerd(flags)
    if runtime != "docker":
        return fail(f"unrecognized runtime '{runtime}' (the gpunode lab: docker, containerd)")
    return configure_docker(flags)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
