"""The node passport over built run histories: real run folders (``toolkit.records.runs``) holding
acceptance records and passive-check records in the shapes their writers give, the GPUs'
identities from the lab's hardware model (its `swapped-gpu` fault is a repair)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import run_cli

from toolkit.errors import ConfigError
from toolkit.lab.hardware import NodeHardware
from toolkit.records import runs
from toolkit.records.passport import OBSERVATIONS, fleet_observations, passport

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _gpus(hw: NodeHardware, rows: dict[int, int] | None = None) -> list[dict[str, Any]]:
    return [
        {
            "index": g.index,
            "bus_id": g.pci_bus_id,
            "serial": g.serial,
            "uuid": g.uuid,
            "remapped_rows": {
                "correctable": (rows or {}).get(g.index, 0),
                "uncorrectable": 0,
                "pending": False,
                "failure": False,
            },
        }
        for g in hw.gpus
    ]


def _identity(hw: NodeHardware) -> dict[str, Any]:
    return {
        "dmi": {"product_serial": hw.system.product_serial, "board_serial": hw.system.board_serial},
        "nics": [{"name": "eth0", "mac": "02:42:ac:11:00:02", "physical": True}],
        "lsblk": {"blockdevices": [{"name": "nvme0n1", "type": "disk", "serial": "S1"}]},
    }


class History:
    """A runs folder written run after run, an hour apart."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hour = 0

    def _folder(self, kind: str) -> Path:
        self.hour += 1
        path = self.root / runs.new_run_id(kind, T0 + timedelta(hours=self.hour))
        (path / "nodes").mkdir(parents=True)
        return path

    def accept(self, nodes: dict[str, dict[str, Any]]) -> str:
        """One acceptance run; per host: hw, busbw, rows, failed (messages), p99, gemm."""
        path = self._folder("accept")
        summaries = []
        for host, n in nodes.items():
            failed = [{"check": "health.ecc", "message": m} for m in n.get("failed", [])]
            summaries.append(
                {
                    "host": host,
                    "group": n.get("group", "h100"),
                    "verdict": "not-ready" if failed else "ready",
                    "busbw_at_largest_gbps": n.get("busbw", 400.0),
                    "checks": [],
                    "failed_checks": failed,
                    "allreduce_rows": [],
                    "training": {"reads": {"p99_ms": n.get("p99", 2.0)}},
                }
            )
            result = {
                "gpus": {"ok": True, "list": _gpus(n["hw"], n.get("rows"))},
                "identity": _identity(n["hw"]),
                "gpu_perf": {"gemm": [{"gpu": 0, "tflops": n.get("gemm", 700.0)}]},
            }
            (path / "nodes" / f"{host}.result.json").write_text(json.dumps(result))
        record = {"run_id": path.name, "started": f"{path.name[:15]}", "nodes": summaries}
        (path / "run.json").write_text(json.dumps(record))
        return path.name

    def check(
        self,
        host: str,
        hw: NodeHardware,
        rows: dict[int, int] | None = None,
        failed: tuple[str, ...] = (),
    ) -> str:
        path = self._folder("check")
        facts = {"gpus": _gpus(hw, rows), "identity": _identity(hw), "aer": {}, "xids": []}
        checks = [{"name": "health.ecc", "ok": False, "message": m} for m in failed]
        node = {"ok": not failed, "error": None, "checks": checks, "facts": facts}
        (path / "check.json").write_text(json.dumps({"run_id": path.name, "nodes": {host: node}}))
        return path.name


HW = NodeHardware.for_node("H100", 8, True, seed="pp", index=1)
SWAPPED = NodeHardware.for_node("H100", 8, True, ["swapped-gpu"], seed="pp", index=1)
OTHER = NodeHardware.for_node("H100", 8, True, seed="pp", index=2)


def _flags(runs_dir: Path, host: str, share: float = 0.3) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for flag in passport(host, fleet_observations(runs_dir), share).flags:
        out.setdefault(flag.kind, []).append(flag.message)
    return out


