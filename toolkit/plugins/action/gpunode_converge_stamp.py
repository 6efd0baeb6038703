"""Action plugin ``gpunode_converge_stamp``: record or clear a component's converge stamp.

``state: absent`` (before a role changes anything) removes the component's stamp, so an
interrupted role never leaves one. ``state: present`` (the role's last task) writes it:
the inputs digest the plan wanted (fact ``gpunode_plan``), the digests of the files the role
manages as they are now, the packages it pinned, the services it enables and (driver) the
module that must be loaded. One round trip each; check mode writes and removes nothing.
The schema and the rules are :mod:`toolkit.node.converge`'s.
"""

from __future__ import annotations

import base64
import json
import shlex
from typing import Any

from ansible.plugins.action import ActionBase

from toolkit.ansible.values import plain
from toolkit.node import converge

# Hashes the files named in the stamp on the node, then writes the stamp atomically.
_WRITE = r"""
import base64, hashlib, json, os, sys
stamp = json.loads(base64.b64decode(sys.argv[1]))
path = sys.argv[2]
files = {}
for p in stamp["files"]:
    try:
        with open(p, "rb") as f:
            files[p] = hashlib.sha256(f.read()).hexdigest()
    except FileNotFoundError:
        files[p] = None
stamp["files"] = files
os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
with open(path + ".tmp", "w") as f:
    json.dump(stamp, f, indent=2, sort_keys=True)
    f.write("\n")
os.replace(path + ".tmp", path)
print(json.dumps(files))
"""


class ActionModule(ActionBase):
    """Write (state present) or remove (state absent) one component's stamp."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(
        ("component", "state", "files", "packages", "services", "loaded_driver")
    )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        """Remove or write the stamp of ``component``."""
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = plain(self._task.args)
        component = str(args.get("component") or "")
        if component not in converge.COMPONENTS:
            return _fail(result, f"component must be one of {converge.COMPONENTS}")
        path = f"{converge.STAMP_DIR}/{component}.json"
        state = args.get("state", "present")
        if self._play_context.check_mode:
            result["msg"] = f"{path}: not touched in check mode"
            return result
        if state == "absent":
            out = self._low_level_execute_command(f"rm -f {shlex.quote(path)}", sudoable=True)
            if out.get("rc") != 0:
                return _fail(result, f"could not remove {path}: {out.get('stderr')}")
            result["msg"] = f"{path}: removed before the role runs"
            return result
        if state != "present":
            return _fail(result, f"state must be present or absent, not {state!r}")
        planned = (plain(task_vars.get("gpunode_plan")) or {}).get(component) or {}
        if not planned.get("inputs"):
            result["msg"] = f"{path}: no plan for {component} in this run, no stamp written"
            return result
        stamp = converge.stamp(
            component,
            str(planned["inputs"]),
            {str(p): "" for p in args.get("files") or []},
            {str(k): str(v) for k, v in (args.get("packages") or {}).items()},
            [str(s) for s in args.get("services") or []],
            str(args.get("loaded_driver") or ""),
        )
        payload = base64.b64encode(json.dumps(stamp).encode()).decode()
        command = " ".join(shlex.quote(part) for part in ("python3", "-c", _WRITE, payload, path))
        out = self._low_level_execute_command(command, sudoable=True)
        if out.get("rc") != 0:
            detail = out.get("stderr") or out.get("stdout")
            return _fail(result, f"could not write {path}: {detail}")
        result["msg"] = f"{path}: written"
        return result


def _fail(result: dict[str, Any], message: str) -> dict[str, Any]:
    result["failed"] = True
    result["msg"] = message
    return result
