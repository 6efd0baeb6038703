"""DCGM diagnostics (``dcgmi diag -r <level> -j``): the parser, the profile's rule, the verdict,
and the lab's stand-in dcgmi with its ``dcgm-fail`` fault (run for real on this machine's
Python against an emulated node's hardware file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from shared_fixtures import REPO

from toolkit.acceptance import dcgm
from toolkit.acceptance.check import NodeExpectation
from toolkit.acceptance.dcgm import DcgmUnreadable, parse_diag
from toolkit.acceptance.node_runner.facts import query_dcgm
from toolkit.acceptance.verdict import judge
from toolkit.lab import paths
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.inventory import lab_profile
from toolkit.profile.floors import AcceptanceSpec, DcgmDiagSpec
from unit.core.test_properties import configured

REAL = REPO / "tests" / "data" / "real" / "dcgm"
STANDIN = Path(dcgm.__file__).parents[1] / "lab" / "standins" / "dcgmi.py"
LEVEL2 = DcgmDiagSpec(level=2)


def issue215_document() -> str:
    """The public DCGM 4 capture (NVIDIA/DCGM issue 215: the `diagnostic` plugin of a level 3
    run on 8 GPUs) is one test object cut from a document; it is put back in the document's
    frame, its text unchanged."""
    fragment = (REAL / "dcgm4-issue215-diagnostic-8gpu-pass.fragment.txt").read_text()
    test = fragment.rstrip().removesuffix(",")
    return (
        '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": ['
        + test
        + ']}], "version": "4.1.1"}}'
    )


def lab_dcgmi(tmp_path: Path, hw: NodeHardware, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the lab's stand-in dcgmi against a node's hardware file."""
    target = tmp_path / paths.HARDWARE_FILE.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(hw.to_json())
    env = {**os.environ, "GPUNODE_LAB_ROOT": str(tmp_path)}
    return subprocess.run(
        [sys.executable, str(STANDIN), *args], capture_output=True, text=True, env=env, check=False
    )


def doc(*results: dict[str, Any], plugin: str = "memory", **root: Any) -> str:
    tests = [{"name": plugin, "results": list(results)}]
    body = {"test_categories": [{"category": "Hardware", "tests": tests}], **root}
    return json.dumps({"DCGM GPU Diagnostic": body})


# --- real capture ------------------------------------------------------------------------------


def test_real_dcgm4_capture_all_pass_is_judged_passed() -> None:
    diag = parse_diag(issue215_document())
    assert [r.gpu for r in diag.results] == [str(i) for i in range(8)]
    assert {r.status for r in diag.results} == {"Pass"}
    assert diag.results[0].info[2] == (
        "GPU 0 calculated at approximately 859.08 gigaflops during this test"
    )
    [finding] = dcgm.judge(diag, LEVEL2)
    assert finding.ok and finding.plugin == "diagnostic"
    assert finding.message == "diagnostic: Pass on 8 GPU result(s)"


# --- the lab's stand-in: the real JSON shape, one failing plugin -------------------------------


def test_lab_standin_healthy_node_passes_every_level_2_plugin(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 4, True, seed="d", index=0)
    done = lab_dcgmi(tmp_path, hw, "diag", "-r", "2", "-j")
    assert done.returncode == 0, done.stderr
    diag = parse_diag(done.stdout)
    assert diag.version == "4.2.3"
    findings = dcgm.judge(diag, LEVEL2)
    # DCGM's order: a real level 2 prints Hardware (memory) before Integration (pcie).
    assert [(f.plugin, f.ok) for f in findings] == [
        ("software", True),
        ("memory", True),
        ("pcie", True),
    ]


def test_lab_dcgm_fail_fault_fails_memory_naming_gpu_and_warning(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 4, True, ["dcgm-fail"], seed="d", index=0)
    [bad] = [g.index for g in hw.gpus if g.dcgm_failing_plugin == "memory"]
    done = lab_dcgmi(tmp_path, hw, "diag", "-r", "2", "-j")
    # dcgmi exits DCGM_ST_NVVS_ERROR (226) and still prints the document.
    assert done.returncode == 226
    findings = {f.plugin: f for f in dcgm.judge(parse_diag(done.stdout), LEVEL2)}
    assert findings["software"].ok and findings["pcie"].ok
    memory = findings["memory"]
    assert not memory.ok
    assert memory.message == (
        f"memory: GPU {bad} Fail: Found 1 faulty memory elements on GPU {bad} [DCGM error 52 "
        "DCGM_FR_FAULTY_MEMORY, severity ISOLATE (2), category HARDWARE_MEMORY (10)]"
    )
    assert memory.measured == [str(bad)]


