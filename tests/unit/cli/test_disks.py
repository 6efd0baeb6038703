"""`gpunode disks`: confirmation rules, reading plans back from a run, the printed plan.

The playbook runs themselves are exercised against lab nodes in
tests/integration/test_03_disks.py; here the run result is built from recorded plan data.
"""

from __future__ import annotations

import subprocess
import sys
from io import StringIO

from rich.console import Console

from toolkit.ansible.events import Failure, HostSummary, RunResult
from toolkit.cli import disks as cli_disks
from toolkit.disks.planner import Action, DiskReport, Plan
from toolkit.plugins.action.gpunode_data_disks import plan_diff
from toolkit.steps import disks as step

REFUSED = {
    "layout": "single",
    "filesystem": "xfs",
    "mount_point": "/data",
    "uuid": None,
    "refused": True,
    "done": False,
    "existing": False,
    "reasons": ["S1: holds active swap ([SWAP] /dev/nvme1n1)"],
    "blockers": [],
    "notes": [],
    "disks": [
        {
            "serial": "S1",
            "path": "/dev/disk/by-id/nvme-M_S1",
            "device": "259:1",
            "size": 3840755982336,
            "model": "M",
            "state": "carries swap signature",
            "refusals": ["S1: holds active swap ([SWAP] /dev/nvme1n1)"],
        }
    ],
    "actions": [],
}
PLANNED = {
    **REFUSED,
    "refused": False,
    "reasons": [],
    "uuid": "0b6d1a54-7c1f-4d3e-9a55-2d5ad9c3e111",
    "disks": [{**REFUSED["disks"][0], "state": "blank", "refusals": []}],
    "actions": [
        {
            "kind": "settle",
            "summary": "Wait for udev to publish /dev/disk/by-uuid/x",
            "command": "[ -e /dev/disk/by-uuid/x ] || exit 1",
        }
    ],
}


def result_with(facts: dict[str, dict], failures: list[Failure] | None = None) -> RunResult:
    return RunResult(
        run_id="r1",
        playbook="disks",
        rc=0 if not failures else 2,
        status="successful" if not failures else "failed",
        artifact_dir="/tmp/r1",
        check=True,
        hosts={h: HostSummary(ok=3) for h in [*facts, *(f.host for f in failures or [])]},
        failures=failures or [],
        facts={h: {"gpunode_data_disks": plan} for h, plan in facts.items()},
    )


def test_apply_without_terminal_and_without_yes_is_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "toolkit", "disks", "apply", "-i", str(tmp_path)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 2
    assert "pass --yes" in result.stderr
    assert result.stdout == ""


def test_outcome_reads_plans_and_failures():
    failure = Failure(host="n3", task="Gather the OS and kernel facts", message="unreachable x")
    outcome = step._outcome(result_with({"n1": REFUSED, "n2": PLANNED}, [failure]))
    nodes = outcome.nodes
    assert nodes["n1"].plan is not None and nodes["n1"].plan["refused"] is True
    assert nodes["n2"].errors == []
    assert nodes["n3"].to_dict() == {
        "plan": None,
        "errors": ["Gather the OS and kernel facts: unreachable x"],
    }
    assert not outcome.ok
    assert outcome.refused == ["n1", "n3"] and outcome.todo == ["n2"]
    assert step._outcome(result_with({"n2": PLANNED})).ok
    assert not step._outcome(result_with({})).ok


def test_document_is_plain_json_data():
    document = step._outcome(result_with({"n2": PLANNED})).to_dict()
    assert document["ok"] is True and document["run_id"] == "r1"
    assert document["applied"] is False and document["check"] is True
    assert document["nodes"]["n2"]["plan"]["uuid"] == PLANNED["uuid"]


def test_printed_plan_keeps_brackets_and_lists_refusals():
    buffer = StringIO()
    console = Console(file=buffer, width=200, highlight=False)
    outcome = step._outcome(result_with({"n1": REFUSED, "n2": PLANNED}))
    cli_disks.print_plans(outcome, console=console)
    text = buffer.getvalue()
    assert "refused (nothing will be changed)" in text
    assert "holds active swap ([SWAP] /dev/nvme1n1)" in text  # not eaten as markup
    assert "[ -e /dev/disk/by-uuid/x ] || exit 1" in text
    assert "1. Wait for udev to publish /dev/disk/by-uuid/x" in text


def test_plan_diff_shows_layout_and_files():
    plan = Plan(
        layout="single",
        filesystem="xfs",
        mount_point="/data",
        uuid="u",
        disks=(DiskReport("S1", "/dev/disk/by-id/x", "7:5", 1, None, "blank"),),
        actions=(
            Action("write-file", "Write /etc/x", path="/etc/x", content="new\n", before="old\n"),
            Action("remove-file", "Remove /etc/y", path="/etc/y"),
        ),
    )
    diffs = plan_diff(plan)
    assert diffs[0]["before"] == "S1: /dev/disk/by-id/x 7:5 blank\n"
    assert diffs[0]["after"] == "1. Write /etc/x\n2. Remove /etc/y\n"
    assert diffs[1] == {
        "before_header": "/etc/x",
        "after_header": "/etc/x",
        "before": "old\n",
        "after": "new\n",
    }
    assert diffs[2]["after_header"] == "/etc/y (removed)"
