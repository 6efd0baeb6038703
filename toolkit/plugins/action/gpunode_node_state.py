"""Action plugin ``gpunode_node_state``: write the node's state file (``toolkit.node.nodestate``).

The rules (which state follows which) live in ``toolkit.node.nodestate``; this plugin only reads
the file on the node, asks those rules for the next state and writes it back atomically
(a temporary file renamed over the old one) when the standing changed. Check mode reports
what would be written and writes nothing; ``--diff`` shows the file before and after.

``event: begin`` (before a provision changes anything) turns a ready node not-ready until
``event: provision`` (with ``stack_id``, ``changed`` and ``reboot``) decides its standing;
``event: drift`` takes ``drift`` (entries with a ``message``). The task reports ``changed``
only when the node's standing (state, reasons, stack id) changed, so a provision that
changes nothing reports nothing, although the file is written twice. The new state is
returned as the fact ``gpunode_node_state``.

``known`` (optional) is the state as this run already read or wrote it (the facts probe's
``gpunode_node.state``, or the fact ``gpunode_node_state`` after ``begin``): the file is then
not read again, which saves a round trip on runs that change nothing.
"""

from __future__ import annotations

import base64
import shlex
from typing import Any

from ansible.plugins.action import ActionBase

from toolkit.ansible.values import plain
from toolkit.facts import probe
from toolkit.node import nodestate

FACT = "gpunode_node_state"


class ActionModule(ActionBase):
    """Apply a provision or drift event to the node's state file."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("event", "stack_id", "changed", "reboot", "drift", "run_id", "known"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Read, decide, write when changed."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = self._task.args
        event = args.get("event")
        run_id = str(args.get("run_id") or "")
        known = plain(args.get("known"))
        if isinstance(known, dict) and known.get("state"):
            current = dict(known)
            stdout = nodestate.render(current)
        else:
            read = self._low_level_execute_command(
                "/bin/sh -c " + shlex.quote(probe.script([nodestate.FACT])), sudoable=True
            )
            rc, text = probe.by_name(str(read.get("stdout", ""))).get(nodestate.FACT.name, (1, ""))
            # No file (or none readable) is a new node; the file's content with its final newline.
            stdout = text + "\n" if rc == 0 else ""
            current = nodestate.parse(stdout if rc == 0 else None)
        if current.get("state") == "unknown":
            current = nodestate.new() | {"previous_error": current["reason"]}
        if event == "begin":
            wanted = nodestate.begin_provision(current, run_id=run_id)
        elif event == "provision":
            stack_id = str(args.get("stack_id") or "")
            if not stack_id:
                return self._fail(result, "stack_id is required (gpunode_stack.stack_id)")
            wanted = nodestate.after_provision(
                current,
                stack_id=stack_id,
                changed=bool(args.get("changed", False)),
                reboot=plain(args.get("reboot")) or None,
                run_id=run_id,
            )
        elif event == "drift":
            drift = args.get("drift") or []
            wanted = nodestate.after_drift(
                current, [str(d.get("message", d)) for d in drift], run_id=run_id
            )
        else:
            return self._fail(result, f"event must be begin, provision or drift, not {event!r}")
        wanted.pop("previous_error", None)
        result["ansible_facts"] = {FACT: wanted}
        if wanted == current:
            result["msg"] = f"{nodestate.PATH}: {current.get('state')} (unchanged)"
            return result
        result["changed"] = event != "begin" and not nodestate.same_standing(
            nodestate.standing(current), nodestate.standing(wanted)
        )
        if self._task.diff or self._play_context.diff:
            result["diff"] = [
                {
                    "before_header": nodestate.PATH,
                    "after_header": nodestate.PATH,
                    "before": stdout,
                    "after": nodestate.render(wanted),
                }
            ]
        result["msg"] = f"{nodestate.PATH}: {current.get('state')} -> {wanted['state']}"
        if self._play_context.check_mode:
            return result
        # Replaced whole under the state file's lock (nodestate.write_program), which the
        # node's health check takes too.
        program = base64.b64encode(nodestate.write_program(wanted)).decode()
        write = self._low_level_execute_command(
            "/bin/sh -c " + shlex.quote(f"printf %s {program} | base64 -d | python3 -"),
            sudoable=True,
        )
        if write.get("rc") != 0:
            return self._fail(result, f"could not write {nodestate.PATH}: {write.get('stderr')}")
        return result

    @staticmethod
    def _fail(result: dict[str, Any], message: str) -> dict[str, Any]:
        result["failed"] = True
        result["msg"] = message
        return result
