"""The GPU catalog: model names, the names nvidia-smi prints, architecture, compute capability,
PCI device ids and the boards (name, device id, memory) the lab emulates.

The data lives in ``gpus.yml`` next to this module; it is the one list of GPU models.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from toolkit.config import did_you_mean, parse_yaml
from toolkit.errors import ConfigError
from toolkit.stack import gpunames
from toolkit.stack.gpunames import normalise


@dataclass(frozen=True)
class GpuBoard:
    """One board of a model as ``nvidia-smi`` reports it."""

    name: str  # `--query-gpu=name`, one of the model's names
    pci_device_id: str  # one of the model's ids ("2330")
    memory_total_mib: int  # `--query-gpu=memory.total`
    source: str


@dataclass(frozen=True)
class GpuInfo:
    """One GPU model of the catalog."""

    model: str
    architecture: str
    compute_capability: str
    names: tuple[str, ...]
    nvlsm: bool = False
    pci_device_ids: tuple[str, ...] = ()  # "2330" for 10de:2330, as lspci -nn prints it
    boards: tuple[GpuBoard, ...] = ()

    def board(self, name: str) -> GpuBoard:
        """The board of this model that nvidia-smi names ``name``.

        Raises:
            ConfigError: The catalog lists no such board of this model.
        """
        for board in self.boards:
            if board.name == name:
                return board
        known = ", ".join(b.name for b in self.boards) or "none"
        raise ConfigError(f"toolkit/stack/gpus.yml: {self.model} has no board {name!r} ({known})")


@lru_cache(maxsize=1)
def catalog() -> tuple[GpuInfo, ...]:
    """Every GPU model of the catalog, in file order."""
    text = resources.files("toolkit.stack").joinpath("gpus.yml").read_text(encoding="utf-8")
    data = parse_yaml(text, "toolkit/stack/gpus.yml")
    return tuple(_info(entry) for entry in data["gpus"])


def _info(entry: dict[str, Any]) -> GpuInfo:
    """One entry of gpus.yml; a board must carry one of its model's names and device ids."""
    info = GpuInfo(
        model=str(entry["model"]),
        architecture=str(entry["architecture"]),
        compute_capability=str(entry["compute_capability"]),
        names=tuple(str(n) for n in entry.get("names", ())),
        nvlsm=bool(entry.get("nvlsm", False)),
        pci_device_ids=tuple(str(i).lower() for i in entry.get("pci_device_ids", ())),
    )
    boards = []
    for raw in entry.get("boards", ()):
        board = GpuBoard(
            name=str(raw["name"]),
            pci_device_id=str(raw["pci_device_id"]).lower(),
            memory_total_mib=int(raw["memory_total_mib"]),
            source=str(raw["source"]),
        )
        if board.name not in info.names or board.pci_device_id not in info.pci_device_ids:
            raise ConfigError(
                f"toolkit/stack/gpus.yml: {info.model}: board {board.name!r} "
                f"({board.pci_device_id}) is not one of the model's names and device ids"
            )
        boards.append(board)
    return replace(info, boards=tuple(boards))


@lru_cache(maxsize=1)
def _index() -> dict[str, GpuInfo]:
    index: dict[str, GpuInfo] = {}
    for info in catalog():
        for name in (info.model, *info.names):
            index.setdefault(normalise(name), info)
    return index


def model_index() -> dict[str, str]:
    """Every name of the catalogue (normalised) -> its model: what a node-side check that
    cannot read ``gpus.yml`` finds names in (``gpunames.find``)."""
    return {name: info.model for name, info in _index().items()}


def model_of(name: str) -> str | None:
    """The catalogue's model of a GPU name (``NVIDIA H100 80GB HBM3`` -> ``H100``), or None."""
    info = lookup_gpu(name)
    return info.model if info else None


def lookup_gpu(name: str) -> GpuInfo | None:
    """Find a GPU by short name (``H100``) or nvidia-smi name (``NVIDIA H100 80GB HBM3``).

    Unlisted variants of a known model are found by their first word
    (``NVIDIA A100-SXM4-40GB`` style names split at ``-`` too).

    Returns:
        The catalog entry, or ``None`` when the name is unknown.
    """
    return gpunames.find(_index(), name)


def lookup_gpu_by_pci_id(device_id: str) -> GpuInfo | None:
    """Find a GPU by its NVIDIA PCI device id (``2330`` or ``10de:2330``), or ``None``."""
    key = device_id.strip().lower().removeprefix("10de:").removeprefix("0x")
    for info in catalog():
        if key in info.pci_device_ids:
            return info
    return None


def gpu(name: str) -> GpuInfo:
    """Like :func:`lookup_gpu`, but an unknown name is an error with the closest names.

    Raises:
        ConfigError: The name is not in the catalog.
    """
    info = lookup_gpu(name)
    if info is None:
        raise ConfigError(unknown_gpu_message(name))
    return info


def unknown_gpu_message(name: str) -> str:
    """The message for a GPU name the catalog does not know, with suggestions."""
    models = [info.model for info in catalog()]
    return f"unknown GPU model {name!r}" + did_you_mean(name.upper(), models)
