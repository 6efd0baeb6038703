"""The nccl-tests parser, against public captures and our own variant fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance.nccllog import strip_prefix
from toolkit.acceptance.nccltests import NotNcclTestsOutput, infer_ranks, parse

# Public captures of real runs (tests/data/real/SOURCES.md; each file's first line names it).
CAPTURES = REPO / "tests" / "data" / "real" / "nccl-tests"
DATA = REPO / "tests" / "unit" / "data" / "nccl"

# file -> expected figures, read off the captures by hand.
CAPTURE_CASES: dict[str, dict[str, Any]] = {
    "a100_8gpu_sxm4_nvswitch_single_node_legacy_format.txt": {
        "ranks": 8,
        "ranks_source": "devices",
        "layout": "legacy",
        # 34 rows, two of them size 0: a size measured twice is one row (the worse figures).
        "n_rows": 33,
        "peak_busbw_gbps": 235.26,
        "largest_size_bytes": 8589934592,
        "busbw_at_largest_gbps": 235.03,
        "avg_busbw_reported": 68.4048,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": False,
        "ok": True,
        "row": (4294967296, "out_of_place", 32070.0, 133.92, 234.37, None),
    },
    "h100_16gpu_2node_gcp_a3mega.txt": {
        "ranks": 16,
        "ranks_source": "devices",
        "layout": "current",
        "n_rows": 31,
        "peak_busbw_gbps": 338.82,
        "largest_size_bytes": 8589934592,
        "busbw_at_largest_gbps": 337.35,
        "avg_busbw_reported": 70.742,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": True,
        "ok": True,
        "row": (2147483648, "in_place", 12641.0, 169.88, 318.52, 0),
    },
    "h100_16gpu_2node_p5_efa_srun_prefix.txt": {
        "ranks": 16,
        "ranks_source": "busbw_ratio",
        "layout": "current",
        # An excerpt without its footer: ok only when truncated captures are accepted.
        "truncated": True,
        "n_rows": 32,
        "peak_busbw_gbps": 487.26,
        "largest_size_bytes": 17179869184,
        "busbw_at_largest_gbps": 487.09,
        "avg_busbw_reported": None,
        "out_of_bounds": None,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": True,
        "ok": True,
        "row": (536870912, "out_of_place", 2559.2, 209.78, 393.34, 0),
    },
    "h100_8gpu_nvswitch_single_node_p5_mpirun_prefix.txt": {
        "ranks": 8,
        "ranks_source": "busbw_ratio",
        "layout": "current",
        "n_rows": 32,
        "peak_busbw_gbps": 483.35,
        "largest_size_bytes": 17179869184,
        "busbw_at_largest_gbps": 483.05,
        "avg_busbw_reported": 156.742,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": True,
        "ok": True,
        "row": (8589934592, "in_place", 31294.0, 274.49, 480.36, 0),
    },
    "h100_96rank_multinode_ib_sharp_truncated.txt": {
        "ranks": 96,
        "ranks_source": "busbw_ratio",
        "layout": "current",
        "n_rows": 5,
        "peak_busbw_gbps": 386.56,
        "largest_size_bytes": 8589934592,
        "busbw_at_largest_gbps": 385.56,
        "avg_busbw_reported": 373.187,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": True,
        "ok": True,
        "row": (536870912, "out_of_place", 2984.6, 179.88, 356.01, 0),
    },
    "h200_16gpu_2node_tcp_socket_degraded.txt": {
        "ranks": 16,
        "ranks_source": "devices",
        "layout": "current",
        "n_rows": 32,
        "peak_busbw_gbps": 92.35,
        "largest_size_bytes": 17179869184,
        "busbw_at_largest_gbps": 92.33,
        "avg_busbw_reported": 36.2205,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": "2.27.3",
        "validated": True,
        "ok": True,
        "row": (17179869184, "out_of_place", 348875.0, 49.24, 92.33, 0),
    },
    "h200_2gpu_2node_1nic_rdma_k8s.txt": {
        "ranks": 2,
        "ranks_source": "devices",
        "layout": "current",
        "n_rows": 24,
        "peak_busbw_gbps": 31.89,
        "largest_size_bytes": 8589934592,
        "busbw_at_largest_gbps": 31.88,
        "avg_busbw_reported": 15.5188,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": True,
        "ok": True,
        "row": (1024, "out_of_place", 35.59, 0.03, 0.03, 0),
    },
    "l40s_4gpu_2node_pcie_rdma.txt": {
        "ranks": 4,
        "ranks_source": "devices",
        "layout": "current",
        "n_rows": 31,
        "peak_busbw_gbps": 9.63,
        "largest_size_bytes": 8589934592,
        "busbw_at_largest_gbps": 9.62,
        "avg_busbw_reported": 4.74277,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": "2.27.3",
        "validated": True,
        "ok": True,
        "row": (8589934592, "out_of_place", 1338003.0, 6.42, 9.63, 0),
    },
}

OWN_CASES: dict[str, dict[str, Any]] = {
    "current_wrong_failed.txt": {
        "ranks": 4,
        "ranks_source": "devices",
        "layout": "current",
        "n_rows": 4,
        "peak_busbw_gbps": 291.65,
        "largest_size_bytes": 4294967296,
        "busbw_at_largest_gbps": 291.51,
        "avg_busbw_reported": 207.09,
        "out_of_bounds": 1,
        "wrong_total": 1048580,
        "nccl_version": "2.26.2",
        "validated": True,
        "ok": False,
        "row": (268435456, "out_of_place", 1490.0, 180.16, 270.24, 1048580),
    },
    "legacy_validated.txt": {
        "ranks": 2,
        "ranks_source": "devices",
        "layout": "legacy",
        "n_rows": 5,
        "peak_busbw_gbps": 90.80,
        "largest_size_bytes": 134217728,
        "busbw_at_largest_gbps": 90.66,
        "avg_busbw_reported": 26.6087,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": True,
        "ok": True,
        "row": (2097152, "in_place", 51.98, 40.35, 40.35, None),
    },
    "srun_padded_na.txt": {
        "ranks": 16,
        "ranks_source": "busbw_ratio",
        "layout": "current",
        "n_rows": 3,
        "peak_busbw_gbps": 185.70,
        "largest_size_bytes": 134217728,
        "busbw_at_largest_gbps": 185.59,
        "avg_busbw_reported": 175.41,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": None,
        "validated": False,
        "ok": True,
        "row": (67108864, "in_place", 701.9, 95.61, 179.27, None),
    },
    "single_rank_mpirun.txt": {
        "ranks": 1,
        "ranks_source": "busbw_ratio",
        "layout": "current",
        "n_rows": 2,
        "peak_busbw_gbps": 0.0,
        "largest_size_bytes": 16777216,
        "busbw_at_largest_gbps": 0.0,
        "avg_busbw_reported": 0.0,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": "2.21.5",
        "validated": True,
        "ok": True,
        "row": (16777216, "in_place", 30.10, 557.38, 0.0, 0),
    },
    "h200_8gpu_json.json": {
        "ranks": 8,
        "ranks_source": "devices",
        "layout": "json",
        "n_rows": 3,
        "peak_busbw_gbps": 483.35,
        "largest_size_bytes": 17179869184,
        "busbw_at_largest_gbps": 483.05,
        "avg_busbw_reported": 467.71,
        "out_of_bounds": 0,
        "wrong_total": 0,
        "nccl_version": "2.27.3",
        "validated": True,
        "ok": True,
        "row": (4294967296, "out_of_place", 15791.0, 271.98, 475.97, 0),
    },
}

SCALARS = (
    "ranks",
    "ranks_source",
    "layout",
    "peak_busbw_gbps",
    "largest_size_bytes",
    "busbw_at_largest_gbps",
    "avg_busbw_reported",
    "out_of_bounds",
    "wrong_total",
    "nccl_version",
    "validated",
    "ok",
)


def _check(doc: dict[str, Any], expected: dict[str, Any]) -> None:
    for key in SCALARS:
        assert doc[key] == (
            pytest.approx(expected[key]) if isinstance(expected[key], float) else expected[key]
        ), key
    assert len(doc["rows"]) == expected["n_rows"]
    size, placement, time_us, algbw, busbw, wrong = expected["row"]
    (row,) = [r for r in doc["rows"] if r["size_bytes"] == size]
    assert row[placement] == {
        **row[placement],
        "time_us": pytest.approx(time_us),
        "algbw_gbps": pytest.approx(algbw),
        "busbw_gbps": pytest.approx(busbw),
        "wrong": wrong,
    }
    sizes = [r["size_bytes"] for r in doc["rows"]]
    assert sizes == sorted(sizes)


def _capture(name: str) -> Path:
    return CAPTURES / name


@pytest.mark.parametrize("name", sorted(CAPTURE_CASES))
def test_real_captures(name: str) -> None:
    expected = CAPTURE_CASES[name]
    text = _capture(name).read_text()
    result = parse(text, allow_truncated=expected.get("truncated", False))
    _check(result.to_dict(), expected)
    assert result.problems == ()
    assert result.complete is not expected.get("truncated", False)


def test_a_real_capture_without_footer_is_incomplete_by_default() -> None:
    result = parse(_capture("h100_16gpu_2node_p5_efa_srun_prefix.txt").read_text())
    assert not result.ok and not result.complete
    assert result.problems[0].startswith("incomplete capture: no footer")


@pytest.mark.parametrize("mark", ["#", "#:"])
def test_a_row_made_a_comment_inside_a_table_is_no_comment(mark: str) -> None:
    """A real capture whose first row's size column became ``#`` (or ``#:``): nccl-tests
    prints no such line inside a table, so it is an unparsed row, not a skipped comment
    (found by test_properties' corrupt-row property)."""

    def is_row(line: str) -> bool:
        return len(line.split()) >= 12 and line.split()[0].isdigit()

    name = next(
        n
        for n, case in sorted(CAPTURE_CASES.items())
        if not case.get("truncated") and any(map(is_row, _capture(n).read_text().splitlines()))
    )
    lines = _capture(name).read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if is_row(line))
    size = lines[first].split()[0]
    lines[first] = lines[first].replace(size, mark, 1)
    result = parse("".join(lines))
    assert not result.ok
    assert any(p.startswith("unparsed row") and "a row behind '#'" in p for p in result.problems)


