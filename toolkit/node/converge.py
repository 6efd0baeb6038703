"""The converge plan: which components of a node need their role run, from facts read first.

A converge that changes nothing must cost about what reading the facts costs. So provision
reads every fact a component's role depends on in the one probe round trip of
``gpunode_node_facts`` (``PROBE``: the stamps below, the digests of the files they name, the
state of their services; installed versions, holds and the loaded module come from the same
probe), and :func:`plan` (pure, on the controller) decides per component:

- **skip** ("up to date") only when the component's last converge on this node left a stamp,
  the stamp's inputs digest is the one wanted now (same resolved stack and lock, same role
  settings, same role content), every file the role manages still has the digest it had when
  the role finished, every package it pinned is installed at that version and held, every
  service it enables is enabled and active, and (driver) the loaded module is the pinned one;
- **run** (the whole role, as without a plan) on any difference, and on any fact that could not
  be read: the fast path is never taken on a guess.

The stamp (``STAMP_DIR/<component>.json``) is written by the ``gpunode_converge_stamp`` task at
the end of a role that completed, and removed before a role runs, so an interrupted role never
leaves one. Stamps are gpunode's own bookkeeping: they hold digests, never file contents.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolkit.facts.probe import Fact

STAMP_DIR = "/var/lib/gpunode/converged"
STAMP_VERSION = 1

# Component -> (its role, the roles whose tasks it includes). Order is the converge's order.
ROLES: dict[str, tuple[str, ...]] = {
    "driver": ("nvidia_driver", "apt_repository", "apt_pins"),
    "cuda": ("cuda_toolkit", "apt_pins"),
    "nccl": ("nccl", "apt_pins"),
    "fabric_manager": ("fabric_manager", "apt_pins"),
    "imex": ("imex", "apt_pins"),
    "container_runtime": ("container_runtime", "apt_repository", "apt_pins"),
}
COMPONENTS = tuple(ROLES)

# Inputs of a component beyond its role's argument spec: facts its role reads directly.
# The driver's headers and DKMS build follow the running kernel; every role's vars follow the OS.
EXTRA_INPUTS: dict[str, tuple[str, ...]] = {
    "driver": ("ansible_kernel", "gpunode_stack.os"),
    "cuda": ("gpunode_stack.os",),
    "nccl": ("gpunode_stack.os",),
    "fabric_manager": ("gpunode_stack.os",),
    "imex": ("gpunode_stack.os",),
    "container_runtime": ("gpunode_stack.os",),
}

# Role options that name a file on the control machine the role copies to nodes: their
# content is the input, not only their path (a CA bundle renewed in place must converge).
CONTROLLER_FILES = frozenset({"nvidia_driver_ca_bundle"})

UP_TO_DATE = "up to date"

# Runs on the node (python3 is there: Ansible needs it) inside the facts probe: every stamp,
# the sha256 of each file a stamp names (None when missing), and each named service's state.
PROBE = r"""
import glob, hashlib, json, os, subprocess
out = {}
for path in sorted(glob.glob(os.path.join(STAMP_DIR, "*.json"))):
    name = os.path.basename(path)[:-5]
    try:
        with open(path) as f:
            stamp = json.load(f)
        files = {}
        for p in stamp.get("files", {}):
            try:
                with open(p, "rb") as f:
                    files[p] = hashlib.sha256(f.read()).hexdigest()
            except FileNotFoundError:
                files[p] = None
        services = {}
        for s in stamp.get("services", []):
            e = subprocess.run(["systemctl", "is-enabled", s], capture_output=True, text=True)
            a = subprocess.run(["systemctl", "is-active", s], capture_output=True, text=True)
            services[s] = {"enabled": e.stdout.strip(), "active": a.stdout.strip()}
        out[name] = {"stamp": stamp, "files": files, "services": services}
    except Exception as err:
        out[name] = {"error": "%s: %s" % (path, err)}
