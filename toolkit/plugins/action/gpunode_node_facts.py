"""Action plugin ``gpunode_node_facts``: every fact a converge depends on, in one round trip.

One shell round trip runs read-only probes on the node (so it also runs in check mode): OS
and kernel (returned as Ansible's own ``ansible_distribution``, ``ansible_kernel``, ... so no
``setup`` is needed), GPUs, Secure Boot, packages, holds, the loaded driver, mounts, the node
state file and the converge stamps (``toolkit.node.converge``); the output is parsed on the
controller by ``toolkit.node.nodefacts`` with the parsers of ``toolkit.facts``. With a
resolved stack (``stack``, or the fact ``gpunode_stack``) it also compares pinned, installed
and loaded versions: ``gpunode_node.drift`` lists every difference. ``compare: true`` adds that
comparison to the facts already read, without a round trip (preflight reads the facts before
it resolves the stack). ``read: [NAME, ...]`` reads only those facts of
``toolkit.node.nodefacts.ON_DEMAND`` now, in one round trip, and returns them under ``read``
(for a role that checks what it has just changed, or what runs on the GPUs now).
"""

from __future__ import annotations

import shlex
from typing import Any

from ansible.plugins.action import ActionBase

from toolkit.ansible.values import plain
from toolkit.facts import probe
from toolkit.node.nodefacts import (
    ON_DEMAND,
    PROBE_SCRIPT,
    Sections,
    gpu_model_names,
    node_facts,
    parse_sections,
    profile_warnings,
    with_drift,
)
from toolkit.stack.catalog import lookup_gpu, lookup_gpu_by_pci_id


class ActionModule(ActionBase):
    """Gather ``gpunode_node`` facts (or the fact named by ``fact``) from the node."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("stack", "hardware", "fact", "compare", "read"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the probe script and return ``ansible_facts.gpunode_node``."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        resolved = self._task.args.get("stack", task_vars.get("gpunode_stack"))
        fact = str(self._task.args.get("fact") or "gpunode_node")
        if self._task.args.get("compare"):
            read = plain(task_vars.get(fact))
            if not isinstance(read, dict) or not resolved:
                result["failed"] = True
                result["msg"] = f"compare needs the facts read ({fact}) and a resolved stack"
                return result
            result["ansible_facts"] = {fact: with_drift(read, plain(resolved))}
            return result
        if "read" in self._task.args:
            return self._read(result, self._task.args["read"])
        sections = self._probe(PROBE_SCRIPT, result)
        if sections is None:
            return result
        facts = node_facts(sections, dict(resolved) if resolved else None)
        hardware = self._task.args.get("hardware", task_vars.get("hardware")) or {}
        expected = (hardware.get("gpu") or {}).get("model") if hasattr(hardware, "get") else None
        if expected:
            facts["gpu_models"] = gpu_model_names(
                facts["gpus"], lookup_gpu, facts["gpu_pci_ids"], lookup_gpu_by_pci_id
            )
            [facts["gpu_model_expected"]] = gpu_model_names([str(expected)], lookup_gpu)
            warnings = profile_warnings(facts, hardware)
            if warnings:
                result["warnings"] = warnings
        # The OS facts the roles read (ansible_distribution, ansible_kernel, ...), so that no
        # `setup` round trip is needed.
        os_facts = {f"ansible_{name}": value for name, value in facts["os"].items()}
        result["ansible_facts"] = {**os_facts, fact: facts}
        return result

    def _read(self, result: dict[str, Any], names: Any) -> dict[str, Any]:
        """Read the named on-demand facts now: ``result["read"]`` maps each to its value."""
        if not isinstance(names, list) or not names or any(n not in ON_DEMAND for n in names):
            result["failed"] = True
            result["msg"] = f"read takes a list of {sorted(ON_DEMAND)}; got {names!r}"
            return result
        chosen = [ON_DEMAND[n] for n in names]
        sections = self._probe(probe.script(chosen), result)
        if sections is not None:
            result["read"] = {fact.name: fact.read(sections) for fact in chosen}
        return result

    def _probe(self, script: str, result: dict[str, Any]) -> Sections | None:
        """Run a probe script on the node in one round trip: its sections, or None with
        ``result`` failed when the node could not be probed at all."""
        out = self._low_level_execute_command("/bin/sh -c " + shlex.quote(script), sudoable=True)
        sections = parse_sections(out.get("stdout", ""))
        if out.get("rc") != 0 and not sections:
            result["failed"] = True
            result["msg"] = f"could not probe the node: {out.get('stderr') or out.get('stdout')}"
            return None
        return sections
