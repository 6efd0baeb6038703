"""The state file's one writer (``toolkit.node.nodefile``, through ``nodestate.write``): whole
files under a lock, with real processes racing for it."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.node import nodefile, nodestate

WRITES = 60


def _count(path: str, writer: str) -> None:
    """Read, add one, write (the read-compare-write a health check does), ``WRITES`` times."""

    def change(text: str | None) -> str:
        state = nodestate.parse(text)
        counts = dict(state.get("counts") or {})
        counts[writer] = counts.get(writer, 0) + 1
        # Large enough that a torn or interleaved write could not parse.
        return nodestate.render({**state, "counts": counts, "pad": writer * 20000})

    for _ in range(WRITES):
        nodefile.update(path, change)


def test_two_processes_writing_at_once_lose_no_update_and_tear_no_file(tmp_path: Path) -> None:
    path = str(tmp_path / "state.json")
    nodestate.write(nodestate.new(), path)
    context = multiprocessing.get_context("spawn")
    writers = [context.Process(target=_count, args=(path, name)) for name in ("a", "b")]
    for process in writers:
        process.start()
    # A third process reads all along: it must only ever see whole files.
    checker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import json, sys, time\n"
            "end = time.monotonic() + 60\n"
            "while time.monotonic() < end:\n"
            "    try:\n"
            "        text = open(sys.argv[1]).read()\n"
            "    except OSError:\n"
            "        continue\n"
            "    json.loads(text)\n"
            "    if len(json.loads(text).get('counts', {})) == 2 and "
            f"sum(json.loads(text)['counts'].values()) == {2 * WRITES}:\n"
            "        break\n",
            path,
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    _, errors = checker.communicate(timeout=120)
    assert checker.returncode == 0, errors  # a torn file fails json.loads
    state = json.loads(Path(path).read_text())
    assert state["counts"] == {"a": WRITES, "b": WRITES}  # no update lost
    leftovers = sorted(p.name for p in tmp_path.iterdir())
    assert leftovers == ["state.json", "state.json.lock"]  # no temporary file left


def test_the_lock_is_shared_with_flock_1_and_a_writer_gives_up_after_its_timeout(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "state.json")
    # util-linux's flock(1) holds the same flock(2) lock another tool on the node could take.
    holder = subprocess.Popen(
        ["flock", path + nodefile.LOCK_SUFFIX, "-c", "echo held && sleep 1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with (
            pytest.raises(TimeoutError, match="held by another writer"),
            nodefile.locked(path, timeout_s=0.3),
        ):
            pass
    finally:
        holder.wait(30)
    with nodefile.locked(path, timeout_s=5):  # released with its holder
        pass


def test_the_write_program_writes_as_the_module_does(tmp_path: Path) -> None:
    path = str(tmp_path / "etc" / "gpunode" / "state.json")
    state = {**nodestate.new(), "reason": ['a "quoted"\nreason']}
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-"],
        input=nodestate.write_program(state, path),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert Path(path).read_text() == nodestate.render(state)
    assert Path(path).stat().st_mode & 0o777 == 0o644
