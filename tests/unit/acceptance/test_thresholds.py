"""Acceptance thresholds: sizes, the strict schema, shipped profiles and their floors from
measurements, merging, sweeps."""

from __future__ import annotations

import re
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance import train_checks
from toolkit.acceptance.nccltests import parse
from toolkit.acceptance.thresholds import effective, sweep_sizes
from toolkit.config import validate
from toolkit.errors import ConfigError
from toolkit.lab.inventory import lab_profile
from toolkit.profile.floors import (
    MEASURED_FLOORS,
    AcceptanceSpec,
    BusbwFloor,
    build_profile,
    floor_factors,
    format_size,
    parse_size,
    shipped_profile,
    shipped_profiles,
)

REAL = ("h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "l40s-pcie")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("16GiB", 16 << 30),
        ("16G", 16 << 30),
        ("512MiB", 512 << 20),
        ("1048576", 1 << 20),
        (" 4 KiB ", 4096),
        (8, 8),
        ("1TiB", 1 << 40),
    ],
)
def test_parse_size(text: str | int, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "16GB", "-1", "1.5GiB", "GiB", "0", 0, True])
def test_parse_size_refuses(text: str | int) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    ("size", "text"),
    [(16 << 30, "16GiB"), (3 << 20, "3MiB"), (1000, "1000B"), (3072, "3KiB"), (1536, "1536B")],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


def test_floor_size_is_normalised() -> None:
    floor = BusbwFloor(size="17179869184", min_busbw_gbps=460)
    assert floor.size == "16GiB" and floor.size_bytes == 16 << 30


def test_unknown_key_names_the_path_and_suggests() -> None:
    with pytest.raises(ConfigError) as info:
        validate(AcceptanceSpec, {"min_h2d_gpbs": 48}, "hw.yml", prefix=("hardware", "acceptance"))
    assert "hardware.acceptance.min_h2d_gpbs" in info.value.message
    assert "min_h2d_gbps" in info.value.message


def test_unknown_profile_is_refused_with_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        validate(AcceptanceSpec, {"profile": "h100-sxm8"}, "hw.yml")
    assert "unknown profile 'h100-sxm8'" in info.value.message
    assert "h100-sxm-8" in info.value.message


def test_duplicate_floor_sizes_are_refused() -> None:
    with pytest.raises(ConfigError) as info:
        validate(
            AcceptanceSpec,
            {
                "allreduce": [
                    {"size": "16GiB", "min_busbw_gbps": 1},
                    {"size": "16G", "min_busbw_gbps": 2},
                ]
            },
            "hw.yml",
        )
    assert "one floor only" in info.value.message


def test_negative_floor_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        validate(AcceptanceSpec, {"min_gemm_tflops": -1}, "hw.yml")
    assert "min_gemm_tflops" in info.value.message


@pytest.mark.parametrize("name", sorted(shipped_profiles()))
def test_every_shipped_profile_validates_and_has_sources(name: str) -> None:
    profile = shipped_profile(name)
    assert profile.sources
    spec = profile.acceptance
    floors = spec.allreduce + spec.multi_node_allreduce
    assert floors, "a profile without an all-reduce floor proves nothing"
    assert all(f.source for f in floors)


# (profile, all-reduce list, size, the measured busbw written in floors.yml)
BUSBW_MEASURED = [
    ("h100-sxm-8", "allreduce", 16 << 30, 483.05),
    ("h200-sxm-8", "allreduce", 8 << 30, 479.98),
    ("a100-sxm-8", "allreduce", 4 << 30, 230.48),
    ("a100-sxm-8", "allreduce", 8 << 30, 231.58),
    ("l40s-pcie", "multi_node_allreduce", 8 << 30, 9.62),
]


@pytest.mark.parametrize(("name", "listing", "size", "measured"), BUSBW_MEASURED)
def test_busbw_floors_are_the_factor_times_the_measured_figure(
    name: str, listing: str, size: int, measured: float
) -> None:
    factor = floor_factors().min_busbw_gbps.factor
    floors = getattr(shipped_profile(name).acceptance, listing)
    (floor,) = [f for f in floors if f.size_bytes == size]
    assert floor.min_busbw_gbps == pytest.approx(factor * measured, abs=1e-3)
    assert floor.source and f"{factor} x {measured} GB/s measured" in floor.source


