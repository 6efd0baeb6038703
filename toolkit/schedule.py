"""The scheduled re-validation: a systemd service and timer on the control machine.

``gpunode up --accept-only`` re-accepts the nodes that need it and only those: a not-ready
node whose passive checks are clean again, a verdict that expired or is older than the
inventory's ``revalidate_after_days``, a node whose hardware identity changed (repaired); a
ready node costs one look, and a node that needs disks or provisioning is reported, never
changed (no install, no reboot on a timer). Run from a timer, that is the scheduled
re-validation of issue 26, at the
lowest priority the control machine has (``Nice=19``, the idle CPU and I/O classes:
systemd.exec(5)) and, where the inventory's executor is Slurm, as Slurm jobs at the lowest
priority a job can have (toolkit/acceptance/executors/slurm.py). The timer starts a run one
interval after the last one ended (``OnUnitInactiveSec``, systemd.timer(5)), so two runs never
overlap, and exit status 1 (a node not ready) is a run that worked.

This module renders the two units; ``gpunode schedule`` prints or writes them. Every value
that reaches a unit is checked against the unit-file grammar first (systemd.syntax(7): a
setting is one line, so no newline or other control character; no specifier ``%`` or variable
``$`` that systemd would expand, no ``\\`` escape; the interval as systemd.time(7) reads one),
and the rendered units again as a whole; they are written into an existing, writable folder
that is not a kernel's pseudo filesystem, both or neither.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import stat
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ConfigError, clip
from toolkit.names import NAME_RE

# A systemd time span of one unit (systemd.time(7)): the forms a site writes for an interval.
# fullmatch, not `$`: `$` also matches before a final newline (`6h\n` would end a setting).
_SPAN_RE = re.compile(r"(?P<n>[0-9]{1,6})(?P<unit>min|h|d|w)")
# Folders of the kernel's pseudo filesystems (proc(5), sysfs(5), devtmpfs): never unit folders.
PSEUDO_ROOTS = (Path("/proc"), Path("/sys"), Path("/dev"))
_SPAN_MINUTES = {"min": 1, "h": 60, "d": 24 * 60, "w": 7 * 24 * 60}
# Each run reads every node and re-accepts some: more often than this only adds load.
MIN_INTERVAL_MINUTES = 15
UNIT_PREFIX = "gpunode-revalidate"


@dataclass(frozen=True)
class Units:
    """The service and timer of one inventory's scheduled re-validation."""

    name: str
    service: str
    timer: str

    def files(self) -> dict[str, str]:
        return {f"{self.name}.service": self.service, f"{self.name}.timer": self.timer}


def interval_minutes(every: str) -> int:
    """Minutes of an interval written as systemd writes one (``30min``, ``6h``, ``1d``, ``1w``).

    Raises:
        ConfigError: Not one of those forms, or shorter than ``MIN_INTERVAL_MINUTES``.
    """
    match = _SPAN_RE.fullmatch(every)
    if match is None:
        raise ConfigError(
            f"--every {clip(every)!r}: write a number and one unit of min, h, d or w (6h, 1d)"
        )
    minutes = int(match["n"]) * _SPAN_MINUTES[match["unit"]]
    if minutes < MIN_INTERVAL_MINUTES:
        raise ConfigError(
            f"--every {every}: at least {MIN_INTERVAL_MINUTES}min (each run reads every node)"
        )
    return minutes