def test_every_real_capture_has_a_case() -> None:
    assert {p.name for p in CAPTURES.iterdir()} == set(CAPTURE_CASES)


@pytest.mark.parametrize("name", sorted(OWN_CASES))
def test_own_variants(name: str) -> None:
    _check(parse((DATA / name).read_text()).to_dict(), OWN_CASES[name])


def test_legacy_rows_carry_relative_error_not_a_count() -> None:
    result = parse((DATA / "legacy_validated.txt").read_text())
    first = result.rows[0].out_of_place
    assert first is not None
    assert first.wrong is None and first.error == 0.0
    assert all(r.root is None for r in result.rows)


def test_devices_old_and_new_lines() -> None:
    old = parse((DATA / "legacy_validated.txt").read_text()).devices
    assert [(d.rank, d.host, d.bus_id, d.name, d.group) for d in old] == [
        (0, "gpubox", "0x3b", "Tesla V100-SXM2-32GB", None),
        (1, "gpubox", "0x86", "Tesla V100-SXM2-32GB", None),
    ]
    new = parse(_capture("h200_2gpu_2node_1nic_rdma_k8s.txt").read_text()).devices
    assert [(d.host, d.bus_id, d.name, d.group) for d in new] == [
        ("nccl-test-dranet-1gpu-1nic-worker-0", "0000:cc:00", "NVIDIA H200", 0),
        ("nccl-test-dranet-1gpu-1nic-worker-1", "0000:97:00", "NVIDIA H200", 0),
    ]


