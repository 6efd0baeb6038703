"""Normalising a built image so that the same inputs give the same image ID.

The classic builder behind the Python docker SDK ignores ``SOURCE_DATE_EPOCH``: file times in
the layers are build times, and the config carries the creation time, the build container's
ID and hostname and the engine's version. This module reads the image's layer tars, rewrites
every layer the build added (entries sorted by name, hard links pointing at the first name of
their set, mtimes clamped to the source date, owners, modes, links and extended attributes
kept), fixes the config's and history's times, drops the per-build fields, and streams the
result back (``docker load``) with only the layers whose chain the engine lacks. The base's
layers are left exactly as they are: the base is pinned by its digest. A builder layer
normalised before (the builder's cache served it: same bytes, same diff ID) is not rewritten
again. The method follows go-containerregistry's ``mutate.Canonical`` and ``buildah
--rewrite-timestamp``.

Two sources give the same layer tars, byte for byte, to one reader and one writer
(``Canonical``; ``rewrite_layer`` runs it on a tar stream):

- the engine's layer store (``overlay2``, the engine on this machine, its store readable):
  the config is the file named by the image ID (checked: its SHA-256 is the ID), and each
  layer's tar is what ``docker save`` replays, its tar-split record (the tar's own bytes other
  than the files' data) with each file's data read from the layer's directory
  (``layerstore.py``).
  This is the usual path: Docker 20.10's save copies every layer, the base's too, into a
  temporary folder before it writes the archive (5.0 of the 7.0 s normalisation took on the
  906 MB training image); read here, only the added layers are read.
- ``docker save``, streamed, each file of it written once: the one general way, for any
  other storage driver, an engine elsewhere (``DOCKER_HOST``) or a store this user cannot
  read, and wherever the store is not laid out as expected (``read_store`` says None, never
  half).

A rewritten layer is never written to a file. Its headers are planned once (``Canonical``),
which gives its size before any data is read; a first pass only hashes it, and its diff ID says
whether the engine holds that chain already (a rebuild of a recipe, or ``verify``, makes the
layers the engine holds: nothing more is read); only a layer the engine lacks is read a second
time, as it is streamed into ``docker load``. On the 906 MB training image: 2.4-2.8 s where the
engine holds the result (3.3-3.4 s when the rewrite went through a temporary file), the same
10-11 s as before where it loads 796 MB (the engine's load is most of it).

The same pass records every file of every layer (type, mode, owner, size, SHA-256), which is
what ``verify`` compares when two builds differ.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, NamedTuple

import docker
import docker.errors

from toolkit.errors import ImageError
from toolkit.images.layerstore import StoredLayer, StoredTar, read_store

# Per-build fields of the classic builder's config: the build container's ID and its config
# (with the container's hostname), and the engine's version.
DROPPED_CONFIG_KEYS = ("container", "container_config", "docker_version")
# Extended header keys a tar writer may add that carry access/change times.
DROPPED_PAX_KEYS = ("atime", "ctime", "mtime")
# Paths that change from build to build and must never reach a layer (domain.md, section 5).
VOLATILE_PREFIXES = (
    "var/lib/apt/lists/",
    "var/cache/apt/",
    "var/log/",
    "root/.cache/",
    "tmp/",
)
VOLATILE_FILES = (
    "var/cache/ldconfig/aux-cache",
    "etc/machine-id",
    "var/lib/dbus/machine-id",
)
CHUNK = 1 << 20
NUL = b"\0"


@dataclass(frozen=True)
class FileEntry:
    """One entry of a layer, as compared between builds."""

    kind: str
    mode: int
    uid: int
    gid: int
    size: int
    mtime: int
    sha256: str | None
    link: str | None


@dataclass
class Normalised:
    """An image after normalisation."""

    id: str
    source_id: str
    base_layers: int
    layers: list[dict[str, FileEntry]]  # the added layers' files, in order
    config: dict[str, Any]
    seconds: float
    size: int
    volatile: list[str] = field(default_factory=list)
    rewritten_bytes: int = 0  # the layers rewritten by this normalisation, as tars
    reused_layers: int = 0  # layers known from an earlier normalisation, not rewritten
    read_seconds: float = 0.0  # of ``seconds``: finding the layers (the save, or the store's)
    source: str = ""  # where the layers were read: "layer store" or "save"


def epoch_iso(epoch: int) -> str:
    """The config's time format for the source date."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_volatile(name: str) -> bool:
    """Whether a layer path is one that must never be in an image."""
    path = name.lstrip("./")
    base = os.path.basename(path)
    if base.startswith(".wh."):
        return False  # a whiteout removes a path: that is the fix, not the problem
    if path in VOLATILE_FILES or path.startswith("etc/ssh/ssh_host_"):
        return True
    if "__pycache__/" in path or path.endswith(".pyc"):
        return True
    return any(path.startswith(p) and path != p for p in VOLATILE_PREFIXES)


