"""The lab's package server: the signed apt repository and Python wheels, over HTTP.

It is a container of the node image on the lab network running Python's ``http.server``
(no extra image, no host process to leave behind). It serves, read-only:

    http://<server>/compute/cuda/repos/debian12/x86_64/       the CUDA stand-in repository
    http://<server>/libnvidia-container/stable/deb/amd64/     the container toolkit one
    http://<server>/wheels/                                   torch (CPU) and its dependencies

The repository and the wheels live in the cache shared by all labs. The server mounts
the repository's parent directory and links its top-level entries at start, so that a
rebuilt repository (built beside the old one, then renamed into place) is served without
restarting anything.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import docker
import docker.errors
from docker.models.containers import Container

from toolkit.errors import LabError
from toolkit.images.recipe import BASE_KIND_CUDA_RUNTIME
from toolkit.lab import nccl_wheel, nodes
from toolkit.lab.inventory import DEFAULT_STACK
from toolkit.lab.proc import run
from toolkit.lab.repo import RepoInfo
from toolkit.lab.train_base import PYTHON_PACKAGES

# The CPU build of torch the lab's acceptance all-reduce runs with (gloo backend); pip
# finds it among the host's local wheels (find-links) with its dependencies.
TORCH_REQUIREMENT = "torch==2.13.0+cpu"
WHEELS_STAMP = ".complete"
PORT = 80

SERVE_SCRIPT = f"""\
set -eu
mkdir -p /run/srv
for entry in /srv/repo/www/*; do
  ln -sfn "/srv/repo/www/${{entry##*/}}" "/run/srv/${{entry##*/}}"
done
ln -sfn /srv/wheels /run/srv/wheels
exec python3 -m http.server {PORT} --bind 0.0.0.0 --directory /run/srv
"""


def server_name(lab_name: str) -> str:
    """The server container's name."""
    return f"{lab_name}-repo"


def ensure_wheels(dest: Path, requirement: str = TORCH_REQUIREMENT) -> Path:
    """Download ``requirement`` and its dependencies into ``dest`` once.

    ``pip download`` runs with the control machine's pip configuration (its find-links
    and indexes) for the nodes' platform: Debian 12's CPython 3.11 on x86_64.

    Raises:
        LabError: pip could not find the wheels.
    """
    stamp = dest / WHEELS_STAMP
    if stamp.is_file() and stamp.read_text().strip() == requirement:
        nccl_wheel.ensure_wheels(dest)
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--python-version",
            "3.11",
            "--implementation",
            "cp",
            "--abi",
            "cp311",
            "--platform",
            "manylinux_2_28_x86_64",
            "--dest",
            str(dest),
            requirement,
        ],
        timeout=1800,
    )
    stamp.write_text(requirement + "\n")
    nccl_wheel.ensure_wheels(dest)
    return dest


def requirements_lock(wheels: Path, nccl: str | None = None) -> list[str]:
    """A pip lock of the served wheels: ``name==version --hash=sha256:...``, one a line.

    Nodes and training images install from it with ``--require-hashes``
    (gpunode_acceptance_requirements), so what they run is exactly what was downloaded here,
    whatever the HTTP path in between. Of the NCCL wheels (one per NCCL the lab repository
    carries) only the one at ``nccl`` (default: the lab's default stack's NCCL) is locked.
    """
    nccl = nccl or str(DEFAULT_STACK["nccl"]).split("-")[0]
    lock = []
    for wheel in sorted(wheels.glob("*.whl")):
        # PEP 427: {distribution}-{version}(-{build})?-{python}-{abi}-{platform}.whl
        distribution, version = wheel.name.split("-")[:2]
        if distribution.startswith("nvidia_nccl_cu") and version != nccl:
            continue
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lock.append(f"{distribution}=={version} --hash=sha256:{digest}")
    if not lock:
        raise LabError(f"no wheels in {wheels}: the lab cannot offer torch to its nodes")
    return lock


def ensure_server(
    client: docker.DockerClient,
    *,
    lab_name: str,
    image: str,
    network: str,
    ip: str,
    repo: RepoInfo,
    wheels: Path,
) -> Container:
    """Start the package server unless it runs with these mounts already.

    Raises:
        LabError: Docker refused, or the server does not answer.
    """
    name = server_name(lab_name)
    repo_root = repo.path.parent
    wanted = {str(repo_root): "/srv/repo", str(wheels): "/srv/wheels"}
    container = nodes.get_container(client, name)
    if container is not None:
        mounts = {m["Source"]: m["Destination"] for m in container.attrs.get("Mounts", [])}
        if mounts == wanted and container.image and image in container.image.tags:
            if container.status != "running":
                container.start()
            return container
        nodes.remove_container(container)
    try:
        created = client.api.create_container(
            image=image,
            name=name,
            hostname=name,
            command=["/bin/sh", "-c", SERVE_SCRIPT],
            labels=nodes.container_labels(lab_name, "repository"),
            host_config=client.api.create_host_config(
                binds={src: {"bind": dst, "mode": "ro"} for src, dst in wanted.items()},
                restart_policy={"Name": "unless-stopped"},
                tmpfs={"/run": "rw,nosuid,nodev,mode=755"},
                # A tiny init forwards SIGTERM: http.server as PID 1 would ignore it.
                init=True,
            ),
            networking_config=client.api.create_networking_config(
                {network: client.api.create_endpoint_config(ipv4_address=ip)}
            ),
        )
        container = client.containers.get(created["Id"])
        container.start()
    except docker.errors.APIError as err:
        raise LabError(f"cannot start the lab package server {name}: {err}") from err
    return container


def repository_vars(
    server_ip: str,
    repo: RepoInfo,
    wheels: Path,
    image_base: str | None = None,
    nccl: str | None = None,
) -> dict[str, object]:
    """The repository variables of the inventory (docs/architecture.md) for this server,
    and the training image's base (the lab's imported Debian 12 shaped like NVIDIA's CUDA
    runtime image, pinned by its ID); the wheels' lock carries the NCCL wheel at ``nccl``
    (the lab's stack's NCCL, ``2.26.2``; default: the default stack's)."""
    base = f"http://{server_ip}"
    image: dict[str, object] = (
        {
            "gpunode_image_base": image_base,
            "gpunode_image_base_kind": BASE_KIND_CUDA_RUNTIME,
            "gpunode_image_os": "debian12",
            "gpunode_image_python_packages": dict(PYTHON_PACKAGES),
        }
        if image_base
        else {}
    )
    # Lab nodes are unprivileged containers: Docker inside them cannot raise RLIMIT_MEMLOCK
    # or the stack limit, so the ranks' containers keep only the shared IPC namespace.
    image["gpunode_accept_container_options"] = ["--ipc=host"]
    return {
        **image,
        "gpunode_nvidia_repo_url": f"{base}/{repo.suite_path.strip('/')}/",
        "gpunode_nvidia_repo_key_url": f"{base}/{repo.armored_key_url_path}",
        "gpunode_container_toolkit_repo_url": (
            f"{base}/{repo.container_toolkit_suite_path.strip('/')}/"
        ),
        "gpunode_container_toolkit_repo_key_url": f"{base}/{repo.container_toolkit_key_url_path}",
        "gpunode_pip_find_links": f"{base}/wheels/",
        "gpunode_acceptance_requirements": requirements_lock(wheels, nccl),
    }
