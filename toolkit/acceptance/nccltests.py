"""Parsing nccl-tests output (``all_reduce_perf`` and friends): a pure fact parser.

Formats read (domain.md section 3, "nccl-tests output"; nccl-tests ``src/util.cu``):

- the text table of current nccl-tests (size, count, type, redop, root, then out-of-place and
  in-place time/algbw/busbw/#wrong), with or without ``mpirun --tag-output`` (``[1,0]<stdout>:``)
  and ``srun -l`` (``0: ``) prefixes, with whole NCCL log lines between the rows and other
  tools' lines (commands, MPI warnings, an elided ``...``) before the first table;
- the legacy table (before 2022): no root column and an ``error`` column that is a relative
  error, not a count;
- ``#wrong`` printed with ``%g`` (``1.04858e+06``) or ``N/A`` when validation is off;
- the footer (``# Out of bounds values : N OK|FAILED``, ``# Avg bus bandwidth : x``);
- device lines, new (``#  Rank  0 Group  0 Pid ... device  0 [0000:1b:00] NVIDIA H200``) and old
  (``#   Rank  0 Pid ... device  0 [0x00] A100-SXM4-40GB``);
- the ``-J file.json`` document (nccl-tests >= 2.17).

When device lines are absent the rank count is inferred from busbw/algbw = 2(n-1)/n, which
holds for all_reduce only.

The parser is strict, because its verdict is the product. One row grammar: inside a results
table (from its column header or first row to its footer) every line is a comment (``#``), a
whole NCCL log line, a bare ``NCCL version`` line, or a row that parses; anything else is a
problem ("unparsed row at line N"). Before the first table other tools' lines are skipped, but
a line that starts like a row must parse; after a footer only comments, NCCL log lines and a
new table may follow. ``#wrong`` is a non-negative integer; sizes and counts are below 10**18;
non-finite numbers are invalid data; a footer other than ``N OK`` fails; a capture whose last
table has no footer is incomplete; any entry of the JSON ``errors`` list fails. A result with a
problem is never ok. It streams (:func:`parse_stream`): lines are cut at
:data:`MAX_LINE_BYTES`, a size measured again (``-N`` cycles) merges into its row, and at most
:data:`MAX_ROWS` rows and :data:`MAX_DEVICES` devices are kept, so memory stays bounded
whatever the capture's size.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, BinaryIO, TypeGuard

from toolkit.acceptance import nccllog
from toolkit.errors import EXIT_USAGE, AcceptanceError, clip

# Bounds that keep a hostile or runaway capture in bounded memory and time.
MAX_LINE_BYTES = 64 * 1024  # a longer line is cut there (a row is about 130 bytes)
MAX_ROWS = 4096  # distinct rows (size, count, type, redop, root) of one capture
MAX_DEVICES = 65536  # `#  Rank ...` lines
MAX_PROBLEMS = 20  # problems listed; the rest are counted
MAX_JSON_BYTES = 16 * 1024 * 1024  # a -J document of a real sweep is a few kilobytes
_CHUNK = 1 << 20
# What `okay` of the -J footer sections may be: nccl-tests' jsonBool writes "true"/"false", and
# the average's "unchecked" when no minimum (-G / NCCL_TESTS_MIN_BW) was set.
_JSON_OKAY = ("true", "false", "unchecked")

_DEVICE_RE = re.compile(
    r"^#\s+Rank\s+(?P<rank>[0-9]{1,9})\s+(?:Group\s+(?P<group>[0-9]{1,9})\s+)?"
    r"Pid\s+(?P<pid>[0-9]{1,9})\s+on\s+(?P<host>\S+)\s+device\s+(?P<device>[0-9]{1,9})\s+"
    r"\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$"
)
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<rest>.*)$", re.IGNORECASE)
_OOB_VALUE_RE = re.compile(r"(?P<n>[0-9]{1,18})(?:\s+(?P<status>\S.*))?\Z")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<rest>.*)$", re.IGNORECASE)
_TESTS_VERSION_RE = re.compile(
    r"^#\s*nccl-tests version (?P<v>\S+).*?nccl-library=(?P<lib>[0-9]{1,9})", re.IGNORECASE
)
_HEADER_COLS_RE = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+(?P<rest>.*)$")
_PARAMS_RE = re.compile(r"^#\s*nThread\s+(?P<nthread>[0-9]{1,9})\s+nGpus\s+(?P<ngpus>[0-9]{1,9})\b")
_VALIDATION_RE = re.compile(r"validation:\s*([0-9]{1,9})")
_INT_RE = re.compile(r"[0-9]{1,18}\Z")  # sizes and counts: below 10**18, so below 2**63
_ROOT_RE = re.compile(r"-?[0-9]{1,10}\Z")
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}\Z")  # a data type or reduction
_FLOAT_RE = re.compile(r"[0-9]{1,20}(?:\.[0-9]{0,20})?(?:[eE][-+]?[0-9]{1,2})?\Z")
# `#wrong` is a count printed with %g: digits, or 1.04858e+06 for large counts.
_WRONG_RE = re.compile(r"(?:[0-9]{1,20}|[0-9](?:\.[0-9]{1,6})?e\+[0-9]{2})\Z")
# The current layout's 13-column row in one match: the same grammar as the per-column path
# (_parse_row), which only explains a refusal, so a 13-column line this refuses is no row.
_NUM = r"([0-9]{1,20}(?:\.[0-9]{0,20})?(?:[eE][-+]?[0-9]{1,2})?)"  # finite by its length
_WRONG = r"([0-9]{1,20}|N/A|[0-9](?:\.[0-9]{1,6})?e\+[0-9]{2})"
_ROW_RE = re.compile(
    r"([0-9]{1,18})\s+([0-9]{1,18})\s+([A-Za-z_][A-Za-z0-9_]{0,31})\s+"
    r"([A-Za-z_][A-Za-z0-9_]{0,31})\s+(-?[0-9]{1,10})"
    + rf"\s+{_NUM}\s+{_NUM}\s+{_NUM}\s+{_WRONG}"
    * 2
)
# Before the first table, a line that starts like a number is a row and must parse (inside a
# table every line that is not a comment or an NCCL log line is a row).
_ROWLIKE_RE = re.compile(r"[-+.]?[0-9]")
# nccl-tests' own failure lines (common.h: "Test NCCL failure", "Test CUDA failure", ...).
_FAILURE_RE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b")

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


def parse(text: str, *, allow_truncated: bool = False) -> NcclTestsResult:
    """Parse an nccl-tests output: the ``-J`` JSON document or the text table.

    Args:
        text: The whole captured output.
        allow_truncated: Accept a text capture whose last table has no footer (an excerpt);
            by default such a capture is incomplete and not ok.

    Returns:
        The parsed result.

    Raises:
        NotNcclTestsOutput: No result rows were found (or the JSON is not nccl-tests JSON).
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        return parse_json(_decode_json(stripped))
    return parse_text(text, allow_truncated=allow_truncated)


