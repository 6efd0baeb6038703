"""The orchestrator's pure helpers: run ids, digests, OS ids, rendezvous address, shipping."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from toolkit.acceptance import payload
from toolkit.acceptance.staging import rendezvous_address
from toolkit.acceptance.summary import digest
from toolkit.errors import ConfigError
from toolkit.inventory import Host
from toolkit.inventory.values import multi_node_vars
from toolkit.stack.systems import os_id_of_release


def _host(address: str, **vars_: object) -> Host:
    return Host(
        name="n1",
        address=address,
        port=22,
        user="root",
        private_key_file=None,
        known_hosts_file=None,
        groups=("all",),
        vars=vars_,
    )


def test_digest_is_canonical() -> None:
    assert digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})
    assert digest({"a": 1}) != digest({"a": 2})
    assert digest({}).startswith("sha256:") and len(digest({})) == 71


@pytest.mark.parametrize(
    ("text", "os_id"),
    [
        ('ID=debian\nVERSION_ID="12"\n', "debian12"),
        ('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n', "ubuntu2204"),
        ('ID=ubuntu\nVERSION_ID="24.04"\n', "ubuntu2404"),
        ('ID=rocky\nVERSION_ID="9.4"\n', None),
        ('ID=debian\nVERSION_ID="11"\n', None),
    ],
)
def test_os_id(text: str, os_id: str | None) -> None:
    assert os_id_of_release(text) == os_id


@pytest.mark.parametrize(
    ("address", "vars_", "expected"),
    [
        ("10.0.0.5", {}, "10.0.0.5"),
        ("gpu-5.example", {}, "gpu-5.example"),
        ("127.0.0.1", {}, "172.20.0.3"),
        ("10.0.0.5", {"gpunode_accept_address": "192.168.7.5"}, "192.168.7.5"),
    ],
)
def test_rendezvous_address(address: str, vars_: dict[str, object], expected: str) -> None:
    # 172.20.0.3: the node's own first address, as the facts' ``address`` reads it
    assert rendezvous_address(_host(address, **vars_), "172.20.0.3") == expected


def test_pip_zip_is_runnable_layout() -> None:
    with zipfile.ZipFile(io.BytesIO(payload.pip_zip())) as archive:
        names = set(archive.namelist())
    assert "pip/__main__.py" in names and "pip/_internal/__init__.py" in names
    assert not any("__pycache__" in n for n in names)


def test_pip_zip_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    target = tmp_path / "pip.zip"
    target.write_bytes(payload.pip_zip())
    out = subprocess.run(
        [sys.executable, f"{target}/pip", "--version"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("pip ")


def test_multi_node_vars_are_read_and_checked_before_any_node_is_touched() -> None:
    assert multi_node_vars(_host("10.0.0.5")) == (None, None)
    both = _host("10.0.0.5", gpunode_accept_domain="rack-07", gpunode_accept_max_sets=32)
    assert multi_node_vars(both) == ("rack-07", 32)
    assert multi_node_vars(_host("10.0.0.5", gpunode_accept_domain=7)) == ("7", None)
    for bad in (0, -1, True, "8", 2.5):
        with pytest.raises(ConfigError, match="gpunode_accept_max_sets must be a whole number"):
            multi_node_vars(_host("10.0.0.5", gpunode_accept_max_sets=bad))
    with pytest.raises(ConfigError, match="gpunode_accept_domain must be a name"):
        multi_node_vars(_host("10.0.0.5", gpunode_accept_domain=["a", "b"]))
