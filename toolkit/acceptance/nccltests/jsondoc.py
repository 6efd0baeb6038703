"""The ``-J file.json`` document of nccl-tests (>= 2.17, file version 1)."""

from __future__ import annotations

import json
import math
from typing import Any, TypeGuard

from toolkit.acceptance.nccltests.result import (
    MAX_DEVICES,
    MAX_PROBLEMS,
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

MAX_JSON_BYTES = 16 * 1024 * 1024  # a -J document of a real sweep is a few kilobytes
# What `okay` of the -J footer sections may be: nccl-tests' jsonBool writes "true"/"false", and
# the average's "unchecked" when no minimum (-G / NCCL_TESTS_MIN_BW) was set.
_JSON_OKAY = ("true", "false", "unchecked")


def decode_json(text: str) -> Any:
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
    problems = Problems()
    table = Rows(problems)
    config = _json_dict(document.get("config"))
    validation = config.get("validation")
    validation_on = validation != 0 if _is_count(validation) else None
    for index, item in enumerate(document["results"]):
        try:
            row = _json_row(item)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            problems.add(f"unparsed row results[{index}]: {clip(str(err))}")
            continue
        table.add(row)
        unvalidated = any(p.wrong is None for p in row.placements())
        if validation_on is not None and validation_on == unvalidated:
            problems.add(validation_mismatch(f"results[{index}]", str(item), validation_on))
    rows = table.rows
    if not rows:
        first = f" ({problems.listed[0]})" if problems.listed else ""
        raise NotNcclTestsOutput(f"not an nccl-tests output: no result rows found{first}")
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
    ranks, source = ranks_of(devices, rows)
    return NcclTestsResult(
        rows=tuple(rows),
        devices=tuple(devices[k] for k in sorted(devices)),
        ranks=ranks,
        ranks_source=source,
        layout="json",
        avg_busbw_reported=avg,
        out_of_bounds=oob,
        footer_failed=footer_failed,
        nccl_version=version_from_code(version) if _is_count(version) else None,
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
    if not ROOT_RE.match(root):
        raise ValueError(f"root {clip(root)!r} is not an integer")
    dtype, redop = item["type"], item["redop"]
    if not (isinstance(dtype, str) and NAME_RE.match(dtype)):
        raise ValueError(f"type {clip(repr(dtype))} is not a data type")
    if not (isinstance(redop, str) and NAME_RE.match(redop)):
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
