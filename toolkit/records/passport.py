"""The node passport: a node's hardware identity, counters and figures over time, and flags.

Read from the recorded runs (``toolkit.records.runs``, whose readers bound and check each file):
acceptance runs (``run.json`` and each node's ``nodes/<host>.result.json``: evidence, never
rotated away) and passive checks (``check.json``, routine runs: the latest 30 are kept). The
passport is a reading of the runs, so it is as old as the oldest run kept; what was read from
each run is kept in its folder (``observations.json``, :func:`read_run`) so that each run is
parsed once. A run file that cannot be read (not a regular file, too large, not JSON, or not
the shape its schema says) is a :class:`Problem` naming the run, the node, the file and the
key path: the other runs and nodes are still read, and the problem is shown with the passport.

Per observation (one run that reached the node): the system's DMI serials, each GPU's slot
(PCI bus id), serial and UUID, NIC MACs and disk serials (what the runner records), the
memory counters (remapped rows), and the acceptance figures (busbw at the largest size, the
weakest GPU's GEMM and memory bandwidth, the storage read p99).

Flags, each naming the runs it compares:

- ``gpu-swapped``: a slot's GPU serial or UUID changed between two observations;
- ``failed-part-returned``: a GPU serial that failed a check in an earlier run (on any node),
  was then taken out of that node, and is back (the same broken part after an RMA, the
  "Humpty Dumpty" GPU);
- ``remaps-rising``: a GPU's remapped rows rose in each of its last ``RISING_READINGS`` - 1
  steps (a GPU whose remaps keep growing keeps corrupting jobs even while each run passes);
- ``below-baseline``: the latest figure at least ``share`` below the median of the node's
  previous ``BASELINE_RUNS`` acceptance runs (above it, for latency), floors aside: a figure
  can drift a long way while still above its floor; the median and MAD (median absolute
  deviation) say how the baseline itself varies;
- ``below-fleet``: the latest figure at least ``share`` below the median of the latest
  figures of the other nodes of the same group (the same hardware profile), when there are
  at least ``MIN_FLEET_PEERS`` of them.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from toolkit.config import load_json
from toolkit.errors import ConfigError
from toolkit.names import name_path
from toolkit.records import runs

CHECK_RECORD = runs.CHECK_RECORD
OBSERVATIONS = "observations.json"  # what the passport read from a run, kept in its folder
BASELINE_RUNS = 5
MIN_BASELINE_RUNS = 3
DEFAULT_SHARE = 0.30
RISING_READINGS = 3
# A fleet median needs at least this many other nodes: against one peer a node is only
# compared with that peer's own noise.
MIN_FLEET_PEERS = 2
# name -> (unit, higher is better)
FIGURES = {
    "busbw_gbps": ("GB/s", True),
    "gemm_tflops": ("TFLOPS", True),
    "mem_bw_gbps": ("GB/s", True),
    "storage_p99_ms": ("ms", False),
}


@dataclass
class Observation:
    """One run's view of one node."""

    run_id: str
    kind: str  # accept | check
    started: str | None
    group: str | None = None
    ok: bool | None = None
    system: dict[str, Any] = field(default_factory=dict)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    nics: dict[str, str | None] = field(default_factory=dict)
    disks: dict[str, str | None] = field(default_factory=dict)
    failed_slots: list[str] = field(default_factory=list)  # bus ids named by failed checks
    figures: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "started": self.started,
            "group": self.group,
            "ok": self.ok,
            "system": self.system,
            "gpus": self.gpus,
            "nics": self.nics,
            "disks": self.disks,
            "failed_slots": self.failed_slots,
            "figures": self.figures,
        }


# Every node's observations, oldest first (what fleet_observations reads).
Fleet = Mapping[str, list[Observation]]


@dataclass(frozen=True)
class Flag:
    """Something the passport says about a node."""

    kind: str
    message: str
    run_id: str

    def to_dict(self) -> dict[str, str]:
        """As JSON-ready data."""
        return {"kind": self.kind, "message": self.message, "run_id": self.run_id}