def parse_stream(stream: BinaryIO, *, allow_truncated: bool = False) -> NcclTestsResult:
    """Parse an nccl-tests output read from a binary stream, in bounded memory.

    Text is read in chunks and parsed line by line; a JSON document (first character ``{``)
    may be at most :data:`MAX_JSON_BYTES`.

    Raises:
        NotNcclTestsOutput: As for :func:`parse`, or a JSON document too large.
    """
    first = stream.read(_CHUNK)
    if first.lstrip()[:1] == b"{":
        data = first + stream.read(MAX_JSON_BYTES + 1 - len(first))
        if len(data) > MAX_JSON_BYTES:
            raise NotNcclTestsOutput(
                f"nccl-tests JSON larger than {MAX_JSON_BYTES} bytes; not a -J document"
            )
        return parse_json(_decode_json(data.decode("utf-8", errors="replace")))
    chunks = chain([first], iter(lambda: stream.read(_CHUNK), b""))
    return _parse_lines(_byte_lines(chunks), allow_truncated=allow_truncated)


def parse_text(text: str, *, allow_truncated: bool = False) -> NcclTestsResult:
    """Parse the text output of an nccl-tests binary.

    Args:
        text: The captured output, possibly with launcher prefixes and other tools' lines.
        allow_truncated: As for :func:`parse`.

    Returns:
        The parsed result.

    Raises:
        NotNcclTestsOutput: No result rows were found.
    """
    return _parse_lines(_text_lines(text), allow_truncated=allow_truncated)


Line = tuple[int, str, bool]  # number (from 1), text, cut at MAX_LINE_BYTES


def _text_lines(text: str) -> Iterator[Line]:
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_LINE_BYTES:
            yield number, line[:MAX_LINE_BYTES], True
        else:
            yield number, line, False


