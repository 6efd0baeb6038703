"""Every path gpunode writes, it creates: each entry point that writes runs here against an
empty ``HOME`` (so no ``~/.cache/gpunode``, no lab home, no state folder) and must get past its
first write. A fresh machine has none of these folders; CI's warm machine had them for days,
which hid a ``FileNotFoundError`` in the README's first gpunode command (issue 21).

Where a step would take minutes (debootstrap), the program is replaced at the process boundary
by a stub on ``PATH`` that records its arguments and fails: the build got past its first write
when it reached the stub, and the stub's failure comes back as the build's clean error.
"""

from __future__ import annotations

import os
import stat
from datetime import datetime, timezone
from pathlib import Path

import pytest

from toolkit.errors import LabError
from toolkit.images import engine
from toolkit.lab import image as lab_image
from toolkit.lab import nccl_wheel, paths, server, ssh, train_base
from toolkit.lab.repo import build_repository
from toolkit.records import runs


@pytest.fixture
def cold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine on which gpunode never ran: HOME is a folder that does not exist yet."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    for name in (paths.HOME_ENV, engine.LOCK_ENV, "GPUNODE_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert not home.exists()
    return home


@pytest.fixture
def debootstrap_stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``debootstrap`` replaced on PATH: records its arguments, then fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "debootstrap.args"
    stub = bin_dir / "debootstrap"
    stub.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {record}\necho stub failed >&2\nexit 42\n')
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return record


def _cache_dir_argument(record: Path) -> Path:
    args = record.read_text().splitlines()
    (cache,) = [a.removeprefix("--cache-dir=") for a in args if a.startswith("--cache-dir=")]
    return Path(cache)


def test_the_lab_cache_is_created_private_on_first_use(cold: Path) -> None:
    cache = paths.cache_dir()
    assert cache == cold / ".cache" / "gpunode" / "lab" / "_cache"
    assert cache.is_dir() and stat.S_IMODE(cache.stat().st_mode) == 0o700


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap builds need root")
def test_the_node_image_build_gets_past_its_first_write(cold: Path, debootstrap_stub: Path) -> None:
    with pytest.raises(LabError, match="stub failed"):
        lab_image._build("gpunode-lab-node:cold", "cold")
    assert _cache_dir_argument(debootstrap_stub).is_dir()
    assert _cache_dir_argument(debootstrap_stub).is_relative_to(cold)


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap builds need root")
def test_the_training_base_build_gets_past_its_first_write(
    cold: Path, debootstrap_stub: Path
) -> None:
    with pytest.raises(LabError, match="stub failed"):
        train_base._build("gpunode-train-base:cold", cold / "libnccl2.deb")
    assert _cache_dir_argument(debootstrap_stub).is_relative_to(cold)


def test_the_repository_builds_into_an_empty_home(cold: Path) -> None:
    repo = build_repository(paths.cache_dir() / "repo")
    assert repo.public_key.is_file() and repo.public_key.is_relative_to(cold)


def test_the_wheel_cache_fills_in_an_empty_home(cold: Path) -> None:
    # A small pure-Python wheel stands in for torch; the path through pip is the lab's own.
    wheels = server.ensure_wheels(paths.cache_dir() / "wheels", requirement="six==1.16.0")
    names = {p.name for p in wheels.iterdir()}
    assert any(n.startswith("six-1.16.0") for n in names)
    assert {p.name for p in nccl_wheel.ensure_wheels(wheels)} <= names


def test_the_build_lock_is_taken_in_an_empty_home(cold: Path) -> None:
    with engine.build_lock():
        assert engine.lock_path().is_file() and engine.lock_path().is_relative_to(cold)


def test_a_run_folder_is_made_where_no_state_folder_exists(cold: Path) -> None:
    run_dir = runs.start_run("accept", now=datetime(2026, 12, 2, tzinfo=timezone.utc))
    assert run_dir.is_dir() and run_dir.parent == Path(".gpunode/runs").resolve()


def test_the_lab_keys_are_made_in_a_lab_home_that_does_not_exist(cold: Path) -> None:
    key = ssh.client_key(paths.lab_dir("cold"), "cold")
    assert key.is_file() and stat.S_IMODE(key.stat().st_mode) == 0o600
