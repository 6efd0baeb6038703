"""How a node's single-node acceptance is launched, and what comes back.

The runner, its spec and its result file are the same whichever executor starts it: the
orchestrator stages them over SSH and reads ``result.json`` back the same way. Only the start
differs: over the SSH connection itself (:class:`SshExecutor`), or as a job of the cluster's
scheduler on that node (``executors.slurm``). A launch ends either with the runner's exit
status (:class:`Launch`) or with :class:`NotTested`: the node was never tested (drained or
down before the run, the job never started, it was preempted), which is no verdict on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from toolkit.inventory import Host
from toolkit.remote import Node

SSH = "ssh"
SLURM = "slurm"
EXECUTORS = (SSH, SLURM)
# The inventory's choice (group `all`); `gpunode accept --executor` wins over it.
EXECUTOR_VAR = "gpunode_accept_executor"


@dataclass(frozen=True)
class Launch:
    """How the runner ended: its exit status, its output and the scheduler's record."""

    returncode: int
    output: str
    job: dict[str, Any] | None = None  # the scheduler's facts of the job (None over SSH)

    @property
    def ok(self) -> bool:
        """Exit status 0."""
        return self.returncode == 0


class NotTested(Exception):
    """The node was not tested: why, and the scheduler's record of the job if there was one."""

    def __init__(self, reason: str, job: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.job = job


class Executor(Protocol):
    """Starts the runner command on one node and waits for it."""

    name: str

    def launch(
        self, host: Host, node: Node, command: str, workdir: str, timeout_s: float, gpus: int = 0
    ) -> Launch:
        """Run ``command`` (as root) on ``host`` in ``workdir`` and wait for it; ``gpus`` is
        the GPU count of the node's hardware profile (a scheduler's job asks for them).

        Raises:
            NotTested: The node could not be tested (the reason says why).
            RemoteError: The connection to the node or the submit host failed.
        """
        ...

    def close(self) -> None:
        """Release what the executor holds (connections)."""
        ...


class SshExecutor:
    """The runner over the orchestrator's own SSH connection to the node."""

    name = SSH

    def launch(
        self, host: Host, node: Node, command: str, workdir: str, timeout_s: float, gpus: int = 0
    ) -> Launch:
        """Run the command over SSH and wait for it (see :class:`Executor`); the node's GPUs
        are all there over SSH."""
        res = node.run(f"cd {workdir} && {command}", timeout=timeout_s)
        return Launch(res.returncode, res.stderr or res.stdout)

    def close(self) -> None:
        """Nothing held."""
