"""The compatibility matrix, read from ``matrix.yml`` (data with a source on every fact)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from toolkit.config import parse_yaml
from toolkit.stack.versions import numeric


@dataclass(frozen=True)
class Source:
    """Where a fact comes from."""

    key: str
    title: str
    url: str

    def __str__(self) -> str:
        return f"{self.title} <{self.url}>"


@dataclass(frozen=True)
class CudaRow:
    """One CUDA release and the minimum driver it needs."""

    release: str
    cuda: tuple[str, ...]
    min_driver: str
    source: Source
    verified: bool = True


@dataclass(frozen=True)
class CudaMajor:
    """The lowest driver branch that runs a CUDA major at all (minor-version compat floor)."""

    major: int
    min_driver_branch: int
    source: Source


@dataclass(frozen=True)
class DriverBranch:
    """A data-center driver branch and its end of life (``YYYY-MM``, last month supported)."""

    branch: int
    kind: str
    eol: str
    source: Source


@dataclass(frozen=True)
class Fact:
    """A value with its source (``verified`` false when not checked upstream)."""

    value: Any
    source: Source
    verified: bool = True


@dataclass(frozen=True)
class Architecture:
    """Rules of one GPU architecture."""

    key: str
    name: str
    flavour: Fact  # open_required | open_recommended | proprietary_only
    last_driver_branch: Fact | None = None
    max_cuda_major: Fact | None = None
    fabric: Fact | None = None  # "imex" where NVLink is not managed by Fabric Manager


@dataclass(frozen=True)
class ComputeCapability:
    """The first CUDA toolkit and driver that support a compute capability."""

    cc: str
    min_cuda: Fact | None
    min_driver: Fact | None


@dataclass(frozen=True)
class Matrix:
    """The whole compatibility matrix."""

    sources: dict[str, Source]
    cuda_rows: tuple[CudaRow, ...]
    cuda_majors: dict[int, CudaMajor]
    branches: dict[int, DriverBranch]
    nccl: Fact
    fabric_manager: Fact
    open_min_branch: Fact
    architectures: dict[str, Architecture]
    compute_capabilities: dict[str, ComputeCapability]
    _by_cuda: dict[str, CudaRow] = field(default_factory=dict, repr=False)

    def cuda_row(self, cuda: str) -> CudaRow | None:
        """The row of an exact CUDA release (``major.minor.patch``), or ``None``."""
        return self._by_cuda.get(cuda)

    def cuda_rows_of_minor(self, major: int, minor: int) -> list[CudaRow]:
        """Rows of one CUDA minor release, lowest patch first."""
        rows = [r for r in self.cuda_rows if numeric(r.cuda[0])[:2] == (major, minor)]
        return sorted(rows, key=lambda r: numeric(r.cuda[0]))


def _fact(data: dict[str, Any] | None, key: str, sources: dict[str, Source]) -> Fact | None:
    if data is None:
        return None
    return Fact(data[key], sources[data["source"]], bool(data.get("verified", True)))


@lru_cache(maxsize=1)
def matrix() -> Matrix:
    """The compatibility matrix shipped with the package."""
    text = resources.files("toolkit.stack").joinpath("matrix.yml").read_text(encoding="utf-8")
    return build(parse_yaml(text, "toolkit/stack/matrix.yml"))


def build(data: dict[str, Any]) -> Matrix:
    """Build the matrix from its parsed data file."""
    sources = {
        key: Source(key, str(value["title"]), str(value["url"]))
        for key, value in data["sources"].items()
    }
    cuda_source = sources[data["cuda_min_driver"]["source"]]
    rows = tuple(
        CudaRow(
            release=str(row["release"]),
            cuda=tuple(str(c) for c in row["cuda"]),
            min_driver=str(row["min_driver"]),
            source=cuda_source,
            verified=bool(row.get("verified", True)),
        )
        for row in data["cuda_min_driver"]["rows"]
    )
    by_cuda = {cuda: row for row in rows for cuda in row.cuda}
    majors = {
        int(row["major"]): CudaMajor(
            int(row["major"]), int(row["min_driver_branch"]), sources[row["source"]]
        )
        for row in data["cuda_majors"]
    }
    branches = {
        int(row["branch"]): DriverBranch(
            int(row["branch"]), str(row["kind"]), str(row["eol"]), sources[row["source"]]
        )
        for row in data["driver_branches"]
    }
    architectures = {}
    for key, arch in data["architectures"].items():
        flavour = _fact(arch["flavour"], "rule", sources)
        assert flavour is not None
        architectures[key] = Architecture(
            key=key,
            name=str(arch["name"]),
            flavour=flavour,
            last_driver_branch=_fact(arch.get("last_driver_branch"), "branch", sources),
            max_cuda_major=_fact(arch.get("max_cuda_major"), "major", sources),
            fabric=_fact(arch.get("fabric"), "kind", sources),
        )
    capabilities = {}
    for cc, entry in data["compute_capabilities"].items():
        min_cuda = min_driver = None
        if entry.get("min_cuda") is not None:
            min_cuda = _fact(entry, "min_cuda", sources)
            min_driver = _fact(entry, "min_driver", sources)
        capabilities[str(cc)] = ComputeCapability(str(cc), min_cuda, min_driver)
    nccl = _fact(data["nccl"], "rule", sources)
    fabric = _fact(data["fabric_manager"], "rule", sources)
    open_min = _fact(data["open_modules_min_branch"], "branch", sources)
    assert nccl is not None and fabric is not None and open_min is not None
    return Matrix(
        sources=sources,
        cuda_rows=rows,
        cuda_majors=majors,
        branches=branches,
        nccl=nccl,
        fabric_manager=fabric,
        open_min_branch=open_min,
        architectures=architectures,
        compute_capabilities=capabilities,
        _by_cuda=by_cuda,
    )
