"""Action plugin ``gpunode_healthcheck``: the node-side health check's program and settings.

On the controller, from the inventory the play runs on (``inventory_dir``), the same plan as
``gpunode check`` makes for the host (``toolkit.check.plan``): its expectation per OS, the
units that must run, the thresholds, the probe's folders. Returns ``program`` (the
``HealthCheckProgram``, one Python file) and ``settings`` (its JSON settings) as text for the
role to install; it changes nothing itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase

from toolkit.check import plan
from toolkit.errors import ToolkitError
from toolkit.inventory import load_inventory


class ActionModule(ActionBase):
    """Compute the health check's program and settings for one host."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("node_name", "scontrol"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Return ``program`` and ``settings``, or fail naming the inventory's error."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        host = str(task_vars.get("inventory_hostname", ""))
        folder = task_vars.get("inventory_dir")
        node_name = str(self._task.args.get("node_name") or host)
        scontrol = str(self._task.args.get("scontrol") or "scontrol")
        try:
            if not folder:
                raise ToolkitError(f"host {host}: no inventory_dir to read the inventory from")
            inventory = load_inventory(Path(str(folder)))
            node = plan.plan_node(inventory, inventory.hosts_for(host)[0])
            settings = plan.healthcheck_settings(node, node_name, scontrol)
        except ToolkitError as err:
            result["failed"] = True
            result["msg"] = err.message
            return result
        result["program"] = plan.healthcheck_program()
        result["settings"] = plan.render_settings(settings)
        result["msg"] = f"health check of {host} as Slurm node {node_name}"
        return result
