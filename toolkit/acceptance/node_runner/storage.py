"""The storage checks: ``/data`` under a data loader's read pattern (random reads from many
files, the page cache out of the way), a checkpoint written and restored, and a sequential
write and read.

Process model: the framework process writes the data set and the checkpoint and runs the
random reads; the ranks it launches for the all-reduce (fresh processes) then restore the
checkpoint (rank 0) and run the loop at every scaling point (:mod:`.train`), so that torch is
imported once per rank for all of it."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from typing import Any


def data_throughput(path: str, size: int) -> dict[str, Any]:
    """Sequential write then read of one file under ``path`` (MB/s, 10^6 bytes)."""
    out: dict[str, Any] = {
        "path": path,
        "size_bytes": size,
        "write_mbps": None,
        "read_mbps": None,
        "error": None,
    }
    if not os.path.isdir(path):
        out["error"] = f"{path} does not exist"
        return out
    target = os.path.join(path, f".gpunode-accept-{os.getpid()}")
    chunk = os.urandom(1 << 20) * 4  # 4 MiB; random so compression cannot flatter
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            start = time.perf_counter()
            written = 0
            while written < size:
                written += os.write(fd, chunk[: min(len(chunk), size - written)])
            os.fsync(fd)
            out["write_mbps"] = written / (time.perf_counter() - start) / 1e6
        finally:
            os.close(fd)
        fd = os.open(target, os.O_RDONLY)
        try:
            # Drop this file's pages so the read comes from the disk, not the page cache.
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            start = time.perf_counter()
            read = 0
            while True:
                block = os.read(fd, 4 << 20)
                if not block:
                    break
                read += len(block)
            out["read_mbps"] = read / (time.perf_counter() - start) / 1e6
        finally:
            os.close(fd)
    except OSError as err:
        out["error"] = f"{target}: {err.strerror or err}"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(target)
    return out


# Reads for O_DIRECT must be aligned to the logical block size: 4 KiB covers every disk.
DIRECT_ALIGN = 4096


# Upper bounds (ms) of the latency histogram's buckets; a last bucket holds the rest.
LATENCY_BUCKETS_MS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0)


def percentile(values: list[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0-100), or None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100), at least the first
    return ordered[int(rank) - 1]


def latency_histogram(values_ms: list[float]) -> list[dict[str, Any]]:
    """Counts per bucket: ``{"le_ms": bound, "count": n}``; the last bucket's bound is None."""
    counts = [0] * (len(LATENCY_BUCKETS_MS) + 1)
    for value in values_ms:
        index = next((i for i, b in enumerate(LATENCY_BUCKETS_MS) if value <= b), -1)
        counts[index] += 1
    bounds: list[float | None] = [*LATENCY_BUCKETS_MS, None]
    return [{"le_ms": b, "count": c} for b, c in zip(bounds, counts, strict=True)]


def drop_cache(fd: int) -> None:
    """Ask the kernel to drop a file's clean cached pages (posix_fadvise DONTNEED)."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def fsync_dir(path: str) -> None:
    """fsync a directory, so the names of new files in it survive a crash too."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dataset(path: str, files: int, file_bytes: int) -> dict[str, Any]:
    """``files`` files of ``file_bytes`` random bytes under ``path``, flushed to the disk and
    dropped from the page cache, so that reading them measures the disk."""
    out: dict[str, Any] = {"dir": path, "files": [], "file_bytes": file_bytes, "write_s": None}
    os.makedirs(path, exist_ok=True)
    block = os.urandom(file_bytes)  # random: neither compression nor dedup can flatter
    start = time.perf_counter()
    for index in range(files):
        name = os.path.join(path, f"sample-{index:06d}.bin")
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(index.to_bytes(8, "little") + block[8:])
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            drop_cache(fd)
        finally:
            os.close(fd)
        out["files"].append(name)
    fsync_dir(path)
    out["write_s"] = time.perf_counter() - start
    return out


