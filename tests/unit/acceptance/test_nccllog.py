"""NCCL's debug log read into the transports a run used, and the profile's transport rules.

Real public logs (tests/data/real/nccl-logs, sources in tests/data/real/SOURCES.md): one over
InfiniBand with GPUDirect RDMA, two that fell back to sockets, two with NVLS.
"""

from __future__ import annotations

import copy
import json
import stat
import time
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st
from shared_fixtures import REPO
from shared_fixtures import run_cli as gpunode

from toolkit.acceptance import nccllog
from toolkit.acceptance.multinode import run_multi_node
from toolkit.acceptance.nccltests import parse_text
from toolkit.acceptance.node_runner.collective import (
    free_port,
    launch_ranks,
    nccl_debug_env,
    run_nccl_tests,
)
from toolkit.acceptance.perf_checks import transport_checks
from toolkit.acceptance.verdict import judge
from toolkit.lab.inventory import lab_profile
from toolkit.profile.floors import AcceptanceSpec, TransportSpec, shipped_profile
from toolkit.report import render_html, render_junit
from unit.acceptance.test_verdict import EXPECT, SPEC, healthy
from unit.core.test_hostile_input import strict_json
from unit.core.test_properties import configured

REAL = REPO / "tests" / "data" / "real"
LOGS = REAL / "nccl-logs"


def log(name: str) -> str:
    return (LOGS / name).read_text()


# file -> what the summary must say (keys of NcclTransport.to_dict()).
CASES: dict[str, dict[str, Any]] = {
    "ib-gdrdma-a100-nccl-707.log": {
        "network_kind": "ib",
        "gpudirect_rdma": True,
        "connections": {
            "NET/IB/0/GDRDMA": 2,
            "NET/IB/2/GDRDMA": 5,
            "NET/IB/4/GDRDMA": 2,
            "NET/IB/5/GDRDMA": 3,
        },
        "channels": 2,
        "local_transports": {},
    },
    "efa-gdrdma-aws-ofi-nccl-715.log": {
        "network_kind": "other",
        "gpudirect_rdma": True,
        "connections": {
            "NET/AWS Libfabric/0/GDRDMA/Shared": 1,
            "NET/AWS Libfabric/1(2)/GDRDMA/Shared": 1,
            "NET/AWS Libfabric/1/GDRDMA/Shared": 2,
            "NET/AWS Libfabric/2(4)/GDRDMA/Shared": 2,
        },
        "channels": 2,
    },
    "socket-fallback-nccl-1232.log": {
        "network_kind": "socket",
        "gpudirect_rdma": False,
        "connections": {"NET/Socket/0": 9, "SHM/direct/direct": 2},
        "local_transports": {"SHM/direct": 2},
        "nvls_channels": 0,
        "channel_counts": {"coll": 2, "nvls": 0, "p2p": 2},
    },
    "socket-lo-nccl-1053.log": {
        "network": "Socket",
        "network_kind": "socket",
        "net_devices": ["lo:127.0.0.1<0>"],
        "gpudirect_rdma": False,
        "connections": {},
    },
    "nvls-h100-8gpu-nccl-1584.log": {
        "version": "2.24.3",
        "cuda": "12.2",
        "network": "IBext_v8",
        "network_kind": "ib",
        "net_devices": [f"ibp{i}:1/IB/SHARP" for i in range(8)],
        "gpudirect_rdma": None,
        "nvls_multicast": True,
    },
    # Multi-node logs on the real fabrics (acceptance/test_transport_fabric.py judges them).
    "ib-roce-devices-a100-nccl-707.log": {
        "version": "2.7.6",
        "network": "IB",
        "fabric": "infiniband",
        "link_layers": ["IB"],
        "gpudirect_rdma": True,
    },
    "ib-no-gdrdma-nv-peer-memory-56.log": {
        "fabric": "ib",
        "connections": {"NET/IB/0": 4, "P2P/IPC": 6},
        "gpudirect_rdma": False,
        "gdr_disabled": [
            "GPU 2[2] / HCA 0 (distance 3 >= 2)",
            "GPU 3[3] / HCA 0 (distance 3 >= 2)",
        ],
    },
    "roce-gdrdma-ibext-deepep-106.log": {
        "network": "IBext",
        "fabric": "roce",
        "link_layers": ["RoCE"],
        "gpudirect_rdma": True,
        "channels": 6,
    },
    "roce-no-gdrdma-nccl-392.log": {
        "version": "2.5.7",
        "fabric": "roce",
        "ib_devices": {"0": "mlx5_0:1/RoCE"},
        "connections": {
            "NET/IB/0": 2,
            "P2P/IPC": 2,
            "direct shared memory": 1,
        },
        "gpudirect_rdma": False,
    },
    "efa-ofi-1.9.1-socket-fallback-aws-k8s-tester-454.log": {
        "ofi_plugin_version": "1.9.1-aws",
        "fabric": "tcp",
        "network_kind": "socket",
        "gpudirect_rdma": False,
    },
    "nvls-p2p-cumem-8gpu-nccl-1538.log": {
        "network_kind": None,
        "gpudirect_rdma": None,
        "nvls_multicast": True,
        "local_transports": {"P2P/CUMEM": 11},
        "channels": 11,
    },
}