def _kind(member: tarfile.TarInfo) -> str:
    return {
        tarfile.REGTYPE: "file",
        tarfile.AREGTYPE: "file",
        tarfile.DIRTYPE: "dir",
        tarfile.SYMTYPE: "symlink",
        tarfile.LNKTYPE: "hardlink",
        tarfile.CHRTYPE: "char",
        tarfile.BLKTYPE: "block",
        tarfile.FIFOTYPE: "fifo",
    }.get(member.type, "other")


def _copy(member: tarfile.TarInfo, name: str, epoch: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = member.type
    info.mode = member.mode & 0o7777  # the type is in the entry type, not the mode
    info.uid, info.gid = member.uid, member.gid
    info.uname, info.gname = member.uname, member.gname
    info.size = member.size if member.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    info.mtime = min(int(member.mtime), epoch)
    info.linkname = member.linkname
    info.devmajor, info.devminor = member.devmajor, member.devminor
    info.pax_headers = {
        k: v for k, v in member.pax_headers.items() if k not in DROPPED_PAX_KEYS and k != "path"
    }
    return info


def fix_config(
    config: dict[str, Any], diff_ids: list[str], base_history: int, epoch: int
) -> dict[str, Any]:
    """The config with the new layers, the source date and no per-build fields."""
    fixed = {k: v for k, v in config.items() if k not in DROPPED_CONFIG_KEYS}
    created = epoch_iso(epoch)
    fixed["created"] = created
    history = []
    for index, entry in enumerate(config.get("history") or []):
        entry = dict(entry)
        if index >= base_history:
            entry["created"] = created
        history.append(entry)
    fixed["history"] = history
    fixed["rootfs"] = {"type": "layers", "diff_ids": diff_ids}
    inner = dict(fixed.get("config") or {})
    # The classic builder records the build container's hostname and the ID of the
    # intermediate image of the last step: both differ from one build to the next.
    inner["Hostname"] = ""
    inner["Image"] = ""
    fixed["config"] = inner
    return fixed


def config_bytes(config: dict[str, Any]) -> bytes:
    """The config as stored: canonical JSON (its SHA-256 is the image ID)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


class ChunkReader:
    """A file-like view of the engine's byte chunks (``docker save``'s stream)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.pending = memoryview(b"")

    def read(self, size: int = -1) -> bytes:
        parts = []
        while size != 0:
            if not self.pending:
                chunk = next(self.chunks, b"")
                if not chunk:
                    break
                self.pending = memoryview(chunk)
            taken = self.pending[:size] if size > 0 else self.pending
            parts.append(bytes(taken))
            self.pending = self.pending[len(taken) :]
            size = size - len(taken) if size > 0 else size
        return b"".join(parts)