def read_plan(
    files: int, file_bytes: int, reads: int, min_read: int, max_read: int, seed: int = 0
) -> list[tuple[int, int, int]]:
    """(file index, offset, size) of each random read: sizes log-uniform between ``min_read``
    and ``max_read`` and offsets at random, both multiples of 4 KiB (O_DIRECT's alignment)."""
    import math
    import random

    rng = random.Random(seed)
    top = min(max_read, file_bytes)
    plan = []
    for _ in range(reads):
        size = int(2 ** rng.uniform(math.log2(min_read), math.log2(top)))
        size = max(DIRECT_ALIGN, size // DIRECT_ALIGN * DIRECT_ALIGN)
        slots = (file_bytes - size) // DIRECT_ALIGN
        plan.append((rng.randrange(files), rng.randint(0, slots) * DIRECT_ALIGN, size))
    return plan


def direct_io_works(path: str) -> bool:
    """Whether the file system under ``path`` accepts O_DIRECT reads (tmpfs does not)."""
    import mmap

    flag = getattr(os, "O_DIRECT", 0)
    if not flag:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | flag)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, DIRECT_ALIGN)
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def random_reads(
    paths: list[str],
    file_bytes: int,
    reads: int,
    workers: int,
    min_read: int,
    max_read: int,
    seed: int = 0,
) -> dict[str, Any]:
    """Random reads of 4 KiB-1 MiB from many files by parallel workers, the page cache out
    of the way: each read opens its file, reads, closes (as a data loader does per sample).

    O_DIRECT where the file system takes it: every read then reaches the device, whatever
    else has the file cached. Elsewhere each read first drops the file's cached pages
    (posix_fadvise DONTNEED) and turns readahead off (POSIX_FADV_RANDOM), which is advisory
    only; ``cache`` says which of the two ran.
    """
    import mmap
    from concurrent.futures import ThreadPoolExecutor

    out: dict[str, Any] = {
        "cache": None,
        "reads": reads,
        "workers": workers,
        "files": len(paths),
        "min_read_bytes": min_read,
        "max_read_bytes": min(max_read, file_bytes),
        "bytes": 0,
        "wall_s": None,
        "files_per_s": None,
        "mbps": None,
        "p50_ms": None,
        "p99_ms": None,
        "max_ms": None,
        "histogram": [],
        "error": None,
    }
    if not paths:
        out["error"] = "no files to read"
        return out
    direct = direct_io_works(paths[0])
    out["cache"] = "o_direct" if direct else "fadvise"
    plan = read_plan(len(paths), file_bytes, reads, min_read, max_read, seed)
    flags = os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0)
    local = threading.local()

    def one(item: tuple[int, int, int]) -> tuple[float, int]:
        index, offset, size = item
        if not hasattr(local, "buf"):
            local.buf = mmap.mmap(-1, max(max_read, DIRECT_ALIGN))  # page aligned
        start = time.perf_counter()
        fd = os.open(paths[index], flags)
        try:
            if not direct and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            got = os.preadv(fd, [memoryview(local.buf)[:size]], offset)
        finally:
            os.close(fd)
        return (time.perf_counter() - start) * 1000.0, got

    try:
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            done = list(pool.map(one, plan))
        wall = time.perf_counter() - start
    except OSError as err:
        out["error"] = f"{err.filename or 'read'}: {err.strerror or err}"
        return out
    latencies = [ms for ms, _ in done]
    out["bytes"] = sum(n for _, n in done)
    short = sum(1 for (_, _, size), (_, n) in zip(plan, done, strict=True) if n != size)
    if short:
        out["error"] = f"{short} reads returned fewer bytes than asked"
    out.update(
        wall_s=wall,
        files_per_s=len(done) / wall if wall > 0 else None,
        mbps=out["bytes"] / wall / 1e6 if wall > 0 else None,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        max_ms=max(latencies),
        histogram=latency_histogram(latencies),
    )
    return out


