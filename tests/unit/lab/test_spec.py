"""The lab's options: sizes, faults, names, serials, NVSwitch derivation."""

from __future__ import annotations

import pytest

from toolkit.errors import ConfigError
from toolkit.lab.spec import (
    LabSpec,
    build_spec,
    by_id_name,
    check_fault,
    disk_serial,
    node_name,
    parse_fault,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2G", 2 * 1024**3),
        ("2g", 2 * 1024**3),
        ("512M", 512 * 1024**2),
        ("1.5GiB", 1536 * 1024**2),
        ("64M", 64 * 1024**2),
        ("1T", 1024**4),
        (" 100MB ", 100 * 1024**2),
    ],
)
def test_parse_size_accepts_binary_units(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("", "expected a number"),
        ("two", "expected a number"),
        ("2X", "expected a number"),
        ("-1G", "expected a number"),
        ("10M", "at least 64M"),
        ("0", "at least 64M"),
    ],
)
def test_parse_size_rejects_bad_sizes(text: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:ecc", (1, "ecc")),
        ("2:slow-net", (2, "slow-net")),
        ("12: xid", (12, "xid")),
        ("3:missing-gpu", (3, "missing-gpu")),
        ("1:pcie", (1, "pcie")),
    ],
)
def test_parse_fault(text: str, expected: tuple[int, str]) -> None:
    assert parse_fault(text) == expected


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("ecc", "expected NODE_INDEX:FAULT"),
        ("x:ecc", "expected NODE_INDEX:FAULT"),
        ("0:ecc", "start at 1"),
        ("1:eec", "did you mean 'ecc'"),
        ("1:slownet", "did you mean 'slow-net'"),
        ("1:", "unknown fault"),
    ],
)
def test_parse_fault_rejects_with_the_rule(text: str, rule: str) -> None:
    with pytest.raises(ConfigError, match=rule):
        parse_fault(text)


def test_check_fault_lists_known_faults() -> None:
    with pytest.raises(
        ConfigError,
        match="missing-gpu, ecc, remapped, remap-failure, xid, old-xid, xid154, pcie, pcie-idle",
    ):
        check_fault("melted")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nodes": 0}, "--nodes: Input should be greater than or equal to 1"),
        ({"nodes": 17}, "--nodes: Input should be less than or equal to 16"),
        ({"gpus": 9}, "--gpus: Input should be less than or equal to 8"),
        ({"gpu_model": "X1"}, "--gpu-model: .*unknown GPU model 'X1'"),
        ({"disks": 9}, "--disks:"),
        ({"name": "Bad_Name"}, "--name: String should match pattern"),
        ({"name": "_cache"}, "--name:"),
        ({"nodes": 2, "faults": ((3, "ecc"),)}, "--fault 3:ecc names node 3.*nodes 1..2"),
        ({"faults": ((1, "boom"),)}, "--fault: .*unknown fault 'boom'"),
        ({"slow_net_rate": "fast"}, "--slow-net-rate:"),
        ({"bogus": 1}, "--bogus: Extra inputs are not permitted"),
    ],
)
def test_build_spec_names_the_option_and_the_rule(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_spec(**options)


def test_spec_defaults_are_the_lab_default_fleet() -> None:
    spec = build_spec()
    assert (spec.name, spec.nodes, spec.gpus, spec.gpu_model) == ("gpunode", 2, 8, "H100")
    assert spec.disks == 2 and spec.disk_size == 2 * 1024**3
    assert spec.has_nvswitch is True


@pytest.mark.parametrize(
    ("model", "gpus", "nvswitch", "expected"),
    [
        ("H100", 8, None, True),
        ("h200", 8, None, True),
        ("A100", 8, None, True),
        ("H100", 4, None, False),
        ("L40S", 8, None, False),
        ("H100", 8, False, False),
        ("H100", 2, True, True),
    ],
)
def test_nvswitch_is_derived_from_model_and_count(
    model: str, gpus: int, nvswitch: bool | None, expected: bool
) -> None:
    assert build_spec(gpu_model=model, gpus=gpus, nvswitch=nvswitch).has_nvswitch is expected


def test_faults_are_sorted_deduplicated_and_per_node() -> None:
    spec = build_spec(nodes=3, faults=((2, "xid"), (1, "ecc"), (2, "ecc"), (2, "xid")))
    assert spec.faults == ((1, "ecc"), (2, "ecc"), (2, "xid"))
    assert spec.node_faults(2) == ("ecc", "xid")
    assert spec.node_faults(3) == ()


def test_shape_leaves_out_what_may_change_on_a_running_lab() -> None:
    a = build_spec(faults=((1, "ecc"),))
    b = build_spec()
    assert a.shape() == b.shape()
    assert build_spec(disks=1).shape() != b.shape()


def test_serials_differ_per_node_disk_and_lab() -> None:
    serials = {disk_serial(lab, n, d) for lab in ("a", "b") for n in (1, 2) for d in (0, 1)}
    assert len(serials) == 8
    serial = disk_serial("gpunode", 2, 1)
    assert serial.startswith("S") and serial.endswith("N02D01")
    assert serial.isalnum()
    assert by_id_name(serial) == f"nvme-LAB_NVMe_SSD_{serial}"


def test_node_names() -> None:
    assert node_name("gpunode", 1) == "gpunode-node-1"


def test_spec_is_immutable() -> None:
    spec = LabSpec()
    with pytest.raises(ValueError):
        spec.nodes = 3  # type: ignore[misc]
