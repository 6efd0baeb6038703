"""``gpunode lab``: a fleet of simulated GPU nodes on the local Docker engine."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from toolkit.cli.options import json_option
from toolkit.cli.output import emit_json, out_console, say
from toolkit.errors import ConfigError
from toolkit.lab import lab as lab_core
from toolkit.lab import nodes as lab_nodes
from toolkit.lab.faults import FAULTS
from toolkit.lab.spec import build_spec, parse_fault, parse_size

name_option = click.option(
    "--name",
    default=lab_core.DEFAULT_NAME,
    show_default=True,
    envvar="GPUNODE_LAB_NAME",
    help="Lab name: namespaces containers, network, disks and state (env GPUNODE_LAB_NAME).",
)

FAULT_HELP = f"Faults: {', '.join(FAULTS)} (each explained by 'gpunode lab fault --help')"


def _fault_list() -> str:
    """Every fault the lab knows and what it does, from the one registry (toolkit.lab.hardware)."""
    width = max(len(name) for name in FAULTS)
    lines = [
        textwrap.fill(
            meaning,
            width=88,
            initial_indent=f"  {name.ljust(width)}  ",
            subsequent_indent=" " * (width + 4),
        )
        for name, meaning in FAULTS.items()
    ]
    return "\b\nFaults:\n" + "\n".join(lines)


@click.group()
def lab() -> None:
    """Run a fleet of simulated GPU nodes on local Docker.

    \b
    Examples:
      gpunode lab up --nodes 2
      gpunode lab up --nodes 2 --fault 2:ecc --fault 2:slow-net
      gpunode lab status --json
      gpunode lab ssh 1 -- nvidia-smi -L
      gpunode lab fault 2 xid
      gpunode lab down
    """


@lab.command()
@name_option
@click.option("--nodes", type=int, default=2, show_default=True, help="Number of nodes.")
@click.option("--gpus", type=int, default=8, show_default=True, help="Emulated GPUs per node.")
@click.option(
    "--gpu-model",
    default="H100",
    show_default=True,
    help="H100, H200, A100, L40S, B200 or GB200 (a 4-GPU tray: --gpus 4).",
)
@click.option(
    "--nvswitch/--no-nvswitch",
    default=None,
    help="NVSwitch fabric (default: 8 GPUs of an SXM model have one).",
)
@click.option("--disks", type=int, default=2, show_default=True, help="Data disks per node.")
@click.option("--disk-size", default="2G", show_default=True, help="Size of each data disk.")
@click.option(
    "--fault",
    "faults",
    multiple=True,
    metavar="NODE_INDEX:FAULT",
    help=f"Inject a fault into a node (repeatable). {FAULT_HELP}.",
)
@click.option(
    "--ca-bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="CA bundle to trust on nodes (default: the host's, when there is one).",
)
@click.option("--no-ca-bundle", is_flag=True, help="Do not install any CA bundle on nodes.")
@click.option(
    "--inventory-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to write the inventory (default inventories/lab, or inventories/lab-NAME).",
)
@click.option("--slow-net-rate", default="100mbit", show_default=True, help="Rate of slow-net.")
@click.option(
    "--slurm",
    is_flag=True,
    help="Run a Slurm cluster on the nodes (slurmctld and slurmdbd over MariaDB on node 1, "
    "slurmd and munge on all); the inventory then runs acceptance as Slurm jobs.",
)
@json_option
def up(
    name: str,
    nodes: int,
    gpus: int,
    gpu_model: str,
    nvswitch: bool | None,
    disks: int,
    disk_size: str,
    faults: tuple[str, ...],
    ca_bundle: Path | None,
    no_ca_bundle: bool,
    inventory_dir: Path | None,
    slow_net_rate: str,
    slurm: bool,
    as_json: bool,
) -> None:
    """Bring a lab up (idempotent: a second run with the same options changes nothing)."""
    if ca_bundle and no_ca_bundle:
        raise ConfigError("--ca-bundle and --no-ca-bundle exclude each other")
    if not no_ca_bundle and ca_bundle is None:
        ca_bundle = lab_nodes.host_ca_bundle()
    spec = build_spec(
        name=name,
        nodes=nodes,
        gpus=gpus,
        gpu_model=gpu_model,
        nvswitch=nvswitch,
        disks=disks,
        disk_size=parse_size(disk_size),
        faults=tuple(parse_fault(f) for f in faults),
        ca_bundle=None if no_ca_bundle else ca_bundle,
        slow_net_rate=slow_net_rate,
        slurm=slurm,
    )
    lab_core.up(spec, inventory_dir=inventory_dir, progress=say)
    document = lab_core.status(name)
    if as_json:
        emit_json(document)
    else:
        _print_status(document)


@lab.command()
@name_option
@json_option
def status(name: str, as_json: bool) -> None:
    """Show the lab's nodes, addresses, disks and faults."""
    document = lab_core.status(name)
    if as_json:
        emit_json(document)
    else:
        _print_status(document)


