"""Group and host names: the one rule they follow, and the only way a path is built from one.

Below the inventory reader, so that what names files after a group or host (the stack lock,
run records, certificates) need not read inventories.
"""

from __future__ import annotations

import re
from pathlib import Path

from toolkit.errors import ConfigError, clip

# Group and host names: letters, digits, `_`, `.` and `-`, not starting with `.` or `-`, so a
# name is always one safe path component (host_vars/<host>, nodes/<host>.result.json).
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,252}\Z")


def check_name(name: str, what: str = "host") -> str:
    """A group or host name checked against :data:`NAME_RE`, so it is safe as a path component.

    Raises:
        ConfigError: The name breaks the rule; the message shows it (cut short).
    """
    if not NAME_RE.match(name):
        raise ConfigError(
            f"not a valid {what} name: {clip(name)!r} (letters, digits, '_', '.' and '-', not "
            "starting with '.' or '-', at most 253 characters)"
        )
    return name


def name_path(base: Path, name: str, suffix: str = "", what: str = "host") -> Path:
    """``base/<name><suffix>`` for a group or host name, never anywhere else.

    Every path built from an inventory name goes through here (``host_vars/<host>``, a run's
    ``nodes/<host>.result.json``).

    Raises:
        ConfigError: The name is not a valid name (:func:`check_name`).
    """
    return base / f"{check_name(name, what)}{suffix}"
