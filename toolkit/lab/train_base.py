"""The lab's training-image base: shaped like NVIDIA's CUDA runtime image, pinned by its ID.

Real sites build on an NVIDIA CUDA runtime or an NGC PyTorch image pinned by digest; the lab
has no registry to pull one from, so it makes its own base the way it makes its node image
(``toolkit.lab.image``): ``debootstrap`` (sharing that image's cache of downloaded .debs) builds
a minbase bookworm root filesystem, volatile files and identities are removed, and ``docker
import`` turns it into an image. The inventory then pins that image by its ID
(``gpunode_image_base: sha256:...``), exactly as it would pin a registry digest.

Its shape is the runtime image's, not a convenient one (docs/design.md, the lab): NVIDIA's
``dist/<version>/<os>/runtime/Dockerfile`` installs ``libnccl2`` at the NCCL of that CUDA
release and holds it (``apt-mark hold ... libnccl2``), sets ``NCCL_VERSION`` and the
``NVIDIA_*`` variables in its environment, and installs no Python (sources:
tests/data/real/SOURCES.md, "training image bases"). So the lab's base carries the lab
repository's ``libnccl2`` at a build other than the default stack's, held, and no python3: the
training image has to bring Python and change the held NCCL itself.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker

from toolkit.errors import ImageError
from toolkit.images.engine import build_lock, docker_client, import_rootfs
from toolkit.lab import paths
from toolkit.lab.catalog import NCCL_BUILDS, NcclBuild
from toolkit.lab.image import MIRROR, SUITE, debootstrap, debootstrap_beat
from toolkit.lab.inventory import DEFAULT_STACK
from toolkit.lab.proc import run
from toolkit.lab.repo import RepoInfo
from toolkit.progress import HEARTBEAT_S, Heartbeat, Progress

REPOSITORY = "gpunode-train-base"
LABEL = "gpunode.image.base"  # value: the recipe hash
OS_ID = "debian12"
# ca-certificates for HTTPS sources, gpgv for apt's signature check of the NVIDIA repository
# (NVIDIA's base Dockerfile installs ca-certificates and a keyring). No Python: the runtime image
# has none.
PACKAGES: tuple[str, ...] = ("ca-certificates", "gpgv")
# What a training image on this base installs for Python (gpunode_image_python_packages, written
# into the lab inventory): the exact versions the base's own source, Debian 12 main
# (deb.debian.org bookworm), offers. Source: packages.debian.org/bookworm/python3 (3.11.2-1+b1)
# and packages.debian.org/bookworm/python3-pip (23.0.1+dfsg-1); `apt-cache policy` in the base.
PYTHON_PACKAGES: dict[str, str] = {"python3": "3.11.2-1+b1", "python3-pip": "23.0.1+dfsg-1"}
# The NCCL the base carries, as NVIDIA's runtime Dockerfile installs it: the package, held.
NCCL_PACKAGE = "libnccl2"
NCCL_SCRIPT = """\
set -eu
dpkg -i /tmp/libnccl2.deb
apt-mark hold libnccl2
rm -f /tmp/libnccl2.deb
"""
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
    # As NVIDIA's base and runtime Dockerfiles set them (the container toolkit reads these).
    "ENV NVIDIA_VISIBLE_DEVICES=all",
    "ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility",
    f"LABEL org.opencontainers.image.title=gpunode-train-base-{SUITE}",
)


def base_nccl() -> NcclBuild:
    """The NCCL build the base carries: one the lab repository has, other than the default
    stack's (a base at the stack's own NCCL would hide the held-package problem)."""
    stack = str(DEFAULT_STACK["nccl"])
    return next(b for b in reversed(NCCL_BUILDS) if b.apt_version != stack)


def nccl_changes(build: NcclBuild) -> tuple[str, ...]:
    """The runtime image's NCCL environment (NCCL_VERSION, NV_LIBNCCL_PACKAGE...)."""
    return (
        f"ENV NCCL_VERSION={build.version}-1",
        f"ENV NV_LIBNCCL_PACKAGE_NAME={NCCL_PACKAGE}",
        f"ENV NV_LIBNCCL_PACKAGE_VERSION={build.version}-1",
        f"ENV NV_LIBNCCL_PACKAGE={NCCL_PACKAGE}={build.apt_version}",
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
            "nccl": base_nccl().apt_version,
            "nccl_script": NCCL_SCRIPT,
            "clean": CLEAN_SCRIPT,
            "import": IMPORT_CHANGES,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def nccl_deb(repo: RepoInfo, build: NcclBuild) -> Path:
    """The lab repository's ``libnccl2`` .deb of one build.

    Raises:
        ImageError: The repository has no such file.
    """
    deb = repo.path / repo.suite_path.strip("/") / f"{NCCL_PACKAGE}_{build.apt_version}_amd64.deb"
    if not deb.is_file():
        raise ImageError(f"the lab repository has no {deb.name} ({deb.parent})")
    return deb


# The steps of a build, for the progress lines ("training image base: ... (2/4, 80 s)").
BUILD_STEPS = ("debootstrap", "libnccl2", "clean", "import")


def ensure_lab_base(
    repo: RepoInfo,
    client: docker.DockerClient | None = None,
    progress: Progress | None = None,
    interval: float = HEARTBEAT_S,
) -> BaseImage:
    """Import the base unless an image of the current recipe exists; return its ID.

    Args:
        repo: The lab repository, whose ``libnccl2`` the base installs and holds.
        client: The engine.
        progress: Where a build says where it is, at least every ``interval`` seconds
            (:class:`~toolkit.progress.Heartbeat`; phase ``training image base``).
        interval: Seconds of silence before a progress line.

    Raises:
        ImageError: not root, the repository lacks the .deb, or debootstrap or the import
            failed.
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
        deb = nccl_deb(repo, base_nccl())
        with Heartbeat(
            progress or (lambda _m: None),
            "training image base",
            total=len(BUILD_STEPS),
            interval=interval,
        ) as beat:
            _build(tag, deb, beat)
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


def _build(tag: str, deb: Path, beat: Heartbeat | None = None) -> None:
    # Not entered, a heartbeat never prints: a caller without one builds quietly.
    beat = beat or Heartbeat(lambda _m: None, "training image base")
    with tempfile.TemporaryDirectory(prefix="gpunode-train-base-", dir=paths.cache_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        beat.update("debootstrap", done=0)
        debootstrap(rootfs, PACKAGES, debootstrap_beat(beat))
        shutil.copyfile(deb, rootfs / "tmp" / "libnccl2.deb")
        beat.update("installing libnccl2", done=1)
        run(["chroot", str(rootfs), "/bin/sh", "-c", NCCL_SCRIPT], timeout=300)
        beat.update("cleaning", done=2)
        run(["chroot", str(rootfs), "/bin/sh", "-c", CLEAN_SCRIPT], timeout=300)
        beat.update("docker import", done=3)
        changes = [*IMPORT_CHANGES, *nccl_changes(base_nccl())]
        import_rootfs(rootfs, tag, [*changes, f"LABEL {LABEL}={recipe_hash()}"])
