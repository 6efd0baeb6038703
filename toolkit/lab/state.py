"""The lab's own record of what it created (``<lab dir>/state.json``).

``down`` touches only what this record and the ``gpunode.lab`` labels name: loop devices
are detached only when they still back the lab's own disk images.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from toolkit.errors import LabError
from toolkit.lab import paths
from toolkit.lab.spec import LabSpec


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DiskState(_Record):
    """One data disk: a sparse file on the host, attached as a loop device."""

    index: int
    serial: str
    model: str
    by_id: str
    image: Path
    size: int
    loop: str | None = None  # /dev/loopN while attached
    major: int | None = None
    minor: int | None = None
    kernel_name: str  # nvme<i>n1 inside the node (swappable)


class NodeState(_Record):
    """One node container."""

    index: int
    name: str
    ip: str
    faults: list[str] = []
    disks: list[DiskState] = []
    boots: int = 0  # restarts by `gpunode lab restart` (the `remap-rising` fault counts them)


class ServerState(_Record):
    """The package server container on the lab network."""

    name: str
    ip: str


class LabState(_Record):
    """Everything one lab created."""

    name: str
    spec: LabSpec
    image: str
    network: str
    subnet: str
    gateway: str
    server: ServerState
    nodes: list[NodeState] = []
    inventory_dir: Path | None = None

    @property
    def base_url(self) -> str:
        """Root URL of the lab's package server, as nodes reach it."""
        return f"http://{self.server.ip}"


def state_file(name: str) -> Path:
    """Where a lab's state is kept."""
    return paths.lab_dir(name) / "state.json"


def load(name: str) -> LabState | None:
    """The recorded state of lab ``name``, or None when there is none.

    Raises:
        LabError: The file exists but cannot be read.
    """
    path = state_file(name)
    if not path.exists():
        return None
    try:
        return LabState.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError) as err:
        raise LabError(
            f"cannot read the lab state {path} ({err}); remove the lab with "
            f"`gpunode lab down --name {name}`, which also works from labels alone"
        ) from err


def save(state: LabState) -> None:
    """Write the state atomically (a crash never leaves half a file)."""
    path = state_file(state.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.model_dump_json(indent=2))
    os.replace(tmp, path)