def test_a_steady_node_has_its_history_and_no_flags(tmp_path: Path) -> None:
    h = History(tmp_path)
    for _ in range(6):
        h.accept({"n1": {"hw": HW}, "n2": {"hw": OTHER}})
        h.check("n1", HW)
    card = passport("n1", fleet_observations(tmp_path))
    assert card.flags == []
    assert [o.kind for o in card.observations] == ["accept", "check"] * 6
    first = card.observations[0]
    assert [g["serial"] for g in first.gpus] == [g.serial for g in HW.gpus]
    assert first.system["product_serial"] == HW.system.product_serial
    assert first.figures == {"busbw_gbps": 400.0, "gemm_tflops": 700.0, "storage_p99_ms": 2.0}
    assert first.nics == {"eth0": "02:42:ac:11:00:02"} and first.disks == {"nvme0n1": "S1"}


def test_a_swapped_gpu_is_flagged_with_both_serials(tmp_path: Path) -> None:
    h = History(tmp_path)
    before = h.accept({"n1": {"hw": HW}})
    after = h.check("n1", SWAPPED)
    [message] = _flags(tmp_path, "n1")["gpu-swapped"]
    [old] = [g for g in HW.gpus if g not in SWAPPED.gpus]
    [new] = [g for g in SWAPPED.gpus if g not in HW.gpus]
    assert f"GPU in slot {old.pci_bus_id}: serial {old.serial} ({old.uuid}) in run {before}" in (
        message
    )
    assert f"serial {new.serial} ({new.uuid}) in run {after}" in message


def test_a_failed_gpu_that_comes_back_names_its_serial(tmp_path: Path) -> None:
    h = History(tmp_path)
    [bad] = [g for g in HW.gpus if g not in SWAPPED.gpus]
    why = f"GPU {bad.index} ({bad.pci_bus_id}): ecc.errors.uncorrected.volatile.total = 2"
    failed = h.accept({"n1": {"hw": HW, "failed": [why]}})
    gone = h.accept({"n1": {"hw": SWAPPED}})  # the RMA: another board in the slot
    assert "failed-part-returned" not in _flags(tmp_path, "n1")
    h.accept({"n1": {"hw": HW}})  # the same broken board back
    [message] = _flags(tmp_path, "n1")["failed-part-returned"]
    assert f"GPU serial {bad.serial}" in message
    assert f"failed on n1 in run {failed}, was gone from it in run {gone}" in message
    # A GPU that fails and is never taken out is failing, not returning.
    h2 = History(tmp_path / "other")
    h2.accept({"n1": {"hw": HW, "failed": [why]}})
    h2.accept({"n1": {"hw": HW}})
    assert "failed-part-returned" not in _flags(tmp_path / "other", "n1")


def test_a_part_that_failed_on_another_node_is_named_when_it_turns_up_here(tmp_path: Path) -> None:
    h = History(tmp_path)
    [bad] = [g for g in OTHER.gpus if g.index == 3]
    why = f"XID 79 on {bad.pci_bus_id[4:14].lower()} at 2026-11-01T01:00:00Z"
    h.accept({"n2": {"hw": OTHER, "failed": [why]}})
    h.accept({"n2": {"hw": NodeHardware.for_node("H100", 8, True, seed="repaired", index=2)}})
    # The part, repaired or not, lands in slot 5 of n1.
    gpus = tuple(
        g.model_copy(update={"serial": bad.serial}) if g.index == 5 else g for g in HW.gpus
    )
    h.accept({"n1": {"hw": HW.model_copy(update={"gpus": gpus})}})
    [message] = _flags(tmp_path, "n1")["failed-part-returned"]
    assert f"GPU serial {bad.serial}" in message and "failed on n2" in message