def _byte_lines(chunks: Iterable[bytes]) -> Iterator[Line]:
    number = 0
    head = b""  # the current line so far, never more than MAX_LINE_BYTES
    cut = False
    for chunk in chunks:
        pieces = chunk.split(b"\n")
        for index, piece in enumerate(pieces):
            if index:
                number += 1
                yield number, head.decode("utf-8", errors="replace"), cut
                head, cut = b"", False
            if not cut and piece:
                head = head + piece if head else piece
                if len(head) > MAX_LINE_BYTES:
                    head, cut = head[:MAX_LINE_BYTES], True
    if head or cut:
        yield number + 1, head.decode("utf-8", errors="replace"), cut


class _Problems:
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


class _Rows:
    """The rows of a capture in first-seen order; a row measured again (``-N`` cycles) merges
    into its first, keeping the worst of the runs: the slowest time, the lowest bandwidths and
    the wrong counts summed."""

    def __init__(self, problems: _Problems) -> None:
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


def _parse_lines(lines: Iterable[Line], *, allow_truncated: bool) -> NcclTestsResult:
    problems = _Problems()
    table = _Rows(problems)
    devices: dict[int, Device] = {}
    layout: str | None = None
    avg: float | None = None
    oob: int | None = None
    footer_failed = False
    nccl_version: str | None = None
    tests_version: str | None = None
    ngpus: int | None = None
    validation_on: bool | None = None
    in_table = False  # between a column header (or first row) and its footer
    shape: int | None = None  # the column count of the table's rows: all rows have it
    footer: set[str] = set()  # footer lines seen since the last row (or column header)
    log = nccllog.LogReader()
    for number, raw, cut in lines:
        body = nccllog.strip_prefix(raw).strip()
        if not body:
            continue
        fast = not cut and shape in (None, 13) and layout != "legacy"
        if fast and (m := _ROW_RE.fullmatch(body)):
            # The fast path: most lines of a long capture are rows like this.
            g = m.groups()
            key = (int(g[0]), int(g[1]), g[2], g[3], int(g[4]))
            oop = [float(g[5]), float(g[6]), float(g[7]), _fast_wrong(g[8]), None]
            inp = [float(g[9]), float(g[10]), float(g[11]), _fast_wrong(g[12]), None]
            table.add_values(key, oop, inp)
            in_table, shape = True, 13
            layout = layout or "current"
            footer.clear()
            continue
        if body[0] == "#":
            # A header or footer line; the body keeps its leading "#".
            if m := _DEVICE_RE.match(body):
                rank = int(m["rank"])
                if rank in devices:
                    continue
                if len(devices) >= MAX_DEVICES:
                    problems.add(f"line {number}: more than {MAX_DEVICES} device lines")
                    continue
                devices[rank] = Device(
                    rank=rank,
                    host=clip(m["host"]),
                    device=int(m["device"]),
                    bus_id=clip(m["bus"]),
                    name=clip(m["name"]),
                    pid=int(m["pid"]),
                    group=int(m["group"]) if m["group"] is not None else None,
                )
            elif m := _OOB_RE.match(body):
                value = _OOB_VALUE_RE.match(m["rest"].strip())
                if value is None:
                    problems.add(f"unreadable footer at line {number}: {clip(body)!r}")
                    footer_failed = True
                else:
                    oob = int(value["n"])
                    status = (value["status"] or "OK").strip()
                    footer_failed = footer_failed or oob > 0 or status != "OK"
                footer.add("oob")
                in_table, shape = False, None
            elif m := _AVG_RE.match(body):
                tokens = m["rest"].split()
                bw = _number(tokens[0]) if tokens else None
                if bw is None or len(tokens) > 2:
                    problems.add(f"unreadable footer at line {number}: {clip(body)!r}")
                    footer_failed = True
                else:
                    avg = bw
                    # `-G`/NCCL_TESTS_MIN_BW adds OK/FAILED to this line.
                    footer_failed = footer_failed or (len(tokens) == 2 and tokens[1] != "OK")
                footer.add("avg")
                in_table, shape = False, None
            elif m := _HEADER_COLS_RE.match(body):
                rest = m["rest"].split()
                layout = "current" if rest and rest[0] == "root" else "legacy"
                # A new table: it needs rows and a footer of its own.
                in_table, shape = True, None
                footer.clear()
            elif m := _TESTS_VERSION_RE.match(body):
                tests_version = clip(m["v"])
                nccl_version = nccl_version or _version_from_code(int(m["lib"]))
            elif m := _PARAMS_RE.match(body):
                ngpus = int(m["ngpus"])
                vm = _VALIDATION_RE.search(body)
                if vm:
                    validation_on = vm.group(1) != "0"
            continue
        if "failure" in body and _FAILURE_RE.search(body):
            problems.add(f"nccl-tests reported a failure at line {number}: {clip(body)!r}")
            continue
        if nccllog.LOG_LINE_RE.match(body) or nccllog.VERSION_LINE_RE.match(body):
            if m := nccllog.VERSION_RE.search(body):
                nccl_version = nccl_version or m["v"]
            log.feed(body)
            continue
        if not (in_table or footer or _ROWLIKE_RE.match(body)):
            continue  # before the first table: another tool's line
        tokens = body.split()
        if fast and len(tokens) == 13 and problems.full:
            # Refused by _ROW_RE, the same grammar; no room left to explain why: count it.
            row, reason = None, ""
        elif cut:
            row, reason = None, "line too long"
        elif shape is not None and len(tokens) != shape:
            # A row cut short can look like a shorter layout (13 -> 9 columns).
            row, reason = None, f"{len(tokens)} columns where this table's rows have {shape}"
        else:
            row, reason = _parse_row(tokens, layout)
        if row is not None:
            shape = len(tokens)
            table.add(row)
            in_table = True
            footer.clear()
            if layout is None:
                layout = "current" if row.root is not None else "legacy"
        elif in_table or not footer or _ROWLIKE_RE.match(body):
            problems.add(f"unparsed row at line {number}: {reason}: {clip(body)!r}")
        else:
            problems.add(
                f"line {number} after the footer is not a row, a comment or an NCCL log "
                f"line: {clip(body)!r}"
            )
    rows = table.rows
    if not rows:
        first = f" ({problems.listed[0]})" if problems.listed else ""
        raise NotNcclTestsOutput(f"not an nccl-tests output: no result rows found{first}")
    complete = footer == {"oob", "avg"}
    if not complete and not allow_truncated:
        problems.add(
            "incomplete capture: no footer (`# Out of bounds values` and `# Avg bus "
            "bandwidth`) after the last row; the output was cut short"
        )
    validated = any(p.wrong is not None for r in rows for p in r.placements())
    if not validated and layout == "legacy" and validation_on and oob is not None:
        # Legacy tables carry a relative error, and the footer is the verdict on it.
        validated = True
    ranks, source = _ranks(devices, rows)
    return NcclTestsResult(
        rows=tuple(rows),
        devices=tuple(devices[k] for k in sorted(devices)),
        ranks=ranks,
        ranks_source=source,
        layout=layout or "current",
        avg_busbw_reported=avg,
        out_of_bounds=oob,
        footer_failed=footer_failed,
        nccl_version=nccl_version,
        nccl_tests_version=tests_version,
        ngpus_per_process=ngpus,
        validated=validated,
        problems=problems.result(),
        complete=complete,
        transport=transport if (transport := log.summary()).found else None,
    )


