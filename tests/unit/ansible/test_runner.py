"""The runner's helpers: secrets in extravars, content, environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.ansible import runner
from toolkit.ansible.content import find_content
from toolkit.errors import ConfigError


@pytest.mark.parametrize(
    "name", ["ansible_become_password", "vault_pass", "api_token", "my_secret", "ApiKey"]
)
def test_secret_extravars_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        runner.check_extravars({name: "x"})


def test_plain_extravars_pass() -> None:
    runner.check_extravars({"gpunode_run_id": "r", "ansible_ssh_private_key_file": "/k"})


def test_content_is_found_in_the_checkout(repo_root: Path) -> None:
    content = find_content()
    assert content.root == repo_root
    assert content.playbook("provision") == repo_root / "playbooks" / "provision.yml"
    assert (content.action_plugins / "gpunode_stack.py").is_file()
    with pytest.raises(ConfigError, match=r"nope\.yml"):
        content.playbook("nope")


def test_content_missing_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GPUNODE_CONTENT_DIR"):
        find_content(tmp_path)


def test_ansible_env_points_at_the_content_with_host_keys_checked() -> None:
    content = find_content()
    env = runner.ansible_env(content)
    assert env["ANSIBLE_ROLES_PATH"] == str(content.roles)
    assert env["ANSIBLE_ACTION_PLUGINS"] == str(content.action_plugins)
    assert env["ANSIBLE_LIBRARY"] == str(content.modules)
    assert env["ANSIBLE_FILTER_PLUGINS"] == str(content.filter_plugins)
    assert env["ANSIBLE_HOST_KEY_CHECKING"] == "True"
    assert env["PATH"].split(":")[0].endswith("bin")


def test_run_playbook_refuses_missing_inventory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        runner.run_playbook("provision", tmp_path / "nowhere")


def test_cancellation_handles_signals_for_the_run_only() -> None:
    import os
    import signal

    before = signal.getsignal(signal.SIGINT)
    with runner.cancellation(None) as cancelled:
        assert not cancelled()
        os.kill(os.getpid(), signal.SIGTERM)
        assert cancelled()
    assert signal.getsignal(signal.SIGINT) is before
    given = lambda: True  # noqa: E731
    with runner.cancellation(given) as cancelled:
        assert cancelled is given