def test_the_labs_failed_swapped_returned_sequence_names_the_serial(tmp_path: Path) -> None:
    """The lab's faults `ecc`, `swapped-gpu`, `returned-gpu`, each read by a check."""
    faults = ("ecc", "swapped-gpu", "returned-gpu")
    lab = {f: NodeHardware.for_node("H100", 8, True, [f], seed="pp", index=1) for f in faults}
    [bad] = [g for g in lab["ecc"].gpus if g.ecc_uncorrected_volatile]
    why = f"GPU {bad.index} ({bad.pci_bus_id}): ecc.errors.uncorrected.volatile.total = 2"
    h = History(tmp_path)
    failed = h.check("n1", lab["ecc"], failed=(why,))
    gone = h.check("n1", lab["swapped-gpu"])
    assert "failed-part-returned" not in _flags(tmp_path, "n1")
    back = h.check("n1", lab["returned-gpu"])
    [flag] = [
        f for f in passport("n1", fleet_observations(tmp_path)).flags
        if f.kind == "failed-part-returned"
    ]  # fmt: skip
    [now] = [g for g in lab["returned-gpu"].gpus if g.serial == bad.serial]
    assert flag.run_id == back
    assert flag.message == (
        f"GPU serial {bad.serial} (now slot {now.pci_bus_id}, UUID {bad.uuid}) failed on n1 "
        f"in run {failed}, was gone from it in run {gone}, and is back"
    )


def test_remaps_rising_over_three_readings_are_flagged(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.accept({"n1": {"hw": HW, "rows": {2: 0}}})
    h.check("n1", HW, {2: 0})  # the same reading twice is one reading
    h.check("n1", HW, {2: 1})
    assert "remaps-rising" not in _flags(tmp_path, "n1")
    h.check("n1", HW, {2: 3})
    [message] = _flags(tmp_path, "n1")["remaps-rising"]
    serial = HW.gpus[2].serial
    assert message.startswith(f"GPU serial {serial}: remapped rows 0 (run ")
    assert " -> 1 (run " in message and " -> 3 (run " in message


@pytest.mark.parametrize(
    ("figure", "values", "latest", "flagged"),
    [
        ("busbw", [400, 410, 395, 405, 400], 280.0, True),  # 30 % below the median 400
        ("busbw", [400, 410, 395, 405, 400], 285.0, False),
        ("gemm", [700, 690, 710], 480.0, True),
        ("p99", [2.0, 2.1, 1.9, 2.0], 2.7, True),  # latency: above is worse
        ("p99", [2.0, 2.1, 1.9, 2.0], 1.0, False),
        ("busbw", [400, 400], 100.0, False),  # fewer than 3 earlier runs: no baseline
    ],
)
def test_a_figure_below_its_own_baseline_is_flagged_even_above_its_floor(
    tmp_path: Path, figure: str, values: list[float], latest: float, flagged: bool
) -> None:
    h = History(tmp_path)
    for value in [*values, latest]:
        h.accept({"n1": {"hw": HW, figure: float(value)}})
    flags = _flags(tmp_path, "n1").get("below-baseline", [])
    assert bool(flags) is flagged, flags
    if flagged and figure == "busbw":
        assert "busbw_gbps 280 GB/s" in flags[0] and "30% below the median 400 GB/s" in flags[0]
        assert "(MAD 5)" in flags[0] and "previous 5 runs" in flags[0]


def test_the_baseline_is_the_last_five_runs(tmp_path: Path) -> None:
    h = History(tmp_path)
    for value in [100, 100, 100, 400, 400, 400, 400, 400, 300]:
        h.accept({"n1": {"hw": HW, "busbw": float(value)}})
    assert "below-baseline" not in _flags(tmp_path, "n1")  # 300 vs 400: 25 %
    assert "below-baseline" in _flags(tmp_path, "n1", share=0.2)


def test_a_figure_below_the_fleets_for_the_same_group_is_flagged(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.accept(
        {
            "n1": {"hw": HW, "busbw": 250.0},
            "n2": {"hw": OTHER, "busbw": 400.0},
            "n3": {"hw": OTHER, "busbw": 410.0},
            "n4": {"hw": OTHER, "busbw": 100.0, "group": "l40s"},
        }
    )
    [message] = _flags(tmp_path, "n1")["below-fleet"]
    assert "busbw_gbps 250 GB/s" in message and "2 other node(s) of group h100" in message
    assert "below-fleet" not in _flags(tmp_path, "n4")  # alone in its group


def test_share_out_of_range_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="between 0 and 1"):
        passport("n1", {}, 1.5)


def test_node_history_cli_json_and_unknown_node(
    tmp_path: Path, monkeypatch: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inv"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  children:\n    gpu:\n      hosts:\n        n1: {ansible_host: 10.0.0.1}\n"
    )
    state = tmp_path / "state"
    h = History(state / "runs")
    h.accept({"n1": {"hw": HW}})
    h.check("n1", SWAPPED)
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(state))
    code, out, err = run_cli(capsys, "node", "history", "n1", "-i", str(inventory), "--json")
    assert code == 0, err
    card = json.loads(out)
    assert [f["kind"] for f in card["flags"]] == ["gpu-swapped"]
    assert len(card["observations"]) == 2
    code, out, err = run_cli(capsys, "node", "history", "n1", "-i", str(inventory))
    assert code == 0 and "gpu-swapped: GPU in slot" in out, err
    code, out, err = run_cli(capsys, "node", "history", "nx", "-i", str(inventory))
    assert code == 2 and "no host 'nx'" in err


