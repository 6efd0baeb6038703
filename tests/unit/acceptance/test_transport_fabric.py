"""The fabric a group declares (``hardware.acceptance.transport.fabric``) held against real
multi-node NCCL logs (tests/data/real/nccl-logs, sources in tests/data/real/SOURCES.md):
InfiniBand, RoCE and EFA pass for groups that declare them, a socket fallback on an RDMA group
fails with the reason, a log without GPUDirect RDMA fails where the profile requires it, the
pinned aws-ofi-nccl version is the one loaded, and a run without a log stays not judged.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance import nccllog
from toolkit.acceptance.multinode import run_multi_node
from toolkit.acceptance.perf_checks import transport_checks
from toolkit.config import validate
from toolkit.errors import ConfigError
from toolkit.profile.floors import TransportSpec
from toolkit.profile.hardware import HardwareProfile

LOGS = REPO / "tests" / "data" / "real" / "nccl-logs"


def _summary(name: str) -> nccllog.NcclTransport:
    return nccllog.parse_log((LOGS / name).read_text())


def _section(name: str) -> dict[str, Any]:
    return {"engine": "torch-nccl", "nccl_log": (LOGS / name).read_text()}


def _findings(name: str, **rules: Any) -> dict[str, nccllog.Finding]:
    found = nccllog.judge(_summary(name), TransportSpec(**rules), across_nodes=True)
    return {f.rule: f for f in found}


# log -> the fabric it shows, judged against each declared fabric.
FABRIC_CASES = [
    ("ib-roce-devices-a100-nccl-707.log", "infiniband"),
    ("ib-gdrdma-a100-nccl-707.log", "infiniband"),
    ("ib-no-gdrdma-nv-peer-memory-56.log", "infiniband"),
    ("roce-gdrdma-ibext-deepep-106.log", "roce"),
    ("roce-no-gdrdma-nccl-392.log", "roce"),
    ("efa-gdrdma-aws-ofi-nccl-715.log", "efa"),
    ("socket-fallback-nccl-1232.log", "tcp"),
    ("efa-ofi-1.9.1-socket-fallback-aws-k8s-tester-454.log", "tcp"),
]


@pytest.mark.parametrize(("name", "fabric"), FABRIC_CASES)
def test_each_real_log_passes_its_own_fabric_only(name: str, fabric: str) -> None:
    for declared in ("infiniband", "roce", "efa", "tcp"):
        finding = _findings(name, fabric=declared)["fabric"]
        if declared == fabric:
            assert finding.ok is True, (declared, finding.message)
        elif {declared, fabric} == {"infiniband", "roce"} and name in (
            "ib-gdrdma-a100-nccl-707.log",
            "ib-no-gdrdma-nv-peer-memory-56.log",
        ):
            # IB verbs whose log names no device: the link layer is taken on trust.
            assert finding.ok is True and "taken on trust" in finding.message
        else:
            assert finding.ok is False, (declared, finding.message)


def test_the_connections_devices_decide_between_infiniband_and_roce() -> None:
    # NCCL lists IB and RoCE devices, the connections use [0], [2], [4], [5]: all InfiniBand.
    summary = _summary("ib-roce-devices-a100-nccl-707.log")
    assert summary.ib_devices[7] == "mlx5_16:1/RoCE" and summary.link_layers == ["IB"]
    roce = _findings("ib-roce-devices-a100-nccl-707.log", fabric="roce")["fabric"]
    assert roce.message.startswith("fabric infiniband (NET/IB/0/GDRDMA")
    assert "on a group that declares roce" in roce.message


@pytest.mark.parametrize(
    ("name", "declared"),
    [
        ("socket-fallback-nccl-1232.log", "infiniband"),
        ("efa-ofi-1.9.1-socket-fallback-aws-k8s-tester-454.log", "efa"),
    ],
)
def test_a_socket_fallback_on_an_rdma_group_fails_with_the_reason(name: str, declared: str) -> None:
    finding = _findings(name, fabric=declared)["fabric"]
    assert finding.ok is False
    assert finding.message.startswith(
        f"NCCL fell back to TCP sockets (NET/Socket/0) on a group that declares {declared}: "
    )
    assert "/dev/infiniband" in finding.message and "IPC_LOCK" in finding.message


@pytest.mark.parametrize(
    ("name", "fabric"),
    [
        ("ib-no-gdrdma-nv-peer-memory-56.log", "infiniband"),
        ("roce-no-gdrdma-nccl-392.log", "roce"),
    ],
)
def test_a_log_without_gdrdma_fails_where_the_profile_requires_it(name: str, fabric: str) -> None:
    found = _findings(name, fabric=fabric, gpudirect_rdma="required")
    assert found["fabric"].ok is True
    assert found["gpudirect_rdma"].ok is False
    assert "GPUDirect RDMA required, not used: connections via NET/IB/0" in (
        found["gpudirect_rdma"].message
    )


def test_nccl_says_why_gpudirect_rdma_is_off() -> None:
    message = _findings("ib-no-gdrdma-nv-peer-memory-56.log", gpudirect_rdma="required")[
        "gpudirect_rdma"
    ].message
    assert message.endswith(
        "; NCCL: GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2); "
        "GPU 3[3] / HCA 0 (distance 3 >= 2)"
    )


@pytest.mark.parametrize(
    "name",
    [
        "ib-roce-devices-a100-nccl-707.log",
        "roce-gdrdma-ibext-deepep-106.log",
        "efa-gdrdma-aws-ofi-nccl-715.log",
    ],
)
def test_rdma_logs_with_gdrdma_pass_their_fabric_and_gpudirect_rdma(name: str) -> None:
    fabric = dict(FABRIC_CASES)[name]
    found = _findings(name, fabric=fabric, gpudirect_rdma="required")
    assert [(f.rule, f.ok) for f in found.values()] == [
        ("fabric", True),
        ("gpudirect_rdma", True),
    ]


def test_the_pinned_ofi_plugin_is_the_one_loaded() -> None:
    name = "efa-ofi-1.9.1-socket-fallback-aws-k8s-tester-454.log"
    assert _summary(name).ofi_plugin_version == "1.9.1-aws"
    for pin in ("1.9.1", "1.9.1-aws"):
        finding = _findings(name, fabric="efa", ofi_plugin_version=pin)["ofi_plugin_version"]
        assert (
            finding.ok is True
            and finding.message == f"aws-ofi-nccl 1.9.1-aws loaded == pinned {pin}"
        )
    other = _findings(name, fabric="efa", ofi_plugin_version="1.14.0")["ofi_plugin_version"]
    assert other.ok is False and other.message == "aws-ofi-nccl 1.9.1-aws loaded != pinned 1.14.0"
    # 1.9.10 is not 1.9.1 with a build tag.
    assert _findings(name, ofi_plugin_version="1.9")["ofi_plugin_version"].ok is False
    # A log that names no version (an excerpt) is not judged; one over sockets fails.
    quiet = _findings("efa-gdrdma-aws-ofi-nccl-715.log", ofi_plugin_version="1.9.1")
    assert quiet["ofi_plugin_version"].ok is None
    sockets = _findings("socket-fallback-nccl-1232.log", ofi_plugin_version="1.9.1")
    assert sockets["ofi_plugin_version"].ok is False


def test_another_libfabric_provider_is_not_efa() -> None:
    summary = _summary("efa-gdrdma-aws-ofi-nccl-715.log")
    summary.ofi_provider = "cxi"
    [finding] = nccllog.judge(summary, TransportSpec(fabric="efa"), across_nodes=True)
    assert summary.fabric == "ofi/cxi" and finding.ok is False
    assert finding.message.startswith("the OFI plugin chose provider cxi, not efa")


def test_fabric_rules_are_held_on_multi_node_runs_only() -> None:
    rules = TransportSpec(fabric="infiniband", ofi_plugin_version="1.9.1")
    section = _section("socket-fallback-nccl-1232.log")
    # One node's all-reduce shows no fabric: shown, not judged.
    [shown] = transport_checks(section, rules)
    assert shown.ok and shown.message.endswith("(shown, not judged)")
    names = {c.name: c.ok for c in transport_checks(section, rules, across_nodes=True)}
    assert names == {
        "allreduce.transport": True,
        "allreduce.transport.fabric": False,
        "allreduce.transport.ofi_plugin_version": False,
    }
    # A single-node log that crossed no network is not judged, even across nodes.
    lone = _findings("nvls-p2p-cumem-8gpu-nccl-1538.log", fabric="infiniband")["fabric"]
    assert lone.ok is None and lone.message == "no connection crossed the network"


def test_the_multi_node_stage_fails_a_socket_fallback_on_an_infiniband_group() -> None:
    section = _section("socket-fallback-nccl-1232.log")

    def run_set(names: Any, p2p: bool) -> dict[str, Any]:
        return copy.deepcopy(section)

    report = run_multi_node(["a", "b"], [], run_set, None, TransportSpec(fabric="infiniband"))
    assert report.ring is not None and not report.ring.ok
    failed = next(c for c in report.blame["a"] if c.name == "multinode.transport.fabric")
    assert "NCCL fell back to TCP sockets" in failed.message
    assert failed.measured == "tcp" and failed.floor == "infiniband"


def test_a_tcp_group_without_a_log_stays_not_judged() -> None:
    # The lab: gloo on CPU ranks prints no NCCL log.
    rules = TransportSpec(fabric="tcp")
    gloo = {"engine": "torch-gloo", "rows": []}
    assert transport_checks(gloo, rules) == []
    [check] = transport_checks(gloo, rules, "multinode", across_nodes=True)
    assert check.ok and check.message.startswith("not judged: ")

    def run_set(names: Any, p2p: bool) -> dict[str, Any]:
        return copy.deepcopy(gloo)

    report = run_multi_node(["a", "b"], [], run_set, None, rules)
    assert report.ring is not None
    [judged] = [c for c in report.ring.checks if c.name.startswith("multinode.transport")]
    assert judged.ok and judged.message.startswith("not judged: ")


def test_the_fabric_is_declared_in_the_hardware_profile() -> None:
    profile = validate(
        HardwareProfile,
        {
            "gpu": {"model": "H100-SXM", "count": 8},
            "acceptance": {"transport": {"fabric": "efa", "ofi_plugin_version": "1.9.1-aws"}},
        },
        "hardware.yml",
    )
    assert profile.acceptance is not None and profile.acceptance.transport is not None
    assert profile.acceptance.transport.fabric == "efa"


@pytest.mark.parametrize(
    ("transport", "expected"),
    [
        ({"fabric": "ethernet"}, "acceptance.transport.fabric"),
        ({"fabrik": "roce"}, "fabrik"),
        ({"ofi_plugin_version": "latest"}, "acceptance.transport.ofi_plugin_version"),
        ({"fabric": "infiniband", "network": "socket"}, "contradicts fabric infiniband"),
    ],
)
def test_bad_fabric_declarations_name_the_key(transport: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        validate(
            HardwareProfile,
            {"gpu": {"model": "H100-SXM", "count": 8}, "acceptance": {"transport": transport}},
            "hardware.yml",
        )
