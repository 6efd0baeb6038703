"""Checks of what a node is: its GPUs' count and model, the pinned versions installed and
loaded, and the stack id its state file names, each against the inventory's expectation.

Standard library only (the node-side health check ships it): a GPU's model is told by the
function it is given (``catalog.model_of`` on the control machine)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.node import nodestate
from toolkit.stack.debversion import satisfies


def inventory_checks(
    result: dict[str, Any], expect: NodeExpectation, model_of: Callable[[str], str | None]
) -> list[Check]:
    """The GPUs nvidia-smi lists against the expected count and model (``model_of``: the GPU
    catalogue's model of a name, None for a name it does not know)."""
    gpus = result.get("gpus") or {}
    if not gpus.get("ok"):
        return [Check("gpu.query", False, f"nvidia-smi failed: {gpus.get('error')}")]
    checks = []
    listed = gpus.get("list") or []
    count = len(listed)
    if expect.gpu_count is not None:
        ok = count == expect.gpu_count
        checks.append(
            Check(
                "gpu.count",
                ok,
                f"{count} GPUs {'==' if ok else '!='} {expect.gpu_count} expected",
                measured=count,
                floor=expect.gpu_count,
            )
        )
    if expect.gpu_model is not None:
        want = model_of(expect.gpu_model)
        wrong = [g["name"] for g in listed if model_of(str(g.get("name") or "")) != want]
        checks.append(
            Check(
                "gpu.model",
                not wrong,
                f"found {', '.join(sorted(set(wrong)))}; expected {expect.gpu_model}"
                if wrong
                else f"every GPU is a {expect.gpu_model}",
                measured=sorted({str(g.get("name")) for g in listed}),
                floor=expect.gpu_model,
            )
        )
    return checks


def version_checks(result: dict[str, Any], expect: NodeExpectation) -> list[Check]:
    """Pinned packages installed at their versions, the driver and NCCL loaded at theirs."""
    versions = result.get("versions") or {}
    checks = []
    packages = versions.get("packages") or {}
    if expect.packages:
        bad = {
            name: packages.get(name)
            for name, want in expect.packages.items()
            if not satisfies(want, str(packages.get(name) or ""))
        }
        checks.append(
            Check(
                "versions.installed",
                not bad,
                "; ".join(
                    f"{n}: installed {v or 'none'}, pinned {expect.packages[n]}"
                    for n, v in sorted(bad.items())
                )
                if bad
                else "every pinned package installed at its pinned version",
                measured=bad or None,
            )
        )
    if expect.driver_version is not None:
        loaded = versions.get("driver_loaded")
        if versions.get("nvml_error"):
            lib = versions.get("nvml_library")
            checks.append(
                Check(
                    "versions.driver_loaded",
                    False,
                    f"{versions['nvml_error']}"
                    + (f" (user space {lib}, pinned {expect.driver_version})" if lib else ""),
                )
            )
        else:
            ok = loaded == expect.driver_version
            proc = versions.get("driver_proc")
            if proc and proc != expect.driver_version:
                ok = False
            checks.append(
                Check(
                    "versions.driver_loaded",
                    ok,
                    f"loaded {loaded or 'none'} (/proc: {proc or 'n/a'}), pinned "
                    f"{expect.driver_version}",
                    measured=loaded,
                    floor=expect.driver_version,
                )
            )
    nccl_loaded = versions.get("nccl_loaded")
    if expect.nccl_version is not None and nccl_loaded:
        ok = nccl_loaded == expect.nccl_version
        checks.append(
            Check(
                "versions.nccl_loaded",
                ok,
                f"the framework loads NCCL {nccl_loaded} "
                f"({(versions.get('nccl') or {}).get('path') or 'file unknown'}), "
                f"pinned {expect.nccl_version}",
                measured=nccl_loaded,
                floor=expect.nccl_version,
            )
        )
    return checks


def stack_check(result: dict[str, Any], expect: NodeExpectation) -> Check:
    """The stack id of the node's state file against the inventory's."""
    state = result.get("state") or {}
    installed = state.get("stack_id")
    if expect.stack_id is None:
        return Check("stack_id", False, "the inventory's stack could not be resolved")
    ok = installed == expect.stack_id
    return Check(
        "stack_id",
        ok,
        f"installed {installed or f'unknown (no {nodestate.PATH})'}"
        f" {'==' if ok else '!='} inventory {expect.stack_id}",
        measured=installed,
        floor=expect.stack_id,
    )