@dataclass(frozen=True)
class Problem:
    """A run file the passport could not read: its run, the node it is about (None: the whole
    run) and what is wrong with it (the file, the key path and the rule)."""

    run_id: str
    host: str | None
    message: str

    def to_dict(self) -> dict[str, str | None]:
        """As JSON-ready data."""
        return {"run_id": self.run_id, "host": self.host, "message": self.message}


@dataclass
class Reading:
    """What the recorded runs say: every node's observations, oldest first, and the problems
    with the run files that could not be read."""

    observations: dict[str, list[Observation]]
    problems: list[Problem]


@dataclass
class Passport:
    """A node's observations, oldest first, its flags, and the problems with the run files
    that may concern it (its own, and those of whole runs)."""

    host: str
    observations: list[Observation]
    flags: list[Flag]
    problems: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "host": self.host,
            "observations": [o.to_dict() for o in self.observations],
            "flags": [f.to_dict() for f in self.flags],
            "problems": [p.to_dict() for p in self.problems],
        }


# --- reading the runs ------------------------------------------------------------------------


def _slot(bus_id: Any) -> str:
    """A GPU's slot as the checks' messages name it (``0000:18:00``, lower case): nvidia-smi
    says ``00000000:18:00.0``, the kernel's XID lines ``0000:18:00``, sysfs ``0000:18:00.0``."""
    text = str(bus_id or "").lower()
    return text[4:14] if len(text) >= 14 and text.count(":") == 2 else text[:10]


def _identity(obs: Observation, identity: Mapping[str, Any] | None) -> None:
    identity = identity or {}
    dmi = identity.get("dmi") or {}
    obs.system = {
        k: dmi.get(k) for k in ("sys_vendor", "product_name", "product_serial", "board_serial")
    }
    obs.nics = {
        str(n.get("name")): n.get("mac") for n in identity.get("nics") or [] if n.get("physical")
    }
    devices = (identity.get("lsblk") or {}).get("blockdevices") or []
    obs.disks = {str(d.get("name")): d.get("serial") for d in devices if d.get("type") == "disk"}


