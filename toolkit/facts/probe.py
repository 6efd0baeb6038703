"""The probe dialect: one read-only shell script prints facts in sections, one function splits them.

A section is printed as::

    @@gpunode-fact NAME[ ARG]@@
    <the command's output>
    @@gpunode-fact-end STATUS@@

STATUS is the command's exit status, or ``missing`` when what it needs is not there (the
program is not installed, or the section's condition does not hold). Each marker starts on
a line of its own (the script prints a newline before it), so a command's output without a
final newline still ends before the marker. :func:`split` undoes exactly that: a section's
text is the command's output less its final newline.

Two ways to print a section, both from the prelude:

- :class:`Fact` (a fixed command line with its parser): ``section NAME PROGRAM ARG...`` runs
  the program with its errors on the same output (parsers read error messages such as
  "No such file") when it is installed.
- :func:`block` (a shell snippet, for probes that loop or test first, such as the disks'):
  the snippet's own standard output and its exit status, ``missing`` when ``when`` fails.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MARK = "@@gpunode-fact"

PRELUDE = f"""set +e
LC_ALL=C
export LC_ALL
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
fact_begin() {{ printf '\\n{MARK} %s@@\\n' "$*"; }}
fact_end() {{ printf '\\n{MARK}-end %s@@\\n' "$1"; }}
section() {{
  fact_begin "$1"; shift
  if command -v "$1" >/dev/null 2>&1; then
    "$@" 2>&1
    fact_end $?
  else
    fact_end missing
  fi
}}
"""

_SECTION = re.compile(
    rf"^{MARK} (?P<head>[^\n]*)@@\n(?P<body>.*?)\n?{MARK}-end (?P<status>\S+)@@$", re.M | re.S
)

Status = int | None  # the exit status; None: missing


@dataclass(frozen=True)
class Section:
    """One section of a probe's output."""

    name: str
    arg: str
    text: str
    rc: Status


@dataclass(frozen=True)
class Fact:
    """One fact: the command that reads it and the parser of its section.

    ``parse`` takes the section's exit status (None: the program is not installed) and text.
    """

    name: str
    argv: tuple[str, ...]
    parse: Callable[[Status, str], Any]

    def shell(self) -> str:
        """The script's line that prints this fact's section."""
        return f"section {self.name} {shlex.join(self.argv)}"

    def read(self, sections: Mapping[str, tuple[Status, str]]) -> Any:
        """The parsed fact from :func:`by_name` sections (a missing section counts as missing)."""
        return self.parse(*sections.get(self.name, (None, "")))


def installed(program: str) -> str:
    """The shell condition that ``program`` is installed (for :func:`block`)."""
    return f"command -v {shlex.quote(program)} >/dev/null 2>&1"


def block(name: str, snippet: str, *, arg: str = "", when: str = "") -> str:
    """Shell text printing one section from a snippet.

    Args:
        name: The section's name.
        snippet: Shell commands; their standard output is the text, the last one's exit
            status the section's status.
        arg: A shell word (quoted by the caller, may expand a variable) naming what the
            section is about, e.g. a device path.
        when: A shell condition; when it fails, the section is ``missing`` and the snippet
            does not run.
    """
    head = f"fact_begin {shlex.quote(name)}{' ' + arg if arg else ''}"
    if not when:
        return f"{head}\n{snippet}\nfact_end $?"
    return f"{head}\nif {when}; then\n{snippet}\nfact_end $?\nelse fact_end missing; fi"


def script(parts: Iterable[Fact | str]) -> str:
    """The read-only probe script: the prelude, then each fact's or :func:`block`'s text."""
    lines = [PRELUDE]
    lines += [part.shell() if isinstance(part, Fact) else part for part in parts]
    lines.append("exit 0\n")
    return "\n".join(lines)


def split(text: str) -> list[Section]:
    """Every section of a probe's output, in order (none when it printed no section)."""
    # A connection with a terminal (become over ssh -tt) turns every newline into CRLF.
    text = text.replace("\r\n", "\n")
    sections = []
    for match in _SECTION.finditer(text):
        name, _, arg = match["head"].partition(" ")
        status = match["status"]
        rc = None if status == "missing" else int(status) if status.lstrip("-").isdigit() else 1
        body = match["body"]
        sections.append(Section(name, arg, body[:-1] if body.endswith("\n") else body, rc))
    return sections


def by_name(text: str) -> dict[str, tuple[Status, str]]:
    """The probe's sections by name: (exit status or None when missing, text)."""
    return {s.name: (s.rc, s.text) for s in split(text)}
