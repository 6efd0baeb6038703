"""The fleet's status: what every node is, has and has proven, read without changing it.

One drift run in check mode (read-only: the probes only read, and the ``node_state`` step
writes nothing in check mode) gives each node's GPUs, pinned/installed/loaded versions,
mounts, and its state as the drift check would leave it (a ready node that drifted shows
not-ready, with the drift). The hardware profile says what the node must have.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from toolkit import cert
from toolkit.ansible.runner import run_playbook
from toolkit.inventory import load_inventory
from toolkit.node import nodestate
from toolkit.progress import Display
from toolkit.steps.precheck import check_inventory
from toolkit.steps.provision import drift_report

COMPONENTS = ("driver", "cuda", "nccl")


@dataclass
class NodeStatus:
    """One node as ``gpunode status`` shows it."""

    host: str
    state: dict[str, Any]
    gpus_seen: int | None = None
    gpus_expected: int | None = None
    gpu_model: str | None = None
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)
    drift: list[str] = field(default_factory=list)
    data_mount: str | None = None
    data_fstype: str | None = None  # None: the declared mount point has nothing mounted
    error: str | None = None
    certificate: str | None = None  # the newest handover certificate in the runs folder
    stack_id: str | None = None  # the stack id the inventory pins now
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    revalidate_days: float | None = None  # nodestate.REVALIDATE_VAR, when the site sets it

    @property
    def shown(self) -> dict[str, Any]:
        """The state as it proves readiness now (``nodestate``'s rule, the one ``gpunode up``
        uses: a ready file whose verdict expired or whose stack is no longer the one pinned
        reads not-ready, with why)."""
        return nodestate.proven_state(
            self.state, self.stack_id, self.now, revalidate_days=self.revalidate_days
        )

    @property
    def ready(self) -> bool:
        """The node is ready (as the drift check would leave it) and its verdict still proves
        it for the stack pinned now."""
        return self.shown.get("state") == "ready" and not self.error

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (a ready state that no longer proves readiness shows not-ready,
        with why)."""
        shown = self.shown
        return {
            "host": self.host,
            "state": shown.get("state"),
            "reason": list(shown.get("reason") or []),
            "stack_id": self.state.get("stack_id"),
            "since": self.state.get("time"),
            "valid_until": self.state.get("valid_until"),
            "image_id": self.state.get("image_id"),
            "busbw_at_largest_gbps": self.state.get("busbw_at_largest_gbps"),
            "accepted_run_id": self.state.get("accepted_run_id"),
            "gpus": {
                "seen": self.gpus_seen,
                "expected": self.gpus_expected,
                "model": self.gpu_model,
            },
            "versions": self.versions,
            "drift": self.drift,
            "data": {"mount_point": self.data_mount, "fstype": self.data_fstype},
            "error": self.error,
            "certificate": self.certificate,
            "ready": self.ready,
        }


def component_versions(versions: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per component: whether every package of it is installed at its pin (and, for the
    driver, loaded), with the pinned and installed version of the first package that is not
    (or of the first package, when all are)."""
    out: dict[str, dict[str, Any]] = {}
    for component in COMPONENTS:
        rows = versions.get(component) or {}
        if not rows:
            continue
        ordered = [rows[name] for name in sorted(rows)]
        moved = [r for r in ordered if r.get("installed") != r.get("pinned")]
        shown = moved[0] if moved else ordered[0]  # what differs, when anything does
        entry = {
            "pinned": shown.get("pinned"),
            "installed": shown.get("installed"),
            "ok": not moved,
        }
        ok = not moved
        if component == "driver":
            loaded = versions.get("loaded_driver") or {}
            entry["loaded"] = loaded.get("loaded")
            entry["ok"] = ok and loaded.get("loaded") == loaded.get("pinned")
        out[component] = entry
    return out


def fleet_status(
    inventory: Path,
    limit: str | None = None,
    *,
    display: Display | None = None,
    runs_dir: Path | None = None,
) -> list[NodeStatus]:
    """Every targeted node's status, read-only, with its newest certificate in ``runs_dir``.

    Raises:
        ConfigError, StackError: Bad inventory or incoherent stack (nothing touched).
    """
    found = check_inventory(inventory, limit)
    inv = load_inventory(inventory)
    result = run_playbook("drift", inventory, limit=limit, check=True, display=display)
    report = drift_report(result)
    certificates = cert.latest(runs_dir)
    nodes = []
    for host in found.hosts:
        _stack, hardware = inv.host_config(inv.hosts[host])
        data = hardware.data_disks.mount_point if hardware.data_disks else None
        facts = result.host_facts(host, "gpunode_node") or {}
        fact = result.host_facts(host, "gpunode_node_state")
        node = NodeStatus(
            host=host,
            state=dict(fact) if isinstance(fact, dict) else nodestate.new(),
            gpus_expected=hardware.gpu.count,
            gpu_model=hardware.gpu.model,
            data_mount=data,
            error=report["errors"].get(host),
            certificate=str(certificates[host]) if host in certificates else None,
            stack_id=found.stack_ids.get(host),
            revalidate_days=found.revalidate_days.get(host),
        )
        if isinstance(facts, dict) and facts:
            node.gpus_seen = facts.get("gpu_count")
            mount = (facts.get("mounts") or {}).get(data) if data else None
            node.data_fstype = mount.get("fstype") if mount else None
        entry = report["nodes"].get(host)
        if entry:
            node.versions = component_versions(entry["versions"])
            node.drift = [str(d["message"]) for d in entry["drift"]]
        if node.error:
            node.state = {"state": "unknown", "reason": [node.error]}
        nodes.append(node)
    return nodes