def _parse_row(tokens: list[str], layout: str | None) -> tuple[Row | None, str]:
    """A row from its tokens, or None and why not.

    Current: size count type redop root | t a b w | t a b w  (13 tokens); legacy: size count
    type redop | t a b e | t a b e  (12 tokens); trace replay prints only in-place: 9 tokens.
    """
    n = len(tokens)
    if n == 13 and layout != "legacy":
        shape = "current"
    elif n == 12 and layout != "current":
        shape = "legacy"
    elif n == 9 and layout != "legacy":
        shape = "in-place"
    else:
        expected = "12" if layout == "legacy" else "13 (or 9)" if layout else "13, 12 or 9"
        return None, f"{n} columns, expected {expected}"
    size, count, dtype, redop = tokens[:4]
    if not (_INT_RE.match(size) and _INT_RE.match(count)):
        return None, "size and count must be non-negative integers"
    if not (_NAME_RE.match(dtype) and _NAME_RE.match(redop)):
        return None, "bad type or reduction"
    legacy = shape == "legacy"
    root: int | None = None
    if not legacy:
        if not _ROOT_RE.match(tokens[4]):
            return None, f"root {clip(tokens[4])!r} is not an integer"
        root = int(tokens[4])
    try:
        if shape == "current":
            oop: Placement | None = _placement(tokens[5:9], legacy=False)
            inp = _placement(tokens[9:13], legacy=False)
        elif legacy:
            oop = _placement(tokens[4:8], legacy=True)
            inp = _placement(tokens[8:12], legacy=True)
        else:
            oop = None
            inp = _placement(tokens[5:9], legacy=False)
    except ValueError as err:
        return None, str(err)
    return Row(int(size), int(count), dtype, redop, root, oop, inp), ""