def test_every_real_log_is_a_case() -> None:
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_logs_parse(name: str) -> None:
    summary = nccllog.parse_log(log(name)).to_dict()
    for key, value in CASES[name].items():
        assert summary[key] == value, key
    assert summary["lines"] > 0


def test_version_ranks_and_init_complete() -> None:
    text = (
        "NCCL version 2.21.5+cuda12.4\n"
        "n1:1:1 [0] NCCL INFO comm 0x55 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 "
        "MNNVL 0\n"
        "n1:1:1 [0] NCCL INFO 32 coll channels, 32 collnet channels, 16 nvls channels, "
        "32 p2p channels, 32 p2p channels per peer\n"
        "n1:1:1 [0] NCCL INFO ncclCommInitRank comm 0x55 rank 0 nranks 16 cudaDev 0 nvmlDev 0 "
        "busId 7000 commId 0x49 - Init COMPLETE\n"
    )
    s = nccllog.parse_log(text)
    assert (s.version, s.cuda, s.ranks, s.nodes, s.init_complete) == ("2.21.5", "12.4", 16, 2, 1)
    assert (s.nvls_channels, s.collnet_channels) == (16, 32)
    assert s.channel_counts == {"coll": 32, "collnet": 32, "nvls": 16, "p2p": 32}


def test_plugin_names_with_spaces_and_hostile_lines() -> None:
    s = nccllog.parse_log("h:1:2 [0] NCCL INFO Using network AWS Libfabric\n")
    assert s.network == "AWS Libfabric" and s.network_kind == "other"
    # A 4 MiB line of repeated fragments is read in bounded time (cut at MAX_LINE_CHARS).
    hostile = "h:1:2 [0] NCCL INFO " + "nranks 1 " * (1 << 19)
    start = time.monotonic()
    assert nccllog.parse_log(hostile).init_complete == 0
    assert time.monotonic() - start < 2


def test_one_plain_network_connection_means_no_gpudirect_rdma() -> None:
    # The HPC-X IB plugin without GDRDMA (github.com/NVIDIA/nccl/issues/1814's lines).
    lines = log("ib-gdrdma-a100-nccl-707.log") + (
        "hostname-test:986:1254 [6] NCCL INFO Channel 00/0 : 6[6] -> 38[6] [receive] "
        "via NET/IBext_v8/1\n"
    )
    s = nccllog.parse_log(lines)
    assert s.network_kind == "ib" and s.gpudirect_rdma is False
    finding = nccllog.judge(s, TransportSpec(gpudirect_rdma="required"))[0]
    assert finding.ok is False and "NET/IBext_v8/1" in finding.message


def test_text_without_an_nccl_log_finds_nothing() -> None:
    nccl_tests = (REAL / "nccl-tests" / "h100_16gpu_2node_p5_efa_srun_prefix.txt").read_text()
    assert not nccllog.parse_log(nccl_tests).found
    assert nccllog.read_section({"engine": "torch-gloo", "rows": []}) is None
    assert nccllog.read_section(None) is None


