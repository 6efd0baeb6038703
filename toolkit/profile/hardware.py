"""The hardware profile: what every node of a group must have, and the one-file stack.

The GPUs (``stack.models.GpuSpec``), the data disks (``disks.spec``) and the acceptance
floors (``floors.AcceptanceSpec``) in one schema, the ``hardware:`` of an inventory group or
of a one-file stack. It sits above the three schemas it puts together, so that none of them
reads another's (``stack`` checks a profile through ``stack.models.Hardware``), and below
the inventory reader, so nothing that reads hosts is beneath it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from toolkit.config import StrictModel, load_yaml, validate
from toolkit.disks.spec import DataDisksSpec
from toolkit.errors import ConfigError
from toolkit.profile.floors import AcceptanceSpec
from toolkit.stack.models import AcceptedRisk, GpuSpec, Stack


class HardwareProfile(StrictModel):
    """What every node of a group must have: GPUs, data disks, acceptance thresholds."""

    gpu: GpuSpec
    data_disks: DataDisksSpec | None = None
    acceptance: AcceptanceSpec | None = None


class StackFile(StrictModel):
    """The one-file form: ``stack:`` and ``hardware:`` (and accepted risks) in one document."""

    stack: Stack
    hardware: HardwareProfile
    gpunode_accepted_risks: list[AcceptedRisk] = Field(default_factory=list)


def load_stack_file(path: str | Path) -> StackFile:
    """Read and validate a one-file stack.

    Raises:
        ConfigError: Bad YAML, not a mapping, a missing or unknown key, or a wrong value;
            the message names the file and the key path.
    """
    data = load_yaml(path)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{path}: expected a mapping with `stack:` and `hardware:`, got {kind}")
    return validate(StackFile, data, path)
