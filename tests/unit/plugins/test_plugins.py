"""gpunode's action and filter plugins, run by real Ansible on the control machine.

A small playbook runs against ``localhost`` (local connection) through ansible-runner with
the same environment ``gpunode`` uses; nothing on the machine is changed (read-only probes).
"""

from __future__ import annotations

from typing import Any

import ansible_runner
import pytest
import yaml

from toolkit.ansible.content import find_content
from toolkit.ansible.events import EventCollector
from toolkit.ansible.runner import ansible_env
from toolkit.node import converge
from unit.stack.support import lock_for

STACK = {
    "driver": {"version": "550.127.05", "flavour": "open"},
    "cuda": "12.4.1",
    "nccl": "2.21.5-1+cuda12.4",
    "fabric_manager": "auto",
    "container_toolkit": "1.16.2",
}
HARDWARE = {"gpu": {"model": "H100", "count": 8, "nvswitch": True}}


def _lock() -> dict[str, Any]:
    from toolkit.profile.hardware import HardwareProfile
    from toolkit.stack.models import Stack

    return lock_for(Stack.model_validate(STACK), HardwareProfile.model_validate(HARDWARE))


def _broken_lock() -> dict[str, Any]:
    """A lock whose version would write extra stanzas into apt's preferences (issue 27)."""
    lock = _lock()
    entry = lock["systems"]["debian12"]["packages"]["libnccl2"]
    entry["version"] = "1.0\nPackage: *\nPin: origin evil.example\nPin-Priority: 1002"
    return lock


