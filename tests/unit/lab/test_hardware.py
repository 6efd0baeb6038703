"""The lab's emulated GPU hardware (toolkit.lab.hardware)."""

from __future__ import annotations

import json
import re

import pytest

from toolkit.errors import ConfigError
from toolkit.lab.faults import FAULTS
from toolkit.lab.hardware import GPU_MODELS, SCHEMA_VERSION, NodeHardware
from toolkit.stack.matrix import matrix

# (model, nvswitch, name, memory MiB, power W, PCIe gen, max SM clock, NVLinks)
MODELS = [
    ("H100", True, "NVIDIA H100 80GB HBM3", 81559, 700.0, 5, 1980, 18),
    ("H200", True, "NVIDIA H200", 143771, 700.0, 5, 1980, 18),
    ("A100", True, "NVIDIA A100-SXM4-80GB", 81920, 400.0, 4, 1410, 12),
    ("L40S", False, "NVIDIA L40S", 46068, 350.0, 4, 2520, 0),
]


@pytest.mark.parametrize(
    ("model", "nvswitch", "name", "mem", "power", "gen", "sm", "links"), MODELS
)
def test_models_report_their_datasheet_values(
    model: str,
    nvswitch: bool,
    name: str,
    mem: int,
    power: float,
    gen: int,
    sm: int,
    links: int,
) -> None:
    hw = NodeHardware.for_node(model, 8, nvswitch, seed="s", index=0)
    assert len(hw.gpus) == 8
    assert hw.nvswitch is nvswitch
    for gpu in hw.gpus:
        assert gpu.name == name
        assert gpu.memory_total_mib == mem
        assert gpu.power_limit_w == power
        assert gpu.pcie_gen_current == gpu.pcie_gen_max == gen
        assert gpu.pcie_width_current == gpu.pcie_width_max == 16
        assert gpu.clocks_max_sm_mhz == sm
        assert gpu.nvlinks == links
        assert gpu.ecc_uncorrected_volatile == gpu.ecc_uncorrected_aggregate == 0
        assert not gpu.remapped_rows_pending
    assert [g.index for g in hw.gpus] == list(range(8))
    for attr in ("uuid", "serial", "pci_bus_id"):
        assert len({getattr(g, attr) for g in hw.gpus}) == 8, attr


def test_every_model_in_the_table_builds() -> None:
    for key, model in GPU_MODELS.items():
        hw = NodeHardware.for_node(key, model.board_gpus, model.nvlinks > 0)
        assert hw.model == key
        assert model.source


def test_h100_bus_ids_are_those_of_an_hgx_board() -> None:
    hw = NodeHardware.for_node("h100", 8, True)  # the model is case-insensitive
    assert [g.pci_bus_id for g in hw.gpus] == [
        "00000000:18:00.0",
        "00000000:2A:00.0",
        "00000000:3A:00.0",
        "00000000:5D:00.0",
        "00000000:9A:00.0",
        "00000000:AB:00.0",
        "00000000:BA:00.0",
        "00000000:DB:00.0",
    ]
    assert [g.numa_node for g in hw.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_identity_is_deterministic_per_lab_and_node() -> None:
    a = NodeHardware.for_node("H100", 8, True, seed="lab1", index=0)
    assert a == NodeHardware.for_node("H100", 8, True, seed="lab1", index=0)
    b = NodeHardware.for_node("H100", 8, True, seed="lab1", index=1)
    c = NodeHardware.for_node("H100", 8, True, seed="lab2", index=0)
    uuids = {g.uuid for hw in (a, b, c) for g in hw.gpus}
    serials = {g.serial for hw in (a, b, c) for g in hw.gpus}
    assert len(uuids) == 24
    assert len(serials) == 24
    assert all(re.fullmatch(r"1[0-9]{12}", s) for s in serials)


def test_json_round_trip_is_exact() -> None:
    hw = NodeHardware.for_node("A100", 4, True, ["ecc", "xid"], seed="x", index=3)
    text = hw.to_json()
    assert text.endswith("\n")
    assert NodeHardware.from_json(text) == hw
    data = json.loads(text)
    assert data["schema_version"] == SCHEMA_VERSION == 8
    assert data["faults"] == ["ecc", "xid"]
    assert data["gpus"][0]["pci_bus_id"] == "00000000:07:00.0"


def test_fault_missing_gpu_leaves_count_minus_one_renumbered() -> None:
    full = NodeHardware.for_node("H100", 8, True, seed="m", index=0)
    hw = NodeHardware.for_node("H100", 8, True, ["missing-gpu"], seed="m", index=0)
    assert len(hw.gpus) == 7
    assert hw.gpu_count_installed == 8
    assert [g.index for g in hw.gpus] == list(range(7))
    assert [g.minor_number for g in hw.gpus] == list(range(7))
    (missing,) = hw.missing_pci_bus_ids
    assert missing not in {g.pci_bus_id for g in hw.gpus}
    assert {g.pci_bus_id for g in full.gpus} == {g.pci_bus_id for g in hw.gpus} | {missing}


def test_fault_ecc_hits_exactly_one_gpu() -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["ecc"], seed="e", index=2)
    bad = [g for g in hw.gpus if g.ecc_uncorrected_volatile]
    assert len(bad) == 1
    gpu = bad[0]
    assert gpu.ecc_uncorrected_aggregate >= gpu.ecc_uncorrected_volatile > 0
    assert gpu.remapped_rows_pending
    assert gpu.remapped_rows_uncorrectable == 1
    assert not gpu.remapped_rows_failure
    assert sum(1 for g in hw.gpus if g.remapped_rows_pending) == 1