class SavedLayer:
    """A layer tar of the engine's save, in its own file (removed once normalisation is done
    with it: rewritten, and sent where the engine lacks it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> IO[bytes]:
        return self.path.open("rb")

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


class Rewritten(NamedTuple):
    """One layer rewritten: its diff ID, its files, and its size as a tar."""

    diff_id: str
    files: dict[str, FileEntry]
    size: int


class Canonical:
    """A layer tar's canonical form, planned from its headers alone: every entry in name order
    with the header it is written with and, for a file, the member of the source holding its
    data. A set of hard links is written as one regular file under the first name of the set
    and links to it from the others (a link must follow its target); mtimes later than
    ``epoch`` become ``epoch``; everything else is kept.

    The bytes are those of Python's tar writer in the PAX format (each header, the file's data,
    padding to the block, the end-of-archive blocks and padding to the record), so the size is
    known before any file's data is read: the rewritten layer can be streamed to the engine
    without being written anywhere first.
    """

    def __init__(self, archive: tarfile.TarFile, epoch: int) -> None:
        self.archive = archive
        members = {m.name: m for m in archive.getmembers()}
        # Hard-link sets: the member holding the data and every name linking to it.
        holder_of: dict[str, str] = {}
        for member in members.values():
            if member.type == tarfile.LNKTYPE:
                target_name = member.linkname
                while target_name in members and members[target_name].type == tarfile.LNKTYPE:
                    target_name = members[target_name].linkname
                holder_of[member.name] = target_name
        sets: dict[str, list[str]] = {}
        for name, holder in holder_of.items():
            sets.setdefault(holder, [holder]).append(name)
        first_of = {name: min(group) for group in sets.values() for name in group}
        self.entries: list[tuple[tarfile.TarInfo, bytes, tarfile.TarInfo | None]] = []
        size = 0
        for name in sorted(members):
            member = members[name]
            first = first_of.get(name)
            if first is not None:
                member = members[holder_of.get(name, name)]
                info = _copy(member, name, epoch)
                if name != first:
                    info.type, info.linkname, info.size = tarfile.LNKTYPE, first, 0
            else:
                info = _copy(member, name, epoch)
            header = info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")
            data = member if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else None
            self.entries.append((info, header, data))
            size += len(header) + info.size + (-info.size % tarfile.BLOCKSIZE)
        size += 2 * tarfile.BLOCKSIZE
        self.tail = NUL * (2 * tarfile.BLOCKSIZE + (-size % tarfile.RECORDSIZE))
        self.size = size + (-size % tarfile.RECORDSIZE)

    def chunks(self, hashes: dict[str, str] | None = None) -> Iterator[bytes]:
        """The layer's bytes in pieces of about ``CHUNK``; with ``hashes``, each file's SHA-256
        is taken on the way (one read per file)."""
        pending = bytearray()
        for info, header, member in self.entries:
            pending += header
            if member is not None:
                handle = self.archive.extractfile(member)  # a regular file's: never None
                assert handle is not None
                digest = hashlib.sha256() if hashes is not None else None
                left = info.size
                while left:
                    data = handle.read(min(left, CHUNK))
                    if not data:
                        raise ImageError(f"{info.name!r} ends before the size its layer records")
                    if digest is not None:
                        digest.update(data)
                    left -= len(data)
                    if len(data) >= CHUNK // 4:
                        if pending:
                            yield bytes(pending)
                            pending.clear()
                        yield data
                    else:
                        pending += data
                pending += NUL * (-info.size % tarfile.BLOCKSIZE)
                if digest is not None:
                    assert hashes is not None
                    hashes[info.name] = digest.hexdigest()
            if len(pending) >= CHUNK:
                yield bytes(pending)
                pending.clear()
        pending += self.tail
        yield bytes(pending)

    def rewrite(self, target: IO[bytes] | None, *, hashes: bool = True) -> Rewritten:
        """The layer written to ``target`` (None: only hashed); its diff ID, files and size."""
        digests: dict[str, str] | None = {} if hashes else None
        layer_hash = hashlib.sha256()
        written = 0
        for chunk in self.chunks(digests):
            layer_hash.update(chunk)
            written += len(chunk)
            if target is not None:
                target.write(chunk)
        if written != self.size:
            raise ImageError(f"a rewritten layer came to {written} bytes, not {self.size}")
        files = {
            info.name: FileEntry(
                kind=_kind(info),
                mode=info.mode,
                uid=info.uid,
                gid=info.gid,
                size=info.size,
                mtime=int(info.mtime),
                sha256=digests.get(info.name) if digests is not None else None,
                link=info.linkname or None,
            )
            for info, _header, _member in self.entries
        }
        return Rewritten("sha256:" + layer_hash.hexdigest(), files, written)


def rewrite_layer(
    source: IO[bytes] | StoredTar,
    target: IO[bytes] | None,
    epoch: int,
    *,
    hashes: bool = True,
) -> Rewritten:
    """Rewrite one layer tar canonically (``Canonical``); returns its diff ID, its files and
    its size. Each file's data is read once; with ``hashes`` its SHA-256 is taken on the way
    (what ``verify`` compares), and a ``target`` of None only hashes the rewritten layer.
    """
    reading: Any = source  # tarfile needs only read(), seek() and tell()
    with tarfile.open(fileobj=reading, mode="r:") as archive:
        return Canonical(archive, epoch).rewrite(target, hashes=hashes)


@contextmanager
def open_canonical(layer: SavedLayer | StoredLayer, epoch: int) -> Iterator[Canonical]:
    """A layer of the source, open and planned in its canonical form for as long as the
    context lasts (rewritten once to find its diff ID, and again where it is sent)."""
    with layer.open() as handle:
        reading: Any = handle  # tarfile needs only read(), seek() and tell()
        with tarfile.open(fileobj=reading, mode="r:") as archive:
            yield Canonical(archive, epoch)


@dataclass
class _Source:
    """An image as normalisation reads it: its config and its layer tars, bottom first."""

    config: dict[str, Any]
    layers: list[SavedLayer | StoredLayer | None]  # None: a layer never read (the base's)
    name: str  # "layer store" or "save"


def _stored(client: docker.DockerClient, image_id: str, first: int) -> _Source | None:
    """The image from the engine's layer store where it can be read here, else None."""
    found = read_store(client, image_id, first)
    if found is None:
        return None
    config, layers = found
    return _Source(config=config, layers=[*layers], name="layer store")


