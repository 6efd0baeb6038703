"""Version strings of the NVIDIA stack: parsing and ordering (pure functions)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolkit.errors import clip

# ASCII digits only (`\d` also matches fullwidth and Arabic-Indic digits), bounded lengths,
# and `\Z` (`$` also matches before a trailing newline): a version reaches apt pins verbatim.
DRIVER_RE = re.compile(r"^(?P<branch>[0-9]{3})\.[0-9]{1,3}(\.[0-9]{1,3})?\Z")
CUDA_RE = re.compile(r"^(?P<major>[0-9]{1,2})\.(?P<minor>[0-9]{1,2})(\.(?P<patch>[0-9]{1,2}))?\Z")
NCCL_RE = re.compile(
    r"^(?P<version>[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4})-(?P<revision>[0-9]{1,4})"
    r"\+cuda(?P<major>[0-9]{1,2})\.(?P<minor>[0-9]{1,2})\Z"
)
PLAIN_RE = re.compile(r"^[0-9]{1,6}(\.[0-9]{1,6}){1,3}\Z")


def numeric(version: str, width: int = 3) -> tuple[int, ...]:
    """A dotted numeric version as a tuple padded with zeros, for ordering.

    ``"570.26"`` becomes ``(570, 26, 0)``, so it orders before ``"570.124.06"``.
    """
    parts = tuple(int(p) for p in version.split("."))
    return parts + (0,) * (width - len(parts))


def driver_branch(version: str) -> int:
    """The branch of a driver version: ``"550.127.05"`` -> ``550``."""
    return int(version.split(".", 1)[0])


def cuda_full(version: str) -> str:
    """A CUDA version with its patch level: ``"12.8"`` -> ``"12.8.0"``."""
    match = CUDA_RE.match(version)
    if match is None:
        raise ValueError(f"not a CUDA version: {clip(repr(version))}")
    return f"{int(match['major'])}.{int(match['minor'])}.{int(match['patch'] or 0)}"


def cuda_major_minor(version: str) -> tuple[int, int]:
    """``"12.4.1"`` -> ``(12, 4)``."""
    major, minor, _patch = numeric(cuda_full(version))
    return major, minor


@dataclass(frozen=True)
class NcclPin:
    """An NCCL package version: ``2.21.5-1+cuda12.4``."""

    version: str
    revision: str
    cuda_major: int
    cuda_minor: int

    @property
    def cuda(self) -> str:
        return f"{self.cuda_major}.{self.cuda_minor}"

    @property
    def package_version(self) -> str:
        return f"{self.version}-{self.revision}+cuda{self.cuda}"


def parse_nccl(text: str) -> NcclPin:
    """Parse ``2.21.5-1+cuda12.4``.

    Raises:
        ValueError: The text is not of that form.
    """
    match = NCCL_RE.match(text)
    if match is None:
        raise ValueError(f"not an NCCL package version like 2.21.5-1+cuda12.4: {clip(repr(text))}")
    return NcclPin(match["version"], match["revision"], int(match["major"]), int(match["minor"]))
