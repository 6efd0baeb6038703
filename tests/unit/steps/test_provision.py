"""Drift reports and node states from run results; the stack check before a run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.ansible.events import Failure, HostSummary, RunResult
from toolkit.errors import ConfigError, StackError
from toolkit.steps.precheck import check_inventory
from toolkit.steps.provision import drift_report

SAMPLE = REPO / "inventories" / "sample"

VERSIONS = {"driver": {"nvidia-driver-550-open": {"pinned": "1", "installed": "2", "held": False}}}


def result_with(facts: dict[str, dict[str, Any]], failures: list[Failure]) -> RunResult:
    hosts = {h: HostSummary(ok=3) for h in ("n1", "n2", "n3")}
    return RunResult(
        "r", "drift", 0, "successful", "/tmp", hosts=hosts, facts=facts, failures=failures
    )


def test_drift_report() -> None:
    drift = {
        "component": "driver",
        "package": "nvidia-driver-550-open",
        "pinned": "1",
        "found": "2",
        "kind": "version",
        "message": "drift: nvidia-driver-550-open pinned 1, installed 2",
    }
    facts = {
        "n1": {
            "gpunode_node": {"versions": VERSIONS, "drift": [drift]},
            "gpunode_stack": {"stack_id": "abc"},
        },
        "n2": {"gpunode_node": {"versions": VERSIONS, "drift": []}},
    }
    report = drift_report(
        result_with(facts, [Failure("n3", "Gather", "ssh: no route", unreachable=True)])
    )
    assert not report["ok"]
    assert report["drifted"] == ["n1"]
    assert report["nodes"]["n1"]["stack_id"] == "abc"
    assert report["nodes"]["n1"]["drift"][0]["message"] == (
        "n1: nvidia-driver-550-open pinned 1, installed 2"
    )
    assert report["nodes"]["n2"]["drift"] == []
    assert report["errors"] == {"n3": "Gather: ssh: no route"}


def test_drift_report_clean() -> None:
    facts = {h: {"gpunode_node": {"versions": VERSIONS, "drift": []}} for h in ("n1", "n2", "n3")}
    assert drift_report(result_with(facts, []))["ok"] is True


def test_precheck_passes_the_sample_inventory() -> None:
    found = check_inventory(SAMPLE)
    assert len(found.hosts) >= 2
    assert all(len(i) == 12 for i in found.stack_ids.values())


def test_precheck_limit_and_unknown_limit() -> None:
    first = check_inventory(SAMPLE).hosts[0]
    assert check_inventory(SAMPLE, first).hosts == [first]
    with pytest.raises(ConfigError):
        check_inventory(SAMPLE, "no-such-host")


def test_precheck_incoherent_stack_names_hosts_and_versions(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    shutil.copytree(SAMPLE, inv)
    stack_file = next(inv.glob("group_vars/h100_sxm/stack.yml"))
    data = yaml.safe_load(stack_file.read_text())
    data["stack"]["driver"]["version"] = "535.104.05"
    data["stack"]["cuda"] = "12.4.1"
    stack_file.write_text(yaml.safe_dump(data))
    with pytest.raises(StackError) as err:
        check_inventory(inv)
    message = err.value.message
    assert "535.104.05" in message and "550.54.15" in message
    assert "h100-01" in message and "nothing was changed" in message
    assert err.value.exit_code == 2
