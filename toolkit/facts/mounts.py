"""Mounted filesystems, from ``findmnt``."""

from __future__ import annotations

import re

from toolkit.facts.probe import Fact


def parse_findmnt(text: str) -> dict[str, dict[str, str]]:
    """Mount point -> its source and filesystem, from ``findmnt --raw --noheadings --output
    TARGET,SOURCE,FSTYPE`` (raw mode escapes blanks as ``\x20``)."""
    mounts: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 3 or not fields[0].startswith("/"):
            continue
        target, source, fstype = (_unescape_findmnt(f) for f in fields)
        mounts[target] = {"source": source, "fstype": fstype}
    return mounts


def _unescape_findmnt(field: str) -> str:
    return re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: chr(int(m.group(1), 16)), field)


MOUNTS = Fact(
    "mounts",
    ("findmnt", "--raw", "--noheadings", "--output", "TARGET,SOURCE,FSTYPE"),
    lambda rc, text: parse_findmnt(text) if rc == 0 else {},
)
