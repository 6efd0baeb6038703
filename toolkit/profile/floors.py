"""The acceptance floors: what the ``acceptance:`` of a hardware profile may say, and the
shipped profiles it may start from.

The schema (:class:`AcceptanceSpec`, with the rules it nests: :class:`TopologySpec`,
:class:`TransportSpec`, :class:`DcgmDiagSpec`, :class:`BusbwFloor`) and the shipped profiles
(``floors.yml`` next to this module, each figure with its source) live here, beside
``hardware.py``, which reads them, the way it reads the GPUs' schema in ``stack.models`` and
the data disks' in ``disks.spec``: the hardware profile reads all three without reaching
into the packages whose flows read inventories. Acceptance (``toolkit/acceptance/``) judges a
node against these floors: the parsers and judgements of the topology, NCCL log and DCGM
rules stay there.

A group's profile may name a shipped profile (``profile: h100-sxm-8``) and override any floor.
Floors for the all-reduce are large-message busbw floors at named message sizes: the "Avg bus
bandwidth" of a size sweep is never gated on (domain.md section 3).

A shipped profile's GEMM, memory-bandwidth, host-to-device and busbw floors follow one rule:
floor = factor x a cited figure measured on a healthy device of its model (never a datasheet
peak); :func:`build_profile` derives them. A site's own floors are plain numbers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, TypeVar

from pydantic import Field, field_validator, model_validator

from toolkit.config import StrictModel, did_you_mean, format_loc, parse_yaml, validate
from toolkit.errors import ConfigError, clip

_SIZE_RE = re.compile(r"^\s*([0-9]{1,15})\s*(B|KiB|MiB|GiB|TiB|K|M|G|T)?\s*\Z")
_UNITS = {None: 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_UNITS.update({"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40})
DIRECT_IO_ALIGN = 4096  # the runner's O_DIRECT alignment (node_runner.storage.DIRECT_ALIGN)
# A p99 judged over the random reads needs at least this many reads per worker: one stall of
# the disk (or of a shared host) delays the read in flight on every worker at once, so with
# `workers` x 100 reads such a stall holds 1 % of them and cannot be the p99 by itself.
# Measured on the lab (2026-12-07, toolkit/lab/acceptance.yml): with 4 workers, 160 reads gave a
# healthy p99 of 161-934 ms (where the histogram was kept: 4 reads caught in one stall, every
# other read under 50 ms); 800 reads gave 2-66 ms on the same host under the same load.
P99_READS_PER_WORKER = 100


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


# --- the rules a profile nests (judged in toolkit/acceptance/: topology, nccllog, dcgm) ----------

# A topology rule names the farthest link allowed (toolkit/acceptance/topology.py orders them).
RULE_PATTERN = r"^(NV[1-9][0-9]{0,2}|PIX|PXB|PHB|NODE|SYS)$"


class TopologySpec(StrictModel):
    """What the node's ``nvidia-smi topo -m`` must show (every rule is optional).

    Link rules name the farthest link allowed: ``NV<n>`` (NVLink with at least n links) or a
    PCIe path kind, ``PIX`` < ``PXB`` < ``PHB`` < ``NODE`` < ``SYS`` (NVLink is nearer than
    any of them).
    """

    gpu_link: str | None = Field(default=None, description="Every GPU pair.")
    gpu_link_same_numa: str | None = Field(
        default=None, description="Every pair of GPUs on the same NUMA node."
    )
    nic_gpu_link: str | None = Field(
        default=None, description="Each NIC to its nearest GPU (PXB: on a GPU's PCIe switch)."
    )
    nics: list[str] | None = Field(
        default=None,
        description="The NICs nic_gpu_link covers, by RDMA device (mlx5_0); None: every NIC.",
    )
    numa_balanced: bool = Field(
        default=False,
        description="GPUs split evenly (give or take one) over the NUMA nodes that hold them.",
    )
    source: str | None = Field(default=None, description="Where the rules come from.")

    @field_validator("gpu_link", "gpu_link_same_numa", "nic_gpu_link")
    @classmethod
    def _rule(cls, value: str | None) -> str | None:
        if value is not None and not re.match(RULE_PATTERN, value):
            raise ValueError(
                f"{clip(repr(value))} is not a link rule: NV<n> (NVLink with at least n links) "
                "or one of PIX, PXB, PHB, NODE, SYS"
            )
        return value

    @property
    def has_rules(self) -> bool:
        """Whether any rule is set."""
        return bool(
            self.gpu_link or self.gpu_link_same_numa or self.nic_gpu_link or self.numa_balanced
        )


# The fabric a group declares, and the network transport NCCL names for each
# (toolkit/acceptance/nccllog.py): InfiniBand and RoCE go through NCCL's IB verbs transport
# (``NET/IB``, HPC-X's ``IBext``), EFA through the OFI plugin (aws-ofi-nccl), TCP through
# NCCL's sockets.
Fabric = Literal["infiniband", "roce", "efa", "tcp"]
FABRIC_NETWORK: dict[str, str] = {
    "infiniband": "ib",
    "roce": "ib",
    "efa": "other",
    "tcp": "socket",
}


class TransportSpec(StrictModel):
    """What the NCCL log of the node's all-reduce must show (every rule is optional; a run
    without a log is not judged).

    ``fabric`` and ``ofi_plugin_version`` are judged on runs that cross the network (the
    multi-node stage): one node's run shows no fabric.
    """

    fabric: Fabric | None = Field(
        default=None,
        description=(
            "The fabric the group's nodes talk over: infiniband, roce, efa (the OFI plugin, "
            "aws-ofi-nccl) or tcp (NCCL's sockets); a multi-node run must show it."
        ),
    )
    ofi_plugin_version: str | None = Field(
        default=None,
        pattern=r"^[0-9]{1,4}(\.[0-9]{1,4}){1,3}(-[A-Za-z0-9.]{1,32})?$",
        description=(
            "The aws-ofi-nccl version the site expects (1.9.1, or with its build tag 1.9.1-aws): "
            "the one NCCL loaded must be it."
        ),
    )
    network: Literal["ib", "socket", "other"] | None = Field(
        default=None,
        description="The network transport: ib (NCCL's IB verbs, HPC-X IBext), socket, other.",
    )
    gpudirect_rdma: Literal["required"] | None = Field(
        default=None,
        description="Every connection that crosses the network uses GPUDirect RDMA (GDRDMA).",
    )
    nvls: Literal["required"] | None = Field(
        default=None, description="NVLink SHARP: multicast available and NVLS channels in use."
    )
    source: str | None = Field(default=None, description="Where the rules come from.")

    @model_validator(mode="after")
    def _fabric_and_network_agree(self) -> TransportSpec:
        if self.fabric and self.network and FABRIC_NETWORK[self.fabric] != self.network:
            raise ValueError(
                f"network {self.network} contradicts fabric {self.fabric} (NCCL reaches "
                f"{self.fabric} through network {FABRIC_NETWORK[self.fabric]}): set one of them"
            )
        return self

    @property
    def has_rules(self) -> bool:
        """Whether any rule is set."""
        return self.has_node_rules or self.has_fabric_rules

    @property
    def has_node_rules(self) -> bool:
        """Whether any rule a single node's run can answer is set."""
        return any(v is not None for v in (self.network, self.gpudirect_rdma, self.nvls))

    @property
    def has_fabric_rules(self) -> bool:
        """Whether a rule only a run across nodes can answer is set."""
        return self.fabric is not None or self.ofi_plugin_version is not None