@pytest.mark.parametrize(
    ("line", "stripped"),
    [
        ("[1,0]<stdout>:# Avg bus bandwidth    : 1", "# Avg bus bandwidth    : 1"),
        ("[12,3]<stderr>:x NCCL INFO y", "x NCCL INFO y"),
        ("0:            8             2", "           8             2"),
        (" 7: #", "#"),
        ("           8             2     float", "           8             2     float"),
        ("hostname:3442:3442 [0] NCCL INFO", "hostname:3442:3442 [0] NCCL INFO"),
    ],
)
def test_strip_prefix(line: str, stripped: str) -> None:
    assert strip_prefix(line) == stripped


@pytest.mark.parametrize(
    ("busbw_over_algbw", "ranks"),
    [(0.0, 1), (1.0, 2), (1.5, 4), (1.75, 8), (1.875, 16), (1.96875, 64), (1.979167, 96)],
)
def test_infer_ranks_from_ratio(busbw_over_algbw: float, ranks: int) -> None:
    from toolkit.acceptance.nccltests import Placement, Row

    algbw = 100.0
    p = Placement(1.0, algbw, round(algbw * busbw_over_algbw, 2), 0)
    assert infer_ranks([Row(1 << 30, 1 << 28, "float", "sum", -1, p, p)]) == ranks


