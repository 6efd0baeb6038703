"""Executors: how each node's single-node acceptance is started (SSH or a Slurm job)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from toolkit.acceptance.executors.base import (
    EXECUTOR_VAR,
    EXECUTORS,
    SLURM,
    SSH,
    Executor,
    Launch,
    NotTested,
    SshExecutor,
)
from toolkit.acceptance.executors.slurm import (
    NodeRunner,
    SlurmExecutor,
    local_submit,
    settings_from,
)
from toolkit.acceptance.hooks import CommandRunner
from toolkit.errors import ConfigError
from toolkit.inventory import Host
from toolkit.remote import open_node

__all__ = [
    "EXECUTORS",
    "EXECUTOR_VAR",
    "Executor",
    "Launch",
    "NotTested",
    "select",
    "slurm_commands",
]


def select(asked: str | None, variables: Mapping[str, Any], hosts: Mapping[str, Host]) -> Executor:
    """The executor asked for (``--executor``), else the inventory's, else SSH.

    Checked before any host is touched.

    Raises:
        ConfigError: An unknown executor, or a Slurm setting that breaks its rule.
    """
    name = asked or variables.get(EXECUTOR_VAR) or SSH
    if name not in EXECUTORS:
        source = "--executor" if asked else EXECUTOR_VAR
        raise ConfigError(f"{source}: unknown executor {name!r}; one of {list(EXECUTORS)}")
    if name == SLURM:
        settings = settings_from(variables, hosts)
        submit_host = settings.submit_host
        if submit_host is None:
            return SlurmExecutor(settings, local_submit)
        host = hosts[submit_host]
        return SlurmExecutor(settings, lambda: NodeRunner(open_node(host)))
    return SshExecutor()


@contextmanager
def slurm_commands(
    variables: Mapping[str, Any], hosts: Mapping[str, Host], default: CommandRunner
) -> Iterator[CommandRunner]:
    """Where Slurm's commands run, for the Slurm hook as for the executor: on the inventory's
    ``gpunode_slurm_submit_host`` over SSH (a login node; the lab's head node), else through
    ``default`` (this machine). The connection is closed on leaving.

    Raises:
        ConfigError: A Slurm setting breaks its rule.
    """
    submit_host = settings_from(variables, hosts).submit_host
    if submit_host is None:
        yield default
        return
    runner = NodeRunner(open_node(hosts[submit_host]))
    try:
        yield runner
    finally:
        runner.close()
