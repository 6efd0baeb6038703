"""How gpunode replaces a file on a node: whole, never half, and the state file under its lock.

A reader (node_exporter's textfile collector, ``gpunode status``, the next health check) must
never see half a file, and two writers must never interleave: each file is written to a
temporary file in its own folder (one name per writer, never a ``.prom`` name the collector
would read), flushed to disk, renamed over the old one (``rename(2)`` is atomic within one
file system), and the folder flushed so the rename survives a crash. The node's state file
(``nodestate.PATH``) is written under an exclusive ``flock(2)`` on the file beside it
(``<path>.lock``, never renamed nor removed): its writers on the node (the Slurm health
check, its timer) and the control machine's (acceptance, ``gpunode check``, which run
:func:`write_program` on the node) take turns, and a read-compare-write (:func:`update`) is
one step for every other writer.

Standard library only: shipped with the node-side health check
(``check.plan.HEALTHCHECK_MODULES``) and sent whole as a program by the control machine.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

LOCK_SUFFIX = ".lock"
# A writer that waits longer than this for the lock gives up (slurmd kills its health check
# after 60 s; a writer holds the lock for milliseconds).
LOCK_TIMEOUT_S = 30.0


def replace(path: str, text: str | bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` (UTF-8 text, or bytes as they are): a temporary file in
    the same folder, fsync, rename."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o755, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    directory = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


@contextmanager
def locked(path: str, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (``flock`` on ``<path>.lock``).

    Raises:
        TimeoutError: Another writer held it for ``timeout_s``.
    """
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, mode=0o755, exist_ok=True)
    handle = os.open(path + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{path}{LOCK_SUFFIX} held by another writer") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(handle)  # closing the last descriptor releases the lock


def read(path: str) -> str | None:
    """The file's text, or None when there is none (or it cannot be read)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


def update(path: str, change: Callable[[str | None], str | None]) -> str | None:
    """Under the lock: read ``path`` (None: no file), and write what ``change`` makes of it
    (None: leave it). Returns what was written, or None."""
    with locked(path):
        text = change(read(path))
        if text is not None:
            replace(path, text)
        return text


def write_locked(path: str, text: str) -> None:
    """Replace ``path`` with ``text`` under its lock."""
    update(path, lambda _old: text)


def write_program(path: str, text: str) -> bytes:
    """A ``python3 -`` program that writes ``text`` to ``path`` on the node as this module does
    (this module's source, then the call): the control machine's writers run it."""
    with open(__file__, encoding="utf-8") as handle:
        source = handle.read()
    return (source + f"\nwrite_locked({path!r}, {text!r})\n").encode()