# (profile, key, measured figure written in floors.yml); a key absent here is not judged.
MEASURED = [
    ("h100-sxm-8", "min_gemm_tflops", 783.66),
    ("h100-sxm-8", "min_mem_bw_gbps", 2900),
    ("h100-sxm-8", "min_h2d_gbps", 51),
    ("h200-sxm-8", "min_gemm_tflops", 790.29),
    ("h200-sxm-8", "min_mem_bw_gbps", 4010),
    ("h200-sxm-8", "min_h2d_gbps", 52),
    ("a100-sxm-8", "min_gemm_tflops", 264.53),
    ("a100-sxm-8", "min_mem_bw_gbps", 1610),
    ("a100-sxm-8", "min_h2d_gbps", 23),
    ("l40s-pcie", "min_gemm_tflops", 269.15),
    ("l40s-pcie", "min_mem_bw_gbps", 700),
]


@pytest.mark.parametrize("name", REAL)
def test_real_profiles_judge_exactly_the_measured_floors(name: str) -> None:
    spec = shipped_profile(name).acceptance
    factors = floor_factors()
    for key in ("min_gemm_tflops", "min_mem_bw_gbps", "min_h2d_gbps"):
        measured = {k: m for n, k, m in MEASURED if n == name}.get(key)
        if measured is None:
            assert getattr(spec, key) is None, f"{name}.{key}: no measured figure, not judged"
        else:
            expected = getattr(factors, key).factor * measured
            assert getattr(spec, key) == pytest.approx(expected, abs=1e-3)


def test_every_gpu_profile_sets_gemm_and_memory_bandwidth_floors() -> None:
    """A uniformly power-capped node passes the median check: only an absolute floor sees it."""
    for name in REAL:
        spec = shipped_profile(name).acceptance
        assert spec.min_gemm_tflops and spec.min_mem_bw_gbps


def test_one_factor_per_floor_for_every_gpu_profile() -> None:
    """DCGM's 0.75 for what the GPU does alone, Azure NHC's 0.9 for links; only the lab (no
    real GPU, a CPU all-reduce on shared cores) brings its own factor, with its source."""
    factors = floor_factors()
    assert (factors.min_gemm_tflops.factor, factors.min_mem_bw_gbps.factor) == (0.75, 0.75)
    assert (factors.min_h2d_gbps.factor, factors.min_busbw_gbps.factor) == (0.9, 0.9)
    assert all(getattr(factors, key).source for key in MEASURED_FLOORS)
    for name in REAL:
        assert shipped_profile(name).floor_factors == {}
    lab = lab_profile()
    assert set(lab.floor_factors) == {"min_busbw_gbps"}
    assert [f.min_busbw_gbps for f in lab.acceptance.allreduce] == [pytest.approx(0.047)]
    # Above what the slow-net fault's 100 mbit link can carry (0.0125 GB/s).
    assert [f.min_busbw_gbps for f in lab.acceptance.multi_node_allreduce] == [pytest.approx(0.019)]


def test_real_profiles_judge_the_emulated_loops_wait_and_leave_util_unjudged() -> None:
    """Review real-hardware-748e562 N6b: the tiny loop could not keep an H100 busy. Issue 23:
    where a profile emulates the step's compute (MLPerf Storage's DLIO figure) its data wait
    is judged (1 - AU); the GPU step's utilisation is not judged until measured there."""
    section = {
        "storage": None,
        "train": {
            "loop": {
                "ranks": 8,
                "data_wait_share": 0.9,
                "gpu_util": {"measured": True, "per_gpu": {0: 3.0, 1: 4.0}},
            },
            "scaling": {"points": [{"ranks": 1, "efficiency": 1.0}]},
        },
    }
    for name in REAL:
        spec = shipped_profile(name).acceptance
        checks = {c.name: c for c in train_checks._loop_checks(section["train"], spec)}
        assert "train.gpu_util" not in checks
        if spec.train_compute_s is None:
            assert "train.data_wait" not in checks
        else:
            assert not checks["train.data_wait"].ok and checks["train.data_wait"].floor == 0.10


CAPTURES = REPO / "tests" / "data" / "real" / "nccl-tests"


def _capture_busbw(name: str, size: int) -> float:
    path = CAPTURES / name
    row = parse(path.read_text()).row_at(size)
    assert row is not None
    return min(p.busbw_gbps for p in row.placements())


