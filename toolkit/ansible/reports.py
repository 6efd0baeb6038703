"""Reports built from playbook results: drift per node, node states."""

from __future__ import annotations

import base64
from typing import Any

from toolkit import nodestate
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


def state_from_slurp(res: dict[str, Any]) -> dict[str, Any]:
    """The node state from a ``slurp`` result of the state file (``new`` when absent).

    Returns:
        The state dict (``toolkit.nodestate``); an unreadable file gives state ``unknown``
        with the reason.
    """
    if res.get("failed") or "content" not in res:
        message = str(res.get("msg") or "")
        if "not found" in message.lower() or "no such file" in message.lower() or not message:
            return nodestate.new()
        return {"state": "unknown", "reason": [message]}
    try:
        return nodestate.parse(base64.b64decode(res["content"]))
    except ValueError as err:
        return {"state": "unknown", "reason": [f"{nodestate.PATH} is not base64: {err}"]}
