"""``gpunode image inspect``: what an image really carries, against the stack.

The image's labels say what it was built for; the NCCL the framework in it really loads is
read by running the acceptance runner's probe inside the image (``node_runner.pyz
nccl-probe``: the libnccl file mapped or resolved the way the framework resolves it, its
version and whether a pip wheel or a system package brought it). A framework whose NCCL is
not the stack's NCCL is the classic "two NCCLs in one image" mistake: reported, exit 1.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from toolkit.acceptance.payload import ARCHIVE, runner_zipapp
from toolkit.errors import ImageError
from toolkit.images.engine import docker_client
from toolkit.images.recipe import (
    LABEL_CUDA,
    LABEL_INPUT_DIGEST,
    LABEL_NCCL,
    LABEL_SOURCE_DATE,
    LABEL_STACK_ID,
    LABEL_VERSION,
    Recipe,
)

PROBE_PATH = f"/run/gpunode-probe/{ARCHIVE}"


@dataclass
class Inspection:
    """An image against a stack."""

    image: str
    image_id: str
    labels: dict[str, str]
    nccl: dict[str, Any]
    expected_stack_id: str | None
    expected_nccl: str | None
    expected_cuda: str | None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Nothing disagrees with the stack."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "image": self.image,
            "image_id": self.image_id,
            "stack_id": self.labels.get(LABEL_STACK_ID),
            "cuda": self.labels.get(LABEL_CUDA),
            "source_date_epoch": self.labels.get(LABEL_SOURCE_DATE),
            "recipe_digest": self.labels.get(LABEL_INPUT_DIGEST),
            "gpunode_version": self.labels.get(LABEL_VERSION),
            "nccl_loaded": self.nccl,
            "expected": {
                "stack_id": self.expected_stack_id,
                "nccl": self.expected_nccl,
                "cuda": self.expected_cuda,
            },
            "ok": self.ok,
            "problems": self.problems,
        }


def probe(client: docker.DockerClient, image_id: str) -> dict[str, Any]:
    """Run this gpunode's NCCL probe inside the image (no network, removed afterwards).

    The runner is mounted from here rather than taken from the image, so any image (one
    built elsewhere, a vendor's) is read by the same probe.

    Raises:
        ImageError: The container did not run or printed no probe result.
    """
    with tempfile.TemporaryDirectory(prefix="gpunode-probe-") as tmp:
        runner = Path(tmp) / ARCHIVE
        runner.write_bytes(runner_zipapp())
        try:
            output = client.containers.run(
                image_id,
                ["python3", PROBE_PATH, "nccl-probe"],
                entrypoint=[],
                network_mode="none",
                volumes={str(runner): {"bind": PROBE_PATH, "mode": "ro"}},
                remove=True,
                stdout=True,
                stderr=False,
            )
        except (docker.errors.ContainerError, docker.errors.APIError) as err:
            raise ImageError(f"the NCCL probe did not run in {image_id[:19]}: {err}") from err
    text = output.decode(errors="replace").strip().splitlines()
    try:
        result: dict[str, Any] = json.loads(text[-1])
    except (IndexError, ValueError) as err:
        raise ImageError(f"the NCCL probe in {image_id[:19]} printed no result") from err
    return result


def judge(
    labels: dict[str, str],
    nccl: dict[str, Any],
    stack_id: str | None,
    nccl_version: str | None,
    cuda: str | None,
) -> list[str]:
    """What disagrees with the stack: the stack id, the CUDA label, the NCCL really loaded."""
    problems = []
    if stack_id and labels.get(LABEL_STACK_ID) != stack_id:
        problems.append(
            f"built for stack {labels.get(LABEL_STACK_ID) or 'unknown'}, the inventory's "
            f"stack is {stack_id}"
        )
    if cuda and labels.get(LABEL_CUDA) and labels.get(LABEL_CUDA) != cuda:
        problems.append(f"built for CUDA {labels.get(LABEL_CUDA)}, the stack pins {cuda}")
    if nccl_version:
        loaded = nccl.get("version")
        source = nccl.get("source") or {}
        where = (
            f"{nccl.get('path')} ({source.get('kind')} {source.get('package') or ''}"
            f"{'=' + source['package_version'] if source.get('package_version') else ''})"
        )
        if not nccl.get("path"):
            problems.append(f"the framework loads no NCCL library; the stack pins {nccl_version}")
        elif loaded != nccl_version:
            problems.append(
                f"NCCL mismatch: the framework loads NCCL {loaded or 'of unknown version'} from "
                f"{where}, the stack pins NCCL {nccl_version}"
            )
        # A system libnccl2 left at the base's version beside the framework's: the base's
        # NCCL, not the stack's (NVIDIA's runtime image holds its own libnccl2).
        for other in nccl.get("others") or []:
            if other.get("version") and other["version"] != nccl_version:
                kind = (other.get("source") or {}).get("kind") or "file"
                problems.append(
                    f"NCCL mismatch: the image also carries NCCL {other['version']} at "
                    f"{other.get('path')} ({kind}), the stack pins NCCL {nccl_version}"
                )
    return problems


def inspect_image(
    image: str, recipe: Recipe | None = None, client: docker.DockerClient | None = None
) -> Inspection:
    """Read an image's labels and the NCCL it loads; judge them against the recipe's stack
    (or, without an inventory, against the image's own labels).

    Raises:
        ImageError: No such image, or the probe did not run.
    """
    client = client or docker_client()
    try:
        found = client.images.get(image)
    except docker.errors.ImageNotFound as err:
        raise ImageError(f"no image {image} on this engine") from err
    except docker.errors.APIError as err:
        raise ImageError(f"cannot inspect image {image}: {err}") from err
    labels = dict((found.attrs.get("Config") or {}).get("Labels") or {})
    nccl = probe(client, str(found.id))
    stack_id = recipe.stack_id if recipe else None
    nccl_version = recipe.nccl if recipe else labels.get(LABEL_NCCL)
    cuda = recipe.cuda if recipe else None
    return Inspection(
        image=image,
        image_id=str(found.id),
        labels=labels,
        nccl=nccl,
        expected_stack_id=stack_id,
        expected_nccl=nccl_version,
        expected_cuda=cuda,
        problems=judge(labels, nccl, stack_id, nccl_version, cuda),
    )
