"""What ``gpunode accept`` (and ``gpunode up``'s acceptance stage) is asked to do.

Light on purpose: ``gpunode up`` carries these options through every stage and imports the
acceptance flow (``run.py``: Docker's client, Fabric) only when a node needs accepting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.acceptance.hooks import CommandRunner, local_runner
from toolkit.records import runs

ENGINES = ("image", "host")


@dataclass
class AcceptOptions:
    """What ``gpunode accept`` was asked to do."""

    inventory: Path
    limit: str | None = None
    multi_node: bool = False
    hooks: Sequence[str] = ()
    runs_dir: Path = field(default_factory=runs.runs_dir)
    hook_runner: CommandRunner = local_runner
    runner_timeout_s: float = 1800.0
    # "image": the ranks run in the group's training image through the node's Docker (the
    # default); "host": in a venv on the node itself (the fallback for nodes without it).
    engine: str = "image"
    # The provider's key that signs each ready node's certificate (None: the inventory's
    # `gpunode_sign_key`, else no certificates).
    sign_key: Path | None = None
    # How each node's runner starts: "ssh" or "slurm" (None: the inventory's
    # `gpunode_accept_executor`, else ssh). toolkit/acceptance/executors.
    executor: str | None = None