def test_the_log_inside_an_nccl_tests_capture_is_read() -> None:
    text = (
        "n1:9:9 [0] NCCL INFO Using network IB\n"
        "n1:9:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
        + (REAL / "nccl-tests" / "h100_8gpu_nvswitch_single_node_p5_mpirun_prefix.txt").read_text()
    )
    # The one row grammar still reads the rows with the log lines in front of them.
    assert parse_text(text).rows
    summary = nccllog.read_section({"engine": "nccl-tests", "raw_output": text})
    assert summary is not None
    assert summary.network_kind == "ib" and summary.local_transports == {"P2P/IPC": 1}


H100 = shipped_profile("h100-sxm-8").acceptance.transport


def _spec(transport: Any) -> AcceptanceSpec:
    return AcceptanceSpec.model_validate({**SPEC.model_dump(), "transport": transport})


def _with_log(text: str) -> dict[str, Any]:
    result = healthy()
    result["allreduce"] = {**result["allreduce"], "engine": "torch-nccl", "nccl_log": text}
    return result


def test_shipped_h100_and_h200_profiles_require_gpudirect_rdma_and_the_lab_does_not() -> None:
    assert H100 is not None and H100.gpudirect_rdma == "required" and H100.nvls == "required"
    h200 = shipped_profile("h200-sxm-8").acceptance.transport
    assert h200 is not None and h200.gpudirect_rdma == "required"
    lab = lab_profile().acceptance.transport
    # The lab declares its fabric (TCP) and nothing a single node's run is held to.
    assert lab is not None and lab.fabric == "tcp" and not lab.has_node_rules


@pytest.mark.parametrize("name", ["socket-fallback-nccl-1232.log", "socket-lo-nccl-1053.log"])
def test_socket_fallback_fails_the_gpudirect_rdma_profile(name: str) -> None:
    verdict = judge(_with_log(log(name)), EXPECT, _spec(H100.model_dump()))
    assert not verdict.ready
    failed = {c.name: c for c in verdict.failed}
    check = failed["allreduce.transport.gpudirect_rdma"]
    assert "GPUDirect RDMA required, not used: connections via" in check.message
    assert "Socket" in check.message
    assert "profile rule transport.gpudirect_rdma: required" in check.message
    assert check.measured is False and check.floor == "required"
    # Only the transport rules failed: the rest of the healthy node still passes.
    assert all(c.startswith("allreduce.transport.") for c in failed)


def test_ib_with_gpudirect_rdma_passes_and_shows_the_summary() -> None:
    rules = {"network": "ib", "gpudirect_rdma": "required"}
    verdict = judge(_with_log(log("ib-gdrdma-a100-nccl-707.log")), EXPECT, _spec(rules))
    assert verdict.ready, verdict.reasons()
    checks = {c.name: c for c in verdict.checks if c.name.startswith("allreduce.transport")}
    assert set(checks) == {
        "allreduce.transport",
        "allreduce.transport.network",
        "allreduce.transport.gpudirect_rdma",
    }
    assert checks["allreduce.transport"].measured["gpudirect_rdma"] is True
    assert "network ib" in checks["allreduce.transport.network"].message


def test_efa_with_gpudirect_rdma_passes_the_shipped_h100_rules() -> None:
    # aws-ofi-nccl names its transport with a space ("AWS Libfabric"): the whole of it counts.
    result = _with_log(log("efa-gdrdma-aws-ofi-nccl-715.log"))
    verdict = judge(result, EXPECT, _spec(H100.model_dump()))
    assert verdict.ready, verdict.reasons()
    check = next(c for c in verdict.checks if c.name == "allreduce.transport.gpudirect_rdma")
    assert check.message.startswith("GPUDirect RDMA on every network connection (6)")


def test_network_rule_names_the_measured_transport() -> None:
    verdict = judge(_with_log(log("socket-lo-nccl-1053.log")), EXPECT, _spec({"network": "ib"}))
    check = next(c for c in verdict.failed if c.name == "allreduce.transport.network")
    assert check.message.startswith("network socket (Socket) != profile ib")


def test_nvls_rule() -> None:
    rules = {"nvls": "required"}
    ok = judge(_with_log(log("nvls-p2p-cumem-8gpu-nccl-1538.log")), EXPECT, _spec(rules))
    assert ok.ready, ok.reasons()
    bad = judge(_with_log(log("socket-fallback-nccl-1232.log")), EXPECT, _spec(rules))
    assert [c.message for c in bad.failed] == [
        "NVLS required, not used: 0 NVLS channels (profile rule transport.nvls: required)"
    ]


