"""Every role's interface: defaults agree with meta/argument_specs.yml, names are prefixed,
tasks are named sentences with FQCN modules, handlers are named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

ROLES = sorted(p for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir())
# The project's own plugins (toolkit/plugins/action) have no collection.
OWN_ACTIONS = {
    p.stem
    for folder in ("toolkit/plugins/action", "toolkit/plugins/modules")
    for p in (REPO / folder).glob("*.py")
}
TASK_KEYWORDS = {
    "name",
    "when",
    "register",
    "loop",
    "loop_control",
    "vars",
    "tags",
    "notify",
    "changed_when",
    "failed_when",
    "check_mode",
    "become",
    "become_user",
    "delegate_to",
    "run_once",
    "ignore_errors",
    "no_log",
    "until",
    "retries",
    "delay",
    "environment",
    "args",
    "block",
    "rescue",
    "always",
    "listen",
    "diff",
    "throttle",
    "timeout",
    "any_errors_fatal",
}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_there_are_roles() -> None:
    names = {role.name for role in ROLES}
    assert {"preflight", "nvidia_driver", "cuda_toolkit", "nccl", "fabric_manager"} <= names
    assert {"container_runtime", "node_state"} <= names


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_agree_with_defaults(role: Path) -> None:
    defaults = load(role / "defaults" / "main.yml") or {}
    specs = load(role / "meta" / "argument_specs.yml")["argument_specs"]
    options = specs["main"].get("options") or {}
    assert set(options) == set(defaults), f"{role.name}: specs and defaults name other variables"
    for name, spec in options.items():
        assert spec.get("description"), f"{role.name}: {name} has no description"
        templated = isinstance(defaults[name], str) and "{{" in defaults[name]
        # A templated default may stay out of the spec (its type would not match the
        # template text); any other default must be the same in both.
        if "default" in spec or not templated:
            assert spec.get("default") == defaults[name], f"{role.name}: default of {name} differs"
        if "choices" in spec:
            assert defaults[name] in spec["choices"], f"{role.name}: default of {name} not a choice"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_variables_are_prefixed_with_the_role(role: Path) -> None:
    defaults = load(role / "defaults" / "main.yml") or {}
    for name in defaults:
        assert name.startswith(f"{role.name}_"), f"{role.name}: {name} lacks the role prefix"


def _tasks(items: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    found = []
    for task in items or []:
        found.append(task)
        for key in ("block", "rescue", "always"):
            found.extend(_tasks(task.get(key)))
    return found


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_tasks_are_named_sentences_with_fqcn(role: Path) -> None:
    files = sorted((role / "tasks").glob("*.yml")) + sorted((role / "handlers").glob("*.yml"))
    assert files
    for path in files:
        for task in _tasks(load(path)):
            where = f"{path.relative_to(REPO)}: {task.get('name')!r}"
            name = task.get("name")
            assert name, f"{path.relative_to(REPO)}: a task without a name"
            assert name[0].isupper(), f"{where}: names start with a capital letter"
            if "block" in task:
                continue
            actions = [k for k in task if k not in TASK_KEYWORDS]
            assert len(actions) == 1, f"{where}: expected one action, got {actions}"
            action = actions[0]
            assert action.startswith("ansible.builtin.") or action in OWN_ACTIONS, (
                f"{where}: {action} is not an FQCN builtin nor a gpunode plugin"
            )


@pytest.mark.parametrize(
    "role",
    [r for r in ROLES if (r / "vars").is_dir() and r.name != "node_state"],
    ids=lambda p: p.name,
)
def test_os_vars_cover_every_supported_os(role: Path) -> None:
    names = {p.stem for p in (role / "vars").glob("*.yml")}
    if names - {"main"}:
        assert {"debian12", "ubuntu2204", "ubuntu2404"} <= names, f"{role.name}: {names}"


def test_never_trusted_repositories() -> None:
    for path in (REPO / "roles").rglob("*.yml"):
        assert "trusted=yes" not in path.read_text(encoding="utf-8"), path


def test_never_the_floating_cuda_metapackages() -> None:
    stack_roles = load(REPO / "playbooks" / "vars" / "stack_roles.yml")
    assert "gpunode_stack.cuda.packages" in stack_roles["cuda_toolkit_packages"]
    tasks = (REPO / "roles/cuda_toolkit/tasks/main.yml").read_text(encoding="utf-8")
    assert "intersect(['cuda', 'cuda-toolkit'])" in tasks