@pytest.mark.parametrize(
    ("name", "listing", "size", "capture"),
    [
        (
            "h100-sxm-8",
            "allreduce",
            16 << 30,
            "h100_8gpu_nvswitch_single_node_p5_mpirun_prefix.txt",
        ),
        ("l40s-pcie", "multi_node_allreduce", 8 << 30, "l40s_4gpu_2node_pcie_rdma.txt"),
    ],
)
def test_measured_busbw_is_what_the_cited_capture_shows(
    name: str, listing: str, size: int, capture: str
) -> None:
    """The figure is the parser's reading of the public capture (the lower placement)."""
    (measured,) = [m for n, lst, s, m in BUSBW_MEASURED if (n, lst, s) == (name, listing, size)]
    assert _capture_busbw(capture, size) == pytest.approx(measured)


def test_a100_busbw_is_the_lowest_healthy_figure() -> None:
    """The 40GB superbenchmark capture shows more than ND A100 v4: the lower one is written."""
    capture = "a100_8gpu_sxm4_nvswitch_single_node_legacy_format.txt"
    for size in (4 << 30, 8 << 30):
        (measured,) = [m for n, _, s, m in BUSBW_MEASURED if (n, s) == ("a100-sxm-8", size)]
        assert _capture_busbw(capture, size) > measured


REAL_DATA = REPO / "tests" / "data" / "real" / "floors"


def _cells(text: str, label: str) -> list[str]:
    """The cells of the first Markdown table row whose first cell is ``label``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells[0] == label:
            return cells
    raise AssertionError(f"no row {label!r}")


def _azure(results: str, label: str) -> float:
    """A figure of one Azure results file (its section of the excerpt)."""
    text = (REAL_DATA / "azure-ai-benchmarking-guide.md").read_text()
    section = text.split(f"## Azure_Results/{results}_results.md", 1)[1].split("## Azure_Results")[
        0
    ]
    return float(_cells(section, label)[1])


def _torch_bf16(*devices: str) -> float:
    """The lowest BF16 TFLOPS of the named devices' rows."""
    text = (REAL_DATA / "torch-performance-test-data.md").read_text()
    rows = [
        line.strip().strip("|").split("|")
        for line in text.splitlines()
        if line.startswith("| NVIDIA")
    ]
    return min(float(r[4]) for r in rows if r[0].strip() in devices)


def _dcgm() -> dict[str, str]:
    """Each SKU entry of the DCGM excerpt as text, by SKU id."""
    text = (REAL_DATA / "dcgm-diag-skus.yaml").read_text()
    return {
        match.group(1): entry
        for entry in text.split("  - name:")[1:]
        if (match := re.search(r"id: '(\w+)'", entry))
    }


def _dcgm_memory(sku: str) -> tuple[float, float]:
    """(measured, minimum_bandwidth) of a SKU's memory test, both in MB/s."""
    entry = _dcgm()[sku].split("memory_bandwidth:", 1)[1]
    shown = re.search(r"shows ~?([0-9]+)", entry)
    floor = re.search(r"minimum_bandwidth: ([0-9.]+)", entry)
    assert shown and floor
    return float(shown.group(1)), float(floor.group(1))


def _azure_nhc_h2d(column: str) -> float:
    text = (REAL_DATA / "azurehpc-health-checks-readme.md").read_text()
    header = _cells(text, "Check")
    return float(_cells(text, "check_gpu_bandwidth")[header.index(column)].split()[0])


