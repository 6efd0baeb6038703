"""Which NCCL a framework really loads: the one probe (node_runner) that image inspect and the
acceptance check share, run against the lab's stand-in NCCL wheels; the mismatch verdict."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from toolkit.acceptance.node_runner.probe import decode_nccl_version, mapped_nccl, nccl_candidates
from toolkit.images.inspect import judge
from toolkit.images.recipe import LABEL_CUDA, LABEL_STACK_ID
from toolkit.lab import nccl_wheel

WHEEL_LIB = "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
MAPS = (
    "7f1c2a000000-7f1c2a200000 r-xp 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    f"7f1c2b000000-7f1c2b400000 r-xp 00000000 08:01 456 {WHEEL_LIB}\n"
    f"7f1c2b400000-7f1c2b500000 r--p 00400000 08:01 456 {WHEEL_LIB}\n"
    "7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]\n"
)
LDCONFIG = """\
\t3 libs found in cache `/etc/ld.so.cache'
\tlibnccl.so.2 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so.2
\tlibnccl.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnccl.so
"""


@pytest.mark.parametrize(
    ("code", "version"), [(22105, "2.21.5"), (22602, "2.26.2"), (22703, "2.27.3"), (2804, "2.8.4")]
)
def test_version_codes(code: int, version: str) -> None:
    assert decode_nccl_version(code) == version


def test_mapped_libraries_are_read_from_proc_maps() -> None:
    assert mapped_nccl(MAPS) == [WHEEL_LIB]
    assert mapped_nccl("") == []


def test_the_wheel_comes_before_the_loader_cache(tmp_path: Path) -> None:
    lib = tmp_path / "site" / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"x")
    found = nccl_candidates([str(tmp_path / "nothing"), str(tmp_path / "site")], LDCONFIG)
    assert found[:2] == [str(lib / "libnccl.so.2"), "/usr/lib/x86_64-linux-gnu/libnccl.so.2"]
    assert nccl_candidates([], "")[:1] != [str(lib / "libnccl.so.2")]


def test_standin_wheel_is_reproducible_and_shaped_like_the_real_one() -> None:
    data = nccl_wheel.build_wheel("2.21.5", 12)
    assert data == nccl_wheel.build_wheel("2.21.5", 12)
    name = nccl_wheel.wheel_name("2.21.5", 12)
    assert name == "nvidia_nccl_cu12-2.21.5-py3-none-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = archive.namelist()
        metadata = archive.read("nvidia_nccl_cu12-2.21.5.dist-info/METADATA").decode()
    assert nccl_wheel.LIBRARY in names
    assert "Name: nvidia-nccl-cu12" in metadata and "stand-in" in metadata


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory with the stand-in wheel at 2.26.2 installed by pip."""
    root = tmp_path_factory.mktemp("wheels")
    wheel = root / nccl_wheel.wheel_name("2.26.2", 12)
    wheel.write_bytes(nccl_wheel.build_wheel("2.26.2", 12))
    target = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(target), str(wheel)],
        check=True,
    )  # fmt: skip
    return target


def test_probe_finds_the_wheels_library_its_version_and_its_source(
    site: Path, runner_pyz: Path
) -> None:
    out = subprocess.run(
        [sys.executable, "-S", str(runner_pyz), "nccl-probe"],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    probe = json.loads(out.stdout)
    assert probe["path"] == str(site / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    assert probe["version"] == "2.26.2"  # from ncclGetVersion() of the loaded library
    assert probe["how"] == "resolved"  # no framework mapped it (none is installed here)
    assert probe["source"] == {
        "kind": "pip-wheel",
        "package": "nvidia-nccl-cu12",
        "package_version": "2.26.2",
    }


def test_mismatch_names_both_versions_and_the_library() -> None:
    probe = {
        "version": "2.26.2",
        "path": "/usr/local/lib/python3.11/dist-packages/nvidia/nccl/lib/libnccl.so.2",
        "source": {"kind": "pip-wheel", "package": "nvidia-nccl-cu12", "package_version": "2.26.2"},
    }
    labels = {LABEL_STACK_ID: "abc", LABEL_CUDA: "12.4"}
    problems = judge(labels, probe, "abc", "2.21.5", "12.4")
    assert len(problems) == 1
    assert "2.26.2" in problems[0] and "2.21.5" in problems[0]
    assert probe["path"] in problems[0] and "nvidia-nccl-cu12" in problems[0]
    assert judge(labels, {**probe, "version": "2.21.5"}, "abc", "2.21.5", "12.4") == []


def test_other_stack_and_no_nccl_are_problems() -> None:
    labels = {LABEL_STACK_ID: "abc", LABEL_CUDA: "12.4"}
    problems = judge(labels, {"path": None}, "def", "2.21.5", "12.8")
    assert any("stack" in p and "def" in p for p in problems)
    assert any("CUDA 12.4" in p for p in problems)
    assert any("loads no NCCL" in p for p in problems)