def test_fault_remapped_is_history_only() -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["remapped"], seed="r", index=1)
    (gpu,) = [g for g in hw.gpus if g.ecc_uncorrected_aggregate]
    assert gpu.ecc_uncorrected_volatile == 0 and gpu.ecc_uncorrected_aggregate == 2
    assert gpu.remapped_rows_uncorrectable == 1
    assert not gpu.remapped_rows_pending and not gpu.remapped_rows_failure
    assert gpu.recovery_action == "None"


def test_fault_remap_failure_and_xid154() -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["remap-failure", "xid154"], seed="r")
    (failed,) = [g for g in hw.gpus if g.remapped_rows_failure]
    assert failed.remapped_rows_uncorrectable == 8
    (reset,) = [g for g in hw.gpus if g.recovery_action != "None"]
    assert reset.recovery_action == "Reset"
    (event,) = hw.xid_events
    assert (event.fault, event.xid, event.gpu_index) == ("xid154", 154, reset.index)
    assert event.kernel_line.endswith(
        "154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)"
    )
    assert hw.kernel_messages(["xid154"]) == [event.kernel_line]
    assert hw.kernel_messages(["xid"]) == []


@pytest.mark.parametrize(("model", "gen_max"), [("H100", 5), ("H200", 5), ("L40S", 4)])
def test_fault_pcie_downtrains_one_link_to_gen3_x8(model: str, gen_max: int) -> None:
    hw = NodeHardware.for_node(model, 8, False, ["pcie"], seed="p", index=0)
    bad = [g for g in hw.gpus if g.pcie_gen_max != g.pcie_gen_gpu_max]
    assert len(bad) == 1
    # A really degraded link: its maximum itself is Gen3 x8 (the root port caps it).
    assert (bad[0].pcie_gen_max, bad[0].pcie_width_max) == (3, 8)
    assert (bad[0].pcie_gen_current, bad[0].pcie_width_current) == (3, 8)
    assert (bad[0].pcie_gen_gpu_max, bad[0].pcie_gen_host_max) == (gen_max, 3)
    assert all(g.pcie_width_max == 16 for g in hw.gpus if g is not bad[0])
    assert all(g.pcie_gen_idle is None for g in hw.gpus)


def test_fault_pcie_idle_lowers_every_idle_link_only() -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["pcie-idle"], seed="p", index=0)
    assert all(g.pcie_gen_idle == 1 for g in hw.gpus)
    # Under load (`pcie_gen_current`) and at most, every link is whole.
    assert all(
        (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_max) == (5, 5, 16) for g in hw.gpus
    )


def test_fault_old_xid_is_a_separate_kernel_event() -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["old-xid", "xid"], seed="p", index=0)
    assert [e.fault for e in hw.xid_events] == ["old-xid", "xid"]
    assert len(hw.kernel_messages()) == 2
    (old,) = hw.kernel_messages(["old-xid"])
    assert old == hw.xid_events[0].kernel_line and "NVRM: Xid (PCI:" in old


def test_fault_xid_records_a_kernel_line_for_a_present_gpu() -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["xid", "missing-gpu"], seed="x", index=0)
    (event,) = hw.xid_events
    assert event.xid == 119
    assert event.pci_bus_id == hw.gpus[event.gpu_index].pci_bus_id
    bus = event.pci_bus_id[4:14].lower()
    assert re.fullmatch(
        rf"NVRM: Xid \(PCI:{bus}\): 119, pid=\d+, name=\S+, Timeout after 6s of waiting for "
        rf"RPC response from GPU{event.gpu_index} GSP! .*",
        event.kernel_line,
    )
    assert hw.kernel_messages() == [event.kernel_line]


def test_fault_slow_net_is_recorded_but_changes_no_gpu() -> None:
    plain = NodeHardware.for_node("H100", 2, True, seed="n", index=0)
    shaped = NodeHardware.for_node("H100", 2, True, ["slow-net"], seed="n", index=0)
    assert shaped.faults == ("slow-net",)
    assert shaped.gpus == plain.gpus
    assert not shaped.xid_events