# Each measured figure of floors.yml, read from the public artefact it cites.
ARTEFACT_FIGURES = {
    ("h100-sxm-8", "min_gemm_tflops"): lambda: _torch_bf16("NVIDIA H100 80GB HBM3"),
    ("h100-sxm-8", "min_mem_bw_gbps"): lambda: _azure("ND_H100_v5", "Copy") * 1000,
    ("h100-sxm-8", "min_h2d_gbps"): lambda: min(
        _azure("ND_H100_v5", "Host to Device"), _azure_nhc_h2d("nd96isr_h100_v5 expected")
    ),
    ("h200-sxm-8", "min_gemm_tflops"): lambda: _torch_bf16("NVIDIA H200"),
    ("h200-sxm-8", "min_mem_bw_gbps"): lambda: _azure("ND_H200_v5", "Copy") * 1000,
    ("h200-sxm-8", "min_h2d_gbps"): lambda: min(
        _azure("ND_H200_v5", "Host to Device"), _azure_nhc_h2d("nd96isr_h200_v5 expected")
    ),
    ("a100-sxm-8", "min_gemm_tflops"): lambda: _torch_bf16("NVIDIA A100 SXM4 80GB"),
    ("a100-sxm-8", "min_mem_bw_gbps"): lambda: _azure("ND_A100_v4", "Copy") * 1000,
    ("a100-sxm-8", "min_h2d_gbps"): lambda: min(
        _azure("ND_A100_v4", "Host to Device"), _azure_nhc_h2d("nd96asr_v4 expected")
    ),
    ("l40s-pcie", "min_gemm_tflops"): lambda: _torch_bf16("NVIDIA L40S"),
    ("l40s-pcie", "min_mem_bw_gbps"): lambda: _dcgm_memory("26b9")[0] / 1000,
}


@pytest.mark.parametrize(("name", "key", "measured"), MEASURED)
def test_measured_figures_are_read_from_the_cited_artefacts(
    name: str, key: str, measured: float
) -> None:
    assert ARTEFACT_FIGURES[(name, key)]() == pytest.approx(measured)


@pytest.mark.parametrize(
    ("name", "results", "size", "label"),
    [
        ("h200-sxm-8", "ND_H200_v5", 8 << 30, "8G"),
        ("a100-sxm-8", "ND_A100_v4", 4 << 30, "4G"),
        ("a100-sxm-8", "ND_A100_v4", 8 << 30, "8G"),
    ],
)
def test_measured_busbw_is_read_from_the_azure_results(
    name: str, results: str, size: int, label: str
) -> None:
    (measured,) = [m for n, _, s, m in BUSBW_MEASURED if (n, s) == (name, size)]
    assert _azure(results, label) == pytest.approx(measured)


@pytest.mark.parametrize("sku", ["2330", "20b2", "26b9"])
def test_dcgm_floors_are_three_quarters_of_its_measurements(sku: str) -> None:
    """DCGM's own rule, read from its SKU file: the factor of the GEMM and memory floors."""
    shown, floor = _dcgm_memory(sku)
    assert floor == pytest.approx(floor_factors().min_mem_bw_gbps.factor * shown, rel=1e-3)
    assert floor_factors().min_gemm_tflops.factor == floor_factors().min_mem_bw_gbps.factor


def _profile(acceptance: dict[str, Any]) -> dict[str, Any]:
    return {"description": "test", "sources": ["test"], "acceptance": acceptance}


GEMM = {"measured": 780.0, "unit": "TFLOP/s", "source": "a public run"}
BUSBW = {"size": "16GiB", "measured": 480.0, "unit": "GB/s", "source": "a public capture"}


