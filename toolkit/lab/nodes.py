"""Lab node containers: systemd as PID 1, sshd, data disks, the emulated hardware.

A node runs unprivileged (``--privileged`` does not work here, and a node should not own
the host): it gets SYS_ADMIN, NET_ADMIN and IPC_LOCK, unconfined seccomp and AppArmor and the host's
cgroup namespace with a writable cgroup tree, which is what systemd and a Docker engine
inside the node need; block devices of the loop (7), md (9) and extended-partition (259)
majors may be created and used inside it, and the emulated hardware's character devices
(NVIDIA's 195, the RDMA NICs' 231 and 10:58: ``toolkit.lab.devices``) created but never
opened, nothing else.
"""

from __future__ import annotations

import io
import secrets
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container

from toolkit.errors import LabError
from toolkit.lab import network, paths

STOP_SIGNAL = "SIGRTMIN+3"  # what makes systemd shut down cleanly
# `m` alone for major 195: the emulated GPUs' files exist (slurmd's GRES plugin stats them) and
# nothing in the node may read or write a real NVIDIA device of a GPU host.
DEVICE_RULES = ("b 7:* rwm", "b 9:* rwm", "b 259:* rwm", "c 195:* m")
CA_FILE = "/usr/local/share/ca-certificates/gpunode-lab-host-ca.crt"
BOOT_ID_FILE = "/run/gpunode-lab/boot_id"
DISKS_FILE = f"{paths.NODE_STATE_DIR}/disks"
DISKS_BACKING_FILE = f"{paths.NODE_STATE_DIR}/disks.backing"
KERNEL_EVENTS_FILE = f"{paths.NODE_STATE_DIR}/kernel-events"
EGRESS_RATE_FILE = f"{paths.NODE_STATE_DIR}/egress-rate"
# The `slow-data` fault: its read limits and the script that applies them (a node file, not
# part of the node image: node_files/gpunode-lab-data-throttle.sh).
DATA_THROTTLE_FILE = f"{paths.NODE_STATE_DIR}/data-throttle"
DATA_THROTTLE_SCRIPT = "/usr/local/sbin/gpunode-lab-data-throttle"
# The `no-rdma-passthrough` fault's switch ("strip" or empty) and where its runc wrapper
# (node_files/gpunode_lab_runc.py) goes while the fault is set: first on containerd's PATH.
RDMA_PASSTHROUGH_FILE = f"{paths.NODE_STATE_DIR}/rdma-passthrough"
RUNC_WRAPPER = "/usr/local/sbin/runc"


@dataclass(frozen=True)
class NodeFile:
    """A file to place in a node: content and mode."""

    content: bytes
    mode: int = 0o644


def container_labels(lab_name: str, role: str, index: int | None = None) -> dict[str, str]:
    """Labels on every container of a lab (``down`` finds them by these)."""
    labels = {paths.LABEL: lab_name, f"{paths.LABEL}.role": role}
    if index is not None:
        labels[f"{paths.LABEL}.node"] = str(index)
    return labels


def host_config(client: docker.DockerClient) -> dict[str, object]:
    """The HostConfig of a node: what systemd and Docker-in-node need, no more."""
    config: dict[str, object] = client.api.create_host_config(
        # IPC_LOCK: the ranks' containers are given it (NCCL's verbs pin memory; Linux
        # drivers/infiniband/core/umem.c lets only CAP_IPC_LOCK pin past RLIMIT_MEMLOCK), and a
        # container can be given no capability its parent lacks (capabilities(7), the
        # bounding set). It lets the node lock memory past its limit, nothing more.
        cap_add=["SYS_ADMIN", "NET_ADMIN", "IPC_LOCK"],
        security_opt=["seccomp=unconfined", "apparmor=unconfined"],
        cgroupns="host",
        binds={"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"}},
        tmpfs={
            "/run": "rw,nosuid,nodev,exec,mode=755",
            "/run/lock": "rw,nosuid,nodev,noexec,mode=1777",
        },
        restart_policy={"Name": "unless-stopped"},
        device_cgroup_rules=list(DEVICE_RULES),
        # dockerd inside a node only writes ip_forward when it is off, and /proc/sys is
        # read-only in a container: set it here.
        sysctls={"net.ipv4.ip_forward": "1"},
    )
    return config


def create_node(
    client: docker.DockerClient,
    *,
    lab_name: str,
    name: str,
    index: int,
    image: str,
    network: str,
    ip: str,
    files: Mapping[str, NodeFile],
) -> Container:
    """Create (not start) a node container with its files in place.

    Raises:
        LabError: Docker refused.
    """
    try:
        created = client.api.create_container(
            image=image,
            name=name,
            hostname=name,
            labels=container_labels(lab_name, "node", index),
            stop_signal=STOP_SIGNAL,
            host_config=host_config(client),
            networking_config=client.api.create_networking_config(
                {network: client.api.create_endpoint_config(ipv4_address=ip)}
            ),
        )
        container = client.containers.get(created["Id"])
        put_files(container, files)
    except docker.errors.APIError as err:
        raise LabError(f"cannot create node {name}: {err}") from err
    return container


