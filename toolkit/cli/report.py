"""``gpunode report``: the fleet's HTML report from the recorded acceptance runs."""

from __future__ import annotations

from pathlib import Path

import click

from toolkit.cli.options import compose, inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, say
from toolkit.errors import EXIT_USAGE, ConfigError
from toolkit.node import nodefile
from toolkit.records import runs
from toolkit.records.passport import passports


@click.command(
    epilog="""\b
Exit codes: 0 written, 2 a bad inventory or run record (a node's result or a check's record
that cannot be read is named in the report and on stderr, and the report is still written).
"""
)
@compose(inventory_option, limit_option, json_option)
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to write the HTML [default: <runs folder>/fleet-report.html].",
)
@click.pass_context
def report(
    ctx: click.Context, inventory: Path, limit: str | None, as_json: bool, out: Path | None
) -> None:
    """Write the fleet's HTML report from the recorded acceptance runs.

    One page: the readiness table (each node's latest verdict), every check of that verdict,
    busbw by message size, each node's history run after run, and its passport: its flags
    and a plot of its figures over runs, so a degrading or repaired node shows.
    Reads only this machine's runs folder; contacts no node.
    """
    # Imported when the report is written: the inventory reader and the report's pages load
    # pydantic and Jinja2, which `gpunode report --help` must not wait for.
    from toolkit.inventory import load_inventory  # see above
    from toolkit.report.fleet import fleet_history, fleet_summary, render_fleet_html  # see above

    hosts = [h.name for h in load_inventory(inventory).hosts_for(limit)]
    history = fleet_history(runs.runs_dir(), hosts)
    cards = passports(hosts, runs.runs_dir())
    target = out or runs.runs_dir() / "fleet-report.html"
    page = render_fleet_html(str(inventory), history, cards)
    try:
        # A new file renamed over the old one: a FIFO, a link or a reader there is never
        # written through, and a report is never half-written.
        nodefile.replace(str(target), page)
    except OSError as err:
        raise ConfigError(f"{target}: cannot write the report: {err.strerror or err}") from None
    summary = fleet_summary(history, cards)
    for problem in summary["problems"]:
        say(f"problem: run {problem['run_id']}: {problem['message']}")
    if as_json:
        emit_json({**summary, "report": str(target)})
    else:
        say(f"fleet report: {target}")
    if summary["problems"]:
        ctx.exit(EXIT_USAGE)
