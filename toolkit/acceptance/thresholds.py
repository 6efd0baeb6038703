"""Acceptance thresholds: the `hardware.acceptance` part of a hardware profile."""

from __future__ import annotations

from pydantic import Field

from toolkit.config import StrictModel


class BusbwFloor(StrictModel):
    """A large-message all-reduce bus-bandwidth floor at one named message size."""

    size: str = Field(description='Message size, e.g. "16GiB".')
    min_busbw_gbps: float = Field(gt=0)


class AcceptanceSpec(StrictModel):
    """Floors a node must meet to be marked ready."""

    profile: str | None = Field(default=None, description="A shipped profile to start from.")
    allreduce: list[BusbwFloor] = Field(default_factory=list)
    multi_node_allreduce: list[BusbwFloor] = Field(default_factory=list)
    min_h2d_gbps: float | None = None
    min_gemm_tflops: float | None = None
    min_mem_bw_gbps: float | None = None
    min_data_read_mbps: float | None = None
    min_data_write_mbps: float | None = None
    max_result_age_h: float = 24.0