def _save(client: docker.DockerClient, image_id: str, folder: Path) -> _Source:
    """``docker save`` of one image, streamed: each file of the archive is written once, the
    archive itself never (the layers are read again only where they are rewritten)."""
    names: dict[str, Path] = {}
    try:
        stream = ChunkReader(client.api.get_image(image_id, chunk_size=CHUNK))
        with tarfile.open(fileobj=stream, mode="r|", bufsize=CHUNK) as archive:  # type: ignore[call-overload]
            for member in archive:
                if not member.isfile():
                    continue
                path = folder / f"member-{len(names)}"
                with path.open("wb") as out:
                    shutil.copyfileobj(archive.extractfile(member), out, CHUNK)
                names[member.name] = path
    except docker.errors.APIError as err:
        raise ImageError(f"cannot save image {image_id}: {err}") from err
    except tarfile.TarError as err:
        raise ImageError(f"the engine's save of {image_id} is not a tar: {err}") from err
    try:
        manifest = json.loads(names["manifest.json"].read_text())[0]
        config = json.loads(names[manifest["Config"]].read_text())
        layers: list[SavedLayer | StoredLayer | None] = [
            SavedLayer(names[p]) for p in manifest["Layers"]
        ]
        return _Source(config=config, layers=layers, name="save")
    except (KeyError, IndexError, ValueError) as err:
        raise ImageError(f"the engine's save of {image_id} has no usable manifest") from err


def _base_counts(client: docker.DockerClient, base: str | None) -> tuple[int, int]:
    """How many layers and history entries the base has (they are left as they are)."""
    if not base:
        return 0, 0
    try:
        attrs = client.images.get(base).attrs
        history = client.api.history(base)
    except docker.errors.APIError as err:
        raise ImageError(f"cannot inspect the base image {base}: {err}") from err
    return len(attrs["RootFS"]["Layers"]), len(history)


def chain_prefixes(stacks: Iterable[list[str]]) -> set[tuple[str, ...]]:
    """Every layer stack (diff IDs, bottom first) with each of its prefixes: a prefix is a
    chain ID an engine holding those stacks holds."""
    return {tuple(diffs[: depth + 1]) for diffs in stacks for depth in range(len(diffs))}


def local_chains(client: docker.DockerClient) -> set[tuple[str, ...]]:
    """The layer chains of the images on this engine (every prefix of each image's stack)."""
    try:
        images = client.images.list()
    except docker.errors.APIError as err:
        raise ImageError(f"cannot list the engine's images: {err}") from err
    return chain_prefixes(list(image.attrs["RootFS"].get("Layers") or []) for image in images)


def read_image(
    client: docker.DockerClient,
    image_id: str,
    base: str | None,
    epoch: int,
    workdir: Path | None = None,
    *,
    store: bool = True,
) -> Normalised:
    """The files (with their SHA-256) and config of an image, as normalisation sees them
    (nothing is loaded). ``store=False`` reads the image through the engine's save even where
    its layer store is readable here."""
    return _run(client, image_id, base, epoch, workdir, load=False, tags=(), reuse={}, store=store)


