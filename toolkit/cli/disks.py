"""``gpunode disks``: plan and apply the data-disk layout of nodes, safely.

Both commands run ``playbooks/disks.yml`` (preflight, then the ``data_disks`` role); the plan
is read back from the fact ``gpunode_data_disks`` that the role's action sets per node.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from toolkit.cli.options import compose, inventory_option, json_option, limit_option, yes_option
from toolkit.cli.output import emit_json, err_console, out_console, say
from toolkit.errors import EXIT_FAILED, EXIT_OK

FACT = "gpunode_data_disks"
PLAYBOOK = "disks"


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
    result = _run(inventory, limit, check=True, as_json=as_json)
    nodes = _nodes(result)
    if as_json:
        emit_json(_document(result, nodes))
    else:
        _print_nodes(nodes)
    click.get_current_context().exit(EXIT_OK if _all_plannable(nodes) else EXIT_FAILED)


@disks.command("apply")
@compose(inventory_option, limit_option, yes_option, json_option)
def apply_cmd(inventory: Path, limit: str | None, yes: bool, as_json: bool) -> None:
    """Plan, confirm (unless --yes), then apply the data-disk layout.

    Without --yes the plan is shown first and applied only after confirmation on the
    terminal; without a terminal, --yes is required. Exit 1 when any node refuses or fails.
    """
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError(
                "`gpunode disks apply` asks for confirmation on a terminal; "
                "there is none, so pass --yes to apply without asking"
            )
        planned = _nodes(_run(inventory, limit, check=True, as_json=as_json))
        _print_nodes(planned, console=err_console)
        if not _all_plannable(planned):
            say("Nothing was changed: fix the refusals above first.")
            if as_json:
                emit_json({"ok": False, "applied": False, "nodes": planned})
            click.get_current_context().exit(EXIT_FAILED)
        todo = [h for h, n in planned.items() if n.get("plan") and n["plan"]["actions"]]
        if not todo:
            say("Every node is already in place; nothing to do.")
            if as_json:
                emit_json({"ok": True, "applied": False, "nodes": planned})
            click.get_current_context().exit(EXIT_OK)
        if not click.confirm(
            f"Apply these plans to {len(todo)} node(s) ({', '.join(todo)})?",
            default=False,
            err=True,
        ):
            say("Nothing was changed.")
            click.get_current_context().exit(EXIT_FAILED)
    result = _run(inventory, limit, check=False, as_json=as_json)
    nodes = _nodes(result)
    if as_json:
        emit_json(_document(result, nodes) | {"applied": True})
    else:
        _print_nodes(nodes, applied=True)
    click.get_current_context().exit(
        EXIT_OK if result.ok and _all_plannable(nodes) else EXIT_FAILED
    )


def _run(inventory: Path, limit: str | None, *, check: bool, as_json: bool) -> Any:
    from toolkit.ansible.progress import LiveProgress
    from toolkit.ansible.runner import run_playbook

    def display(playbook: str, check_mode: bool) -> LiveProgress:
        return LiveProgress(err_console, playbook, check_mode)

    return run_playbook(
        PLAYBOOK,
        inventory,
        limit=limit,
        check=check,
        diff=False,
        extravars={"data_disks_report_only": True} if check else None,
        display=None if as_json else display,
    )


def _nodes(result: Any) -> dict[str, dict[str, Any]]:
    """Per host: its plan (the fact the role set) and the failures of the run."""
    nodes: dict[str, dict[str, Any]] = {}
    for host in sorted(result.hosts):
        fact = result.host_facts(host, FACT)
        nodes[host] = {"plan": dict(fact) if isinstance(fact, dict) else None, "errors": []}
    for failure in result.failures:
        entry = nodes.setdefault(failure.host, {"plan": None, "errors": []})
        where = "unreachable" if failure.unreachable else failure.task
        entry["errors"].append(f"{where}: {failure.message}")
    return nodes


def _all_plannable(nodes: dict[str, dict[str, Any]]) -> bool:
    if not nodes:
        return False
    return all(
        not n["errors"] and (n["plan"] is None or not n["plan"]["refused"]) for n in nodes.values()
    )


def _document(result: Any, nodes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "ok": _all_plannable(nodes),
        "run_id": result.run_id,
        "check": result.check,
        "artifact_dir": result.artifact_dir,
        "nodes": nodes,
    }


def _print_nodes(
    nodes: dict[str, dict[str, Any]], *, applied: bool = False, console: Any = None
) -> None:
    console = console or out_console
    if not nodes:
        console.print("No host matched the inventory and limit.")
    for host, node in nodes.items():
        plan = node["plan"]
        if plan is None:
            if node["errors"]:
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
        for error in node["errors"]:
            console.print(f"  [red]error[/red] {escape(error)}")


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    for unit, factor in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2)):
        if size >= factor:
            return f"{size / factor:.2f} {unit}"
    return f"{size} B"
