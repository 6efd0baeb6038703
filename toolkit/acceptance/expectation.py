"""What the inventory says one node must be (:class:`~toolkit.acceptance.check.NodeExpectation`),
from its stack, the group's lock and its hardware profile: what acceptance, ``gpunode check``
and the node-side health check hold a node to."""

from __future__ import annotations

from typing import Any

from toolkit.acceptance.check import NodeExpectation
from toolkit.inventory import Host
from toolkit.stack.lock import LOCK_FILE, apply_lock, lock_from_vars, lock_state, stack_arch
from toolkit.stack.models import Hardware, Stack
from toolkit.stack.resolve import resolve


def expected_node(
    host: Host, stack: Stack, hardware: Hardware, os_id: str
) -> tuple[NodeExpectation, dict[str, Any]]:
    """What a node of this stack must be on this OS, and the resolved stack it comes from.

    Provision installed exactly the group's locked versions: with a current lock those are
    expected; without one the requirements stand (e.g. ``550.127.05-*``, matched by revision).
    Acceptance and ``gpunode check`` hold a node to this one expectation.

    Raises:
        ConfigError: The stack does not resolve for ``os_id``, or the lock is malformed.
    """
    repo_vars = {k: v for k, v in host.vars.items() if k.startswith("gpunode_")}
    arch = stack_arch(f"of host {host.name}", host.vars)
    resolved = resolve(stack, hardware, os_id, arch=arch, repo_vars=repo_vars)
    lock = lock_from_vars(host.vars, f"{LOCK_FILE} of host {host.name}")
    if lock_state(lock, resolved["stack_id"]) == "current":
        resolved = apply_lock(resolved, lock)
    packages: dict[str, str] = {}
    for section in ("driver", "cuda", "nccl"):
        packages.update((resolved.get(section) or {}).get("packages") or {})
    expectation = NodeExpectation(
        host=host.name,
        stack_id=resolved["stack_id"],
        gpu_model=hardware.gpu.model,
        gpu_count=hardware.gpu.count,
        driver_version=resolved["driver"]["version"],
        packages=packages,
        nccl_version=str(resolved["nccl"]["version"]),
    )
    return expectation, resolved