class DcgmDiagSpec(StrictModel):
    """Run ``dcgmi diag -r <level> -j`` on every node and judge its plugins."""

    level: int = Field(ge=1, le=4, description="dcgmi diag run level (1 quick ... 4 extended).")
    required: bool = Field(
        default=False,
        description="A node without dcgmi fails; False: the check says it was not judged.",
    )
    fail_on_warn: bool = Field(default=False, description="A Warn result fails the check.")
    fail_on_skip: bool = Field(default=False, description="A Skip result fails the check.")
    source: str | None = Field(default=None, description="Where the rule comes from.")


# --- the floors ----------------------------------------------------------------------------------

# The families of acceptance checks (the first part of a check's name: ``gemm.gpu0``,
# ``dcgm.memory``, ``allreduce.busbw@16GiB``), what ``require_measured`` may name.
# tests/unit/acceptance/test_outcomes.py keeps it in step with failure.RULES.
CHECK_FAMILIES = (
    "allreduce",
    "checkpoint",
    "container",
    "data",
    "dcgm",
    "gemm",
    "gpu",
    "gpu_perf",
    "gpudirect",
    "h2d",
    "health",
    "mem_bw",
    "multinode",
    "nic",
    "os",
    "pcie",
    "scaling",
    "services",
    "stack_id",
    "storage",
    "topology",
    "train",
    "versions",
)
_CHECK_NAME = re.compile(r"^[a-z0-9_]+(\.[A-Za-z0-9_@.-]+)?\Z")


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
    # The accelerator's compute of one step, emulated the way MLPerf Storage does it (DLIO's
    # `train.computation_time`: a sleep per step, measured by MLPerf on real hardware for the
    # batch of its workload config): the loop's data-wait share is then 1 - its "accelerator
    # utilisation" on any node, GPU or not. None: the loop's steps run the model only.
    train_compute_s: float | None = Field(default=None, gt=0, le=60)
    # Floors of those checks (None: measured and shown, not judged).
    max_read_p99_ms: float | None = Field(default=None, gt=0)
    min_files_per_s: float | None = Field(default=None, gt=0)
    min_checkpoint_write_mbps: float | None = Field(default=None, gt=0)
    min_checkpoint_restore_mbps: float | None = Field(default=None, gt=0)
    # The loop's data-wait share: 1 - MLPerf Storage's accelerator utilisation (AU) when the
    # step's compute is emulated (`train_compute_s`).
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
    # What the all-reduce's NCCL log must show (toolkit/acceptance/nccllog.py); None: shown,
    # not judged. A run without an NCCL log (gloo on CPU ranks) is never judged.
    transport: TransportSpec | None = None
    # `dcgmi diag -r <level> -j` on the node (toolkit/acceptance/dcgm.py); None: not run.
    dcgm_diag: DcgmDiagSpec | None = None
    # The coverage the profile requires: checks (``train.gpu_util``, ``dcgm.memory``) or
    # families of checks (``gemm``: every ``gemm.*``) that must have been measured, passed or
    # failed. A required check that was not measured (skipped, not judged, not covered) or did
    # not run makes the node not ready for ``coverage`` (check.coverage_check); a check not
    # measured and not required never fails a node. Only what the nodes can measure: the lab
    # (CPU ranks) cannot measure GPU utilisation.
    require_measured: list[str] = Field(default_factory=list)

    @field_validator("sweep_min_size", "data_test_size", "checkpoint_size", "train_sample_size")
    @classmethod
    def _sizes(cls, value: str) -> str:
        parse_size(value)
        return value

    @field_validator("require_measured")
    @classmethod
    def _check_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not _CHECK_NAME.match(name):
                raise ValueError(
                    f"{clip(repr(name))} is not a check name like 'gemm' or 'dcgm.memory'"
                )
            family = name.split(".", 1)[0]
            if family not in CHECK_FAMILIES:
                raise ValueError(
                    f"{name!r}: no check family {family!r}"
                    + did_you_mean(family, list(CHECK_FAMILIES))
                )
        if len(value) != len(set(value)):
            raise ValueError("each check may be named once")
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
        if (
            self.max_read_p99_ms is not None
            and self.storage_reads < P99_READS_PER_WORKER * self.storage_read_workers
        ):
            raise ValueError(
                f"storage_reads {self.storage_reads} is below {P99_READS_PER_WORKER} x "
                f"storage_read_workers ({self.storage_read_workers}) while max_read_p99_ms is "
                "set: one stall of the disk or host delays a read of every worker at once, "
                "and with fewer reads than that those reads alone decide the p99"
            )
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