def test_lab_standin_refuses_what_it_does_not_emulate(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("H100", 2, True, seed="d", index=0)
    for args in (("diag", "-r", "2"), ("diag", "-r", "9", "-j"), ("discovery", "-l")):
        done = lab_dcgmi(tmp_path, hw, *args)
        assert done.returncode == 1 and "Usage: dcgmi diag" in done.stderr, args


# --- the rule ----------------------------------------------------------------------------------


def test_fail_on_any_gpu_fails_the_plugin_with_every_warning() -> None:
    text = doc(
        {"gpu_id": "0", "status": "Pass"},
        {"gpu_id": "3", "status": "Fail", "warnings": [{"warning": "bad row", "error_id": 52}]},
    )
    [finding] = dcgm.judge(parse_diag(text), LEVEL2)
    assert not finding.ok
    assert finding.message == "memory: GPU 3 Fail: bad row [DCGM error 52 DCGM_FR_FAULTY_MEMORY]"


@pytest.mark.parametrize(
    ("spec", "ok"),
    [
        (DcgmDiagSpec(level=2), True),
        (DcgmDiagSpec(level=2, fail_on_warn=True), False),
    ],
)
def test_warn_is_shown_and_judged_by_the_profile(spec: DcgmDiagSpec, ok: bool) -> None:
    text = doc({"entity_group": "GPU", "entity_id": 1, "status": "Warn", "warnings": ["hot"]})
    [finding] = dcgm.judge(parse_diag(text), spec)
    assert finding.ok is ok
    assert "GPU 1 Warn: hot" in finding.message


def test_skip_is_shown_and_judged_by_the_profile() -> None:
    # Skipped on one GPU of two: a plugin skipped on every GPU is not measured (below).
    text = doc({"gpu_id": 0, "status": "Skip"}, {"gpu_id": 1, "status": "Pass"})
    [passed] = dcgm.judge(parse_diag(text), LEVEL2)
    assert passed.ok and passed.message == "memory: passed, with GPU 0 Skip: no warning given"
    [failed] = dcgm.judge(parse_diag(text), DcgmDiagSpec(level=2, fail_on_skip=True))
    assert not failed.ok


def test_not_run_fails_and_other_entities_are_not_this_checks() -> None:
    text = doc(
        {"entity_group": "GPU", "entity_id": 0, "status": "Not Run"},
        {"entity_group": "CPU", "entity_id": 0, "status": "Fail"},
    )
    [finding] = dcgm.judge(parse_diag(text), LEVEL2)
    assert not finding.ok and finding.measured == ["0"]


def test_runtime_error_fails_the_run() -> None:
    text = json.dumps({"DCGM Diagnostic": {"runtime_error": "host engine down", "version": "4"}})
    [finding] = dcgm.judge(parse_diag(text), LEVEL2)
    assert finding.plugin == "run" and not finding.ok
    assert "host engine down" in finding.message


# --- strict parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (doc({"gpu_id": "0", "status": "Okay"}), "results[0].status: unknown status 'Okay'"),
        (doc({"status": "Pass"}), "results[0]: no gpu_id, gpu_ids or entity_id"),
        (doc({"gpu_id": [0], "status": "Pass"}), "results[0].gpu_id: a GPU id expected"),
        (doc({"gpu_id": 0, "status": "Pass", "warnings": [1]}), "warnings[0]: a string"),
        ('{"other": {}}', "one of 'DCGM GPU Diagnostic' or 'DCGM Diagnostic' expected"),
        ('{"DCGM Diagnostic": {"test_categories": []}}', "no GPU result"),
        ("Error: unable to connect", "not JSON"),
        ("[" * 200 + "]" * 200, "nested deeper"),
    ],
)
def test_unreadable_input_names_the_key(text: str, expected: str) -> None:
    with pytest.raises(DcgmUnreadable, match=None) as err:
        parse_diag(text)
    assert expected in err.value.message


def test_oversized_output_is_refused_before_parsing() -> None:
    with pytest.raises(DcgmUnreadable, match="larger than"):
        parse_diag(" " * (dcgm.MAX_OUTPUT_BYTES + 1))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
