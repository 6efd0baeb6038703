"""Normalising a built image so that the same inputs give the same image ID.

The classic builder behind the Python docker SDK ignores ``SOURCE_DATE_EPOCH``: file times in
the layers are build times, and the config carries the creation time, the build container's
ID and hostname and the engine's version. This module takes the image apart (``docker save``),
rewrites every layer the build added (entries sorted by name, hard links pointing at the
first name of their set, mtimes clamped to the source date, owners, modes, links and
extended attributes kept), fixes the config's and history's times, drops the per-build
fields, and loads the result back (``docker load``). The base's layers are left exactly as
they are: the base is pinned by its digest. The method follows go-containerregistry's
``mutate.Canonical`` and ``buildah --rewrite-timestamp``.

The same pass records every file of every layer (type, mode, owner, size, SHA-256), which is
what ``verify`` compares when two builds differ.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors

from toolkit.errors import ImageError

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


def epoch_iso(epoch: int) -> str:
    """The config's time format for the source date."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class _HashingWriter:
    def __init__(self, target: IO[bytes]) -> None:
        self.target = target
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        self.size += len(data)
        return self.target.write(data)


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


def _file_hash(archive: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    handle = archive.extractfile(member)
    digest = hashlib.sha256()
    if handle is not None:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def rewrite_layer(
    source: IO[bytes], target: IO[bytes], epoch: int
) -> tuple[str, dict[str, FileEntry]]:
    """Rewrite one layer tar canonically; returns its diff ID and its files.

    Entries are sorted by name; a set of hard links is written as one regular file under
    the first name of the set and links to it from the others (a link must follow its
    target); mtimes later than ``epoch`` become ``epoch``; everything else is kept.
    """
    with tarfile.open(fileobj=source, mode="r:") as archive:
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
        writer = _HashingWriter(target)
        files: dict[str, FileEntry] = {}
        stream: Any = writer  # tarfile needs only write()
        with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as out:
            for name in sorted(members):
                member = members[name]
                first = first_of.get(name)
                data_member = member
                if first is not None:
                    data_member = members[holder_of.get(name, name)]
                    info = _copy(data_member, name, epoch)
                    if name != first:
                        info.type, info.linkname, info.size = tarfile.LNKTYPE, first, 0
                else:
                    info = _copy(member, name, epoch)
                digest = None
                if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
                    handle = archive.extractfile(data_member)
                    out.addfile(info, handle)
                    digest = _file_hash(archive, data_member)
                else:
                    out.addfile(info)
                files[name] = FileEntry(
                    kind=_kind(info),
                    mode=info.mode,
                    uid=info.uid,
                    gid=info.gid,
                    size=info.size,
                    mtime=int(info.mtime),
                    sha256=digest,
                    link=info.linkname or None,
                )
    return "sha256:" + writer.hash.hexdigest(), files


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


@dataclass
class _Saved:
    folder: Path
    config: dict[str, Any]
    layers: list[Path]


def _save(client: docker.DockerClient, image_id: str, folder: Path) -> _Saved:
    """``docker save`` of one image, unpacked into ``folder``."""
    archive_path = folder / "image.tar"
    try:
        image = client.images.get(image_id)
        with archive_path.open("wb") as handle:
            for chunk in image.save(chunk_size=CHUNK, named=False):
                handle.write(chunk)
    except docker.errors.APIError as err:
        raise ImageError(f"cannot save image {image_id}: {err}") from err
    with tarfile.open(archive_path) as archive:
        archive.extractall(folder / "x", filter="tar")
    archive_path.unlink()
    root = folder / "x"
    manifest = json.loads((root / "manifest.json").read_text())[0]
    config = json.loads((root / manifest["Config"]).read_text())
    return _Saved(folder=root, config=config, layers=[root / p for p in manifest["Layers"]])


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


def read_image(
    client: docker.DockerClient,
    image_id: str,
    base: str | None,
    epoch: int,
    workdir: Path | None = None,
) -> Normalised:
    """The files and config of an image, as normalisation sees them (nothing is loaded)."""
    return _run(client, image_id, base, epoch, workdir, load=False, tags=())


def normalise(
    client: docker.DockerClient,
    image_id: str,
    base: str | None,
    epoch: int,
    tags: tuple[str, ...] = (),
    workdir: Path | None = None,
) -> Normalised:
    """Normalise an image and load it back; returns the normalised image's ID and files.

    Raises:
        ImageError: The engine refused to save or load, or the image is malformed.
    """
    return _run(client, image_id, base, epoch, workdir, load=True, tags=tags)


def _run(
    client: docker.DockerClient,
    image_id: str,
    base: str | None,
    epoch: int,
    workdir: Path | None,
    *,
    load: bool,
    tags: tuple[str, ...],
) -> Normalised:
    started = time.perf_counter()
    base_layers, base_history = _base_counts(client, base)
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpunode-normalise-", dir=workdir) as tmp:
        folder = Path(tmp)
        saved = _save(client, image_id, folder)
        out_dir = folder / "out"
        out_dir.mkdir()
        diff_ids = list(saved.config["rootfs"]["diff_ids"][:base_layers])
        layer_paths: list[Path] = []
        added: list[dict[str, FileEntry]] = []
        volatile: list[str] = []
        size = 0
        for index, layer in enumerate(saved.layers):
            if index < base_layers:
                layer_paths.append(layer)
                size += layer.stat().st_size
                continue
            target = out_dir / f"layer-{index}.tar"
            with layer.open("rb") as src, target.open("wb") as dst:
                diff_id, files = rewrite_layer(src, dst, epoch)
            layer.unlink()
            diff_ids.append(diff_id)
            layer_paths.append(target)
            added.append(files)
            size += target.stat().st_size
            volatile += [f"layer {index}: {name}" for name in files if is_volatile(name)]
        config = fix_config(saved.config, diff_ids, base_history, epoch)
        blob = config_bytes(config)
        new_id = "sha256:" + hashlib.sha256(blob).hexdigest()
        if load:
            _load(client, folder / "load", blob, new_id, layer_paths, tags)
    return Normalised(
        id=new_id,
        source_id=image_id,
        base_layers=base_layers,
        layers=added,
        config=config,
        seconds=time.perf_counter() - started,
        size=size,
        volatile=volatile,
    )


def _load(
    client: docker.DockerClient,
    folder: Path,
    blob: bytes,
    new_id: str,
    layers: list[Path],
    tags: tuple[str, ...],
) -> None:
    folder.mkdir()
    config_name = f"{new_id.split(':', 1)[1]}.json"
    names = [f"{i:03d}/layer.tar" for i in range(len(layers))]
    manifest = [{"Config": config_name, "RepoTags": list(tags) or None, "Layers": names}]
    archive_path = folder / "load.tar"
    with tarfile.open(archive_path, "w", format=tarfile.PAX_FORMAT) as archive:
        for name, data in ((config_name, blob), ("manifest.json", json.dumps(manifest).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, path in zip(names, layers, strict=True):
            archive.add(str(path), arcname=name, recursive=False)
    try:
        with archive_path.open("rb") as handle:
            loaded = client.images.load(handle)
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
