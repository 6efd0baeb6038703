"""Where output goes: data on stdout, everything for people on stderr."""

from __future__ import annotations

import json
import math
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

from toolkit.printable import printable

# A command's result for people (tables, verdicts) goes to stdout; with --json only JSON does.
out_console = Console(highlight=False)
# Progress, warnings and messages go to stderr.
err_console = Console(stderr=True, highlight=False)


_emitted = False  # whether the running command already wrote its one JSON document


def emit_json(document: Any) -> None:
    """Write exactly one strict JSON document (RFC 8259) to stdout.

    A float that is not finite has no JSON form (``NaN`` is not JSON): it is written as
    ``null``, meaning no value.
    """
    global _emitted
    text = json.dumps(_strict(document), indent=2, sort_keys=True, default=str, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
    _emitted = True


def start_command() -> None:
    """A command starts: it has written no JSON document yet (the boundary calls this)."""
    global _emitted
    _emitted = False


def _strict(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(item) for item in value]
    return value


def emit_error_json(kind: str, message: str, exit_code: int) -> None:
    """The one document of a failed command under ``--json`` (unless one was written)."""
    if _emitted:
        return
    emit_json({"ok": False, "error": {"kind": kind, "message": message, "exit_code": exit_code}})


def shown(value: object, style: str = "", *, lines: bool = False) -> Text:
    """The one way a value from a node, a file or a certificate reaches the terminal: plain
    text, never read as Rich markup, with its control characters escaped
    (:func:`toolkit.printable.printable`; ``lines``: keep newlines and tabs)."""
    return Text(printable(value, lines=lines), style=style)


def say(message: str) -> None:
    """A message for people (stderr), as plain text (:func:`shown`: escaped, never markup),
    and never broken into lines by the console (a builder's ``Step 1/9 : FROM sha256:...``, a
    URL or a path is copied from it whole; the terminal wraps what is too long for it)."""
    err_console.print(shown(message, lines=True), soft_wrap=True)
