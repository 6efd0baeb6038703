"""``gpunode provision`` and ``gpunode drift``: converge nodes to their pinned stack, and
compare pinned, installed and loaded versions (thin layers over :mod:`toolkit.steps.provision`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from toolkit.ansible.runner import describe_failure
from toolkit.cli import run_context
from toolkit.cli.display import live_display, summary_table
from toolkit.cli.options import inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, err_console, out_console
from toolkit.errors import EXIT_FAILED, PlaybookError, ToolkitError
from toolkit.steps.precheck import Precheck, precheck
from toolkit.steps.provision import converge, read_drift

tags_option = click.option(
    "-t",
    "--tags",
    "tags",
    multiple=True,
    help="Only these parts (repeat or comma-separate): driver, cuda, nccl, fabric_manager, "
    "container_runtime, slurm_healthcheck (the passive checks' program and timer).",
)


def _precheck(
    inventory: Path, limit: str | None, as_json: bool, *, locks: bool = False, relock: bool = False
) -> Precheck:
    found, written = precheck(inventory, limit, locks=locks, relock=relock)
    for outcome in written:
        err_console.print(f"group {outcome.group}: stack lock written to {outcome.path}")
    for warning in found.warnings:
        err_console.print(Text.assemble(("warning: ", "yellow"), warning))
    if not as_json:
        ids = sorted(set(found.stack_ids.values()))
        err_console.print(
            f"stack check passed for {len(found.hosts)} host(s) (stack id {', '.join(ids)})"
        )
    return found


@click.command(
    epilog="""\b
Exit codes: 0 converged, 1 a host failed or was unreachable, 2 incoherent stack or bad
inventory (nothing is touched).

\b
Examples:
  gpunode provision -i inventories/lab
  gpunode provision -i inventories/lab --check
  gpunode provision -i inventories/lab --limit lab-node-1 --tags driver --json
"""
)
@inventory_option
@limit_option
@tags_option
@click.option("--check", is_flag=True, help="Predict the changes without making them.")
@click.option("--diff", is_flag=True, help="Show the differences of changed files.")
@click.option(
    "--relock",
    is_flag=True,
    help="Resolve the stack locks again from the repositories (instead of refusing a missing "
    "or stale lock) and write them before provisioning.",
)
@json_option
def provision(
    inventory: Path,
    limit: str | None,
    tags: tuple[str, ...],
    check: bool,
    diff: bool,
    relock: bool,
    as_json: bool,
) -> None:
    """Converge nodes to their pinned stack.

    Checks every targeted host's stack first (as `gpunode stack check`) and that each group's
    stack lock is current and still carried by its repositories (same versions, same SHA256),
    then runs the provision playbook, installing exactly the locked versions: driver, CUDA,
    NCCL, Fabric Manager, container runtime, node state.
    """
    found = _precheck(inventory, limit, as_json, locks=True, relock=relock)
    tag_list = [t.strip() for value in tags for t in value.split(",") if t.strip()]
    outcome = converge(
        inventory,
        limit,
        tags=tag_list,
        check=check,
        diff=diff,
        display=live_display(as_json),
        verbosity=3 if run_context()["debug"] else 0,
        precheck=found,
    )
    result, reboots = outcome.result, outcome.reboots
    plan = outcome.plan()
    if as_json:
        emit_json({**result.to_dict(), "needs_reboot": sorted(reboots), "plan": plan})
    else:
        _print_plan(plan)
        out_console.print(summary_table(result))
        for host in sorted(reboots):
            out_console.print(Text.assemble((f"{host}: ", "bold"), ("needs a reboot", "yellow")))
    if not result.ok:
        raise ToolkitError(describe_failure(result), EXIT_FAILED)


@click.command(
    epilog="""\b
Exit codes: 0 no drift, 1 drift found (or a node could not be read), 2 incoherent stack
or bad inventory.

\b
Examples:
  gpunode drift -i inventories/lab
  gpunode drift -i inventories/lab --limit lab-node-2 --json
"""
)
@inventory_option
@limit_option
@json_option
def drift(inventory: Path, limit: str | None, as_json: bool) -> None:
    """Compare pinned, installed and loaded versions.

    For the driver, CUDA, NCCL, Fabric Manager and the container toolkit, per node:
    pinned vs installed vs loaded, and whether each package is held. A ready node with
    drift becomes not-ready with the drift as its reason.
    """
    found = _precheck(inventory, limit, as_json)
    outcome = read_drift(inventory, limit, display=live_display(as_json), precheck=found)
    report = outcome.report
    if as_json:
        emit_json({**report, "run_id": outcome.result.run_id})
    else:
        _print_drift(report)
    if not report["ok"]:
        lines = [d["message"] for n in report["nodes"].values() for d in n["drift"]]
        lines += [
            f"{host}: could not read versions: {msg}" for host, msg in report["errors"].items()
        ]
        raise PlaybookError(f"drift on {len(report['drifted'])} node(s):\n  " + "\n  ".join(lines))


def _print_plan(plan: dict[str, dict[str, dict[str, Any]]]) -> None:
    """Per node and component: up to date (skipped whole) or why its role ran."""
    for host, components in plan.items():
        parts = [
            Text(f"{name}: up to date", style="green")
            if not d["run"]
            else Text(f"{name}: runs ({d['reason']})", style="yellow")
            for name, d in components.items()
        ]
        out_console.print(Text.assemble((f"{host}: ", "bold"), Text("; ").join(parts)))


def _print_drift(report: dict[str, Any]) -> None:
    table = Table(title="pinned vs installed vs loaded", title_justify="left")
    for column in ("node", "component", "package", "pinned", "installed", "held", "drift"):
        # Fold rather than cut: a version cut short hides exactly what drifted.
        table.add_column(column, overflow="fold")
    for host, node in sorted(report["nodes"].items()):
        drifted = {(d["component"], d["package"]) for d in node["drift"]}
        for component, rows in node["versions"].items():
            if component == "loaded_driver":
                continue
            for package, row in rows.items():
                bad = (component, package) in drifted
                table.add_row(
                    host,
                    component,
                    package,
                    row["pinned"],
                    row["installed"] or "-",
                    "yes" if row["held"] else "no",
                    Text("DRIFT", style="bold red") if bad else Text("ok", style="green"),
                )
        loaded = node["versions"].get("loaded_driver", {})
        bad = ("driver", "kernel module") in drifted
        table.add_row(
            host,
            "driver",
            "kernel module (loaded)",
            loaded.get("pinned", ""),
            loaded.get("loaded") or loaded.get("detail") or "-",
            "",
            Text("DRIFT", style="bold red") if bad else Text("ok", style="green"),
        )
    out_console.print(table)
    for host, message in sorted(report["errors"].items()):
        out_console.print(Text.assemble((f"{host}: ", "bold red"), message))