def put_files(container: Container, files: Mapping[str, NodeFile]) -> None:
    """Copy files into a container (created or running), owned by root."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, node_file in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(node_file.content)
            info.mode = node_file.mode
            info.mtime = int(time.time())
            tar.addfile(info, io.BytesIO(node_file.content))
    try:
        ok = container.put_archive("/", buffer.getvalue())
    except docker.errors.APIError as err:
        raise LabError(f"cannot copy files into {container.name}: {err}") from err
    if not ok:
        raise LabError(f"cannot copy files into {container.name}")


def exec_in(
    container: Container, argv: Sequence[str], *, check: bool = True, timeout_hint: str = ""
) -> tuple[int, str]:
    """Run a command in a running container.

    Returns:
        (exit code, combined output).

    Raises:
        LabError: The command failed while ``check`` is set, or Docker refused.
    """
    try:
        result = container.exec_run(list(argv), demux=False)
    except docker.errors.APIError as err:
        raise LabError(f"cannot run {' '.join(argv)} in {container.name}: {err}") from err
    output = (result.output or b"").decode(errors="replace")
    if check and result.exit_code != 0:
        raise LabError(
            f"`{' '.join(argv)}` failed in {container.name} (exit {result.exit_code})"
            f"{timeout_hint}: {output.strip()[-400:]}"
        )
    return int(result.exit_code or 0), output


def new_machine_id() -> bytes:
    """A fresh machine-id (32 lowercase hex digits), as systemd-machine-id-setup writes."""
    return (secrets.token_hex(16) + "\n").encode()


def wait_ready(container: Container, ip: str, timeout: float = 120, strict: bool = True) -> str:
    """Wait until systemd finished booting the node and sshd answers.

    Args:
        container: The node.
        ip: Its address on the lab network.
        timeout: Seconds to wait in all.
        strict: A node that booted with failed units is an error (a fresh node must
            boot clean; a node that roles have changed may have units of its own).

    Returns:
        systemd's verdict: ``running`` or (not strict) ``degraded``.

    Raises:
        LabError: The node did not boot in time, or (strict) booted with failed units.
    """
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        container.reload()
        if container.status != "running":
            if container.status in ("exited", "dead"):
                logs = container.logs(tail=20).decode(errors="replace")
                raise LabError(f"node {container.name} stopped while booting: {logs.strip()}")
            time.sleep(0.5)
            continue
        _code, out = exec_in(container, ["systemctl", "is-system-running", "--wait"], check=False)
        state = out.strip().splitlines()[-1] if out.strip() else ""
        if state in ("running", "degraded"):
            break
        time.sleep(0.5)
    else:
        raise LabError(f"node {container.name} did not finish booting in {timeout:.0f}s ({state})")
    if state == "degraded" and strict:
        _code, failed = exec_in(
            container, ["systemctl", "--failed", "--no-legend", "--plain"], check=False
        )
        raise LabError(f"node {container.name} booted with failed units: {failed.strip()}")
    network.wait_for_banner(ip, 22, b"SSH-", f"sshd on node {container.name}", deadline)
    return state


def get_container(client: docker.DockerClient, name: str) -> Container | None:
    """The container called ``name``, or None."""
    try:
        return client.containers.get(name)
    except docker.errors.NotFound:
        return None
    except docker.errors.APIError as err:
        raise LabError(f"cannot inspect container {name}: {err}") from err


def labelled_containers(client: docker.DockerClient, lab_name: str) -> list[Container]:
    """Every container (running or not) that carries this lab's label."""
    try:
        return list(
            client.containers.list(all=True, filters={"label": f"{paths.LABEL}={lab_name}"})
        )
    except docker.errors.APIError as err:
        raise LabError(f"cannot list the containers of lab {lab_name}: {err}") from err


def stop_container(container: Container, timeout: int = 30) -> None:
    """Shut a container down cleanly (systemd's stop signal), killing it after ``timeout``."""
    try:
        container.stop(timeout=timeout)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as err:
        raise LabError(f"cannot stop container {container.name}: {err}") from err


def remove_container(container: Container) -> None:
    """Stop and remove a container (its anonymous volumes too)."""
    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as err:
        raise LabError(f"cannot remove container {container.name}: {err}") from err


def restart(container: Container, ip: str, timeout: float = 120) -> None:
    """Restart a node like a reboot (its /run and /dev start empty) and wait for it."""
    try:
        container.restart(timeout=20)
    except docker.errors.APIError as err:
        raise LabError(f"cannot restart node {container.name}: {err}") from err
    wait_ready(container, ip, timeout, strict=False)


def read_file(container: Container, path: str) -> str:
    """A text file's content from a running node."""
    _code, out = exec_in(container, ["cat", path])
    return out


def host_ca_bundle() -> Path | None:
    """The host's CA bundle (Debian/Ubuntu location) when there is one."""
    path = Path("/etc/ssl/certs/ca-certificates.crt")
    return path if path.is_file() else None
