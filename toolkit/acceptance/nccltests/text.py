"""The text output of nccl-tests: the current and legacy tables, launcher prefixes, NCCL log
lines between the rows, device lines and the footer, read line by line in bounded memory
(the grammar is the package's docstring)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator

from toolkit.acceptance import nccllog
from toolkit.acceptance.nccltests.result import (
    MAX_DEVICES,
    MAX_LINE_BYTES,
    NAME_RE,
    ROOT_RE,
    Device,
    NcclTestsResult,
    NotNcclTestsOutput,
    Placement,
    Problems,
    Row,
    Rows,
    ranks_of,
    validation_mismatch,
    version_from_code,
)
from toolkit.errors import clip

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
# Inside a table (from its column header to its footer) nccl-tests prints one "#" line: the
# units line, right after the column header (writeResultHeader in src/util.cu; print_header
# of each src/<coll>.cu before 2.13); the rows come from one thread of rank 0 (TimeTest in
# src/common.cu) with no "#" line between them, and the footer is writeResultFooter's. Any
# other "#" line there is refused, whatever follows the "#": a row whose size column became
# "#", "# x" or "#\r" must not be dropped as a comment. The units line ends with the time
# format when timestamps are on (-R), printed as the text "%Y-%m-%d %H:%M:%S".
_UNITS_RE = re.compile(
    r"^#\s+\(B\)\s+\(elements\)(?:\s+\((?:us|GB/s|%)\))*(?:\s+%Y-%m-%d %H:%M:%S)?\s*$"
)
# A "#" line that reads like a row (a number, then the row's other columns): named as such.
_COMMENTED_ROW_RE = re.compile(r"^#\S*\s+[0-9]{1,20}(?:\s+\S+){7,}\s*$")
_PARAMS_RE = re.compile(r"^#\s*nThread\s+(?P<nthread>[0-9]{1,9})\s+nGpus\s+(?P<ngpus>[0-9]{1,9})\b")
_VALIDATION_RE = re.compile(r"validation:\s*([0-9]{1,9})")
_INT_RE = re.compile(r"[0-9]{1,18}\Z")  # sizes and counts: below 10**18, so below 2**63
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
    return parse_lines(_text_lines(text), allow_truncated=allow_truncated)


Line = tuple[int, str, bool]  # number (from 1), text, cut at MAX_LINE_BYTES


def _text_lines(text: str) -> Iterator[Line]:
    for number, line in enumerate(text.split("\n"), start=1):
        if len(line) > MAX_LINE_BYTES:
            yield number, line[:MAX_LINE_BYTES], True
        else:
            yield number, line, False


def byte_lines(chunks: Iterable[bytes]) -> Iterator[Line]:
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


def parse_lines(lines: Iterable[Line], *, allow_truncated: bool) -> NcclTestsResult:
    problems = Problems()
    table = Rows(problems)
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
    units_next = False  # right after a column header: the units line may come
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
            if validation_on is not None and (validation_on == ("N/A" in (g[8], g[12]))):
                problems.add(validation_mismatch(f"line {number}", body, validation_on))
            in_table, shape, units_next = True, 13, False
            layout = layout or "current"
            footer.clear()
            continue
        if body[0] == "#":
            # A header or footer line; the body keeps its leading "#".
            if in_table and not (_OOB_RE.match(body) or _AVG_RE.match(body)):
                if units_next and _UNITS_RE.match(body):
                    units_next = False
                    continue
                if _COMMENTED_ROW_RE.match(body):
                    reason = f"unparsed row at line {number}: a row behind '#'"
                else:
                    reason = (
                        f"line {number} inside the result table is a '#' line nccl-tests "
                        "does not print there (only its units line, then rows to the footer)"
                    )
                problems.add(f"{reason}: {clip(body)!r}")
                if not _HEADER_COLS_RE.match(body):
                    continue  # a new column header still starts its table (below)
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
                in_table, shape, units_next = True, None, True
                footer.clear()
            elif m := _TESTS_VERSION_RE.match(body):
                tests_version = clip(m["v"])
                nccl_version = nccl_version or version_from_code(int(m["lib"]))
            elif m := _PARAMS_RE.match(body):
                ngpus = int(m["ngpus"])
                vm = _VALIDATION_RE.search(body)
                # Each run prints its own parameters: one without `validation:` (before 2.6)
                # says nothing of it.
                validation_on = vm.group(1) != "0" if vm else None
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
            unvalidated = any(p.wrong is None and p.error is None for p in row.placements())
            if validation_on is not None and validation_on == unvalidated:
                problems.add(validation_mismatch(f"line {number}", body, validation_on))
            in_table, units_next = True, False
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
    ranks, source = ranks_of(devices, rows)
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
    if not (NAME_RE.match(dtype) and NAME_RE.match(redop)):
        return None, "bad type or reduction"
    legacy = shape == "legacy"
    root: int | None = None
    if not legacy:
        if not ROOT_RE.match(tokens[4]):
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
