"""The node's Prometheus textfiles (node_exporter's textfile collector).

Acceptance writes ``/var/lib/node_exporter/textfile_collector/gpunode.prom`` on each node; the
node-side passive check (``check.healthcheck``, under Slurm or its systemd timer) writes
``gpunode-check.prom`` beside it. Two files, and metric names of their own
(``gpunode_check_*``), so each can be replaced alone and no series is in both: the collector
parses every file of the folder matching ``*.prom`` into one exposition (node_exporter
README, "Textfile Collector", https://github.com/prometheus/node_exporter#textfile-collector).
Each file is replaced whole (``nodefile.replace``: a temporary file in the same folder whose
name is not ``*.prom``, then renamed), as that README does with ``mv``, so the collector never
reads half of one.

The format is Prometheus' text exposition format 0.0.4 (https://prometheus.io/docs/
instrumenting/exposition_formats/): lines end in ``\n``, the last one too; one ``# HELP`` and
one ``# TYPE`` line per metric name, before its samples; label values escape ``\\``, ``"``
and the line feed. Standard library only: shipped with the node-side check.

Every check is passed, failed or not measured (skipped, not judged, not covered: design.md,
"outcome"), and not measured is never counted as passed. Acceptance's file says so twice:
``gpunode_acceptance_checks{outcome="passed"|"failed"|"not_measured"}`` counts them, and
``gpunode_acceptance_check{check="<name>",outcome="<outcome>"} 1`` names each check's outcome
(one series per check; alert on ``outcome="not_measured"`` for coverage). The passive check's
file has ``gpunode_check_failed{check} 0|1`` and ``gpunode_check_not_measured{check} 0|1``: a
check with 0 in both passed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

OUTCOMES = ("passed", "failed", "not_measured")

TEXTFILE_DIR = "/var/lib/node_exporter/textfile_collector"
TEXTFILE_PATH = f"{TEXTFILE_DIR}/gpunode.prom"
CHECK_TEXTFILE_PATH = f"{TEXTFILE_DIR}/gpunode-check.prom"


def _escape(value: str) -> str:
    # Label values escape backslash, double quote and newline (exposition format 0.0.4).
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def render_textfile(node: dict[str, Any], run_id: str, timestamp: float) -> str:
    """The textfile for one node of a run summary.

    Args:
        node: One entry of the summary's ``nodes``.
        run_id: The run's id.
        timestamp: The verdict's time, seconds since the epoch.

    Returns:
        The file's text.
    """
    stack_id = str(node.get("installed_stack_id") or node.get("stack_id") or "unknown")
    base = {"stack_id": stack_id}
    lines = [
        "# HELP gpunode_node_ready 1 when the node passed gpunode's acceptance test.",
        "# TYPE gpunode_node_ready gauge",
        f"gpunode_node_ready{_labels(**base, run_id=run_id)} "
        f"{1 if node['verdict'] == 'ready' else 0}",
        "# HELP gpunode_allreduce_busbw_gbps All-reduce bus bandwidth by message size (GB/s).",
        "# TYPE gpunode_allreduce_busbw_gbps gauge",
    ]
    for row in node.get("allreduce_rows") or []:
        lines.append(
            f"gpunode_allreduce_busbw_gbps{_labels(**base, size=str(row['size_bytes']))} "
            f"{float(row['busbw_gbps']):.6g}"
        )
    lines += [
        "# HELP gpunode_failed_checks Number of acceptance checks the node failed.",
        "# TYPE gpunode_failed_checks gauge",
        f"gpunode_failed_checks{_labels(**base)} {len(node.get('failed_checks') or [])}",
        "# HELP gpunode_acceptance_checks Acceptance checks by outcome (not_measured: skipped, "
        "not judged or not covered, never counted as passed).",
        "# TYPE gpunode_acceptance_checks gauge",
    ]
    checks = node.get("checks") or []
    outcomes = [(str(c.get("name")), _outcome(c)) for c in checks]
    lines += [
        f"gpunode_acceptance_checks{_labels(**base, outcome=o)} "
        f"{sum(outcome == o for _, outcome in outcomes)}"
        for o in OUTCOMES
    ]
    lines += [
        "# HELP gpunode_acceptance_check Each acceptance check, its outcome in the outcome label "
        "(passed, failed, not_measured).",
        "# TYPE gpunode_acceptance_check gauge",
    ]
    lines += [
        f"gpunode_acceptance_check{_labels(**base, check=name, outcome=outcome)} 1"
        for name, outcome in outcomes
    ]
    lines += [
        "# HELP gpunode_acceptance_timestamp_seconds When the verdict was given.",
        "# TYPE gpunode_acceptance_timestamp_seconds gauge",
        f"gpunode_acceptance_timestamp_seconds{_labels(**base)} {timestamp:.0f}",
    ]
    return "\n".join(lines) + "\n"


def _outcome(check: dict[str, Any]) -> str:
    # A record from before the three outcomes has only ``ok``.
    outcome = check.get("outcome")
    return str(outcome) if outcome in OUTCOMES else "passed" if check.get("ok") else "failed"


def render_check_textfile(
    state: str, checks: Iterable[tuple[str, bool | str]], timestamp: float, duration_s: float
) -> str:
    """The passive check's textfile.

    Args:
        state: The node's state after the check (``ready``, ``not-ready`` ...).
        checks: Each check's name and its outcome (``passed``, ``failed``, ``not_measured``;
            a bool: passed or failed). A name seen twice fails when either failed, and is not
            measured only when neither was measured: one series per name.
        timestamp: When the check ran, seconds since the epoch.
        duration_s: How long it took.

    Returns:
        The file's text.
    """
    failed: dict[str, bool] = {}
    unmeasured: dict[str, bool] = {}
    for name, outcome in checks:
        if isinstance(outcome, bool):
            outcome = "passed" if outcome else "failed"
        failed[name] = failed.get(name, False) or outcome == "failed"
        unmeasured[name] = unmeasured.get(name, True) and outcome == "not_measured"
    lines = [
        "# HELP gpunode_check_node_ready 1 when the node is ready after gpunode's passive check.",
        "# TYPE gpunode_check_node_ready gauge",
        f"gpunode_check_node_ready{_labels(state=state)} {1 if state == 'ready' else 0}",
        "# HELP gpunode_check_failed 1 for each passive check the node failed, 0 if it passed.",
        "# TYPE gpunode_check_failed gauge",
    ]
    lines += [
        f"gpunode_check_failed{_labels(check=name)} {int(bad)}"
        for name, bad in sorted(failed.items())
    ]
    lines += [
        "# HELP gpunode_check_not_measured 1 for each passive check that was not measured "
        "(not judged: nothing to read), 0 if it was.",
        "# TYPE gpunode_check_not_measured gauge",
    ]
    lines += [
        f"gpunode_check_not_measured{_labels(check=name)} {int(unmeasured[name])}"
        for name in sorted(failed)
    ]
    lines += [
        "# HELP gpunode_check_failures Number of passive checks the node failed.",
        "# TYPE gpunode_check_failures gauge",
        f"gpunode_check_failures {sum(failed.values())}",
        "# HELP gpunode_check_timestamp_seconds When the passive check ran.",
        "# TYPE gpunode_check_timestamp_seconds gauge",
        f"gpunode_check_timestamp_seconds {timestamp:.3f}",
        "# HELP gpunode_check_duration_seconds How long the passive check took.",
        "# TYPE gpunode_check_duration_seconds gauge",
        f"gpunode_check_duration_seconds {duration_s:.3f}",
    ]
    return "\n".join(lines) + "\n"
