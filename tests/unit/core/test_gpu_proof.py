"""scripts/gpu-proof (issue 38, item 6): the runner's GPU checks on one GPU against the
profile's floors. Here there is no CUDA device: it must say so of every check and pass none."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.profile.floors import shipped_profile, shipped_profiles

SCRIPT = REPO / "scripts" / "gpu-proof"


def _script() -> ModuleType:
    loader = SourceFileLoader("gpu_proof", str(SCRIPT))
    spec = importlib.util.spec_from_loader("gpu_proof", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_without_a_gpu_it_lists_every_check_it_could_not_measure(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--profile", "h100-sxm-8", "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    document = json.loads(out.read_text(encoding="utf-8"))
    checks = {c["check"]: c for c in document["checks"]}
    for name in (
        "health.ecc",
        "gemm bf16",
        "mem_bw",
        "h2d",
        "pcie link under load",
        "nccl all-reduce (1 GPU)",
        "training step (GPU-sized)",
        "gpu utilisation",
    ):
        assert checks[name]["status"] == "not measured", checks[name]
        assert checks[name]["figure"] is None
        assert checks[name]["reason"].startswith("not measured: ")
        assert f"not measured  {name}" in proc.stderr
    assert checks["gemm bf16"]["reason"] == "not measured: no CUDA device"
    # Never a pass without a figure; the floors it would be held to are still shown.
    assert not [c for c in document["checks"] if c["status"] in ("passed", "FAILED")]
    assert checks["mem_bw"]["floor"] == 2175
    assert document["profile"] == "h100-sxm-8" and document["device"] is None


def test_its_floor_reader_reads_floors_yml_as_yaml_does() -> None:
    # The script runs where PyYAML may be missing: its reader must give the very same document.
    text = (REPO / "toolkit" / "profile" / "floors.yml").read_text(encoding="utf-8")
    assert _script().read_block_yaml(text) == yaml.safe_load(text)


@pytest.mark.parametrize("name", sorted(shipped_profiles()))
def test_its_floors_are_the_shipped_profiles(name: str) -> None:
    script = _script()
    floors = script.profile_floors(script.load_floors_file(), name)
    shipped = shipped_profile(name).acceptance
    for key in ("min_gemm_tflops", "min_mem_bw_gbps", "min_h2d_gbps", "min_gpu_util_pct"):
        assert (floors.get(key) or {}).get("floor") == getattr(shipped, key), key
    assert (floors["pcie_gen"], floors["pcie_width"]) == (shipped.pcie_gen, shipped.pcie_width)


@pytest.mark.parametrize(
    ("device", "profile"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm-8"),
        ("NVIDIA H200", "h200-sxm-8"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm-8"),
        ("NVIDIA L40S", "l40s-pcie"),
        ("NVIDIA H100 PCIe", None),  # an SXM profile's floors are not a PCIe board's
        ("NVIDIA H100 NVL", None),
        ("Tesla T4", None),
        (None, None),
    ],
)
def test_the_profile_is_the_gpus_own(device: str | None, profile: str | None) -> None:
    script = _script()
    assert script.pick_profile(script.load_floors_file(), device) == profile


def test_only_a_measured_figure_against_a_floor_passes_or_fails() -> None:
    row = _script().row
    assert row("gemm bf16", None, "TFLOP/s", 587.745)["status"] == "not measured"
    assert row("gemm bf16", 500.0, "TFLOP/s", 587.745)["status"] == "FAILED"
    assert row("gemm bf16", 600.0, "TFLOP/s", 587.745)["status"] == "passed"
    assert row("gpu utilisation", 97.0, "%", None)["status"] == "not judged"
    assert row("step", 0.3, "s", 0.22, passed=0.3 <= 0.22)["status"] == "FAILED"
