"""``gpunode disks``: plan and apply the data-disk layout of nodes, safely.

Both commands run ``playbooks/disks.yml`` (preflight, then the ``data_disks`` role); the plan
is read back from the fact ``gpunode_data_disks`` that the role's action sets per node.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from toolkit.cli.display import live_display
from toolkit.cli.options import compose, inventory_option, json_option, limit_option, yes_option
from toolkit.cli.output import emit_json, err_console, out_console, say
from toolkit.errors import EXIT_FAILED, EXIT_OK
from toolkit.steps import disks as step


@click.group()
def disks() -> None:
    """Plan and apply the data-disk layout safely."""


@disks.command("plan")
@compose(inventory_option, limit_option, json_option)
def plan_cmd(inventory: Path, limit: str | None, as_json: bool) -> None:
    """Show each node's disks and its plan or every refusal; change nothing.

    Exit 0 when every node can be applied (or is already done), 1 when any node refuses or
    could not be planned.
    """
    outcome = step.plan(inventory, limit, live_display(as_json))
    if as_json:
        emit_json(outcome.to_dict())
    else:
        print_plans(outcome)
    click.get_current_context().exit(EXIT_OK if outcome.ok else EXIT_FAILED)


@disks.command("apply")
@compose(inventory_option, limit_option, yes_option, json_option)
def apply_cmd(inventory: Path, limit: str | None, yes: bool, as_json: bool) -> None:
    """Plan, confirm (unless --yes), then apply the data-disk layout.

    Without --yes the plan is shown first and applied only after confirmation on the
    terminal; without a terminal, --yes is required. Exit 1 when any node refuses or fails.
    """
    if not yes and not sys.stdin.isatty():
        raise click.UsageError(
            "`gpunode disks apply` asks for confirmation on a terminal; "
            "there is none, so pass --yes to apply without asking"
        )

    def confirm(planned: step.DisksOutcome) -> bool:
        print_plans(planned, console=err_console)
        return click.confirm(
            f"Apply these plans to {len(planned.todo)} node(s) ({', '.join(planned.todo)})?",
            default=False,
            err=True,
        )

    outcome = step.apply(
        inventory, limit, confirm=None if yes else confirm, display=live_display(as_json)
    )
    if outcome.check:  # nothing was applied: refused, nothing to do, or declined
        if outcome.declined:
            say("Nothing was changed.")
        elif outcome.refused:
            print_plans(outcome, console=err_console)
            say("Nothing was changed: fix the refusals above first.")
        else:
            say("Every node is already in place; nothing to do.")
    if as_json:
        emit_json(outcome.to_dict())
    elif not outcome.check:
        print_plans(outcome, applied=True)
    click.get_current_context().exit(EXIT_OK if outcome.ok else EXIT_FAILED)


def print_plans(
    outcome: step.DisksOutcome, *, applied: bool = False, console: Console | None = None
) -> None:
    """Each node's disks and its plan, refusals, blockers and notes (also `up`'s question)."""
    console = console or out_console
    if not outcome.nodes:
        console.print("No host matched the inventory and limit.")
    for host, node in outcome.nodes.items():
        plan = node.plan
        if plan is None:
            if node.errors:
                console.print(f"[bold]{host}[/bold]: [red]failed[/red]")
            else:
                console.print(f"[bold]{host}[/bold]: no data_disks in its hardware profile")
        else:
            table = Table(
                title=f"{host}: {plan['layout']} {plan['filesystem']} at {plan['mount_point']}",
                title_justify="left",
            )
            for column in ("serial", "by-id", "device", "size", "state"):
                table.add_column(column)
            for disk in plan["disks"]:
                table.add_row(
                    disk["serial"],
                    disk["path"] or "-",
                    disk["device"] or "-",
                    _size(disk["size"]),
                    disk["state"],
                )
            console.print(table)
            if plan["refused"]:
                console.print("[red]refused[/red] (nothing will be changed):")
                for reason in plan["reasons"]:
                    console.print(f"  - {escape(reason)}")
            elif plan.get("applied"):
                console.print(f"applied ({len(plan['applied'])} steps); now in place:")
                for step in plan["applied"]:
                    console.print(f"  - {escape(step)}")
            elif not plan["actions"]:
                verb = "is" if not applied else "was already"
                console.print(
                    f"nothing to do: {plan['mount_point']} {verb} in place (UUID {plan['uuid']})"
                )
            else:
                console.print("plan:")
                for index, action in enumerate(plan["actions"], 1):
                    console.print(f"  {index}. {escape(action['summary'])}")
                    console.print(f"     [dim]{escape(action['command'])}[/dim]")
            for blocker in plan["blockers"]:
                console.print(f"[yellow]cannot apply here:[/yellow] {escape(blocker)}")
            for note in plan["notes"]:
                console.print(f"[yellow]note:[/yellow] {escape(note)}")
        for error in node.errors:
            console.print(f"  [red]error[/red] {escape(error)}")


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit, factor in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2)):
        if size >= factor:
            return f"{size / factor:.2f} {unit}"
    return f"{size} B"
