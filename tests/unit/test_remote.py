"""The remote layer runs every command as root: as it is for a root login, through
``sudo -n`` for any other login (sites log in as a cloud image's sudo user)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from toolkit.remote import as_root


def test_a_root_login_runs_commands_as_they_are() -> None:
    assert as_root("docker load", "root") == "docker load"


@pytest.mark.parametrize(
    "command",
    [
        "docker load",
        "mkdir -p /opt/gpunode/accept /etc/gpunode",
        "env GPUNODE_X='a b' python3 /opt/gpunode/accept/node_runner.pyz run",
        "cat /etc/os-release; echo GPUNODE_ADDR=$(hostname -I)",
        "printf '%s\\n' \"it's\" | tee /tmp/x",
    ],
)
def test_any_other_login_escalates_the_whole_command_line(command: str) -> None:
    wrapped = as_root(command, "ubuntu")
    argv = shlex.split(wrapped)
    # sudo never prompts (-n), and the whole line, quotes, pipes and ';' included, is one
    # argument to one shell that runs as root.
    assert argv[:5] == ["sudo", "-n", "--", "sh", "-c"] and argv[5:] == [command]


def test_the_escalated_line_means_what_the_original_meant() -> None:
    command = "printf '%s|' \"it's\" a\\ b; echo $((1 + 2))"
    plain = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True)
    inner = shlex.split(as_root(command, "ubuntu"))[5]
    again = subprocess.run(["sh", "-c", inner], capture_output=True, text=True, check=True)
    assert again.stdout == plain.stdout == "it's|a b|3\n"