@lab.command(context_settings={"ignore_unknown_options": True})
@name_option
@click.argument("node")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def ssh(name: str, node: str, command: tuple[str, ...]) -> None:
    """Log into NODE (index or name) over SSH, or run a command: lab ssh 1 -- CMD."""
    argv = lab_core.ssh_argv(name, node, list(command))
    if shutil.which(argv[0]) is None:
        raise ConfigError("the ssh client is not installed (package openssh-client)")
    os.execvp(argv[0], argv)


@lab.command()
@name_option
@json_option
def down(name: str, as_json: bool) -> None:
    """Remove everything the lab made (containers, network, loop devices, files)."""
    removed = lab_core.down(name)
    if as_json:
        emit_json(removed)
        return
    for kind, items in removed.items():
        if items:
            say(f"removed {kind.replace('_', ' ')}: {', '.join(items)}")
    say(f"lab {name} is down")


@lab.command(epilog=_fault_list())
@name_option
@click.argument("node")
@click.argument("faults", nargs=-1)
@click.option("--clear", is_flag=True, help="Clear every fault of the node.")
def fault(name: str, node: str, faults: tuple[str, ...], clear: bool) -> None:
    """Set the faults of a running NODE (replacing its earlier ones), or --clear them."""
    if clear == bool(faults):
        raise click.UsageError("give one or more faults, or --clear")
    changed = lab_core.set_faults(name, node, list(faults))
    say(f"{changed.name}: faults {', '.join(changed.faults) or 'none'}")


@lab.command()
@name_option
@click.argument("node")
def restart(name: str, node: str) -> None:
    """Restart NODE like a reboot and wait until it is back."""
    restarted = lab_core.restart_node(name, node)
    say(f"{restarted.name} is back")


def status_table(document: dict[str, Any]) -> Table:
    """The lab's nodes, one row each; it fits 80 columns by wrapping the faults and keeping
    each data disk to its serial and kernel name (the serial is what tells disks apart; the
    ``/dev/disk/by-id/nvme-LAB_NVMe_SSD_`` before it is the same on every disk, and in
    ``--json``)."""
    table = Table(title=f"lab {document['name']}  (repository {document['server']['url']})")
    for column in ("node", "address", "container", "ssh"):
        table.add_column(column, overflow="fold")
    table.add_column("faults", overflow="fold")
    disks = [
        f"{d['serial']} ({d['kernel_name']})" for node in document["nodes"] for d in node["disks"]
    ]
    table.add_column("data disks", no_wrap=True, min_width=max((len(d) for d in disks), default=1))
    for node in document["nodes"]:
        table.add_row(
            node["name"],
            node["ip"],
            node["container"],
            "up" if node["ssh"] else "down",
            ", ".join(node["faults"]) or "-",
            "\n".join(f"{d['serial']} ({d['kernel_name']})" for d in node["disks"]) or "-",
        )
    return table


def _print_status(document: dict[str, Any]) -> None:
    out_console.print(status_table(document))
    if document.get("inventory"):
        out_console.print(f"inventory: {document['inventory']}")
