"""``gpunode status``: the readiness of every node, from its /etc/gpunode/state.json."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from toolkit.cli.options import inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, out_console
from toolkit.errors import EXIT_FAILED, ToolkitError

_STYLE = {"ready": "green", "provisioned": "cyan", "new": "dim", "not-ready": "bold red"}


@click.command(
    epilog="""\b
Exit codes: 0 every node ready, 1 a node is not ready or could not be read.

\b
Examples:
  gpunode status -i inventories/lab
  gpunode status -i inventories/lab --json
"""
)
@inventory_option
@limit_option
@json_option
def status(inventory: Path, limit: str | None, as_json: bool) -> None:
    """Show the readiness of every node.

    Reads /etc/gpunode/state.json on each node: new, provisioned, ready or not-ready (with
    the reason), the stack id it was written for, and the run that wrote it.
    """
    from toolkit.ansible.reports import state_from_slurp
    from toolkit.ansible.runner import run_module
    from toolkit.nodestate import PATH as STATE_FILE

    result = run_module(
        "ansible.builtin.slurp", inventory, module_args=f"src={STATE_FILE}", limit=limit
    )
    states: dict[str, dict[str, object]] = {}
    for host in sorted(result.hosts):
        if host in result.results:
            states[host] = state_from_slurp(result.results[host])
    for failure in result.failures:
        if failure.unreachable:
            states[failure.host] = {"state": "unreachable", "reason": [failure.message]}
        else:
            states[failure.host] = state_from_slurp({"failed": True, "msg": failure.message})
    if as_json:
        emit_json({"nodes": states, "ready": all(s["state"] == "ready" for s in states.values())})
    else:
        table = Table(title=f"node state ({STATE_FILE})", title_justify="left")
        for column in ("node", "state", "stack id", "since", "reason"):
            table.add_column(column)
        for host, state in sorted(states.items()):
            name = str(state["state"])
            reasons = state.get("reason") or []
            table.add_row(
                host,
                Text(name, style=_STYLE.get(name, "yellow")),
                str(state.get("stack_id") or "-"),
                str(state.get("time") or "-"),
                "; ".join(str(r) for r in reasons) if isinstance(reasons, list) else str(reasons),
            )
        out_console.print(table)
    not_ready = sorted(h for h, s in states.items() if s["state"] != "ready")
    if not states:
        raise ToolkitError(f"{inventory}: no node answered", EXIT_FAILED)
    if not_ready:
        raise ToolkitError(f"not ready: {', '.join(not_ready)}", EXIT_FAILED)
