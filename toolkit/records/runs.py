"""The runs folder: one owner for where runs live, how they are named and how they rotate.

Every invocation that touches nodes (a playbook, an ad-hoc module, an acceptance run, an
image build, ``gpunode up``) records itself in a folder ``<state>/runs/<run-id>/``, where
``<state>`` is ``$GPUNODE_STATE_DIR`` or ``./.gpunode``. A run id is
``<UTC time>-<kind>-<6 hex>``: it sorts by time and says what made it.

Rotation is per kind: routine runs (provision, status, drift ...) only ever remove older
runs of their own kind. **Evidence** (acceptance, ``up`` and ``rollout`` runs) is
never removed by routine runs: it stays until ``gpunode runs prune`` removes it, or until a
count configured for its own kind (``$GPUNODE_KEEP_EVIDENCE_RUNS``) is exceeded. Folders whose
name is not a run id (older formats, anything a person put there) are never removed
automatically.

What gpunode reads back from a run folder is read here too, each kind of file by one reader
with its schema, through the one bounded read (``toolkit.config.read_regular``: a regular
file, no link, at most its kind's size): an acceptance run's record (``run.json``,
``read_record``: the node passport and the fleet report read it), each node's runner result
(``nodes/<host>.result.json``, ``read_result``) and a passive check's record (``check.json``,
``read_check_record``). A file that does not match is a ``ConfigError`` naming the file and
the key path. A rollout's record (``rollout.json``) has its own owner, which writes it as
well as reading it: ``toolkit.rollout.record``, through the same bounded read.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolkit.config import load_json, validate
from toolkit.errors import ConfigError

# How many runs of one routine kind are kept (the oldest of that kind go first).
KEEP_ROUTINE = 30
# Kinds whose runs are evidence a handover needs: never rotated by routine runs. A rollout's
# record is kept with them: a later run resumes from it (toolkit.rollout.record).
EVIDENCE_KINDS = frozenset({"accept", "up", "rollout"})
# Set to a number to keep only that many runs of each evidence kind (unset: keep all).
KEEP_EVIDENCE_ENV = "GPUNODE_KEEP_EVIDENCE_RUNS"

RUN_ID = re.compile(
    r"^(?P<time>[0-9]{8}T[0-9]{6}Z)-(?P<kind>[a-z][a-z0-9_]*)-(?P<tag>[0-9a-f]{6})\Z"
)
_KIND_CHARS = re.compile(r"[^a-z0-9_]+")


@dataclass(frozen=True)
class RunInfo:
    """One recorded run."""

    run_id: str
    kind: str | None  # None: not a run id (never rotated automatically)
    path: Path

    @property
    def evidence(self) -> bool:
        """Whether routine rotation must leave this run alone."""
        return self.kind is None or self.kind in EVIDENCE_KINDS

    @property
    def started(self) -> datetime | None:
        """The start time encoded in the id."""
        match = RUN_ID.match(self.run_id)
        if not match:
            return None
        return datetime.strptime(match["time"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)

    def to_dict(self) -> dict[str, object]:
        """As JSON-ready data."""
        started = self.started
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "evidence": self.evidence,
            "started": started.isoformat() if started else None,
            "path": str(self.path),
        }


def state_dir() -> Path:
    """The control machine's state directory: ``$GPUNODE_STATE_DIR`` or ``./.gpunode``."""
    env = os.environ.get("GPUNODE_STATE_DIR")
    return Path(env) if env else Path.cwd() / ".gpunode"


def runs_dir() -> Path:
    """Where runs are recorded: ``<state>/runs``."""
    return state_dir() / "runs"


def kind_name(label: str) -> str:
    """A run kind from a label (a playbook file, a module name): lower case, ``[a-z0-9_]``."""
    stem = Path(label).stem if label.endswith((".yml", ".yaml")) else label.rsplit(".", 1)[-1]
    kind = _KIND_CHARS.sub("_", stem.lower()).strip("_")
    if not kind or not kind[0].isalpha():
        kind = f"run_{kind}" if kind else "run"
    return kind