def test_fault_swapped_gpu_changes_one_board_serial_and_uuid_only() -> None:
    plain = NodeHardware.for_node("H100", 8, True, seed="n", index=1)
    swapped = NodeHardware.for_node("H100", 8, True, ["swapped-gpu"], seed="n", index=1)
    changed = [
        (a.pci_bus_id, a.serial != b.serial, a.uuid != b.uuid)
        for a, b in zip(plain.gpus, swapped.gpus, strict=True)
        if a != b
    ]
    assert len(changed) == 1 and changed[0][1:] == (True, True)
    for a, b in zip(plain.gpus, swapped.gpus, strict=True):
        assert a.model_dump(exclude={"serial", "uuid"}) == b.model_dump(exclude={"serial", "uuid"})
    assert swapped.system == plain.system


def test_swapped_gpu_replaces_the_board_the_ecc_fault_fails() -> None:
    failing = NodeHardware.for_node("H100", 8, True, ["ecc"], seed="n", index=1)
    swapped = NodeHardware.for_node("H100", 8, True, ["swapped-gpu"], seed="n", index=1)
    [bad] = [g for g in failing.gpus if g.ecc_uncorrected_volatile]
    [new] = [g for g in swapped.gpus if g.pci_bus_id == bad.pci_bus_id]
    assert (new.serial, new.uuid) != (bad.serial, bad.uuid)
    assert bad.serial not in {g.serial for g in swapped.gpus}


def test_returned_gpu_puts_the_failed_board_back_in_another_slot() -> None:
    """`ecc`, `swapped-gpu`, `returned-gpu`: the failed board's serial and UUID are gone, then
    back in another slot with its lifetime history; the replacement stays in its slot."""
    plain = NodeHardware.for_node("H100", 8, True, seed="n", index=1)
    failing = NodeHardware.for_node("H100", 8, True, ["ecc"], seed="n", index=1)
    swapped = NodeHardware.for_node("H100", 8, True, ["swapped-gpu"], seed="n", index=1)
    back = NodeHardware.for_node("H100", 8, True, ["returned-gpu"], seed="n", index=1)
    [bad] = [g for g in failing.gpus if g.ecc_uncorrected_volatile]
    [returned] = [g for g in back.gpus if g.serial == bad.serial]
    assert returned.uuid == bad.uuid and returned.pci_bus_id != bad.pci_bus_id
    # Its InfoROM's history, nothing since the driver loaded, nothing pending: checks pass.
    assert returned.ecc_uncorrected_aggregate == bad.ecc_uncorrected_aggregate
    assert returned.remapped_rows_uncorrectable == 1 and not returned.remapped_rows_pending
    assert returned.ecc_uncorrected_volatile == 0
    [replacement] = [g for g in swapped.gpus if g.pci_bus_id == bad.pci_bus_id]
    [still] = [g for g in back.gpus if g.pci_bus_id == bad.pci_bus_id]
    assert (still.serial, still.uuid) == (replacement.serial, replacement.uuid)
    [moved_out] = [g for g in plain.gpus if g.pci_bus_id == returned.pci_bus_id]
    assert moved_out.serial not in {g.serial for g in back.gpus}
    changed = [a.pci_bus_id for a, b in zip(plain.gpus, back.gpus, strict=True) if a != b]
    assert sorted(changed) == sorted([bad.pci_bus_id, returned.pci_bus_id])


def test_system_identity_is_stable_per_node_and_differs_between_nodes() -> None:
    one = NodeHardware.for_node("H100", 2, True, seed="lab", index=1).system
    assert one == NodeHardware.for_node("H100", 2, True, seed="lab", index=1).system
    other = NodeHardware.for_node("H100", 2, True, seed="lab", index=2).system
    assert one.product_serial != other.product_serial
    assert one.board_serial != other.board_serial