keys = st.sampled_from(
    ["DCGM Diagnostic", "DCGM GPU Diagnostic", "test_categories", "tests", "results", "status",
     "gpu_id", "entity_id", "entity_group", "warnings", "info", "name", "category"]
)  # fmt: skip
shaped = st.recursive(
    st.none() | st.integers() | st.sampled_from(["Pass", "Fail", "Skip", "GPU", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=30,
)


@configured
@given(st.one_of(json_values, shaped))
def test_any_json_gives_a_result_or_a_named_refusal(value: Any) -> None:
    try:
        diag = parse_diag(json.dumps(value))
    except DcgmUnreadable as err:
        assert err.message
    else:
        for spec in (LEVEL2, DcgmDiagSpec(level=1, fail_on_warn=True, fail_on_skip=True)):
            assert all(f.message for f in dcgm.judge(diag, spec))


@configured
@given(st.text(max_size=200))
def test_any_text_gives_a_result_or_a_named_refusal(text: str) -> None:
    try:
        parse_diag(text)
    except DcgmUnreadable as err:
        assert err.message


# --- the verdict and the runner's section --------------------------------------------------------


def spec_with(rule: DcgmDiagSpec | None) -> AcceptanceSpec:
    if rule is None:
        return lab_profile().acceptance
    return lab_profile().acceptance.model_copy(update={"dcgm_diag": rule})


def dcgm_checks(section: dict[str, Any] | None, rule: DcgmDiagSpec | None) -> list[Any]:
    result: dict[str, Any] = {"gpus": {"ok": True, "list": [], "count": 0}}
    if section is not None:
        result["dcgm"] = section
    verdict = judge(result, NodeExpectation(host="n1", stack_id="s"), spec_with(rule))
    return [c for c in verdict.checks if c.name.startswith("dcgm.")]


def test_lab_profile_asks_for_level_2() -> None:
    spec = spec_with(None)
    assert spec.dcgm_diag is not None and spec.dcgm_diag.level == 2


def test_verdict_has_one_check_per_plugin(tmp_path: Path) -> None:
    hw = NodeHardware.for_node("L40S", 2, False, ["dcgm-fail"], seed="v", index=1)
    out = lab_dcgmi(tmp_path, hw, "diag", "-r", "2", "-j").stdout
    checks = dcgm_checks({"level": 2, "raw_output": out, "rc": 226, "error": None}, LEVEL2)
    assert [(c.name, c.ok) for c in checks] == [
        ("dcgm.software", True),
        ("dcgm.memory", False),
        ("dcgm.pcie", True),
    ]
    assert checks[1].message.startswith("level 2: memory: GPU ")


@pytest.mark.parametrize(
    ("section", "rule", "ok", "message"),
    [
        (
            {"level": 2, "raw_output": "", "rc": 127, "error": dcgm.NOT_FOUND},
            LEVEL2,
            True,
            "level 2: not judged (dcgmi not found)",
        ),
        (
            {"level": 2, "raw_output": "", "rc": 127, "error": dcgm.NOT_FOUND},
            DcgmDiagSpec(level=2, required=True),
            False,
            "level 2: dcgmi not found (the profile requires it)",
        ),
        (None, LEVEL2, False, "level 2: dcgmi diag was not run (the runner did not try)"),
        (
            {"level": 2, "raw_output": "", "rc": 124, "error": "timed out after 900s"},
            LEVEL2,
            False,
            "level 2: dcgmi diag -j output unreadable: timed out after 900s",
        ),
    ],
)
def test_runner_section_without_a_document(
    section: dict[str, Any] | None, rule: DcgmDiagSpec, ok: bool, message: str
) -> None:
    [check] = dcgm_checks(section, rule)
    assert (check.name, check.ok, check.message) == ("dcgm.run", ok, message)


# --- the node runner: dcgmi found on PATH (the lab's stand-in) or not ---------------------------


def test_runner_runs_dcgmi_at_the_level_and_keeps_a_failing_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = NodeHardware.for_node("A100", 2, True, ["dcgm-fail"], seed="r", index=0)
    lab_dcgmi(tmp_path, hw, "diag", "-r", "1", "-j")  # writes the hardware file
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "dcgmi"
    tool.write_text(f"#!{sys.executable}\n" + STANDIN.read_text())
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("GPUNODE_LAB_ROOT", str(tmp_path))
    section = query_dcgm(2, 60)
    assert section is not None
    assert (section["level"], section["rc"], section["error"]) == (2, 226, None)
    assert [f.ok for f in dcgm.judge(parse_diag(section["raw_output"]), LEVEL2)] == [
        True,
        False,
        True,
    ]
    assert query_dcgm(None, 60) is None
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert query_dcgm(1, 60) == {
        "level": 1,
        "raw_output": "",
        "rc": 127,
        "error": dcgm.NOT_FOUND,
    }
