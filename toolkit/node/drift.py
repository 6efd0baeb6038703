"""Drift: what is pinned against what a node has installed, held and loaded."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from toolkit.facts.nvidia import LoadedDriver


@dataclass(frozen=True)
class Drift:
    """One difference between what is pinned and what a node has."""

    component: str
    package: str
    pinned: str
    found: str
    kind: str  # "version" | "missing" | "not-held" | "loaded"

    def message(self, host: str = "") -> str:
        """A sentence naming the node (when given), the package and both versions."""
        prefix = f"{host}: " if host else ""
        if self.kind == "not-held":
            return f"{prefix}{self.package} {self.found} is not held"
        if self.kind == "missing":
            return f"{prefix}{self.package} pinned {self.pinned} is not installed"
        if self.kind == "loaded":
            return f"{prefix}driver module loaded {self.found}, pinned {self.pinned}"
        return f"{prefix}{self.package} pinned {self.pinned}, installed {self.found}"


COMPONENTS = ("driver", "cuda", "nccl", "fabric_manager", "imex", "container_toolkit")


def pinned_packages(resolved: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Component -> {package: exact version} from a resolved stack (disabled parts left out)."""
    pins: dict[str, dict[str, str]] = {}
    for component in COMPONENTS:
        part = resolved.get(component)
        if not isinstance(part, Mapping):
            continue
        if component in ("fabric_manager", "imex") and not part.get("enabled", True):
            continue
        packages = dict(part.get("packages") or {})
        if component == "driver":
            packages.update(part.get("pinning_packages") or {})
        pins[component] = {str(k): str(v) for k, v in packages.items()}
    return pins


def compare(
    resolved: Mapping[str, Any],
    installed: Mapping[str, str],
    held: Iterable[str],
    loaded: LoadedDriver,
) -> tuple[dict[str, Any], list[Drift]]:
    """Pinned vs installed vs loaded for one node.

    Args:
        resolved: The node's resolved stack (``gpunode_stack``).
        installed: Installed package versions (``parse_dpkg_query``).
        held: Held package names (``parse_holds``).
        loaded: The loaded driver (``parse_nvidia_smi_driver``).

    Returns:
        A report (component -> package -> pinned/installed/held) and every drift found.
    """
    held_set = set(held)
    report: dict[str, Any] = {}
    drifts: list[Drift] = []
    for component, packages in pinned_packages(resolved).items():
        rows = {}
        for package, pinned in sorted(packages.items()):
            found = installed.get(package)
            is_held = package in held_set
            rows[package] = {"pinned": pinned, "installed": found, "held": is_held}
            if found is None:
                drifts.append(Drift(component, package, pinned, "", "missing"))
            elif found != pinned:
                drifts.append(Drift(component, package, pinned, found, "version"))
            elif not is_held:
                drifts.append(Drift(component, package, pinned, found, "not-held"))
        report[component] = rows
    driver = resolved.get("driver") or {}
    pinned_driver = str(driver.get("version") or "")
    loaded_text = loaded.version or (
        f"mismatch (library {loaded.library_version})" if loaded.mismatch else loaded.detail
    )
    report["loaded_driver"] = {
        "pinned": pinned_driver,
        "loaded": loaded.version,
        "mismatch": loaded.mismatch,
        "detail": loaded.detail,
    }
    if pinned_driver and loaded.version != pinned_driver:
        drifts.append(
            Drift("driver", "kernel module", pinned_driver, loaded_text or "none", "loaded")
        )
    return report, drifts


def drift_dicts(host: str, drifts: Iterable[Drift]) -> list[dict[str, str]]:
    """Drifts as plain data with their message (for JSON and for node state reasons)."""
    return [{**asdict(d), "host": host, "message": d.message(host)} for d in drifts]
