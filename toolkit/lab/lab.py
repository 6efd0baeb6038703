"""The lab as a whole: ``up``, ``status``, ``down``, faults, disks and restarts.

This is the API the CLI (``gpunode lab ...``) and the tests use. ``up`` converges: it
creates what is missing, starts what is stopped, re-attaches disks and re-applies faults,
and changes nothing when everything is already as asked. ``down`` removes exactly what
carries the lab's label or is recorded in its state, and nothing else.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import docker
from docker.models.containers import Container

from toolkit.errors import ConfigError, LabError
from toolkit.inventory import load_inventory
from toolkit.inventory.targets import lock_inventory
from toolkit.lab import apt_cache, inventory, kmods, network, nodes, paths, runfile, server, ssh
from toolkit.lab import devices as lab_devices
from toolkit.lab import disks as lab_disks
from toolkit.lab import image as lab_image
from toolkit.lab import slurm as lab_slurm
from toolkit.lab import state as lab_state
from toolkit.lab.faults import KERNEL_LOG_FAULTS
from toolkit.lab.gpu_models import GPU_MODELS
from toolkit.lab.hardware import NodeHardware, aer_files, rdma_files
from toolkit.lab.repo import build_repository
from toolkit.lab.spec import (
    SLOW_DATA_READ_BPS,
    SLOW_DATA_READ_IOPS,
    LabSpec,
    check_fault,
    node_name,
)
from toolkit.lab.state import DiskState, LabState, NodeState, ServerState
from toolkit.lab.train_base import ensure_lab_base
from toolkit.progress import Progress
from toolkit.stack.lock import ARCH_VARIABLE, OS_VARIABLE

DEFAULT_NAME = "gpunode"
# Where the `keyring` fault puts NVIDIA's own sources (see _nvidia_sources_files).
CUDA_KEYRING_LIST = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"
CONTAINER_TOOLKIT_LIST = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
# The fault whose runc wrapper strips the RDMA devices from the containers a node starts.
NO_RDMA_PASSTHROUGH = "no-rdma-passthrough"
# The fault that leaves a .run-installed driver's files on a node (toolkit/lab/runfile.py).
RUNFILE_FAULT = "runfile-driver"


def _took(started: float) -> str:
    """Seconds since ``started`` (time.monotonic()), as ``12.3 s``."""
    return f"{time.monotonic() - started:.1f} s"


def _quiet(_message: str) -> None:
    return None


def default_inventory_dir(name: str, cwd: Path | None = None) -> Path:
    """``inventories/lab`` for the default lab, ``inventories/lab-<name>`` for others."""
    base = (cwd or Path.cwd()) / "inventories"
    return base / "lab" if name == DEFAULT_NAME else base / f"lab-{name}"


def check_ca_bundle(path: Path) -> Path:
    """A readable PEM bundle, or a ConfigError naming the option and the rule."""
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        raise ConfigError(f"--ca-bundle {path}: cannot read it ({err.strerror})") from err
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"--ca-bundle {path}: not a PEM file (no BEGIN CERTIFICATE line)")
    return path.resolve()


# --- up ------------------------------------------------------------------------------------


def up(
    spec: LabSpec,
    *,
    inventory_dir: Path | None = None,
    progress: Progress | None = None,
    client: docker.DockerClient | None = None,
) -> LabState:
    """Bring the lab to ``spec``: image, repository, network, server, nodes, inventory.

    Args:
        spec: What the lab is made of.
        inventory_dir: Where to write the inventory (default: see ``default_inventory_dir``).
        progress: Called with a line for people at each step.
        client: A Docker client (one is made when None).

    Returns:
        The lab's recorded state.

    Raises:
        LabError: Docker, the image build, a node or the server failed; or the lab exists
            with a different shape.
        ConfigError: A bad option (CA bundle, GPU model, fault).
    """
    say = progress or _quiet
    # A bad option is refused before Docker is asked anything (a machine without it, a user
    # who may not use it, still gets the option and the rule).
    ca_bundle = check_ca_bundle(spec.ca_bundle) if spec.ca_bundle else None
    client = client or lab_image.docker_client()
    home = paths.lab_dir(spec.name)
    old = lab_state.load(spec.name)
    if old is None and nodes.labelled_containers(client, spec.name):
        raise LabError(
            f"containers of lab {spec.name} exist but its state ({home}) is gone; "
            f"run `gpunode lab down --name {spec.name}` first"
        )
    if old is not None and old.spec.shape() != spec.shape():
        changed = [
            f"{key} {old.spec.shape()[key]} -> {value}"
            for key, value in spec.shape().items()
            if old.spec.shape()[key] != value
        ]
        raise LabError(
            f"lab {spec.name} exists with another shape ({'; '.join(changed)}); run "
            f"`gpunode lab down --name {spec.name}` first, or keep its options"
        )
    # Hardware files are computed first: a bad model or fault fails before anything exists.
    hardware = {i: _hardware(spec, i) for i in range(1, spec.nodes + 1)}
    gap = GPU_MODELS[spec.gpu_model].lab_gap
    if gap:  # what the lab cannot be for this model, said before anything is built
        say(f"{spec.gpu_model}: not emulated: {gap}")

    # Each cold-start phase says what it cost: on a fresh machine these are most of `lab up`.
    say("node image: checking")
    started = time.monotonic()
    built = lab_image.ensure_image(client, say)
    say(f"node image: {built.tag} ({'built' if built.built else 'cached'}, {_took(started)})")
    say("package repository: building or reusing the signed stand-in repository")
    started = time.monotonic()
    repo = build_repository(paths.cache_dir() / "repo")
    say(f"package repository: ready ({_took(started)})")
    started = time.monotonic()
    wheels = server.ensure_wheels(paths.cache_dir() / "wheels")
    say(f"wheels: ready ({_took(started)})")
    say("training image base: checking")
    started = time.monotonic()
    image_base = ensure_lab_base(repo, client, say)
    say(
        f"training image base: {image_base.tag} "
        f"({'built' if image_base.built else 'cached'}, {_took(started)})"
    )

    home.mkdir(parents=True, exist_ok=True)
    key = ssh.client_key(home, spec.name)
    net, subnet, gateway = network.ensure_network(client, spec.name)
    server_ip = network.host_address(subnet, network.SERVER_HOST)
    state = old or LabState(
        name=spec.name,
        spec=spec,
        image=built.tag,
        network=net,
        subnet=subnet,
        gateway=gateway,
        server=ServerState(name=server.server_name(spec.name), ip=server_ip),
    )
    state.spec = spec
    lab_state.save(state)
    server.ensure_server(
        client,
        lab_name=spec.name,
        image=built.tag,
        network=net,
        ip=server_ip,
        repo=repo,
        wheels=wheels,
    )
    apt_conf = apt_cache.serve(client, built.tag, net, subnet)

    by_index = {node.index: node for node in state.nodes}
    booting: list[tuple[Container, NodeState, bool]] = []
    for index in range(1, spec.nodes + 1):
        node = by_index.get(index) or NodeState(
            index=index, name=node_name(spec.name, index), ip=network.node_address(subnet, index)
        )
        if index not in by_index:
            state.nodes.append(node)
        _ensure_disks(spec, home, node)
        lab_state.save(state)
        container = nodes.get_container(client, node.name)
        if container is None:
            say(f"{node.name}: creating ({node.ip})")
            files = {**_node_files(spec, node, home, hardware[index], ca_bundle), **apt_conf}
            container = nodes.create_node(
                client,
                lab_name=spec.name,
                name=node.name,
                index=index,
                image=built.tag,
                network=net,
                ip=node.ip,
                files=files,
            )
            node.faults = list(spec.node_faults(index))
            node.boots = 0  # a new container: its hardware file counts from here
            container.start()
            booting.append((container, node, True))
        else:
            if container.status != "running":
                say(f"{node.name}: starting")
                container.start()
            nodes.put_files(container, apt_conf)
            booting.append((container, node, False))
    state.nodes.sort(key=lambda n: n.index)
    lab_state.save(state)

    say(f"waiting for {len(booting)} node(s) to boot")
    with ThreadPoolExecutor(max_workers=max(1, len(booting))) as pool:
        # A fresh node must boot without failed units; one that roles changed may have some.
        futures = [pool.submit(nodes.wait_ready, c, n.ip, 180, fresh) for c, n, fresh in booting]
        for future in futures:
            future.result()

    for container, node, fresh in booting:
        lab_devices.make(container, hardware[node.index])
        kmods.make(container)
        if fresh and ca_bundle:
            nodes.exec_in(container, ["update-ca-certificates", "--fresh"])
        if fresh and "slow-data" in spec.node_faults(node.index):
            nodes.exec_in(container, [nodes.DATA_THROTTLE_SCRIPT, "node"])
        if fresh and RUNFILE_FAULT in spec.node_faults(node.index):
            runfile.install(container)
        if not fresh:
            # Disks may have been re-attached under new numbers (after a host reboot).
            nodes.put_files(container, _disk_files(node))
            nodes.exec_in(container, ["/usr/local/sbin/gpunode-lab-udev"])
            if tuple(node.faults) != spec.node_faults(node.index):
                _apply_faults(container, spec, node, hardware[node.index])
    lab_state.save(state)
    if spec.slurm:
        say("slurm: munge, MariaDB, slurmdbd and slurmctld on node 1, slurmd on every node")
        started = time.monotonic()
        lab_slurm.start(spec.name, [(c, n) for c, n, _fresh in booting], spec.gpus)
        say(f"slurm: every node registered ({_took(started)})")

    known_hosts = _write_known_hosts(home, state)
    target = inventory_dir or state.inventory_dir or default_inventory_dir(spec.name)
    repo_vars = {
        **server.repository_vars(
            server_ip,
            repo,
            wheels,
            image_base.id,
            nccl=str(inventory.lab_stack(spec)["nccl"]).split("-")[0],
        ),
        # The lab's key is pinned like NVIDIA's, and its nodes are Debian 12.
        "gpunode_nvidia_repo_key_fingerprint": repo.fingerprint,
        "gpunode_container_toolkit_repo_key_fingerprint": repo.fingerprint,
        OS_VARIABLE: ["debian12"],
        # ... and amd64 containers, whatever CPU their GPU comes with (a GB200 tray's is Grace).
        ARCH_VARIABLE: "x86_64",
    }
    for node in state.nodes:
        if "keyring" in spec.node_faults(node.index):
            container = nodes.get_container(client, node.name)
            if container is not None:
                files = _nvidia_sources_files(
                    str(repo_vars["gpunode_nvidia_repo_url"]),
                    str(repo_vars["gpunode_container_toolkit_repo_url"]),
                    repo.public_key,
                )
                nodes.put_files(container, files)
    inventory_files = inventory.render(
        spec=spec,
        nodes=state.nodes,
        key_file=key,
        known_hosts=known_hosts,
        repo_vars=repo_vars,
        ca_bundle=ca_bundle,
        md_available=Path("/proc/mdstat").exists(),
        slurm_vars=lab_slurm.inventory_vars(state.nodes) if spec.slurm else None,
    )
    if state.inventory_dir and state.inventory_dir.resolve() != target.resolve():
        inventory.remove(state.inventory_dir, spec.name)
    state.inventory_dir = inventory.write(target, spec.name, inventory_files)
    lab_state.save(state)
    network.wait_for_banner(
        server_ip,
        server.PORT,
        b"HTTP/",
        "the lab package server",
        time.monotonic() + 30,
        send=b"HEAD / HTTP/1.0\r\n\r\n",
    )
    # The lock is resolved against the lab's repository, so `provision` works straight away.
    for outcome in lock_inventory(state.inventory_dir):
        say(f"lab {spec.name}: stack lock of group {outcome.group} in {outcome.path}")
    say(f"lab {spec.name}: {len(state.nodes)} node(s) up; inventory {state.inventory_dir}")
    return state


def _hardware(spec: LabSpec, index: int, boots: int = 0) -> NodeHardware:
    return NodeHardware.for_node(
        spec.gpu_model,
        spec.gpus,
        spec.has_nvswitch,
        spec.node_faults(index),
        seed=spec.name,
        index=index,
        boots=boots,
    )


def _ensure_disks(spec: LabSpec, home: Path, node: NodeState) -> None:
    for disk_index in range(spec.disks):
        if not any(d.index == disk_index for d in node.disks):
            node.disks.append(
                lab_disks.new_disk(
                    spec.name,
                    home,
                    node.index,
                    disk_index,
                    spec.disk_size,
                    lab_disks.free_kernel_name(node.disks),
                )
            )
    for disk in node.disks:
        lab_disks.ensure_attached(disk)


def _disk_files(node: NodeState) -> dict[str, nodes.NodeFile]:
    return {
        nodes.DISKS_FILE: nodes.NodeFile(lab_disks.render_disks_file(node.disks).encode()),
        nodes.DISKS_BACKING_FILE: nodes.NodeFile(
            lab_disks.render_backing_file(node.disks).encode()
        ),
    }


def _fault_files(spec: LabSpec, node: NodeState, hw: NodeHardware) -> dict[str, nodes.NodeFile]:
    faults = spec.node_faults(node.index)
    events = "".join(line + "\n" for line in hw.kernel_messages())
    rate = spec.slow_net_rate + "\n" if "slow-net" in faults else ""
    throttle = (
        f"read_bps_device {SLOW_DATA_READ_BPS}\nread_iops_device {SLOW_DATA_READ_IOPS}\n"
        if "slow-data" in faults
        else ""
    )
    dmi = {
        "sys_vendor": hw.system.vendor,
        "product_name": hw.system.product_name,
        "product_serial": hw.system.product_serial,
        "board_serial": hw.system.board_serial,
    }
    return {
        # The node's runc: it gives a GPU container the node's NVIDIA device files, and takes
        # /dev/infiniband away under `no-rdma-passthrough` (node_files/gpunode_lab_runc.py).
        nodes.RUNC_WRAPPER: nodes.NodeFile(
            resources.files("toolkit.lab")
            .joinpath("node_files")
            .joinpath("gpunode_lab_runc.py")
            .read_bytes(),
            0o755,
        ),
        paths.HARDWARE_FILE: nodes.NodeFile(hw.to_json().encode()),
        # The `no-rdma-passthrough` fault's switch, read by the node's runc for each container
        # (the NICs' /dev/infiniband devices are in the device list, lab_devices.node_files).
        nodes.RDMA_PASSTHROUGH_FILE: nodes.NodeFile(
            b"strip\n" if NO_RDMA_PASSTHROUGH in faults else b""
        ),
        nodes.KERNEL_EVENTS_FILE: nodes.NodeFile(events.encode()),
        nodes.EGRESS_RATE_FILE: nodes.NodeFile(rate.encode()),
        nodes.DATA_THROTTLE_FILE: nodes.NodeFile(throttle.encode()),
        nodes.DATA_THROTTLE_SCRIPT: nodes.NodeFile(
            resources.files("toolkit.lab")
            .joinpath("node_files")
            .joinpath("gpunode-lab-data-throttle.sh")
            .read_bytes(),
            0o755,
        ),
        # Serials readable by root only, as the kernel makes them (dmi-id.c: mode 0400).
        **{
            f"{paths.DMI_DIR}/{name}": nodes.NodeFile(
                f"{value}\n".encode(), 0o400 if name.endswith("serial") else 0o444
            )
            for name, value in dmi.items()
        },
        # The GPUs' AER statistics (`gpunode_pci_dir`): a node shares the host's sysfs.
        **{
            f"{paths.PCI_DIR}/{name}": nodes.NodeFile(text.encode(), 0o444)
            for name, text in aer_files(hw).items()
        },
        # The compute NICs' RDMA ports (`gpunode_rdma_dir`), /sys/class/infiniband's shape.
        **{
            f"{paths.RDMA_DIR}/{name}": nodes.NodeFile(text.encode(), 0o444)
            for name, text in rdma_files(hw).items()
        },
        **lab_devices.node_files(hw),
        **kmods.node_files(),
    }


def _node_files(
    spec: LabSpec, node: NodeState, home: Path, hw: NodeHardware, ca_bundle: Path | None
) -> dict[str, nodes.NodeFile]:
    host_key = ssh.host_key(home, node.name)
    client_pub = (home / f"{ssh.CLIENT_KEY}.pub").read_bytes()
    files = {
        "/etc/ssh/ssh_host_ed25519_key": nodes.NodeFile(host_key.read_bytes(), 0o600),
        "/etc/ssh/ssh_host_ed25519_key.pub": nodes.NodeFile(
            host_key.with_suffix(".pub").read_bytes()
        ),
        "/root/.ssh/authorized_keys": nodes.NodeFile(client_pub, 0o600),
        # Root-owned and world-readable: sshd reads it as the user and accepts a file owned
        # by root or the user that nobody else may write (StrictModes).
        f"/home/{lab_image.LOGIN_USER}/.ssh/authorized_keys": nodes.NodeFile(client_pub, 0o644),
        "/etc/machine-id": nodes.NodeFile(nodes.new_machine_id(), 0o444),
        **_disk_files(node),
        **_fault_files(spec, node, hw),
        # DCGM's dcgmi, as a node that came with DCGM installed has it (the stand-in reads the
        # node's hardware file; toolkit/lab/standins/dcgmi.py).
        paths.DCGMI: nodes.NodeFile(
            resources.files("toolkit.lab").joinpath("standins").joinpath("dcgmi.py").read_bytes(),
            0o755,
        ),
    }
    if ca_bundle:
        files[nodes.CA_FILE] = nodes.NodeFile(ca_bundle.read_bytes())
    return files


def _apply_faults(container: Container, spec: LabSpec, node: NodeState, hw: NodeHardware) -> None:
    """Write a running node's fault files and apply them now, as they would show up."""
    before = set(node.faults)
    nodes.put_files(container, _fault_files(spec, node, hw))
    nodes.exec_in(container, ["/usr/local/sbin/gpunode-lab-boot", "net"])
    nodes.exec_in(container, [nodes.DATA_THROTTLE_SCRIPT, "node"])
    added = set(KERNEL_LOG_FAULTS) & (set(spec.node_faults(node.index)) - before)
    # The event happens now (an `old-xid` is old for an acceptance that comes later); earlier
    # events stay in the log until the node reboots, exactly like a real kernel log.
    for line in hw.kernel_messages(added):
        nodes.exec_in(container, ["logger", "-t", "kernel", "-p", "kern.err", "--", line])
    now = set(spec.node_faults(node.index))
    if RUNFILE_FAULT in now - before:
        runfile.install(container)
    elif RUNFILE_FAULT in before - now:
        runfile.uninstall(container)
    node.faults = list(spec.node_faults(node.index))


def _nvidia_sources_files(
    cuda_url: str, toolkit_url: str, keyring: Path
) -> dict[str, nodes.NodeFile]:
    """The ``keyring`` fault: NVIDIA's repositories already configured on the node, in the
    shapes NVIDIA publishes (only the host differs: the lab's repository).

    - CUDA, the way ``cuda-keyring`` does it. Source: the cuda-keyring_1.1-1_all.deb of
      NVIDIA's repositories installs /usr/share/keyrings/cuda-archive-keyring.gpg and
      /etc/apt/sources.list.d/cuda-<distro>-<arch>.list with
      ``deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] <repository> /``; cloud
      and OEM images ship it.
    - The container toolkit, the way NVIDIA's install guide does it: its published list
      (NVIDIA/libnvidia-container ``stable/deb/nvidia-container-toolkit.list``: a ``stable``
      line and a commented ``experimental`` line, both with ``$(ARCH)`` in the URI, which apt
      substitutes) piped through ``sed 's#deb https://#deb [signed-by=/usr/share/keyrings/
      nvidia-container-toolkit-keyring.gpg] https://#g'`` into
      /etc/apt/sources.list.d/nvidia-container-toolkit.list.

    A second source of the same repository with another signed-by makes every `apt update`
    fail ("Conflicting values set for option Signed-By", NVIDIA/cuda-repo-management#4).
    """
    cuda = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {cuda_url} /\n"
    stable = toolkit_url.rstrip("/")
    if not stable.endswith("/stable/deb/amd64"):
        raise LabError(
            f"the lab's toolkit repository {toolkit_url} is not NVIDIA's .../amd64 shape"
        )
    stable = stable.removesuffix("amd64") + "$(ARCH)"
    experimental = stable.replace("/stable/deb/", "/experimental/deb/")
    signed = "[signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg]"
    toolkit = f"deb {signed} {stable} /\n#deb {signed} {experimental} /\n"
    key = keyring.read_bytes()
    return {
        "/usr/share/keyrings/cuda-archive-keyring.gpg": nodes.NodeFile(key),
        CUDA_KEYRING_LIST: nodes.NodeFile(cuda.encode()),
        "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg": nodes.NodeFile(key),
        CONTAINER_TOOLKIT_LIST: nodes.NodeFile(toolkit.encode()),
    }


def _write_known_hosts(home: Path, state: LabState) -> Path:
    entries = []
    for node in state.nodes:
        public = ssh.host_key(home, node.name).with_suffix(".pub").read_text()
        entries.append(([node.ip, node.name], public))
    return ssh.write_known_hosts(home / ssh.KNOWN_HOSTS, entries)


# --- using a running lab ------------------------------------------------------------------


def require(name: str) -> LabState:
    """The state of an existing lab, or a clear error."""
    state = lab_state.load(name)
    if state is None:
        raise LabError(f"there is no lab {name!r}; start one with `gpunode lab up --name {name}`")
    return state


def find_node(state: LabState, ref: str | int) -> NodeState:
    """A node by index (``2``), full name (``gpunode-node-2``) or short name (``node-2``)."""
    text = str(ref)
    for node in state.nodes:
        if text in (str(node.index), node.name, f"node-{node.index}"):
            return node
    known = ", ".join(node.name for node in state.nodes)
    raise ConfigError(f"lab {state.name} has no node {text!r} (nodes: {known})")


def node_container(
    name: str, ref: str | int, client: docker.DockerClient | None = None
) -> Container:
    """The running container of a node (for tests and `lab ssh` fallbacks)."""
    state = require(name)
    node = find_node(state, ref)
    container = nodes.get_container(client or lab_image.docker_client(), node.name)
    if container is None:
        raise LabError(f"node {node.name} has no container; run `gpunode lab up` again")
    return container


def set_faults(name: str, ref: str | int, faults: list[str]) -> NodeState:
    """Replace a running node's faults (an empty list clears them) and apply them now.

    Raises:
        ConfigError: Unknown fault or node.
        LabError: The node is not running.
    """
    for fault in faults:
        check_fault(fault)
    state = require(name)
    node = find_node(state, ref)
    others = tuple(f for f in state.spec.faults if f[0] != node.index)
    spec = state.spec.model_copy(
        update={"faults": tuple(sorted(set(others) | {(node.index, f) for f in faults}))}
    )
    spec = LabSpec.model_validate(spec.model_dump())
    container = node_container(name, node.index)
    _apply_faults(container, spec, node, _hardware(spec, node.index, node.boots))
    if "keyring" in faults and state.inventory_dir is not None:
        group_vars = load_inventory(state.inventory_dir).groups["all"].vars
        keyring = build_repository(paths.cache_dir() / "repo").public_key
        files = _nvidia_sources_files(
            str(group_vars["gpunode_nvidia_repo_url"]),
            str(group_vars["gpunode_container_toolkit_repo_url"]),
            keyring,
        )
        nodes.put_files(container, files)
    state.spec = spec
    lab_state.save(state)
    return node


def restart_node(name: str, ref: str | int) -> NodeState:
    """Restart a node like a reboot: /run and /dev start empty, boot units run again."""
    state = require(name)
    node = find_node(state, ref)
    container = node_container(name, node.index)
    node.boots += 1
    lab_state.save(state)
    if "remap-rising" in node.faults:
        # The GPU remapped one more row before this boot: its hardware file says so.
        hw = _hardware(state.spec, node.index, node.boots)
        nodes.put_files(container, {paths.HARDWARE_FILE: nodes.NodeFile(hw.to_json().encode())})
    nodes.restart(container, node.ip)
    if "slow-data" in node.faults:
        # A restarted container gets fresh cgroups: the throttle is written again.
        nodes.exec_in(container, [nodes.DATA_THROTTLE_SCRIPT, "node"])
    return node


def add_disk(name: str, ref: str | int, size: int | None = None) -> DiskState:
    """Hot-add a data disk to a running node (it appears like a newly inserted NVMe)."""
    state = require(name)
    node = find_node(state, ref)
    index = max((d.index for d in node.disks), default=-1) + 1
    disk = lab_disks.new_disk(
        name,
        paths.lab_dir(name),
        node.index,
        index,
        size or state.spec.disk_size,
        lab_disks.free_kernel_name(node.disks),
    )
    lab_disks.ensure_attached(disk)
    node.disks.append(disk)
    lab_state.save(state)
    _refresh_devices(name, node)
    return disk


def swap_kernel_names(name: str, ref: str | int, serial_a: str, serial_b: str) -> NodeState:
    """Swap the kernel names (``nvme0n1`` <-> ``nvme1n1``) of two disks of a node.

    By-id links follow the serials, as on a real server whose NVMe names moved between
    boots. The device nodes change at once (as after a reboot); a mounted filesystem stays
    mounted.

    Raises:
        ConfigError: A serial is not a disk of this node.
    """
    state = require(name)
    node = find_node(state, ref)
    by_serial = {d.serial: d for d in node.disks}
    for serial in (serial_a, serial_b):
        if serial not in by_serial:
            raise ConfigError(
                f"node {node.name} has no disk with serial {serial!r} "
                f"(serials: {', '.join(sorted(by_serial))})"
            )
    a, b = by_serial[serial_a], by_serial[serial_b]
    a.kernel_name, b.kernel_name = b.kernel_name, a.kernel_name
    lab_state.save(state)
    _refresh_devices(name, node)
    return node


def _refresh_devices(name: str, node: NodeState) -> None:
    container = node_container(name, node.index)
    nodes.put_files(container, _disk_files(node))
    nodes.exec_in(container, ["/usr/local/sbin/gpunode-lab-udev"])


def ssh_argv(name: str, ref: str | int, command: list[str] | None = None) -> list[str]:
    """The ``ssh`` command line that logs into a node as Ansible would (strict host keys)."""
    state = require(name)
    node = find_node(state, ref)
    home = paths.lab_dir(name)
    options = ssh.ssh_options(home / ssh.KNOWN_HOSTS, batch=bool(command))
    argv = ["ssh", "-i", str(home / ssh.CLIENT_KEY), *options, f"root@{node.ip}"]
    return argv + list(command or [])


def ssh_run(
    name: str, ref: str | int, command: str, *, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run a shell command on a node over SSH (strict host keys) and capture its output.

    Raises:
        LabError: The command failed (``check``) or did not finish within ``timeout``.
    """
    argv = ssh_argv(name, ref, [command])
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as err:
        raise LabError(f"`{command}` on lab node {ref} ran longer than {timeout:.0f}s") from err
    if check and result.returncode != 0:
        raise LabError(
            f"`{command}` on lab node {ref} exited {result.returncode}: "
            f"{(result.stderr or result.stdout).strip()[-2000:]}"
        )
    return result


def status(name: str, client: docker.DockerClient | None = None) -> dict[str, Any]:
    """What the lab is made of and how each part is doing (a JSON-able document)."""
    state = require(name)
    client = client or lab_image.docker_client()
    srv = nodes.get_container(client, state.server.name)
    node_rows = []
    for node in state.nodes:
        container = nodes.get_container(client, node.name)
        node_rows.append(
            {
                "name": node.name,
                "index": node.index,
                "ip": node.ip,
                "container": container.status if container else "missing",
                "ssh": network.port_open(node.ip, 22),
                "faults": list(node.faults),
                "disks": [
                    {
                        "serial": d.serial,
                        "by_id": f"/dev/disk/by-id/{d.by_id}",
                        "kernel_name": d.kernel_name,
                        "loop": d.loop if d.loop and lab_disks.loops_backing(d.image) else None,
                        "size": d.size,
                    }
                    for d in node.disks
                ],
            }
        )
    return {
        "name": state.name,
        "image": state.image,
        "network": {"name": state.network, "subnet": state.subnet, "gateway": state.gateway},
        "server": {
            "name": state.server.name,
            "url": state.base_url + "/",
            "container": srv.status if srv else "missing",
        },
        "apt_cache": apt_cache.describe(client, state.subnet),
        "inventory": str(state.inventory_dir) if state.inventory_dir else None,
        "spec": state.spec.model_dump(mode="json"),
        "nodes": node_rows,
    }


def list_labs() -> list[str]:
    """Names of the labs with state on this machine."""
    root = paths.labs_root()
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if not p.name.startswith("_") and (p / "state.json").exists()
    )


# --- down ---------------------------------------------------------------------------------


def down(name: str, client: docker.DockerClient | None = None) -> dict[str, list[str]]:
    """Remove everything lab ``name`` made: containers, loop devices, networks, files.

    Works from the labels alone when the state is lost. Shared caches (the node image, the
    repository and wheel builds under ``<lab home>/_cache``) are kept for the next lab.

    Returns:
        What was removed, by kind.

    Raises:
        LabError: Something could not be removed (the message says what is left).
    """
    client = client or lab_image.docker_client()
    home = paths.lab_dir(name)
    try:
        state = lab_state.load(name)
    except LabError:
        state = None
    removed: dict[str, list[str]] = {
        "containers": [],
        "loop_devices": [],
        "networks": [],
        "files": [],
    }
    containers = nodes.labelled_containers(client, name)
    # A clean shutdown first: a Docker engine inside a node (cgroupns=host) puts its
    # containers' cgroups beside the node's, and only its own shutdown removes them.
    # Killing its containers first keeps that shutdown quick.
    running = [
        c
        for c in containers
        if c.status == "running" and c.labels.get(f"{paths.LABEL}.role") == "node"
    ]
    if running:
        with ThreadPoolExecutor(max_workers=len(running)) as pool:
            list(pool.map(_shut_down, running))
    for container in containers:
        nodes.remove_container(container)
        removed["containers"].append(str(container.name))

    images = {d.image.resolve() for n in (state.nodes if state else []) for d in n.disks}
    images |= {p.resolve() for p in (home / "disks").glob("*.img")}
    all_loops = lab_disks.attached_loops()
    own = {
        loop for loop, back in all_loops.items() if Path(back.removesuffix(" (deleted)")) in images
    }
    for image_path in sorted(images):
        removed["loop_devices"] += lab_disks.detach(image_path, own)

    apt_cache.detach(client, state.network if state else network.network_name(name))
    removed["networks"] = network.remove_networks(client, name)
    if state and state.inventory_dir and inventory.remove(state.inventory_dir, name):
        removed["files"].append(str(state.inventory_dir))
    if home.exists():
        shutil.rmtree(home)
        removed["files"].append(str(home))

    left = [str(c.name) for c in nodes.labelled_containers(client, name)]
    left += [loop for loop in lab_disks.attached_loops() if loop in own]
    if left:
        raise LabError(f"lab {name} down left behind: {', '.join(left)}")
    return removed


def _shut_down(container: Container) -> None:
    inner = "command -v docker >/dev/null || exit 0; docker ps -q | xargs -r docker kill"
    nodes.exec_in(container, ["sh", "-c", inner], check=False)
    nodes.stop_container(container, timeout=20)