print(json.dumps(out))
""".replace("STAMP_DIR", repr(STAMP_DIR))


def stamped_packages(probe: Mapping[str, Any] | str | None) -> set[str]:
    """Every package some stamp says its role pinned (their versions are facts to read)."""
    if not isinstance(probe, Mapping):
        return set()
    names: set[str] = set()
    for entry in probe.values():
        recorded = entry.get("stamp") if isinstance(entry, Mapping) else None
        if isinstance(recorded, Mapping) and isinstance(recorded.get("packages"), Mapping):
            names.update(str(name) for name in recorded["packages"])
    return names


@dataclass(frozen=True)
class Decision:
    """What the converge does with one component of one node, and why."""

    component: str
    run: bool
    reason: str
    inputs: str

    def line(self) -> str:
        """``driver: up to date`` or ``cuda: runs (…)``, for the progress display."""
        return (
            f"{self.component}: {self.reason}"
            if not self.run
            else (f"{self.component}: runs ({self.reason})")
        )


def canonical(value: Any) -> str:
    """The canonical JSON of a value (sorted keys, no blanks), the form that is digested."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def content_digest(roles_dir: Path, roles: Iterable[str]) -> str:
    """sha256 over every file of the given roles (path and bytes), in a stable order."""
    digest = hashlib.sha256()
    for role in roles:
        base = roles_dir / role
        for path in sorted(p for p in base.rglob("*") if p.is_file()):
            digest.update(str(path.relative_to(roles_dir)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def inputs_digest(content: str, values: Mapping[str, Any], version: str) -> str:
    """The digest a stamp must carry for its component to count as up to date.

    Args:
        content: :func:`content_digest` of the component's roles.
        values: The component's inputs (its role's options and extra inputs) as resolved for
            the node; a controller file named by a value is represented by its content digest.
        version: gpunode's version.
    """
    return hashlib.sha256(
        canonical({"content": content, "values": values, "gpunode": version}).encode()
    ).hexdigest()


def file_value(value: Any) -> Any:
    """The value of a :data:`CONTROLLER_FILES` option: the file's path and digest when it
    names an existing file on the controller; anything else unchanged."""
    if isinstance(value, str) and value and "\n" not in value:
        path = Path(value)
        try:
            if path.is_file():
                return {"path": value, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
        except OSError:
            return value
    return value


def stamp(
    component: str,
    inputs: str,
    files: Mapping[str, str],
    packages: Mapping[str, str],
    services: Iterable[str],
    loaded_driver: str = "",
) -> dict[str, Any]:
    """The stamp a completed role leaves (file digests as read on the node right after)."""
    return {
        "version": STAMP_VERSION,
        "component": component,
        "inputs": inputs,
        "files": dict(sorted(files.items())),
        "packages": dict(sorted(packages.items())),
        "services": sorted(set(services)),
        "loaded_driver": loaded_driver,
    }


def parse_probe(rc: int | None, text: str) -> dict[str, Any] | str:
    """The probe's output as component -> facts, or the reason it could not be read."""
    if rc is None:
        return "python3 is missing on the node"
    if rc != 0:
        return f"the converge probe failed (exit {rc}): {text.strip()[:200]}"
    try:
        found = json.loads(text.strip().splitlines()[-1] if text.strip() else "")
    except ValueError as err:
        return f"the converge probe printed no JSON: {err}"
    if not isinstance(found, dict):
        return "the converge probe printed no JSON object"
    return found


# The stamps as a probe fact (the node facts probe reads them last).
FACT = Fact("converged", ("python3", "-c", PROBE), parse_probe)


def decide(
    component: str,
    inputs: str,
    probe: Mapping[str, Any] | str | None,
    node: Mapping[str, Any],
) -> Decision:
    """Run or skip one component of one node (pure).

    Args:
        component: One of :data:`COMPONENTS`.
        inputs: The inputs digest wanted now (:func:`inputs_digest`).
        probe: :func:`parse_probe`'s result, or None when the probe did not run.
        node: The node's facts (``gpunode_node``): ``installed``, ``held``, ``loaded_driver``.
    """

    def run(reason: str) -> Decision:
        return Decision(component, True, reason, inputs)

    if probe is None:
        return run("no facts were read")
    if isinstance(probe, str):
        return run(f"facts unreadable: {probe}")
    entry = probe.get(component)
    if entry is None:
        return run("never converged by gpunode on this node")
    if not isinstance(entry, Mapping) or "error" in entry:
        detail = entry.get("error") if isinstance(entry, Mapping) else entry
        return run(f"facts unreadable: {detail}")
    recorded = entry.get("stamp")
    if not isinstance(recorded, Mapping) or recorded.get("version") != STAMP_VERSION:
        return run("its stamp is of another gpunode version")
    if recorded.get("inputs") != inputs:
        return run("the stack, the lock or the role's settings changed since its last converge")
    return _check_stamp(component, inputs, recorded, entry, node)


def _check_stamp(
    component: str,
    inputs: str,
    recorded: Mapping[str, Any],
    entry: Mapping[str, Any],
    node: Mapping[str, Any],
) -> Decision:
    def run(reason: str) -> Decision:
        return Decision(component, True, reason, inputs)

    current_files = entry.get("files")
    if not isinstance(current_files, Mapping):
        return run("facts unreadable: file digests")
    for path, digest in (recorded.get("files") or {}).items():
        if path not in current_files:
            return run(f"facts unreadable: the digest of {path}")
        found = current_files[path]  # None: absent (a file the role removes stays absent)
        if found != digest:
            return run(f"{path} is missing" if found is None else f"{path} changed")
    installed = node.get("installed")
    held = node.get("held")
    if not isinstance(installed, Mapping) or not isinstance(held, list):
        return run("facts unreadable: installed packages and holds")
    for package, version in (recorded.get("packages") or {}).items():
        found = installed.get(package)
        if found != version:
            return run(f"{package}: installed {found or 'nothing'}, pinned {version}")
        if package not in held:
            return run(f"{package} is not held")
    states = entry.get("services")
    if not isinstance(states, Mapping):
        return run("facts unreadable: services")
    for service in recorded.get("services") or []:
        state = states.get(service) or {}
        if state.get("enabled") != "enabled" or state.get("active") != "active":
            return run(
                f"service {service} is {state.get('enabled') or 'unknown'}, "
                f"{state.get('active') or 'unknown'}"
            )
    wanted_module = str(recorded.get("loaded_driver") or "")
    if wanted_module:
        loaded = (node.get("loaded_driver") or {}).get("version")
        if loaded != wanted_module:
            return run(f"loaded NVIDIA module {loaded or 'none'}, pinned {wanted_module}")
    return Decision(component, False, UP_TO_DATE, inputs)


def plan(
    inputs: Mapping[str, str],
    probe: Mapping[str, Any] | str | None,
    node: Mapping[str, Any],
) -> dict[str, Decision]:
    """Every component's decision for one node (components without inputs are not planned)."""
    return {c: decide(c, inputs[c], probe, node) for c in COMPONENTS if c in inputs}


def plan_dicts(decisions: Mapping[str, Decision]) -> dict[str, dict[str, Any]]:
    """Decisions as plain data (the fact ``gpunode_plan``)."""
    return {name: asdict(d) for name, d in decisions.items()}


def plan_lines(fact: Any) -> list[str]:
    """The ``gpunode_plan`` fact of a node as display lines, in converge order."""
    if not isinstance(fact, Mapping):
        return []
    lines = []
    for component in COMPONENTS:
        entry = fact.get(component)
        if isinstance(entry, Mapping):
            lines.append(
                Decision(
                    component,
                    bool(entry.get("run")),
                    str(entry.get("reason")),
                    str(entry.get("inputs")),
                ).line()
            )
    return lines
