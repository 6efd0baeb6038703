"""The thresholds a run holds a node to: the floors in force, and what acceptance derives
from them.

The floors themselves (the schema of ``hardware.acceptance`` and the shipped profiles) are
``toolkit/profile/floors.py``; here is what a run makes of them: :func:`effective` (the named
shipped profile with the group's own keys on top), the all-reduce's message sizes, the GPU step
of the utilisation loop, and the shipped critical XIDs (``xids.yml`` next to this module).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import Field

# The step's constants are the runner's (re-exported: the tests and reports name them here).
from toolkit.acceptance.node_runner.train import GPU_STEP_GEMM_N as GPU_STEP_GEMM_N
from toolkit.acceptance.node_runner.train import GPU_STEP_MIN_S as GPU_STEP_MIN_S
from toolkit.acceptance.node_runner.train import size_gpu_step
from toolkit.config import StrictModel, parse_yaml, validate
from toolkit.errors import ConfigError
from toolkit.profile.floors import AcceptanceSpec, parse_size, shipped_profile

FailureClass = Literal["configuration", "hardware", "transient", "harness"]


class XidAdvice(StrictModel):
    """What gpunode makes of one of the catalog's buckets: the class and the action in words."""

    failure_class: FailureClass
    todo: str = Field(min_length=1)


class CriticalXid(StrictModel):
    """One catalogued XID, with NVIDIA's action, gpunode's class for it and where that comes
    from; it marks a node not ready unless the action is IGNORE (``health_checks``)."""

    xid: int = Field(gt=0)
    name: str
    # NVIDIA's Xid catalog "Resolution Bucket (Immediate Action)" (RESET_GPU, RESTART_BM ...)
    action: str = Field(pattern=r"^[A-Z0-9_]+$")
    # The bucket's (``actions:`` in xids.yml), unless the entry gives its own.
    failure_class: FailureClass
    todo: str = Field(min_length=1)
    # False where NVIDIA's action depends on a decode of the message gpunode does not do
    # (NVLink5 144-149): shown with its action, never failing a node on its own.
    fails: bool = True
    sources: list[str] = Field(min_length=1)


@lru_cache(maxsize=1)
def critical_xids() -> dict[int, CriticalXid]:
    """The shipped critical XIDs (``xids.yml`` next to this module), by number.

    Raises:
        ConfigError: The data file is malformed.
    """

    text = resources.files("toolkit.acceptance").joinpath("xids.yml").read_text("utf-8")
    source = "toolkit/acceptance/xids.yml"
    data = parse_yaml(text, source)
    entries = data.get("critical") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"{source}: expected a `critical:` list")
    raw = data.get("actions")
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected an `actions:` mapping")
    buckets = {
        str(k): validate(XidAdvice, v, source, prefix=("actions", str(k))) for k, v in raw.items()
    }
    out: dict[int, CriticalXid] = {}
    for i, entry in enumerate(entries):
        bucket = buckets.get(str(entry.get("action"))) if isinstance(entry, dict) else None
        if isinstance(entry, dict) and bucket is None:
            raise ConfigError(
                f"{source}: critical[{i}]: action {entry.get('action')!r} is not in `actions:`"
            )
        merged = {**bucket.model_dump(), **entry} if bucket is not None else entry
        item = validate(CriticalXid, merged, source, prefix=("critical", i))
        out[item.xid] = item
    return out


def effective(spec: AcceptanceSpec | None) -> AcceptanceSpec:
    """The thresholds in force: the named shipped profile with the group's own keys on top.

    Keys the group sets replace the profile's (a floor list replaces the whole list).
    """
    if spec is None:
        return AcceptanceSpec()
    if spec.profile is None:
        return spec
    base = shipped_profile(spec.profile).acceptance.model_dump()
    own = spec.model_dump(exclude_unset=True)
    merged = {**base, **own}
    return AcceptanceSpec.model_validate(merged)


def sweep_sizes(spec: AcceptanceSpec, *, multi_node: bool = False) -> list[int]:
    """The message sizes to run: a geometric sweep up to the largest floor, plus every floor.

    Without any floor the sweep ends at 64 MiB, so the report still has a curve.
    """
    floors = spec.multi_node_allreduce if multi_node else spec.allreduce
    floor_sizes = {f.size_bytes for f in floors}
    top = max(floor_sizes, default=64 << 20)
    sizes = set(floor_sizes)
    size = parse_size(spec.sweep_min_size)
    while size <= top:
        sizes.add(size)
        size *= spec.sweep_factor
    return sorted(sizes)


@dataclass(frozen=True)
class GpuStep:
    """One step of the GPU-utilisation loop, sized on the controller
    (``node_runner.train.size_gpu_step``: its GEMM_N, MIN_S and the rule); ``at_floor_s`` is
    computed (the step's FLOPs at the floor), never measured."""

    gemm_n: int
    gemms: int
    tflop: float
    floor_tflops: float
    at_floor_s: float

    def as_spec(self) -> dict[str, float | int]:
        """The runner's part (its ``train.gpu_step``)."""
        return {"gemm_n": self.gemm_n, "gemms": self.gemms, "at_floor_s": self.at_floor_s}


def gpu_step(spec: AcceptanceSpec) -> GpuStep | None:
    """The GPU step of ``spec`` (an effective spec: its GEMM floor in force), or None when it
    sets no GEMM floor (the step cannot be sized)."""
    if spec.min_gemm_tflops is None:
        return None
    step = size_gpu_step(spec.min_gemm_tflops, spec.train_compute_s)
    return GpuStep(
        gemm_n=int(step["gemm_n"]),
        gemms=int(step["gemms"]),
        tflop=float(step["tflop"]),
        floor_tflops=spec.min_gemm_tflops,
        at_floor_s=float(step["at_floor_s"]),
    )
