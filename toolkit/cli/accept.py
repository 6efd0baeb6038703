"""``gpunode accept``: the acceptance test, verdicts and marking nodes ready."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.table import Table

from toolkit.cli.options import (
    engine_option,
    executor_option,
    hooks_option,
    json_option,
    multi_node_option,
    optional_inventory_option,
    sign_key_option,
)
from toolkit.cli.output import emit_json, out_console, say, shown
from toolkit.errors import EXIT_FAILED, EXIT_OK
from toolkit.records import runs
from toolkit.report.text import counts_text, outcome_counts
from toolkit.steps.accept.options import AcceptOptions


@click.group(invoke_without_command=True)
@optional_inventory_option(
    "Inventory directory (for example inventories/lab). Required to run the test."
)
@click.option(
    "-l", "--limit", "limit", default=None, help="Only these hosts or groups (comma-separated)."
)
@multi_node_option
@hooks_option
@engine_option
@executor_option
@sign_key_option
@click.option(
    "--runs-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the run is recorded on this machine [default: $GPUNODE_STATE_DIR/runs or "
    ".gpunode/runs].",
)
@json_option
@click.pass_context
def accept(
    ctx: click.Context,
    inventory: Path | None,
    limit: str | None,
    multi_node: bool,
    hooks: tuple[str, ...],
    engine: str,
    executor: str | None,
    sign_key: Path | None,
    runs_dir: Path | None,
    as_json: bool,
) -> None:
    """Run the acceptance test and mark nodes ready.

    Ships the node-side runner, runs the checks and the all-reduce on every node (and with
    --multi-node across nodes), gives a verdict per node, writes /etc/gpunode/state.json and
    the Prometheus textfile on each node and records the run. Exits 1 when any node is not
    ready. With a signing key each ready node gets a handover certificate in the run folder
    (`gpunode cert`). `gpunode accept parse FILE` reads a captured nccl-tests output or
    `dcgmi diag -j` document instead.
    """
    if ctx.invoked_subcommand is not None:
        return
    if inventory is None:
        raise click.UsageError("Missing option '-i' / '--inventory' (or use: accept parse FILE).")
    # Imported when a run starts: the step loads Docker's client and Fabric (over a second),
    # which `gpunode accept --help`, `accept parse` and a refused usage must not wait for.
    from toolkit.steps.accept.run import run_acceptance

    run = run_acceptance(
        AcceptOptions(
            inventory=inventory,
            limit=limit,
            multi_node=multi_node,
            hooks=hooks,
            runs_dir=runs_dir or runs.runs_dir(),
            engine=engine,
            executor=executor,
            sign_key=sign_key,
        ),
        progress=say,
    )
    if as_json:
        emit_json(run.summary())
    else:
        _print_verdicts(run.summary())
        say(f"Run {run.run_id} recorded in {run.run_dir}: report.html, junit.xml, run.json")
        for node in run.summary()["nodes"]:
            if node["certificate"]:
                say(f"{node['host']}: certificate {node['certificate']}")
            elif node["certificate_note"]:
                say(f"{node['host']}: {node['certificate_note']}")
    click.get_current_context().exit(EXIT_OK if run.all_ready else EXIT_FAILED)


def _print_verdicts(summary: dict[str, Any]) -> None:
    table = Table(title=shown(f"gpunode acceptance (run {summary['run_id']})"))
    columns = ("node", "verdict", "stack id", "busbw (GB/s)", "checks", "failed checks")
    for column in (*columns, "not measured"):
        table.add_column(column)
    for node in summary["nodes"]:
        failed = "; ".join(
            f"{f['check']}: {f['message']}"
            + (f" -> [{f['failure_class']}] {f['action']}" if f.get("failure_class") else "")
            for f in node["failed_checks"]
        )
        # Not measured is its own outcome: counted apart, each with its reason, never passed.
        unmeasured = "; ".join(
            f"{n['check']}: {n['reason']}" for n in node.get("not_measured_checks") or []
        )
        table.add_row(
            shown(node["host"]),
            shown(node["verdict"]),
            shown(node.get("stack_id") or "-"),
            shown(_fmt(node.get("busbw_at_largest_gbps"))),
            shown(counts_text(node.get("outcomes") or outcome_counts(node.get("checks") or []))),
            shown(failed or "-"),
            shown(unmeasured or "-"),
        )
    out_console.print(table)


def _fmt(value: Any) -> str:
    return "-" if value is None else f"{value:.2f}"


@accept.command("parse")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--allow-truncated",
    is_flag=True,
    help="Accept a capture whose last table has no footer (an excerpt); by default it is "
    "incomplete and not ok.",
)
@json_option
def parse_cmd(file: Path, allow_truncated: bool, as_json: bool) -> None:
    """Parse a captured nccl-tests output (text or -J JSON) or `dcgmi diag -j` document.

    With NCCL_DEBUG=INFO lines in the capture, what they say of the transports (network,
    GPUDirect RDMA, NVLS) is shown as well. Exit 0 when the output is correct (no wrong
    values, footer OK, every row readable), 1 when not, 2 when the file is not an nccl-tests
    output. A DCGM document (JSON with `DCGM Diagnostic`) shows the DCGM version and each
    plugin's outcome (passed, failed, not measured) with DCGM's error, severity and category
    names; exit 1 when a plugin failed, 0 when every plugin measured passed.
    """
    # Imported when a capture is parsed: the parsers load pydantic (their rules), which
    # `gpunode accept --help` must not wait for.
    from toolkit.acceptance import dcgm, nccltests

    report = dcgm.read_capture(file)
    if report is not None:
        if as_json:
            emit_json(report.to_dict())
        else:
            _print_dcgm(file, report.to_dict())
        click.get_current_context().exit(EXIT_OK if report.ok else EXIT_FAILED)
    result = nccltests.parse_file(file, allow_truncated=allow_truncated)
    document = result.to_dict()
    if as_json:
        emit_json(document)
    else:
        _print_parsed(file, document)
    click.get_current_context().exit(EXIT_OK if result.ok else EXIT_FAILED)


def _print_parsed(file: Path, doc: dict[str, Any]) -> None:
    title = f"{file.name}: {doc['ranks'] or '?'} ranks ({doc['ranks_source'] or '-'})"
    table = Table(title=shown(title))
    for column in ("size (B)", "oop busbw", "ip busbw", "oop wrong", "ip wrong"):
        table.add_column(column, justify="right")
    for row in doc["rows"]:
        oop, inp = row["out_of_place"] or {}, row["in_place"] or {}
        table.add_row(
            shown(row["size_bytes"]),
            shown(_fmt(oop.get("busbw_gbps"))),
            shown(_fmt(inp.get("busbw_gbps"))),
            shown(oop.get("wrong", "-")),
            shown(inp.get("wrong", "-")),
        )
    out_console.print(table)
    out_console.print(
        shown(
            f"peak busbw {doc['peak_busbw_gbps']:.2f} GB/s; at {doc['largest_size_bytes']} B: "
            f"{doc['busbw_at_largest_gbps']:.2f} GB/s; wrong {doc['wrong_total']}; "
            f"NCCL {doc['nccl_version'] or 'unknown'}; {'OK' if doc['ok'] else 'NOT OK'}"
        )
    )
    if transport := doc.get("transport"):
        out_console.print(shown(f"transport (NCCL log): {transport['describe']}"), soft_wrap=True)
    for reason in [*doc["errors"], *doc["problems"]]:
        out_console.print(shown(f"not ok: {reason}"), soft_wrap=True)


def _print_dcgm(file: Path, doc: dict[str, Any]) -> None:
    title = f"{file.name}: dcgmi diag, DCGM {doc['version'] or 'version not reported'}"
    table = Table(title=shown(title))
    for column in ("category", "plugin", "outcome", "DCGM error (severity)"):
        table.add_column(column)
    for plugin in doc["plugins"]:
        codes = [
            f"{w['error_id']} ({w['severity_name'] or w['severity'] or '-'})"
            for w in plugin["warnings"]
            if w["error_id"] is not None and plugin["outcome"] != "passed"
        ]
        table.add_row(
            shown(plugin["category"] or "-"),
            shown(plugin["plugin"]),
            shown(plugin["outcome"]),
            shown(", ".join(dict.fromkeys(codes)) or "-"),
        )
    out_console.print(table)
    driver = f"; driver {doc['driver']}" if doc["driver"] else ""
    verdict = "OK" if doc["ok"] else "NOT OK"
    out_console.print(shown(f"DCGM {doc['version'] or 'version not reported'}{driver}; {verdict}"))
    for plugin in doc["plugins"]:
        if plugin["outcome"] != "passed":
            out_console.print(shown(plugin["message"]), soft_wrap=True)
