"""The engine's own layer store, read where it is on this machine (``overlay2``).

When the engine stores a layer it keeps the tar's own bytes other than the files' data in a
tar-split record, and the files in the layer's directory; ``docker save`` writes a layer by
replaying that record. ``StoredTar`` is the same replay as a seekable file, and ``read_store``
finds an image's config and layers there, each checked against the content address it is
stored under. Normalisation (``normalise.py``) reads the layers a build added from here, and
through ``docker save`` wherever this store cannot be read.
"""

from __future__ import annotations

import base64
import bisect
import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import docker
import docker.errors

from toolkit.errors import ImageError


class StoredTar:
    """One layer's tar exactly as the engine's save writes it, read from the layer store.

    When the engine stores a layer it keeps the tar's own bytes other than the files' data
    (headers, padding, end of archive) in a tar-split record (one JSON entry a line: type 2
    carries raw bytes, type 1 names a file and its size, its data being that file in the
    layer's directory); ``docker save`` writes a layer by replaying that record. This is the
    same replay as a seekable file, so ``tarfile`` reads the headers without the data and a
    file's data only where it is copied, straight from the layer's directory.
    """

    def __init__(self, record: Path, folder: Path) -> None:
        self.folder = os.path.realpath(folder)
        self.inside: dict[str, bool] = {}  # a directory of the layer: whether it resolves in it
        self.starts: list[int] = []
        self.pieces: list[bytes | tuple[str, int]] = []
        offset = 0
        try:
            text = gzip.decompress(record.read_bytes()).strip().replace(b"\n", b",")
            entries = json.loads(b"[" + text + b"]")
            for entry in entries:
                piece: bytes | tuple[str, int]
                if entry["type"] == 2:  # raw bytes: headers, padding, end of archive
                    piece = base64.b64decode(entry.get("payload") or "")
                    size = len(piece)
                elif entry["type"] == 1:  # a file: its data is in the layer's directory
                    size = int(entry.get("size") or 0)
                    raw = entry.get("name_raw")  # a name that is not UTF-8, as bytes
                    name = (
                        base64.b64decode(raw).decode("utf-8", "surrogateescape")
                        if raw
                        else entry["name"]
                    )
                    piece = (name, size)
                else:
                    raise ValueError(f"entry type {entry['type']}")
                if size:
                    self.starts.append(offset)
                    self.pieces.append(piece)
                    offset += size
        except (OSError, ValueError, KeyError, TypeError, EOFError, gzip.BadGzipFile) as err:
            raise ImageError(f"the layer store's record {record} is unreadable: {err}") from err
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


class StoredLayer:
    """A layer read from the engine's layer store: its tar-split record and its directory."""

    def __init__(self, record: Path, folder: Path) -> None:
        self.record, self.folder = record, folder

    def open(self) -> StoredTar:
        return StoredTar(self.record, self.folder)

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
            layers.append(StoredLayer(record, folder))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return config, layers
