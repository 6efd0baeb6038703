"""Parsing nccl-tests output (``all_reduce_perf`` and friends): a pure fact parser.

Formats read (domain.md section 3, "nccl-tests output"; nccl-tests ``src/util.cu``):

- the text table of current nccl-tests (size, count, type, redop, root, then out-of-place and
  in-place time/algbw/busbw/#wrong), with or without ``mpirun --tag-output`` (``[1,0]<stdout>:``)
  and ``srun -l`` (``0: ``) prefixes, with interleaved ``NCCL INFO``/MPI lines and elided
  ``...`` lines;
- the legacy table (before 2022): no root column and an ``error`` column that is a relative
  error, not a count;
- ``#wrong`` printed with ``%g`` (``1.04858e+06``) or ``N/A`` when validation is off;
- the footer (``# Out of bounds values : N OK|FAILED``, ``# Avg bus bandwidth : x``);
- device lines, new (``#  Rank  0 Group  0 Pid ... device  0 [0000:1b:00] NVIDIA H200``) and old
  (``#   Rank  0 Pid ... device  0 [0x00] A100-SXM4-40GB``);
- the ``-J file.json`` document (nccl-tests >= 2.17).

When device lines are absent the rank count is inferred from busbw/algbw = 2(n-1)/n, which
holds for all_reduce only.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from toolkit.errors import EXIT_USAGE, AcceptanceError

# Prefixes added by launchers: `mpirun --tag-output` and `srun -l` (task ids may be padded).
_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:|\s*\d+:(?: |$))")
_DEVICE_RE = re.compile(
    r"^#\s+Rank\s+(?P<rank>\d+)\s+(?:Group\s+(?P<group>\d+)\s+)?Pid\s+(?P<pid>\d+)\s+on\s+"
    r"(?P<host>\S+)\s+device\s+(?P<device>\d+)\s+\[(?P<bus>[^\]]*)\]\s+(?P<name>.*?)\s*$"
)
_OOB_RE = re.compile(r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<status>OK|FAILED)?\s*$")
_AVG_RE = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>[-+0-9.eE]+|nan)\s*(?P<status>\S+)?\s*$")
_NCCL_VERSION_RE = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>\d+\.\d+))?")
_TESTS_VERSION_RE = re.compile(
    r"^#\s*nccl-tests version (?P<v>\S+).*?nccl-library=(?P<lib>\d+)", re.IGNORECASE
)
_HEADER_COLS_RE = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+(?P<rest>.*)$")
_PARAMS_RE = re.compile(r"^#\s*nThread\s+(?P<nthread>\d+)\s+nGpus\s+(?P<ngpus>\d+)\b")
_INT_RE = re.compile(r"^\d+$")

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
    errors: tuple[str, ...] = field(default_factory=tuple)

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
        """False when any value was wrong or the footer says FAILED."""
        return self.wrong_total == 0 and not self.footer_failed

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
            "ok": self.ok,
        }


class NotNcclTestsOutput(AcceptanceError):
    """The text is not an nccl-tests output (exit code 2)."""

    exit_code = EXIT_USAGE


def parse(text: str) -> NcclTestsResult:
    """Parse an nccl-tests output: the ``-J`` JSON document or the text table.

    Args:
        text: The whole captured output.

    Returns:
        The parsed result.

    Raises:
        NotNcclTestsOutput: No result rows were found (or the JSON is not nccl-tests JSON).
    """
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            document = json.loads(stripped)
        except json.JSONDecodeError as err:
            raise NotNcclTestsOutput(f"not nccl-tests JSON: {err}") from None
        return parse_json(document)
    return parse_text(text)


def strip_prefix(line: str) -> str:
    """Remove an ``mpirun --tag-output`` or ``srun -l`` prefix from one line."""
    match = _PREFIX_RE.match(line)
    return line[match.end() :] if match else line


def parse_text(text: str) -> NcclTestsResult:
    """Parse the text output of an nccl-tests binary.

    Args:
        text: The captured output, possibly with launcher prefixes and other tools' lines.

    Returns:
        The parsed result.

    Raises:
        NotNcclTestsOutput: No result rows were found.
    """
    rows: list[Row] = []
    devices: dict[int, Device] = {}
    layout: str | None = None
    avg: float | None = None
    oob: int | None = None
    footer_failed = False
    nccl_version: str | None = None
    tests_version: str | None = None
    ngpus: int | None = None
    validation_on: bool | None = None
    for raw in text.splitlines():
        line = strip_prefix(raw).rstrip()
        body = line.strip()
        if not body:
            continue
        if body.startswith("#"):
            # A header or footer line; the body keeps its leading "#".
            if m := _DEVICE_RE.match(body):
                rank = int(m["rank"])
                devices.setdefault(
                    rank,
                    Device(
                        rank=rank,
                        host=m["host"],
                        device=int(m["device"]),
                        bus_id=m["bus"],
                        name=m["name"],
                        pid=int(m["pid"]),
                        group=int(m["group"]) if m["group"] is not None else None,
                    ),
                )
            elif m := _OOB_RE.match(body):
                oob = int(m["n"])
                footer_failed = footer_failed or m["status"] == "FAILED" or oob > 0
            elif m := _AVG_RE.match(body):
                avg = _float_or_none(m["bw"])
                # `-G`/NCCL_TESTS_MIN_BW adds OK/FAILED to this line.
                footer_failed = footer_failed or m["status"] == "FAILED"
            elif m := _HEADER_COLS_RE.match(body):
                rest = m["rest"].split()
                layout = "current" if rest and rest[0] == "root" else "legacy"
            elif m := _TESTS_VERSION_RE.match(body):
                tests_version = m["v"]
                nccl_version = nccl_version or _version_from_code(int(m["lib"]))
            elif m := _PARAMS_RE.match(body):
                ngpus = int(m["ngpus"])
                vm = re.search(r"validation:\s*(\d+)", body)
                if vm:
                    validation_on = vm.group(1) != "0"
            continue
        if m := _NCCL_VERSION_RE.search(body):
            nccl_version = nccl_version or m["v"]
            continue
        row = _parse_row(body.split(), layout)
        if row is not None:
            rows.append(row)
            if layout is None:
                layout = "current" if row.root is not None else "legacy"
    if not rows:
        raise NotNcclTestsOutput("not an nccl-tests output: no result rows found")
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
    )


def _parse_row(tokens: list[str], layout: str | None) -> Row | None:
    # Current: size count type redop root | t a b w | t a b w  (13 tokens)
    # Legacy:  size count type redop      | t a b e | t a b e  (12 tokens)
    # Trace replay prints only in-place: 9 (current) tokens.
    if len(tokens) < 8 or not (_INT_RE.match(tokens[0]) and _INT_RE.match(tokens[1])):
        return None
    if tokens[2][0].isdigit() or tokens[3][0].isdigit():
        return None
    try:
        if len(tokens) == 13 and layout != "legacy":
            root = int(tokens[4])
            oop = _placement(tokens[5:9], legacy=False)
            inp = _placement(tokens[9:13], legacy=False)
        elif len(tokens) == 12 and layout != "current":
            root = None
            oop = _placement(tokens[4:8], legacy=True)
            inp = _placement(tokens[8:12], legacy=True)
        elif len(tokens) == 9 and layout != "legacy":
            root = int(tokens[4])
            oop = None
            inp = _placement(tokens[5:9], legacy=False)
        else:
            return None
    except ValueError:
        return None
    return Row(
        size_bytes=int(tokens[0]),
        count=int(tokens[1]),
        dtype=tokens[2],
        redop=tokens[3],
        root=root,
        out_of_place=oop,
        in_place=inp,
    )


def _placement(tokens: list[str], *, legacy: bool) -> Placement:
    time_us, algbw, busbw = (float(t) for t in tokens[:3])
    last = tokens[3]
    if legacy:
        return Placement(time_us, algbw, busbw, wrong=None, error=_float_or_none(last))
    return Placement(time_us, algbw, busbw, wrong=_wrong(last))


def _wrong(token: str) -> int | None:
    # `%6g` prints large counts as 1.04858e+06; validation off prints N/A.
    if token.upper() == "N/A":
        return None
    value = float(token)
    if math.isnan(value) or value < 0:
        raise ValueError(token)
    return round(value)


def _float_or_none(token: str | None) -> float | None:
    if token is None or token.upper() in {"N/A", "NAN"}:
        return None
    return float(token)


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


def parse_json(document: Any) -> NcclTestsResult:
    """Parse the ``-J`` JSON document of nccl-tests (file version 1).

    Args:
        document: The decoded JSON.

    Returns:
        The parsed result.

    Raises:
        NotNcclTestsOutput: The document lacks the ``results`` list of nccl-tests.
    """
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise NotNcclTestsOutput("not an nccl-tests JSON document: no 'results' list")
    rows: list[Row] = []
    for index, item in enumerate(document["results"]):
        if not isinstance(item, dict):
            raise NotNcclTestsOutput(f"results[{index}]: expected an object")
        try:
            rows.append(
                Row(
                    size_bytes=int(item["size"]),
                    count=int(item["count"]),
                    dtype=str(item["type"]),
                    redop=str(item["redop"]),
                    # nccl-tests writes the root as the padded text it prints ("    -1").
                    root=int(str(item.get("root", "-1")).strip()),
                    out_of_place=_json_placement(item.get("out_of_place")),
                    in_place=_json_placement(item.get("in_place")),
                )
            )
        except (KeyError, TypeError, ValueError) as err:
            raise NotNcclTestsOutput(f"results[{index}]: unreadable row: {err!r}") from None
    if not rows:
        raise NotNcclTestsOutput("not an nccl-tests output: no result rows found")
    raw_config = document.get("config")
    config: dict[str, Any] = raw_config if isinstance(raw_config, dict) else {}
    devices: dict[int, Device] = {}
    for dev in config.get("devices", []) or []:
        if isinstance(dev, dict) and "rank" in dev:
            devices[int(dev["rank"])] = Device(
                rank=int(dev["rank"]),
                host=str(dev.get("hostname", "")),
                device=int(dev.get("device", 0)),
                bus_id=str(dev.get("device_hex", "")),
                name=str(dev.get("device_info", "")),
                pid=int(dev.get("pid", 0)),
                group=int(dev["group"]) if "group" in dev else None,
            )
    oob_doc = document.get("out_of_bounds") or {}
    oob = int(oob_doc["count"]) if "count" in oob_doc else None
    avg_doc = document.get("average_bus_bandwidth") or {}
    avg = _json_float(avg_doc.get("bandwidth"))
    # jsonBool writes the strings "true"/"false"; "unchecked" when no minimum was set.
    footer_failed = (
        (oob or 0) > 0 or _is_false(oob_doc.get("okay")) or _is_false(avg_doc.get("okay"))
    )
    version = document.get("nccl_version")
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
        nccl_version=_version_from_code(int(version)) if isinstance(version, int) else None,
        ngpus_per_process=int(config["ngpus"]) if "ngpus" in config else None,
        validated=any(p.wrong is not None for r in rows for p in r.placements()),
        errors=tuple(str(e) for e in document.get("errors", []) or [] if e),
    )


def _json_placement(data: Any) -> Placement | None:
    if data is None:
        return None
    time_value = data["time"] if "time" in data else data["cpu_time"]
    nwrong = data.get("nwrong")
    return Placement(
        time_us=_json_float(time_value) or 0.0,
        algbw_gbps=_json_float(data["alg_bw"]) or 0.0,
        busbw_gbps=_json_float(data["bus_bw"]) or 0.0,
        wrong=None if nwrong is None else _wrong(str(nwrong)),
    )


def _json_float(value: Any) -> float | None:
    if value is None or value == "nan":
        return None
    return float(value)


def _is_false(value: Any) -> bool:
    return value is False or value == "false"
