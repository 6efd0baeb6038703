"""One source per floor (issue 38, item 5): the sample's groups take their floors from the
shipped profile they name, and `gpunode stack check` warns of a group floor looser than it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO, run_cli

from toolkit.acceptance.thresholds import effective
from toolkit.inventory import load_inventory
from toolkit.profile.floors import MEASURED_FLOORS, AcceptanceSpec, looser_floors, shipped_profile

SAMPLE = REPO / "inventories" / "sample"
RULE = "floors.below_profile"


def _group_acceptance(inventory: Path, group: str) -> AcceptanceSpec:
    _stack, hardware = load_inventory(inventory).group_config(group)
    assert hardware.acceptance is not None
    return hardware.acceptance


@pytest.mark.parametrize(
    ("group", "profile"), [("h100_sxm", "h100-sxm-8"), ("l40s_pcie", "l40s-pcie")]
)
def test_the_samples_floors_are_its_profiles(group: str, profile: str) -> None:
    own = _group_acceptance(SAMPLE, group)
    assert own.profile == profile
    # No measured floor is written twice: the group sets none of them (a site's own all-reduce
    # floor at a size the profile has none for is its own, not a copy).
    assert not set(MEASURED_FLOORS) & own.model_fields_set
    shipped = shipped_profile(profile).acceptance
    in_force = effective(own)
    assert in_force.min_gemm_tflops == shipped.min_gemm_tflops
    assert in_force.min_mem_bw_gbps == shipped.min_mem_bw_gbps
    assert in_force.min_h2d_gbps == shipped.min_h2d_gbps
    assert looser_floors(own) == []


def test_the_h100_samples_gemm_and_memory_floors_are_in_force() -> None:
    in_force = effective(_group_acceptance(SAMPLE, "h100_sxm"))
    assert in_force.min_gemm_tflops == pytest.approx(0.75 * 783.66, abs=1e-3)
    assert in_force.min_mem_bw_gbps == 2175  # 0.75 x 2900, not DCGM's 1905
    assert [(f.size, f.min_busbw_gbps) for f in in_force.allreduce] == [("16GiB", 434.745)]


def _sample_with(tmp_path: Path, **floors: Any) -> Path:
    """A copy of the sample whose H100 group sets ``floors`` beside its profile."""
    inventory = tmp_path / "inv"
    shutil.copytree(SAMPLE, inventory)
    path = inventory / "group_vars" / "h100_sxm" / "hardware.yml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["hardware"]["acceptance"].update(floors)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return inventory


def _floor_warnings(capsys: pytest.CaptureFixture[str], inventory: Path) -> list[dict[str, str]]:
    code, out, err = run_cli(capsys, "stack", "check", str(inventory), "--json")
    assert code == 0, out + err
    report = json.loads(out)
    return [
        v for group in report["groups"].values() for v in group["violations"] if v["rule"] == RULE
    ]


def test_a_lower_memory_floor_is_a_warning_naming_both_values_and_the_source(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = _sample_with(tmp_path, min_mem_bw_gbps=1905)
    (warning,) = _floor_warnings(capsys, inventory)
    assert warning["severity"] == "warning"
    message = warning["message"]
    for part in ("group h100_sxm", "min_mem_bw_gbps 1905", "h100-sxm-8's 2175", "BabelStream"):
        assert part in message, message
    # The human form says it too, and still exits 0.
    code, out, _err = run_cli(capsys, "stack", "check", str(inventory))
    assert code == 0 and RULE in out and "coherent" in out


def test_higher_floors_are_no_warning(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    inventory = _sample_with(
        tmp_path,
        min_mem_bw_gbps=2500,
        min_gemm_tflops=600,
        allreduce=[{"size": "16GiB", "min_busbw_gbps": 460}],
    )
    assert _floor_warnings(capsys, inventory) == []


def test_a_dropped_floor_or_a_looser_ceiling_is_looser() -> None:
    spec = AcceptanceSpec.model_validate(
        {
            "profile": "h100-sxm-8",
            "allreduce": [{"size": "8GiB", "min_busbw_gbps": 500}],
            "min_h2d_gbps": None,
            "max_read_p99_ms": 20,
            "pcie_gen": 4,
        }
    )
    found = {loose.key: (loose.own, loose.profile_value) for loose in looser_floors(spec)}
    assert found == {
        "allreduce 16GiB": (None, 434.745),
        "min_h2d_gbps": (None, 45.9),
        "max_read_p99_ms": (20, 10),
        "pcie_gen": (4, 5),
    }
    assert looser_floors(AcceptanceSpec(min_mem_bw_gbps=1)) == []  # no profile: nothing to compare