def checkpoint_state(torch: Any, nbytes: int, seed: int = 0) -> dict[str, Any]:
    """A model's state of about ``nbytes``: eight float32 weight matrices of random values
    (a fixed seed) and an int64 step counter, named as a ``state_dict`` names them."""
    generator = torch.Generator().manual_seed(seed)
    layers = 8
    cols = 1024
    rows = max(1, nbytes // 4 // layers // cols)
    state = {
        f"layers.{i}.weight": torch.randn(rows, cols, generator=generator) for i in range(layers)
    }
    state["step"] = torch.tensor([seed + 1], dtype=torch.int64)
    return state


def tensor_sha256(tensor: Any) -> str:
    """sha256 of a CPU tensor's bytes, read in place (no numpy needed)."""
    import ctypes
    import hashlib

    flat = tensor.detach().contiguous()
    return hashlib.sha256(
        ctypes.string_at(flat.data_ptr(), flat.numel() * flat.element_size())
    ).hexdigest()


def checkpoint_write(torch: Any, path: str, nbytes: int, seed: int = 0) -> dict[str, Any]:
    """Write a model state to ``path`` the way a training job checkpoints it (``torch.save``),
    flushed (fsync of the file and of its directory) and dropped from the page cache so that
    a restore reads the disk. Returns the manifest (per-tensor dtype, shape, sha256) a
    restore is compared against, and the write time."""
    out: dict[str, Any] = {
        "path": path,
        "bytes": None,
        "tensors": 0,
        "manifest": {},
        "write_s": None,
        "write_mbps": None,
        "error": None,
    }
    try:
        state = checkpoint_state(torch, nbytes, seed)
        out["manifest"] = {
            name: {"dtype": str(t.dtype), "shape": list(t.shape), "sha256": tensor_sha256(t)}
            for name, t in state.items()
        }
        out["tensors"] = len(state)
        start = time.perf_counter()
        with open(path, "wb") as handle:
            torch.save(state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        elapsed = time.perf_counter() - start
        size = os.path.getsize(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            drop_cache(fd)
        finally:
            os.close(fd)
        out.update(bytes=size, write_s=elapsed, write_mbps=size / elapsed / 1e6)
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {err}"
    return out


def checkpoint_restore(torch: Any, path: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """Load a checkpoint written by :func:`checkpoint_write` and compare it with its manifest
    exactly: every tensor present, same dtype and shape, same bytes (sha256)."""
    out: dict[str, Any] = {
        "restore_s": None,
        "restore_mbps": None,
        "identical": False,
        "mismatched": [],
        "missing": [],
        "unexpected": [],
        "error": None,
    }
    try:
        start = time.perf_counter()
        state = torch.load(path, map_location="cpu", weights_only=True)
        elapsed = time.perf_counter() - start
        size = os.path.getsize(path)
        out.update(restore_s=elapsed, restore_mbps=size / elapsed / 1e6)
    except Exception as err:
        out["error"] = f"the checkpoint does not load: {type(err).__name__}: {err}"[:600]
        return out
    if not isinstance(state, dict):
        out["error"] = f"the checkpoint holds a {type(state).__name__}, not a state dict"
        return out
    out["missing"] = sorted(set(manifest) - set(state))
    out["unexpected"] = sorted(set(state) - set(manifest))
    for name in sorted(set(manifest) & set(state)):
        tensor, want = state[name], manifest[name]
        if (
            str(tensor.dtype) != want["dtype"]
            or list(tensor.shape) != want["shape"]
            or tensor_sha256(tensor) != want["sha256"]
        ):
            out["mismatched"].append(name)
    out["identical"] = not (out["missing"] or out["unexpected"] or out["mismatched"])
    return out


def loop_dataset(spec: dict[str, Any], data_path: str) -> dict[str, Any]:
    """The data set the random reads and the loop read (``storage.files`` files of
    ``storage.file_bytes``) in a folder of its own under ``data_path``; ``error`` when it
    could not be written. :func:`remove_storage` removes it."""
    storage = spec["storage"]
    work = os.path.join(data_path, f".gpunode-accept-train-{os.getpid()}")
    out: dict[str, Any] = {"dir": work, "dataset": None, "reads": None, "checkpoint": None}
    try:
        dataset = make_dataset(
            os.path.join(work, "samples"), int(storage["files"]), int(storage["file_bytes"])
        )
    except OSError as err:
        out["error"] = f"{err.filename or work}: {err.strerror or err}"
        return out
    out["dataset"] = {k: v for k, v in dataset.items() if k != "files"}
    out["files"] = dataset["files"]
    out["error"] = None
    return out


def run_storage_checks(spec: dict[str, Any], torch: Any, data_path: str) -> dict[str, Any]:
    """The framework process's part: the data set, the random reads and the checkpoint
    write. The data set and checkpoint stay for the ranks; :func:`remove_storage` cleans up."""
    storage = spec["storage"]
    started = time.perf_counter()
    out = loop_dataset(spec, data_path)
    if out["error"]:
        return out
    out["reads"] = random_reads(
        out["files"],
        int(storage["file_bytes"]),
        int(storage["reads"]),
        int(storage["workers"]),
        int(storage["min_read_bytes"]),
        int(storage["max_read_bytes"]),
    )
    if torch is not None:
        out["checkpoint"] = checkpoint_write(
            torch, os.path.join(out["dir"], "checkpoint.pt"), int(storage["checkpoint_bytes"])
        )
    out["duration_s"] = time.perf_counter() - started
    return out


def remove_storage(storage: dict[str, Any] | None) -> None:
    """Remove what :func:`run_storage_checks` wrote."""
    if storage and storage.get("dir"):
        shutil.rmtree(storage["dir"], ignore_errors=True)
