"""What a training-image build shows people, and what it keeps: one line per builder step,
cut to the terminal's width, and the builder's whole output in the run's folder.

The classic builder streams ``Step 3/9 : RUN ...`` followed by the step's own output; a RUN
line of a few hundred characters wraps over the screen and the step's output buries it. People
see the step (:func:`step_line`); the full text goes to ``build.log`` (:class:`BuildLog`) in
the build's run folder (``toolkit.records.runs``), whose path is printed.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TextIO

LOG_NAME = "build.log"
RUN_KIND = "image"  # the runs folder's kind of an image build (toolkit.records.runs)
_STEP_RE = re.compile(r"^Step (?P<n>[0-9]+)/(?P<total>[0-9]+) : (?P<instruction>.*)", re.DOTALL)
_SPACE_RE = re.compile(r"\s+")


@dataclass(frozen=True)
class Step:
    """One ``Step n/total : INSTRUCTION`` line of the builder."""

    number: int
    total: int
    instruction: str  # whitespace collapsed: a RUN's continuation lines become one line


def parse_step(text: str) -> Step | None:
    """The step a line of the builder's stream starts, else None."""
    match = _STEP_RE.match(text.strip())
    if match is None:
        return None
    instruction = _SPACE_RE.sub(" ", match["instruction"]).strip()
    return Step(int(match["n"]), int(match["total"]), instruction)


def terminal_width() -> int:
    """The terminal's width in columns (80 when there is none: a log, a pipe)."""
    return shutil.get_terminal_size(fallback=(80, 24)).columns


def step_line(step: Step, width: int) -> str:
    """``Step 3/9 : RUN apt-get install ...`` in at most ``width`` characters: the step
    number always, the instruction cut with an ellipsis."""
    line = f"Step {step.number}/{step.total} : {step.instruction}"
    if len(line) <= width:
        return line
    return line[: max(width - 1, len(f"Step {step.number}/{step.total} :"))] + "…"


class BuildLog:
    """The builder's whole output, as it streamed, in ``<run folder>/build.log``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / LOG_NAME
        self._file: TextIO | None = None

    def __enter__(self) -> BuildLog:
        self._file = self.path.open("w", encoding="utf-8", errors="replace")
        return self

    def write(self, text: str) -> None:
        """Keep one chunk of the stream (flushed: the log is read while a build runs)."""
        if self._file is not None:
            self._file.write(text)
            self._file.flush()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