def _gpus(listed: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for g in listed:
        rows = g.get("remapped_rows") or {}
        counts = [rows.get(k) for k in ("correctable", "uncorrectable")]
        out.append(
            {
                "index": g.get("index"),
                "bus_id": g.get("bus_id"),
                "serial": g.get("serial"),
                "uuid": g.get("uuid"),
                "remapped_rows": sum(c for c in counts if isinstance(c, int))
                if any(isinstance(c, int) for c in counts)
                else None,
            }
        )
    return out


def _failed_slots(gpus: list[dict[str, Any]], failed_messages: Iterable[str]) -> list[str]:
    text = " ".join(failed_messages).lower()
    return [str(g["bus_id"]) for g in gpus if g.get("bus_id") and _slot(g["bus_id"]) in text]


def _weakest(entries: Any, key: str) -> float | None:
    values = [
        float(e[key]) for e in entries or [] if isinstance(e, dict) and e.get(key) is not None
    ]
    return min(values) if values else None


def accept_observation(
    run_id: str, started: str | None, node: Mapping[str, Any], result: Mapping[str, Any] | None
) -> Observation:
    """One node's observation in an acceptance run: its summary in the run's record and its
    runner result (None: the run kept none)."""
    obs = Observation(run_id, "accept", started, node.get("group"))
    obs.ok = node.get("verdict") == "ready"
    result = result or {}
    _identity(obs, result.get("identity"))
    obs.gpus = _gpus((result.get("gpus") or {}).get("list") or [])
    obs.failed_slots = _failed_slots(
        obs.gpus, (str(f.get("message") or "") for f in node.get("failed_checks") or [])
    )
    perf = result.get("gpu_perf") or {}
    p99 = (((node.get("training") or {}).get("reads")) or {}).get("p99_ms")
    figures = {
        "busbw_gbps": node.get("busbw_at_largest_gbps"),
        "gemm_tflops": _weakest(perf.get("gemm"), "tflops"),
        "mem_bw_gbps": _weakest(perf.get("mem_bw"), "gbps"),
        "storage_p99_ms": p99,
    }
    obs.figures = {k: float(v) for k, v in figures.items() if isinstance(v, (int, float))}
    return obs


Observations = tuple[dict[str, Observation], list[Problem]]


def _accept_observations(info: runs.RunInfo) -> Observations:
    path = info.path / runs.RECORD
    if not os.path.lexists(path):  # a run cut short has no record
        return {}, []
    try:
        record = runs.read_record(path)
    except ConfigError as err:
        return {}, [Problem(info.run_id, None, err.message)]
    out: dict[str, Observation] = {}
    problems: list[Problem] = []
    for node in record["nodes"]:
        host = node["host"]
        result = None
        try:
            result_path = name_path(info.path / "nodes", host, runs.RESULT_SUFFIX)
            if os.path.lexists(result_path):  # a node the runner never reached keeps none
                result = runs.read_result(result_path)
        except ConfigError as err:  # its record still says its verdict and busbw
            problems.append(Problem(info.run_id, host, err.message))
        out[host] = accept_observation(info.run_id, record.get("started"), node, result)
    return out, problems


def _check_observations(info: runs.RunInfo) -> Observations:
    path = info.path / CHECK_RECORD
    if not os.path.lexists(path):
        return {}, []
    try:
        nodes = runs.read_check_record(path)
    except ConfigError as err:
        return {}, [Problem(info.run_id, None, err.message)]
    started = info.started.isoformat() if info.started else None
    out: dict[str, Observation] = {}
    problems: list[Problem] = []
    for host, node in nodes.items():
        if isinstance(node, ConfigError):
            problems.append(Problem(info.run_id, host, node.message))
            continue
        if node.get("error"):
            continue  # a node the check could not read says nothing about its hardware
        facts = node.get("facts") or {}
        obs = Observation(info.run_id, "check", started, ok=bool(node.get("ok")))
        _identity(obs, facts.get("identity"))
        obs.gpus = _gpus(facts.get("gpus") or [])
        failed = (str(c.get("message") or "") for c in node.get("checks") or [] if not c.get("ok"))
        obs.failed_slots = _failed_slots(obs.gpus, failed)
        out[host] = obs
    return out, problems


@functools.cache
def _reader_digest() -> str:
    """What the observations of a run depend on besides its files: this reading code (read
    once, when a run is first read, not when the module is imported)."""
    code = b"".join(Path(m.__file__ or "").read_bytes() for m in (sys.modules[__name__], runs))
    return hashlib.sha256(code).hexdigest()


def _inputs(info: runs.RunInfo, record: str) -> list[list[Any]] | None:
    """Name, size and modification time of every file a run's observations are read from
    (None: the run has no record yet, so nothing is read from it)."""
    files = [info.path / record]
    if record == runs.RECORD:
        with contextlib.suppress(OSError):
            files += sorted((info.path / "nodes").glob(f"*{runs.RESULT_SUFFIX}"))
    found = []
    for path in files:
        try:
            stat = os.lstat(path)  # a link is refused when read: its own size and time
        except FileNotFoundError:
            if path.name == record:
                return None  # a run cut short has no record
            continue  # removed since it was listed
        except OSError as err:
            raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
        found.append([path.name, stat.st_size, stat.st_mtime_ns])
    return found


# --- what was read from a run, kept in its folder ---------------------------------------------
# observations.json is the passport's own file, read back like every run file: bounded, no
# link, and checked against this schema; one that does not match is read again from the run.


class _Kept(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _KeptGpu(_Kept):
    index: int | None
    bus_id: str | None
    serial: str | None
    uuid: str | None
    remapped_rows: int | None


class _KeptObservation(_Kept):
    run_id: str
    kind: Literal["accept", "check"]
    started: str | None
    group: str | None
    ok: bool | None
    system: dict[str, str | None]
    gpus: list[_KeptGpu]
    nics: dict[str, str | None]
    disks: dict[str, str | None]
    failed_slots: list[str]
    figures: dict[Literal["busbw_gbps", "gemm_tflops", "mem_bw_gbps", "storage_p99_ms"], float]


class _KeptProblem(_Kept):
    run_id: str
    host: str | None
    message: str


class _KeptRun(_Kept):
    key: dict[str, Any]
    observations: dict[str, _KeptObservation]
    problems: list[_KeptProblem]


def _kept(path: Path, key: dict[str, Any]) -> Observations | None:
    """What was kept of a run, if it was read from these files by this code (None: read the
    run again: no such file, another key, or a file that is not what gpunode writes)."""
    if not os.path.lexists(path):
        return None
    try:
        data = _KeptRun.model_validate(load_json(path, "observations", follow=False))
    except (ConfigError, ValidationError):
        return None
    if json.loads(json.dumps(data.key)) != key:
        return None
    return (
        {h: Observation(**o.model_dump()) for h, o in data.observations.items()},
        [Problem(**p.model_dump()) for p in data.problems],
    )


def _keep(path: Path, key: dict[str, Any], seen: Observations) -> None:
    """Keep what was read in the run's folder; a folder that cannot keep it is read each time.

    The temporary file is new (``mkstemp``: never a FIFO or link someone left), and replaces
    the kept one whole."""
    observations, problems = seen
    text = json.dumps(
        {
            "key": key,
            "observations": {h: o.to_dict() for h, o in observations.items()},
            "problems": [p.to_dict() for p in problems],
        }
    )
    with contextlib.suppress(OSError):
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(temporary, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)


def read_run(info: runs.RunInfo) -> Observations:
    """Every node's observation in one recorded run, and the problems with its files, read
    once: what was read is kept in the run's folder (``OBSERVATIONS``), keyed by the files it
    was read from and this reading code, so an acceptance does not parse every earlier run's
    results again (a fleet's history grows by a run per node per acceptance). A changed file
    or reader reads again; a folder that cannot be written is read each time."""
    record = runs.RECORD if info.kind == "accept" else CHECK_RECORD
    try:
        inputs = _inputs(info, record)
    except ConfigError as err:
        return {}, [Problem(info.run_id, None, err.message)]
    if inputs is None:
        return {}, []
    key = {"reader": _reader_digest(), "inputs": inputs}
    kept = info.path / OBSERVATIONS
    found = _kept(kept, key)
    if found is not None:
        return found
    seen = _accept_observations(info) if record == runs.RECORD else _check_observations(info)
    _keep(kept, key, seen)
    return seen


def read_fleet(runs_dir: Any = None, hosts: Iterable[str] | None = None) -> Reading:
    """Every node's observations in the recorded runs, oldest first, and the problems with
    the run files that could not be read; only those of ``hosts`` (an inventory's nodes: the
    fleet a node is compared with) when given (a problem of a whole run is always kept).

    Raises:
        ConfigError: The runs folder itself cannot be read.
    """
    wanted = None if hosts is None else set(hosts)
    found: dict[str, list[Observation]] = {}
    problems: list[Problem] = []
    for info in runs.list_runs(runs_dir):
        if info.kind not in ("accept", "check"):
            continue
        seen, trouble = read_run(info)
        for host, obs in seen.items():
            if wanted is None or host in wanted:
                found.setdefault(host, []).append(obs)
        problems += [p for p in trouble if wanted is None or p.host in wanted or p.host is None]
    for observations in found.values():
        observations.sort(key=lambda o: o.run_id[:16])  # the id's UTC time, then the kind
    return Reading(found, problems)


def fleet_observations(
    runs_dir: Any = None, hosts: Iterable[str] | None = None
) -> dict[str, list[Observation]]:
    """Every node's observations in the recorded runs (:func:`read_fleet`), without the
    problems: a run file that cannot be read adds nothing.

    Raises:
        ConfigError: The runs folder itself cannot be read.
    """
    return read_fleet(runs_dir, hosts).observations


def with_run(
    fleet: Mapping[str, list[Observation]],
    run_id: str,
    started: str | None,
    nodes: Iterable[tuple[Mapping[str, Any], Mapping[str, Any] | None]],
) -> dict[str, list[Observation]]:
    """The fleet's observations and those of an acceptance run not recorded yet (its nodes'
    summaries and results): what a certificate is issued with, before the run's record is
    written."""
    out = {host: list(observations) for host, observations in fleet.items()}
    for node, result in nodes:
        # A node's result as it came back from the node, checked as it will be read back.
        where = f"{run_id}: {node['host']}{runs.RESULT_SUFFIX}"
        try:
            checked = runs.check_result(result, where) if result is not None else None
        except ConfigError:
            checked = None  # what the node sent is no result: it tells nothing of the node
        obs = accept_observation(run_id, started, node, checked)
        out.setdefault(str(node["host"]), []).append(obs)
    return out


# --- the flags -------------------------------------------------------------------------------


def _swaps(observations: list[Observation]) -> list[Flag]:
    flags = []
    last: dict[str, tuple[dict[str, Any], str]] = {}
    for obs in observations:
        for gpu in obs.gpus:
            slot = str(gpu.get("bus_id"))
            before = last.get(slot)
            if before is not None:
                old, run_id = before
                if (old.get("serial"), old.get("uuid")) != (gpu.get("serial"), gpu.get("uuid")):
                    flags.append(
                        Flag(
                            "gpu-swapped",
                            f"GPU in slot {slot}: serial {old.get('serial')} ({old.get('uuid')}) "
                            f"in run {run_id}, serial {gpu.get('serial')} ({gpu.get('uuid')}) "
                            f"in run {obs.run_id}",
                            obs.run_id,
                        )
                    )
            last[slot] = (gpu, obs.run_id)
    return flags


def _returned(host: str, fleet: Mapping[str, list[Observation]]) -> list[Flag]:
    """Serials on ``host`` now that failed before somewhere and were taken out since."""
    mine = fleet.get(host) or []
    if not mine:
        return []
    latest = mine[-1]
    flags = []
    for gpu in latest.gpus:
        serial = gpu.get("serial")
        if not serial:
            continue
        for where, observations in fleet.items():
            failed_in = next(
                (
                    o
                    for o in observations
                    if o.run_id < latest.run_id
                    and any(
                        g.get("serial") == serial and g.get("bus_id") in o.failed_slots
                        for g in o.gpus
                    )
                ),
                None,
            )
            if failed_in is None:
                continue
            removed = next(
                (
                    o
                    for o in observations
                    if failed_in.run_id < o.run_id < latest.run_id
                    and o.gpus
                    and serial not in {g.get("serial") for g in o.gpus}
                ),
                None,
            )
            if removed is not None:
                flags.append(
                    Flag(
                        "failed-part-returned",
                        f"GPU serial {serial} (now slot {gpu.get('bus_id')}, UUID "
                        f"{gpu.get('uuid')}) failed on {where} in run {failed_in.run_id}, "
                        f"was gone from it in run {removed.run_id}, and is back",
                        latest.run_id,
                    )
                )
                break
    return flags


def _rising_remaps(observations: list[Observation]) -> list[Flag]:
    series: dict[str, list[tuple[int, str]]] = {}
    for obs in observations:
        for gpu in obs.gpus:
            rows = gpu.get("remapped_rows")
            if gpu.get("serial") and isinstance(rows, int):
                readings = series.setdefault(str(gpu["serial"]), [])
                # Equal readings in a row (checks between boots) are one reading of the counter.
                if not readings or readings[-1][0] != rows:
                    readings.append((rows, obs.run_id))
    flags = []
    for serial, readings in sorted(series.items()):
        tail = readings[-RISING_READINGS:]
        if len(tail) == RISING_READINGS and all(b[0] > a[0] for a, b in pairwise(tail)):
            steps = " -> ".join(f"{n} (run {run})" for n, run in tail)
            flags.append(
                Flag("remaps-rising", f"GPU serial {serial}: remapped rows {steps}", tail[-1][1])
            )
    return flags


def _mad(values: list[float]) -> float:
    median = statistics.median(values)
    return statistics.median(abs(v - median) for v in values)


def _worse(value: float, reference: float, share: float, higher_better: bool) -> bool:
    """At least ``share`` worse than ``reference`` (30 % below is flagged at 0.3)."""
    if reference <= 0:
        return False
    change = (reference - value) / reference if higher_better else (value - reference) / reference
    return change >= share - 1e-9


def _below_baseline(observations: list[Observation], share: float) -> list[Flag]:
    accepted = [o for o in observations if o.kind == "accept"]
    if not accepted:
        return []
    latest = accepted[-1]
    flags = []
    for name, value in latest.figures.items():
        unit, higher = FIGURES[name]
        earlier = [o.figures[name] for o in accepted[:-1] if name in o.figures][-BASELINE_RUNS:]
        if len(earlier) < MIN_BASELINE_RUNS:
            continue
        median = statistics.median(earlier)
        if _worse(value, median, share, higher):
            flags.append(
                Flag(
                    "below-baseline",
                    f"{name} {value:g} {unit} in run {latest.run_id} is "
                    f"{abs(1 - value / median):.0%} {'below' if higher else 'above'} the median "
                    f"{median:g} {unit} (MAD {_mad(earlier):g}) of its previous {len(earlier)} "
                    f"runs (allowed: {share:.0%})",
                    latest.run_id,
                )
            )
    return flags


def _below_fleet(host: str, fleet: Mapping[str, list[Observation]], share: float) -> list[Flag]:
    def latest(observations: list[Observation]) -> Observation | None:
        accepted = [o for o in observations if o.kind == "accept"]
        return accepted[-1] if accepted else None

    mine = latest(fleet.get(host) or [])
    if mine is None:
        return []
    peers = [
        o
        for h, observations in fleet.items()
        if h != host and (o := latest(observations)) is not None and o.group == mine.group
    ]
    flags = []
    for name, value in mine.figures.items():
        unit, higher = FIGURES[name]
        values = [p.figures[name] for p in peers if name in p.figures]
        if len(values) < MIN_FLEET_PEERS:
            continue
        median = statistics.median(values)
        if _worse(value, median, share, higher):
            flags.append(
                Flag(
                    "below-fleet",
                    f"{name} {value:g} {unit} in run {mine.run_id} is "
                    f"{abs(1 - value / median):.0%} {'below' if higher else 'above'} the median "
                    f"{median:g} {unit} of the latest runs of {len(values)} other node(s) of "
                    f"group {mine.group} (allowed: {share:.0%})",
                    mine.run_id,
                )
            )
    return flags


def passport(
    host: str,
    fleet: Mapping[str, list[Observation]],
    share: float = DEFAULT_SHARE,
    problems: Iterable[Problem] = (),
) -> Passport:
    """One node's passport from the fleet's observations (:func:`fleet_observations`), with
    the problems of its runs' files that concern it (``problems``: :func:`read_fleet`'s).

    Raises:
        ConfigError: ``share`` is not between 0 and 1.
    """
    if not 0 < share < 1:
        raise ConfigError(f"share: {share} must be between 0 and 1 (0.3: 30 %)")
    observations = list(fleet.get(host) or [])
    flags = (
        _swaps(observations)
        + _returned(host, fleet)
        + _rising_remaps(observations)
        + _below_baseline(observations, share)
        + _below_fleet(host, fleet, share)
    )
    mine = [p for p in problems if p.host in (host, None)]
    return Passport(host, observations, flags, mine)


def passports(
    hosts: Iterable[str], runs_dir: Any = None, share: float = DEFAULT_SHARE
) -> dict[str, Passport]:
    """Each host's passport, the hosts (an inventory's nodes) being the fleet each one is
    compared with.

    Raises:
        ConfigError: A run's record is unreadable or malformed, or ``share`` out of range.
    """
    wanted = list(hosts)
    reading = read_fleet(runs_dir, wanted)
    return {host: passport(host, reading.observations, share, reading.problems) for host in wanted}


def summary(card: Passport) -> dict[str, Any]:
    """What a certificate carries of a passport at issue time: how far its history reaches,
    every GPU (serial and UUID) seen in the node with the first and last run that saw it, and
    the flags."""
    seen: dict[tuple[Any, Any], dict[str, Any]] = {}
    for obs in card.observations:
        for gpu in obs.gpus:
            key = (gpu.get("serial"), gpu.get("uuid"))
            entry = seen.setdefault(
                key, {"serial": key[0], "uuid": key[1], "first_run": obs.run_id}
            )
            entry["last_run"] = obs.run_id
    return {
        "observed_runs": len(card.observations),
        "since": card.observations[0].run_id if card.observations else None,
        "gpus_seen": sorted(
            seen.values(), key=lambda g: (g["first_run"], str(g["serial"]), str(g["uuid"]))
        ),
        "flags": [f.to_dict() for f in card.flags],
    }