# --- the shipped profiles ------------------------------------------------------------------------

# The floors a shipped profile derives from measurements (issue 23), each with the unit its
# measured figure must be written in: floor = factor x measured (see floors.yml's head).
MEASURED_FLOORS: dict[str, str] = {
    "min_gemm_tflops": "TFLOP/s",
    "min_mem_bw_gbps": "GB/s",
    "min_h2d_gbps": "GB/s",
    "min_busbw_gbps": "GB/s",
}
FloorKey = Literal["min_gemm_tflops", "min_mem_bw_gbps", "min_h2d_gbps", "min_busbw_gbps"]
PROFILES_FILE = "toolkit/profile/floors.yml"


class FloorFactor(StrictModel):
    """The share of a healthy device's measured figure a floor asks for, and why."""

    factor: float = Field(gt=0, le=1)
    source: str = Field(pattern=r"\S")


class FloorFactors(StrictModel):
    """The factor of every measured floor (``floor_factors:`` at the head of floors.yml)."""

    min_gemm_tflops: FloorFactor
    min_mem_bw_gbps: FloorFactor
    min_h2d_gbps: FloorFactor
    min_busbw_gbps: FloorFactor


class Measured(StrictModel):
    """A floor as a shipped profile writes it: a cited figure measured on a healthy device of
    the profile's model (never a datasheet peak). The floor is the key's factor times it."""

    measured: float = Field(gt=0)
    unit: str
    source: str = Field(pattern=r"\S")


