"""One lab for every integration test module: real Docker, real SSH, real Ansible.

The lab is ``$GPUNODE_TEST_LAB`` (default ``gpunode-test``): 2 nodes with 2 data disks each.
It is brought up once per session through the Python API (removed first if an earlier run
left it behind, so every session starts from clean nodes) and torn down at the end; set
``GPUNODE_TEST_KEEP_LAB=1`` to keep it for debugging. Modules run in file-name order
(01 lab, 02 disks, 03 provision, 04 accept) and share the nodes, so every module leaves
them as it found them.

Without a reachable Docker engine the tests fail (they never skip): CI installs and starts
the engine itself, and a lab test that silently skips proves nothing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import ToolkitError
from toolkit.lab import image as lab_image
from toolkit.lab import lab as lab_core
from toolkit.lab import nodes as lab_nodes
from toolkit.lab.spec import build_spec
from toolkit.lab.state import LabState, NodeState

# Set before the test modules are imported, so that they read the same name.
LAB_NAME = os.environ.setdefault("GPUNODE_TEST_LAB", "gpunode-test")
NODES = 2
DISKS = 2
DISK_SIZE = 2 * 1024**3


@dataclass
class Lab:
    """The shared lab as the tests see it."""

    name: str
    state: LabState

    @property
    def inventory(self) -> Path:
        """The inventory directory ``lab up`` wrote (absolute)."""
        assert self.state.inventory_dir is not None
        return self.state.inventory_dir

    @property
    def nodes(self) -> list[NodeState]:
        """The nodes, in index order."""
        return sorted(self.state.nodes, key=lambda n: n.index)

    def ssh(
        self, node: int | str, command: str, *, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on a node over real SSH (strict host keys), as root."""
        return lab_core.ssh_run(self.name, node, command, check=check, timeout=timeout)

    def refresh(self) -> Lab:
        """Re-read the lab's state (after faults, disks or restarts changed it)."""
        self.state = lab_core.require(self.name)
        return self


def require_docker() -> None:
    """Fail (never skip) when the Docker engine cannot be reached."""
    try:
        lab_image.docker_client()
    except ToolkitError as err:
        pytest.fail(f"integration tests need the Docker engine: {err.message}", pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The shared 2-node lab, up for the whole session (autouse: modules that only call
    ``toolkit.lab.lab.require($GPUNODE_TEST_LAB)`` find it up as well)."""
    require_docker()
    if lab_core.lab_state.load(LAB_NAME) is not None or lab_nodes.labelled_containers(
        lab_image.docker_client(), LAB_NAME
    ):
        lab_core.down(LAB_NAME)
    spec = build_spec(
        name=LAB_NAME,
        nodes=NODES,
        disks=DISKS,
        disk_size=DISK_SIZE,
        ca_bundle=lab_nodes.host_ca_bundle(),
    )
    inventory_dir = tmp_path_factory.mktemp("lab-inventory") / "lab"
    state = lab_core.up(spec, inventory_dir=inventory_dir)
    try:
        yield Lab(name=LAB_NAME, state=state)
    finally:
        if os.environ.get("GPUNODE_TEST_KEEP_LAB") != "1":
            lab_core.down(LAB_NAME)


@pytest.fixture(scope="session")
def training_image(lab: Lab) -> Any:
    """The lab group's training image, built once per session from the lab's inventory
    without cache (``gpunode image build --no-cache``): acceptance runs its ranks in it,
    test_05 rebuilds it from scratch elsewhere and expects the same ID."""
    from toolkit.images.build import build_recipe, recipe_for

    return build_recipe(recipe_for(lab.inventory), no_cache=True)
