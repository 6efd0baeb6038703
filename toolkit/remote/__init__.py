"""Fabric connections built from the inventory, with host keys always checked.

Fabric's default is paramiko's ``AutoAddPolicy`` (trust any key on first sight); gpunode
replaces it with ``RejectPolicy`` and loads the known_hosts file the inventory names
(``-o UserKnownHostsFile=...`` in ``ansible_ssh_common_args``), else the user's
``~/.ssh/known_hosts``. A host whose key is unknown or different is refused.

Everything gpunode does on a node over these connections needs root (Docker, the state file
under /etc/gpunode, the kernel log, dropping the page cache), and sites log in as a user with
passwordless sudo (cloud images' ``ubuntu``/``debian``), so a node whose login user is not root
runs every command through ``sudo -n`` (never a prompt: a sudo that wants a password fails at
once, saying so) and files are written through a private temporary file and ``install``: the
same escalation Ansible's ``become`` gives the playbooks. A root login runs them as they are.

Third-party errors (paramiko, socket, invoke) become :class:`RemoteError` naming the host.

Every remote operation has a hard deadline. invoke's ``timeout`` counts only once the command
runs, and paramiko waits for the node's answer to opening a session for an hour
(``Transport.channel_timeout``) and to ``exec`` for ever (``Channel._wait_for_event``:
paramiko/paramiko#2599, open), so a node that stops answering would hold the whole run. A
command must start within :data:`GRACE_S` and end within its timeout and that grace; what has
no timeout (a small file's transfer) must end within :data:`DEFAULT_DEADLINE_S`. At a deadline
the connection is shut, the operation fails with :class:`RemoteError` saying so, and the next
one on that node connects anew.
"""

from __future__ import annotations

import io
import shlex
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

import paramiko
from fabric import Config, Connection
from fabric.runners import Remote
from invoke.exceptions import CommandTimedOut, UnexpectedExit

from toolkit.errors import RemoteError
from toolkit.inventory import Host

T = TypeVar("T")
DEFAULT_USER = "root"
# Beyond a command's own timeout, the time its session may take to open and start.
GRACE_S = 60.0
# The deadline of what has no timeout of its own: a small file's transfer, mktemp, cat.
DEFAULT_DEADLINE_S = 300.0


@dataclass(frozen=True)
class Result:
    """What one remote command returned."""

    host: str
    command: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.returncode == 0


def connect(host: Host, *, connect_timeout: int = 20, grace_s: float = GRACE_S) -> Connection:
    """An (unopened) Fabric connection to one inventory host, host keys enforced; a command
    it runs must start within ``grace_s``.

    Raises:
        RemoteError: No known_hosts file to check the host's key against.
    """
    known_hosts = host.known_hosts_file or Path("~/.ssh/known_hosts").expanduser()
    if not known_hosts.is_file():
        raise RemoteError(
            f"{host.name}: no known_hosts file at {known_hosts}; gpunode never connects to a "
            "host whose key it cannot check (set -o UserKnownHostsFile=... in "
            "ansible_ssh_common_args)"
        )
    kwargs: dict[str, object] = {"allow_agent": False}
    if host.private_key_file is not None:
        kwargs["key_filename"] = [str(host.private_key_file)]
        kwargs["look_for_keys"] = False
    conn = Connection(
        host=host.address,
        port=host.port,
        user=host.user or DEFAULT_USER,
        connect_timeout=connect_timeout,
        connect_kwargs=kwargs,
        config=Config(
            overrides={
                "runners": {"remote": _Remote},
                "gpunode": {"start_s": grace_s, "host": host.name},
            }
        ),
    )
    conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    try:
        conn.client.load_host_keys(str(known_hosts))
    except (OSError, paramiko.SSHException) as err:
        raise RemoteError(f"{host.name}: cannot read known_hosts {known_hosts}: {err}") from None
    return conn


@contextmanager
def _deadline(conn: Connection, seconds: float, message: str) -> Iterator[None]:
    """Shut the connection if the block runs past ``seconds`` (module docstring); the block
    then fails with RemoteError(``message``), whatever paramiko made of the shut connection."""
    fired = threading.Event()

    def shut() -> None:
        fired.set()
        transport = conn.client.get_transport()
        sock = transport.sock if transport is not None else None
        # The transport's own thread sees the end of the stream and wakes every waiter on its
        # channels; closing the transport from here could wait on the hung peer.
        with suppress(OSError):
            if isinstance(sock, socket.socket):
                sock.shutdown(socket.SHUT_RDWR)
            elif sock is not None:
                sock.close()  # a proxy command's pipe

    timer = threading.Timer(seconds, shut)
    timer.daemon = True
    timer.start()
    try:
        yield
    except BaseException:
        if not fired.is_set():
            raise
    finally:
        timer.cancel()
    if fired.is_set():
        with suppress(*_REMOTE_ERRORS):
            conn.close()  # the next operation connects anew
        raise RemoteError(message)


