"""The engine's own layer store, read where it is on this machine (``overlay2``).

When the engine stores a layer it keeps the tar's own bytes other than the files' data in a
tar-split record, and the files in the layer's directory; ``docker save`` writes a layer by
replaying that record. ``StoredTar`` is the same replay as a seekable file, and ``read_store``
finds an image's config and layers there, each checked against the content address it is
stored under. Normalisation (``normalise.py``) reads the layers a build added from here, and
through ``docker save`` wherever this store cannot be read.

A record is taken as it is found, so it is read bounded and validated: decompressed as a
stream up to :data:`MAX_RECORD_BYTES`, a line (one entry) at a time up to
:data:`MAX_ENTRY_BYTES`, each a flat JSON object (nesting is refused before it is decoded) with
strict base64 and sizes that are non-negative integers agreeing with their payload. Anything
else is a :class:`LayerRecordError` naming the layer, the record and the line.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import gzip
import hashlib
import json
import os
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors

from toolkit.errors import ImageError, clip

# Bounds on one layer's tar-split record, which the engine's store hands over as it is: a real
# record is about 1 KiB a file (a header as base64, a name and a size), so these pass layers of
# half a million files and keep a hostile record (a gzip bomb, a flood of lines) in bounded
# memory and time.
MAX_RECORD_BYTES = 512 * 1024 * 1024  # decompressed
MAX_ENTRY_BYTES = 1024 * 1024  # one line: headers with long names and extended attributes
MAX_ENTRIES = 4_000_000
_MAX_SIZE = (1 << 63) - 1  # tar-split's sizes are Go int64s
# A JSON string (escapes included): what is left once strings are blanked is the structure.
_STRING_RE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')


class LayerRecordError(ImageError):
    """A layer's tar-split record in the engine's store is unreadable, malformed or past its
    bounds; the message names the layer, the record and the line."""


class StoredTar:
    """One layer's tar exactly as the engine's save writes it, read from the layer store.

    When the engine stores a layer it keeps the tar's own bytes other than the files' data
    (headers, padding, end of archive) in a tar-split record (one JSON entry a line: type 2
    carries raw bytes, type 1 names a file and its size, its data being that file in the
    layer's directory); ``docker save`` writes a layer by replaying that record. This is the
    same replay as a seekable file, so ``tarfile`` reads the headers without the data and a
    file's data only where it is copied, straight from the layer's directory.
    """

    def __init__(
        self,
        record: Path,
        folder: Path,
        *,
        layer: str | None = None,
        max_bytes: int = MAX_RECORD_BYTES,
        max_entry: int = MAX_ENTRY_BYTES,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        """Read the record (every entry validated, within the bounds given).

        Raises:
            LayerRecordError: The record is not gzip, expands past ``max_bytes``, has a line
                past ``max_entry`` bytes or more than ``max_entries`` lines, or an entry that
                is not a flat JSON object of tar-split's fields with their types: a type of 1
                or 2, strict base64, sizes non-negative and agreeing with the payload, a name
                without NUL.
        """
        self.folder = os.path.realpath(folder)
        self.inside: dict[str, bool] = {}  # a directory of the layer: whether it resolves in it
        self.starts: list[int] = []
        self.pieces: list[bytes | tuple[str, int]] = []
        where = f"layer {layer or folder}: the layer store's record {record}"
        offset = 0
        for piece in _record_pieces(record, where, max_bytes, max_entry, max_entries):
            size = len(piece) if isinstance(piece, bytes) else piece[1]
            if size:
                self.starts.append(offset)
                self.pieces.append(piece)
                offset += size
        self.size = offset
        self.pos = 0
        self.handle: tuple[int, int] | None = None  # (piece index, open file descriptor)

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self.pos, os.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def read(self, size: int = -1) -> bytes:
        end = self.size if size < 0 else min(self.size, self.pos + size)
        parts = []
        while self.pos < end:
            index = bisect.bisect_right(self.starts, self.pos) - 1
            piece, within = self.pieces[index], self.pos - self.starts[index]
            if isinstance(piece, bytes):
                data = piece[within : within + end - self.pos]
            else:
                data = self._file_data(
                    index, piece, within, min(end, self.starts[index] + piece[1]) - self.pos
                )
            parts.append(data)
            self.pos += len(data)
        return b"".join(parts)

    def _file_data(self, index: int, piece: tuple[str, int], offset: int, length: int) -> bytes:
        name, size = piece
        if self.handle is None or self.handle[0] != index:
            self.close()
            self.handle = (index, self._open(name, size))
        data = os.pread(self.handle[1], length, offset)
        if len(data) != length:
            raise ImageError(f"{name!r} of {self.folder} is shorter than its layer records")
        return data

    def _open(self, name: str, size: int) -> int:
        """A file of the layer, opened without following a link out of the layer's folder
        (its directory resolved once per directory, the file itself not followed)."""
        path = os.path.normpath(os.path.join(self.folder, name))
        parent = os.path.dirname(path)
        inside = self.inside.get(parent)
        if inside is None:
            real = os.path.realpath(parent)
            inside = self.inside[parent] = real == self.folder or real.startswith(
                self.folder + os.sep
            )
        if not inside or not path.startswith(self.folder + os.sep):
            raise ImageError(f"the layer store names {name!r}, outside its layer {self.folder}")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as err:
            raise ImageError(f"cannot read {name!r} of the layer {self.folder}: {err}") from err
        if os.fstat(fd).st_size != size:
            os.close(fd)
            raise ImageError(f"{name!r} of {self.folder} is not the size its layer records")
        return fd

    def close(self) -> None:
        if self.handle is not None:
            os.close(self.handle[1])
            self.handle = None

    def __enter__(self) -> StoredTar:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _record_pieces(
    record: Path, where: str, max_bytes: int, max_entry: int, max_entries: int
) -> Iterator[bytes | tuple[str, int]]:
    """The pieces of a tar-split record, line by line: raw bytes, or a file's name and size.

    Decompressed as a stream, a line at a time, so neither a gzip bomb nor a huge line is
    ever held whole."""
    total = 0
    try:
        with gzip.open(record, "rb") as stream:
            for number in range(1, max_entries + 2):
                line = stream.readline(max_entry + 1)
                if not line:
                    return
                total += len(line)
                if number > max_entries:
                    raise LayerRecordError(f"{where}: more than {max_entries} entries")
                if total > max_bytes:
                    raise LayerRecordError(f"{where}: expands past {max_bytes} bytes")
                if len(line) > max_entry:
                    raise LayerRecordError(
                        f"{where}, line {number}: an entry longer than {max_entry} bytes"
                    )
                try:
                    piece = _piece(line)
                except ValueError as err:
                    raise LayerRecordError(f"{where}, line {number}: {err}") from None
                yield piece
    except (OSError, EOFError, zlib.error) as err:
        raise LayerRecordError(f"{where} is unreadable: {err}") from err


def _piece(line: bytes) -> bytes | tuple[str, int]:
    """One tar-split entry (``storage.Entry``: a flat object of scalars), validated.

    Raises:
        ValueError: Why the entry is not one (the message is shown to the user).
    """
    # Every field of an entry is a scalar: an entry nested deeper is refused before the
    # decoder recurses into it.
    bare = _STRING_RE.sub(b'""', line)
    if bare.count(b"{") > 1 or b"[" in bare:
        raise ValueError("nested JSON where an entry is one flat object")
    try:
        entry = json.loads(line, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as err:
        raise ValueError(f"not JSON: {clip(str(err))}") from None
    if not isinstance(entry, dict):
        raise ValueError(f"an entry is a JSON object, not {type(entry).__name__}")
    kind = entry.get("type")
    if kind == 2 and type(kind) is int:  # raw bytes: headers, padding, end of archive
        data = _base64(entry.get("payload"), "payload")
        if "size" in entry and _size(entry["size"]) != len(data):
            raise ValueError(f"size {clip(entry['size'])} where the payload has {len(data)}")
        return data
    if kind == 1 and type(kind) is int:  # a file: its data is in the layer's directory
        _base64(entry.get("payload"), "payload")  # the file's CRC-64, when it has data
        raw = entry.get("name_raw")  # a name that is not UTF-8, as bytes
        name: Any = entry.get("name")
        if raw is not None:
            name = _base64(raw, "name_raw").decode("utf-8", "surrogateescape")
        if not isinstance(name, str):
            raise ValueError(f"name {clip(repr(name))} is not a string")
        if not name or "\0" in name:
            raise ValueError(f"name {clip(repr(name))} is empty or holds a NUL")
        try:
            os.fsencode(name)
        except UnicodeEncodeError:  # a lone surrogate that no byte spells
            raise ValueError(f"name {clip(repr(name))} is no path of bytes") from None
        size = entry.get("size")
        return name, 0 if size is None else _size(size)
    raise ValueError(f"entry type {clip(repr(kind))} is neither 1 (a file) nor 2 (raw bytes)")


def _refuse_constant(constant: str) -> Any:
    raise ValueError(f"non-finite number {constant}")


def _base64(value: Any, field: str) -> bytes:
    """Strict base64 (Go's encoding of ``[]byte``): any other character is refused."""
    if value is None:
        return b""
    if not isinstance(value, str):
        raise ValueError(f"{field} {clip(repr(value))} is not a base64 string")
    try:
        return base64.b64decode(value.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as err:
        raise ValueError(f"{field} is not base64 ({err}): {clip(repr(value))}") from None


def _size(value: Any) -> int:
    if type(value) is not int or not 0 <= value <= _MAX_SIZE:
        raise ValueError(f"size {clip(repr(value))} is not an integer from 0 to 2**63-1")
    return value


class StoredLayer:
    """A layer read from the engine's layer store: its tar-split record and its directory."""

    def __init__(self, record: Path, folder: Path, layer: str | None = None) -> None:
        self.record, self.folder, self.layer = record, folder, layer

    def open(self) -> StoredTar:
        return StoredTar(self.record, self.folder, layer=self.layer)

    def release(self) -> None:
        pass


def chain_id(diff_ids: list[str]) -> str:
    """The chain ID of a stack of layers (OCI image spec): the first diff ID, then
    ``sha256(parent chain ID + " " + diff ID)`` for each layer above."""
    chain = diff_ids[0]
    for diff in diff_ids[1:]:
        chain = "sha256:" + hashlib.sha256(f"{chain} {diff}".encode()).hexdigest()
    return chain


def read_store(
    client: docker.DockerClient, image_id: str, first: int
) -> tuple[dict[str, Any], list[StoredLayer | None]] | None:
    """An image's config and its layers from ``first`` up, from the engine's overlay2 store,
    where this machine can read it (the layers below ``first`` are None). None where it
    cannot (another storage driver, an engine elsewhere or out of reach, a store not laid out
    as expected): then normalisation reads the image through the engine's save.

    Every piece is checked against the content address it is stored under: the config's
    SHA-256 is the image ID, and each layer's record holds the diff ID of its chain."""
    try:
        info = client.info()
    except docker.errors.APIError as err:
        raise ImageError(f"cannot ask the engine about its storage: {err}") from err
    if info.get("Driver") != "overlay2" or not info.get("DockerRootDir"):
        return None
    root = Path(str(info["DockerRootDir"]))
    digest = image_id.split(":", 1)[-1]
    try:
        blob = (root / "image/overlay2/imagedb/content/sha256" / digest).read_bytes()
        if hashlib.sha256(blob).hexdigest() != digest:
            return None
        config = json.loads(blob)
        diff_ids = list(config["rootfs"]["diff_ids"])
        layers: list[StoredLayer | None] = [None] * first
        for index in range(first, len(diff_ids)):
            chain = chain_id(diff_ids[: index + 1]).split(":", 1)[1]
            entry = root / "image/overlay2/layerdb/sha256" / chain
            if (entry / "diff").read_text().strip() != diff_ids[index]:
                return None
            folder = root / "overlay2" / (entry / "cache-id").read_text().strip() / "diff"
            record = entry / "tar-split.json.gz"
            if not folder.is_dir() or not os.access(record, os.R_OK):
                return None
            layers.append(StoredLayer(record, folder, diff_ids[index]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return config, layers
