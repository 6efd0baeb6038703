"""Reports built from playbook results: drift per node."""

from __future__ import annotations

from typing import Any

from toolkit.ansible.events import RunResult


def drift_report(result: RunResult) -> dict[str, Any]:
    """Per node: stack id, pinned/installed/held/loaded versions and drift, from a drift run.

    Nodes the run could not read (failed preflight, unreachable) are listed under
    ``errors`` with the failure message.
    """
    nodes: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for failure in result.failures:
        errors.setdefault(failure.host, f"{failure.task}: {failure.message}")
    for host in sorted(result.hosts):
        node = result.host_facts(host, "gpunode_node")
        stack = result.host_facts(host, "gpunode_stack") or {}
        if not isinstance(node, dict) or "versions" not in node:
            errors.setdefault(host, "no versions were read")
            continue
        drift = [
            {**item, "host": host, "message": f"{host}: {item['message'].removeprefix('drift: ')}"}
            for item in node.get("drift", [])
        ]
        nodes[host] = {
            "stack_id": stack.get("stack_id"),
            "versions": node["versions"],
            "drift": drift,
        }
    drifted = sorted(h for h, n in nodes.items() if n["drift"])
    return {
        "ok": not drifted and not errors,
        "drifted": drifted,
        "nodes": nodes,
        "errors": errors,
    }
