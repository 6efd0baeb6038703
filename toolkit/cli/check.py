"""``gpunode check``: the passive checks of every node, rendered."""

from __future__ import annotations

from pathlib import Path

import click
from rich.text import Text

from toolkit.cli.options import inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, out_console, shown
from toolkit.errors import EXIT_FAILED, ToolkitError
from toolkit.steps.check import run_check

# Each check's outcome as the line's mark: not measured (not judged) is never "ok".
_MARKS = {
    "passed": ("  ok   ", "green"),
    "failed": ("  FAIL ", "bold red"),
    "not_measured": ("  n/m  ", "yellow"),
}


@click.command(
    epilog="""\b
Exit codes: 0 every node passed, 1 a check failed or a node could not be read.

\b
Examples:
  gpunode check -i inventories/lab
  gpunode check -i inventories/lab --limit gpunode-node-1 --json
"""
)
@inventory_option
@limit_option
@json_option
def check(inventory: Path, limit: str | None, as_json: bool) -> None:
    """Run the passive checks: cheap, read-only signals of each node.

    One SSH command per node, all nodes at once: XIDs since the last check, volatile ECC,
    pending or failed row remaps, pending retired pages, recovery actions, PCIe AER errors
    since the last check, the PCIe maximum link, throttling, RDMA port states, the units that
    must run (persistenced, Fabric Manager, IMEX) and the pinned, installed and loaded driver.
    A ready node that fails a check turns not ready with the reasons; a clean check never
    makes a node ready (acceptance does). Each check is recorded as a run.
    """
    run = run_check(inventory, limit)
    if as_json:
        emit_json(run.to_dict())
    else:
        for node in run.nodes:
            style = "green" if node.ok else "bold red"
            head = f"{node.host}: {'ok' if node.ok else 'FAILED'}"
            if node.turned_not_ready:
                head += " (was ready: now not-ready)"
            elif node.state.get("state"):
                head += f" (state {node.state['state']})"
            out_console.print(shown(f"{head} in {node.duration_s:.2f}s", style))
            if node.error:
                out_console.print(Text.assemble(shown("  error: ", "bold red"), shown(node.error)))
            for c in node.checks:
                mark = _MARKS[c.outcome]
                advice = f" -> {c.advice}" if c.advice else ""
                out_console.print(
                    Text.assemble(shown(*mark), shown(f"{c.name}: {c.message}{advice}"))
                )
        out_console.print(
            shown(f"run {run.run_id}: {len(run.nodes)} node(s) in {run.wall_s:.2f}s wall")
        )
    failed = sorted(n.host for n in run.nodes if not n.ok)
    if failed:
        raise ToolkitError(f"passive checks failed: {', '.join(failed)}", EXIT_FAILED)
