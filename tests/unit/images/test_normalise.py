"""Layer normalisation: sorted entries, clamped times, links that follow their target, owners
and modes kept; the config without per-build fields; volatile paths recognised."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import ImageError
from toolkit.images.layerstore import LayerRecordError, StoredTar, chain_id
from toolkit.images.normalise import (
    ChunkReader,
    FileEntry,
    Normalised,
    SavedLayer,
    chain_prefixes,
    epoch_iso,
    fix_config,
    is_volatile,
    iter_diff,
    load_archive,
    open_canonical,
    rewrite_layer,
)

EPOCH = 1_700_000_000


def layer(entries: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry["name"])
            info.type = entry.get("type", tarfile.REGTYPE)
            info.mode = entry.get("mode", 0o644)
            info.uid, info.gid = entry.get("uid", 0), entry.get("gid", 0)
            info.mtime = entry.get("mtime", EPOCH + 12345)
            info.linkname = entry.get("link", "")
            data = entry.get("data", b"")
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            archive.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return buffer.getvalue()


def rewrite(raw: bytes, epoch: int = EPOCH) -> tuple[str, dict[str, FileEntry], bytes]:
    out = io.BytesIO()
    diff_id, files, size = rewrite_layer(io.BytesIO(raw), out, epoch)
    assert size == len(out.getvalue())
    return diff_id, files, out.getvalue()


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return archive.getmembers()


ENTRIES = [
    {"name": "usr", "type": tarfile.DIRTYPE, "mode": 0o755},
    {"name": "usr/bin/tool", "data": b"#!/bin/sh\n", "mode": 0o4755, "uid": 0, "gid": 50},
    {"name": "usr/bin", "type": tarfile.DIRTYPE, "mode": 0o755},
    {"name": "etc/old", "data": b"old", "mtime": 1000},
    {"name": "usr/lib/libx.so", "type": tarfile.SYMTYPE, "link": "libx.so.1"},
]


def test_entries_are_sorted_and_times_clamped_but_old_times_kept() -> None:
    _diff, files, data = rewrite(layer(ENTRIES))
    names = [m.name for m in members(data)]
    assert names == sorted(names)
    by_name = {m.name: m for m in members(data)}
    assert by_name["usr/bin/tool"].mtime == EPOCH
    assert by_name["etc/old"].mtime == 1000
    assert files["usr/bin/tool"].sha256 is not None


def test_owners_modes_and_links_are_kept() -> None:
    _diff, files, data = rewrite(layer(ENTRIES))
    tool = {m.name: m for m in members(data)}["usr/bin/tool"]
    assert (tool.mode, tool.uid, tool.gid) == (0o4755, 0, 50)
    link = files["usr/lib/libx.so"]
    assert (link.kind, link.link, link.size) == ("symlink", "libx.so.1", 0)


def test_the_same_content_in_another_order_gives_the_same_layer() -> None:
    a = rewrite(layer(ENTRIES))
    b = rewrite(layer(list(reversed(ENTRIES))))
    assert a[0] == b[0] and a[2] == b[2]


def test_build_time_differences_vanish_and_content_differences_do_not() -> None:
    later = [{**e, "mtime": EPOCH + 99999} if e["name"] != "etc/old" else e for e in ENTRIES]
    assert rewrite(layer(ENTRIES))[0] == rewrite(layer(later))[0]
    changed = [{**e, "data": b"other"} if e["name"] == "usr/bin/tool" else e for e in ENTRIES]
    assert rewrite(layer(ENTRIES))[0] != rewrite(layer(changed))[0]


def test_a_hard_link_that_sorts_before_its_target_becomes_the_data_holder() -> None:
    raw = layer(
        [
            {"name": "z/original", "data": b"payload"},
            {"name": "a/link", "type": tarfile.LNKTYPE, "link": "z/original"},
        ]
    )
    _diff, files, data = rewrite(raw)
    first, second = members(data)
    assert (first.name, first.type, first.size) == ("a/link", tarfile.REGTYPE, 7)
    assert (second.name, second.type, second.linkname) == ("z/original", tarfile.LNKTYPE, "a/link")
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        handle = archive.extractfile("a/link")
        assert handle is not None and handle.read() == b"payload"
    assert files["z/original"].kind == "hardlink"


def test_config_loses_per_build_fields_and_gets_the_source_date() -> None:
    config = {
        "created": "2026-12-01T18:00:00.123Z",
        "container": "abc123",
        "docker_version": "20.10.24",
        "container_config": {"Hostname": "abc123"},
        "config": {"Hostname": "abc123", "Image": "sha256:intermediate", "Labels": {"a": "b"}},
        "history": [
            {"created": "2026-01-01T00:00:00Z", "created_by": "base"},
            {"created": "2026-12-01T18:00:01Z", "created_by": "RUN x"},
        ],
        "rootfs": {"type": "layers", "diff_ids": ["sha256:old"]},
    }
    fixed = fix_config(config, ["sha256:new"], base_history=1, epoch=EPOCH)
    assert "container" not in fixed and "docker_version" not in fixed
    assert "container_config" not in fixed
    assert fixed["config"] == {"Hostname": "", "Image": "", "Labels": {"a": "b"}}
    assert fixed["created"] == epoch_iso(EPOCH) == "2023-11-14T22:13:20Z"
    assert fixed["history"][0]["created"] == "2026-01-01T00:00:00Z"  # the base's own
    assert fixed["history"][1]["created"] == epoch_iso(EPOCH)
    assert fixed["rootfs"] == {"type": "layers", "diff_ids": ["sha256:new"]}


@pytest.mark.parametrize(
    ("path", "volatile"),
    [
        ("var/lib/apt/lists/deb.debian.org_InRelease", True),
        ("var/log/dpkg.log", True),
        ("var/cache/ldconfig/aux-cache", True),
        ("usr/lib/python3/dist-packages/x/__pycache__/y.cpython-311.pyc", True),
        ("etc/machine-id", True),
        ("etc/ssh/ssh_host_ed25519_key", True),
        ("var/log/", False),  # the directory itself may stay
        ("var/log/.wh.dpkg.log", False),  # a whiteout removes a file
        ("usr/lib/x86_64-linux-gnu/libnccl.so.2", False),
    ],
)
def test_volatile_paths(path: str, volatile: bool) -> None:
    assert is_volatile(path) is volatile


def test_diff_names_the_file_and_the_field_that_differ() -> None:
    def image(mtime: int, env: str) -> Normalised:
        entry = FileEntry("file", 0o644, 0, 0, 1, mtime, "00", None)
        return Normalised("id", "src", 1, [{"etc/x": entry}], {"config": {"Env": [env]}}, 0, 0)

    lines = list(iter_diff(image(1, "A=1"), image(2, "A=2")))
    assert lines == [
        "layer 1: etc/x: mtime 1 != 2",
        'config.config.Env: ["A=1"] != ["A=2"]',
    ]


def test_a_layer_only_hashed_has_the_diff_id_of_the_written_one_and_no_file_hashes() -> None:
    raw = layer(ENTRIES)
    written, files, data = rewrite(raw)
    hashed, bare, size = rewrite_layer(io.BytesIO(raw), None, EPOCH, hashes=False)
    assert size == len(data)
    assert hashed == written == "sha256:" + hashlib.sha256(data).hexdigest()
    assert bare["usr/bin/tool"].sha256 is None
    assert files["usr/bin/tool"].sha256 == hashlib.sha256(b"#!/bin/sh\n").hexdigest()
    assert {n: (f.kind, f.size, f.mtime) for n, f in bare.items()} == {
        n: (f.kind, f.size, f.mtime) for n, f in files.items()
    }


def test_the_save_stream_reads_back_as_its_bytes_whatever_the_read_sizes() -> None:
    data = bytes(range(256)) * 41
    chunks = ChunkReader(iter([data[:5], b"", data[5:3000], data[3000:]]))
    assert chunks.read(7) + chunks.read(4096) + chunks.read(-1) == data
    assert chunks.read(10) == b""
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as out:
        info = tarfile.TarInfo("000/layer.tar")
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
    pieces = [archive.getvalue()[i : i + 1000] for i in range(0, len(archive.getvalue()), 1000)]
    with tarfile.open(fileobj=ChunkReader(iter(pieces)), mode="r|", bufsize=1 << 20) as stream:
        member = stream.next()
        assert member is not None
        handle = stream.extractfile(member)
        assert handle is not None and handle.read() == data


def test_the_load_archive_is_a_tar_of_the_layers_sent_then_config_and_manifest() -> None:
    one = [b"x" * 700, b"x" * 300]
    stream = b"".join(
        load_archive(
            b'{"a":1}', "c.json", b"[]", [("000/layer.tar", 1000, one), ("002/layer.tar", 0, [])]
        )
    )
    assert len(stream) % tarfile.BLOCKSIZE == 0 and stream.endswith(b"\0" * 1024)
    with tarfile.open(fileobj=io.BytesIO(stream)) as archive:
        got = {m.name: archive.extractfile(m).read() for m in archive}  # type: ignore[union-attr]
    assert list(got) == ["000/layer.tar", "002/layer.tar", "c.json", "manifest.json"]
    assert got["000/layer.tar"] == b"x" * 1000 and got["002/layer.tar"] == b""
    assert got["c.json"] == b'{"a":1}' and got["manifest.json"] == b"[]"


@pytest.mark.parametrize("pieces", [[b"x" * 999], [b"x" * 1000, b"y"]])
def test_a_layer_that_does_not_come_to_its_size_stops_the_load_stream(pieces: list[bytes]) -> None:
    stream = load_archive(b"{}", "c.json", b"[]", [("000/layer.tar", 1000, pieces)])
    with pytest.raises(
        ImageError,
        match=r"000/layer\.tar: (999|1001) bytes where its header promised 1000",
    ):
        b"".join(stream)


# Entries that reach every branch of the writer: a hard-link set, a name over 100 bytes (a PAX
# path), a file read in several pieces (over 1 MiB), one sent in one piece, empty and small ones.
BIG = bytes(range(256)) * 5000  # 1.28 MB
WRITER = [
    *ENTRIES,
    {"name": "opt/big", "data": BIG},
    {"name": "opt/quarter", "data": b"q" * 300_000},
    {"name": "opt/empty", "data": b""},
    {"name": "opt/" + "n" * 120, "data": b"long name"},
    {"name": "opt/link-to-big", "type": tarfile.LNKTYPE, "link": "opt/big"},
]


def test_the_rewrite_is_pythons_own_pax_tar_writer_byte_for_byte() -> None:
    """The rewrite writes each header, data and padding itself (so that its size is known
    before the data is read); the bytes are what tarfile's writer makes of the same entries,
    so image IDs do not change with the writer."""
    _diff, _files, data = rewrite(layer(WRITER))
    expected = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data)) as archive,
        tarfile.open(fileobj=expected, mode="w", format=tarfile.PAX_FORMAT) as out,
    ):
        for member in archive.getmembers():
            out.addfile(member, archive.extractfile(member) if member.isreg() else None)
    assert data == expected.getvalue()
    assert {m.name: m.size for m in members(data)}["opt/big"] == len(BIG)


def test_a_layer_planned_once_is_hashed_then_streamed_with_its_size_known_first(
    tmp_path: Path,
) -> None:
    raw = layer(WRITER)
    saved = tmp_path / "layer.tar"
    saved.write_bytes(raw)
    diff_id, files, data = rewrite(raw)
    with open_canonical(SavedLayer(saved), EPOCH) as layout:
        size = layout.size
        hashed = layout.rewrite(None, hashes=False)  # the pass that finds its diff ID
        streamed = b"".join(layout.chunks())  # the pass that sends it
    assert size == hashed.size == len(streamed) and streamed == data
    assert hashed.diff_id == diff_id == "sha256:" + hashlib.sha256(streamed).hexdigest()
    assert hashed.files.keys() == files.keys()


def test_chain_prefixes_are_every_stack_and_each_of_its_beginnings() -> None:
    assert chain_prefixes([["a", "b"], ["a", "c", "d"]]) == {
        ("a",),
        ("a", "b"),
        ("a", "c"),
        ("a", "c", "d"),
    }


def test_a_chain_id_is_the_first_diff_id_then_each_layer_hashed_onto_its_parent() -> None:
    a, b, c = (f"sha256:{n * 64}" for n in "abc")
    ab = "sha256:" + hashlib.sha256(f"{a} {b}".encode()).hexdigest()
    assert chain_id([a]) == a
    assert chain_id([a, b]) == ab
    assert chain_id([a, b, c]) == "sha256:" + hashlib.sha256(f"{ab} {c}".encode()).hexdigest()


# A layer as the engine stores it: what a build's commit writes (PAX headers, a whiteout, an
# opaque directory's marker, hard and symbolic links, a name past 100 characters, a name that
# is not UTF-8, a capability, files whose data ends inside a block and on one).
LONG = "usr/share/" + "d" * 90 + "/" + "f" * 60
STORED = [
    {"name": "etc", "type": tarfile.DIRTYPE, "mode": 0o755},
    {"name": "etc/.wh.issue.net", "mode": 0o600},
    {"name": "usr/share/doc/.wh..wh..opq", "mode": 0o755},
    {"name": "usr/share/doc", "type": tarfile.DIRTYPE},
    {"name": "usr/bin/ping", "data": b"\x7fELF" * 300, "mode": 0o755, "xattr": b"\x01\x00"},
    {"name": "usr/bin/ping2", "type": tarfile.LNKTYPE, "link": "usr/bin/ping"},
    {"name": "usr/lib/libx.so", "type": tarfile.SYMTYPE, "link": "libx.so.1"},
    {"name": "usr/lib/libx.so.1", "data": b"x" * 512},
    {"name": "usr/lib/empty", "data": b""},
    {"name": LONG, "data": b"long"},
    {"name": "opt/caf\udce9", "data": b"latin-1 name", "uid": 1234, "gid": 5678},
    {"name": "opt/big", "data": os.urandom(1 << 20) + b"tail"},
]


def committed(entries: list[dict[str, Any]]) -> bytes:
    """A layer tar as a build's commit writes it (PAX, as the engine's archive does)."""
    buffer = io.BytesIO()
    with tarfile.open(
        fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT, errors="surrogateescape"
    ) as archive:
        for entry in entries:
            info = tarfile.TarInfo(entry["name"])
            info.type = entry.get("type", tarfile.REGTYPE)
            info.mode = entry.get("mode", 0o644)
            info.uid, info.gid = entry.get("uid", 0), entry.get("gid", 0)
            info.uname = "root" if info.uid == 0 else ""
            info.mtime = EPOCH + 999
            info.linkname = entry.get("link", "")
            if "xattr" in entry:
                info.pax_headers = {
                    "SCHILY.xattr.security.capability": entry["xattr"].decode("latin-1")
                }
            data = entry.get("data", b"")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    return buffer.getvalue()


def store(raw: bytes, folder: Path) -> Path:
    """What the engine keeps of a layer tar: its tar-split record (the tar's own bytes as
    base64 segments, each file's name and size) and the files' data in the layer's folder."""
    lines, done = [], 0
    with tarfile.open(fileobj=io.BytesIO(raw), errors="surrogateescape") as archive:
        for member in archive.getmembers():
            segment = raw[done : member.offset_data]
            lines.append({"type": 2, "payload": base64.b64encode(segment).decode()})
            name = member.name.encode("utf-8", "surrogateescape")
            entry: dict[str, Any] = {"type": 1, "payload": None}
            try:
                entry["name"] = name.decode("utf-8")
            except UnicodeDecodeError:
                entry["name_raw"] = base64.b64encode(name).decode()
            if member.isreg():
                entry["size"] = member.size
                path = folder / os.fsdecode(name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(archive.extractfile(member).read())  # type: ignore[union-attr]
            lines.append(entry)
            done = member.offset_data + (member.size if member.isreg() else 0)
    lines.append({"type": 2, "payload": base64.b64encode(raw[done:]).decode()})
    record = folder.parent / "tar-split.json.gz"
    record.write_bytes(gzip.compress(b"".join(json.dumps(e).encode() + b"\n" for e in lines)))
    return record


def test_a_stored_layer_reads_back_as_the_tar_it_was_stored_from(tmp_path: Path) -> None:
    raw = committed(STORED)
    folder = tmp_path / "diff"
    record = store(raw, folder)
    with StoredTar(record, folder) as stored:
        assert stored.read() == raw
        stored.seek(0)
        pieces = []
        while piece := stored.read(4093):  # reads across headers, data and padding
            pieces.append(piece)
        assert b"".join(pieces) == raw
        stored.seek(-1500, os.SEEK_END)
        assert stored.read(700) == raw[-1500:-800] and stored.tell() == len(raw) - 800
    # The same canonical layer from either source, and what the rewrite keeps of the entries.
    with StoredTar(record, folder) as stored:
        from_store = rewrite(stored.read())
        stored.seek(0)
        out = io.BytesIO()
        diff_id, files, _size = rewrite_layer(stored, out, EPOCH)
    assert (diff_id, files, out.getvalue()) == rewrite(raw) == from_store
    assert files["usr/bin/ping2"].kind == "hardlink" and files["etc/.wh.issue.net"].size == 0
    assert (files["opt/caf\udce9"].uid, files[LONG].size) == (1234, 4)
    capability = {m.name: m for m in members(out.getvalue())}["usr/bin/ping"].pax_headers
    assert capability["SCHILY.xattr.security.capability"] == "\x01\x00"


def test_a_stored_file_whose_size_is_not_the_recorded_one_fails_naming_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "diff"
    record = store(committed(STORED), folder)
    (folder / "usr/lib/libx.so.1").write_bytes(b"x" * 511)
    with (
        StoredTar(record, folder) as stored,
        pytest.raises(ImageError, match=r"usr/lib/libx\.so\.1"),
    ):
        rewrite_layer(stored, None, EPOCH)
    (folder / "usr/lib/libx.so.1").unlink()
    with StoredTar(record, folder) as stored, pytest.raises(ImageError, match="cannot read"):
        stored.read()


def test_a_stored_name_that_leads_out_of_the_layer_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(b"s" * 6)
    folder = tmp_path / "diff"
    folder.mkdir()
    (folder / "opt").symlink_to(outside)
    raw = committed([{"name": "opt/secret", "data": b"x" * 6}])
    record = store(raw, tmp_path / "scratch")
    with StoredTar(record, folder) as stored, pytest.raises(ImageError, match="outside its layer"):
        stored.read()
    (folder / "opt").unlink()
    (folder / "opt").mkdir()
    (folder / "opt/secret").symlink_to(outside / "secret")  # the file itself a link
    with StoredTar(record, folder) as stored, pytest.raises(ImageError, match="cannot read"):
        stored.read()
    dotdot = {"type": 1, "name": "../outside/secret", "size": 6, "payload": None}
    record.write_bytes(gzip.compress(json.dumps(dotdot).encode() + b"\n"))
    with StoredTar(record, folder) as stored, pytest.raises(ImageError, match="outside its layer"):
        stored.read()


def test_an_unreadable_store_record_fails_naming_it(tmp_path: Path) -> None:
    record = tmp_path / "tar-split.json.gz"
    record.write_bytes(b"not gzip")
    with pytest.raises(ImageError, match=r"tar-split\.json\.gz"):
        StoredTar(record, tmp_path)


# --- issue 41, class 8: every record taken from the engine's store is bounded and validated ------


def _record(tmp_path: Path, *lines: bytes, compressed: bytes | None = None) -> Path:
    record = tmp_path / "tar-split.json.gz"
    record.write_bytes(gzip.compress(b"".join(lines)) if compressed is None else compressed)
    return record


def _entry(**fields: Any) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_a_gzip_record_that_expands_to_gigabytes_is_refused_unread(tmp_path: Path) -> None:
    """2 GiB of zeros in 2 MB of gzip members: read a line at a time, refused at the first."""
    member = gzip.compress(bytes(1 << 20), compresslevel=9)
    record = _record(tmp_path, compressed=member * 2048)
    with pytest.raises(LayerRecordError, match=r"line 1: an entry longer than 1048576 bytes"):
        StoredTar(record, tmp_path, layer="sha256:" + "ab" * 32)
    # Lines of the right length that add up past the record's bound.
    line = _entry(type=2, payload=base64.b64encode(b"h" * 300).decode())
    many = _record(tmp_path, line * 10_000)
    with pytest.raises(LayerRecordError, match=r"tar-split\.json\.gz: expands past 65536 bytes"):
        StoredTar(many, tmp_path, max_bytes=65536)
    with pytest.raises(LayerRecordError, match=r"more than 100 entries"):
        StoredTar(many, tmp_path, max_entries=100)


@pytest.mark.parametrize(
    "line",
    [
        b"[" * 100_000 + b"\n",
        b'{"type": 2, "payload": ' + b"[" * 100_000 + b"\n",
        b'{"type": 2, "payload": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_001 + b"\n",
        b'{"type": 1, "name": "a", "size": [1]}\n',
    ],
)
def test_a_deeply_nested_json_record_is_a_named_error(tmp_path: Path, line: bytes) -> None:
    record = _record(tmp_path, _entry(type=2, payload=""), line)
    with pytest.raises(LayerRecordError, match=r"tar-split\.json\.gz, line 2: nested JSON"):
        StoredTar(record, tmp_path)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"type": 2, "payload": "!!!!"}, "payload is not base64"),
        ({"type": 2, "payload": "QUJD RA=="}, "payload is not base64"),
        ({"type": 2, "payload": "QUJDRA"}, "payload is not base64"),  # no padding
        ({"type": 2, "payload": "QUJD\u00e9RA=="}, "payload is not base64"),
        ({"type": 2, "payload": 1234}, "payload 1234 is not a base64 string"),
        ({"type": 1, "name_raw": "not*base64", "size": 0}, "name_raw is not base64"),
        ({"type": 1, "name": "a", "payload": "%%%%", "size": 1}, "payload is not base64"),
        ({"type": 1, "name": "a", "size": -5}, "size -5 is not an integer from 0"),
        ({"type": 1, "name": "a", "size": "12"}, "size '12' is not an integer"),
        ({"type": 1, "name": "a", "size": 1.5}, "size 1.5 is not an integer"),
        ({"type": 1, "name": "a", "size": True}, "size True is not an integer"),
        ({"type": 1, "name": "a", "size": 1 << 63}, "is not an integer from 0 to 2"),
        ({"type": 2, "payload": "QUJD", "size": 4}, "size 4 where the payload has 3"),
        ({"type": 2, "payload": "QUJD", "size": -3}, "size -3 is not an integer"),
        ({"type": 1, "name": "a\u0000b", "size": 1}, "holds a NUL"),
        ({"type": 1, "name": 7, "size": 1}, "name 7 is not a string"),
        ({"type": 1, "name": "a\ud800", "size": 1}, "is no path of bytes"),
        ({"type": 1, "size": 1}, "name None is not a string"),
        ({"type": 3}, "entry type 3 is neither"),
        ({"type": True, "payload": ""}, "entry type True is neither"),
        ({"payload": ""}, "entry type None is neither"),
    ],
)
def test_an_invalid_record_entry_is_a_named_error(
    tmp_path: Path, fields: dict[str, Any], reason: str
) -> None:
    record = _record(tmp_path, _entry(type=2, payload="QUJD"), _entry(**fields))
    with pytest.raises(LayerRecordError, match=re.escape(reason)) as caught:
        StoredTar(record, tmp_path / "diff", layer="sha256:0123")
    assert caught.value.message.startswith(
        f"layer sha256:0123: the layer store's record {record}, line 2: "
    )
    assert isinstance(caught.value, ImageError)


@pytest.mark.parametrize(
    "line", [b"\n", b"NaN\n", b'"entry"\n', b'{"type": 2, "payload": "QUJD"\n', b"\xff\xfe\n"]
)
def test_a_record_line_that_is_no_entry_is_a_named_error(tmp_path: Path, line: bytes) -> None:
    with pytest.raises(LayerRecordError, match=r"line 1: "):
        StoredTar(_record(tmp_path, line), tmp_path)


@pytest.mark.parametrize(
    "compressed",
    [b"", b"\x1f\x8b", gzip.compress(_entry(type=2, payload=""))[:-6], b"\x1f\x8b\x08" + bytes(40)],
)
def test_a_cut_or_corrupt_gzip_record_is_a_named_error(tmp_path: Path, compressed: bytes) -> None:
    record = _record(tmp_path, compressed=compressed)
    if not compressed:
        assert StoredTar(record, tmp_path).read() == b""  # an empty record: an empty layer
        return
    with pytest.raises(LayerRecordError, match=r"tar-split\.json\.gz is unreadable"):
        StoredTar(record, tmp_path)
