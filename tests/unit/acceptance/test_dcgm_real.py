"""DCGM as DCGM prints it (issue 38): real DCGM 4.2.3 and 4.5.2 documents, DCGM 3.x's layout,
DCGM's error names, plugins that measured nothing, the lab's dcgmi held to the real layout, and
``gpunode accept parse`` of a ``dcgmi diag -j`` capture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from shared_fixtures import REPO

from toolkit.acceptance import dcgm
from toolkit.acceptance.check import NodeExpectation
from toolkit.acceptance.dcgm import DcgmUnreadable, parse_diag
from toolkit.acceptance.verdict import judge
from toolkit.cli import cli
from toolkit.lab import faults, paths
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.inventory import lab_profile
from toolkit.profile.floors import DcgmDiagSpec

REAL = REPO / "tests" / "data" / "real" / "dcgm"
# baldwinSPC/glimmer-burnin's GB10 captures (tests/data/real/SOURCES.md).
ALLOWED = REAL / "dcgm4-glimmer-gb10-level2-plugins-allowed.json"  # 4.5.2, software Fail
GATED = REAL / "dcgm4-glimmer-gb10-level2-plugins-gated.json"  # 4.5.2, memory/pcie Skip
PARTIAL = REAL / "dcgm4-glimmer-gb10-level2-partial-skip.json"  # 4.2.3, memory/pcie Skip
STANDIN = Path(dcgm.__file__).parents[1] / "lab" / "standins" / "dcgmi.py"
LEVEL2 = DcgmDiagSpec(level=2)
PERSISTENCE = (
    "[DCGM error 29 DCGM_FR_PERSISTENCE_MODE, severity CONFIG (5), category SOFTWARE_OTHER (8)]"
)


# --- DCGM's enums as data ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "severity"),
    [(0, "NONE"), (1, "MONITOR"), (2, "ISOLATE"), (3, "UNKNOWN"), (4, "TRIAGE"), (5, "CONFIG"),
     (6, "RESET"), (7, None)],
)  # fmt: skip
def test_severity_names_are_dcgm_errors_h(number: int, severity: str | None) -> None:
    assert dcgm.severity_name(number) == severity


def test_error_and_category_names_are_dcgm_errors_h() -> None:
    assert dcgm.error_name(29) == "DCGM_FR_PERSISTENCE_MODE"
    assert dcgm.error_name(52) == "DCGM_FR_FAULTY_MEMORY"
    assert dcgm.error_name(132) == "DCGM_FR_UNCORRECTABLE_ROW_REMAP_LIMIT"
    assert dcgm.error_name(133) is None and dcgm.error_name(None) is None
    assert dcgm.category_name(8) == "SOFTWARE_OTHER"
    assert dcgm.category_name(10) == "HARDWARE_MEMORY"
    assert dcgm.category_name(16) == "INTERNAL_OTHER"


# --- real DCGM 4 documents ---------------------------------------------------------------------


def test_real_452_reads_version_and_driver_from_metadata_and_keeps_dcgm_codes() -> None:
    diag = parse_diag(ALLOWED.read_text())
    assert (diag.version, diag.driver, diag.root) == ("4.5.2", "580.82.09", "DCGM Diagnostic")
    assert diag.plugins == (
        ("Deployment", "software"),
        ("Hardware", "memory"),
        ("Integration", "pcie"),
    )
    [warning] = diag.results[0].warnings
    assert (warning.error_id, warning.severity, warning.category) == (29, 5, 8)
    findings = {f.plugin: f for f in dcgm.judge(diag, LEVEL2)}
    assert {p: f.outcome for p, f in findings.items()} == {
        "software": "failed",
        "memory": "passed",
        "pcie": "passed",
    }
    software = findings["software"]
    assert software.message.startswith("software: GPU 0 Fail: Persistence Mode: ")
    assert software.message.endswith(PERSISTENCE)
    assert software.to_dict()["warnings"][0] | {"warning": "-"} == {
        "warning": "-",
        "error_id": 29,
        "error_name": "DCGM_FR_PERSISTENCE_MODE",
        "severity": 5,
        "severity_name": "CONFIG",
        "category": 8,
        "category_name": "SOFTWARE_OTHER",
    }


@pytest.mark.parametrize(("path", "version"), [(GATED, "4.5.2"), (PARTIAL, "4.2.3")])
def test_real_plugins_skipped_on_every_gpu_are_not_measured(path: Path, version: str) -> None:
    diag = parse_diag(path.read_text())
    assert diag.version == version
    findings = {f.plugin: f for f in dcgm.judge(diag, LEVEL2)}
    for plugin in ("memory", "pcie"):
        assert findings[plugin].ok is None and findings[plugin].outcome == "not measured"
        assert findings[plugin].message == (
            f"{plugin}: not measured: skipped on every GPU (GPU 0 Skip: no warning given)"
        )
    assert findings["software"].outcome == "failed"
    # A profile that fails Skip fails them.
    strict = {f.plugin: f.ok for f in dcgm.judge(diag, DcgmDiagSpec(level=2, fail_on_skip=True))}
    assert strict == {"software": False, "memory": False, "pcie": False}


def test_not_measured_is_its_own_outcome_and_says_why() -> None:
    """Not measured is neither passed nor failed (issue 38, item 2): the lab's profile, which
    requires DCGM to be measured, makes the node not ready for coverage instead."""
    result: dict[str, Any] = {
        "gpus": {"ok": True, "list": [], "count": 0},
        "dcgm": {"level": 2, "raw_output": GATED.read_text(), "rc": 226, "error": None},
    }
    spec = lab_profile().acceptance.model_copy(update={"dcgm_diag": LEVEL2})
    verdict = judge(result, NodeExpectation(host="n1", stack_id="s"), spec)
    checks = {c.name: c for c in verdict.checks if c.name.startswith("dcgm.")}
    assert checks["dcgm.memory"].outcome == "not_measured" and checks["dcgm.memory"].ok
    assert "dcgm.memory" not in {c.name for c in verdict.failed}
    assert "coverage" in {c.name for c in verdict.failed}
    assert checks["dcgm.memory"].message == (
        "level 2: memory: not measured: skipped on every GPU (GPU 0 Skip: no warning given)"
    )


def test_a_plugin_without_gpu_results_is_not_measured() -> None:
    cpu = {"entity_group": "CPU", "entity_id": 0, "status": "Pass"}
    gpu = {"entity_group": "GPU", "entity_id": 0, "status": "Pass"}
    tests = [{"name": "memory", "results": [cpu]}, {"name": "diagnostic", "results": [gpu]}]
    root = {"test_categories": [{"category": "Hardware", "tests": tests}]}
    text = json.dumps({"DCGM Diagnostic": root})
    outcomes = [(f.plugin, f.outcome, f.message) for f in dcgm.judge(parse_diag(text), LEVEL2)]
    assert outcomes == [
        ("memory", "not measured", "memory: not measured: no GPU result"),
        ("diagnostic", "passed", "diagnostic: Pass on 1 GPU result(s)"),
    ]


# --- DCGM 3.x's layout (DCGM v3.3.9 dcgmi/Diag.cpp HelperJsonBuildOutput, HelperJsonAddBasicTests)


def test_dcgm3_layout_version_and_driver_beside_the_root_deployment_for_every_gpu() -> None:
    deployment = [
        {"name": "Denylist", "results": [{"status": "Pass"}]},
        {
            "name": "Persistence Mode",
            "results": [
                {
                    "gpu_id": 0,
                    "status": "Fail",
                    "warnings": [
                        {"warnings": "Persistence mode for GPU 0 is disabled.", "error_id": 29,
                         "error_category": 8, "error_severity": 5}
                    ],
                }
            ],
        },
    ]  # fmt: skip
    hardware = [{"name": "GPU Memory", "results": [{"gpu_id": "0", "status": "Pass"}]}]
    document = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {"category": "Deployment", "tests": deployment},
                {"category": "Hardware", "tests": hardware},
            ]
        },
        "Driver Version Detected": "535.129.03",
        "GPU Device IDs": ["20b2"],
        "version": "3.3.9",
    }
    diag = parse_diag(json.dumps(document))
    assert (diag.version, diag.driver, diag.root) == ("3.3.9", "535.129.03", "DCGM GPU Diagnostic")
    assert [r.gpu for r in diag.results] == ["all", "0", "0"]
    findings = {f.plugin: f for f in dcgm.judge(diag, LEVEL2)}
    assert findings["Denylist"].message == "Denylist: Pass on 1 GPU result(s)"
    assert findings["Persistence Mode"].message == (
        f"Persistence Mode: GPU 0 Fail: Persistence mode for GPU 0 is disabled. {PERSISTENCE}"
    )


def test_runtime_error_keeps_the_version_inside_the_root() -> None:
    text = json.dumps({"DCGM Diagnostic": {"runtime_error": "no GPUs", "version": "4.5.2"}})
    assert parse_diag(text).version == "4.5.2"


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"metadata": [], "DCGM Diagnostic": {}}, "metadata: an object expected"),
        ({"metadata": {"version": 4}, "DCGM Diagnostic": {}}, "metadata.version: a string"),
        (
            {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
                {"name": "m", "results": [{"gpu_id": 0, "status": "Fail", "warnings": [
                    {"warning": "w", "error_severity": "5"}]}]}]}]}},
            "warnings[0].error_severity: a number expected, found '5'",
        ),
    ],
)  # fmt: skip
def test_misshapen_dcgm_fields_are_named(document: dict[str, Any], expected: str) -> None:
    with pytest.raises(DcgmUnreadable) as err:
        parse_diag(json.dumps(document))
    assert expected in err.value.message


# --- the lab's dcgmi: the real layout, field by field --------------------------------------------


def keys(value: Any, path: str = "") -> set[str]:
    """Every key path of a document, list items merged (``a.b[].c``)."""
    out: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(f"{path}.{key}")
            out |= keys(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            out |= keys(item, f"{path}[]")
    return out


def lab_dcgmi(tmp_path: Path, hw: NodeHardware, level: int) -> subprocess.CompletedProcess[str]:
    target = tmp_path / paths.HARDWARE_FILE.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(hw.to_json())
    (target.parent / "loaded-driver-version").write_text("580.82.09\n")
    env = {**os.environ, "GPUNODE_LAB_ROOT": str(tmp_path)}
    return subprocess.run(
        [sys.executable, str(STANDIN), "diag", "-r", str(level), "-j"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


DCGM_FAULTS = [name for name in faults.FAULTS if name.startswith("dcgm")]


def test_the_lab_has_dcgm_faults_to_test() -> None:
    assert DCGM_FAULTS == ["dcgm-fail"]


@pytest.mark.parametrize("fault", [None, *DCGM_FAULTS])
def test_lab_standin_prints_only_what_real_dcgm_4_prints(tmp_path: Path, fault: str | None) -> None:
    real = json.loads(ALLOWED.read_text())
    hw = NodeHardware.for_node("H100", 4, True, [fault] if fault else [], seed="s", index=0)
    done = lab_dcgmi(tmp_path, hw, 2)
    printed = json.loads(done.stdout)
    # Every key the stand-in prints is one the real 4.5.2 document has (at the same place), and
    # the real one's, but for what only a DCGM finding writes (info, the summary's warnings).
    only_real = {
        ".DCGM Diagnostic.test_categories[].tests[].results[].info",
        ".DCGM Diagnostic.test_categories[].tests[].test_summary.info",
        ".DCGM Diagnostic.test_categories[].tests[].test_summary.warnings",
        ".DCGM Diagnostic.test_categories[].tests[].test_summary.warnings[].error_category",
        ".DCGM Diagnostic.test_categories[].tests[].test_summary.warnings[].error_id",
        ".DCGM Diagnostic.test_categories[].tests[].test_summary.warnings[].error_severity",
        ".DCGM Diagnostic.test_categories[].tests[].test_summary.warnings[].warning",
    }
    warned = ".DCGM Diagnostic.test_categories[].tests[].results[].warnings"
    if fault is None:
        only_real |= {k for k in keys(real) if k.startswith(warned)}
    assert keys(printed) == keys(real) - only_real
    assert list(printed) == sorted(printed)  # jsoncpp's sorted keys
    assert [c["category"] for c in printed["DCGM Diagnostic"]["test_categories"]] == [
        "Deployment",
        "Hardware",
        "Integration",
    ]
    assert printed["metadata"] == {"Driver Version Detected": "580.82.09", "version": "4.2.3"}
    assert printed["entity_groups"][0]["entities"][0]["device_id"] == "2330"


@pytest.mark.parametrize("level", [1, 2, 3, 4])
@pytest.mark.parametrize("fault", [None, *DCGM_FAULTS])
def test_lab_standin_judged_healthy_and_under_each_dcgm_fault(
    tmp_path: Path, level: int, fault: str | None
) -> None:
    hw = NodeHardware.for_node("A100", 2, True, [fault] if fault else [], seed="j", index=1)
    done = lab_dcgmi(tmp_path, hw, level)
    diag = parse_diag(done.stdout)
    assert (diag.version, diag.driver) == ("4.2.3", "580.82.09")
    findings = dcgm.judge(diag, DcgmDiagSpec(level=level))
    failing = {g.dcgm_failing_plugin for g in hw.gpus} - {None}
    if fault is None:
        assert failing == set() and done.returncode == 0
    else:
        assert failing == {faults.DCGM_FAILING_PLUGIN}
    failed = {f.plugin for f in findings if f.outcome == "failed"}
    ran = {f.plugin for f in findings}
    assert failed == failing & ran
    assert done.returncode == (226 if failed else 0)
    assert all(f.outcome == "passed" for f in findings if f.plugin not in failed)
    for finding in findings:
        if finding.plugin in failed:
            assert "DCGM_FR_FAULTY_MEMORY, severity ISOLATE (2)" in finding.message
            assert "Found 1 faulty memory elements on GPU" in finding.message


# --- gpunode accept parse ------------------------------------------------------------------------


def accept_parse(*args: str) -> Any:
    return CliRunner().invoke(cli, ["accept", "parse", *args])


def test_accept_parse_real_452_capture_names_the_failing_plugin_and_dcgm_error() -> None:
    result = accept_parse(str(ALLOWED))
    assert result.exit_code == 1, result.output
    out = result.output
    assert "DCGM 4.5.2" in out and "driver 580.82.09" in out
    assert "software" in out and "failed" in out
    assert "DCGM error 29 DCGM_FR_PERSISTENCE_MODE" in out and "severity CONFIG" in out
    assert "category SOFTWARE_OTHER" in out


def test_accept_parse_json_of_a_dcgm_capture() -> None:
    result = accept_parse("--json", str(ALLOWED))
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert (document["kind"], document["version"], document["ok"]) == ("dcgmi diag", "4.5.2", False)
    assert [(p["plugin"], p["outcome"]) for p in document["plugins"]] == [
        ("software", "failed"),
        ("memory", "passed"),
        ("pcie", "passed"),
    ]
    [warning] = document["plugins"][0]["warnings"]
    assert (warning["error_id"], warning["error_name"], warning["severity_name"]) == (
        29,
        "DCGM_FR_PERSISTENCE_MODE",
        "CONFIG",
    )


def test_accept_parse_memory_skipped_everywhere_is_not_measured_never_passed(
    tmp_path: Path,
) -> None:
    # The real 4.5.2 gated capture with its one failing result (persistence mode) made a pass:
    # then only memory and pcie, skipped on every GPU, are left to say anything.
    document = json.loads(GATED.read_text())
    software = document["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    software["results"][0] = {k: v for k, v in software["results"][0].items() if k != "warnings"}
    software["results"][0]["status"] = "Pass"
    capture = tmp_path / "gated-software-pass.json"
    capture.write_text(json.dumps(document))
    result = accept_parse("--json", str(capture))
    assert result.exit_code == 0, result.output
    outcomes = {p["plugin"]: p["outcome"] for p in json.loads(result.stdout)["plugins"]}
    assert outcomes == {"software": "passed", "memory": "not measured", "pcie": "not measured"}
    text = accept_parse(str(capture)).output
    assert "memory: not measured: skipped on every GPU" in text


def test_accept_parse_real_gated_capture_fails_on_software_and_shows_memory_not_measured() -> None:
    result = accept_parse("--json", str(GATED))
    assert result.exit_code == 1
    outcomes = {p["plugin"]: p["outcome"] for p in json.loads(result.stdout)["plugins"]}
    assert outcomes == {"software": "failed", "memory": "not measured", "pcie": "not measured"}


def test_accept_parse_misshapen_dcgm_document_is_refused_naming_the_key(tmp_path: Path) -> None:
    capture = tmp_path / "bad.json"
    capture.write_text(json.dumps({"DCGM Diagnostic": {"test_categories": 3}}))
    # Through the error boundary (`python -m toolkit`), as a user runs it.
    result = subprocess.run(
        [sys.executable, "-m", "toolkit", "accept", "parse", str(capture)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "test_categories: a list expected" in result.stderr
