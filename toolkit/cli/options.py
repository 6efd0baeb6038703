"""Options shared by several commands, declared once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

inventory_option = click.option(
    "-i",
    "--inventory",
    "inventory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="Inventory directory (for example inventories/lab).",
)


def optional_inventory_option(help_text: str) -> Callable[[F], F]:
    """``-i/--inventory`` where a command can run without one (``accept parse``,
    ``node evidence --verify``): the same option, not required, with its own help."""
    return click.option(
        "-i",
        "--inventory",
        "inventory",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help=help_text,
    )


limit_option = click.option(
    "-l", "--limit", "limit", default=None, help="Only these hosts or groups (Ansible pattern)."
)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout."
)
yes_option = click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
multi_node_option = click.option(
    "--multi-node",
    is_flag=True,
    help="Also run a ring over each group's nodes and pairwise tests to find a slow node.",
)
hooks_option = click.option(
    "--hook",
    "hooks",
    multiple=True,
    type=click.Choice(["slurm", "kubernetes"]),
    help="Mark nodes in a scheduler after the verdict (repeatable).",
)
engine_option = click.option(
    "--engine",
    type=click.Choice(["image", "host"]),
    default="image",
    show_default=True,
    help="image: the ranks run in the group's training image through the node's Docker "
    "(sent to nodes that lack it). host: the fallback for nodes without a container runtime, "
    "a venv with torch from the hashed lock on the node.",
)
executor_option = click.option(
    "--executor",
    type=click.Choice(["ssh", "slurm"]),
    default=None,
    help="How each node's acceptance starts: over SSH, or as a lowest-priority Slurm job on "
    "that node (drained or never-started nodes come out not-tested) [default: the "
    "inventory's gpunode_accept_executor, else ssh].",
)

sign_key_option = click.option(
    "--sign-key",
    "sign_key",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Sign a certificate for each node found ready with this OpenSSH key: a private key "
    "file (ed25519), or a public key whose private half is in the ssh-agent [default: the "
    "inventory's gpunode_sign_key; neither: no certificates].",
)


def compose(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply several option decorators in the order given."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply
