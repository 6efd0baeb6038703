"""What a node is given before its acceptance runner runs.

The working folder, the runner's ``spec.json`` (the checks and the floors' sizes), the
``docker run`` options of ranks in the training image, a Python with torch for
``--engine host`` (from a hashed lock only), and the address the node's peers reach it at.
The flow that stages nodes and runs them is ``toolkit/steps/accept``.
"""

from __future__ import annotations

import shlex
from typing import Any
from urllib.parse import urlsplit

from toolkit.acceptance import dcgm, payload
from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.node_runner.node import DEFAULT_CONTAINER_OPTIONS
from toolkit.acceptance.thresholds import gpu_step, sweep_sizes
from toolkit.disks.spec import DataDisksSpec
from toolkit.errors import AcceptanceError, ConfigError
from toolkit.inventory import Host
from toolkit.node import nodestate
from toolkit.profile.floors import AcceptanceSpec, parse_size
from toolkit.progress import Progress
from toolkit.remote import Node
from toolkit.stack.resolve import check_url

REMOTE_DIR = "/opt/gpunode/accept"
VENV = "/opt/gpunode/venv"


def container_options(host: Host) -> list[str]:
    """``docker run`` options for the ranks: ``gpunode_accept_container_options`` or the
    documented defaults (``node_runner.node.DEFAULT_CONTAINER_OPTIONS``).

    Raises:
        ConfigError: The variable is not a list of strings.
    """
    value = host.vars.get("gpunode_accept_container_options")
    if value is None:
        return list(DEFAULT_CONTAINER_OPTIONS)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(
            f"host {host.name}: gpunode_accept_container_options must be a list of docker "
            "run options (strings)"
        )
    return list(value)


def container_check(info: dict[str, Any] | None, image: str) -> Check:
    """Whether the node's container runtime started the image with the GPUs and /data."""
    info = info or {}
    if info.get("ok"):
        return Check("container.start", True, f"ranks ran in {image[:19]}", measured=image)
    return Check(
        "container.start",
        False,
        f"the container runtime could not run {image[:19]}: {info.get('error') or 'no result'}",
        measured=image,
    )


def rendezvous_address(host: Host, own: str | None) -> str:
    """The address other nodes reach this one at (the master of a multi-node set).

    ``gpunode_accept_address`` wins; else the inventory's address, unless it is a loopback
    (an SSH port forward), in which case the node's first own address (``own``, the facts'
    ``address``) is the best guess.
    """
    explicit = host.vars.get("gpunode_accept_address")
    if explicit:
        return str(explicit)
    if host.address not in ("127.0.0.1", "::1", "localhost"):
        return host.address
    return own or host.address


def ensure_torch(node: Node, host: Host, progress: Progress) -> str:
    """The Python to run the runner with: one with torch when it can be had.

    torch is installed into a venv under /opt/gpunode when neither the venv nor the system
    Python has it, and only from a hashed lock (``gpunode_acceptance_requirements``: lines
    ``name==version --hash=sha256:...``, installed with ``--require-hashes``) fetched from
    ``gpunode_pip_find_links`` / ``gpunode_pip_index_url``. Without a lock or a source nothing
    is installed: the runner runs without torch and the all-reduce check says so.
    """
    venv_py = f"{VENV}/bin/python"
    for python in (venv_py, "python3"):
        if node.run(f"{python} -c 'import torch'", timeout=120).ok:
            return python
    find_links = host.vars.get("gpunode_pip_find_links")
    index_url = host.vars.get("gpunode_pip_index_url")
    lock = host.vars.get("gpunode_acceptance_requirements")
    if not lock or not (find_links or index_url):
        progress(
            f"{host.name}: torch missing; installing it needs gpunode_acceptance_requirements"
            " (a hashed lock) and gpunode_pip_find_links or gpunode_pip_index_url"
        )
        return "python3"
    for key, url in (("gpunode_pip_find_links", find_links), ("gpunode_pip_index_url", index_url)):
        if url:
            check_url(str(url), f"host {host.name}: {key}")
    if isinstance(lock, str) or not all("--hash=sha256:" in str(line) for line in lock):
        raise AcceptanceError(
            f"{host.name}: gpunode_acceptance_requirements must be a list of "
            "'name==version --hash=sha256:<digest>' lines (pip --require-hashes)"
        )
    progress(f"{host.name}: installing torch into {VENV} from its hashed lock")
    node.run(f"test -x {venv_py} || python3 -m venv --without-pip {VENV}", check=True, timeout=300)
    node.put_text(payload.pip_zip(), f"{REMOTE_DIR}/pip.zip")
    node.put_text("".join(f"{line}\n" for line in lock), f"{REMOTE_DIR}/requirements.txt")
    source = []
    if index_url:
        source += ["--index-url", shlex.quote(str(index_url))]
    else:
        source += ["--no-index"]
    if find_links:
        source += ["--find-links", shlex.quote(str(find_links))]
    for url in (index_url, find_links):
        # pip ignores plain-http sources unless their host is trusted by name; the hashes,
        # which came over SSH, are what vouches for the files.
        parsed = urlsplit(str(url or ""))
        if parsed.scheme == "http" and parsed.hostname:
            source += ["--trusted-host", shlex.quote(parsed.hostname)]
    node.run(
        f"{venv_py} {REMOTE_DIR}/pip.zip/pip install --no-input --disable-pip-version-check "
        f"--no-cache-dir --require-hashes --only-binary=:all: {' '.join(source)} "
        f"-r {REMOTE_DIR}/requirements.txt",
        check=True,
        timeout=1800,
    )
    return venv_py


def data_path(spec: AcceptanceSpec, disks: DataDisksSpec | None) -> str:
    """The data disks' own mount point when the profile has them, else the floor's path."""
    return disks.mount_point if disks else spec.data_path


def runner_spec(
    host: Host,
    spec: AcceptanceSpec,
    disks: DataDisksSpec | None,
    expect: NodeExpectation,
    image: str | None,
) -> dict[str, Any]:
    """The runner's ``spec.json``: what to check on the node and the floors' sizes."""
    return {
        "packages": sorted(expect.packages),
        "kernel_log_command": host.vars.get("gpunode_kernel_log_command"),
        "dcgm_diag_level": spec.dcgm_diag.level if spec.dcgm_diag else None,
        "dcgm_timeout_s": dcgm.LEVEL_TIMEOUT_S[spec.dcgm_diag.level] if spec.dcgm_diag else None,
        "sizes": sweep_sizes(spec),
        "sweep_factor": spec.sweep_factor,
        "iters": spec.iters,
        "warmup_iters": spec.warmup_iters,
        "engine": spec.engine,
        "cpu_ranks_per_node": spec.cpu_ranks_per_node,
        "timeout_s": 900,
        "data_path": data_path(spec, disks),
        "data_size_bytes": parse_size(spec.data_test_size),
        # The training-shaped checks (node_runner.storage and node_runner.train).
        "storage": {
            "files": spec.storage_files,
            "file_bytes": parse_size(spec.storage_file_size),
            "reads": spec.storage_reads,
            "workers": spec.storage_read_workers,
            "min_read_bytes": parse_size(spec.storage_min_read),
            "max_read_bytes": parse_size(spec.storage_max_read),
            "checkpoint_bytes": parse_size(spec.checkpoint_size),
        },
        "train": {
            "steps": spec.train_steps,
            "batch": spec.train_batch,
            "sample_bytes": parse_size(spec.train_sample_size),
            "loader_workers": spec.train_loader_workers,
            "hidden": spec.train_hidden,
            "compute_s": spec.train_compute_s,
            "gpu_step": step.as_spec() if (step := gpu_step(spec)) else None,
        },
        "workdir": REMOTE_DIR,
        "state_file": nodestate.PATH,
        # Where the machine's DMI strings are read (the runner's default: /sys/class/dmi/id).
        "dmi_dir": host.vars.get("gpunode_dmi_dir"),
        # Where the RDMA devices' ports are read (the runner's default: /sys/class/infiniband).
        "rdma_dir": host.vars.get("gpunode_rdma_dir"),
        "container": ({"image": image, "options": container_options(host)} if image else None),
    }