class MeasuredBusbw(Measured):
    """A measured large-message all-reduce busbw at one message size."""

    size: str = Field(description='Message size, e.g. "16GiB".')

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> str:
        return format_size(parse_size(value))


_M = TypeVar("_M", bound=Measured)


class ShippedProfile(StrictModel):
    """A profile shipped with gpunode: the floors and the sources they come from.

    ``acceptance`` holds the floors in force; in floors.yml the measured floors
    (:data:`MEASURED_FLOORS`) are written as :class:`Measured` figures and derived by
    :func:`build_profile`. ``floor_factors`` replaces the file's factor of a key for this
    profile only (the lab's floors, toolkit/lab/acceptance.yml, whose figures are of
    emulated nodes).
    """

    description: str
    gpu_model: str | None = None
    gpu_count: int | None = None
    sources: list[str] = Field(min_length=1)
    floor_factors: dict[FloorKey, FloorFactor] = Field(default_factory=dict)
    acceptance: AcceptanceSpec


@lru_cache(maxsize=1)
def _profiles_file() -> dict[str, Any]:
    text = resources.files("toolkit.profile").joinpath("floors.yml").read_text("utf-8")
    data = parse_yaml(text, PROFILES_FILE)
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise ConfigError(f"{PROFILES_FILE}: expected a `profiles:` mapping")
    return data


def shipped_profiles() -> dict[str, dict[str, Any]]:
    """The raw shipped profiles (``floors.yml``), by name."""
    profiles: dict[str, dict[str, Any]] = _profiles_file()["profiles"]
    return profiles


@lru_cache(maxsize=1)
def floor_factors() -> FloorFactors:
    """The factor of each measured floor (``floor_factors:`` in floors.yml).

    Raises:
        ConfigError: A factor is missing, out of range or without its source.
    """

    raw = _profiles_file().get("floor_factors")
    return validate(FloorFactors, raw, PROFILES_FILE, prefix=("floor_factors",))


def shipped_profile(name: str) -> ShippedProfile:
    """One shipped profile, validated, its measured floors derived.

    Raises:
        ConfigError: The name is unknown (with suggestions) or the data is malformed.
    """
    profiles = shipped_profiles()
    if name not in profiles:
        raise ConfigError(
            f"unknown acceptance profile {name!r}" + did_you_mean(name, sorted(profiles))
        )
    return build_profile(name, profiles[name], floor_factors())


def build_profile(
    name: str, raw: Any, factors: FloorFactors, file: str = PROFILES_FILE
) -> ShippedProfile:
    """Validate one profile as floors.yml writes it and derive its measured floors.

    Every GEMM, memory-bandwidth, host-to-device and all-reduce busbw floor is written as a
    :class:`Measured` figure with its source; the floor in force is ``factor x measured``
    (the profile's own ``floor_factors`` first, else ``factors``). A floor without a
    measurement is not written at all: the check is then shown, not judged.

    ``file`` is where the profile was read, for errors (the lab's floors are its own file).

    Raises:
        ConfigError: Naming the file, profile and key: a floor written as a bare number,
            without its measured figure or source, or in another unit than the key's.
    """

    where: tuple[str | int, ...] = ("profiles", name) if file == PROFILES_FILE else ()
    if not isinstance(raw, dict) or not isinstance(raw.get("acceptance"), dict):
        return validate(ShippedProfile, raw, file, prefix=where)
    head = validate(ShippedProfile, {**raw, "acceptance": {}}, file, prefix=where)
    in_force: dict[str, FloorFactor] = dict(factors)
    for key, own in head.floor_factors.items():
        in_force[key] = own
    acceptance = dict(raw["acceptance"])
    loc = (*where, "acceptance")
    for floor_key in MEASURED_FLOORS:
        if floor_key != "min_busbw_gbps" and floor_key in acceptance:
            item = _measured(Measured, acceptance[floor_key], floor_key, (*loc, floor_key), file)
            acceptance[floor_key] = _floor(item, in_force[floor_key])
    for listing in ("allreduce", "multi_node_allreduce"):
        entries = acceptance.get(listing)
        if not isinstance(entries, list):
            continue
        floors = []
        for i, entry in enumerate(entries):
            busbw = _measured(MeasuredBusbw, entry, "min_busbw_gbps", (*loc, listing, i), file)
            factor = in_force["min_busbw_gbps"]
            floors.append(
                {
                    "size": busbw.size,
                    "min_busbw_gbps": _floor(busbw, factor),
                    "source": f"{factor.factor} x {busbw.measured} GB/s measured: {busbw.source}",
                }
            )
        acceptance[listing] = floors
    return validate(ShippedProfile, {**raw, "acceptance": acceptance}, file, prefix=where)


