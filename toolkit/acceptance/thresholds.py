"""Acceptance thresholds: the ``hardware.acceptance`` part of a hardware profile.

A group's hardware profile may name a shipped profile (``profile: h100-sxm-8``, the data in
``profiles.yml`` next to this module, each figure with its source) and override any floor.
Floors for the all-reduce are large-message busbw floors at named message sizes: the
"Avg bus bandwidth" of a size sweep is never gated on (domain.md section 3).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from toolkit.acceptance.topology import TopologySpec
from toolkit.config import StrictModel, did_you_mean, parse_yaml
from toolkit.errors import ConfigError, clip

_SIZE_RE = re.compile(r"^\s*([0-9]{1,15})\s*(B|KiB|MiB|GiB|TiB|K|M|G|T)?\s*\Z")
_UNITS = {None: 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_UNITS.update({"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40})
DIRECT_IO_ALIGN = 4096  # the runner's O_DIRECT alignment (node_runner.DIRECT_ALIGN)


def parse_size(text: str | int) -> int:
    """Read a message size: ``16GiB``, ``16G`` (nccl-tests' binary units) or bytes.

    Raises:
        ValueError: Not a size (the message names the accepted forms).
    """
    if isinstance(text, bool):
        raise ValueError("a size is a number of bytes or text like '16GiB'")
    if isinstance(text, int):
        if text <= 0:
            raise ValueError("a size must be positive")
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"{clip(repr(text))} is not a size like '16GiB', '512MiB' or '1048576'")
    value = int(match.group(1)) * _UNITS[match.group(2)]
    if value <= 0:
        raise ValueError("a size must be positive")
    return value


def format_size(size: int) -> str:
    """Write a byte count the way profiles name sizes (``16GiB``)."""
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"


class BusbwFloor(StrictModel):
    """A large-message all-reduce bus-bandwidth floor at one named message size."""

    size: str = Field(description='Message size, e.g. "16GiB".')
    min_busbw_gbps: float = Field(gt=0)
    source: str | None = Field(default=None, description="Where the figure comes from.")

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> str:
        return format_size(parse_size(value))

    @property
    def size_bytes(self) -> int:
        """The size in bytes."""
        return parse_size(self.size)


class AcceptanceSpec(StrictModel):
    """Floors a node must meet to be marked ready (every floor is optional)."""

    profile: str | None = Field(default=None, description="A shipped profile to start from.")
    allreduce: list[BusbwFloor] = Field(default_factory=list)
    multi_node_allreduce: list[BusbwFloor] = Field(default_factory=list)
    min_h2d_gbps: float | None = Field(default=None, gt=0)
    min_gemm_tflops: float | None = Field(default=None, gt=0)
    min_mem_bw_gbps: float | None = Field(default=None, gt=0)
    min_data_read_mbps: float | None = Field(default=None, gt=0)
    min_data_write_mbps: float | None = Field(default=None, gt=0)
    max_result_age_h: float = Field(default=24.0, gt=0)
    # A GPU whose GEMM or memory bandwidth is below (1 - tolerance) x the node's median is the
    # straggler even when it clears the absolute floor.
    straggler_tolerance: float = Field(default=0.15, gt=0, lt=1)
    engine: Literal["auto", "nccl-tests", "torch"] = "auto"
    # Sizes run besides the floors' sizes (so the report plots a curve).
    sweep_min_size: str = "1MiB"
    sweep_factor: int = Field(default=4, ge=2)
    iters: int = Field(default=20, ge=1)
    warmup_iters: int = Field(default=5, ge=0)
    # Ranks per node when the node has no GPU (the lab): gloo processes on the CPU.
    cpu_ranks_per_node: int = Field(default=2, ge=1, le=64)
    data_test_size: str = "1GiB"
    data_path: str = "/data"
    # XIDs that fail a node: None is the shipped list (`xids.yml`, with its sources); every
    # other XID is still shown in the check's detail.
    critical_xids: list[int] | None = None
    # The XID window: XIDs count from the node's last provision (`provisioned_at` in
    # /etc/gpunode/state.json, else the boot) and, when this is set, only within these last
    # hours (Azure's node health checks use 2 h).
    xid_window_h: float | None = Field(default=None, gt=0)
    check_pcie: bool = True
    # The PCIe link the GPUs must be able to train at (`pcie.link.gen.max`/`width.max`); None
    # judges the generation against the GPU's own maximum (`pcie.link.gen.gpumax`) only.
    pcie_gen: int | None = Field(default=None, ge=1, le=6)
    pcie_width: int | None = Field(default=None, ge=1, le=32)
    check_throttle: bool = True
    # Training-shaped checks on the data path (issue 13): a data set of `storage_files` files
    # read at random (`storage_reads` reads of `storage_min_read`..`storage_max_read` by
    # `storage_read_workers` workers), a checkpoint of `checkpoint_size` written and restored
    # in another process, and a short DDP loop fed by a DataLoader at 1, 2, 4 ... all GPUs.
    storage_files: int = Field(default=2000, ge=1, le=1_000_000)
    storage_file_size: str = "1MiB"
    storage_reads: int = Field(default=4000, ge=1, le=10_000_000)
    storage_read_workers: int = Field(default=16, ge=1, le=256)
    storage_min_read: str = "4KiB"
    storage_max_read: str = "1MiB"
    checkpoint_size: str = "2GiB"
    train_steps: int = Field(default=20, ge=1, le=10_000)
    train_batch: int = Field(default=32, ge=1, le=65_536)
    train_sample_size: str = "128KiB"
    train_loader_workers: int = Field(default=4, ge=0, le=64)
    train_hidden: int = Field(default=4096, ge=8, le=65_536)
    # Floors of those checks (None: measured and shown, not judged).
    max_read_p99_ms: float | None = Field(default=None, gt=0)
    min_files_per_s: float | None = Field(default=None, gt=0)
    min_checkpoint_write_mbps: float | None = Field(default=None, gt=0)
    min_checkpoint_restore_mbps: float | None = Field(default=None, gt=0)
    max_data_wait_share: float | None = Field(default=None, gt=0, lt=1)
    min_gpu_util_pct: float | None = Field(default=None, gt=0, le=100)
    min_scaling_efficiency: float | None = Field(default=None, gt=0, le=1)
    # The same loop across the nodes of a multi-node run (`--multi-node`): the worst
    # efficiency against 1 GPU at the points that span 2 or more nodes. It depends on the
    # fabric and on the loop's gradient size against its compute, so no real profile sets it;
    # a site sets the figure its fabric reaches.
    min_multi_node_scaling_efficiency: float | None = Field(default=None, gt=0, le=1)
    # What `nvidia-smi topo -m` must show (toolkit/acceptance/topology.py); None: not judged.
    topology: TopologySpec | None = None

    @field_validator("sweep_min_size", "data_test_size", "checkpoint_size", "train_sample_size")
    @classmethod
    def _sizes(cls, value: str) -> str:
        parse_size(value)
        return value

    @field_validator("storage_file_size", "storage_min_read", "storage_max_read")
    @classmethod
    def _aligned_sizes(cls, value: str) -> str:
        if parse_size(value) % DIRECT_IO_ALIGN:
            raise ValueError(
                f"{value!r} is not a multiple of 4KiB (O_DIRECT reads are aligned to 4 KiB)"
            )
        return value

    @model_validator(mode="after")
    def _read_sizes(self) -> AcceptanceSpec:
        low, high = parse_size(self.storage_min_read), parse_size(self.storage_max_read)
        if low > high:
            raise ValueError(
                f"storage_min_read {self.storage_min_read} is larger than storage_max_read "
                f"{self.storage_max_read}"
            )
        if high > parse_size(self.storage_file_size):
            raise ValueError(
                f"storage_max_read {self.storage_max_read} is larger than storage_file_size "
                f"{self.storage_file_size}: a read cannot be longer than its file"
            )
        if parse_size(self.train_sample_size) < DIRECT_IO_ALIGN:
            raise ValueError(f"train_sample_size {self.train_sample_size} is below 4KiB")
        if parse_size(self.train_sample_size) > parse_size(self.storage_file_size):
            raise ValueError(
                f"train_sample_size {self.train_sample_size} is larger than storage_file_size "
                f"{self.storage_file_size}: a sample is read from one file"
            )
        return self

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str | None) -> str | None:
        if value is not None and value not in shipped_profiles():
            raise ValueError(
                f"unknown profile {value!r}" + did_you_mean(value, sorted(shipped_profiles()))
            )
        return value

    @model_validator(mode="after")
    def _unique_sizes(self) -> AcceptanceSpec:
        for name in ("allreduce", "multi_node_allreduce"):
            sizes = [f.size_bytes for f in getattr(self, name)]
            if len(sizes) != len(set(sizes)):
                raise ValueError(f"{name}: each size may have one floor only")
        return self


class ShippedProfile(StrictModel):
    """A profile shipped with gpunode: the floors and the sources they come from."""

    description: str
    gpu_model: str | None = None
    gpu_count: int | None = None
    sources: list[str] = Field(min_length=1)
    acceptance: AcceptanceSpec


class CriticalXid(StrictModel):
    """One XID that marks a node not ready, with where that judgement comes from."""

    xid: int = Field(gt=0)
    name: str
    # NVIDIA's Xid catalog "Resolution Bucket (Immediate Action)" (RESET_GPU, RESTART_BM ...)
    action: str = Field(pattern=r"^[A-Z0-9_]+$")
    sources: list[str] = Field(min_length=1)


@lru_cache(maxsize=1)
def critical_xids() -> dict[int, CriticalXid]:
    """The shipped critical XIDs (``xids.yml`` next to this module), by number.

    Raises:
        ConfigError: The data file is malformed.
    """
    from toolkit.config import validate

    text = resources.files("toolkit.acceptance").joinpath("xids.yml").read_text("utf-8")
    data = parse_yaml(text, "toolkit/acceptance/xids.yml")
    entries = data.get("critical") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ConfigError("toolkit/acceptance/xids.yml: expected a `critical:` list")
    out: dict[int, CriticalXid] = {}
    for i, entry in enumerate(entries):
        item = validate(CriticalXid, entry, "toolkit/acceptance/xids.yml", prefix=("critical", i))
        out[item.xid] = item
    return out


@lru_cache(maxsize=1)
def shipped_profiles() -> dict[str, dict[str, Any]]:
    """The raw shipped profiles (``profiles.yml``), by name."""
    text = resources.files("toolkit.acceptance").joinpath("profiles.yml").read_text("utf-8")
    data = parse_yaml(text, "toolkit/acceptance/profiles.yml")
    profiles = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(profiles, dict):
        raise ConfigError("toolkit/acceptance/profiles.yml: expected a `profiles:` mapping")
    return profiles


def shipped_profile(name: str) -> ShippedProfile:
    """One shipped profile, validated.

    Raises:
        ConfigError: The name is unknown (with suggestions) or the data is malformed.
    """
    from toolkit.config import validate

    profiles = shipped_profiles()
    if name not in profiles:
        raise ConfigError(
            f"unknown acceptance profile {name!r}" + did_you_mean(name, sorted(profiles))
        )
    return validate(
        ShippedProfile,
        profiles[name],
        "toolkit/acceptance/profiles.yml",
        prefix=(
            "profiles",
            name,
        ),
    )


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
