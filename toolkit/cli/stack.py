"""``gpunode stack``: check and show pinned NVIDIA stacks (a thin layer over toolkit.stack)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.text import Text

from toolkit.cli.options import inventory_option, json_option, limit_option
from toolkit.cli.output import emit_json, err_console, out_console, shown
from toolkit.errors import StackError
from toolkit.stack.systems import SUPPORTED_OS

if TYPE_CHECKING:
    from toolkit.inventory.targets import Target

_PATH = click.argument(
    "path", type=click.Path(exists=True, dir_okay=True, file_okay=True, path_type=Path)
)
_STYLE = {"error": "bold red", "warning": "yellow"}


def _load_targets(path: Path) -> tuple[bool, list[Target]]:
    """``toolkit.inventory.targets.load_targets``, imported when a command runs."""
    # The targets load the models, the checker and pydantic, which `gpunode stack --help`
    # must not wait for (tests/bench/test_bench_cli.py measures it).
    from toolkit.inventory.targets import load_targets

    return load_targets(path)


@click.group(
    epilog="""\b
PATH is a one-file stack (`stack:` and `hardware:` in one YAML file) or an
inventory directory, whose groups are checked one by one.

\b
Examples:
  gpunode stack check inventories/sample
  gpunode stack check my-stack.yml --json
  gpunode stack show inventories/sample --os debian12
  gpunode stack lock -i inventories/lab
"""
)
def stack() -> None:
    """Check and show pinned NVIDIA stacks."""


@stack.command(
    "check",
    epilog="""\b
Exit codes: 0 coherent (warnings are printed but pass), 2 incoherent or malformed.

\b
Examples:
  gpunode stack check inventories/sample
  gpunode stack check my-stack.yml --json
""",
)
@_PATH
@json_option
def check(path: Path, as_json: bool) -> None:
    """Check a stack against NVIDIA's compatibility matrix.

    Reports every violation (driver vs CUDA, NCCL build vs CUDA, Fabric Manager vs driver,
    GPU architecture vs driver flavour, branch and CUDA), each naming both values, the rule
    and its source.
    """
    is_inventory, targets = _load_targets(path)
    reports = {target.group: target.report() for target in targets}
    failed = [group for group, report in reports.items() if not report["ok"]]
    if as_json:
        if is_inventory:
            emit_json({"ok": not failed, "groups": {str(g): r for g, r in reports.items()}})
        else:
            emit_json(reports[None])
    else:
        for group, report in reports.items():
            _print_report(path, group, report)
    if failed:
        errors = sum(
            1 for r in reports.values() for v in r["violations"] if v["severity"] == "error"
        )
        where = f" (groups: {', '.join(str(g) for g in failed)})" if is_inventory else ""
        raise StackError(f"{path}: the stack is incoherent: {errors} error(s){where}")


def _print_report(path: Path, group: str | None, report: dict[str, Any]) -> None:
    name = f"group {group}" if group is not None else str(path)
    errors = [v for v in report["violations"] if v["severity"] == "error"]
    warnings = [v for v in report["violations"] if v["severity"] == "warning"]
    verdict = "coherent" if report["ok"] else "INCOHERENT"
    counts = ", ".join(
        f"{len(items)} {label}{'s' if len(items) != 1 else ''}"
        for items, label in ((errors, "error"), (warnings, "warning"))
        if items
    )
    line = Text()
    line.append(f"{name}: ", style="bold")
    line.append(verdict, style="green" if report["ok"] else "bold red")
    line.append(f"  stack {report['stack_id']}")
    if counts:
        line.append(f"  ({counts})")
    out_console.print(line, soft_wrap=True)
    for violation in report["violations"]:
        item = Text("  ")
        item.append(f"{violation['severity']:<7}", style=_STYLE[violation["severity"]])
        item.append_text(shown(f" {violation['rule']}: {violation['message']}"))
        out_console.print(item, soft_wrap=True)


@stack.command(
    "show",
    epilog="""\b
Examples:
  gpunode stack show inventories/sample
  gpunode stack show my-stack.yml --os ubuntu2404 --deb822
  gpunode stack show inventories/sample --json
