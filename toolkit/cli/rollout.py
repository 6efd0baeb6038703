"""``gpunode rollout``: the plan that moves nodes onto the stack lock, canary first, in waves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from toolkit.cli.display import live_display
from toolkit.cli.options import inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, out_console, say, shown
from toolkit.errors import EXIT_USAGE, ToolkitError
from toolkit.rollout.plan import (
    RolloutOptions,
    RolloutPlan,
    parse_canary,
    parse_max_failures,
    parse_max_unavailable,
)
from toolkit.steps.rollout import plan_fleet

NOT_BUILT = (
    "gpunode rollout: executing a rollout is not built yet (issue 39); run it with --dry-run "
    "to see the plan. Nothing was read or changed."
)


@click.command(
    epilog="""\b
Exit codes: 0 the plan was made, 2 bad options, inventory, stack or lock (no node is read),
or asked to execute (not built yet).

\b
Examples:
  gpunode rollout -i inventories/lab --dry-run
  gpunode rollout -i inventories/prod --dry-run --max-unavailable 25% --canary gpu-07
  gpunode rollout -i inventories/prod --dry-run --json
"""
)
@inventory_option
@limit_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan and change nothing (the plan is recorded as a rollout_plan run).",
)
@click.option(
    "--max-unavailable",
    default="1",
    show_default=True,
    help="Nodes out of service at once: N in all, or N% of each stack group (rounded down, "
    "at least 1).",
)
@click.option(
    "--canary",
    default=None,
    help="HOST,...: the first wave, alone [default: the first node that changes].",
)
@click.option(
    "--allow-same-domain",
    is_flag=True,
    help="Let one wave take several nodes of one gpunode_accept_domain (rack, NVLink domain).",
)
@click.option(
    "--max-failures",
    type=int,
    default=1,
    show_default=True,
    help="Failed nodes after which the rollout stops and touches no further node.",
)
@json_option
def rollout(
    inventory: Path,
    limit: str | None,
    dry_run: bool,
    max_unavailable: str,
    canary: str | None,
    allow_same_domain: bool,
    max_failures: int,
    as_json: bool,
) -> None:
    """Move nodes whose stack differs from the lock onto it, canary first, in waves.

    Reads every targeted node without changing it (one drift run in check mode, as `gpunode
    status`): a node differs from the lock when a package is not at its locked version, not
    installed or not held, its loaded driver module is not the locked one, or it was
    accepted for another stack id. The plan lists each node's changes, whether it reboots,
    and its wave: wave 1 is the canary, later waves keep --max-unavailable and never take
    two nodes of one gpunode_accept_domain. Nodes on the lock are left alone. This version
    plans only: without --dry-run it refuses.
    """
    options = RolloutOptions(
        max_unavailable=parse_max_unavailable(max_unavailable),
        max_failures=parse_max_failures(max_failures),
        canary=parse_canary(canary),
        allow_same_domain=allow_same_domain,
    )
    if not dry_run:
        raise ToolkitError(NOT_BUILT, EXIT_USAGE)
    outcome = plan_fleet(inventory, options, limit, display=live_display(as_json))
    document = {**outcome.plan.to_dict(), "record": str(outcome.record_path)}
    if as_json:
        emit_json({"dry_run": True, **document})
        return
    out_console.print(plan_table(outcome.plan))
    for line in plan_lines(outcome.plan):
        out_console.print(line)
    say(f"dry run: nothing was changed; plan recorded in {outcome.record_path}")


def _summary(plan: RolloutPlan) -> str:
    options = plan.options
    canary = ", ".join(plan.waves[0]) if plan.waves else "none"
    return (
        f"{len(plan.changing)} node(s) change in {len(plan.waves)} wave(s) (canary {canary}); "
        f"{len(plan.left_alone)} left alone; max unavailable {options.max_unavailable.text}"
        f"{' of each group' if options.max_unavailable.percent else ''}, max failures "
        f"{options.max_failures}"
    )


def _components(node: dict[str, Any]) -> str:
    found = []
    for change in node["changes"]:
        name = "hold" if change["kind"] == "not-held" else change["component"]
        if change["kind"] != "loaded" and name not in found:
            found.append(name)
    return ", ".join(found) or "-"


def plan_table(plan: RolloutPlan) -> Table:
    """One row per node, in wave order, then the nodes left alone; within 80 columns for
    18-character names."""
    table = Table(
        title=f"rollout plan: {_summary(plan)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in ("wave", "node", "group", "domain", "state", "changes", "reboot"):
        table.add_column(column, no_wrap=column != "changes")
    document = plan.to_dict()["nodes"]
    for host in [*plan.changing, *plan.left_alone]:
        node = document[host]
        wave = node["wave"]
        table.add_row(
            shown("-" if wave is None else ("1 canary" if wave == 1 else str(wave))),
            shown(host),
            shown(node["group"]),
            shown(node["domain"] or "-"),
            shown(node["state"]),
            shown(_components(node) if wave else node["status"], "" if wave else "dim"),
            shown("yes" if node["reboot"] and wave else "-", "yellow" if node["reboot"] else ""),
        )
    return table


def plan_lines(plan: RolloutPlan) -> list[Text]:
    """Under the table: each changing node's package differences and why it reboots, then
    why each node is left alone."""
    lines = []
    for host in plan.changing:
        node = plan.nodes[host]
        for change in node.changes:
            if change.kind == "loaded":  # said by the reboot's line
                continue
            lines.append(Text.assemble(shown(f"{host}: ", "cyan"), shown(change.text)))
        if node.reboot:
            lines.append(Text.assemble(shown(f"{host}: ", "cyan"), shown(f"reboot: {node.reboot}")))
        if not node.changes:
            lines.append(Text.assemble(shown(f"{host}: ", "cyan"), shown(node.reason)))
    for host in plan.left_alone:
        lines.append(Text.assemble(shown(f"{host}: ", "dim"), shown(plan.nodes[host].reason)))
    return lines
