"""The runs folder: ids, kinds, per-kind rotation, evidence kept, explicit prune."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from toolkit.errors import ConfigError
from toolkit.records import runs

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def _start(tmp: Path, kind: str, minutes: int) -> Path:
    return runs.start_run(kind, tmp, T0 + timedelta(minutes=minutes))


@pytest.mark.parametrize(
    ("label", "kind"),
    [
        ("provision.yml", "provision"),
        ("playbooks/site.yaml", "site"),
        ("ansible.builtin.slurp", "slurp"),
        ("gpunode_node_facts", "gpunode_node_facts"),
        ("Accept", "accept"),
        ("image-build", "image_build"),
        ("9lives", "run_9lives"),
    ],
)
def test_kind_names(label: str, kind: str) -> None:
    assert runs.kind_name(label) == kind


def test_run_ids_sort_by_time_carry_the_kind_and_are_unique() -> None:
    a, b = runs.new_run_id("accept", T0), runs.new_run_id("accept", T0)
    assert re.fullmatch(r"20261201T120000Z-accept-[0-9a-f]{6}", a)
    assert a != b
    assert runs.kind_of(a) == "accept"
    assert runs.kind_of("20261129T160005Z-abcdef") is None  # an older format: no kind


def test_state_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path))
    assert runs.runs_dir() == tmp_path / "runs"
    monkeypatch.delenv("GPUNODE_STATE_DIR")
    assert runs.state_dir() == Path.cwd() / ".gpunode"


def test_routine_runs_rotate_only_their_own_kind(tmp_path: Path) -> None:
    drift = _start(tmp_path, "drift", 0)
    for minute in range(1, runs.KEEP_ROUTINE + 6):
        _start(tmp_path, "status", minute)
    assert len(runs.list_runs(tmp_path, "status")) == runs.KEEP_ROUTINE
    assert drift.is_dir()
    newest = runs.list_runs(tmp_path, "status")[-1]
    assert newest.started == T0 + timedelta(minutes=runs.KEEP_ROUTINE + 5)


def test_forty_status_runs_leave_the_acceptance_run_and_its_report(tmp_path: Path) -> None:
    accepted = _start(tmp_path, "accept", 0)
    (accepted / "report.html").write_text("<html>evidence</html>")
    legacy = tmp_path / "20261129T160005Z-abcdef"  # the acceptance id format before kinds
    legacy.mkdir()
    up = _start(tmp_path, "up", 1)
    for minute in range(2, 42):
        _start(tmp_path, "status", minute)
    assert (accepted / "report.html").read_text() == "<html>evidence</html>"
    assert legacy.is_dir() and up.is_dir()
    assert len(runs.list_runs(tmp_path, "status")) == runs.KEEP_ROUTINE


def test_evidence_count_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runs.KEEP_EVIDENCE_ENV, "2")
    first = [_start(tmp_path, "accept", m) for m in range(4)]
    assert [p.is_dir() for p in first] == [False, False, True, True]
    monkeypatch.setenv(runs.KEEP_EVIDENCE_ENV, "zero")
    with pytest.raises(ConfigError, match=runs.KEEP_EVIDENCE_ENV):
        _start(tmp_path, "accept", 9)


def test_prune_is_explicit_and_reaches_evidence(tmp_path: Path) -> None:
    for minute in range(3):
        _start(tmp_path, "accept", minute)
        _start(tmp_path, "provision", 10 + minute)
    (tmp_path / "notes").mkdir()  # not a run: never pruned
    removed = runs.prune(tmp_path, kind="accept", keep=1)
    assert len(removed) == 2
    assert len(runs.list_runs(tmp_path, "accept")) == 1
    assert len(runs.list_runs(tmp_path, "provision")) == 3
    runs.prune(tmp_path, keep=0)
    assert [r.run_id for r in runs.list_runs(tmp_path)] == ["notes"]
    with pytest.raises(ConfigError, match="keep"):
        runs.prune(tmp_path, keep=-1)


def test_list_of_a_missing_folder_is_empty(tmp_path: Path) -> None:
    assert runs.list_runs(tmp_path / "missing") == []
    assert runs.prune(tmp_path / "missing") == []


def test_cli_lists_and_prunes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from click.testing import CliRunner

    from toolkit.cli import cli

    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path))
    for minute in range(3):
        _start(tmp_path / "runs", "accept", minute)
    listed = CliRunner().invoke(cli, ["runs", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    assert [r["kind"] for r in json.loads(listed.stdout)["runs"]] == ["accept"] * 3
    refused = CliRunner().invoke(cli, ["runs", "prune", "--json"])
    assert refused.exit_code == 2 and len(runs.list_runs(tmp_path / "runs")) == 3
    pruned = CliRunner().invoke(cli, ["runs", "prune", "--keep", "1", "--yes", "--json"])
    assert pruned.exit_code == 0, pruned.output
    assert len(json.loads(pruned.stdout)["removed"]) == 2
    assert len(runs.list_runs(tmp_path / "runs")) == 1


def test_a_runs_folder_that_is_a_file_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from shared_fixtures import REPO, run_cli

    (tmp_path / "runs").write_text("not a folder\n")
    with pytest.raises(ConfigError, match=r"runs: not a directory"):
        runs.list_runs(tmp_path / "runs")
    with pytest.raises(ConfigError, match=r"runs: not a directory"):
        runs.start_run("status", tmp_path / "runs")
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(tmp_path))
    report = ["report", "-i", str(REPO / "inventories" / "sample")]
    for args in (["runs", "list"], ["runs", "prune", "--yes"], report):
        code, _out, err = run_cli(capsys, *args)
        assert code == 2, err
        assert "internal error" not in err
    code, _out, err = run_cli(capsys, "runs", "list")
    assert f"{tmp_path / 'runs'}: not a directory" in err
