"""The GPU catalog: short names and nvidia-smi names -> architecture and compute capability."""

from __future__ import annotations

import pytest

from toolkit.errors import ConfigError
from toolkit.stack.catalog import catalog, gpu, lookup_gpu, normalise
from toolkit.stack.matrix import matrix

# (name as written or printed by nvidia-smi, model, architecture, compute capability)
NAMES = [
    ("V100", "V100", "volta", "7.0"),
    ("Tesla V100-SXM2-32GB", "V100", "volta", "7.0"),
    ("Tesla V100S-PCIE-32GB", "V100", "volta", "7.0"),
    ("T4", "T4", "turing", "7.5"),
    ("Tesla T4", "T4", "turing", "7.5"),
    ("A100", "A100", "ampere", "8.0"),
    ("NVIDIA A100-SXM4-80GB", "A100", "ampere", "8.0"),
    ("NVIDIA A100 80GB PCIe", "A100", "ampere", "8.0"),
    ("A10", "A10", "ampere", "8.6"),
    ("NVIDIA A10", "A10", "ampere", "8.6"),
    ("A30", "A30", "ampere", "8.0"),
    ("A40", "A40", "ampere", "8.6"),
    ("L4", "L4", "ada", "8.9"),
    ("L40", "L40", "ada", "8.9"),
    ("L40S", "L40S", "ada", "8.9"),
    ("NVIDIA L40S", "L40S", "ada", "8.9"),
    ("H100", "H100", "hopper", "9.0"),
    ("NVIDIA H100 80GB HBM3", "H100", "hopper", "9.0"),
    ("NVIDIA H100 PCIe", "H100", "hopper", "9.0"),
    ("H200", "H200", "hopper", "9.0"),
    ("NVIDIA H200", "H200", "hopper", "9.0"),
    ("GH200", "GH200", "grace_hopper", "9.0"),
    ("NVIDIA GH200 480GB", "GH200", "grace_hopper", "9.0"),
    ("B200", "B200", "blackwell", "10.0"),
    ("NVIDIA B200", "B200", "blackwell", "10.0"),
    ("B300", "B300", "blackwell", "10.3"),
    ("GB200", "GB200", "grace_blackwell", "10.0"),
    ("GB300", "GB300", "grace_blackwell", "10.3"),
    ("P100", "P100", "pascal", "6.0"),
    ("M60", "M60", "maxwell", "5.2"),
    # Case and spacing do not matter; unlisted variants are found by their first word.
    ("  nvidia   h100 80gb hbm3 ", "H100", "hopper", "9.0"),
    ("h100", "H100", "hopper", "9.0"),
    ("NVIDIA H100 94GB HBM2e", "H100", "hopper", "9.0"),
    ("NVIDIA A100-SXM4-64GB", "A100", "ampere", "8.0"),
]


@pytest.mark.parametrize(("name", "model", "architecture", "cc"), NAMES)
def test_lookup(name: str, model: str, architecture: str, cc: str) -> None:
    info = lookup_gpu(name)
    assert info is not None
    assert (info.model, info.architecture, info.compute_capability) == (model, architecture, cc)


@pytest.mark.parametrize("name", ["", "   ", "H1000", "NVIDIA GeForce GTX 9999", "X100"])
def test_unknown_names(name: str) -> None:
    assert lookup_gpu(name) is None


def test_unknown_name_error_suggests_models() -> None:
    with pytest.raises(ConfigError) as info:
        gpu("H1000")
    assert "unknown GPU model 'H1000'" in info.value.message
    assert "'H100'" in info.value.message


def test_normalise() -> None:
    assert normalise("Tesla  V100-SXM2-16GB") == "v100-sxm2-16gb"
    assert normalise("NVIDIA H200") == "h200"


def test_every_catalog_entry_has_rules_for_its_architecture_and_capability() -> None:
    m = matrix()
    for info in catalog():
        assert info.architecture in m.architectures, info.model
        assert info.compute_capability in m.compute_capabilities, info.model


def test_names_are_unique_across_models() -> None:
    seen: dict[str, str] = {}
    for info in catalog():
        for name in (info.model, *info.names):
            key = normalise(name)
            assert seen.setdefault(key, info.model) == info.model, name


def test_a_board_carries_one_of_its_models_names_and_device_ids() -> None:
    from toolkit.stack.catalog import _info

    entry = {
        "model": "H100",
        "architecture": "hopper",
        "compute_capability": "9.0",
        "names": ["NVIDIA H100 80GB HBM3"],
        "pci_device_ids": ["2330"],
        "boards": [
            {"name": "NVIDIA H100 80GB HBM3", "pci_device_id": "2335", "memory_total_mib": 1,
             "source": "test"}
        ],
    }  # fmt: skip
    with pytest.raises(ConfigError, match="not one of the model's names and device ids"):
        _info(entry)
    entry["boards"][0]["pci_device_id"] = "2330"  # type: ignore[index]
    assert _info(entry).board("NVIDIA H100 80GB HBM3").memory_total_mib == 1
    with pytest.raises(ConfigError, match="H100 has no board 'NVIDIA H200'"):
        _info(entry).board("NVIDIA H200")
