"""The node's Prometheus textfile (node_exporter's textfile collector).

Written to ``/var/lib/node_exporter/textfile_collector/gpunode.prom`` on each node; the
format is Prometheus' text exposition format 0.0.4.
"""

from __future__ import annotations

from typing import Any

TEXTFILE_PATH = "/var/lib/node_exporter/textfile_collector/gpunode.prom"


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
        "# HELP gpunode_acceptance_timestamp_seconds When the verdict was given.",
        "# TYPE gpunode_acceptance_timestamp_seconds gauge",
        f"gpunode_acceptance_timestamp_seconds{_labels(**base)} {timestamp:.0f}",
    ]
    return "\n".join(lines) + "\n"
