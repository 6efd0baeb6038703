"""The lab package server's pip lock of the wheels it serves."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from toolkit.errors import LabError
from toolkit.lab.server import requirements_lock


def test_lock_pins_every_served_wheel_by_version_and_hash(tmp_path: Path) -> None:
    wheels = {
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": b"torch bytes",
        "typing_extensions-4.16.0-py3-none-any.whl": b"typing bytes",
        "markupsafe-3.0.4-1-cp311-cp311-manylinux2014_x86_64.whl": b"build tag",
    }
    for name, data in wheels.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "stamp").write_text("not a wheel")

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    assert requirements_lock(tmp_path) == [
        f"markupsafe==3.0.4 --hash=sha256:{sha(b'build tag')}",
        f"torch==2.13.0+cpu --hash=sha256:{sha(b'torch bytes')}",
        f"typing_extensions==4.16.0 --hash=sha256:{sha(b'typing bytes')}",
    ]


def test_no_wheels_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LabError, match="no wheels"):
        requirements_lock(tmp_path)