def _placement(tokens: list[str], *, legacy: bool) -> Placement:
    time_us, algbw, busbw = (_finite(t) for t in tokens[:3])
    last = tokens[3]
    if legacy:
        error = None if last == "N/A" else _finite(last, "error")
        return Placement(time_us, algbw, busbw, wrong=None, error=error)
    return Placement(time_us, algbw, busbw, wrong=_wrong(last))


def _finite(token: str, what: str = "value") -> float:
    value = _number(token)
    if value is None:
        raise ValueError(f"{what} {clip(token)!r} is not a finite non-negative number")
    return value


def _number(token: str) -> float | None:
    """A finite non-negative decimal number (never nan, inf, hex or other digits), or None."""
    if not _FLOAT_RE.match(token):
        return None
    value = float(token)
    return value if math.isfinite(value) else None


def _fast_wrong(token: str) -> int | None:
    return None if token == "N/A" else int(token) if token.isdigit() else round(float(token))


def _wrong(token: str) -> int | None:
    # `%6g` prints large counts as 1.04858e+06; validation off prints N/A.
    if token == "N/A":
        return None
    if not _WRONG_RE.match(token):
        raise ValueError(f"#wrong {clip(token)!r} is not a non-negative integer")
    return round(float(token))


def _version_from_code(code: int) -> str:
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


def _ranks(devices: dict[int, Device], rows: list[Row]) -> tuple[int | None, str | None]:
    if devices:
        return len(devices), "devices"
    inferred = infer_ranks(rows)
    if inferred is None:
        return None, None
    return inferred, "busbw_ratio"


def _decode_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"non-finite number {constant}")

    try:
        return json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError) as err:
        raise NotNcclTestsOutput(f"not nccl-tests JSON: {clip(str(err))}") from None


def parse_json(document: Any) -> NcclTestsResult:
    """Parse the ``-J`` JSON document of nccl-tests (file version 1).

    A row with a missing, wrongly typed or non-finite value is a problem (the result is not
    ok), as is any entry of ``errors`` or a document without its out-of-bounds and average
    bandwidth sections.

    Args:
        document: The decoded JSON.

    Returns:
        The parsed result.

    Raises:
        NotNcclTestsOutput: The document lacks the ``results`` list of nccl-tests, or no row
            of it can be read.
    """
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise NotNcclTestsOutput("not an nccl-tests JSON document: no 'results' list")
    problems = _Problems()
    table = _Rows(problems)
    for index, item in enumerate(document["results"]):
        try:
            table.add(_json_row(item))
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            problems.add(f"unparsed row results[{index}]: {clip(str(err))}")
    rows = table.rows
    if not rows:
        first = f" ({problems.listed[0]})" if problems.listed else ""
        raise NotNcclTestsOutput(f"not an nccl-tests output: no result rows found{first}")
    config = _json_dict(document.get("config"))
    devices: dict[int, Device] = {}
    for dev in config.get("devices") or []:
        try:
            device = _json_device(dev)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            problems.add(f"unreadable device in config.devices: {clip(str(err))}")
            continue
        if device.rank not in devices and len(devices) < MAX_DEVICES:
            devices[device.rank] = device
    oob_doc = _json_dict(document.get("out_of_bounds"))
    avg_doc = _json_dict(document.get("average_bus_bandwidth"))
    oob: int | None = None
    avg: float | None = None
    footer_failed = False
    try:
        oob = _json_count(oob_doc["count"]) if "count" in oob_doc else None
        avg = _json_number(avg_doc["bandwidth"]) if "bandwidth" in avg_doc else None
    except (TypeError, ValueError) as err:
        problems.add(f"unreadable footer: {clip(str(err))}")
        footer_failed = True
    complete = oob is not None and avg is not None
    if not complete and not footer_failed:
        problems.add("incomplete document: no out_of_bounds count or average bus bandwidth")
    for name, section in (("out_of_bounds", oob_doc), ("average_bus_bandwidth", avg_doc)):
        okay = section.get("okay")
        if not (isinstance(okay, str) and okay in _JSON_OKAY):
            problems.add(
                f"{name}.okay is {clip(repr(okay))}, not one of "
                + ", ".join(f'"{o}"' for o in _JSON_OKAY)
            )
            footer_failed = True
        elif okay == "false":
            footer_failed = True
    footer_failed = footer_failed or (oob or 0) > 0
    raw_errors = document.get("errors")
    entries = raw_errors if isinstance(raw_errors, list) else [raw_errors]
    errors = [clip(str(e)) for e in entries if e not in (None, "", [], {})]
    version = document.get("nccl_version")
    ngpus = config.get("ngpus")
    ranks, source = _ranks(devices, rows)
    return NcclTestsResult(
        rows=tuple(rows),
        devices=tuple(devices[k] for k in sorted(devices)),
        ranks=ranks,
        ranks_source=source,
        layout="json",
        avg_busbw_reported=avg,
        out_of_bounds=oob,
        footer_failed=footer_failed,
        nccl_version=_version_from_code(version) if _is_count(version) else None,
        ngpus_per_process=ngpus if _is_count(ngpus) else None,
        validated=any(p.wrong is not None for r in rows for p in r.placements()),
        errors=tuple(errors[:MAX_PROBLEMS]),
        problems=problems.result(),
        complete=complete,
    )


