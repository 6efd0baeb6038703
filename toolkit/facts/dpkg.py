"""Packages: dpkg's database (versions, ``Status-Abbrev``), apt's holds, madison, rdepends."""

from __future__ import annotations

from toolkit.facts.probe import Fact

# dpkg-query's output format gpunode reads: name, version, status abbreviation (dpkg-query(1),
# "--showformat"; db:Status-Abbrev is the desired action, then the package status).
DPKG_FORMAT = "${Package}\\t${Version}\\t${db:Status-Abbrev}\\n"


def parse_dpkg_query(text: str) -> dict[str, str]:
    """Installed packages from ``dpkg-query -W`` with Package, Version and db:Status-Abbrev.

    Only packages whose status is installed (``ii``, ``hi``) count; removed-but-configured
    (``rc``) and half-installed ones do not.
    """
    installed = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        name, version, status = parts[0].strip(), parts[1].strip(), parts[2].strip()
        if len(status) >= 2 and status[1] == "i" and version:
            installed[name.split(":")[0]] = version
    return installed


def parse_dpkg_held(text: str) -> set[str]:
    """Held packages from ``dpkg-query -W`` with db:Status-Abbrev (desired state ``h``)."""
    held = set()
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip().startswith("h"):
            held.add(parts[0].strip().split(":")[0])
    return held


def parse_holds(text: str) -> set[str]:
    """Held packages from ``apt-mark showhold`` (one name per line, maybe with ``:arch``)."""
    return {line.strip().split(":")[0] for line in text.splitlines() if line.strip()}


def strip_epoch_revision(apt_version: str) -> str:
    """The upstream part of an apt version: ``550.127.05-1`` -> ``550.127.05``."""
    version = apt_version.split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def parse_madison(text: str) -> dict[str, list[str]]:
    """Versions the repositories offer, from ``apt-cache madison PKG...``.

    Lines look like ``  libnccl2 | 2.21.5-1+cuda12.4 | http://... Packages``.
    """
    offered: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 3 and parts[0] and parts[1]:
            versions = offered.setdefault(parts[0], [])
            if parts[1] not in versions:
                versions.append(parts[1])
    return offered


def parse_rdepends(text: str) -> list[str]:
    """Package names from ``apt-cache rdepends --installed PKG...`` (the reverse dependencies).

    Output is each queried package, a ``Reverse Depends:`` line, then indented names
    (``|`` marks an alternative).
    """
    names = []
    for line in text.splitlines():
        if line.startswith(" ") and line.strip():
            name = line.strip().lstrip("|").split(":")[0].strip()
            if name and name not in names:
                names.append(name)
    return sorted(names)


# Every installed package (name -> version); nothing when dpkg-query failed.
DPKG = Fact(
    "dpkg",
    ("dpkg-query", "-W", "-f", DPKG_FORMAT),
    lambda rc, text: parse_dpkg_query(text) if rc == 0 else {},
)
HOLDS = Fact(
    "holds", ("apt-mark", "showhold"), lambda rc, text: sorted(parse_holds(text)) if rc == 0 else []
)
