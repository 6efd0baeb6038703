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
table (from its column header or first row to its footer) every line is the units line (right
after the column header), a whole NCCL log line, a bare ``NCCL version`` line, a footer line
or a row that parses; anything else, any other ``#`` line included, is a problem ("unparsed
row at line N"), since nccl-tests prints no other ``#`` line there. Before the first table
other tools' lines are skipped, but a line that starts like a row must parse; after a footer
only comments, NCCL log lines and a new table may follow. ``#wrong`` is ``N/A`` exactly when
the run's ``validation:`` (JSON ``config.validation``) is 0: a row that disagrees is a
problem. ``#wrong`` is a non-negative integer; sizes and counts are below 10**18;
non-finite numbers are invalid data; a footer other than ``N OK`` fails; a capture whose last
table has no footer is incomplete; any entry of the JSON ``errors`` list fails. A result with a
problem is never ok. It streams (:func:`parse_stream`): lines are cut at
:data:`MAX_LINE_BYTES`, a size measured again (``-N`` cycles) merges into its row, and at most
:data:`MAX_ROWS` rows and :data:`MAX_DEVICES` devices are kept, so memory stays bounded
whatever the capture's size.

This file names the package's interface and reads a whole output, text or JSON (``parse``,
``parse_stream``); the model is in ``result``, the two formats in ``text`` and ``jsondoc``.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path
from typing import BinaryIO

from toolkit.acceptance.nccltests.jsondoc import MAX_JSON_BYTES, decode_json, parse_json
from toolkit.acceptance.nccltests.result import (
    MAX_DEVICES,
    MAX_LINE_BYTES,
    MAX_PROBLEMS,
    MAX_ROWS,
    Device,
    NcclTestsResult,
    NotNcclTestsOutput,
    Placement,
    Row,
    infer_ranks,
)
from toolkit.acceptance.nccltests.text import byte_lines, parse_lines, parse_text
from toolkit.config import open_regular
from toolkit.errors import AcceptanceError

_CHUNK = 1 << 20

__all__ = [
    "MAX_DEVICES",
    "MAX_JSON_BYTES",
    "MAX_LINE_BYTES",
    "MAX_PROBLEMS",
    "MAX_ROWS",
    "Device",
    "NcclTestsResult",
    "NotNcclTestsOutput",
    "Placement",
    "Row",
    "infer_ranks",
    "parse",
    "parse_file",
    "parse_json",
    "parse_stream",
    "parse_text",
]


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
        return parse_json(decode_json(stripped))
    return parse_text(text, allow_truncated=allow_truncated)


def parse_file(path: Path, *, allow_truncated: bool = False) -> NcclTestsResult:
    """Parse a captured nccl-tests output file (a regular file, read as a stream).

    Raises:
        AcceptanceError: Not an nccl-tests output (:class:`NotNcclTestsOutput`), or the file
            cannot be read; the message names the file.
        ConfigError: Not a regular file.
    """
    with open_regular(path, "capture") as stream:
        try:
            return parse_stream(stream, allow_truncated=allow_truncated)
        except AcceptanceError as err:
            raise type(err)(f"{path}: {err.message}", err.exit_code) from None
        except OSError as err:
            raise AcceptanceError(f"{path}: cannot read: {err.strerror or err}") from None


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
        return parse_json(decode_json(data.decode("utf-8", errors="replace")))
    chunks = chain([first], iter(lambda: stream.read(_CHUNK), b""))
    return parse_lines(byte_lines(chunks), allow_truncated=allow_truncated)
