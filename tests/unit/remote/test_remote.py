"""The remote layer runs every command as root: as it is for a root login, through
``sudo -n`` for any other login (sites log in as a cloud image's sudo user)."""

from __future__ import annotations

import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko
import pytest

from toolkit.errors import RemoteError
from toolkit.inventory import Host
from toolkit.remote import Node, as_root, open_node


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


# --- a node that stops answering ----------------------------------------------------------


class Node_(paramiko.ServerInterface):
    """An SSH server (paramiko's, over a real socket) that takes the session and then never
    answers the first ``exec`` (the hang of paramiko/paramiko#2599); later ones it answers."""

    def __init__(self) -> None:
        self.execs: list[str] = []
        self.release = threading.Event()

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel: paramiko.Channel, command: bytes) -> bool:
        self.execs.append(command.decode())
        if len(self.execs) == 1:
            self.release.wait(60)  # no answer: this server's transport thread is stuck here
            return False

        def answer() -> None:
            # Output, exit status and end of stream; the client closes the channel (a close
            # from here could overtake the transport's reply to exec).
            channel.sendall(b"answered\n")
            channel.send_exit_status(0)
            channel.shutdown_write()

        threading.Thread(target=answer, daemon=True).start()
        return True


@pytest.fixture
def silent_node(tmp_path: Path) -> Iterator[tuple[Host, Node_]]:
    host_key = paramiko.ECDSAKey.generate()
    login_key = paramiko.ECDSAKey.generate()
    login_key.write_private_key_file(str(tmp_path / "id_ecdsa"))
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    (tmp_path / "known_hosts").write_text(
        f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n"
    )
    server = Node_()
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(sock)
            transport.add_server_key(host_key)
            transport.start_server(server=server)
            transports.append(transport)

    threading.Thread(target=serve, daemon=True).start()
    host = Host(
        name="node-1",
        address="127.0.0.1",
        port=port,
        user="root",
        private_key_file=tmp_path / "id_ecdsa",
        known_hosts_file=tmp_path / "known_hosts",
        groups=(),
        vars={},
    )
    try:
        yield host, server
    finally:
        server.release.set()
        listener.close()
        for transport in transports:
            transport.close()


START_CASES = [
    (
        lambda node: node.run("python3 runner.pyz run", timeout=1800),  # the runner's timeout
        "python3 runner.pyz run",
        "node-1: no answer in 1s to starting 'python3 runner.pyz run'; connection closed",
    ),
    (
        lambda node: node.run_with_input("docker load --quiet", [b"layer"], timeout=1800),
        "docker load --quiet",
        "node-1: no answer in 1s: starting docker load --quiet; connection closed",
    ),
]


@pytest.mark.parametrize(("operation", "command", "message"), START_CASES, ids=["run", "input"])
def test_a_node_that_never_answers_fails_at_the_deadline_and_the_next_command_reconnects(
    silent_node: tuple[Host, Node_],
    operation: Callable[[Node], object],
    command: str,
    message: str,
) -> None:
    host, server = silent_node
    node = open_node(host, grace_s=1.0)
    started = time.monotonic()
    with pytest.raises(RemoteError) as err:
        operation(node)
    took = time.monotonic() - started
    assert server.execs == [command]  # it reached the node, and hung there
    assert 1.0 <= took < 10, took  # the start's deadline, not the command's timeout
    assert err.value.message == message
    # The connection is shut; the next command opens a new one and gets its answer.
    res = node.run("cat /etc/gpunode/state.json", timeout=5)
    assert res.ok and res.stdout == "answered\n"
    assert server.execs[-1] == "cat /etc/gpunode/state.json"
    node.close()