def test_a_single_node_log_does_not_judge_gpudirect_rdma() -> None:
    verdict = judge(
        _with_log(log("nvls-h100-8gpu-nccl-1584.log")), EXPECT, _spec(H100.model_dump())
    )
    assert verdict.ready, verdict.reasons()
    check = next(c for c in verdict.checks if c.name == "allreduce.transport.gpudirect_rdma")
    assert check.message.startswith("not judged: no connection crossed the network")


def test_a_run_without_a_log_is_not_judged() -> None:
    # The lab: gloo on CPU ranks prints no NCCL log.
    verdict = judge(healthy(), EXPECT, _spec(H100.model_dump()))
    assert verdict.ready
    check = next(c for c in verdict.checks if c.name == "allreduce.transport")
    assert check.ok and check.message == "not judged: the all-reduce (torch-gloo) left no NCCL log"
    # No rules and no log: no check at all; a log without rules is shown.
    assert not transport_checks(healthy()["allreduce"], None)
    shown = transport_checks(_with_log(log("socket-lo-nccl-1053.log"))["allreduce"], None)
    assert [c.ok for c in shown] == [True] and "(shown, not judged)" in shown[0].message


def test_transport_spec_rejects_unknown_values() -> None:
    with pytest.raises(ValueError, match="gpudirect_rdma"):
        _spec({"gpudirect_rdma": "yes"})
    with pytest.raises(ValueError, match="netwrok"):
        _spec({"netwrok": "ib"})


def test_multi_node_socket_fallback_fails_the_pair() -> None:
    section = copy.deepcopy(_with_log(log("socket-fallback-nccl-1232.log"))["allreduce"])

    def run_set(names: Any, p2p: bool) -> dict[str, Any]:
        return copy.deepcopy(section)

    report = run_multi_node(["a", "b"], [], run_set, None, H100)
    assert report.ring is not None and not report.ring.ok
    for host in ("a", "b"):
        names = [c.name for c in report.blame[host]]
        assert "multinode.transport.gpudirect_rdma" in names


def test_runner_asks_nccl_for_its_log_and_keeps_a_sites_own_setting() -> None:
    assert nccl_debug_env({"PATH": "/bin"}) == {"PATH": "/bin", "NCCL_DEBUG": "INFO"}
    assert nccl_debug_env({"NCCL_DEBUG": "WARN"})["NCCL_DEBUG"] == "WARN"


def test_all_reduce_perf_runs_with_the_nccl_log_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # all_reduce_perf needs a GPU: a stand-in prints the debug level it was given as NCCL does.
    binary = tmp_path / "all_reduce_perf"
    binary.write_text(
        '#!/bin/sh\necho "n1:1:1 [0] NCCL INFO NCCL_DEBUG was $NCCL_DEBUG"\n'
        'echo "n1:1:1 [0] NCCL INFO Using network Socket"\n'
    )
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.delenv("NCCL_DEBUG", raising=False)
    section = run_nccl_tests(str(binary), 8, [1 << 20], 1, 1, 2, 30)
    assert "NCCL_DEBUG was INFO" in section["raw_output"]
    summary = nccllog.read_section(section)
    assert summary is not None and summary.network_kind == "socket"


LOG_WORDS = st.sampled_from(
    [
        "NCCL INFO ",
        "Channel ",
        "Ring ",
        "00/0 : ",
        "0[0] -> 1[1] ",
        "[send] ",
        "via ",
        "NET/IB/0/GDRDMA",
        "NET/Socket/0",
        "P2P/IPC",
        "Using network ",
        "NET/Socket : Using [0]",
        "NVLS multicast support is available on dev ",
        "coll channels, ",
        " nvls channels",
        "nRanks 8 nNodes 1",
        "nranks 99999999999 - Init COMPLETE",
        "NCCL version 2.",
        "host:1:2 [0] ",
        "[1,0]<stdout>:",
        "\x00",
        "\u2028",
        "\r",
    ]
)


