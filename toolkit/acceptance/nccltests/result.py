"""What one nccl-tests output says, whichever format it came in: the rows, devices and footer
(``Placement``, ``Row``, ``Device``, ``NcclTestsResult``), the bounds that keep a hostile
capture in bounded memory, the merging of a size measured again, and the rank count."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from toolkit.acceptance import nccllog
from toolkit.errors import EXIT_USAGE, AcceptanceError, clip

# Bounds that keep a hostile or runaway capture in bounded memory and time.
MAX_LINE_BYTES = 64 * 1024  # a longer line is cut there (a row is about 130 bytes)
MAX_ROWS = 4096  # distinct rows (size, count, type, redop, root) of one capture
MAX_DEVICES = 65536  # `#  Rank ...` lines
MAX_PROBLEMS = 20  # problems listed; the rest are counted

ROOT_RE = re.compile(r"-?[0-9]{1,10}\Z")
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}\Z")  # a data type or reduction

# all_reduce exact busbw factors are 2(n-1)/n; large rows print algbw with two decimals, so a
# row needs some magnitude before its ratio says anything about n.
_MIN_ALGBW_FOR_RANKS = 1.0


@dataclass(frozen=True)
class Placement:
    """One placement (out-of-place or in-place) of one row."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None  # elements found wrong; None when not validated or legacy layout
    error: float | None = None  # legacy layout only: the maximum relative error

    def to_dict(self) -> dict[str, Any]:
        """The placement as JSON-ready data."""
        data: dict[str, Any] = {
            "time_us": self.time_us,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "wrong": self.wrong,
        }
        if self.error is not None:
            data["error"] = self.error
        return data


@dataclass(frozen=True)
class Row:
    """One message size of a sweep."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: Placement | None
    in_place: Placement | None

    def placements(self) -> list[Placement]:
        """The placements that were run (trace replay prints only in-place)."""
        return [p for p in (self.out_of_place, self.in_place) if p is not None]

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data."""
        return {
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.dtype,
            "redop": self.redop,
            "root": self.root,
            "out_of_place": self.out_of_place.to_dict() if self.out_of_place else None,
            "in_place": self.in_place.to_dict() if self.in_place else None,
        }


@dataclass(frozen=True)
class Device:
    """One ``#  Rank ...`` line."""

    rank: int
    host: str
    device: int
    bus_id: str
    name: str
    pid: int
    group: int | None = None


