"""`gpunode image`: registered, documented, and bad image settings refused before any build;
the ranks' container command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from toolkit.acceptance.node_runner.node import DEFAULT_CONTAINER_OPTIONS, container_argv
from toolkit.acceptance.staging import container_options
from toolkit.errors import ConfigError
from toolkit.inventory import load_inventory


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "image", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_image_help_lists_its_commands() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ("build", "verify", "inspect", "push"):
        assert command in result.stdout


@pytest.fixture
def sample(tmp_path: Path, repo_root: Path) -> Path:
    target = tmp_path / "inventory"
    shutil.copytree(repo_root / "inventories" / "sample", target)
    return target


def test_several_groups_need_a_group(sample: Path) -> None:
    result = run("build", "-i", str(sample))
    assert result.returncode == 2
    assert "--group" in result.stderr


def test_an_unpinned_base_is_refused_with_the_variable_named(sample: Path) -> None:
    group = load_inventory(sample).stack_groups()[0]
    result = run("build", "-i", str(sample), "--group", group)
    assert result.returncode == 2 and "gpunode_image_base is not set" in result.stderr
    image = sample / "group_vars" / "all" / "image.yml"
    data = yaml.safe_load(image.read_text())
    data["gpunode_image_base"] = "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"
    image.write_text(yaml.safe_dump(data))
    result = run("verify", "-i", str(sample), "--group", group)
    assert result.returncode == 2 and "not pinned by digest" in result.stderr


def test_ranks_run_in_the_image_with_gpus_host_network_and_data() -> None:
    argv = container_argv(
        "sha256:abc", "/opt/gpunode/accept", "/data", {"GLOO_SOCKET_IFNAME": "eth0"}
    )
    assert argv[:3] == ["docker", "run", "--rm"]
    assert "--gpus=all" in argv and "--network=host" in argv
    assert all(option in argv for option in DEFAULT_CONTAINER_OPTIONS)
    assert argv[argv.index("/data:/data") - 1] == "-v"
    assert argv[argv.index("/opt/gpunode/accept:/opt/gpunode/accept") - 1] == "-v"
    assert "GLOO_SOCKET_IFNAME=eth0" in argv
    assert argv[-4:] == [
        "--entrypoint",
        "python3",
        "sha256:abc",
        "/opt/gpunode/accept/node_runner.pyz",
    ]


def test_container_options_come_from_the_inventory(sample: Path) -> None:
    host = load_inventory(sample).hosts_for(None)[0]
    assert container_options(host) == list(DEFAULT_CONTAINER_OPTIONS)
    bad = type(host)(**{**host.__dict__, "vars": {"gpunode_accept_container_options": "--x"}})
    with pytest.raises(ConfigError, match="gpunode_accept_container_options"):
        container_options(bad)


def test_ranks_get_the_hosts_imex_channels_and_only_those(tmp_path: Path) -> None:
    from toolkit.acceptance.node_runner.node import imex_channels

    assert imex_channels(str(tmp_path / "nvidia-caps-imex-channels" / "channel*")) == []
    folder = tmp_path / "nvidia-caps-imex-channels"
    folder.mkdir()
    (folder / "channel0").touch()
    found = imex_channels(str(folder / "channel*"))
    assert found == [str(folder / "channel0")]
    argv = container_argv("sha256:abc", "/opt/gpunode/accept", None, None, devices=found)
    assert f"--device={folder / 'channel0'}" in argv
    assert not any(a.startswith("--device") for a in container_argv("sha256:abc", "/w"))