@configured
@given(
    st.lists(
        st.one_of(st.text(max_size=80), st.lists(LOG_WORDS, max_size=8).map("".join)),
        max_size=30,
    )
)
def test_random_lines_never_crash_the_parser(lines: list[str]) -> None:
    summary = nccllog.parse_log("\n".join(lines))
    doc = summary.to_dict()
    assert doc["lines"] >= 0 and isinstance(summary.describe(), str)
    for rules in (
        TransportSpec(network="ib", gpudirect_rdma="required", nvls="required"),
        TransportSpec(network="socket"),
    ):
        for finding in nccllog.judge(summary, rules):
            assert finding.ok in (True, False, None) and finding.message


def test_accept_parse_shows_the_transport_of_a_capture_with_a_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "capture.txt"
    capture.write_text(
        log("socket-fallback-nccl-1232.log")
        + (REAL / "nccl-tests" / "h100_8gpu_nvswitch_single_node_p5_mpirun_prefix.txt").read_text()
    )
    args = ("accept", "parse", str(capture), "--allow-truncated")
    code, out, _err = gpunode(capsys, *args, "--json")
    transport = strict_json(out)["transport"]
    assert code == 0 and transport["network_kind"] == "socket"
    assert transport["gpudirect_rdma"] is False
    code, out, _err = gpunode(capsys, *args)
    assert "transport (NCCL log): network socket (NET/Socket/0); GPUDirect RDMA not used" in out
    # A capture without NCCL log lines has no transport.
    plain = REAL / "nccl-tests" / "h100_16gpu_2node_p5_efa_srun_prefix.txt"
    code, out, _err = gpunode(capsys, "accept", "parse", str(plain), "--json", "--allow-truncated")
    assert strict_json(out)["transport"] is None


def _report_summary(check: dict[str, Any], transport: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": "20261203T060000Z-abc123",
        "inventory": "inventories/site",
        "started": "2026-12-03T06:00:00+00:00",
        "finished": "2026-12-03T06:01:00+00:00",
        "multi_node": True,
        "multinode": None,
        "nodes": [
            {
                "host": "gpu-7",
                "group": "h100",
                "verdict": "not-ready",
                "stack_id": "abcdef012345",
                "installed_stack_id": "abcdef012345",
                "checks": [check],
                "failed_checks": [
                    {k: check[k] for k in ("message", "measured", "floor")}
                    | {"check": check["name"]}
                ],
                "allreduce_rows": [],
                "busbw_at_largest_gbps": None,
                "floors": [],
                "transport": transport,
            }
        ],
    }


def test_the_transport_reaches_run_json_junit_and_the_html_report() -> None:
    result = _with_log(log("socket-fallback-nccl-1232.log"))
    verdict = judge(result, EXPECT, _spec(H100.model_dump()))
    check = next(c for c in verdict.failed if c.name.endswith("gpudirect_rdma")).to_dict()
    summary = nccllog.read_section(result["allreduce"])
    assert summary is not None
    data = _report_summary(check, summary.to_dict())
    assert json.loads(json.dumps(data))["nodes"][0]["transport"]["network_kind"] == "socket"
    root = ET.fromstring(render_junit(data))
    failure = root.find(".//testcase[@name='allreduce.transport.gpudirect_rdma']/failure")
    assert failure is not None
    assert "connections via NET/Socket/0" in failure.get("message", "")
    assert "measured: no; floor: required" in (failure.text or "")
    html = render_html(data)
    assert "<h2>Transport (NCCL log)</h2>" in html
    assert "<td>socket (NET/Socket/0)</td>" in html
    assert "allreduce.transport.gpudirect_rdma: GPUDirect RDMA required, not used" in html


def test_cpu_ranks_over_gloo_leave_no_log_and_are_not_judged(tmp_path: Path) -> None:
    # The lab's all-reduce, for real: two CPU ranks over gloo on this machine.
    port = free_port()
    out = str(tmp_path / "out.json")
    section = launch_ranks(1, 0, 2, "127.0.0.1", port, [1 << 16], 2, 1, "cpu", 120, out)
    assert section["error"] is None and section["engine"] == "torch-gloo"
    assert "nccl_log" not in section and nccllog.read_section(section) is None
    checks = transport_checks(section, H100)
    assert [(c.ok, c.message) for c in checks] == [
        (True, "not judged: the all-reduce (torch-gloo) left no NCCL log")
    ]
    assert nccllog.read_section({"engine": "nccl-tests", "raw_output": ["not", "text"]}) is None
    assert nccllog.read_section(["not", "a", "section"]) is None  # type: ignore[arg-type]
