"""Debian version order and the requirement forms gpunode pins with (Debian policy 5.6.12,
dpkg's ``verrevcmp``): a small module of its own, so that the verdict, the lock and the node
facts order versions without importing the index reader that fetches URLs and runs gpgv."""

from __future__ import annotations

import re

# A Debian version (Debian Policy 5.6.12, deb-version(7)): ``[epoch:]upstream[-revision]``.
# The epoch is an unsigned integer (here at most 9 digits: dpkg refuses one over INT_MAX,
# and real epochs are one digit). The upstream part starts with a digit and holds
# alphanumerics and ``. + ~``, plus ``-`` only when a revision follows and ``:`` only when an
# epoch precedes ("if there is no debian_revision then hyphens are not allowed; if there is
# no epoch then colons are not allowed"): dpkg splits the epoch at the first colon and the
# revision at the last hyphen, so ``1:2:3-1`` is epoch 1, upstream ``2:3``, revision 1. The
# revision holds alphanumerics and ``. + ~``. Nothing else: no whitespace, no newline, no
# control character, so a version is one token wherever it is written (apt's preferences,
# ``name=version`` on apt's command line, a terminal). dpkg only warns about an upstream part
# that does not start with a digit (Policy: "should start with a digit"); gpunode refuses it.
_UPSTREAM = r"[0-9][A-Za-z0-9.+~{colon}]*"
_WITH_REVISION = r"[0-9][A-Za-z0-9.+~{colon}-]*-[A-Za-z0-9.+~]+"
DEB_VERSION_RE = re.compile(
    r"^(?:[0-9]{1,9}:(?:"
    + _UPSTREAM.format(colon=":")
    + "|"
    + _WITH_REVISION.format(colon=":")
    + ")|"
    + _UPSTREAM.format(colon="")
    + "|"
    + _WITH_REVISION.format(colon="")
    + r")\Z"
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


def version_problem(text: str) -> str | None:
    """Why ``text`` is not a Debian version (Debian Policy 5.6.12), or None when it is one.

    The reasons are dpkg's own (``parseversion``), so that a refusal reads like apt's.
    """
    if len(text) > MAX_DEB_TOKEN:
        return f"longer than {MAX_DEB_TOKEN} characters"
    if DEB_VERSION_RE.match(text):
        return None
    if not text:
        return "empty"
    if any(c.isspace() for c in text):
        return "it has embedded whitespace"
    epoch, colon, rest = text.partition(":")
    if not colon:
        epoch, rest = "", text
    elif not epoch:
        return "the epoch before ':' is empty"
    elif not epoch.isascii() or not epoch.isdigit():
        return "the epoch before the first ':' is not a number"
    elif len(epoch) > 9:
        return "the epoch has more than 9 digits"
    upstream, hyphen, revision = rest.rpartition("-")
    if not hyphen:
        upstream, revision = rest, ""
    elif not revision:
        return "the revision after the last '-' is empty"
    if not upstream:
        return "the upstream version is empty"
    if not upstream[0].isascii() or not upstream[0].isdigit():
        return "the upstream version does not start with a digit"
    if any(not _plain(c, ".+~-:") for c in upstream):
        return "the upstream version has a character outside A-Za-z0-9 . + ~ - :"
    return "the revision has a character outside A-Za-z0-9 . + ~"


def _plain(char: str, others: str) -> bool:
    return (char.isascii() and char.isalnum()) or char in others


def split_version(version: str) -> tuple[int, str, str]:
    """``[epoch:]upstream[-revision]`` -> (epoch, upstream, revision), split as dpkg splits:
    the epoch at the first colon, the revision at the last hyphen.

    Raises:
        ValueError: Not a Debian version (the message says why).
    """
    problem = version_problem(version)
    if problem is not None:
        raise ValueError(f"not a Debian version ({problem}): {version[:MAX_DEB_TOKEN]!r}")
    epoch, colon, rest = version.partition(":")
    if not colon:
        epoch, rest = "0", version
    upstream, hyphen, revision = rest.rpartition("-")
    if not hyphen:
        upstream, revision = rest, ""
    return int(epoch), upstream, revision


def compare_versions(a: str, b: str) -> int:
    """dpkg's order of two versions: -1, 0 or 1 (Debian Policy 5.6.12).

    Raises:
        ValueError: Either is not a Debian version.
    """
    ea, ua, ra = split_version(a)
    eb, ub, rb = split_version(b)
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def requirement_problem(requirement: str) -> str | None:
    """Why ``requirement`` is not one of the three forms :func:`satisfies` reads, or None."""
    if requirement.startswith(">="):
        problem = version_problem(requirement[2:])
        return None if problem is None else f"the floor after '>=' is not a version: {problem}"
    if requirement.endswith("-*"):
        problem = version_problem(requirement[:-2])
        return None if problem is None else f"the version before '-*' is not one: {problem}"
    return version_problem(requirement)


def satisfies(requirement: str, version: str) -> bool:
    """Whether a Debian version meets a requirement.

    Three forms: an exact version; ``[E:]V-*``, any Debian revision of upstream version ``V``;
    ``>=V``, ``V`` or any later version (a floor, for archives that move a package to new
    upstream versions within a release, as Ubuntu does with Docker).
    """
    if requirement.startswith(">="):
        floor = requirement[2:].strip()
        if version_problem(floor) is not None or version_problem(version) is not None:
            return False
        return compare_versions(version, floor) >= 0
    if not requirement.endswith("-*"):
        return requirement == version
    wanted = requirement[:-2]
    if version_problem(version) is not None:
        return False
    epoch, upstream, _revision = split_version(version)
    if ":" in wanted:
        return wanted == f"{epoch}:{upstream}"
    return epoch == 0 and wanted == upstream
