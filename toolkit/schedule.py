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

This module renders the two units; ``gpunode schedule`` prints or writes them.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import ConfigError, clip
from toolkit.names import NAME_RE

# A systemd time span of one unit (systemd.time(5)): the forms a site writes for an interval.
_SPAN_RE = re.compile(r"^(?P<n>[0-9]{1,6})(?P<unit>min|h|d|w)$")
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
    match = _SPAN_RE.match(every)
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
    interval_minutes(every)
    name = unit_name(inventory)
    for what, path in (("inventory", inventory), ("gpunode", gpunode), ("state dir", state_dir)):
        # systemd expands % (specifiers) and $ (variables) in these lines (systemd.service(5)).
        if any(c in str(path.resolve()) for c in "%$\n\\"):
            raise ConfigError(f"{what} path {clip(str(path))!r}: holds %, $, \\ or a newline")
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
    return Units(name=name, service=service, timer=timer)


def write(units: Units, dest: Path) -> list[Path]:
    """Write both units into ``dest`` (for example /etc/systemd/system); returns their paths.

    Raises:
        ConfigError: ``dest`` is not a directory; nothing written.
    """
    if not dest.is_dir():
        raise ConfigError(f"--dest {dest}: not a directory")
    written = []
    for filename, text in units.files().items():
        path = dest / filename
        path.write_text(text)
        path.chmod(0o644)
        written.append(path)
    return written