def test_all_faults_together_stay_coherent() -> None:
    hw = NodeHardware.for_node("H200", 8, True, list(FAULTS), seed="all", index=5)
    assert set(hw.faults) == set(FAULTS)
    assert len(hw.gpus) == 7
    assert NodeHardware.from_json(hw.to_json()) == hw


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "V100", "count": 8, "nvswitch": True}, "'V100' is not known; choose one of"),
        ({"model": "H100", "count": 0, "nvswitch": True}, "between 1 and 8, got 0"),
        ({"model": "H100", "count": 9, "nvswitch": True}, "between 1 and 8, got 9"),
        ({"model": "L40S", "count": 4, "nvswitch": True}, "cannot sit on an NVSwitch fabric"),
        (
            {"model": "H100", "count": 8, "nvswitch": True, "faults": ["melted"]},
            "lab fault 'melted' is not known; choose from missing-gpu, ecc",
        ),
        (
            {"model": "H100", "count": 1, "nvswitch": True, "faults": ["missing-gpu"]},
            "'missing-gpu' needs at least 2 GPUs",
        ),
        (
            {
                "model": "H100",
                "count": 2,
                "nvswitch": True,
                "faults": ["missing-gpu", "returned-gpu"],
            },
            "'returned-gpu' needs at least 2 GPUs present",
        ),
    ],
)
def test_bad_requests_are_config_errors_naming_the_rule(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        NodeHardware.for_node(**kwargs)  # type: ignore[arg-type]
    assert message in err.value.message


def test_reading_a_file_with_an_unknown_key_fails() -> None:
    data = json.loads(NodeHardware.for_node("H100", 1, True).to_json())
    data["gpus"][0]["colour"] = "green"
    with pytest.raises(ConfigError, match="colour"):
        NodeHardware.from_json(json.dumps(data))


def test_reading_a_file_with_a_wrong_type_fails() -> None:
    data = json.loads(NodeHardware.for_node("H100", 1, True).to_json())
    data["gpus"][0]["memory_total_mib"] = "81559"
    with pytest.raises(ConfigError, match="memory_total_mib"):
        NodeHardware.from_json(json.dumps(data))


@pytest.mark.parametrize("key", sorted(GPU_MODELS))
def test_emulated_gpu_agrees_with_the_stack_catalog(key: str) -> None:
    """The lab's emulated GPUs are what the compatibility checker knows them to be."""
    from toolkit.stack.catalog import lookup_gpu

    emulated = GPU_MODELS[key]
    known = lookup_gpu(emulated.name)
    assert known is not None, f"{emulated.name!r} is not in toolkit/stack/gpus.yml"
    assert known.model == key
    assert known.compute_capability == emulated.compute_cap
    assert emulated.architecture == matrix().architectures[known.architecture].name


def test_nics_sit_on_the_pcie_switches_of_gpu_pairs() -> None:
    hw = NodeHardware.for_node("H100", 8, True, seed="n", index=0)
    assert [(g.numa_node, g.pcie_switch) for g in hw.gpus] == [
        (0, 0), (0, 0), (0, 1), (0, 1), (1, 2), (1, 2), (1, 3), (1, 3)
    ]  # fmt: skip
    assert [(n.name, n.pcie_switch, n.numa_node) for n in hw.nics] == [
        ("mlx5_0", 0, 0), ("mlx5_1", 1, 0), ("mlx5_2", 2, 1), ("mlx5_3", 3, 1)
    ]  # fmt: skip
    assert hw.topo_sys_pair is None
    # A switch never spans the sockets, whatever the count.
    for count in range(1, 9):
        board = NodeHardware.for_node("L40S", count, False)
        numa = {n.pcie_switch: n.numa_node for n in board.nics}
        assert all(numa[g.pcie_switch] == g.numa_node for g in board.gpus), count


def test_missing_gpu_leaves_its_nic() -> None:
    hw = NodeHardware.for_node("H100", 8, True, ["missing-gpu"], seed="f", index=0)
    assert len(hw.gpus) == 7 and len(hw.nics) == 4


@pytest.mark.parametrize("model", ["H100", "H200", "A100", "L40S"])
def test_fault_topo_picks_two_gpus_of_one_numa_node(model: str) -> None:
    nvswitch = model != "L40S"
    for index in range(4):
        hw = NodeHardware.for_node(model, 8, nvswitch, ["topo"], seed="t", index=index)
        assert hw.topo_sys_pair is not None
        a, b = hw.topo_sys_pair
        assert a < b and hw.gpus[a].numa_node == hw.gpus[b].numa_node


def test_fault_topo_needs_two_gpus_on_one_numa_node() -> None:
    with pytest.raises(ConfigError, match="lab fault 'topo' needs two GPUs on one NUMA node"):
        NodeHardware.for_node("H100", 2, False, ["topo"])
    assert NodeHardware.for_node("H100", 3, False, ["topo"]).topo_sys_pair == (1, 2)


@pytest.mark.parametrize("key", sorted(GPU_MODELS))
def test_the_lab_takes_model_ids_and_memory_from_the_gpu_catalogue(key: str) -> None:
    """One GPU catalogue: what the lab emulates of a board is the board gpus.yml lists."""
    from toolkit.stack.catalog import gpu

    emulated = GPU_MODELS[key]
    (board,) = [b for b in gpu(key).boards if b.name == emulated.name]
    assert emulated.memory_total_mib == board.memory_total_mib
    assert emulated.pci_device_id == f"0x{board.pci_device_id.upper()}10DE"
    hw = NodeHardware.for_node(key, 2, emulated.nvlinks > 0)
    assert {g.memory_total_mib for g in hw.gpus} == {board.memory_total_mib}