@pytest.mark.parametrize(
    "text",
    [
        "",
        "hello\nworld\n",
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth : 1.0\n",
        '{"something": "else"}',
        "{not json",
    ],
)
def test_not_nccl_output_is_refused(text: str) -> None:
    with pytest.raises(NotNcclTestsOutput) as info:
        parse(text)
    assert info.value.exit_code == 2


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "accept", "parse", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_cli_parse_json_ok() -> None:
    result = _cli(str(_capture("h200_16gpu_2node_tcp_socket_degraded.txt")), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["ranks"] == 16
    assert doc["busbw_at_largest_gbps"] == pytest.approx(92.33)
    assert doc["rows"][0]["out_of_place"]["wrong"] == 0


def test_cli_parse_exit_1_on_wrong_values() -> None:
    result = _cli(str(DATA / "current_wrong_failed.txt"), "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["ok"] is False


def test_cli_parse_exit_2_on_other_output() -> None:
    result = _cli(str(DATA / "not_nccl.txt"))
    assert result.returncode == 2
    assert "not an nccl-tests output" in result.stderr
    assert result.stdout == ""


def test_cli_parse_text_table() -> None:
    result = _cli(str(DATA / "legacy_validated.txt"))
    assert result.returncode == 0
    assert "90.80" in result.stdout and "OK" in result.stdout


# A child process reads a capture of unparseable rows, made as it is read (never whole in
# memory), and reports its peak memory growth: streaming keeps it flat whatever the size.
STREAM_CHILD = r"""
import io, json, resource, sys, time
from toolkit.acceptance.nccltests import parse_stream

ROW = b"    16777216  4194304  float  sum  -1  120.5  139.23  139.23  x  119.9  139.93  139.93  0\n"
END = (b"   268435456  67108864  float  sum  -1  1490.0  180.16  180.16  0  1489.1  180.27  180.27"
       b"  0\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 118.26\n")

class Made(io.RawIOBase):
    def __init__(self, rows):
        self.rows = rows
        self.tail = END
    def readable(self):
        return True
    def read(self, n=-1):
        if self.rows:
            k = min(self.rows, max(1, n // len(ROW)))
            self.rows -= k
            return ROW * k
        tail, self.tail = self.tail, b""
        return tail

rows = int(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.process_time()
result = parse_stream(Made(rows))
print(json.dumps({
    "cpu_s": time.process_time() - start,
    "growth_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024,
    "ok": result.ok, "rows": len(result.rows), "problems": list(result.problems),
}))
"""


def test_a_capture_of_unparseable_rows_streams_in_bounded_memory() -> None:
    rows = 400_000  # about 34 MB of rows, every one unparseable
    child = subprocess.run(
        [sys.executable, "-c", STREAM_CHILD, str(rows)],
        capture_output=True,
        text=True,
        check=True,
    )
    figures = json.loads(child.stdout)
    print(
        f"\n{rows} unparseable rows: {figures['cpu_s']:.1f} s CPU, +{figures['growth_mib']:.0f} MiB"
    )
    assert figures["ok"] is False and figures["rows"] == 1
    assert figures["problems"][-1] == f"... and {rows - 20} more problems"
    assert figures["growth_mib"] < 16  # the rows alone are 34 MB
    # 200 MB in under 30 s is 6.7 MB/s; this machine's CPU must do at least a third of that.
    assert figures["cpu_s"] < 34 / 6.7 * 3
