"""``gpunode cert``: show, verify and compare handover certificates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from toolkit.cli.options import json_option
from toolkit.cli.output import emit_json, err_console, out_console, shown
from toolkit.errors import EXIT_FAILED, EXIT_OK

_FILE = click.Path(dir_okay=False, path_type=Path)


@click.group(
    epilog="""\b
Exit codes: 0 valid (compare: same identity and installed stack), 1 invalid or tampered
(compare: they differ), 2 unusable input (a file or key that cannot be read).

\b
Examples:
  gpunode cert show .gpunode/runs/<run>/certs/node-1.cert
  gpunode cert verify node-1.cert --key provider_ed25519.pub
  gpunode cert compare handover/node-1.cert after-repair/node-1.cert
"""
)
def cert() -> None:
    """Show, verify and compare handover certificates (docs/certificates.md)."""


@cert.command("show")
@click.argument("file", type=_FILE)
@json_option
def show_cmd(file: Path, as_json: bool) -> None:
    """Print a certificate's summary; its signature is checked against no key.

    The signer's key fingerprint is shown; use `cert verify` with the provider's public key
    to know who signed it.
    """
    from toolkit import cert as core  # when run: the certificate code loads pydantic, --help not

    outcome = core.show(file)
    if as_json:
        document = outcome.document.model_dump(mode="json") if outcome.document else None
        emit_json({**outcome.to_dict(), "document": document})
    else:
        _print_outcome(outcome.to_dict(), verified=False)
    click.get_current_context().exit(EXIT_OK if outcome.valid else EXIT_FAILED)


@cert.command("verify")
@click.argument("file", type=_FILE)
@click.option("--key", type=_FILE, default=None, help="The provider's OpenSSH public key.")
@click.option(
    "--allowed-signers",
    type=_FILE,
    default=None,
    help="An OpenSSH allowed-signers file (ssh-keygen(1), ALLOWED SIGNERS) instead of --key.",
)
@json_option
def verify_cmd(file: Path, key: Path | None, allowed_signers: Path | None, as_json: bool) -> None:
    """Verify a certificate's signature and schema, then print its summary.

    Needs only the certificate and the provider's public key. Exit 0 valid, 1 invalid or
    tampered (every reason is named), 2 a file or key that cannot be used.
    """
    from toolkit import cert as core  # when run: the certificate code loads pydantic, --help not

    outcome = core.verify(file, key=key, allowed_signers=allowed_signers)
    if as_json:
        emit_json(outcome.to_dict())
    else:
        _print_outcome(outcome.to_dict(), verified=True)
    click.get_current_context().exit(EXIT_OK if outcome.valid else EXIT_FAILED)


@cert.command("compare")
@click.argument("a", type=_FILE)
@click.argument("b", type=_FILE)
@json_option
def compare_cmd(a: Path, b: Path, as_json: bool) -> None:
    """Show what differs between two certificates (signatures are not checked here).

    GPUs, disks and NICs are compared as whole records: a changed one is matched by PCI slot,
    serial or name (a swapped board shows by its serial and UUID); one without that key (a
    cloud disk has no serial) or sharing it shows whole. Exit 0 when identity and installed
    stack agree (only the proof differs), 1 when they do not.
    """
    from toolkit import cert as core  # when run: the certificate code loads pydantic, --help not

    diffs = core.compare(core.load(a), core.load(b))
    changed = [d for d in diffs if d.section != "proof"]
    if as_json:
        emit_json(
            {
                "a": str(a),
                "b": str(b),
                "same": not changed,
                "differences": [d.to_dict() for d in diffs],
            }
        )
    else:
        table = Table(title=shown(f"{a.name} -> {b.name}"))
        for column in ("section", "item", "key", "a", "b"):
            table.add_column(column, overflow="fold")
        for diff in diffs:
            style = "bold" if diff.section == "identity" else ""
            table.add_row(
                shown(diff.section, style),
                shown(diff.item),
                shown(diff.key),
                _cell(diff.a),
                _cell(diff.b),
            )
        out_console.print(table)
        err_console.print(
            "same identity and installed stack"
            if not changed
            else f"{len(changed)} difference(s) in identity or installed stack"
        )
    click.get_current_context().exit(EXIT_OK if not changed else EXIT_FAILED)


def _cell(value: Any) -> Text:
    """A value of a certificate as one table cell: a record as ``key=value`` pairs."""
    if value is None:
        return shown("-")
    if isinstance(value, list):
        return shown(", ".join(str(v) for v in value))
    if isinstance(value, dict):
        return shown(", ".join(f"{k}={'-' if v is None else v}" for k, v in value.items()))
    return shown(value)


def _print_outcome(outcome: dict[str, Any], verified: bool) -> None:
    summary = outcome["summary"]
    if summary:
        table = Table(show_header=False, title=shown(outcome["path"]), title_justify="left")
        table.add_column("field")
        table.add_column("value", overflow="fold")
        for key, value in summary.items():
            table.add_row(shown(key), _cell(value))
        table.add_row(shown("signer"), _cell(outcome["signer"]))
        out_console.print(table)
    if outcome["valid"]:
        word = "valid: signed by the given key" if verified else "signature matches (key unchecked)"
        err_console.print(shown(word, "green"))
    for problem in outcome["problems"]:
        err_console.print(shown(f"invalid: {problem}", "bold red"))
