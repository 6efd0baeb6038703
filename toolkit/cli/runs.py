"""``gpunode runs``: list the recorded runs and prune them explicitly."""

from __future__ import annotations

import click
from rich.table import Table

from toolkit.cli.options import json_option, yes_option
from toolkit.cli.output import emit_json, out_console, say, shown
from toolkit.printable import printable
from toolkit.records import runs as core

_KIND = click.option("--kind", default=None, help="Only runs of this kind (accept, up, ...).")


@click.group()
def runs() -> None:
    """List and prune the recorded runs (.gpunode/runs or $GPUNODE_STATE_DIR/runs).

    Routine runs rotate per kind; acceptance and `up` runs are evidence and stay until
    pruned here (or until $GPUNODE_KEEP_EVIDENCE_RUNS of their kind exist).
    """


@runs.command("list")
@_KIND
@json_option
def list_(kind: str | None, as_json: bool) -> None:
    """Show the recorded runs, oldest first."""
    found = core.list_runs(kind=kind)
    if as_json:
        emit_json({"runs_dir": str(core.runs_dir()), "runs": [r.to_dict() for r in found]})
        return
    table = Table(title=shown(f"runs ({core.runs_dir()})"), title_justify="left")
    for column in ("run id", "kind", "kept"):
        table.add_column(column)
    for info in found:
        table.add_row(
            shown(info.run_id),
            shown(info.kind or "-"),
            shown("evidence" if info.evidence else "rotates"),
        )
    out_console.print(table)


@runs.command()
@_KIND
@click.option(
    "--keep", type=click.IntRange(min=0), default=0, show_default=True, help="Newest runs kept."
)
@yes_option
@json_option
def prune(kind: str | None, keep: int, yes: bool, as_json: bool) -> None:
    """Remove all but the newest --keep runs of each kind, evidence included."""
    candidates = core.list_runs(kind=kind)
    if not yes and not as_json:
        click.confirm(
            printable(
                f"Remove all but the newest {keep} run(s) of "
                f"{'kind ' + kind if kind else 'every kind'} from {core.runs_dir()}?"
            ),
            abort=True,
            err=True,
        )
    elif not yes:
        raise click.UsageError("--json cannot ask for confirmation: add --yes")
    removed = core.prune(kind=kind, keep=keep)
    if as_json:
        emit_json({"removed": [p.name for p in removed], "examined": len(candidates)})
    else:
        say(f"removed {len(removed)} of {len(candidates)} run(s)")