@dataclass(frozen=True)
class NcclTestsResult:
    """Everything read from one nccl-tests output."""

    rows: tuple[Row, ...]
    devices: tuple[Device, ...] = ()
    ranks: int | None = None
    ranks_source: str | None = None  # "devices" | "busbw_ratio" | "single_rank"
    layout: str = "current"  # "current" | "legacy" | "json"
    avg_busbw_reported: float | None = None
    out_of_bounds: int | None = None
    footer_failed: bool = False
    nccl_version: str | None = None
    nccl_tests_version: str | None = None
    ngpus_per_process: int | None = None
    validated: bool = False
    errors: tuple[str, ...] = field(default_factory=tuple)  # the JSON document's `errors`
    # Why the output cannot be trusted: unparsed rows, an unreadable or missing footer, ...
    problems: tuple[str, ...] = field(default_factory=tuple)
    complete: bool = True  # the last table ends with its footer
    # What the NCCL log lines between the rows say of the transports (None: no log lines).
    transport: nccllog.NcclTransport | None = None

    @property
    def peak_busbw_gbps(self) -> float:
        """The largest busbw of any row and placement."""
        return max((p.busbw_gbps for r in self.rows for p in r.placements()), default=0.0)

    @property
    def largest_size_bytes(self) -> int:
        """The largest message size of the sweep."""
        return max(r.size_bytes for r in self.rows)

    @property
    def busbw_at_largest_gbps(self) -> float:
        """The busbw at the largest size: the lower of the placements run there."""
        row = self.row_at(self.largest_size_bytes)
        assert row is not None
        return min(p.busbw_gbps for p in row.placements())

    @property
    def wrong_total(self) -> int:
        """Wrong elements over all rows and placements (validated rows only)."""
        return sum(p.wrong or 0 for r in self.rows for p in r.placements())

    @property
    def ok(self) -> bool:
        """True only when nothing was wrong: no wrong values, the footer OK, no error entry and
        no problem (an unparsed row, a missing footer, ...)."""
        return (
            self.wrong_total == 0
            and not self.footer_failed
            and not self.errors
            and not self.problems
        )

    def row_at(self, size_bytes: int) -> Row | None:
        """The row of one message size, if the sweep has it."""
        for row in self.rows:
            if row.size_bytes == size_bytes:
                return row
        return None

    def to_dict(self) -> dict[str, Any]:
        """The result as the JSON document of ``gpunode accept parse --json``."""
        return {
            "ranks": self.ranks,
            "ranks_source": self.ranks_source,
            "layout": self.layout,
            "devices": [
                {
                    "rank": d.rank,
                    "host": d.host,
                    "device": d.device,
                    "bus_id": d.bus_id,
                    "name": d.name,
                }
                for d in self.devices
            ],
            "rows": [r.to_dict() for r in self.rows],
            "peak_busbw_gbps": self.peak_busbw_gbps,
            "largest_size_bytes": self.largest_size_bytes,
            "busbw_at_largest_gbps": self.busbw_at_largest_gbps,
            "avg_busbw_reported": self.avg_busbw_reported,
            "out_of_bounds": self.out_of_bounds,
            "wrong_total": self.wrong_total,
            "validated": self.validated,
            "nccl_version": self.nccl_version,
            "nccl_tests_version": self.nccl_tests_version,
            "errors": list(self.errors),
            "problems": list(self.problems),
            "complete": self.complete,
            "transport": self.transport.to_dict() if self.transport else None,
            "ok": self.ok,
        }


class NotNcclTestsOutput(AcceptanceError):
    """The text is not an nccl-tests output (exit code 2)."""

    exit_code = EXIT_USAGE