def unit_value(what: str, value: str) -> str:
    """``value`` if it can stand in a unit file's setting as it is (systemd.syntax(7)).

    Raises:
        ConfigError: It holds a control character (a newline would start another setting) or
            a character systemd reads as a specifier (%), a variable ($) or an escape (\\).
    """
    bad = next(
        (c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") or c in "%$\\"),
        None,
    )
    if bad is not None:
        char = bad if bad.isprintable() else repr(bad)
        raise ConfigError(
            f"{what} {clip(value)!r}: holds {char}; a unit file's setting is one line, and "
            "systemd expands %, $ and \\ in it (systemd.syntax(7))"
        )
    return value


def unit_name(inventory: Path) -> str:
    """``gpunode-revalidate-<inventory folder>``: one pair of units per inventory."""
    folder = inventory.resolve().name
    if not NAME_RE.match(folder):
        raise ConfigError(
            f"inventory folder {clip(folder)!r}: its name must match {NAME_RE.pattern} "
            "to name the units after it"
        )
    return f"{UNIT_PREFIX}-{folder}"


def render(
    inventory: Path,
    every: str,
    *,
    gpunode: Path,
    state_dir: Path,
    hooks: tuple[str, ...] = (),
) -> Units:
    """The units that run ``gpunode up -i INVENTORY --accept-only`` every ``every``.

    Args:
        inventory: The inventory directory (written as an absolute path).
        every: The interval between the end of a run and the start of the next.
        gpunode: The ``gpunode`` executable the service runs (absolute).
        state_dir: Where the runs are recorded (``$GPUNODE_STATE_DIR``, absolute).
        hooks: Schedulers to mark nodes in (``up --hook``).

    Raises:
        ConfigError: A bad interval or inventory folder name; nothing written.
    """
    unit_value("--every", every)
    interval_minutes(every)
    name = unit_name(inventory)
    for what, path in (("inventory", inventory), ("gpunode", gpunode), ("state dir", state_dir)):
        unit_value(f"{what} path", str(path.resolve()))
    for hook in hooks:
        unit_value("--hook", hook)
    command = [str(gpunode.resolve()), "up", "-i", str(inventory.resolve()), "--accept-only"]
    for hook in hooks:
        command += ["--hook", hook]
    service = f"""\
# Written by `gpunode schedule` (toolkit/schedule.py): the scheduled re-validation.
[Unit]
Description=gpunode re-validation of {inventory.resolve()} (gpunode up, lowest priority)
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
Environment={shlex.quote(f"GPUNODE_STATE_DIR={state_dir.resolve()}")}
ExecStart={shlex.join(command)}
# 1: a node is not ready; the run itself worked.
SuccessExitStatus=1
Nice=19
CPUSchedulingPolicy=idle
IOSchedulingClass=idle
"""
    timer = f"""\
# Written by `gpunode schedule` (toolkit/schedule.py).
[Unit]
Description=Run {name}.service {every} after the last run ended

[Timer]
# The first run one interval after the timer starts, then one interval after each run ended
# (systemd.timer(5)): runs never overlap, however long one takes.
OnActiveSec={every}
OnUnitInactiveSec={every}
RandomizedDelaySec=5min

[Install]
WantedBy=timers.target
"""
    units = Units(name=name, service=service, timer=timer)
    for filename, text in units.files().items():  # the whole of each, again
        for line in text.splitlines():
            unit_value(filename, line)
    return units


def check_dest(dest: Path) -> Path:
    """``dest`` resolved, if units can be written there.

    Raises:
        ConfigError: It is not an existing directory, is on a kernel's pseudo filesystem
            (/proc, /sys, /dev: named) or is not writable.
    """
    try:
        where = dest.resolve(strict=True)
    except (OSError, RuntimeError) as err:
        why = getattr(err, "strerror", None) or "cannot be resolved"
        raise ConfigError(f"--dest {clip(str(dest))!r}: {why}") from None
    for root in PSEUDO_ROOTS:
        if where == root or root in where.parents:
            raise ConfigError(
                f"--dest {clip(str(dest))!r}: inside {root}, a pseudo filesystem of the kernel; "
                "units go into a folder such as /etc/systemd/system"
            )
    if not where.is_dir():
        raise ConfigError(f"--dest {clip(str(dest))!r}: not a directory")
    if not os.access(where, os.W_OK | os.X_OK):
        raise ConfigError(f"--dest {clip(str(dest))!r}: not writable by this user")
    return where


def write(units: Units, dest: Path) -> list[Path]:
    """Write both units into ``dest`` (for example /etc/systemd/system); returns their paths.

    Each unit is written to a new temporary file beside its place first, and only when both
    are whole do they replace their names: a failure leaves no unit half-written.

    Raises:
        ConfigError: ``dest`` is refused (:func:`check_dest`), or writing failed (the file
            and the reason are named); nothing written.
    """
    folder = check_dest(dest)
    for filename in units.files():
        try:
            there = (folder / filename).lstat()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise ConfigError(f"{folder / filename}: cannot read: {err.strerror}") from None
        if not stat.S_ISREG(there.st_mode):  # os.replace would write one unit and not this
            raise ConfigError(f"{folder / filename}: not a regular file; remove it first")
    staged: list[tuple[str, Path]] = []
    try:
        for filename, text in units.files().items():
            fd, temporary = tempfile.mkstemp(prefix=f".{filename}.", dir=folder)
            staged.append((temporary, dest / filename))
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                os.fchmod(out.fileno(), 0o644)
        for temporary, path in staged:
            os.replace(temporary, path)
    except OSError as err:
        where = err.filename or folder
        raise ConfigError(
            f"--dest {clip(str(dest))!r}: cannot write {where}: {err.strerror or err}"
        ) from None
    finally:
        for temporary, _path in staged:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)
    return [path for _temporary, path in staged]
