"""The local Docker engine: one client and one build lock for every image gpunode builds.

The lab's node image (``toolkit.lab.image``) and the training images share both: two labs or
two builds started at once wait for each other instead of building the same thing twice.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import docker
import docker.errors

from toolkit.errors import ImageError
from toolkit.filelock import file_lock

LOCK_ENV = "GPUNODE_BUILD_LOCK"


def docker_client(timeout: int = 600) -> docker.DockerClient:
    """A client of the local Docker engine, or a clear error when it cannot be reached."""
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as err:
        raise ImageError(
            f"cannot reach the Docker engine ({err}); start it (scripts/setup-host does) "
            "and make sure this user may use it"
        ) from err
    return client


def find_image(client: docker.DockerClient, ref: str) -> Any | None:
    """The engine's image for this tag or ID, or None when it has none.

    Raises:
        ImageError: The engine could not be asked (anything but "no such image").
    """
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as err:
        raise ImageError(f"cannot inspect image {ref}: {err}") from err


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    """Whether the engine already has this image (tag or ID)."""
    return find_image(client, ref) is not None


def lock_path() -> Path:
    """The build lock file (``$GPUNODE_BUILD_LOCK``, default under the user's cache)."""
    env = os.environ.get(LOCK_ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "gpunode" / "build.lock"


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Hold the engine's build lock (a file lock shared by every gpunode process)."""
    with file_lock(lock_path()):
        yield


def import_rootfs(rootfs: Path, tag: str, changes: Sequence[str]) -> None:
    """``docker import`` a root filesystem directory as ``tag`` with Dockerfile ``changes``.

    Raises:
        ImageError: the docker command line is missing, or tar or the import failed.
    """
    if shutil.which("docker") is None:
        raise ImageError("the docker command line is not installed (run scripts/setup-host)")
    argv = ["docker", "import"]
    for change in changes:
        argv += ["--change", change]
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-c", "."],
        stdout=subprocess.PIPE,
    )
    try:
        imported = subprocess.run(
            [*argv, "-", tag], stdin=tar.stdout, capture_output=True, text=True, check=False
        )
    finally:
        if tar.stdout is not None:
            tar.stdout.close()
        tar_rc = tar.wait()
    if tar_rc != 0 or imported.returncode != 0:
        raise ImageError(
            f"importing {tag} failed (tar exit {tar_rc}, docker exit {imported.returncode}): "
            f"{imported.stderr.strip()}"
        )
