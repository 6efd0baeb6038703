"""The ``gpunode_data_disks`` action, run by real Ansible against this machine (localhost).

Every case names a serial this machine does not have, or breaks a schema rule, so the
action only runs its read-only probe and refuses: nothing on the machine can change.
"""

from __future__ import annotations

from typing import Any

import ansible_runner
import pytest
import yaml

from toolkit.ansible.content import find_content
from toolkit.ansible.events import EventCollector
from toolkit.ansible.runner import ansible_env

ABSENT = {"disks": [{"serial": "GPUNODE-NO-SUCH-DISK"}], "mount_point": "/mnt/never"}
INVALID = {"disks": [{"serial": "A"}, {"serial": "B"}], "layout": "single"}


def task(name: str, args: dict[str, Any], register: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "gpunode_data_disks": args, "register": register, "ignore_errors": True},
        {
            "name": f"Keep {register}",
            "ansible.builtin.set_fact": {
                f"{register}_msg": f"{{{{ {register}.msg | default('') }}}}",
                f"{register}_failed": f"{{{{ {register}.failed | default(false) }}}}",
                f"{register}_plan": f"{{{{ {register}.plan | default({{}}) }}}}",
            },
        },
    ]


@pytest.fixture(scope="module")
def facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("disks-plugin")
    tasks = (
        task("Plan only", {"spec": ABSENT, "report_only": True}, "reported")
        + task("Apply a refused plan", {"spec": ABSENT}, "applied")
        + task("Refuse an invalid spec", {"spec": INVALID}, "invalid")
        + task("Refuse a missing spec", {}, "missing")
        + task("Refuse bad runtimes", {"spec": ABSENT, "runtime_services": ["docker"]}, "runtimes")
    )
    playbook = [{"name": "Data disks", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    path = tmp / "disks.yml"
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
    return collector.facts["localhost"]


def test_report_only_returns_the_refusal_without_failing(facts):
    assert facts["reported_failed"] is False
    plan = facts["reported_plan"]
    assert plan["refused"] is True and plan["actions"] == []
    assert plan["reasons"] == [
        "GPUNODE-NO-SUCH-DISK: no disk with this serial under /dev/disk/by-id (the disk is "
        "absent or named differently; set by_id to its exact name)"
    ]
    assert plan["disks"][0]["path"] is None
    assert facts["gpunode_data_disks"]["refused"] is True


def test_apply_fails_with_every_reason(facts):
    assert facts["applied_failed"] is True
    assert facts["applied_msg"].startswith("refused, nothing was changed:")
    assert "GPUNODE-NO-SUCH-DISK: no disk with this serial" in facts["applied_msg"]


def test_invalid_spec_names_the_key_and_rule(facts):
    assert facts["invalid_failed"] is True
    assert "hardware.data_disks" in facts["invalid_msg"]
    assert "layout single takes exactly one disk, 2 are listed" in facts["invalid_msg"]


def test_missing_spec_is_an_error(facts):
    assert facts["missing_failed"] is True
    assert "spec is required" in facts["missing_msg"]


def test_runtime_services_must_be_service_units(facts):
    assert facts["runtimes_failed"] is True
    assert "runtime_services must be a list of systemd service names" in facts["runtimes_msg"]
