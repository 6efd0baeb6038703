"""``gpunode schedule``: the scheduled re-validation's systemd units, printed or written."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from toolkit.cli.options import hooks_option, inventory_option
from toolkit.cli.output import out_console, shown
from toolkit.records.runs import state_dir
from toolkit.schedule import render, write


@click.command(
    epilog="""\b
Exit codes: 0 written (or printed), 2 a bad interval, path or inventory folder name.

\b
Examples:
  gpunode schedule -i inventories/prod --every 6h
  gpunode schedule -i inventories/prod --every 1d --hook slurm --dest /etc/systemd/system
  systemctl daemon-reload && systemctl enable --now gpunode-revalidate-prod.timer
"""
)
@inventory_option
@click.option(
    "--every",
    required=True,
    help="The time from the end of one run to the start of the next (15min at least: 6h, 1d).",
)
@hooks_option
@click.option(
    "--dest",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write the two units into this folder (e.g. /etc/systemd/system) instead of printing.",
)
def schedule(inventory: Path, every: str, hooks: tuple[str, ...], dest: Path | None) -> None:
    """Re-validate the fleet on a timer: `gpunode up --accept-only`, lowest priority.

    Renders a systemd service and timer for this control machine. The service runs `gpunode
    up -i INVENTORY --accept-only` with Nice=19 and the idle CPU and I/O classes: ready nodes
    cost one look; nodes whose passive checks are clean again, whose verdict expired or that
    were repaired are accepted again (as lowest-priority Slurm jobs where the inventory's
    executor is Slurm); a node that needs disks or provisioning is reported, never changed.
    The runs are recorded in this shell's $GPUNODE_STATE_DIR (or ./.gpunode).
    """
    found = shutil.which("gpunode")
    gpunode = Path(found) if found else Path(sys.executable).parent / "gpunode"
    units = render(inventory, every, gpunode=gpunode, state_dir=state_dir(), hooks=hooks)
    if dest is None:
        for filename, text in units.files().items():
            click.echo(f"# --- {filename}\n{text}", nl=False)
        return
    for path in write(units, dest):
        out_console.print(shown(f"wrote {path}"))
    out_console.print(
        shown(f"enable it: systemctl daemon-reload && systemctl enable --now {units.name}.timer")
    )