def play(name: str, tasks: list[dict[str, Any]], **vars_: Any) -> dict[str, Any]:
    return {
        "name": name,
        "hosts": "localhost",
        "gather_facts": False,
        "vars": vars_,
        "tasks": tasks,
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> EventCollector:
    tmp = tmp_path_factory.mktemp("plugins")
    playbook = [
        play(
            "Resolve a coherent stack",
            [{"name": "Resolve", "gpunode_stack": {"os_id": "debian12"}}],
            stack=STACK,
            hardware=HARDWARE,
            stack_lock=_lock(),
        ),
        play(
            "Refuse a stale lock",
            [
                {
                    "name": "Refuse the lock",
                    "gpunode_stack": {"os_id": "debian12"},
                    "ignore_errors": True,
                    "register": "stale",
                },
                {
                    "name": "Keep the lock refusal",
                    "ansible.builtin.set_fact": {"lock_refusal": "{{ stale.msg }}"},
                },
            ],
            stack={**STACK, "container_toolkit": "1.17.8"},
            hardware=HARDWARE,
            stack_lock=_lock(),
        ),
        play(
            "Refuse a broken lock",
            [
                {
                    "name": "Refuse the broken lock",
                    "gpunode_stack": {"os_id": "debian12"},
                    "ignore_errors": True,
                    "register": "broken",
                },
                {
                    "name": "Keep the broken lock's refusal",
                    "ansible.builtin.set_fact": {"broken_refusal": "{{ broken.msg }}"},
                },
            ],
            stack=STACK,
            hardware=HARDWARE,
            stack_lock=_broken_lock(),
        ),
        play(
            "Refuse an incoherent stack",
            [
                {
                    "name": "Refuse",
                    "gpunode_stack": {"os_id": "debian12"},
                    "ignore_errors": True,
                    "register": "refused",
                },
                {
                    "name": "Keep the refusal",
                    "ansible.builtin.set_fact": {"refusal": "{{ refused.msg }}"},
                },
            ],
            stack={**STACK, "cuda": "12.8.1"},
            hardware=HARDWARE,
        ),
        play(
            "Read facts on demand",
            [
                {
                    "name": "Read two facts now",
                    "gpunode_node_facts": {"read": ["smi_persistence", "smi_compute_apps"]},
                    "register": "on_demand",
                },
                {
                    "name": "Ask for a fact there is no such thing as",
                    "gpunode_node_facts": {"read": ["smi_everything"]},
                    "ignore_errors": True,
                    "register": "bad_read",
                },
                {
                    "name": "Keep what was read",
                    "ansible.builtin.set_fact": {
                        "on_demand_read": "{{ on_demand.read }}",
                        "bad_read_msg": "{{ bad_read.msg }}",
                    },
                },
            ],
        ),
        play(
            "Refuse an unsupported OS",
            [
                {
                    "name": "Refuse the OS",
                    "gpunode_stack": {},
                    "ignore_errors": True,
                    "register": "os_refused",
                },
                {
                    "name": "Keep the OS refusal",
                    "ansible.builtin.set_fact": {"os_refusal": "{{ os_refused.msg }}"},
                },
            ],
            stack=STACK,
            hardware=HARDWARE,
            ansible_distribution="CentOS",
            ansible_distribution_version="9",
        ),
        play(
            "Plan the converge with one NCCL pin",
            [
                {"name": "Probe for the plan", "gpunode_node_facts": {}},
                {"name": "Compare later", "gpunode_node_facts": {"compare": True}},
                {
                    "name": "Keep the comparison",
                    "ansible.builtin.set_fact": {"compared": "{{ gpunode_node.drift }}"},
                },
                {"name": "Plan", "gpunode_converge_plan": None},
                {
                    "name": "Keep the plan",
                    "ansible.builtin.set_fact": {"plan_a": "{{ gpunode_plan }}"},
                },
            ],
            nccl_packages={"libnccl2": "2.21.5-1+cuda12.4"},
        ),
        play(
            "Plan the converge with another NCCL pin",
            [
                {"name": "Plan again", "gpunode_converge_plan": None},
                {
                    "name": "Keep that plan",
                    "ansible.builtin.set_fact": {"plan_b": "{{ gpunode_plan }}"},
                },
            ],
            nccl_packages={"libnccl2": "2.23.4-1+cuda12.4"},
        ),
        play(
            "Probe this machine and use the filters",
            [
                {
                    "name": "Probe",
                    "gpunode_node_facts": {"stack": "{{ resolved }}", "hardware": HARDWARE},
                },
                {
                    "name": "Apply the filters",
                    "ansible.builtin.set_fact": {
                        "names": "{{ {'b': '2', 'a': '1'} | gpunode_apt_names }}",
                        "missing": "{{ {'x': '1', 'y': '2'} | gpunode_missing_pins(MADISON) }}",
                        "changes": "{{ {'cuda-toolkit-12-4': '1'} | gpunode_family_changes(NEW) }}",
                    },
                },
            ],
            MADISON="x | 1 | repo",
            NEW={"cuda-toolkit-12-8": "2"},
            resolved={
                "stack_id": "x",
                "driver": {
                    "version": "550.127.05",
                    "packages": {"nvidia-utils-550": "550.127.05-1"},
                },
            },
        ),
    ]
    path = tmp / "plugins.yml"
    path.write_text(yaml.safe_dump(playbook, sort_keys=False))
    (tmp / "run").mkdir()
    collector = EventCollector()
    runner = ansible_runner.run(
        private_data_dir=str(tmp / "run"),
        playbook=str(path),
        inventory="localhost ansible_connection=local ansible_python_interpreter=auto_silent",
        envvars=ansible_env(find_content()),
        event_handler=collector.handle,
        # Without a callback ansible-runner installs SIGINT/SIGTERM handlers for good, and
        # the test process would then ignore both.
        cancel_callback=lambda: False,
        quiet=True,
    )
    assert runner.rc == 0, runner.stdout.read()[-3000:]
    return collector


def test_gpunode_stack_resolves(run: EventCollector) -> None:
    resolved = run.facts["localhost"]["gpunode_stack"]
    assert resolved["os"] == "debian12" and len(resolved["stack_id"]) == 12
    # debian12: Debian-style names, at the locked versions.
    assert resolved["driver"]["packages"]["nvidia-driver"] == "550.127.05-1"
    assert resolved["driver"]["packages"]["nvidia-kernel-open-dkms"] == "550.127.05-1"
    assert resolved["fabric_manager"]["enabled"] is True
    assert resolved["cuda"]["packages"] == {"cuda-toolkit-12-4": "12.4.1-1"}


def test_gpunode_stack_refuses_a_stale_lock(run: EventCollector) -> None:
    refusal = run.facts["localhost"]["lock_refusal"]
    assert "stack lock is stale" in refusal and "gpunode stack lock" in refusal


def test_gpunode_stack_refuses_a_broken_lock_naming_the_key(run: EventCollector) -> None:
    refusal = run.facts["localhost"]["broken_refusal"]
    assert "stack.lock.yml of host localhost" in refusal
    assert "stack_lock.systems.debian12.packages.libnccl2.version" in refusal
    assert "not a Debian version" in refusal and "\nPin:" not in refusal


def test_gpunode_stack_refuses_incoherent_stack(run: EventCollector) -> None:
    refusal = run.facts["localhost"]["refusal"]
    assert "incoherent" in refusal and "550.127.05" in refusal and "12.8" in refusal


def test_gpunode_stack_refuses_unsupported_os(run: EventCollector) -> None:
    assert "unsupported OS CentOS 9" in run.facts["localhost"]["os_refusal"]


def test_gpunode_node_facts_on_a_machine_without_gpus(run: EventCollector) -> None:
    node = run.facts["localhost"]["gpunode_node"]
    assert node["kernel"]
    assert node["gpu_count"] == 0
    assert node["loaded_driver"]["version"] is None
    # Nothing of the stack is installed here: every pin is missing, the module is not loaded.
    kinds = {(d["package"], d["kind"]) for d in node["drift"]}
    assert kinds == {("nvidia-utils-550", "missing"), ("kernel module", "loaded")}


def test_gpunode_node_facts_reads_chosen_facts_now(run: EventCollector) -> None:
    """``read``: only the facts named, in one round trip; none of them can be read on a
    machine without nvidia-smi (None: not "no GPU work", not "persistence off")."""
    facts = run.facts["localhost"]
    assert facts["on_demand_read"] == {"smi_persistence": None, "smi_compute_apps": None}
    assert "read takes a list of ['smi_compute_apps', 'smi_persistence']" in facts["bad_read_msg"]


def test_node_facts_read_the_state_file_and_the_stamps(run: EventCollector) -> None:
    facts = run.facts["localhost"]
    node = facts["gpunode_node"]
    # The OS facts, named as Ansible's setup names them (no setup round trip is needed).
    assert facts["ansible_distribution"] == node["os"]["distribution"]
    assert facts["ansible_kernel"] == node["kernel"] and facts["ansible_architecture"]
    assert facts["ansible_distribution_major_version"]
    assert node["state"] == {"state": "new", "reason": []}  # no /etc/gpunode/state.json here
    assert node["converged"] == {}  # no converge stamps here


def test_compare_adds_the_drift_to_the_facts_read_without_a_round_trip(
    run: EventCollector,
) -> None:
    # The stack resolved in the first play: nothing of it is installed on this machine.
    compared = run.facts["localhost"]["compared"]
    assert {d["kind"] for d in compared} >= {"missing", "loaded"}


def test_the_plan_runs_what_never_converged_and_follows_the_role_options(
    run: EventCollector,
) -> None:
    facts = run.facts["localhost"]
    first, second = facts["plan_a"], facts["plan_b"]
    assert set(first) == set(converge.COMPONENTS)
    for decision in first.values():
        assert decision["run"] and decision["reason"] == "never converged by gpunode on this node"
        assert len(decision["inputs"]) == 64
    # Another NCCL pin is another input of the nccl component only.
    changed = {c for c in converge.COMPONENTS if first[c]["inputs"] != second[c]["inputs"]}
    assert changed == {"nccl"}


def test_filters(run: EventCollector) -> None:
    facts = run.facts["localhost"]
    assert facts["names"] == ["a=1", "b=2"]
    assert facts["missing"] == ["y=2"]
    assert facts["changes"]["stale"] == ["cuda-toolkit-12-4"]
