"""The one rule for showing text that came from outside: a node, a file, a certificate.

Such text can hold terminal control sequences (``ESC ] 0 ; title BEL`` retitles a terminal,
``ESC [ 2 J`` clears it), NUL, or Unicode bidirectional overrides that make a line read
otherwise than its characters ("Trojan Source", CVE-2021-42574: U+202A-202E, U+2066-2069).
Printed as they are, they act on the reader's terminal. :func:`printable` shows each such
character as a visible escape instead (``\\x1b``, ``\\x00``, ``\\u202e``), and so does every
command: the CLI prints untrusted values only through it (``toolkit.cli.output.shown``).
"""

from __future__ import annotations

# C0 controls, DEL, C1 controls, the bidi embeddings, overrides and isolates, and lone
# surrogates (a file name that is not UTF-8, decoded with surrogateescape, cannot be written).
_ESCAPED = [
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    *range(0xD800, 0xE000),
]
_SHORT = {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
_TABLE = {
    code: _SHORT.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
    for code in _ESCAPED
}
_TABLE_LINES = {code: text for code, text in _TABLE.items() if code not in (0x09, 0x0A)}


def printable(value: object, *, lines: bool = False) -> str:
    """``value`` as text that is safe to print on a terminal.

    Args:
        value: Anything; non-strings are shown with ``str``.
        lines: Keep newlines and tabs (a message of several lines that gpunode composed);
            by default they are escaped too, so that one value stays on one line.
    """
    text = value if isinstance(value, str) else str(value)
    return text.translate(_TABLE_LINES if lines else _TABLE)
