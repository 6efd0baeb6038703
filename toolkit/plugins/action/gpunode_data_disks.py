"""Action plugin ``gpunode_data_disks``: plan and apply the data-disk layout of a node.

It runs on the controller, so the logic stays in ``toolkit.disks``: one read-only shell
script gathers the node's disk facts (``toolkit.disks.gather``), the pure planner decides
(``toolkit.disks.planner``), and only then, outside check mode and only without any refusal,
are the planned actions run on the node, one command each, in order. After applying, the
facts are gathered again and the plan must be empty: that is the verify step.

Check mode returns the plan and changes nothing; with ``--diff`` the plan is shown as
before/after (files and the layout). ``report_only`` returns the plan even when refused,
without failing (``gpunode disks plan`` reads it from the fact ``gpunode_data_disks``).
"""

from __future__ import annotations

import shlex
import uuid
from typing import Any

from ansible.plugins.action import ActionBase

from toolkit.ansible.values import plain
from toolkit.config import validate
from toolkit.disks.gather import gather_script, node_facts, parse_sections
from toolkit.disks.planner import DEFAULT_SETTLE, Plan, plan
from toolkit.disks.spec import DataDisksSpec
from toolkit.disks.units import RUNTIME_SERVICES
from toolkit.errors import ToolkitError
from toolkit.facts import probe

FACT = "gpunode_data_disks"


def plan_diff(result: Plan) -> list[dict[str, str]]:
    """The plan as Ansible diffs: the layout as a whole, then every file it writes."""
    before = [f"{d.serial}: {d.path or 'absent'} {d.device or ''} {d.state}" for d in result.disks]
    after = [f"{i}. {a.summary}" for i, a in enumerate(result.actions, 1)]
    diffs = [
        {
            "before_header": f"data disks of {result.mount_point} (now)",
            "after_header": f"data disks of {result.mount_point} (planned)",
            "before": "\n".join(before) + "\n",
            "after": "\n".join(after or ["nothing to do"]) + "\n",
        }
    ]
    for action in result.actions:
        if action.kind == "write-file" and action.path:
            diffs.append(
                {
                    "before_header": action.path,
                    "after_header": action.path,
                    "before": action.before or "",
                    "after": action.content or "",
                }
            )
        elif action.kind == "remove-file" and action.path:
            diffs.append(
                {
                    "before_header": action.path,
                    "after_header": f"{action.path} (removed)",
                    "before": "(present)\n",
                    "after": "",
                }
            )
    return diffs


class ActionModule(ActionBase):
    """Plan the data disks of a node and apply the plan when it is safe."""

    TRANSFERS_FILES = False
    _runtimes: tuple[str, ...] = RUNTIME_SERVICES
    _VALID_ARGS = frozenset(("spec", "settle_command", "report_only", "runtime_services"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Gather, plan, and (unless check mode or refused) apply and verify."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = self._task.args
        raw_spec = args.get("spec")
        if not raw_spec:
            result["failed"] = True
            result["msg"] = "spec is required: the host's hardware.data_disks"
            return result
        settle = str(args.get("settle_command") or DEFAULT_SETTLE)
        runtimes = args.get("runtime_services", list(RUNTIME_SERVICES))
        if not isinstance(runtimes, (list, tuple)) or not all(
            isinstance(r, str) and r.endswith(".service") for r in runtimes
        ):
            result["failed"] = True
            result["msg"] = "runtime_services must be a list of systemd service names (*.service)"
            return result
        self._runtimes = tuple(str(r) for r in runtimes)
        report_only = bool(args.get("report_only", False))
        check = bool(self._play_context.check_mode) or report_only
        try:
            host = str(task_vars.get("inventory_hostname", "host"))
            spec = validate(
                DataDisksSpec,
                plain(raw_spec),
                f"hardware profile of {host}",
                prefix=("hardware", "data_disks"),
            )
            first = self._plan(spec, settle)
        except ToolkitError as err:
            result["failed"] = True
            result["msg"] = err.message
            return result
        report = first.to_dict()
        result["plan"] = report
        result["ansible_facts"] = {FACT: report}
        if self._task.diff or self._play_context.diff:
            result["diff"] = plan_diff(first)
        if first.refused:
            result["msg"] = f"refused, nothing was changed:\n{first.describe()}"
            result["failed"] = not report_only
            return result
        result["changed"] = bool(first.actions)
        if check:
            result["msg"] = first.describe()
            return result
        if first.actions and first.blockers:
            result["failed"] = True
            result["msg"] = "cannot apply on this node: " + "; ".join(first.blockers)
            return result
        done: list[str] = []
        for action in first.actions:
            out = self._low_level_execute_command(
                "/bin/sh -c " + shlex.quote(action.shell()), sudoable=True
            )
            if out.get("rc") != 0:
                result["failed"] = True
                result["msg"] = (
                    f"step failed: {action.summary} (exit status {out.get('rc')}): "
                    f"{(out.get('stderr') or out.get('stdout') or '').strip()}"
                    + (f"; steps done before it: {'; '.join(done)}" if done else "")
                )
                result["done"] = done
                return result
            done.append(action.summary)
        result["done"] = done
        try:
            after = self._plan(spec, settle)
        except ToolkitError as err:
            result["failed"] = True
            result["msg"] = f"applied, but the node could not be checked again: {err.message}"
            return result
        result["ansible_facts"] = {FACT: after.to_dict() | {"applied": done}}
        if after.refused or after.actions:
            result["failed"] = True
            result["msg"] = "applied, but the node did not converge:\n" + after.describe()
            return result
        result["msg"] = f"{first.mount_point} is in place (UUID {after.uuid})"
        return result

    def _plan(self, spec: DataDisksSpec, settle: str) -> Plan:
        """Gather the node's facts and plan (raises ToolkitError when the probe fails)."""
        out = self._low_level_execute_command(
            "/bin/sh -c " + shlex.quote(gather_script(spec, self._runtimes)), sudoable=True
        )
        stdout = out.get("stdout", "")
        if out.get("rc") != 0 and not probe.split(stdout):
            raise ToolkitError(
                f"could not probe the node's disks: {out.get('stderr') or stdout}".strip()
            )
        facts = node_facts(parse_sections(stdout), spec)
        return plan(
            spec,
            facts,
            str(uuid.uuid4()),
            settle_command=settle,
            runtime_services=self._runtimes,
        )