def new_run_id(kind: str, now: datetime | None = None) -> str:
    """A sortable, unique run id: UTC time, the kind and six random hex digits."""
    now = now or datetime.now(timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{kind_name(kind)}-{secrets.token_hex(3)}"


def kind_of(run_id: str) -> str | None:
    """The kind encoded in a run id, or None when the name is not a run id."""
    match = RUN_ID.match(run_id)
    return match["kind"] if match else None


def list_runs(runs: Path | None = None, kind: str | None = None) -> list[RunInfo]:
    """The recorded runs, oldest first (optionally of one kind).

    Raises:
        ConfigError: The runs folder exists but is not a folder, or cannot be read.
    """
    runs = runs if runs is not None else runs_dir()
    if not _usable_folder(runs):
        return []
    try:
        found = [
            RunInfo(run_id=p.name, kind=kind_of(p.name), path=p)
            for p in sorted(runs.iterdir(), key=lambda p: p.name)
            if p.is_dir()
        ]
    except OSError as err:
        raise ConfigError(f"{runs}: cannot read the runs folder: {err.strerror or err}") from None
    return [r for r in found if kind is None or r.kind == kind]


def _usable_folder(runs: Path) -> bool:
    """Whether the runs folder exists (False: nothing recorded yet).

    Raises:
        ConfigError: It exists and is not a folder.
    """
    if runs.is_dir():
        return True
    if os.path.lexists(runs):
        raise ConfigError(
            f"{runs}: not a directory; the runs folder ($GPUNODE_STATE_DIR/runs) must be one"
        )
    return False


def evidence_keep() -> int | None:
    """The configured number of evidence runs kept per kind (None: all of them).

    Raises:
        ConfigError: The variable is set but not a positive whole number.
    """
    text = os.environ.get(KEEP_EVIDENCE_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(f"{KEEP_EVIDENCE_ENV}={text!r}: expected a whole number of 1 or more")
    return int(text)


def rotate(runs: Path, kind: str) -> list[Path]:
    """Apply the rotation rule for ``kind`` after a run of that kind was started.

    Routine kinds keep their newest ``KEEP_ROUTINE``; evidence kinds keep everything unless
    ``$GPUNODE_KEEP_EVIDENCE_RUNS`` says otherwise. Other kinds' runs are never touched.

    Returns:
        The folders removed.
    """
    kind = kind_name(kind)
    keep = evidence_keep() if kind in EVIDENCE_KINDS else KEEP_ROUTINE
    if keep is None:
        return []
    return _remove_oldest(list_runs(runs, kind), keep)


def prune(runs: Path | None = None, kind: str | None = None, keep: int = 0) -> list[Path]:
    """Remove all but the newest ``keep`` runs of each kind (or of ``kind``), evidence too.

    This is the explicit, user-asked removal (``gpunode runs prune``); folders that are not
    run ids are left alone.

    Returns:
        The folders removed.
    """
    if keep < 0:
        raise ConfigError(f"--keep {keep}: expected 0 or more")
    removed: list[Path] = []
    by_kind: dict[str, list[RunInfo]] = {}
    for info in list_runs(runs, kind):
        if info.kind is not None:
            by_kind.setdefault(info.kind, []).append(info)
    for infos in by_kind.values():
        removed += _remove_oldest(infos, keep)
    return removed


def _remove_oldest(infos: list[RunInfo], keep: int) -> list[Path]:
    doomed = infos[: max(0, len(infos) - keep)]
    for info in doomed:
        shutil.rmtree(info.path, ignore_errors=True)
    return [info.path for info in doomed]


def start_run(kind: str, runs: Path | None = None, now: datetime | None = None) -> Path:
    """Create the folder of a new run of ``kind`` and rotate that kind's old runs.

    Returns:
        The new run's folder (its name is the run id).
    """
    runs = runs if runs is not None else runs_dir()
    _usable_folder(runs)
    run_dir = runs / new_run_id(kind, now)
    try:
        run_dir.mkdir(parents=True, exist_ok=False)
    except (FileExistsError, NotADirectoryError) as err:
        raise ConfigError(f"{run_dir}: cannot create the run folder: {err.strerror}") from None
    rotate(runs, kind)
    return run_dir


# --- the acceptance record, as its readers read it --------------------------------------------
# The fleet report (toolkit.report.fleet) and the node passport (toolkit.records.passport) read it
# through read_record. Only the keys they read are checked; a record carries more (acceptance's
# run summary), kept as they are. Numbers are strict: "fast" is no busbw, 1.5 no size.

RECORD = "run.json"  # an acceptance run's record (toolkit.report.write_reports writes it)


class _Entry(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class _Check(_Entry):
    name: str
    ok: bool
    message: str | None = None


class _Failed(_Entry):
    check: str
    message: str | None = None


class _Row(_Entry):
    size_bytes: int = Field(ge=0)
    busbw_gbps: float = Field(ge=0)


class _Floor(_Entry):
    size_bytes: int = Field(ge=0)
    min_busbw_gbps: float = Field(ge=0)


class _Reads(_Entry):
    p99_ms: float | None = Field(default=None, ge=0)


class _Training(_Entry):
    reads: _Reads | None = None


class _Node(_Entry):
    host: str
    verdict: str
    group: str | None = None
    training: _Training | None = None
    installed_stack_id: str | None = None
    busbw_at_largest_gbps: float | None = Field(default=None, ge=0)
    checks: list[_Check] = []
    failed_checks: list[_Failed] = []
    allreduce_rows: list[_Row] = []
    floors: list[_Floor] | None = None


class RunRecord(_Entry):
    """An acceptance run's ``run.json``: the keys the fleet report and the passport read."""

    run_id: str
    started: str | None = None
    nodes: list[_Node]


def read_record(path: Path) -> dict[str, Any]:
    """One acceptance run's record, checked against :class:`RunRecord`.

    Raises:
        ConfigError: Not a regular file, too large, not strict JSON, or not a run record
            (the file, the key path and the rule are named; exit 2).
    """
    data = load_json(path, "run record", follow=False)
    return validate(RunRecord, data, path).model_dump()


# --- a node's runner result and a passive check's record, as the passport reads them ----------
# Only the keys the passport reads are checked (a node's identity, its GPUs and counters, the
# GEMM and memory-bandwidth figures); the rest of what the runner or the check keeps is left as
# it is. A value the node could not read is null, never another type.

RESULT_SUFFIX = ".result.json"  # nodes/<host>.result.json (toolkit.steps.accept writes it)
CHECK_RECORD = "check.json"  # a passive check's record (toolkit.steps.check writes it)


class _RemappedRows(_Entry):
    correctable: int | None = None
    uncorrectable: int | None = None


class _Gpu(_Entry):
    index: int | None = None
    bus_id: str | None = None
    serial: str | None = None
    uuid: str | None = None
    remapped_rows: _RemappedRows | None = None


class _Dmi(_Entry):
    sys_vendor: str | None = None
    product_name: str | None = None
    product_serial: str | None = None
    board_serial: str | None = None


class _Nic(_Entry):
    name: str | None = None
    mac: str | None = None
    physical: bool | None = None


class _BlockDevice(_Entry):
    name: str | None = None
    type: str | None = None
    serial: str | None = None


class _Lsblk(_Entry):
    blockdevices: list[_BlockDevice] | None = None


class _Identity(_Entry):
    dmi: _Dmi | None = None
    nics: list[_Nic] | None = None
    lsblk: _Lsblk | None = None


class _GpuList(_Entry):
    listed: list[_Gpu] | None = Field(default=None, alias="list")


class _Gemm(_Entry):
    tflops: float | None = Field(default=None, ge=0)


class _MemBw(_Entry):
    gbps: float | None = Field(default=None, ge=0)


class _GpuPerf(_Entry):
    gemm: list[_Gemm] | None = None
    mem_bw: list[_MemBw] | None = None


class NodeResult(_Entry):
    """A node's runner result (``nodes/<host>.result.json``): the keys the passport reads."""

    identity: _Identity | None = None
    gpus: _GpuList | None = None
    gpu_perf: _GpuPerf | None = None


class _CheckFacts(_Entry):
    gpus: list[_Gpu] | None = None
    identity: _Identity | None = None


class CheckNode(_Entry):
    """One node of a passive check's record: its checks and what it read of the node."""

    ok: bool | None = None
    error: str | None = None
    checks: list[_Check] | None = None
    facts: _CheckFacts | None = None


class CheckRecord(_Entry):
    """A passive check's ``check.json``: one entry per node, each checked on its own."""

    nodes: dict[str, Any]


def read_result(path: Path) -> dict[str, Any]:
    """One node's runner result, checked against :class:`NodeResult`.

    Raises:
        ConfigError: Not a regular file, too large, not strict JSON, or not a result (the
            file, the key path and the rule are named).
    """
    return check_result(load_json(path, "result file", follow=False), path)


def check_result(data: Any, source: str | Path) -> dict[str, Any]:
    """A node's runner result (as it came back from the node, or read back from its file)
    checked against :class:`NodeResult`.

    Raises:
        ConfigError: Not a result (``source``, the key path and the rule are named).
    """
    return validate(NodeResult, data, source).model_dump(by_alias=True)


def read_check_record(path: Path) -> dict[str, dict[str, Any] | ConfigError]:
    """A passive check's record: per node, its entry checked against :class:`CheckNode`, or
    the problem with it (one malformed node does not hide the others).

    Raises:
        ConfigError: The file as a whole cannot be read or has no object of nodes.
    """
    record = validate(CheckRecord, load_json(path, "check record", follow=False), path)
    nodes: dict[str, dict[str, Any] | ConfigError] = {}
    for host, node in record.nodes.items():
        try:
            nodes[host] = validate(CheckNode, node, path, prefix=("nodes", host)).model_dump()
        except ConfigError as err:
            nodes[host] = err
    return nodes
