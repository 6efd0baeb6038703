"""Action plugin ``gpunode_converge_plan``: decide per component whether its role runs.

Runs on the controller only (no round trip): the node's facts were read by
``gpunode_node_facts`` (fact ``gpunode_node``, its ``converged`` part holding the stamps);
the decision is :func:`toolkit.node.converge.plan`. A component's inputs are its role's options
(the names in ``meta/argument_specs.yml``, as resolved for this host), the extra inputs of
:data:`toolkit.node.converge.EXTRA_INPUTS` and the content of its roles. The plan is returned as
the fact ``gpunode_plan`` and shown as lines ("driver: up to date").
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase

from toolkit import __version__
from toolkit.ansible.content import find_content
from toolkit.ansible.values import plain
from toolkit.config import load_yaml
from toolkit.node import converge

FACT = "gpunode_plan"
UNSET = "<unset>"


@cache
def _options(roles_dir: Path, role: str) -> tuple[str, ...]:
    spec = load_yaml(roles_dir / role / "meta" / "argument_specs.yml")
    options = spec["argument_specs"]["main"].get("options") or {}
    return tuple(sorted(options))


@cache
def _content(roles_dir: Path, roles: tuple[str, ...]) -> str:
    return converge.content_digest(roles_dir, roles)


class ActionModule(ActionBase):
    """Plan the converge of one node."""

    TRANSFERS_FILES = False
    _VALID_ARGS: frozenset[str] = frozenset()

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Compute each component's inputs digest and decide from the node's facts."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        roles_dir = find_content().roles
        node = plain(task_vars.get("gpunode_node")) or {}
        inputs = {}
        for component, roles in converge.ROLES.items():
            values = {name: self._value(task_vars, name) for name in _options(roles_dir, roles[0])}
            for dotted in converge.EXTRA_INPUTS.get(component, ()):
                values[dotted] = self._value(task_vars, dotted)
            inputs[component] = converge.inputs_digest(
                _content(roles_dir, roles), values, __version__
            )
        decisions = converge.plan(inputs, node.get("converged") if node else None, node)
        result["ansible_facts"] = {FACT: converge.plan_dicts(decisions)}
        result["msg"] = "; ".join(d.line() for d in decisions.values())
        return result

    def _value(self, task_vars: dict[str, Any], dotted: str) -> Any:
        """A variable (or a dotted path into one) as resolved for this host; UNSET if not."""
        head, *rest = dotted.split(".")
        if head not in task_vars:
            return UNSET
        try:
            value = plain(self._templar.template(task_vars[head]))
        except Exception:  # an undefined or failing template: an input of its own
            return UNSET
        for key in rest:
            if not isinstance(value, dict) or key not in value:
                return UNSET
            value = value[key]
        return converge.file_value(value) if dotted in converge.CONTROLLER_FILES else value
