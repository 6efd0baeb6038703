"""``gpunode rollout``: bad input refused before any node is read (naming the option, the
host and the rule), the plan from one drift run (faked here: the run's facts as a drift
run in check mode gives them), the table, ``--json``, and the record of the dry run."""

from __future__ import annotations

import json
import shutil
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from shared_fixtures import REPO

from toolkit import cli
from toolkit.ansible.events import Failure, HostSummary, RunResult
from toolkit.cli.rollout import NOT_BUILT, plan_lines, plan_table
from toolkit.rollout import record
from toolkit.steps import rollout as step
from toolkit.steps.precheck import check_inventory
from unit.rollout.test_plan import DRIVER, NCCL

SAMPLE = REPO / "inventories" / "sample"


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    """The sample inventory (h100-01, h100-02 in h100_sxm; l40s-01 in l40s_pcie), the two
    H100s in one rack."""
    inv = tmp_path / "inv"
    shutil.copytree(SAMPLE, inv)
    (inv / "host_vars").mkdir()
    for host in ("h100-01", "h100-02"):
        (inv / "host_vars" / f"{host}.yml").write_text("gpunode_accept_domain: rack-7\n")
    return inv


class Fleet:
    """The drift run a rollout reads, faked: per host its state and drift (or an error)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, inventory: Path) -> None:
        self.ids = check_inventory(inventory).stack_ids
        self.nodes: dict[str, dict[str, Any]] = {}
        self.unreachable: set[str] = set()
        self.playbooks: list[tuple[str, bool]] = []
        monkeypatch.setattr(
            step, "precheck", lambda inv, limit, locks: (check_inventory(inv, limit), [])
        )
        monkeypatch.setattr(step, "run_playbook", self.run)

    def node(self, host: str, stack: str | None, drift: list[dict[str, Any]]) -> None:
        state = {"state": "ready", "reason": [], "stack_id": stack or self.ids[host]}
        self.nodes[host] = {"state": state, "drift": drift}

    def run(
        self, playbook: str, inventory: Path, *, limit: str | None, check: bool, **_: Any
    ) -> RunResult:
        self.playbooks.append((playbook, check))
        hosts = check_inventory(inventory, limit).hosts
        facts = {
            h: {
                "gpunode_node_state": self.nodes[h]["state"],
                "gpunode_node": {
                    "versions": {},
                    "drift": [
                        {**d, "message": f"drift: {d['package']}"} for d in self.nodes[h]["drift"]
                    ],
                },
                "gpunode_stack": {"stack_id": self.ids[h]},
            }
            for h in hosts
            if h not in self.unreachable
        }
        failures = [
            Failure(h, "Gather", "ssh: no route", unreachable=True) for h in self.unreachable
        ]
        summary = {h: HostSummary(ok=3) for h in hosts}
        return RunResult(
            "r",
            playbook,
            0,
            "successful",
            "/tmp",
            check=check,
            hosts=summary,
            facts=facts,
            failures=failures,
        )


@pytest.fixture
def fleet(monkeypatch: pytest.MonkeyPatch, inventory: Path, tmp_path: Path) -> Fleet:
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path / "state"))
    faked = Fleet(monkeypatch, inventory)
    faked.node("h100-01", "0ld0ld0ld0ld", DRIVER)
    faked.node("h100-02", "0ld0ld0ld0ld", NCCL)
    faked.node("l40s-01", None, [])
    return faked


def _gpunode(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        cli.main(["rollout", *args])
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-unavailable", "0"], "--max-unavailable 0: a rollout that may take no node"),
        (["--max-unavailable", "150%"], "--max-unavailable 150%: more than a whole group"),
        (["--max-failures", "0"], "--max-failures 0: expected 1 or more"),
        (["--canary", "h100-09"], "--canary h100-09: no such host"),
        (
            ["--canary", "h100-02", "--limit", "l40s_pcie"],
            "--canary h100-02: not among the hosts --limit",
        ),
        (["--limit", "nope"], "nope"),
    ],
)
def test_bad_input_is_refused_before_any_node_is_read(
    fleet: Fleet, inventory: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, _out, err = _gpunode(["-i", str(inventory), "--dry-run", *args], capsys)
    assert code == 2
    assert message in " ".join(err.split())
    assert fleet.playbooks == []


def test_an_unknown_canary_gets_the_closest_names(
    fleet: Fleet, inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _code, _out, err = _gpunode(["-i", str(inventory), "--dry-run", "--canary", "h100-03"], capsys)
    assert "did you mean 'h100-02' or 'h100-01'" in " ".join(err.split())


def test_without_dry_run_it_refuses_and_reads_nothing(
    fleet: Fleet, inventory: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _err = _gpunode(["-i", str(inventory), "--json"], capsys)
    assert code == 2 and fleet.playbooks == []
    assert json.loads(out)["error"]["message"] == NOT_BUILT
    assert not (tmp_path / "state").exists()


def test_the_dry_run_plans_from_one_drift_run_in_check_mode_and_records_it(
    fleet: Fleet, inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _err = _gpunode(
        [
            "-i",
            str(inventory),
            "--dry-run",
            "--json",
            "--max-unavailable",
            "100%",
            "--max-failures",
            "2",
        ],
        capsys,
    )
    assert code == 0
    assert fleet.playbooks == [("drift", True)]
    plan = json.loads(out)
    assert plan["dry_run"] is True and plan["max_failures"] == 2
    # Two H100s of one rack never share a wave, even when the whole group may go at once.
    assert plan["waves"] == [["h100-01"], ["h100-02"]]
    assert plan["limits"] == {"h100_sxm": 2}
    nodes = plan["nodes"]
    assert nodes["h100-01"]["reboot"] and nodes["h100-01"]["domain"] == "rack-7"
    assert nodes["h100-02"]["reboot"] is None
    assert nodes["l40s-01"]["status"] == "skipped" and nodes["l40s-01"]["reason"].startswith(
        "on the lock"
    )
    kept = record.read(Path(plan["record"]))
    assert kept["dry_run"] is True and kept["waves"] == plan["waves"]
    assert Path(plan["record"]).parent.name.split("-")[1] == "rollout_plan"
    assert record.in_progress() is None  # a dry run is never a rollout in progress


def test_allow_same_domain_and_an_unreadable_node(
    fleet: Fleet, inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.node("l40s-01", "0ld0ld0ld0ld", NCCL)
    fleet.unreachable.add("h100-01")
    args = [
        "-i",
        str(inventory),
        "--dry-run",
        "--json",
        "--max-unavailable",
        "2",
        "--allow-same-domain",
    ]
    code, out, _err = _gpunode(args, capsys)
    plan = json.loads(out)
    assert code == 0 and plan["waves"] == [["h100-02"], ["l40s-01"]]
    assert plan["nodes"]["h100-01"]["reason"] == "could not be read: Gather: ssh: no route"


def test_the_table_fits_80_columns_and_lists_changes_and_why_nodes_are_left_alone(
    fleet: Fleet, inventory: Path
) -> None:
    opts = step.RolloutOptions()
    outcome = step.plan_fleet(inventory, opts)
    buffer = StringIO()
    console = Console(file=buffer, width=80)
    console.print(plan_table(outcome.plan))
    for line in plan_lines(outcome.plan):
        console.print(line)
    text = buffer.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "1 canary" in text and "h100-02" in text
    assert "h100-01: reboot: driver module loaded 550.127.05, locked 550.144.03" in text
    assert "h100-02: libnccl2 2.21.5-1+cuda12.4 -> 2.23.4-1+cuda12.4" in text
    assert "l40s-01: on the lock" in text
    assert outcome.record_path is not None and outcome.record_path.is_file()