def normalise(
    client: docker.DockerClient,
    image_id: str,
    base: str | None,
    epoch: int,
    tags: tuple[str, ...] = (),
    workdir: Path | None = None,
    reuse: Mapping[str, str] | None = None,
    *,
    store: bool = True,
) -> Normalised:
    """Normalise an image and load it back; returns the normalised image's ID and files.

    ``reuse`` maps a builder layer's diff ID to the diff ID normalisation gave it before
    (a layer's rewrite depends only on its bytes and ``epoch``, and a diff ID is the SHA-256
    of those bytes); such a layer is not rewritten where this engine holds its chain. The
    engine is sent only the rewritten layers whose chain it lacks (``docker load`` reads a
    layer's file only for a missing chain). File hashes are left out (``read_image`` takes
    them). The layers are read from the engine's layer store where it can be read here, else
    through the engine's save (``store=False``: always the save).

    Raises:
        ImageError: The engine refused to save or load, or the image is malformed.
    """
    return _run(
        client, image_id, base, epoch, workdir, load=True, tags=tags, reuse=reuse or {}, store=store
    )


def _run(
    client: docker.DockerClient,
    image_id: str,
    base: str | None,
    epoch: int,
    workdir: Path | None,
    *,
    load: bool,
    tags: tuple[str, ...],
    reuse: Mapping[str, str],
    store: bool,
) -> Normalised:
    started = time.perf_counter()
    base_layers, base_history = _base_counts(client, base)
    held = local_chains(client) if load else set()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpunode-normalise-", dir=workdir) as tmp:
        folder = Path(tmp)
        source = (store and _stored(client, image_id, base_layers)) or _save(
            client, image_id, folder
        )
        read_seconds = time.perf_counter() - started
        raw_ids = list(source.config["rootfs"]["diff_ids"])
        if len(raw_ids) != len(source.layers):
            raise ImageError(f"image {image_id}: {len(source.layers)} layers, {len(raw_ids)} IDs")
        diff_ids = raw_ids[:base_layers]
        # Rewritten layers whose chain the engine lacks: kept open, planned, until they are sent.
        send: dict[int, Canonical] = {}
        added: list[dict[str, FileEntry]] = []
        volatile: list[str] = []
        written = reused = 0
        with ExitStack() as kept:
            for index in range(base_layers, len(raw_ids)):
                known = reuse.get(raw_ids[index])
                if known is not None and (*diff_ids, known) in held:
                    diff_ids.append(known)
                    added.append({})  # rewritten and checked when it was first built
                    reused += 1
                    continue
                layer = source.layers[index]
                if layer is None:
                    raise ImageError(f"image {image_id}: layer {index} was not read")
                # Only hashed: its diff ID says whether the engine holds it already; if not,
                # it is rewritten again as it is sent (never written to a file in between).
                with ExitStack() as opened:
                    layout = opened.enter_context(open_canonical(layer, epoch))
                    diff_id, files, size = layout.rewrite(None, hashes=not load)
                    diff_ids.append(diff_id)
                    if load and tuple(diff_ids) not in held:
                        send[index] = layout
                        kept.push(opened.pop_all())
                        kept.callback(layer.release)
                    else:
                        opened.callback(layer.release)  # one copy of a layer at a time
                written += size
                added.append(files)
                volatile += [f"layer {index}: {name}" for name in files if is_volatile(name)]
            config = fix_config(source.config, diff_ids, base_history, epoch)
            blob = config_bytes(config)
            new_id = "sha256:" + hashlib.sha256(blob).hexdigest()
            if load:
                if any(tuple(diff_ids[: i + 1]) not in held for i in range(base_layers)):
                    raise ImageError(f"the base {base} is not on this engine")
                _load(client, blob, new_id, diff_ids, send, tags)
    return Normalised(
        id=new_id,
        source_id=image_id,
        base_layers=base_layers,
        layers=added,
        config=config,
        seconds=time.perf_counter() - started,
        size=_image_size(client, image_id),
        volatile=volatile,
        rewritten_bytes=written,
        reused_layers=reused,
        read_seconds=read_seconds,
        source=source.name,
    )


