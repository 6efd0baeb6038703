"""The stack and hardware schemas and the one-file form."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.errors import ConfigError
from toolkit.profile.hardware import load_stack_file

GOOD = """\
stack:
  driver: {version: "550.127.05", flavour: open}
  cuda: "12.4.1"
  nccl: "2.21.5-1+cuda12.4"
  fabric_manager: auto
  container_toolkit: "1.16.2"
hardware:
  gpu: {model: H100, count: 8, nvswitch: true}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_issue_example_loads(tmp_path: Path) -> None:
    loaded = load_stack_file(write(tmp_path, GOOD))
    assert loaded.stack.driver.version == "550.127.05"
    assert loaded.stack.fabric_manager == "auto"
    assert loaded.stack.cuda_minor_version_compat is False
    assert loaded.hardware.gpu.info.architecture == "hopper"
    assert loaded.hardware.data_disks is None


def test_hardware_with_disks_and_acceptance(tmp_path: Path) -> None:
    text = GOOD + (
        "  data_disks:\n    disks:\n      - {serial: S1}\n"
        "  acceptance:\n    allreduce:\n      - {size: 16GiB, min_busbw_gbps: 460}\n"
    )
    loaded = load_stack_file(write(tmp_path, text))
    assert loaded.hardware.data_disks is not None
    assert loaded.hardware.data_disks.disks[0].serial == "S1"
    assert loaded.hardware.acceptance is not None


# (replacement in GOOD, expected key path, expected text in the message)
BAD = [
    ("flavour: open", "flavour: opn", "stack.driver.flavour", "'open' or 'proprietary'"),
    ("flavour: open", "flavor: open", "stack.driver.flavor", "did you mean 'flavour'?"),
    ('cuda: "12.4.1"', "cuda: 12.4", "stack.cuda", "quoted strings"),
    ('cuda: "12.4.1"', 'cuda: "twelve"', "stack.cuda", 'not a version like "12.4.1"'),
    ('nccl: "2.21.5-1+cuda12.4"', 'nccl: "2.21.5-1"', "stack.nccl", "+cuda build"),
    ('version: "550.127.05"', 'version: "550"', "stack.driver.version", "not a version"),
    ("fabric_manager: auto", "fabric_manager: yes", "stack.fabric_manager", '"auto", "none"'),
    ("fabric_manager: auto", "fabric_manager: 550.1", "stack.fabric_manager", "quoted"),
    ("fabric_manager: auto", "fabric_manager: sometimes", "stack.fabric_manager", '"none"'),
    ("fabric_manager: auto", "fabricmanager: auto", "stack.fabricmanager",
     "did you mean 'fabric_manager'?"),
    ("model: H100", "model: H1000", "hardware.gpu.model", "did you mean 'H100'"),
    ("count: 8", 'count: "8"', "hardware.gpu.count", "valid integer"),
    ("count: 8", "count: 0", "hardware.gpu.count", "greater than or equal to 1"),
    ("nvswitch: true", 'nvswitch: "true"', "hardware.gpu.nvswitch", "valid boolean"),
    ('container_toolkit: "1.16.2"', "", "stack.container_toolkit", "required key is missing"),
    ("hardware:", "hardwar:", "hardwar", "did you mean 'hardware'?"),
]  # fmt: skip


@pytest.mark.parametrize(("old", "new", "path", "text"), BAD)
def test_malformed_stack_names_file_key_path_and_rule(
    tmp_path: Path, old: str, new: str, path: str, text: str
) -> None:
    assert old in GOOD
    file = write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(ConfigError) as info:
        load_stack_file(file)
    message = info.value.message
    assert str(file) in message
    line = next(line for line in message.splitlines() if f" {path}:" in line)
    assert text in line


def test_line_number_points_at_the_key(tmp_path: Path) -> None:
    file = write(tmp_path, GOOD.replace('cuda: "12.4.1"', "cuda: 12.4"))
    with pytest.raises(ConfigError) as info:
        load_stack_file(file)
    assert f"{file}:3: stack.cuda:" in info.value.message


def test_per_os_package_versions_are_gone_the_lock_has_them(tmp_path: Path) -> None:
    text = GOOD.replace(
        'container_toolkit: "1.16.2"',
        'container_toolkit: "1.16.2"\n  packages:\n    debian12: {libnccl2: "1"}',
    )
    with pytest.raises(ConfigError) as info:
        load_stack_file(write(tmp_path, text))
    assert "stack.packages: unknown key" in info.value.message


@pytest.mark.parametrize(("text", "expected"), [("", "empty"), ("- a\n", "a list")])
def test_not_a_mapping(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_stack_file(write(tmp_path, text))
