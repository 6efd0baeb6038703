"""The passive checks: what a node's counters and versions say, read without load.

The GPU count and model, pinned/installed/loaded versions, memory errors, PCIe maximum link,
throttling and XIDs. Acceptance judges these as part of its verdict (``verdict.judge``),
``gpunode check`` judges its probe with them on the control machine and the node-side health
check on the node (``toolkit.check.healthcheck``): one set of rules. Standard library only,
with its families (``node_checks``, ``health_checks``), so the health check ships them; the
catalogues they read (the GPU models, the critical XIDs) come in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.health_checks import HealthSpec, XidInfo, health_checks
from toolkit.acceptance.node_checks import inventory_checks, version_checks


def passive_checks(
    result: dict[str, Any],
    expect: NodeExpectation,
    spec: HealthSpec,
    *,
    xids: Mapping[int, XidInfo],
    model_of: Callable[[str], str | None],
) -> list[Check]:
    """The checks of a runner-shaped result that read counters and versions only.

    Args:
        result: The runner's result, or a passive probe shaped like it.
        expect: What the node must be.
        spec: The thresholds in force (``thresholds.effective``).
        xids: The critical XIDs by number (``thresholds.critical_xids()``).
        model_of: A GPU name's model in the catalogue (``catalog.model_of``).
    """
    return (
        inventory_checks(result, expect, model_of)
        + version_checks(result, expect)
        + health_checks(result, spec, xids)
    )
