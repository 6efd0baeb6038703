"""Where output goes: data on stdout, everything for people on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

# A command's result for people (tables, verdicts) goes to stdout; with --json only JSON does.
out_console = Console(highlight=False)
# Progress, warnings and messages go to stderr.
err_console = Console(stderr=True, highlight=False)


def emit_json(document: Any) -> None:
    """Write exactly one JSON document to stdout."""
    json.dump(document, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def say(message: str) -> None:
    """A message for people (stderr)."""
    err_console.print(message)


def live_display(as_json: bool) -> Any:
    """The playbook progress display for the runner, on stderr (None with --json: stdout stays
    one JSON document and stderr quiet)."""
    if as_json:
        return None
    from toolkit.ansible.progress import LiveProgress

    def display(playbook: str, check: bool) -> LiveProgress:
        return LiveProgress(err_console, playbook, check)

    return display
