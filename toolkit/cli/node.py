"""``gpunode node``: one node's records; ``history`` shows its passport."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from toolkit import runs
from toolkit.cli.options import inventory_option, json_option
from toolkit.cli.output import emit_json, out_console, say, shown
from toolkit.errors import EXIT_USAGE, ConfigError
from toolkit.inventory import load_inventory
from toolkit.passport import DEFAULT_SHARE, FIGURES, passport, read_fleet


@click.group()
def node() -> None:
    """One node's records across the recorded runs."""


@node.command(
    epilog="""\b
Exit codes: 0 shown (flags or not), 2 the node is not in the inventory or a record is bad
(a run file that cannot be read is named, and the rest is still shown).

\b
Examples:
  gpunode node history gpunode-node-1 -i inventories/lab
  gpunode node history gpunode-node-1 -i inventories/lab --json
"""
)
@click.argument("name")
@inventory_option
@click.option(
    "--share",
    type=float,
    default=DEFAULT_SHARE,
    show_default=True,
    help="How far (0.3: 30 %) a figure may fall below the node's own baseline or the fleet's "
    "before it is flagged.",
)
@json_option
@click.pass_context
def history(ctx: click.Context, name: str, inventory: Path, share: float, as_json: bool) -> None:
    """Show a node's passport: identity, counters and figures over time, with flags.

    From the recorded acceptance runs and passive checks: each GPU's slot, serial and UUID,
    the system's serials, NIC MACs and disk serials, remapped rows, and busbw, GEMM, memory
    bandwidth and storage p99 per run. Flags a swapped GPU, a failed GPU that came back,
    remaps rising run over run, and a figure far below the node's own median or the fleet's.
    """
    hosts = [h.name for h in load_inventory(inventory).hosts_for(None)]
    if name not in hosts:
        raise ConfigError(f"{inventory}: no host {name!r} (hosts: {', '.join(hosts)})")
    reading = read_fleet(runs.runs_dir(), hosts)
    card = passport(name, reading.observations, share, reading.problems)
    for problem in card.problems:
        say(f"problem: run {problem.run_id}: {problem.message}")
    if as_json:
        emit_json(card.to_dict())
        ctx.exit(EXIT_USAGE if card.problems else 0)
    table = Table(title=shown(f"{name}: {len(card.observations)} run(s)"), title_justify="left")
    for column in ("run", "kind", "ok", "GPU serials", "remapped rows", *FIGURES):
        table.add_column(column)
    for obs in card.observations:
        table.add_row(
            shown(obs.run_id),
            shown(obs.kind),
            shown("-" if obs.ok is None else "yes" if obs.ok else "no"),
            shown(" ".join(str(g.get("serial")) for g in obs.gpus) or "-"),
            shown(" ".join(str(g.get("remapped_rows")) for g in obs.gpus) or "-"),
            *(shown(f"{obs.figures[f]:g}" if f in obs.figures else "-") for f in FIGURES),
        )
    out_console.print(table)
    for flag in card.flags:
        out_console.print(
            Text.assemble(shown(f"{flag.kind}: ", "bold yellow"), shown(flag.message))
        )
    if not card.flags:
        out_console.print(shown("no flags", "green"))
    if card.problems:
        ctx.exit(EXIT_USAGE)
