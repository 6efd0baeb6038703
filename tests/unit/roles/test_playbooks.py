"""Playbooks are thin and every one starts with the preflight role."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.node import converge

PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def first_role(path: Path) -> str | None:
    """The first role a playbook runs, following import_playbook."""
    plays = load(path)
    first = plays[0]
    imported = first.get("ansible.builtin.import_playbook") or first.get("import_playbook")
    if imported:
        target = path.parent / imported
        if not target.exists():
            pytest.skip(f"{path.name} imports {imported}, not written yet")
        return first_role(target)
    roles = first.get("roles") or []
    if roles:
        role = roles[0]
        return role if isinstance(role, str) else role.get("role") or role.get("name")
    for task in first.get("tasks") or []:
        for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
            if key in task:
                return str(task[key]["name"])
        return None
    return None


def test_provision_and_drift_exist() -> None:
    names = {p.name for p in PLAYBOOKS}
    assert {"provision.yml", "drift.yml", "site.yml"} <= names


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: p.name)
def test_playbook_starts_with_preflight(playbook: Path) -> None:
    assert first_role(playbook) == "preflight"


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=lambda p: p.name)
def test_playbooks_are_thin(playbook: Path) -> None:
    # Thin: plays compose roles; only include_role/import_role tasks are allowed inline (even
    # ending the play for a host is a role's: it owns the rule).
    for play in load(playbook):
        for task in play.get("tasks") or []:
            allowed = {"ansible.builtin.include_role", "ansible.builtin.import_role"}
            assert allowed & set(task), f"{playbook.name}: inline task {task.get('name')!r}"


def test_provision_maps_the_resolved_stack() -> None:
    mapping = load(REPO / "playbooks" / "vars" / "stack_roles.yml")
    for name in (
        "nvidia_driver_version",
        "nvidia_driver_packages",
        "cuda_toolkit_packages",
        "nccl_packages",
        "fabric_manager_packages",
        "imex_packages",
        "container_runtime_toolkit_packages",
        "node_state_stack_id",
    ):
        assert "gpunode_stack" in mapping[name], name
    tasks = load(REPO / "playbooks" / "provision.yml")[0]["tasks"]
    steps = [
        (key.removeprefix("ansible.builtin."), value if key.endswith("meta") else value["name"])
        for t in tasks
        for key, value in t.items()
        if key.startswith("ansible.builtin.")
    ]
    assert steps == [
        ("import_role", "node_state"),
        ("import_role", "slurm_healthcheck"),
        ("include_role", "node_state"),
        ("include_role", "nvidia_driver"),
        ("include_role", "cuda_toolkit"),
        ("include_role", "nccl"),
        ("include_role", "fabric_manager"),
        ("include_role", "imex"),
        ("include_role", "container_runtime"),
        ("include_role", "node_state"),
        ("include_role", "slurm_healthcheck"),
    ]
    # A node with nothing to run has its state recorded once, by the import, and its play
    # ends there unless passive checks are to be installed; a node with work suspends its
    # readiness first and records its state once, after the roles.
    work = "gpunode_plan.values() | selectattr('run') | list | length > 0"
    none = "gpunode_plan.values() | selectattr('run') | list | length == 0"
    assert [tasks[0]["when"], tasks[2]["when"], tasks[-2]["when"]] == [none, work, work]
    assert tasks[2]["ansible.builtin.include_role"]["tasks_from"] == "begin.yml"
    # The no-op's record skips the argument check (one task less per node); the record after
    # the roles keeps it.
    assert tasks[0]["ansible.builtin.import_role"]["rolespec_validate"] is False
    assert "rolespec_validate" not in tasks[-2]["ansible.builtin.include_role"]
    # ... and its play ends, by the passive checks' role's own rule (its defaults name the
    # timer's units and switches: one owner), unless that role has work on it.
    exit_ = tasks[1]["ansible.builtin.import_role"]
    assert (exit_["name"], exit_["tasks_from"], exit_["rolespec_validate"]) == (
        "slurm_healthcheck",
        "noop_exit.yml",
        False,
    )
    assert tasks[1]["when"] == none
    [end] = load(REPO / "roles" / "slurm_healthcheck" / "tasks" / "noop_exit.yml")
    assert end["ansible.builtin.meta"] == "end_host"
    assert end["when"][:3] == [
        "not (slurm_healthcheck_install | bool)",
        "(gpunode_node | default({})).own_units | default(none) is not none",
        "slurm_healthcheck_timer_unit.startswith('gpunode-')",
    ]
    assert "intersect([slurm_healthcheck_timer_unit ~ '.service'" in end["when"][3]
    # Its switch is on where the inventory asks for either kind of passive check.
    defaults = load(REPO / "roles" / "slurm_healthcheck" / "defaults" / "main.yml")
    for switch in ("gpunode_slurm_healthcheck", "gpunode_check_timer"):
        assert f"({switch} | default(false) | bool)" in defaults["slurm_healthcheck_install"]
    assert all(t["tags"] == ["always"] for t in (*tasks[:3], tasks[-2]))
    # Each component's role runs only when the plan (toolkit/node/converge.py) says so; the passive
    # checks' role always: it installs what the inventory asks for and removes a timer it no
    # longer asks for (tests/unit/check/test_timer.py reads the role's switches).
    planned = {t["ansible.builtin.include_role"]["name"]: t.get("when") for t in tasks[3:-2]}
    assert "when" not in tasks[-1]
    assert planned == {
        role: f"gpunode_plan.{component}.run" for component, (role, *_) in converge.ROLES.items()
    }


def test_no_play_or_role_gathers_facts_with_setup() -> None:
    # The facts probe (gpunode_node_facts) reads the OS facts in its one round trip.
    for playbook in PLAYBOOKS:
        for play in load(playbook):
            assert play.get("gather_facts") is False or "import_playbook" in str(play), playbook
    for path in (REPO / "roles").rglob("*.yml"):
        text = path.read_text()
        assert "ansible.builtin.setup" not in text and "gather_facts:" not in text, path
