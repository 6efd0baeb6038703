"""``gpunode up``: disks, provision and acceptance in one resumable command."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from textwrap import shorten
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from toolkit.cli.disks import print_plans
from toolkit.cli.display import live_display
from toolkit.cli.options import (
    compose,
    engine_option,
    executor_option,
    hooks_option,
    inventory_option,
    json_option,
    limit_option,
    multi_node_option,
    sign_key_option,
    yes_option,
)
from toolkit.cli.output import emit_json, err_console, out_console, say, shown
from toolkit.errors import EXIT_FAILED, EXIT_OK
from toolkit.steps.disks import DisksOutcome

_STATUS_STYLE = {"done": "green", "skipped": "dim", "failed": "bold red"}


@click.command(
    epilog="""\b
Exit codes: 0 every node ready, 1 a node is not ready, 2 incoherent stack or bad inventory
(nothing is touched), 130 interrupted (nodes keep the state they really have).

\b
Examples:
  gpunode up -i inventories/lab --yes
  gpunode up -i inventories/prod --limit gpu-07 --multi-node
"""
)
@compose(inventory_option, limit_option, yes_option)
@multi_node_option
@hooks_option
@engine_option
@executor_option
@sign_key_option
@click.option(
    "--relock",
    is_flag=True,
    help="Resolve missing or stale stack locks from the repositories instead of refusing.",
)
@click.option(
    "--accept-only",
    is_flag=True,
    help="Change no node (no disks, no provisioning, no reboot): accept the nodes that need "
    "only acceptance, report the others (the scheduled re-validation: gpunode schedule).",
)
@json_option
def up(
    inventory: Path,
    limit: str | None,
    yes: bool,
    multi_node: bool,
    hooks: tuple[str, ...],
    engine: str,
    executor: str | None,
    sign_key: Path | None,
    relock: bool,
    accept_only: bool,
    as_json: bool,
) -> None:
    """Take nodes from bare to ready: image, disks, provision, acceptance.

    Checks the stack and its locks first, builds each group's training image unless the
    current one is here, reads what every node has already proven (ready for this stack,
    or provisioned with it) and skips that, applies the data disks (asking first unless
    --yes; a refused node stops alone), converges the pinned stack, runs the acceptance test
    and marks each node. Rerun it after an interruption: it carries on where the nodes are.
    """
    # Imported when `up` runs: the step loads the stack's models and pydantic (and, when a
    # stage needs them, Docker's client and acceptance), which `gpunode up --help` and a
    # refused usage must not wait for.
    from toolkit.steps.up import UpOptions, run_up

    if not yes and not accept_only and not sys.stdin.isatty():
        raise click.UsageError(
            "`gpunode up` asks before it changes data disks; there is no terminal, "
            "so pass --yes to go ahead without asking"
        )
    outcome = run_up(
        UpOptions(
            inventory=inventory,
            limit=limit,
            multi_node=multi_node,
            hooks=hooks,
            confirm_disks=None if yes else _confirm_disks,
            display=live_display(as_json),
            relock=relock,
            engine=engine,
            executor=executor,
            sign_key=sign_key,
            accept_only=accept_only,
        ),
        progress=say,
    )
    if as_json:
        emit_json(outcome.to_dict())
    else:
        document = outcome.to_dict()
        out_console.print(readiness_table(document, out_console.width))
        for host, node in document["nodes"].items():
            if not node["ready"]:
                failed = node["failed_stage"]
                why = [node["stages"][failed]["detail"]] if failed else node["reason"]
                out_console.print(
                    Text.assemble(shown(f"{host}: ", "bold red"), shown("; ".join(why)))
                )
        say(f"run {outcome.run_id} in {outcome.elapsed_s:.0f}s: {outcome.run_dir}/up.json")
        if outcome.report:
            say(f"acceptance report: {outcome.report}")
    click.get_current_context().exit(EXIT_OK if outcome.all_ready else EXIT_FAILED)


def _confirm_disks(planned: DisksOutcome) -> bool:
    print_plans(planned, console=err_console)
    return click.confirm(
        f"Apply these disk plans to {len(planned.todo)} node(s) ({', '.join(planned.todo)})?",
        default=False,
        err=True,
    )


MIN_REASON_WIDTH = 16  # below this the other columns give way (Rich narrows them)
_STATUS_WORD = {"done": "ok", "skipped": "skip", "failed": "FAIL"}
# A measured figure: a number with its unit, and the floor it is compared with when there is
# one ("busbw 0.708 GB/s < floor 1.0 GB/s at 8 MiB" -> "0.708 GB/s < floor 1.0 GB/s"). A bare
# number (an XID, a GPU index, a count) is no figure: it is read in its words.
_UNIT = (
    r"\s?(?:[KMGT]i?B/s|[KMGT]i?B|[KMGT]?FLOP/s|[TG]FLOPS|GT/s|[MG]Hz|it/s|samples/s"
    r"|tokens/s|%|W|°C|ms|us|s)(?![\w/])"
)
_NUMBER = r"(?<![\w.])-?[0-9]+(?:\.[0-9]+)?"
_COMPARED = rf"\s?(?:<=|>=|<|>|!=)\s?(?:floor\s|min\s|max\s)?{_NUMBER}(?:{_UNIT})?"
_FIGURE_RE = re.compile(rf"{_NUMBER}(?:{_UNIT}(?:{_COMPARED})?|{_COMPARED})")


def brief(detail: str, width: int) -> str:
    """A reason in ``width`` characters that keeps its figure: when cutting its end would cut
    the first figure, the figure leads and the words follow, cut at a word."""
    if len(detail) <= width:
        return detail
    figure = _FIGURE_RE.search(detail)
    if figure is not None and figure.end() > width - 1:
        words = " ".join((detail[: figure.start()] + " " + detail[figure.end() :]).split())
        detail = f"{figure.group()} {words}"
    return shorten(detail, width, placeholder="…")


def readiness_table(document: dict[str, Any], width: int = 80) -> Table:
    """One row per node: each stage's status, the final state and its reason, in one line of
    at most ``width`` columns: the reason takes what the other columns leave, cut so that its
    figure stays (:func:`brief`); the full reasons of a node not ready follow the table."""
    headers = ("node", "disks", "stack", "accept", "state")
    rows: list[list[Text]] = []
    details: list[str] = []
    for host, node in document["nodes"].items():
        stages = node["stages"]
        cells = [shown(host)]
        for stage in ("disks", "provision", "accept"):
            status = (stages.get(stage) or {}).get("status", "-")
            cells.append(
                Text(_STATUS_WORD.get(status, status), style=_STATUS_STYLE.get(status, ""))
            )
        cells.append(shown(node["state"] or "-", "green" if node["ready"] else "bold red"))
        rows.append(cells)
        failed = node["failed_stage"]
        details.append(
            f"{failed}: {stages[failed]['detail']}"
            if failed
            else "; ".join(node["reason"]) or (stages.get("accept") or {}).get("detail", "")
        )
    used = sum(
        max([len(header), *(len(row[i].plain) for row in rows)]) for i, header in enumerate(headers)
    )
    # SIMPLE_HEAD without edge padding: one column of edge on each side, three between columns.
    reason_width = max(MIN_REASON_WIDTH, width - used - (3 * (len(headers) + 1) - 1))
    table = Table(title="readiness", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for header in headers:
        table.add_column(header, no_wrap=True)
    table.add_column("reason / figure", no_wrap=True, overflow="ellipsis")
    for cells, detail in zip(rows, details, strict=True):
        table.add_row(*cells, shown(brief(detail, reason_width)))
    return table