def _image_size(client: docker.DockerClient, image_id: str) -> int:
    """The engine's size of an image (its files, uncompressed)."""
    try:
        return int(client.images.get(image_id).attrs.get("Size") or 0)
    except docker.errors.APIError as err:
        raise ImageError(f"cannot inspect image {image_id}: {err}") from err


def load_archive(
    config: bytes,
    config_name: str,
    manifest: bytes,
    layers: Iterable[tuple[str, int, Iterable[bytes]]],
) -> Iterator[bytes]:
    """A ``docker load`` archive, streamed: each layer (its name, its size, its bytes), the
    config and the manifest, and the end of the archive (the engine reads the manifest after
    the whole archive). A layer whose bytes do not come to its size stops the stream."""

    def header(name: str, size: int) -> bytes:
        info = tarfile.TarInfo(name)
        info.size, info.mode = size, 0o644
        return info.tobuf(tarfile.PAX_FORMAT)

    for name, size, chunks in layers:
        yield header(name, size)
        sent = 0
        for chunk in chunks:
            sent += len(chunk)
            if sent > size:
                break
            yield chunk
        if sent != size:
            raise ImageError(f"{name}: {sent} bytes where its header promised {size}")
        yield NUL * (-size % tarfile.BLOCKSIZE)
    for name, data in ((config_name, config), ("manifest.json", manifest)):
        yield header(name, len(data)) + data + NUL * (-len(data) % tarfile.BLOCKSIZE)
    yield NUL * (2 * tarfile.BLOCKSIZE)


def _load(
    client: docker.DockerClient,
    blob: bytes,
    new_id: str,
    diff_ids: list[str],
    send: Mapping[int, Canonical],
    tags: tuple[str, ...],
) -> None:
    """Load the normalised image: its config, and the layers of the chains the engine lacks
    (it reads a layer only for a missing chain), each rewritten again as it is streamed; the
    engine checks each layer it registers against its diff ID in the config."""
    config_name = f"{new_id.split(':', 1)[1]}.json"
    names = [f"{i:03d}/layer.tar" for i in range(len(diff_ids))]
    manifest = [{"Config": config_name, "RepoTags": list(tags) or None, "Layers": names}]
    layers = [(names[i], layout.size, layout.chunks()) for i, layout in sorted(send.items())]
    archive = load_archive(blob, config_name, json.dumps(manifest).encode(), layers)
    try:
        loaded = client.images.load(archive)
    except docker.errors.APIError as err:
        raise ImageError(f"loading the normalised image back failed: {err}") from err
    ids = {image.id for image in loaded}
    if new_id not in ids:
        raise ImageError(f"the engine loaded {sorted(ids)} instead of the normalised {new_id}")


def iter_diff(a: Normalised, b: Normalised) -> Iterator[str]:
    """What differs between two builds of one recipe: files per layer, then the config."""
    if len(a.layers) != len(b.layers):
        yield f"layer count: {len(a.layers)} != {len(b.layers)}"
    for index, (la, lb) in enumerate(zip(a.layers, b.layers, strict=False)):
        layer = a.base_layers + index
        for name in sorted(set(la) | set(lb)):
            fa, fb = la.get(name), lb.get(name)
            if fa == fb:
                continue
            if fa is None or fb is None:
                where = "second" if fa is None else "first"
                yield f"layer {layer}: {name}: only in the {where} build"
                continue
            fields = [k for k in fa.__dataclass_fields__ if getattr(fa, k) != getattr(fb, k)]
            yield f"layer {layer}: {name}: " + ", ".join(
                f"{k} {getattr(fa, k)!r} != {getattr(fb, k)!r}" for k in fields
            )
    yield from _config_diff(a.config, b.config, "config")


def _config_diff(a: Any, b: Any, where: str) -> Iterator[str]:
    if where == "config.rootfs":
        return  # the layers were compared file by file
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            yield from _config_diff(a.get(key), b.get(key), f"{where}.{key}")
    elif a != b:
        first = json.dumps(a, sort_keys=True)[:200]
        second = json.dumps(b, sort_keys=True)[:200]
        yield f"{where}: {first} != {second}"
