"""The rollout record (``<run>/rollout.json``, ``toolkit.rollout.record``): written whole,
read back through the one bounded read and its schema, node statuses moved only along
their transitions, and what ``gpunode status`` shows of a rollout in progress."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from toolkit.cli.status import rollout_line
from toolkit.errors import ConfigError
from toolkit.records import runs
from toolkit.rollout import record
from toolkit.rollout.plan import plan_rollout
from unit.rollout.test_plan import NCCL, _node, _options

NOW = datetime(2026, 12, 7, 4, 0, tzinfo=timezone.utc)


def _record(dry_run: bool = False, **options: Any) -> dict[str, Any]:
    surveys = [_node("n1"), _node("n2", drift=NCCL), _node("n3"), _node("n4", error="unreachable")]
    plan = plan_rollout(surveys, _options(**options))
    return record.new_record(
        plan, rollout_id="r1", inventory="inv", limit=None, dry_run=dry_run, now=NOW
    )


def test_a_new_record_holds_every_node_at_its_first_status() -> None:
    data = _record(max_unavailable="2", max_failures=2)
    assert data["schema"] == record.SCHEMA and data["dry_run"] is False
    assert data["waves"] == [["n1"], ["n2", "n3"]]
    assert data["options"] == {
        "max_unavailable": "2",
        "max_failures": 2,
        "canary": [],
        "allow_same_domain": False,
    }
    statuses = {h: (n["wave"], n["status"]) for h, n in data["nodes"].items()}
    assert statuses == {
        "n1": (1, "pending"),
        "n2": (2, "pending"),
        "n3": (2, "pending"),
        "n4": (None, "skipped"),
    }
    assert data["nodes"]["n4"]["reason"] == "could not be read: unreachable"
    assert data["nodes"]["n1"]["reboot"] and data["nodes"]["n1"]["updated"] == NOW.isoformat()


def test_written_whole_and_read_back_the_same(tmp_path: Path) -> None:
    data = _record()
    path = record.write(tmp_path, data)
    assert path == tmp_path / record.RECORD
    assert sorted(p.name for p in tmp_path.iterdir()) == [record.RECORD]  # no temporary left
    assert record.read(path) == data
    again = record.write(tmp_path, record.advance(data, "n1", "draining", "slurm: drained"))
    assert record.read(again)["nodes"]["n1"]["status"] == "draining"


def test_a_record_that_breaks_its_schema_is_never_written(tmp_path: Path) -> None:
    data = _record()
    data["nodes"]["n1"]["status"] = "done"
    with pytest.raises(ConfigError, match=r"nodes\.n1\.status"):
        record.write(tmp_path, data)
    assert not (tmp_path / record.RECORD).exists()


@pytest.mark.parametrize(
    ("change", "where"),
    [
        (lambda d: d["nodes"]["n1"].update(wave=0), "nodes.n1.wave"),
        (lambda d: d["options"].update(max_failures=0), "options.max_failures"),
        (lambda d: d["options"].update(max_failures="1"), "options.max_failures"),
        (lambda d: d.pop("waves"), "waves"),
        (lambda d: d["waves"].append(["n9"]), "n9 is not a node of wave 4"),
        (lambda d: d["waves"][0].append("n3"), "n3 is not a node of wave 1"),
    ],
)
def test_a_bad_record_names_the_file_and_the_key(tmp_path: Path, change: Any, where: str) -> None:
    data = _record()
    change(data)
    path = tmp_path / record.RECORD
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as err:
        record.read(path)
    assert str(path) in err.value.message and where in err.value.message


def test_a_linked_or_non_json_record_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text(json.dumps(_record()))
    link = tmp_path / record.RECORD
    os.symlink(real, link)
    with pytest.raises(ConfigError, match="link"):
        record.read(link)
    link.unlink()
    link.write_text("{not json")
    with pytest.raises(ConfigError, match=str(link)):
        record.read(link)


def test_statuses_move_only_along_their_transitions() -> None:
    data = _record()
    for status in ("draining", "changing", "accepting", "ready"):
        data = record.advance(data, "n1", status, now=NOW)
    assert data["nodes"]["n1"]["status"] == "ready"
    with pytest.raises(ConfigError, match="cannot go from ready to changing"):
        record.advance(data, "n1", "changing")
    with pytest.raises(ConfigError, match="cannot go from pending to accepting"):
        record.advance(data, "n2", "accepting")
    with pytest.raises(ConfigError, match="unknown rollout status"):
        record.advance(data, "n2", "done")
    with pytest.raises(ConfigError, match="no node n9"):
        record.advance(data, "n9", "draining")
    drained_late = record.advance(record.advance(data, "n2", "draining"), "n2", "skipped", "jobs")
    assert drained_late["nodes"]["n2"] | {"updated": ""} == {
        **data["nodes"]["n2"],
        "status": "skipped",
        "reason": "jobs",
        "updated": "",
    }
    assert set(record.TRANSITIONS) == set(record.STATUSES)
    assert all(not record.TRANSITIONS[s] for s in record.FINAL)


def test_the_failure_budget_and_progress() -> None:
    data = _record(max_unavailable="2")
    assert not record.budget_spent(data)
    data = record.advance(data, "n1", "failed", "canary failed: acceptance")
    assert record.failures(data) == ["n1"] and record.budget_spent(data)
    shown = record.progress({**data, "stopped": "failure budget spent (1 of 1)"})
    assert shown["wave"] == 2 and shown["waves"] == 2 and shown["finished"] is False
    assert shown["counts"]["failed"] == 1 and shown["counts"]["pending"] == 2
    line = rollout_line(shown)
    assert line == (
        "rollout r1 in progress: stopped (failure budget spent (1 of 1)); "
        "2 pending, 1 failed, 1 skipped"
    )


def test_status_shows_the_newest_unfinished_rollout_and_never_a_dry_run(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    assert record.in_progress(folder) is None
    early = runs.start_run(record.ROLLOUT_KIND, folder, datetime(2026, 12, 1, tzinfo=timezone.utc))
    record.write(early, {**_record(), "rollout_id": early.name})
    done = runs.start_run(record.ROLLOUT_KIND, folder, datetime(2026, 12, 2, tzinfo=timezone.utc))
    finished = _record()
    for host in ("n1", "n2", "n3"):
        finished = record.advance(finished, host, "failed")
    record.write(done, {**finished, "rollout_id": done.name})
    dry = runs.start_run(record.PLAN_KIND, folder, datetime(2026, 12, 3, tzinfo=timezone.utc))
    record.write(dry, _record(dry_run=True))
    broken = runs.start_run(record.ROLLOUT_KIND, folder, datetime(2026, 12, 4, tzinfo=timezone.utc))
    (broken / record.RECORD).write_text("[]")
    found = record.in_progress(folder)
    assert found is not None and found["rollout_id"] == early.name
    assert (
        rollout_line(found)
        == f"rollout {early.name} in progress: wave 1 of 3; 3 pending, 1 skipped"
    )


def test_rollout_runs_are_evidence_and_plans_are_routine() -> None:
    assert record.ROLLOUT_KIND in runs.EVIDENCE_KINDS
    assert record.PLAN_KIND not in runs.EVIDENCE_KINDS