@pytest.mark.parametrize(
    ("acceptance", "where", "text"),
    [
        (
            {"min_gemm_tflops": {"measured": 780.0, "unit": "TFLOP/s"}},
            "profiles.test-gpu.acceptance.min_gemm_tflops.source",
            "required",
        ),
        (
            {"min_gemm_tflops": {**GEMM, "source": "  "}},
            "profiles.test-gpu.acceptance.min_gemm_tflops.source",
            "pattern",
        ),
        (
            {"min_mem_bw_gbps": {"unit": "GB/s", "source": "datasheet"}},
            "profiles.test-gpu.acceptance.min_mem_bw_gbps.measured",
            "required",
        ),
        (
            {"min_h2d_gbps": 48},
            "profiles.test-gpu.acceptance.min_h2d_gbps",
            "factor x measured",
        ),
        (
            {"min_mem_bw_gbps": {"measured": 2540000, "unit": "MB/s", "source": "DCGM"}},
            "profiles.test-gpu.acceptance.min_mem_bw_gbps.unit",
            "measured in GB/s",
        ),
        (
            {"allreduce": [{"size": "16GiB", "min_busbw_gbps": 460, "source": "Azure"}]},
            "profiles.test-gpu.acceptance.allreduce[0].measured",
            "required",
        ),
        (
            {"multi_node_allreduce": [{k: v for k, v in BUSBW.items() if k != "source"}]},
            "profiles.test-gpu.acceptance.multi_node_allreduce[0].source",
            "required",
        ),
    ],
)
def test_a_profile_floor_without_measurement_or_source_is_refused(
    acceptance: dict[str, Any], where: str, text: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build_profile("test-gpu", _profile(acceptance), floor_factors())
    assert where in info.value.message and text in info.value.message


def test_a_profile_with_measured_floors_derives_them() -> None:
    profile = build_profile(
        "test-gpu",
        _profile({"min_gemm_tflops": GEMM, "allreduce": [BUSBW]}),
        floor_factors(),
    )
    assert profile.acceptance.min_gemm_tflops == pytest.approx(0.75 * 780.0)
    assert profile.acceptance.allreduce[0].min_busbw_gbps == pytest.approx(0.9 * 480.0)
    assert profile.acceptance.min_mem_bw_gbps is None  # not written: not judged


def test_a_profile_factor_needs_its_source() -> None:
    raw = {
        **_profile({"allreduce": [BUSBW]}),
        "floor_factors": {"min_busbw_gbps": {"factor": 0.1}},
    }
    with pytest.raises(ConfigError) as info:
        build_profile("test-gpu", raw, floor_factors())
    assert "profiles.test-gpu.floor_factors.min_busbw_gbps.source" in info.value.message


def test_the_profiles_file_names_no_datasheet_peak_as_measured() -> None:
    """The figures are measurements, so each sits below its model's datasheet peak."""
    peaks = {  # NVIDIA datasheets (H100/H200 SXM, A100 SXM4 80GB, L40S): dense BF16, HBM
        "h100-sxm-8": {"min_gemm_tflops": 989, "min_mem_bw_gbps": 3350},
        "h200-sxm-8": {"min_gemm_tflops": 989, "min_mem_bw_gbps": 4800},
        "a100-sxm-8": {"min_gemm_tflops": 312, "min_mem_bw_gbps": 2039},
        "l40s-pcie": {"min_gemm_tflops": 362, "min_mem_bw_gbps": 864},
    }
    for name, key, measured in MEASURED:
        if key in peaks[name]:
            assert measured < peaks[name][key], f"{name}.{key}"
    raw = REPO / "toolkit" / "profile" / "floors.yml"
    assert "datasheet peak" not in raw.read_text().split("profiles:", 1)[1]


def test_expected_profiles_are_shipped() -> None:
    assert {"h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "l40s-pcie"} <= set(shipped_profiles())
    # The lab's floors are the lab's (toolkit/lab/acceptance.yml), not a product profile.
    assert "lab" not in shipped_profiles()


def test_effective_merges_own_keys_over_the_profile() -> None:
    spec = AcceptanceSpec(profile="h100-sxm-8", min_h2d_gbps=50)
    merged = effective(spec)
    assert merged.min_h2d_gbps == 50
    assert merged.min_mem_bw_gbps == 2175
    assert [(f.size, f.min_busbw_gbps) for f in merged.allreduce] == [("16GiB", 434.745)]


def test_effective_own_floor_list_replaces_the_profiles() -> None:
    spec = AcceptanceSpec.model_validate(
        {"profile": "h100-sxm-8", "allreduce": [{"size": "8GiB", "min_busbw_gbps": 400}]}
    )
    assert [f.size for f in effective(spec).allreduce] == ["8GiB"]


def test_effective_without_spec_has_no_floors() -> None:
    spec = effective(None)
    assert spec.allreduce == [] and spec.min_h2d_gbps is None


def test_sweep_contains_every_floor_size_and_is_geometric() -> None:
    spec = AcceptanceSpec.model_validate(
        {
            "allreduce": [
                {"size": "16GiB", "min_busbw_gbps": 1},
                {"size": "3GiB", "min_busbw_gbps": 1},
            ],
            "sweep_min_size": "1GiB",
            "sweep_factor": 4,
        }
    )
    assert sweep_sizes(spec) == [1 << 30, 3 << 30, 4 << 30, 16 << 30]


def test_sweep_without_floors_ends_at_64mib() -> None:
    assert max(sweep_sizes(AcceptanceSpec())) == 64 << 20


def test_lab_multi_node_sweep_uses_its_own_floors() -> None:
    spec = lab_profile().acceptance
    assert 16 << 20 in sweep_sizes(spec, multi_node=True)
