"""``gpunode status``: the fleet table, read from the nodes without changing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich import box
from rich.table import Table
from rich.text import Text

from toolkit.cli.display import live_display
from toolkit.cli.options import inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, out_console, shown
from toolkit.errors import EXIT_FAILED, ToolkitError
from toolkit.rollout import record
from toolkit.steps.status import fleet_status

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

    Per node: its state (new, provisioned, ready, not-ready) and reason, GPUs seen against the
    profile, installed vs pinned driver, CUDA and NCCL (and the loaded driver), the data
    mount, the last acceptance (busbw at the largest size, when, stack id) and the newest
    handover certificate in the runs folder; under the table, a rollout in progress (wave,
    nodes per status). Reads only:
    a ready node that drifted shows not-ready here; `gpunode drift` records it.
    """
    nodes = fleet_status(inventory, limit, display=live_display(as_json))
    rollout = record.in_progress()
    if as_json:
        emit_json(
            {
                "nodes": {n.host: n.to_dict() for n in nodes},
                "ready": all(n.ready for n in nodes),
                "rollout": rollout,
            }
        )
    else:
        out_console.print(fleet_table([n.to_dict() for n in nodes]))
        for node in nodes:
            for line in node.to_dict()["reason"] or ([] if node.ready else ["not ready"]):
                out_console.print(Text.assemble(shown(f"{node.host}: ", "bold red"), shown(line)))
            for line in node.drift:
                out_console.print(Text.assemble(shown(f"{node.host}: ", "yellow"), shown(line)))
            if node.certificate:
                out_console.print(shown(f"{node.host}: certificate {node.certificate}"))
        if rollout:
            out_console.print(shown(rollout_line(rollout), "yellow"))
    if not nodes:
        raise ToolkitError(f"{inventory}: no node answered", EXIT_FAILED)
    not_ready = sorted(n.host for n in nodes if not n.ready)
    if not_ready:
        raise ToolkitError(f"not ready: {', '.join(not_ready)}", EXIT_FAILED)


def rollout_line(progress: dict[str, Any]) -> str:
    """A rollout in progress (``toolkit.rollout.record.progress``), in one line."""
    counts = ", ".join(f"{n} {status}" for status, n in progress["counts"].items() if n)
    where = (
        f"stopped ({progress['stopped']})"
        if progress["stopped"]
        else f"wave {progress['wave']} of {progress['waves']}"
    )
    return f"rollout {progress['rollout_id']} in progress: {where}; {counts}"


def _upstream(version: object) -> str:
    """``2.21.5-1+cuda12.4`` -> ``2.21.5``: the Debian revision says nothing here."""
    return str(version).split("-", 1)[0] if version else "none"


def _version_cell(entry: dict[str, Any] | None) -> Text:
    """The pinned version in green, or what is installed (or loaded) in red."""
    if not entry:
        return shown("-", "dim")
    if entry["ok"]:
        return shown(_upstream(entry["pinned"]), "green")
    found = entry.get("installed") if entry.get("installed") != entry["pinned"] else None
    return shown(_upstream(found or entry.get("loaded")), "bold red")


def fleet_table(nodes: list[dict[str, Any]]) -> Table:
    """One row per node, within 80 columns; reasons and drift are printed under the table."""
    table = Table(
        title="fleet",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in ("node", "state", "gpus", "driver", "cuda", "nccl", "/data", "busbw"):
        table.add_column(column, no_wrap=True)
    for node in nodes:
        gpus = node["gpus"]
        seen = "?" if gpus["seen"] is None else str(gpus["seen"])
        gpu_style = "green" if gpus["seen"] == gpus["expected"] else "bold red"
        versions = node["versions"]
        data = node["data"]
        mount = "-" if not data["mount_point"] else (data["fstype"] or "NONE")
        busbw = node["busbw_at_largest_gbps"]
        table.add_row(
            shown(node["host"]),
            shown(node["state"], _STYLE.get(str(node["state"]), "yellow")),
            shown(f"{seen}/{gpus['expected']}", gpu_style),
            _version_cell(versions.get("driver")),
            _version_cell(versions.get("cuda")),
            _version_cell(versions.get("nccl")),
            shown(mount, "bold red" if mount == "NONE" else ""),
            shown("-" if busbw is None else f"{busbw:.3g}"),
        )
    return table