class Problems:
    """The problems of one parse: the first few in full, the rest counted."""

    def __init__(self) -> None:
        self.listed: list[str] = []
        self.count = 0

    @property
    def full(self) -> bool:
        """No room left to list one more: the next are only counted."""
        return len(self.listed) >= MAX_PROBLEMS

    def add(self, message: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_PROBLEMS:
            self.listed.append(message)

    def result(self) -> tuple[str, ...]:
        more = self.count - len(self.listed)
        return (*self.listed, f"... and {more} more problems") if more else tuple(self.listed)


_Key = tuple[int, int, str, str, "int | None"]
# A placement while rows merge: [time_us, algbw, busbw, wrong, error], updated in place.
_Acc = list[Any]


class Rows:
    """The rows of a capture in first-seen order; a row measured again (``-N`` cycles) merges
    into its first, keeping the worst of the runs: the slowest time, the lowest bandwidths and
    the wrong counts summed."""

    def __init__(self, problems: Problems) -> None:
        self._rows: dict[_Key, list[_Acc | None]] = {}
        self._problems = problems
        self._full = False

    def add(self, row: Row) -> None:
        self.add_values(
            (row.size_bytes, row.count, row.dtype, row.redop, row.root),
            _acc(row.out_of_place),
            _acc(row.in_place),
        )

    def add_values(self, key: _Key, oop: _Acc | None, inp: _Acc | None) -> None:
        entry = self._rows.get(key)
        if entry is None:
            if len(self._rows) < MAX_ROWS:
                self._rows[key] = [oop, inp]
            elif not self._full:
                self._full = True
                self._problems.add(
                    f"more than {MAX_ROWS} distinct rows: not one sweep; the rest is unread"
                )
            return
        for index, again in enumerate((oop, inp)):
            first = entry[index]
            if first is None or again is None:
                entry[index] = first or again
                continue
            # Plain comparisons: this runs for nearly every line of a long capture.
            if again[0] > first[0]:
                first[0] = again[0]
            if again[1] < first[1]:
                first[1] = again[1]
            if again[2] < first[2]:
                first[2] = again[2]
            if again[3]:
                first[3] = (first[3] or 0) + again[3]
            elif first[3] is None:
                first[3] = again[3]
            if again[4] is not None and (first[4] is None or again[4] > first[4]):
                first[4] = again[4]

    @property
    def rows(self) -> list[Row]:
        return [
            Row(*key, out_of_place=_placement_of(oop), in_place=_placement_of(inp))
            for key, (oop, inp) in self._rows.items()
        ]


def _acc(placement: Placement | None) -> _Acc | None:
    if placement is None:
        return None
    p = placement
    return [p.time_us, p.algbw_gbps, p.busbw_gbps, p.wrong, p.error]


def _placement_of(acc: _Acc | None) -> Placement | None:
    return None if acc is None else Placement(*acc)


def validation_mismatch(where: str, row: str, validation_on: bool) -> str:
    """Why a row disagrees with its run's ``validation:`` (``config.validation`` in JSON).

    nccl-tests prints ``N/A`` in ``#wrong`` (JSON: ``"nwrong": null``) exactly when validation
    is off: ``run()`` in ``src/common.cu`` sets every thread's ``args.reportErrors =
    datacheck`` (``-c``, which ``writeDeviceReport`` in ``src/util.cu`` prints as ``validation:
    %d``), and ``writeBenchmarkLineBody`` in ``src/util.cu`` prints the count (``%6g``) when
    ``reportErrors`` and ``N/A`` otherwise; before 2.13 ``BenchTime`` in ``src/common.cu``
    printed the relative error when ``datacheck`` and ``N/A`` otherwise. A row that says
    otherwise is not what the run printed: an unvalidated row of a validated run was not
    validated, so the capture cannot be ok.

    Args:
        where: The row's place (``line 12``, ``results[3]``).
        row: The row as read, for the message.
        validation_on: What the run says of validation.
    """
    if validation_on:
        return (
            f"unvalidated row at {where}: #wrong is N/A although the run says validation is "
            f"on (nccl-tests prints N/A only with validation off): {clip(row)!r}"
        )
    return (
        f"row at {where} reports #wrong although the run says validation: 0 (nccl-tests "
        f"prints N/A then): {clip(row)!r}"
    )


def version_from_code(code: int) -> str:
    # NCCL_VERSION_CODE since 2.9 is major*10000 + minor*100 + patch.
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def infer_ranks(rows: list[Row] | tuple[Row, ...]) -> int | None:
    """Infer the rank count of an all_reduce sweep from busbw/algbw = 2(n-1)/n.

    Args:
        rows: The rows of the sweep.

    Returns:
        The rank count, or None when no row is large enough to tell.
    """
    ratios = []
    for row in rows:
        for p in row.placements():
            if p.algbw_gbps >= _MIN_ALGBW_FOR_RANKS:
                ratios.append(p.busbw_gbps / p.algbw_gbps)
    if not ratios:
        return None
    ratios.sort()
    ratio = ratios[len(ratios) // 2]
    if ratio < 0.5:
        return 1  # busbw is 0 for one rank: nothing crosses a bus
    if ratio >= 2.0:
        return None
    estimate = 2.0 / (2.0 - ratio)
    return max(2, round(estimate))


def ranks_of(devices: dict[int, Device], rows: list[Row]) -> tuple[int | None, str | None]:
    if devices:
        return len(devices), "devices"
    inferred = infer_ranks(rows)
    if inferred is None:
        return None, None
    return inferred, "busbw_ratio"
