"""The stack schema, the GPUs a group must have, and accepted risks.

The whole hardware profile (GPUs, data disks, acceptance floors) and the one-file form
``{stack:, hardware:}`` are ``toolkit.profile.hardware``, above this package and acceptance.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BeforeValidator, Field, StrictBool, field_validator

from toolkit.config import StrictModel, validate
from toolkit.stack import catalog
from toolkit.stack.security import Cve
from toolkit.stack.versions import CUDA_RE, DRIVER_RE, NCCL_RE, PLAIN_RE

CUDNN_RE = re.compile(
    r"^([0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}"
    r"|8\.[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}-[0-9]{1,4}\+cuda[0-9]{1,2}\.[0-9]{1,2})\Z"
)
DCGM_RE = re.compile(r"^[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4}\Z")


def _quoted(value: Any) -> Any:
    # YAML reads `cuda: 12.10` as the float 12.1: versions must be quoted strings.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"write versions as quoted strings (YAML read {value!r} as a number)")
    return value


def _matches(pattern: re.Pattern[str], example: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"not a version like {example}")
        return value

    return AfterValidator(check)


_Quoted = BeforeValidator(_quoted)
DriverVersion = Annotated[str, _Quoted, _matches(DRIVER_RE, '"580.95.05"')]
CudaVersion = Annotated[str, _Quoted, _matches(CUDA_RE, '"12.4.1" or "12.8"')]
NcclVersion = Annotated[
    str, _Quoted, _matches(NCCL_RE, '"2.21.5-1+cuda12.4" (with its +cuda build)')
]
PlainVersion = Annotated[str, _Quoted, _matches(PLAIN_RE, '"1.16.2"')]
CudnnVersion = Annotated[
    str, _Quoted, _matches(CUDNN_RE, '"9.1.0.70" (cuDNN 9+) or "8.9.7.29-1+cuda12.2" (cuDNN 8)')
]
DcgmVersion = Annotated[str, _Quoted, _matches(DCGM_RE, '"4.1.1"')]


class DriverPin(StrictModel):
    """The NVIDIA driver: exact version and kernel module flavour."""

    version: DriverVersion = Field(description='Exact driver version, e.g. "580.95.05".')
    flavour: Literal["open", "proprietary"] = Field(description="Kernel module flavour.")


class Stack(StrictModel):
    """The pinned NVIDIA software of a group of nodes."""

    driver: DriverPin
    cuda: CudaVersion = Field(description='CUDA toolkit version, e.g. "12.4.1".')
    nccl: NcclVersion = Field(description='NCCL package version, e.g. "2.21.5-1+cuda12.4".')
    fabric_manager: str = Field(
        default="auto",
        description='"auto" (the driver version where NVSwitch is present), "none", or a version.',
    )
    container_toolkit: PlainVersion = Field(description='NVIDIA container toolkit, e.g. "1.16.2".')
    nvlsm: PlainVersion | None = Field(
        default=None,
        description='NVLink Subnet Manager (package nvlsm, a date version such as "2025.06.10"), '
        "needed beside Fabric Manager on fourth-generation NVSwitch systems (HGX B200/B300).",
    )
    cudnn: CudnnVersion | None = None
    dcgm: DcgmVersion | None = None
    cuda_minor_version_compat: StrictBool = Field(
        default=False,
        description="Allow a driver below the toolkit's own minimum (CUDA minor-version "
        "compatibility); the checker then warns instead of failing.",
    )

    @field_validator("fabric_manager", mode="before")
    @classmethod
    def _fabric_manager(cls, value: Any) -> Any:
        value = _quoted(value)
        if value in ("auto", "none") or (isinstance(value, str) and DRIVER_RE.match(value)):
            return value
        raise ValueError('must be "auto", "none" or a driver version like "580.95.05"')


class GpuSpec(StrictModel):
    """The GPUs every node of the group must have."""

    model: str = Field(description='Short name ("H100") or the name nvidia-smi prints.')
    count: int = Field(ge=1, le=64, strict=True)
    nvswitch: StrictBool = False

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if catalog.lookup_gpu(value) is None:
            raise ValueError(catalog.unknown_gpu_message(value))
        return value

    @property
    def info(self) -> catalog.GpuInfo:
        """The catalog entry of this model."""
        return catalog.gpu(self.model)


class Hardware(Protocol):
    """What the stack's rules read of a hardware profile
    (``toolkit.profile.hardware.HardwareProfile``, which sits above this package): its GPUs."""

    @property
    def gpu(self) -> GpuSpec:
        """The GPUs every node of the group must have."""
        ...


# The variable (inventory group vars, or a key of the one-file form) that accepts the risk of
# running a version below a security floor (toolkit/stack/security.yml), CVE by CVE.
ACCEPTED_RISKS_KEY = "gpunode_accepted_risks"


class AcceptedRisk(StrictModel):
    """One CVE whose risk the owner of the nodes accepts: why, and until when."""

    cve: Cve = Field(description='The CVE id, e.g. "CVE-2025-23266".')
    reason: str = Field(min_length=1, description="Why the risk is accepted.")
    until: date | None = Field(
        default=None, description="The last day the acceptance holds (YYYY-MM-DD); none: always."
    )


class AcceptedRisks(StrictModel):
    """The value of ``gpunode_accepted_risks``, validated on its own (inventory group vars)."""

    gpunode_accepted_risks: list[AcceptedRisk]


def parse_accepted_risks(value: Any, source: str | Path) -> tuple[AcceptedRisk, ...]:
    """Validate the value of ``gpunode_accepted_risks`` read from ``source``.

    Raises:
        ConfigError: Not a list of ``{cve, reason, until}``; the message names the source
            and the key path (``gpunode_accepted_risks[0].cve``).
    """
    risks = validate(AcceptedRisks, {ACCEPTED_RISKS_KEY: value}, source)
    return tuple(risks.gpunode_accepted_risks)