def _json_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json_row(item: Any) -> Row:
    if not isinstance(item, dict):
        raise TypeError("expected an object")
    # nccl-tests writes the root as the padded text it prints ("    -1").
    root = str(item.get("root", "-1")).strip()
    if not _ROOT_RE.match(root):
        raise ValueError(f"root {clip(root)!r} is not an integer")
    dtype, redop = item["type"], item["redop"]
    if not (isinstance(dtype, str) and _NAME_RE.match(dtype)):
        raise ValueError(f"type {clip(repr(dtype))} is not a data type")
    if not (isinstance(redop, str) and _NAME_RE.match(redop)):
        raise ValueError(f"redop {clip(repr(redop))} is not a reduction")
    oop = _json_placement(item.get("out_of_place"))
    inp = _json_placement(item.get("in_place"))
    if oop is None and inp is None:
        raise ValueError("neither out_of_place nor in_place")
    return Row(
        size_bytes=_json_count(item["size"]),
        count=_json_count(item["count"]),
        dtype=dtype,
        redop=redop,
        root=int(root),
        out_of_place=oop,
        in_place=inp,
    )


def _json_placement(data: Any) -> Placement | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError("a placement must be an object")
    time_value = data["time"] if "time" in data else data["cpu_time"]
    nwrong = data.get("nwrong")
    return Placement(
        time_us=_json_number(time_value),
        algbw_gbps=_json_number(data["alg_bw"]),
        busbw_gbps=_json_number(data["bus_bw"]),
        wrong=None if nwrong is None or nwrong == "N/A" else _json_count(nwrong),
    )


def _json_device(dev: Any) -> Device:
    if not isinstance(dev, dict):
        raise TypeError("expected an object")
    group = dev.get("group")
    return Device(
        rank=_json_count(dev["rank"]),
        host=clip(str(dev.get("hostname", ""))),
        device=_json_count(dev.get("device", 0)),
        bus_id=clip(str(dev.get("device_hex", ""))),
        name=clip(str(dev.get("device_info", ""))),
        pid=_json_count(dev.get("pid", 0)),
        group=None if group is None else _json_count(group),
    )


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _json_number(value: Any) -> float:
    """A finite non-negative JSON number below 2**63 (never a bool, a string or nan)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{clip(repr(value))} is not a number")
    if isinstance(value, int) and not 0 <= value < 1 << 63:
        raise ValueError(f"{clip(repr(value))} is out of range (0 to 2**63)")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{clip(repr(value))} is not a finite non-negative number")
    return number


def _json_count(value: Any) -> int:
    """A non-negative integer (nccl-tests writes some counts as ``0.0``)."""
    if _is_count(value):
        return int(value)
    number = _json_number(value)
    if not number.is_integer() or number >= 1 << 63:
        raise ValueError(f"{clip(repr(value))} is not a non-negative integer")
    return int(number)
