"""``gpunode node``: one node's records; ``history`` shows its passport, ``evidence`` writes
and verifies the RMA evidence pack of a node that failed."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table
from rich.text import Text

from toolkit.cli.options import inventory_option, json_option, optional_inventory_option
from toolkit.cli.output import emit_json, err_console, out_console, say, shown
from toolkit.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ConfigError
from toolkit.inventory import load_inventory
from toolkit.records import runs
from toolkit.records.passport import DEFAULT_SHARE, FIGURES, passport, read_fleet
from toolkit.report import evidence as core

_FILE = click.Path(dir_okay=False, path_type=Path)


@click.group()
def node() -> None:
    """One node's records across the recorded runs."""


@node.command(
    epilog="""\b
Exit codes: 0 shown (flags or not), 2 the node is not in the inventory or a record is bad
(a run file that cannot be read is named, and the rest is still shown).

\b
Examples:
  gpunode node history gpunode-node-1 -i inventories/lab
  gpunode node history gpunode-node-1 -i inventories/lab --json
"""
)
@click.argument("name")
@inventory_option
@click.option(
    "--share",
    type=float,
    default=DEFAULT_SHARE,
    show_default=True,
    help="How far (0.3: 30 %) a figure may fall below the node's own baseline or the fleet's "
    "before it is flagged.",
)
@json_option
@click.pass_context
def history(ctx: click.Context, name: str, inventory: Path, share: float, as_json: bool) -> None:
    """Show a node's passport: identity, counters and figures over time, with flags.

    From the recorded acceptance runs and passive checks: each GPU's slot, serial and UUID,
    the system's serials, NIC MACs and disk serials, remapped rows, and busbw, GEMM, memory
    bandwidth and storage p99 per run. Flags a swapped GPU, a failed GPU that came back,
    remaps rising run over run, and a figure far below the node's own median or the fleet's.
    """
    hosts = [h.name for h in load_inventory(inventory).hosts_for(None)]
    if name not in hosts:
        raise ConfigError(f"{inventory}: no host {name!r} (hosts: {', '.join(hosts)})")
    reading = read_fleet(runs.runs_dir(), hosts)
    card = passport(name, reading.observations, share, reading.problems)
    for problem in card.problems:
        say(f"problem: run {problem.run_id}: {problem.message}")
    if as_json:
        emit_json(card.to_dict())
        ctx.exit(EXIT_USAGE if card.problems else 0)
    table = Table(title=shown(f"{name}: {len(card.observations)} run(s)"), title_justify="left")
    for column in ("run", "kind", "ok", "GPU serials", "remapped rows", *FIGURES):
        table.add_column(column)
    for obs in card.observations:
        table.add_row(
            shown(obs.run_id),
            shown(obs.kind),
            shown("-" if obs.ok is None else "yes" if obs.ok else "no"),
            shown(" ".join(str(g.get("serial")) for g in obs.gpus) or "-"),
            shown(" ".join(str(g.get("remapped_rows")) for g in obs.gpus) or "-"),
            *(shown(f"{obs.figures[f]:g}" if f in obs.figures else "-") for f in FIGURES),
        )
    out_console.print(table)
    for flag in card.flags:
        out_console.print(
            Text.assemble(shown(f"{flag.kind}: ", "bold yellow"), shown(flag.message))
        )
    if not card.flags:
        out_console.print(shown("no flags", "green"))
    if card.problems:
        ctx.exit(EXIT_USAGE)


@node.command(
    epilog="""\b
Exit codes: 0 written (--verify: valid), 1 no pack: the node was ready or no acceptance run
recorded it (--verify: invalid, every reason named), 2 bad usage: not a host of the
inventory, no signing key, a file or key that cannot be read.

\b
Examples:
  gpunode node evidence gpunode-node-2 -i inventories/lab
  gpunode node evidence gpunode-node-2 -i inventories/lab --json
  gpunode node evidence --verify node-2.evidence.tar.gz --key provider_ed25519.pub
"""
)
@click.argument("name", required=False)
@optional_inventory_option("Inventory directory (for example inventories/lab); not with --verify.")
@click.option(
    "--sign-key",
    "sign_key",
    type=_FILE,
    default=None,
    help="Sign the pack's manifest with this OpenSSH key, as certificates are signed "
    "[default: the inventory's gpunode_sign_key].",
)
@click.option("--run", "run_id", default=None, help="The run to take the failure from.")
@click.option("--out", type=_FILE, default=None, help="Where to write the archive.")
@click.option("--verify", "archive", type=_FILE, default=None, help="Verify this pack instead.")
@click.option("--key", type=_FILE, default=None, help="With --verify: the provider's public key.")
@click.option(
    "--allowed-signers",
    type=_FILE,
    default=None,
    help="With --verify: an OpenSSH allowed-signers file instead of --key.",
)
@json_option
@click.pass_context
def evidence(
    ctx: click.Context,
    name: str | None,
    inventory: Path | None,
    sign_key: Path | None,
    run_id: str | None,
    out: Path | None,
    archive: Path | None,
    key: Path | None,
    allowed_signers: Path | None,
    as_json: bool,
) -> None:
    """Write the signed RMA evidence pack of a node that failed, or verify one.

    From the node's last acceptance run, offline (the node may be down): the failed checks
    with measured values, floors and sources, the recommended action, nvidia-smi -q, the XID
    lines, DCGM's JSON, ECC and row-remap counters, the parts' serials, UUIDs and PCI
    addresses, their passport history, the stack lock, and the commands NVIDIA asks for next;
    a manifest of every member's SHA-256, signed as certificates are (docs/certificates.md).
    """
    if archive is not None:
        if name or inventory or sign_key or run_id or out:
            raise ConfigError("--verify takes the archive and --key or --allowed-signers only")
        checked = core.verify(archive, key=key, allowed_signers=allowed_signers)
        if as_json:
            emit_json(checked.to_dict())
        else:
            out_console.print(shown(str(archive)))
            if checked.valid:
                err_console.print(shown(f"valid: signed by {checked.signer}", "green"))
            for problem in checked.problems:
                err_console.print(shown(f"invalid: {problem}", "bold red"))
        ctx.exit(EXIT_OK if checked.valid else EXIT_FAILED)
    if name is None or inventory is None or key or allowed_signers:
        raise ConfigError("give NODE and -i INVENTORY (or --verify ARCHIVE with --key)")
    pack = core.make(name, inventory, sign_key=sign_key, run_id=run_id, out=out)
    if as_json:
        emit_json(pack.to_dict())
        return
    table = Table(title=shown(f"{name}: run {pack.run_id}"), title_justify="left")
    for column in ("member", "origin", "bytes", "sha256"):
        table.add_column(column, overflow="fold")
    for member in pack.manifest["members"]:
        table.add_row(
            shown(member["name"]),
            shown(member["origin"]),
            shown(member["bytes"]),
            shown(member["sha256"]),
        )
    err_console.print(table)
    say(f"signed by {pack.signer}")
    out_console.print(shown(str(pack.path)))
