"""The imex role's default node list, evaluated by real Ansible: every host of the play by its
``ansible_host``, and by its inventory name where it has none (Ansible connects to that name)."""

from __future__ import annotations

from pathlib import Path

import ansible_runner
import yaml
from shared_fixtures import REPO

from toolkit.ansible.content import find_content
from toolkit.ansible.events import EventCollector
from toolkit.ansible.runner import ansible_env

DEFAULTS = REPO / "roles" / "imex" / "defaults" / "main.yml"


def test_imex_nodes_default_falls_back_to_the_inventory_name(tmp_path: Path) -> None:
    playbook = [
        {
            "name": "IMEX defaults",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {"name": "Read the role's defaults", "ansible.builtin.include_vars": str(DEFAULTS)},
                {"name": "Evaluate", "ansible.builtin.set_fact": {"nodes": "{{ imex_nodes }}"}},
            ],
        }
    ]
    path = tmp_path / "imex.yml"
    path.write_text(yaml.safe_dump(playbook, sort_keys=False))
    (tmp_path / "run").mkdir()
    local = "ansible_connection=local ansible_python_interpreter=auto_silent"
    inventory = f"gb200-b {local}\ngb200-a ansible_host=10.0.0.12 {local}\n"
    collector = EventCollector()
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path / "run"),
        playbook=str(path),
        inventory=inventory,
        envvars=ansible_env(find_content()),
        event_handler=collector.handle,
        cancel_callback=lambda: False,
        quiet=True,
    )
    assert runner.rc == 0, runner.stdout.read()[-3000:]
    # The same sorted list on every node: one address, one name.
    expected = ["10.0.0.12", "gb200-b"]
    assert collector.facts["gb200-a"]["nodes"] == expected
    assert collector.facts["gb200-b"]["nodes"] == expected
