"""Debian version order and the requirement forms gpunode pins with (Debian policy 5.6.12,
dpkg's ``verrevcmp``): a small module of its own, so that the verdict, the lock and the node
facts order versions without importing the index reader that fetches URLs and runs gpgv."""

from __future__ import annotations

import re

# A Debian version (Debian policy 5.6.12): ``[epoch:]upstream[-revision]``; the upstream part
# starts with a digit and holds alphanumerics and ``. + ~`` (``-`` only when a revision
# follows); the revision holds alphanumerics and ``. + ~``. Nothing else: no whitespace, no
# newline, no control character, so a version is one token wherever it is written (apt's
# preferences, ``name=version`` on apt's command line, a terminal).
DEB_VERSION_RE = re.compile(
    r"^(?:[0-9]{1,9}:)?[0-9](?:[A-Za-z0-9.+~-]*[A-Za-z0-9.+~])?(?:-[A-Za-z0-9.+~]+)?\Z"
)
# A Debian package name (Debian policy 5.6.1): lower-case letters, digits and ``+ - .``, at
# least two characters, starting with a letter or digit.
PACKAGE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.\-]+\Z")
# The longest version or name accepted; real ones are under 100 characters.
MAX_DEB_TOKEN = 256


def _order(char: str) -> int:
    if char == "~":
        return -1
    if char.isdigit():
        return 0
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a: str, b: str) -> int:
    while a or b:
        na = re.match(r"^[^\d]*", a)[0]  # type: ignore[index]
        nb = re.match(r"^[^\d]*", b)[0]  # type: ignore[index]
        for i in range(max(len(na), len(nb))):
            ca = _order(na[i]) if i < len(na) else 0
            cb = _order(nb[i]) if i < len(nb) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        a, b = a[len(na) :], b[len(nb) :]
        da = re.match(r"^\d*", a)[0]  # type: ignore[index]
        db = re.match(r"^\d*", b)[0]  # type: ignore[index]
        if int(da or 0) != int(db or 0):
            return -1 if int(da or 0) < int(db or 0) else 1
        a, b = a[len(da) :], b[len(db) :]
    return 0


def split_version(version: str) -> tuple[int, str, str]:
    """``[epoch:]upstream[-revision]`` -> (epoch, upstream, revision)."""
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
    return int(epoch or 0), upstream, revision


def compare_versions(a: str, b: str) -> int:
    """dpkg's order of two versions: -1, 0 or 1 (Debian policy 5.6.12)."""
    ea, ua, ra = split_version(a)
    eb, ub, rb = split_version(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def satisfies(requirement: str, version: str) -> bool:
    """Whether a Debian version meets a requirement.

    Three forms: an exact version; ``[E:]V-*``, any Debian revision of upstream version ``V``;
    ``>=V``, ``V`` or any later version (a floor, for archives that move a package to new
    upstream versions within a release, as Ubuntu does with Docker).
    """
    if requirement.startswith(">="):
        floor = requirement[2:].strip()
        return bool(floor and version) and compare_versions(version, floor) >= 0
    if not requirement.endswith("-*"):
        return requirement == version
    wanted = requirement[:-2]
    epoch, upstream, _revision = split_version(version)
    if ":" in wanted:
        return wanted == f"{epoch}:{upstream}"
    return epoch == 0 and wanted == upstream
