"""``gpunode image``: build, verify, inspect and push training images (over toolkit.images)."""

from __future__ import annotations

from pathlib import Path

import click

from toolkit.cli.options import inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, err_console, out_console, say
from toolkit.errors import EXIT_FAILED, EXIT_OK

_GROUP = click.option(
    "-g", "--group", default=None, help="The inventory group (default: the only one with a stack)."
)


def _line(text: str) -> None:
    """One result line on stdout, never wrapped (IDs and paths are copied from it)."""
    out_console.print(text, soft_wrap=True)


@click.group(
    epilog="""\b
The image is rendered from the group's pinned stack (images/training/), built on the local
Docker engine and normalised, so the same inputs give the same image ID.

\b
Examples:
  gpunode image build -i inventories/lab
  gpunode image verify -i inventories/lab
  gpunode image inspect gpunode-training:<stack id> -i inventories/lab
  gpunode image push -i inventories/lab
"""
)
def image() -> None:
    """Build, verify, inspect and distribute training images."""


@image.command("build")
@inventory_option
@_GROUP
@click.option("--no-cache", is_flag=True, help="Build every step again.")
@json_option
def build(inventory: Path, group: str | None, no_cache: bool, as_json: bool) -> None:
    """Render, build and normalise the group's training image; tag it with the stack id.

    Prints the image ID and the recipe's input digest.
    """
    # Imported when the command runs: the image code loads Docker's client (and paramiko),
    # which `gpunode image --help` must not wait for.
    from toolkit.images.build import build_recipe, recipe_for

    recipe = recipe_for(inventory, group)
    for warning in recipe.warnings:
        err_console.print(f"[yellow]warning:[/] {warning}")
    outcome = build_recipe(recipe, no_cache=no_cache, progress=say)
    if as_json:
        emit_json(outcome.to_dict())
        return
    _line(f"image   {outcome.image_id}")
    _line(f"tag     {outcome.tag}")
    _line(f"recipe  {outcome.digest}")
    if outcome.reused:
        _line(
            f"reused  the recipe is unchanged: its normalised image, found in "
            f"{outcome.build_seconds:.1f}s (--no-cache builds again); {outcome.size / 1e6:.0f} MB"
        )
        return
    _line(
        f"builder {outcome.builder}; built in {outcome.build_seconds:.1f}s, normalised in "
        f"{outcome.normalise_seconds:.1f}s; {outcome.size / 1e6:.0f} MB"
    )


@image.command(
    "verify",
    epilog="Exit codes: 0 the rebuild gave the same image ID, 1 it did not (differences shown).",
)
@inventory_option
@_GROUP
@json_option
@click.pass_context
def verify(ctx: click.Context, inventory: Path, group: str | None, as_json: bool) -> None:
    """Rebuild the image from scratch without cache and compare the image IDs."""
    from toolkit.images.build import recipe_for, verify_recipe  # Docker's client: not for --help

    outcome = verify_recipe(recipe_for(inventory, group), progress=say)
    if as_json:
        emit_json(outcome.to_dict())
    elif outcome.same:
        _line(f"reproducible: {outcome.expected}")
    else:
        _line(f"NOT reproducible: {outcome.expected} != {outcome.rebuilt.image_id}")
        for line in outcome.differences:
            _line(f"  {line}")
    ctx.exit(EXIT_OK if outcome.same else EXIT_FAILED)


@image.command(
    "inspect",
    epilog="Exit codes: 0 the image agrees with the stack, 1 it does not (each problem shown).",
)
@click.argument("image_ref", metavar="IMAGE")
@click.option(
    "-i",
    "--inventory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Judge against this inventory's stack (default: the image's own labels).",
)
@_GROUP
@json_option
@click.pass_context
def inspect(
    ctx: click.Context, image_ref: str, inventory: Path | None, group: str | None, as_json: bool
) -> None:
    """Stack id, CUDA and the NCCL the framework really loads, against the stack."""
    # Imported when the command runs: the image code loads Docker's client (and paramiko),
    # which `gpunode image --help` must not wait for.
    from toolkit.images.build import recipe_for
    from toolkit.images.inspect import inspect_image

    recipe = recipe_for(inventory, group) if inventory else None
    result = inspect_image(image_ref, recipe)
    if as_json:
        emit_json(result.to_dict())
    else:
        doc = result.to_dict()
        nccl = doc["nccl_loaded"]
        source = nccl.get("source") or {}
        _line(f"image     {doc['image_id']}")
        _line(f"stack id  {doc['stack_id']}  CUDA {doc['cuda']}")
        _line(
            f"NCCL      {nccl.get('version') or 'none'} {nccl.get('how') or ''} from "
            f"{nccl.get('path') or '-'} ({source.get('kind') or '-'} "
            f"{source.get('package') or ''} {source.get('package_version') or ''})"
        )
        for other in nccl.get("others") or []:
            _line(f"also      NCCL {other.get('version')} at {other.get('path')}")
        for problem in result.problems:
            _line(f"[red]problem:[/] {problem}")
        _line("OK" if result.ok else "NOT OK")
    ctx.exit(EXIT_OK if result.ok else EXIT_FAILED)


@image.command(
    "push",
    epilog="Exit codes: 0 every node holds the image, 1 a node does not.",
)
@inventory_option
@_GROUP
@limit_option
@json_option
@click.pass_context
def push(
    ctx: click.Context, inventory: Path, group: str | None, limit: str | None, as_json: bool
) -> None:
    """Put the group's image on its nodes: the inventory's registry, else over SSH.

    Nodes that already hold the image's ID are skipped.
    """
    # Imported when the command runs: the image code loads Docker's client (and paramiko),
    # which `gpunode image --help` must not wait for.
    from toolkit.images.build import recipe_for
    from toolkit.images.distribute import push as push_image
    from toolkit.inventory import load_inventory

    recipe = recipe_for(inventory, group)
    inv = load_inventory(inventory)
    members = set(inv.group_hosts(recipe.group))
    hosts = [h for h in inv.hosts_for(limit) if h.name in members]
    outcome = push_image(recipe.tag, hosts, registry=recipe.registry, tag=recipe.tag, progress=say)
    if as_json:
        emit_json(outcome.to_dict())
    else:
        for node in outcome.nodes:
            line = f"{node.host}: {node.action}"
            if node.action == "loaded":
                line += (
                    f" ({node.layers_sent} of {node.layers_total} layers, "
                    f"{node.bytes_sent / 1e6:.1f} MB sent)"
                )
            if node.note:
                line += f" ({node.note})"
            if node.error:
                line += f" ({node.error})"
            _line(line)
        _line(
            f"{outcome.method}: {outcome.transferred} node(s) received {outcome.image_id} "
            f"in {outcome.seconds:.1f}s"
        )
    ctx.exit(EXIT_OK if outcome.ok else EXIT_FAILED)
