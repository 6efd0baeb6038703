"""Acceptance thresholds: sizes, the strict schema, shipped profiles, merging, sweeps."""

from __future__ import annotations

import pytest

from toolkit.acceptance.thresholds import (
    AcceptanceSpec,
    BusbwFloor,
    effective,
    format_size,
    parse_size,
    shipped_profile,
    shipped_profiles,
    sweep_sizes,
)
from toolkit.config import validate
from toolkit.errors import ConfigError


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


@pytest.mark.parametrize(
    ("name", "size", "floor"),
    [
        ("h100-sxm-8", 16 << 30, 460),
        ("h200-sxm-8", 16 << 30, 431),
        ("a100-sxm-8", 4 << 30, 230),
    ],
)
def test_shipped_figures_match_domain_notes(name: str, size: int, floor: float) -> None:
    spec = shipped_profile(name).acceptance
    assert {f.size_bytes: f.min_busbw_gbps for f in spec.allreduce}[size] == floor


def test_expected_profiles_are_shipped() -> None:
    assert {"h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "l40s-pcie", "lab"} <= set(shipped_profiles())


def test_effective_merges_own_keys_over_the_profile() -> None:
    spec = AcceptanceSpec(profile="h100-sxm-8", min_h2d_gbps=50)
    merged = effective(spec)
    assert merged.min_h2d_gbps == 50
    assert merged.min_mem_bw_gbps == 1905
    assert [(f.size, f.min_busbw_gbps) for f in merged.allreduce] == [("16GiB", 460.0)]


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
    spec = effective(AcceptanceSpec(profile="lab"))
    assert 16 << 20 in sweep_sizes(spec, multi_node=True)
