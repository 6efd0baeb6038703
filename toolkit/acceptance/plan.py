"""One node of an acceptance run (``NodePlan``): where it is, what it must be, the thresholds
in force, and what its run found, planned from the inventory (:func:`plan_node`). The flow
that stages, launches, judges and records the plans is ``toolkit/steps/accept``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.thresholds import effective
from toolkit.acceptance.verdict import Verdict
from toolkit.inventory import Host, Inventory
from toolkit.inventory.values import multi_node_vars
from toolkit.profile.floors import AcceptanceSpec
from toolkit.remote import Node


@dataclass
class NodePlan:
    """One node: where it is, what it must be, the thresholds in force."""

    host: Host
    group: str
    spec: AcceptanceSpec
    stack: Any
    hardware: Any
    expect: NodeExpectation | None = None
    node: Node | None = None
    python: str = "python3"
    image: str | None = None
    address: str | None = None
    os_id: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    verdict: Verdict | None = None
    extra: list[Check] = field(default_factory=list)
    written: dict[str, bool] = field(default_factory=dict)
    state: dict[str, Any] | None = None  # the node state written after the verdict
    certificate: Path | None = None
    certificate_note: str | None = None  # why there is none
    domain: str | None = None  # gpunode_accept_domain: its rack or NVLink clique
    max_sets: int | None = None  # gpunode_accept_max_sets: multi-node sets run at once
    not_tested: str | None = None  # why the executor could not test the node (no verdict on it)
    job: dict[str, Any] | None = None  # the scheduler's record of the node's job


def plan_node(inventory: Inventory, host: Host) -> NodePlan:
    stack, hardware = inventory.host_config(host)
    group = inventory.stack_group_of(host.name)
    domain, max_sets = multi_node_vars(host)
    return NodePlan(
        host=host,
        group=group,
        spec=effective(hardware.acceptance),
        stack=stack,
        hardware=hardware,
        domain=None if domain is None else str(domain),
        max_sets=max_sets,
    )


def by_host(plans: list[NodePlan], host: Host) -> NodePlan:
    return next(p for p in plans if p.host.name == host.name)
