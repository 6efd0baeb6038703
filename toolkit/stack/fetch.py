"""Bounded reads of repository files: every fetch and every unpack has a size cap.

A repository is read before anything it serves is trusted, so what it serves cannot be
allowed to decide how much is read: a file that never ends, a FIFO where a file is expected,
or a Packages.xz that unpacks to gigabytes is refused by name (:class:`IndexRefused`), never
read until memory or patience runs out.

The caps, against the real indexes in ``tests/data/real/libnvidia-container/`` (NVIDIA's
container-toolkit repository): its ``InRelease`` is 1,477 bytes, its key 4,666 bytes, its
largest ``Packages`` 178,415 bytes (toolkit 1.20.1; SOURCES.md). NVIDIA's CUDA repositories
list every CUDA release in one flat index, so the Packages cap leaves a wide margin above
them: 64 MiB, 350 times the largest one measured.
"""

from __future__ import annotations

import lzma
import os
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable
from typing import Protocol

from toolkit.errors import StackError

# The most bytes read of a key file, an InRelease, a Release or a Release.gpg.
MAX_SIGNED_BYTES = 1 << 20
# The most bytes read of a Packages file, fetched or unpacked (Packages.xz, Packages.gz).
MAX_PACKAGES_BYTES = 64 << 20
# The most memory the xz decoder may use (xz's own presets need at most 674 MiB for -9e;
# repository tools write -6, 94 MiB).
XZ_MEMLIMIT = 128 << 20
# A whole fetch must end within this many seconds (a server trickling bytes under the
# socket timeout would otherwise hold the lock forever).
FETCH_DEADLINE_S = 300.0
_CHUNK = 1 << 16

# (url, most bytes) -> bytes; tests pass file:// URLs, sites http(s).
Fetch = Callable[[str, int], bytes]


class IndexRefused(StackError):
    """A repository file refused for what it is (too large, not a regular file, outside the
    signature), not merely unreadable: nothing falls back past it."""


def _too_large(url: str, limit: int) -> IndexRefused:
    return IndexRefused(f"{url}: refused: larger than {limit} bytes (the cap for this file)")


def _read_local(url: str, limit: int) -> bytes:
    parts = urllib.parse.urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise StackError(f"cannot read {url}: a file URL names another host")
    path = urllib.request.url2pathname(parts.path)
    try:
        # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise StackError(f"cannot read {url}: {err.strerror or err}") from err
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IndexRefused(f"{url}: refused: not a regular file")
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise StackError(f"cannot read {url}: {err.strerror or err}") from err
    finally:
        os.close(fd)
    if size > limit:
        raise _too_large(url, limit)
    return b"".join(chunks)


def fetch_url(url: str, limit: int = MAX_SIGNED_BYTES) -> bytes:
    """Read a URL (http, https or file), at most ``limit`` bytes.

    Raises:
        IndexRefused: It holds more than ``limit`` bytes, is not a regular file (file://),
            or does not end within :data:`FETCH_DEADLINE_S`.
        StackError: It cannot be read.
    """
    if urllib.parse.urlsplit(url).scheme == "file":
        return _read_local(url, limit)
    deadline = time.monotonic() + FETCH_DEADLINE_S
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            chunks: list[bytes] = []
            size = 0
            while size <= limit:
                if time.monotonic() > deadline:
                    raise IndexRefused(f"{url}: refused: not read within {FETCH_DEADLINE_S:.0f} s")
                chunk = response.read(min(_CHUNK, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise StackError(f"cannot read {url}: {err}") from err
    if size > limit:
        raise _too_large(url, limit)
    return b"".join(chunks)


# -- unpacking, bounded ----------------------------------------------------------------------


class _Decoder(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def unused_data(self) -> bytes: ...
    def decompress(self, data: bytes, max_length: int, /) -> bytes: ...


def _unpack(data: bytes, new: Callable[[], _Decoder], limit: int) -> bytes:
    """Every concatenated stream of ``data`` (xz and gzip allow several), at most ``limit``
    bytes out; trailing zero padding is ignored as xz and gzip ignore it."""
    out = bytearray()
    while True:
        decoder = new()
        out += decoder.decompress(data, limit + 1 - len(out))
        if len(out) > limit:
            raise ValueError(f"it unpacks to more than {limit} bytes (the cap for this file)")
        if not decoder.eof:
            raise ValueError("the compressed data ends before its end-of-stream marker")
        data = decoder.unused_data
        if not data.strip(b"\0"):
            return bytes(out)


def unxz(data: bytes, limit: int = MAX_PACKAGES_BYTES) -> bytes:
    """An xz (or lzma) file unpacked, at most ``limit`` bytes.

    Raises:
        ValueError: Corrupt, truncated, or larger than ``limit`` unpacked.
    """
    try:
        return _unpack(data, lambda: lzma.LZMADecompressor(memlimit=XZ_MEMLIMIT), limit)
    except lzma.LZMAError as err:
        raise ValueError(str(err)) from err


def gunzip(data: bytes, limit: int = MAX_PACKAGES_BYTES) -> bytes:
    """A gzip file unpacked, at most ``limit`` bytes.

    Raises:
        ValueError: Corrupt, truncated, or larger than ``limit`` unpacked.
    """
    try:
        return _unpack(data, lambda: zlib.decompressobj(16 + zlib.MAX_WBITS), limit)
    except zlib.error as err:
        raise ValueError(str(err)) from err