def test_one_peer_is_no_fleet(tmp_path: Path) -> None:
    h = History(tmp_path)
    h.accept({"n1": {"hw": HW, "busbw": 100.0}, "n2": {"hw": OTHER, "busbw": 400.0}})
    assert "below-fleet" not in _flags(tmp_path, "n1")


def _busbw(runs_dir: Path, host: str) -> list[float]:
    seen = fleet_observations(runs_dir)[host]
    return [o.figures["busbw_gbps"] for o in seen if o.kind == "accept"]


def test_a_runs_observations_are_read_once_and_again_when_its_files_change(
    tmp_path: Path,
) -> None:
    history = History(tmp_path)
    first = history.accept({"n1": {"hw": HW, "busbw": 400.0}})
    history.check("n1", HW)
    assert _busbw(tmp_path, "n1") == [400.0]
    kept = tmp_path / first / OBSERVATIONS
    data = json.loads(kept.read_text())
    assert data["observations"]["n1"]["figures"]["busbw_gbps"] == 400.0
    assert (tmp_path / runs.list_runs(tmp_path)[1].run_id / OBSERVATIONS).is_file()  # check
    # What was kept is what is read while the run's files are unchanged ...
    data["observations"]["n1"]["figures"]["busbw_gbps"] = 123.0
    kept.write_text(json.dumps(data))
    assert _busbw(tmp_path, "n1") == [123.0]
    # ... and a rewritten record or result is read again (its size or time changed).
    record = tmp_path / first / "run.json"
    text = json.loads(record.read_text())
    text["nodes"][0]["busbw_at_largest_gbps"] = 390.0
    record.write_text(json.dumps(text))
    assert _busbw(tmp_path, "n1") == [390.0]
    result = tmp_path / first / "nodes" / "n1.result.json"
    result.write_text(result.read_text() + " ")
    assert _busbw(tmp_path, "n1") == [390.0]
    inputs = {name: size for name, size, _ in json.loads(kept.read_text())["key"]["inputs"]}
    assert inputs == {"run.json": record.stat().st_size, "n1.result.json": result.stat().st_size}


def test_a_run_folder_that_cannot_keep_its_observations_is_read_each_time(
    tmp_path: Path,
) -> None:
    history = History(tmp_path)
    run_id = history.accept({"n1": {"hw": HW, "busbw": 400.0}})
    (tmp_path / run_id / OBSERVATIONS).mkdir()  # cannot be replaced by a file
    assert _busbw(tmp_path, "n1") == [400.0]
    assert _busbw(tmp_path, "n1") == [400.0]
    assert (tmp_path / run_id / OBSERVATIONS).is_dir()


def test_a_run_cut_short_says_nothing_and_keeps_nothing(tmp_path: Path) -> None:
    history = History(tmp_path)
    run_id = history.accept({"n1": {"hw": HW}})
    (tmp_path / run_id / "run.json").unlink()
    assert fleet_observations(tmp_path) == {}
    assert not (tmp_path / run_id / OBSERVATIONS).exists()
