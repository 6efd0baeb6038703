"""Apt pins against what the repositories offer and what a node has: which versions to install,
which packages must go, and whether a driver found on the node may stay."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cmp_to_key
from typing import Any

from toolkit.facts.dpkg import strip_epoch_revision
from toolkit.facts.driver import PRECOMPILED, ExistingDriver
from toolkit.stack.debversion import compare_versions, satisfies


def missing_pins(pins: Mapping[str, str], offered: Mapping[str, Iterable[str]]) -> list[str]:
    """``package=version`` (``package (>=V)`` for a floor) of every pin the repositories do not
    carry, sorted."""
    return sorted(
        f"{name} ({version})" if version.startswith(">=") else f"{name}={version}"
        for name, version in pins.items()
        if version not in set(offered.get(name, ()))
    )


def pick_versions(pins: Mapping[str, str], offered: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Exact versions for pins that may be requirements (``V-*``: any Debian revision of ``V``;
    ``>=V``: ``V`` or later, see :func:`toolkit.stack.debversion.satisfies`).

    Each requirement becomes the highest offered version that satisfies it; an exact pin, or a
    requirement nothing satisfies, stays as it is (the availability check then names it).
    """
    picked = {}
    for name, wanted in pins.items():
        fits = [v for v in offered.get(name, ()) if satisfies(wanted, v)]
        picked[name] = max(fits, key=cmp_to_key(compare_versions)) if fits else wanted
    return picked


_BRANCH_IN_NAME = re.compile(r"-(\d{3})(?:-|$)")
# Names of the proprietary module flavour only: Ubuntu's branch-suffixed and (from R590)
# unbranched metas and DKMS packages, Debian's nvidia-kernel-dkms, cuda-drivers. Debian's
# nvidia-driver serves both flavours, but it is pinned in both, so never judged here.
_PROPRIETARY_ONLY = re.compile(
    r"^(nvidia-driver(-\d{3})?|nvidia-dkms(-\d{3})?|nvidia-kernel-dkms|cuda-drivers(-\d{3})?)$"
)


def is_stale_driver_package(name: str, pins: Mapping[str, str], branch: str, flavour: str) -> bool:
    """Whether an installed driver-family package belongs to another pin and must go.

    Dependencies of the pinned packages (``libnvidia-compute-<branch>``, ``nvidia-persistenced``
    ...) are not pinned themselves; they stay. A package goes when its name carries another
    branch, when it is another version's lock package, or when it belongs to the other module
    flavour (``nvidia-open``, ``*-open``, NVIDIA's debian12 ``nvidia-kernel-open-dkms``, Debian's
    ``nvidia-open-kernel-dkms`` versus ``nvidia-driver-<b>``, ``nvidia-kernel-dkms``,
    ``cuda-drivers``).
    """
    if name in pins:
        return False
    match = _BRANCH_IN_NAME.search(name)
    if match and match.group(1) != branch:
        return True
    if name.startswith("nvidia-driver-pinning-"):
        return True
    if name == "nvidia-open":
        # The R580+ open meta-package: pinned whenever it belongs to the stack.
        return True
    if flavour == "open":
        return bool(_PROPRIETARY_ONLY.match(name))
    return (
        name.startswith("nvidia-open")
        or name.endswith("-open")
        or name == "nvidia-kernel-open-dkms"
    )


def family_changes(
    installed: Mapping[str, str],
    pins: Mapping[str, str],
    branch: str = "",
    flavour: str = "",
) -> dict[str, list[str]]:
    """What moving to ``pins`` does to installed packages of one family.

    Args:
        installed: Installed packages of the family (name -> version).
        pins: The pinned packages of the family (name -> exact version).
        branch: The pinned driver branch (``550``); with ``flavour``, enables the driver rules
            of :func:`is_stale_driver_package`. Without them every unpinned package is stale.
        flavour: ``open`` or ``proprietary``.

    Returns:
        ``stale``: installed, belonging to another pin (to remove); ``moving``: pinned,
        installed at another version (to unhold and replace); ``install``: pinned, absent.
    """
    if branch:
        stale = [n for n in installed if is_stale_driver_package(n, pins, branch, flavour)]
    else:
        stale = [n for n in installed if n not in pins]
    return {
        "stale": sorted(stale),
        "moving": sorted(
            name
            for name, version in pins.items()
            if name in installed and installed[name] != version
        ),
        "install": sorted(name for name in pins if name not in installed),
    }


@dataclass(frozen=True)
class DriverDecision:
    """What provision does with the driver it found: proceed, adopt it, or refuse the node."""

    action: str  # "proceed" | "adopt" | "refuse"
    message: str


def decide_existing_driver(
    existing: ExistingDriver,
    driver: Mapping[str, Any],
    pins: Mapping[str, str],
    managed: bool,
    host: str = "",
) -> DriverDecision:
    """Whether provision may go on with the driver a node has (pure; preflight asks it).

    Args:
        existing: ``classify_existing_driver`` of the node.
        driver: The resolved stack's driver (``version``, ``branch``, ``flavour``).
        pins: The driver's pinned packages (name -> version, from the lock).
        managed: gpunode installed this node's driver (a converge stamp or a node state):
            the driver role moves its own packages between pins.
        host: The node's name, for the messages.

    A .run install is always refused (the way out: its uninstaller, a reboot, a rerun). A
    package install gpunode did not make is adopted only when it is the pin: every pinned
    package installed is at its pinned version, no package of another branch or flavour is
    there, and the rest are of the pinned version; any other is refused, with the purge that
    removes it.
    """
    prefix = f"{host}: " if host else ""
    found = f"NVIDIA driver {existing.version or '(version unknown)'}"
    if existing.kind == "none":
        return DriverDecision("proceed", f"{prefix}no NVIDIA driver installed")
    if existing.kind == "runfile":
        return DriverDecision(
            "refuse",
            f"{prefix}{found} was installed by NVIDIA's .run installer (files no package owns: "
            f"{', '.join(existing.files)}); gpunode installs the driver with apt and the two "
            "must not be mixed. Nothing was changed. Way out: run `sudo nvidia-uninstall "
            "--silent` on the node, reboot it, then rerun.",
        )
    installed = dict(existing.packages or {})
    if managed:
        return DriverDecision("proceed", f"{prefix}{found} installed by gpunode")
    pinned = str(driver.get("version") or "")
    branch = str(driver.get("branch") or pinned.split(".")[0])
    flavour = str(driver.get("flavour") or "")
    off_pin = [n for n in installed if n in pins and not satisfies(pins[n], installed[n])]
    stale = [
        n
        for n in installed
        if n not in pins
        and (
            PRECOMPILED.match(n)
            or is_stale_driver_package(n, pins, branch, flavour)
            or strip_epoch_revision(installed[n]) != pinned
        )
    ]
    listed = ", ".join(f"{n} {installed[n]}" for n in sorted(installed))
    if not off_pin and not stale and any(n in pins for n in installed):
        return DriverDecision(
            "adopt",
            f"{prefix}{found} from {existing.origin()} is the pinned {flavour} driver "
            f"({listed}): adopted, provision holds it",
        )
    return DriverDecision(
        "refuse",
        f"{prefix}{found} is installed from {existing.origin()} ({listed}); the stack pins "
        f"the {flavour} driver {pinned} ({', '.join(f'{n} {v}' for n, v in sorted(pins.items()))})"
        ". Nothing was changed. Way out: run `sudo apt-get purge "
        f"{' '.join(sorted(installed))}` on the node, reboot it, then rerun.",
    )