def _measured(model: type[_M], entry: Any, key: str, loc: tuple[str | int, ...], file: str) -> _M:
    """One measured figure, checked: a mapping with its source, in the key's unit."""

    if not isinstance(entry, dict):
        raise ConfigError(
            f"{file}: {format_loc(loc)}: a shipped floor is written as "
            f"{{measured: <figure>, unit: {MEASURED_FLOORS[key]}, source: <where measured>}} "
            f"(the floor is factor x measured), not {clip(repr(entry))}"
        )
    item = validate(model, entry, file, prefix=loc)
    if item.unit != MEASURED_FLOORS[key]:
        raise ConfigError(
            f"{file}: {format_loc((*loc, 'unit'))}: {key} is measured in "
            f"{MEASURED_FLOORS[key]}, not {item.unit!r}"
        )
    return item


def _floor(item: Measured, factor: FloorFactor) -> float:
    """factor x measured, to the thousandth (what a verdict prints as the floor)."""
    return round(factor.factor * item.measured, 3)


# --- a group's floors against its profile's ------------------------------------------------------


@dataclass(frozen=True)
class LooserFloor:
    """A floor a group sets looser than the shipped profile it names (or drops: ``own`` None).

    ``key`` is the AcceptanceSpec key (``allreduce 16GiB`` for one size of a floor list).
    """

    key: str
    own: float | None
    profile: str
    profile_value: float
    source: str


def _looser(key: str, own: float | None, theirs: float) -> bool:
    """Whether ``own`` asks less than ``theirs``: a ``min_*`` (or PCIe link) floor lower, a
    ``max_*`` ceiling higher, or either dropped."""
    if own is None:
        return True
    return own > theirs if key.startswith("max_") else own < theirs


def _floor_source(profile: str, key: str) -> str:
    """Where the profile's figure for ``key`` comes from: factor x measured with its source
    for a measured floor, else the profile in floors.yml."""
    raw = shipped_profiles()[profile].get("acceptance", {}).get(key)
    if isinstance(raw, dict) and "measured" in raw and key in MEASURED_FLOORS:
        own = shipped_profiles()[profile].get("floor_factors") or {}
        factor = (own.get(key) or {}).get("factor") or getattr(floor_factors(), key).factor
        return f"{factor} x {raw['measured']} {raw.get('unit')} measured: {raw.get('source')}"
    return f"{PROFILES_FILE}, profile {profile}, {key}"


def looser_floors(spec: AcceptanceSpec) -> list[LooserFloor]:
    """Every floor ``spec`` sets (or drops) looser than the shipped profile it names.

    Only keys the group writes are compared (the profile's own are in force otherwise):
    ``min_*`` floors and the PCIe link lower, ``max_*`` ceilings higher, and each size of a
    profile's all-reduce floor list the group's list lowers or leaves out.

    Raises:
        ConfigError: The profile's data is malformed.
    """
    if spec.profile is None:
        return []
    name = spec.profile
    base = shipped_profile(name).acceptance
    found: list[LooserFloor] = []
    for key in sorted(spec.model_fields_set):
        theirs = getattr(base, key)
        if key.startswith(("min_", "max_", "pcie_")) and isinstance(theirs, int | float):
            own = getattr(spec, key)
            if _looser(key, own, theirs):
                found.append(LooserFloor(key, own, name, theirs, _floor_source(name, key)))
        elif key in ("allreduce", "multi_node_allreduce"):
            mine = {f.size_bytes: f.min_busbw_gbps for f in getattr(spec, key)}
            for floor in getattr(base, key):
                own = mine.get(floor.size_bytes)
                if _looser("min_busbw_gbps", own, floor.min_busbw_gbps):
                    source = floor.source or f"{PROFILES_FILE}, profile {name}, {key}"
                    label = f"{key} {floor.size}"
                    found.append(LooserFloor(label, own, name, floor.min_busbw_gbps, source))
    return found
