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


# A node's name in its scheduler, as gpunode passes it to `scontrol update NodeName=<name>`,
# `sbatch --nodelist=<name>` and `kubectl label node <name>`: exactly one node. scontrol(1)
# and sbatch(1) read a node list there, expanded by Slurm's hostlist syntax (slurm.conf(5),
# "NodeName": `lx[10-20]`; lists separated by `,` or whitespace), and scontrol's `ALL` (any
# case: Slurm compares its keywords so) names every node; so a name is one plain name: the
# host-name characters of NAME_RE, never `[`, `]`, `,`, whitespace or a leading `-` (an option
# to kubectl), and not ALL. Kubernetes narrows it further (RFC 1123 lowercase), and kubectl
# refuses the rest itself.
SCHEDULER_RESERVED = ("all",)
# Other Slurm names gpunode passes on a command line (partition, license, submit host).
SLURM_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def scheduler_name_error(name: object) -> str | None:
    """Why ``name`` cannot be one scheduler node's name, or None when it can."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return (
            "not one node name (letters, digits, '_', '.' and '-', not starting with '.' or '-'; "
            "no Slurm hostlist: '[', ']', ',' or whitespace)"
        )
    if name.lower() in SCHEDULER_RESERVED:
        return f"{name} is Slurm's word for every node"
    return None


def check_scheduler_name(name: str, what: str = "scheduler node name") -> str:
    """A scheduler node name checked by :func:`scheduler_name_error`.

    Raises:
        ConfigError: It names no node or more than one; the message shows it (cut short).
    """
    why = scheduler_name_error(name)
    if why:
        raise ConfigError(f"not a valid {what}: {clip(repr(name))}: {why}")
    return name