""",
)
@_PATH
@click.option(
    "--os",
    "os_ids",
    multiple=True,
    type=click.Choice(SUPPORTED_OS),
    help="Only this OS (repeatable). Default: every supported OS.",
)
@click.option(
    "--arch",
    type=click.Choice(["x86_64", "sbsa"]),
    default=None,
    help="Repository arch. Default: sbsa for Grace systems, else x86_64.",
)
@click.option("--deb822", is_flag=True, help="Print repositories as deb822 sources.")
@json_option
def show(
    path: Path, os_ids: tuple[str, ...], arch: str | None, deb822: bool, as_json: bool
) -> None:
    """Show exact packages, apt repositories and the stack id, per OS.

    Packages are printed as `name=version`, ready for `apt-get install`. An incoherent
    stack is still shown, its errors printed on stderr, and exits 2.
    """
    is_inventory, targets = _load_targets(path)
    os_list = list(os_ids) or list(SUPPORTED_OS)
    documents: dict[str | None, dict[str, Any]] = {}
    for target in targets:
        document = target.report()
        document["resolved"] = {os_id: target.resolve_locked(os_id, arch) for os_id in os_list}
        documents[target.group] = document
    failed = [g for g, d in documents.items() if not d["ok"]]
    if as_json:
        if is_inventory:
            emit_json({"ok": not failed, "groups": {str(g): d for g, d in documents.items()}})
        else:
            emit_json(documents[None])
    else:
        for group, document in documents.items():
            _print_resolved(path, group, document, deb822)
    for group, document in documents.items():
        for violation in document["violations"]:
            where = f"group {group}: " if group is not None else ""
            text = Text.assemble(
                shown(f"{where}{violation['severity']}: ", _STYLE[violation["severity"]]),
                shown(f"{violation['rule']}: {violation['message']}"),
            )
            err_console.print(text, soft_wrap=True)
    if failed:
        where = f" (groups: {', '.join(str(g) for g in failed)})" if is_inventory else ""
        raise StackError(f"{path}: the stack is incoherent{where}; see `gpunode stack check`")


@stack.command(
    "lock",
    epilog="""\b
Each group's OSes come from the inventory variable gpunode_stack_os. Nothing is written
unless every group resolves.

\b
Exit codes: 0 written, 2 incoherent stack, bad inventory, or a repository that lacks a pinned
version, has a key with another fingerprint or a bad signature (every package named).

\b
Examples:
  gpunode stack lock -i inventories/lab
  gpunode stack lock -i inventories/prod --json
""",
)
@inventory_option
@limit_option
@json_option
def lock(inventory: Path, limit: str | None, as_json: bool) -> None:
    """Resolve each group's stack against its repositories and write stack.lock.yml.

    Reads every configured repository's signed index (signature checked with gpgv against
    the key, whose fingerprint is checked first), picks the exact Debian version of each
    pinned package for each OS of the group, and writes group_vars/<group>/stack.lock.yml
    (versions, architectures, SHA256s, repositories, stack id) for you to commit.
    """
    from toolkit.inventory.targets import lock_inventory  # the models, pydantic: not for --help

    outcomes = lock_inventory(inventory, limit=limit)
    if as_json:
        emit_json({"ok": True, "locks": [o.to_dict() for o in outcomes]})
        return
    for outcome in outcomes:
        line = Text()
        line.append(f"group {outcome.group}: ", style="bold")
        line.append(f"stack {outcome.stack_id} locked in {outcome.path}")
        line.append(" (changed)" if outcome.changed else " (unchanged)")
        out_console.print(line, soft_wrap=True)
        for os_id, packages in outcome.packages.items():
            out_console.print(shown(f"  {os_id}", style="bold"), soft_wrap=True)
            for package, version in packages.items():
                out_console.print(shown(f"    {package}={version}"), soft_wrap=True)


_SECTIONS = ("driver", "cuda", "nccl", "fabric_manager", "container_toolkit", "cudnn", "dcgm")


def _print_resolved(path: Path, group: str | None, document: dict[str, Any], deb822: bool) -> None:
    name = f"group {group}" if group is not None else str(path)
    head = Text.assemble(shown(f"{name}: ", "bold"), shown(f"stack {document['stack_id']}"))
    out_console.print(head, soft_wrap=True)
    for os_id, resolved in document["resolved"].items():
        note = "" if resolved.get("locked") else "  (not locked: versions are requirements)"
        out_console.print(shown(f"  {os_id}{note}", style="bold"), soft_wrap=True)
        for section in _SECTIONS:
            part = resolved[section]
            if part is None:
                continue
            if section == "fabric_manager" and not part["enabled"]:
                out_console.print(shown(f"    # {section}: not installed"), soft_wrap=True)
                continue
            out_console.print(shown(f"    # {section} {part['version']}"), soft_wrap=True)
            pinning = part.get("pinning_packages") or {}
            if pinning:
                out_console.print(shown("    # version lock: install before the driver"))
            for package, version in pinning.items():
                out_console.print(shown(f"    {package}={version}"), soft_wrap=True)
            if pinning:
                out_console.print(shown("    # driver packages"))
            for package, version in part["packages"].items():
                out_console.print(shown(f"    {package}={version}"), soft_wrap=True)
        out_console.print(shown("    # repositories"), soft_wrap=True)
        for index, repo in enumerate(resolved["repositories"]):
            if deb822 and index:
                out_console.print("")  # deb822 stanzas are separated by a blank line
            for line in _repo_lines(repo, deb822):
                out_console.print(shown(f"    {line}"), soft_wrap=True)


def _repo_lines(repo: dict[str, str], deb822: bool) -> list[str]:
    key = f"# key {repo['key_url']}" + (
        f" (fingerprint {repo['fingerprint']})" if repo.get("fingerprint") else ""
    )
    if deb822:
        return [
            key,
            f"# {repo['name']}",
            "Types: deb",
            f"URIs: {repo['uri']}",
            f"Suites: {repo['suite']}",
            f"Signed-By: {repo['keyring']}",
        ]
    return [key, f"deb [signed-by={repo['keyring']}] {repo['uri']} {repo['suite']}"]
