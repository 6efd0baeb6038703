"""The node image recipe: stable hash, no identities baked in, container-safe units."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from toolkit.lab import image


def test_recipe_hash_is_stable_and_short() -> None:
    assert image.recipe_hash() == image.recipe_hash()
    assert len(image.recipe_hash()) == 12
    assert image.image_tag() == f"gpunode-lab-node:{image.recipe_hash()}"


def test_recipe_hash_changes_with_the_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    before = image.recipe_hash()
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "vim-tiny"))
    assert image.recipe_hash() != before


def test_image_has_what_ansible_and_the_roles_need() -> None:
    for package in ("systemd", "openssh-server", "python3", "python3-apt", "xfsprogs", "iproute2"):
        assert package in image.PACKAGES


def test_no_identity_is_baked_in() -> None:
    script = image.CUSTOMIZE_SCRIPT
    assert "rm -f /etc/ssh/ssh_host_*" in script
    assert ": > /etc/machine-id" in script


def test_units_written_and_enabled() -> None:
    files = image.recipe_files()
    for unit in ("gpunode-lab-udev", "gpunode-lab-mounts", "gpunode-lab-boot"):
        assert f"/etc/systemd/system/{unit}.service" in files
        assert unit in image.CUSTOMIZE_SCRIPT
    udev = files["/etc/systemd/system/gpunode-lab-udev.service"]
    assert "Before=local-fs-pre.target" in udev and "DefaultDependencies=no" in udev
    assert "Storage=volatile" in files["/etc/systemd/journald.conf.d/gpunode-lab.conf"]
    assert "getty.target" in image.MASKED_UNITS


@pytest.mark.parametrize("script", ["gpunode-lab-udev", "gpunode-lab-boot"])
def test_node_scripts_are_valid_posix_shell(script: str, tmp_path: Path) -> None:
    text = image.recipe_files()[f"/usr/local/sbin/{script}"]
    assert text.startswith("#!/bin/sh\n")
    path = tmp_path / script
    path.write_text(text)
    result = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