class _Remote(Remote):
    """Fabric's runner of a remote command, whose start (the session opened, ``exec``
    answered) has a deadline of its own: invoke's timeout counts only from there."""

    def start(self, command: str, shell: str, env: dict[str, Any], timeout: Any = None) -> None:
        """Open the session and start the command, or fail at the deadline."""
        limits = self.context.config.gpunode
        seconds = float(limits.start_s)
        message = (
            f"{limits.host}: no answer in {seconds:.0f}s to starting {command[:120]!r}; "
            "connection closed"
        )
        with _deadline(self.context, seconds, message):
            super().start(command, shell, env, timeout=timeout)


def _wrap(host: Host, what: str, err: BaseException) -> RemoteError:
    if isinstance(err, paramiko.BadHostKeyException):
        return RemoteError(
            f"{host.name}: host key mismatch for {host.address}: refusing to connect"
        )
    if isinstance(err, paramiko.SSHException) and "not found in known_hosts" in str(err):
        return RemoteError(f"{host.name}: host key of {host.address} is not in known_hosts")
    if isinstance(err, paramiko.AuthenticationException):
        return RemoteError(f"{host.name}: SSH authentication failed as {host.user or DEFAULT_USER}")
    return RemoteError(f"{host.name}: {what}: {type(err).__name__}: {err}")


_REMOTE_ERRORS = (paramiko.SSHException, OSError, socket.timeout, EOFError)


def as_root(command: str, login_user: str) -> str:
    """``command`` as root: unchanged for a root login, else through ``sudo -n`` and ``sh``."""
    if login_user == "root":
        return command
    return f"sudo -n -- sh -c {shlex.quote(command)}"


