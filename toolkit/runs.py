"""The runs folder: one owner for where runs live, how they are named and how they rotate.

Every invocation that touches nodes (a playbook, an ad-hoc module, an acceptance run, an
image build, ``gpunode up``) records itself in a folder ``<state>/runs/<run-id>/``, where
``<state>`` is ``$GPUNODE_STATE_DIR`` or ``./.gpunode``. A run id is
``<UTC time>-<kind>-<6 hex>``: it sorts by time and says what made it.

Rotation is per kind: routine runs (provision, status, drift ...) only ever remove older
runs of their own kind. **Evidence** (acceptance and ``up`` runs, with their reports) is
never removed by routine runs: it stays until ``gpunode runs prune`` removes it, or until a
count configured for its own kind (``$GPUNODE_KEEP_EVIDENCE_RUNS``) is exceeded. Folders whose
name is not a run id (older formats, anything a person put there) are never removed
automatically.

An acceptance run's record (``run.json``) is read here too, once for its readers: the node
passport and the fleet report (``read_record``).
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
# Kinds whose runs are evidence a handover needs: never rotated by routine runs.
EVIDENCE_KINDS = frozenset({"accept", "up"})
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
# The fleet report (toolkit.report.fleet) and the node passport (toolkit.passport) read it
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


class _Node(_Entry):
    host: str
    verdict: str
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
    return validate(RunRecord, load_json(path, "run record"), path).model_dump()
