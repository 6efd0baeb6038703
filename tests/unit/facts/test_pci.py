"""GPU models from PCI device ids: NVIDIA's own id table and real ``lspci -nn`` captures.

The real artefacts and their sources: tests/data/real/SOURCES.md.
"""

from __future__ import annotations

import pytest
from shared_fixtures import REPO

from toolkit.facts.pci import lspci_gpus, parse_lspci
from toolkit.stack.catalog import lookup_gpu_by_pci_id

REAL = REPO / "tests" / "data/real"


def _gpu_admin_tools_ids() -> list[tuple[str, str]]:
    """(device id, model) of NVIDIA/gpu-admin-tools' GH100 entries."""
    text = (REAL / "gpu-admin-tools-gh100-devids.txt").read_text()
    return [
        (line.split()[0], line.split()[1])
        for line in text.splitlines()
        if line.strip() and not line.startswith("#")
    ]


def test_the_id_table_has_every_gh100_product() -> None:
    ids = _gpu_admin_tools_ids()
    assert len(ids) == 24
    assert {model for _, model in ids} == {"H100", "H200", "GH200", "H800", "H20"}


@pytest.mark.parametrize(("device_id", "model"), _gpu_admin_tools_ids())
def test_every_gh100_id_maps_to_its_model(device_id: str, model: str) -> None:
    info = lookup_gpu_by_pci_id(device_id)
    assert info is not None, f"10de:{device_id} ({model}) is not in toolkit/stack/gpus.yml"
    assert info.model == model


def _models(lspci: str) -> list[str | None]:
    gpus = lspci_gpus(parse_lspci(lspci))
    return [getattr(lookup_gpu_by_pci_id(g.device_id), "model", None) for g in gpus]


def test_an_old_pci_ids_line_is_an_h100_by_its_id() -> None:
    # An older pci.ids knows 2337 by number only (NVIDIA/gpu-admin-tools: 0x2337 'H100').
    line = "41:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2337] (rev a1)\n"
    [gpu] = lspci_gpus(parse_lspci(line))
    assert (gpu.device_id, gpu.description) == ("2337", "NVIDIA Corporation Device")
    assert _models(line) == ["H100"]


def test_real_lspci_of_four_h100_sxm5() -> None:
    text = (REAL / "lspci-nn-h100-sxm5-stackhpc.txt").read_text()
    gpus = lspci_gpus(parse_lspci(text))
    assert [g.slot for g in gpus] == ["06:00.0", "0c:00.0", "46:00.0", "4c:00.0"]
    assert {g.description for g in gpus} == {"NVIDIA Corporation GH100 [H100 SXM5 80GB]"}
    assert _models(text) == ["H100"] * 4


def test_real_lspci_with_an_old_pci_ids() -> None:
    text = (REAL / "lspci-nn-h100-pcie-old-pciids-hb-os.txt").read_text()
    [gpu] = lspci_gpus(parse_lspci(text))
    assert (gpu.slot, gpu.device_id, gpu.description) == (
        "c1:00.0",
        "2331",
        "NVIDIA Corporation Device",
    )
    assert _models(text) == ["H100"]