class Node:
    """One open connection to one inventory host; commands and writes run as root."""

    def __init__(self, host: Host, conn: Connection, *, grace_s: float = GRACE_S) -> None:
        self.host = host
        self.conn = conn
        self.login_user = host.user or DEFAULT_USER
        self.grace_s = grace_s

    def run(
        self,
        command: str,
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = False,
    ) -> Result:
        """Run a shell command on the node.

        Args:
            command: The command line (run by the login user's shell).
            timeout: Seconds before the command is abandoned.
            env: Variables to set, prefixed to the command (sshd often refuses SetEnv).
            check: Raise RemoteError on a non-zero exit.

        Raises:
            RemoteError: The connection failed, the command timed out, or ``check`` is set
                and it exited non-zero.
        """
        if env:
            prefix = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items())
            command = f"env {prefix} {command}"
        return self._run(as_root(command, self.login_user), timeout=timeout, check=check)

    def _deadline(self, seconds: float, what: str) -> AbstractContextManager[None]:
        return _deadline(
            self.conn,
            seconds,
            f"{self.host.name}: no answer in {seconds:.0f}s: {what[:120]}; connection closed",
        )

    def _run(self, command: str, *, timeout: float | None = None, check: bool = False) -> Result:
        """Run a command line exactly as given, as the login user."""
        deadline = DEFAULT_DEADLINE_S if timeout is None else timeout + self.grace_s
        try:
            with self._deadline(deadline, command):
                res = self.conn.run(command, hide=True, warn=True, timeout=timeout, in_stream=False)
        except CommandTimedOut:
            raise RemoteError(
                f"{self.host.name}: timed out after {timeout:.0f}s: {command[:120]}"
            ) from None
        except UnexpectedExit as err:  # only with warn=False; kept for safety
            res = err.result
        except _REMOTE_ERRORS as err:
            raise _wrap(self.host, f"running {command[:80]!r}", err) from None
        result = Result(self.host.name, command, res.exited, res.stdout, res.stderr)
        if check and not result.ok:
            tail = (result.stderr or result.stdout).strip()[-500:]
            raise RemoteError(
                f"{self.host.name}: `{command[:120]}` exited {result.returncode}: {tail}"
            )
        return result

    def run_with_input(
        self, command: str, chunks: Iterable[bytes], *, timeout: float | None = None
    ) -> Result:
        """Run a command with a byte stream on its stdin (``docker load`` of a saved image).

        Raises:
            RemoteError: The connection failed or the command did not finish in time.
        """
        deadline = DEFAULT_DEADLINE_S if timeout is None else timeout + self.grace_s
        try:
            self.conn.open()
            with self._deadline(deadline, command):
                transport = self.conn.client.get_transport()
                assert transport is not None
                with self._deadline(self.grace_s, f"starting {command}"):
                    channel = transport.open_session(timeout=timeout)
                    channel.settimeout(timeout)
                    channel.exec_command(as_root(command, self.login_user))
                try:
                    for chunk in chunks:
                        channel.sendall(chunk)
                    channel.shutdown_write()
                except OSError:
                    pass  # the command ended early (it failed): its exit status and stderr say
                stdout = channel.makefile("rb").read().decode(errors="replace")
                stderr = channel.makefile_stderr("rb").read().decode(errors="replace")
                code = channel.recv_exit_status()
                channel.close()
        except TimeoutError:
            raise RemoteError(f"{self.host.name}: timed out: {command[:120]}") from None
        except _REMOTE_ERRORS as err:
            raise _wrap(self.host, f"running {command[:80]!r}", err) from None
        return Result(self.host.name, command, code, stdout, stderr)

    def put_text(self, text: str | bytes, remote_path: str, mode: int = 0o644) -> None:
        """Write a file on the node (owned by root, with ``mode``)."""
        data = text.encode() if isinstance(text, str) else text
        self._upload(io.BytesIO(data), remote_path, mode, f"writing {remote_path}")

    def _upload(self, source: BinaryIO, remote_path: str, mode: int, what: str) -> None:
        """SFTP writes as the login user: a root login writes in place; any other user writes a
        private temporary file (``mktemp``: mode 0600, its own) that root then installs."""
        try:
            if self.login_user == "root":
                with self._deadline(DEFAULT_DEADLINE_S, what):
                    self.conn.put(source, remote=remote_path)
                    self.conn.sftp().chmod(remote_path, mode)
                return
            staged = self._run("mktemp /tmp/gpunode-upload.XXXXXXXX", check=True).stdout.strip()
            try:
                with self._deadline(DEFAULT_DEADLINE_S, what):
                    self.conn.put(source, remote=staged)
                self.run(
                    f"install -m {mode:o} -o root -g root {shlex.quote(staged)} "
                    f"{shlex.quote(remote_path)}",
                    check=True,
                )
            finally:
                self._run(f"rm -f {shlex.quote(staged)}")
        except _REMOTE_ERRORS as err:
            raise _wrap(self.host, what, err) from None

    def get_text(self, remote_path: str) -> str:
        """Read a file from the node (as root)."""
        if self.login_user != "root":
            return self.run(f"cat -- {shlex.quote(remote_path)}", check=True).stdout
        buffer = io.BytesIO()
        try:
            with self._deadline(DEFAULT_DEADLINE_S, f"reading {remote_path}"):
                self.conn.get(remote_path, local=buffer)
        except _REMOTE_ERRORS as err:
            raise _wrap(self.host, f"reading {remote_path}", err) from None
        return buffer.getvalue().decode("utf-8", errors="replace")

    def close(self) -> None:
        """Close the connection."""
        self.conn.close()


def open_node(host: Host, *, connect_timeout: int = 20, grace_s: float = GRACE_S) -> Node:
    """Connect to one host (``grace_s``: how long past a command's timeout it may take, with
    opening its session, before the connection is shut).

    Raises:
        RemoteError: The host cannot be reached, its key is unknown or wrong, or login fails.
    """
    conn = connect(host, connect_timeout=connect_timeout, grace_s=grace_s)
    try:
        conn.open()
    except _REMOTE_ERRORS as err:
        raise _wrap(host, "connecting", err) from None
    return Node(host, conn, grace_s=grace_s)


def parallel(
    hosts: Iterable[Host], func: Callable[[Host], T], *, max_workers: int = 32
) -> dict[str, T | RemoteError]:
    """Run ``func`` for every host at once; a host's RemoteError is its result, not a crash.

    Returns:
        Host name -> the function's return value or the RemoteError it raised.
    """
    hosts = list(hosts)
    out: dict[str, T | RemoteError] = {}
    if not hosts:
        return out

    def call(host: Host) -> T | RemoteError:
        try:
            return func(host)
        except RemoteError as err:
            return err

    with ThreadPoolExecutor(max_workers=min(max_workers, len(hosts))) as pool:
        for host, value in zip(hosts, pool.map(call, hosts), strict=True):
            out[host.name] = value
    return out
