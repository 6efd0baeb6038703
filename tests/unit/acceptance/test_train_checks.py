"""The training-shaped checks: storage under a data loader's read pattern, the checkpoint round
trip (a flipped byte must fail it), the loop's figures and scaling, judged against floors.

Real files in temporary folders; real torch (CPU) in a child Python where a check needs it
(``GPUNODE_TORCH_PYTHON`` or this interpreter), so that this process never imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import TRAINING_CHECKS, healthy_training, torch_python

from toolkit.acceptance import node_runner as nr
from toolkit.acceptance.check import Check
from toolkit.acceptance.node_runner.storage import (
    latency_histogram,
    make_dataset,
    percentile,
    random_reads,
    read_plan,
)
from toolkit.acceptance.node_runner.train import sample_utilisation, scaling_points
from toolkit.acceptance.thresholds import effective
from toolkit.acceptance.train_checks import training_checks
from toolkit.config import validate
from toolkit.errors import ConfigError
from toolkit.lab.inventory import lab_profile
from toolkit.profile.floors import AcceptanceSpec

RUNNER = Path(nr.__file__)
LAB = lab_profile().acceptance


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, None),
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([float(i) for i in range(1, 101)], 99, 99.0),
        ([float(i) for i in range(1, 101)], 100, 100.0),
        ([3.0, 1.0, 2.0], 1, 1.0),
    ],
)
def test_percentile_is_nearest_rank(values: list[float], q: float, expected: float | None) -> None:
    assert percentile(values, q) == expected


def test_latency_histogram_puts_every_value_in_one_bucket() -> None:
    values = [0.05, 0.1, 0.2, 3.0, 9.9, 10.0, 10.1, 2000.0]
    histogram = latency_histogram(values)
    assert sum(b["count"] for b in histogram) == len(values)
    by_bound = {b["le_ms"]: b["count"] for b in histogram}
    assert by_bound[0.1] == 2 and by_bound[0.25] == 1 and by_bound[5.0] == 1
    assert by_bound[10.0] == 2 and by_bound[25.0] == 1 and by_bound[None] == 1
    assert histogram[-1]["le_ms"] is None


def test_read_plan_sizes_and_offsets_are_aligned_and_inside_the_file() -> None:
    plan = read_plan(files=7, file_bytes=1 << 20, reads=500, min_read=4096, max_read=1 << 20)
    assert len(plan) == 500
    sizes = [size for _, _, size in plan]
    assert min(sizes) >= 4096 and max(sizes) <= 1 << 20
    assert all(size % 4096 == 0 and offset % 4096 == 0 for _, offset, size in plan)
    assert all(offset + size <= 1 << 20 and 0 <= index < 7 for index, offset, size in plan)
    # Log-uniform: small and large reads both occur.
    assert min(sizes) < 32 << 10 and max(sizes) > 256 << 10
    assert plan == read_plan(7, 1 << 20, 500, 4096, 1 << 20)  # seeded: the same plan


def test_random_reads_on_real_files(tmp_path: Path) -> None:
    dataset = make_dataset(str(tmp_path / "samples"), files=6, file_bytes=256 << 10)
    assert len(dataset["files"]) == 6 and dataset["write_s"] > 0
    assert all(os.path.getsize(p) == 256 << 10 for p in dataset["files"])
    # Each file differs (its index leads it): no two samples are the same bytes.
    assert len({Path(p).read_bytes()[:8] for p in dataset["files"]}) == 6
    out = random_reads(
        dataset["files"], 256 << 10, reads=40, workers=3, min_read=4096, max_read=1 << 20
    )
    assert out["error"] is None, out
    assert out["cache"] in ("o_direct", "fadvise")
    assert out["max_read_bytes"] == 256 << 10  # capped at the file size
    assert sum(b["count"] for b in out["histogram"]) == 40
    assert 0 < out["p50_ms"] <= out["p99_ms"] <= out["max_ms"]
    assert out["files_per_s"] > 0 and out["bytes"] >= 40 * 4096


def test_random_reads_report_a_missing_file(tmp_path: Path) -> None:
    out = random_reads([str(tmp_path / "gone")], 1 << 20, 4, 2, 4096, 1 << 20)
    assert out["error"] and "gone" in out["error"]


def test_scaling_points() -> None:
    assert scaling_points(1) == [1]
    assert scaling_points(2) == [1, 2]
    assert scaling_points(8) == [1, 2, 4, 8]
    assert scaling_points(6) == [1, 2, 4, 6]


CHECKPOINT_SCRIPT = textwrap.dedent(
    """
    import json, shutil, sys
    sys.path.insert(0, sys.argv[1])
    from toolkit.acceptance.node_runner import storage as nr
    import torch
    path, flipped = sys.argv[2], sys.argv[3]
    written = nr.checkpoint_write(torch, path, 1 << 20)
    shutil.copyfile(path, flipped)
    with open(flipped, "r+b") as handle:  # one byte in the middle: tensor data
        handle.seek(written["bytes"] // 2)
        byte = handle.read(1)
        handle.seek(written["bytes"] // 2)
        handle.write(bytes([byte[0] ^ 0x01]))
    intact = nr.checkpoint_restore(torch, path, written["manifest"])
    corrupt = nr.checkpoint_restore(torch, flipped, written["manifest"])
    print(json.dumps({"written": written, "intact": intact, "corrupt": corrupt}))
    """
)


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory: pytest.TempPathFactory, runner_pyz: Path) -> dict[str, Any]:
    """A checkpoint written and restored with real torch, and a copy with one byte flipped
    between the write and the restore."""
    python = torch_python()
    if python is None:
        pytest.skip("no Python with torch (set GPUNODE_TORCH_PYTHON)")
    folder = tmp_path_factory.mktemp("ckpt")
    script = folder / "roundtrip.py"
    script.write_text(CHECKPOINT_SCRIPT)
    proc = subprocess.run(
        [python, str(script), str(runner_pyz), str(folder / "c.pt"), str(folder / "f.pt")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _with_checkpoint(ckpt: dict[str, Any]) -> dict[str, Any]:
    result = healthy_training()
    result["checkpoint"] = ckpt
    return result


def test_checkpoint_round_trip_is_bit_identical(round_trip: dict[str, Any]) -> None:
    written, intact = round_trip["written"], round_trip["intact"]
    assert written["error"] is None and written["tensors"] == 9
    assert written["bytes"] >= 1 << 20 and written["write_mbps"] > 0
    assert all(len(m["sha256"]) == 64 for m in written["manifest"].values())
    assert intact["identical"] and intact["error"] is None and intact["restore_s"] > 0
    ckpt = {**{k: v for k, v in written.items() if k != "manifest"}, **intact}
    check = _named(training_checks(_with_checkpoint(ckpt), LAB), "checkpoint.roundtrip")
    assert check.ok and "bit-identical" in check.message


def test_a_flipped_byte_fails_the_round_trip(round_trip: dict[str, Any]) -> None:
    written, corrupt = round_trip["written"], round_trip["corrupt"]
    assert not corrupt["identical"]
    # Either the bytes of a tensor differ or the file no longer loads: both are a failure.
    assert corrupt["mismatched"] or corrupt["error"], corrupt
    ckpt = {**{k: v for k, v in written.items() if k != "manifest"}, **corrupt}
    check = _named(training_checks(_with_checkpoint(ckpt), LAB), "checkpoint.roundtrip")
    assert not check.ok
    if corrupt["mismatched"]:
        assert check.measured == corrupt["mismatched"]
        assert "bytes differ" in check.message


# --- verdicts -----------------------------------------------------------------------------


def _named(checks: list[Check], name: str) -> Check:
    return next(c for c in checks if c.name == name)


def test_healthy_training_sections_pass_the_lab_floors() -> None:
    checks = training_checks(healthy_training(), LAB)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert {c.name for c in checks} == TRAINING_CHECKS
    # The lab has no GPU utilisation floor: the check says what it did not judge.
    util = _named(checks, "train.gpu_util")
    assert util.message.startswith("not judged") and util.measured is None


def _set(result: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *keys, last = path.split(".")
    target = result
    for key in keys:
        target = target[key]
    target[last] = value
    return result


@pytest.mark.parametrize(
    ("path", "value", "check", "measured", "unit", "text"),
    [
        ("storage.reads.p99_ms", 205.0, "storage.read_p99", 205.0, "ms", "p99 205 ms > limit 150"),
        ("storage.reads.files_per_s", 35.0, "storage.files_per_s", 35.0, "files/s", "< floor"),
        ("checkpoint.restore_mbps", 8.0, "checkpoint.restore", 8.0, "MB/s", "< floor 30"),
        ("train.loop.data_wait_share", 0.9, "train.data_wait", 0.9, "of step time", "> limit"),
    ],
)
def test_a_slow_figure_fails_with_value_floor_and_unit(
    path: str, value: float, check: str, measured: float, unit: str, text: str
) -> None:
    checks = training_checks(_set(healthy_training(), path, value), LAB)
    failed = [c for c in checks if not c.ok]
    assert [c.name for c in failed] == [check]
    assert failed[0].measured == measured and failed[0].unit == unit
    assert failed[0].floor is not None and text in failed[0].message


def test_scaling_below_its_floor_names_the_point() -> None:
    spec = LAB.model_copy(update={"min_scaling_efficiency": 0.8})
    check = _named(training_checks(healthy_training(), spec), "scaling.efficiency")
    assert not check.ok and check.measured == 0.75 and check.floor == 0.8
    assert "0.75 at 2 ranks" in check.message


def test_gpu_utilisation_floor_needs_a_sample() -> None:
    spec = LAB.model_copy(update={"min_gpu_util_pct": 80})
    check = _named(training_checks(healthy_training(), spec), "train.gpu_util")
    assert not check.ok and check.message.startswith("not measured: CPU ranks")
    result = healthy_training()
    result["train"]["loop"]["gpu_util"] = {
        "measured": True,
        "per_gpu": {"0": 97.0, "1": 41.5},
        "reason": None,
    }
    check = _named(training_checks(result, spec), "train.gpu_util")
    assert (
        not check.ok and "GPU 1 42%" in check.message and check.measured == {"0": 97.0, "1": 41.5}
    )


def test_missing_sections_fail_only_where_floors_ask() -> None:
    assert training_checks({}, AcceptanceSpec()) == []
    failed = training_checks({}, LAB)
    assert [c.name for c in failed] == ["storage.run"] and not failed[0].ok
    result = healthy_training()
    result["train"] = {"error": "rank 1: RuntimeError: boom"}
    checks = training_checks(result, LAB)
    run = _named(checks, "train.run")
    assert not run.ok and "boom" in run.message
    result = healthy_training()
    result["checkpoint"] = {"error": "the checkpoint does not load: RuntimeError: bad zip"}
    check = _named(training_checks(result, LAB), "checkpoint.roundtrip")
    assert not check.ok and "does not load" in check.message


# --- thresholds ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "key", "text"),
    [
        ({"storage_min_read": "2MiB"}, "", "larger than storage_max_read"),
        ({"storage_max_read": "4MiB"}, "", "larger than storage_file_size"),
        ({"storage_min_read": "6000"}, "storage_min_read", "not a multiple of 4KiB"),
        ({"train_sample_size": "2MiB"}, "", "a sample is read from one file"),
        ({"max_data_wait_share": 1.5}, "max_data_wait_share", "less than 1"),
        ({"min_scaling_efficiency": 0}, "min_scaling_efficiency", "greater than 0"),
        ({"checkpoint_size": "lots"}, "checkpoint_size", "is not a size"),
        ({"storage_read_workers": 0}, "storage_read_workers", "greater than or equal to 1"),
        # A p99 over fewer than 100 reads per worker: one stall of every worker decides it.
        (
            {"max_read_p99_ms": 10, "storage_reads": 1599, "storage_read_workers": 16},
            "",
            "storage_reads 1599 is below 100 x storage_read_workers (16)",
        ),
    ],
)
def test_bad_training_settings_are_refused_naming_key_and_rule(
    values: dict[str, Any], key: str, text: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate(AcceptanceSpec, values, "hardware.yml", prefix=("hardware", "acceptance"))
    assert text in err.value.message and f"hardware.acceptance{'.' + key if key else ''}" in (
        err.value.message
    )


def test_a_p99_needs_100_reads_per_worker_and_no_floor_needs_none() -> None:
    """1600 reads by 16 workers may judge a p99; fewer may still measure it, unjudged."""
    ok = {"max_read_p99_ms": 10, "storage_reads": 1600, "storage_read_workers": 16}
    assert validate(AcceptanceSpec, ok, "hardware.yml").storage_reads == 1600
    unjudged = {"storage_reads": 10, "storage_read_workers": 16}
    assert validate(AcceptanceSpec, unjudged, "hardware.yml").max_read_p99_ms is None


def test_every_real_profile_sets_the_training_floors_with_sources() -> None:
    from toolkit.lab.inventory import lab_profile
    from toolkit.profile.floors import shipped_profile

    for name in ("h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "l40s-pcie"):
        profile = shipped_profile(name)
        spec = profile.acceptance
        assert spec.max_read_p99_ms and spec.min_files_per_s and spec.min_scaling_efficiency
        # The GPU-utilisation step has not been measured on these GPUs: shown, not judged.
        assert spec.min_gpu_util_pct is None
        assert any("MLPerf Storage" in s for s in profile.sources)
        # MLPerf Storage's method where its DLIO configs give the GPU's compute time: the
        # data-wait share is 1 - AU, whose floor there is 0.90.
        if spec.train_compute_s is not None:
            assert spec.max_data_wait_share == 0.10
            assert any("computation_time" in s for s in profile.sources)
    lab = lab_profile()
    assert lab.acceptance.min_gpu_util_pct is None  # CPU ranks: nothing to sample
    assert any("slow-data" in s for s in lab.sources)


def test_gpu_utilisation_is_sampled_per_gpu_while_the_loop_runs(tmp_path: Path) -> None:
    """nvidia-smi --query-gpu=index,utilization.gpu --loop-ms: the mean per GPU index."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'echo "$@" > "$(dirname "$0")/argv"\n'
        "while true; do echo '0, 96'; echo '1, 40'; echo '1, [N/A]'; sleep 0.05; done\n"
    )
    smi.chmod(0o755)
    _proc, stop = sample_utilisation(str(smi))
    time.sleep(0.3)
    util = stop()
    assert util["measured"] and util["samples"] >= 2
    assert util["per_gpu"] == {"0": 96.0, "1": 40.0}
    argv = (tmp_path / "argv").read_text()
    assert "--query-gpu=index,utilization.gpu" in argv and "--loop-ms=100" in argv
    missing = sample_utilisation(None)[1]()
    assert missing == {"measured": False, "reason": "nvidia-smi not found", "per_gpu": {}}


# DLIO's computation_time per step for ResNet-50 (github.com/mlcommons/storage,
# configs/dlio/workload/resnet50_h100.yaml and resnet50_a100.yaml; batch 400).
DLIO_RESNET50_S = {"h100-sxm-8": 0.224, "h200-sxm-8": 0.224, "a100-sxm-8": 0.435}


def test_the_gpu_step_is_sized_from_each_profiles_gemm_floor() -> None:
    """Per profile: the storage loop's compute (emulated, from DLIO) and the GPU step (bf16
    GEMMs sized from the GEMM floor in force); its time at the floor is computed, the time it
    takes on the node is measured there (the loop's ``gpu_step.measured_s``)."""
    from toolkit.acceptance.thresholds import GPU_STEP_MIN_S, gpu_step
    from toolkit.profile.floors import shipped_profile

    print("\nprofile       emulated compute/step  GPU step (bf16 GEMMs)   floor TFLOP/s  at floor")
    for name in ("h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "l40s-pcie", "lab"):
        if name == "lab":
            spec = LAB  # the lab's own floors (toolkit/lab/acceptance.yml)
        else:
            spec = effective(AcceptanceSpec(profile=name))
            assert shipped_profile(name) is not None
        assert spec.train_compute_s == DLIO_RESNET50_S.get(name, 0.05 if name == "lab" else None)
        step = gpu_step(spec)
        if spec.min_gemm_tflops is None:
            assert step is None  # the lab's CPU ranks: no floor, no GPU step
            print(f"{name:13} {spec.train_compute_s} s (emulated)      - (no GEMM floor)")
            continue
        assert (
            step is not None and step.gemm_n == 8192 and step.floor_tflops == spec.min_gemm_tflops
        )
        one = 2 * 8192**3 / 1e12 / spec.min_gemm_tflops  # one GEMM's time at the floor
        target = max(GPU_STEP_MIN_S, spec.train_compute_s or 0.0)
        assert target <= step.at_floor_s < target + one
        assert step.at_floor_s == pytest.approx(step.tflop / spec.min_gemm_tflops)
        print(
            f"{name:13} {spec.train_compute_s or '-'!s:>5} s (emulated)     "
            f"{step.gemms:4d} x 8192^3 = {step.tflop:6.1f} TFLOP  {step.floor_tflops:8.1f}"
            f"       {step.at_floor_s * 1000:6.1f} ms (computed)"
        )
    h100 = gpu_step(effective(AcceptanceSpec(profile="h100-sxm-8")))
    assert h100 is not None and h100.gemms == 120  # 0.75 x 783.66 TFLOP/s: 1.87 ms a GEMM
    l40s = gpu_step(effective(AcceptanceSpec(profile="l40s-pcie")))
    assert l40s is not None and l40s.gemms == 10 and l40s.at_floor_s >= 0.05
    assert h100.as_spec() == {"gemm_n": 8192, "gemms": 120, "at_floor_s": h100.at_floor_s}
