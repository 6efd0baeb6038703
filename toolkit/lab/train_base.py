"""The lab's training-image base: a minimal Debian 12 imported into Docker, pinned by its ID.

Real sites build on an NVIDIA CUDA runtime or an NGC PyTorch image pinned by digest; the lab
has no registry to pull one from, so it makes its own base the way it makes its node image
(``toolkit.lab.image``): ``debootstrap`` (sharing that image's cache of downloaded .debs) builds
a minbase bookworm root filesystem with Python and pip, volatile files and identities are
removed, and ``docker import`` turns it into an image. The inventory then pins that image by
its ID (``gpunode_image_base: sha256:...``), exactly as it would pin a registry digest.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker

from toolkit.errors import ImageError
from toolkit.images.engine import build_lock, docker_client, import_rootfs
from toolkit.lab import paths
from toolkit.lab.image import MIRROR, SUITE, debootstrap
from toolkit.lab.proc import run

REPOSITORY = "gpunode-train-base"
LABEL = "gpunode.image.base"  # value: the recipe hash
OS_ID = "debian12"
# Python to run the framework and the acceptance runner, pip to install the hashed lock,
# ca-certificates for HTTPS sources, gpgv for apt's signature check of the NVIDIA repository.
PACKAGES: tuple[str, ...] = ("python3", "python3-pip", "ca-certificates", "gpgv")
# Removed before the import: caches, logs and identities never belong in an image.
CLEAN_SCRIPT = """\
set -eu
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/* /var/cache/ldconfig/aux-cache \
  /tmp/* /root/.cache /etc/ssh/ssh_host_*
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
"""
IMPORT_CHANGES: tuple[str, ...] = (
    'CMD ["/bin/bash"]',
    "ENV LANG=C.UTF-8",
    f"LABEL org.opencontainers.image.title=gpunode-train-base-{SUITE}",
)


@dataclass(frozen=True)
class BaseImage:
    """The lab's base image: its ID (the pin) and its tag."""

    id: str
    tag: str
    built: bool


def recipe_hash() -> str:
    """A short hash of what the base is made from."""
    blob = json.dumps(
        {
            "suite": SUITE,
            "mirror": MIRROR,
            "packages": sorted(PACKAGES),
            "clean": CLEAN_SCRIPT,
            "import": IMPORT_CHANGES,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def ensure_lab_base(client: docker.DockerClient | None = None) -> BaseImage:
    """Import the base unless an image of the current recipe exists; return its ID.

    Raises:
        ImageError: not root, or debootstrap or the import failed.
    """
    client = client or docker_client()
    tag = f"{REPOSITORY}:{recipe_hash()}"
    found = _get(client, tag)
    if found is not None:
        return BaseImage(id=found, tag=tag, built=False)
    with build_lock():
        found = _get(client, tag)
        if found is not None:
            return BaseImage(id=found, tag=tag, built=False)
        _build(tag)
        built = _get(client, tag)
    if built is None:
        raise ImageError(f"the base image {tag} was imported but cannot be found")
    return BaseImage(id=built, tag=tag, built=True)


def _get(client: docker.DockerClient, tag: str) -> str | None:
    try:
        return str(client.images.get(tag).id)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as err:
        raise ImageError(f"cannot inspect image {tag}: {err}") from err


def _build(tag: str) -> None:
    with tempfile.TemporaryDirectory(prefix="gpunode-train-base-", dir=paths.cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        debootstrap(rootfs, PACKAGES)
        run(["chroot", str(rootfs), "/bin/sh", "-c", CLEAN_SCRIPT], timeout=300)
        import_rootfs(rootfs, tag, [*IMPORT_CHANGES, f"LABEL {LABEL}={recipe_hash()}"])
