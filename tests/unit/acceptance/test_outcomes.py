"""Three outcomes, never two (issue 38, item 2): every check is passed, failed or not measured,
in every output (verdict JSON, JUnit, HTML, Prometheus textfiles, certificate, the terminal);
not measured is never shown or counted as passed, and a profile's ``require_measured`` makes a
node whose required checks were not measured not ready for ``coverage``."""

from __future__ import annotations

import json
import re
from typing import Any
from xml.etree import ElementTree as ET

import pytest
from shared_fixtures import healthy_training

from toolkit import cert
from toolkit.acceptance import failure
from toolkit.acceptance.check import (
    FAILED,
    NOT_MEASURED,
    PASSED,
    Check,
    coverage_check,
    not_measured,
)
from toolkit.acceptance.verdict import Verdict, judge
from toolkit.errors import ConfigError
from toolkit.lab.inventory import lab_profile
from toolkit.profile.floors import CHECK_FAMILIES, AcceptanceSpec
from toolkit.profile.hardware import HardwareProfile
from toolkit.report import render_html, render_junit, render_textfile
from toolkit.report.prometheus import render_check_textfile
from unit.acceptance.test_dcgm_real import GATED, LEVEL2
from unit.acceptance.test_verdict import EXPECT, SPEC, healthy
from unit.cert.test_certificate import _document

CPU_REASON = "CPU ranks"


def lab_shaped() -> dict[str, Any]:
    """A healthy node whose training loop ran on CPU ranks (as on the lab): GPU utilisation
    cannot be sampled."""
    result = healthy() | healthy_training()
    assert result["train"]["loop"]["gpu_util"] == {
        "measured": False,
        "reason": CPU_REASON,
        "per_gpu": {},
    }
    return result


def node_summary(verdict: Verdict) -> dict[str, Any]:
    """The node's entry of a run summary, in the shape ``steps.accept`` gives every report."""
    data = verdict.to_dict()
    return {
        "host": verdict.host,
        "group": "gpu",
        "verdict": verdict.verdict,
        "stack_id": "abcdef012345",
        "installed_stack_id": "abcdef012345",
        "checks": data["checks"],
        "failed_checks": data["failed_checks"],
        "outcomes": data["outcomes"],
        "not_measured_checks": data["not_measured_checks"],
        "allreduce_rows": [],
        "busbw_at_largest_gbps": None,
        "floors": [],
    }


def run_summary(*verdicts: Verdict) -> dict[str, Any]:
    return {
        "run_id": "20261129T160000Z-abc123",
        "inventory": "inventories/lab",
        "started": "2026-11-29T16:00:00+00:00",
        "finished": "2026-11-29T16:01:00+00:00",
        "multi_node": False,
        "multinode": None,
        "nodes": [node_summary(v) for v in verdicts],
    }


# --- the check record ----------------------------------------------------------------------------


def test_a_check_has_exactly_one_of_three_outcomes() -> None:
    assert Check("a", True, "m").outcome == PASSED
    assert Check("a", False, "m").outcome == FAILED
    skipped = not_measured("a", "no sample")
    assert (skipped.outcome, skipped.ok, skipped.reason) == (NOT_MEASURED, True, "no sample")
    assert skipped.message == "not measured: no sample" and not skipped.passed
    assert skipped.failure_class is None and skipped.advice == ""
    with pytest.raises(ValueError, match="says why"):
        Check("a", True, "m", outcome=NOT_MEASURED)
    with pytest.raises(ValueError, match="outcome 'passed' with ok=False"):
        Check("a", False, "m", outcome=PASSED)


def test_gpu_util_of_a_lab_shaped_result_is_not_measured_and_the_node_ready() -> None:
    verdict = judge(lab_shaped(), EXPECT, SPEC)
    assert verdict.ready, verdict.reasons()
    util = next(c for c in verdict.checks if c.name == "train.gpu_util")
    assert (util.outcome, util.reason) == (NOT_MEASURED, CPU_REASON)
    data = verdict.to_dict()
    check = next(c for c in data["checks"] if c["name"] == "train.gpu_util")
    assert check["outcome"] == "not_measured" and check["reason"] == CPU_REASON
    assert data["outcomes"]["not_measured"] >= 1
    assert sum(data["outcomes"].values()) == len(data["checks"])
    assert data["outcomes"]["passed"] == sum(c["outcome"] == "passed" for c in data["checks"])
    assert {"check": "train.gpu_util", "message": util.message, "reason": CPU_REASON} in data[
        "not_measured_checks"
    ]


def test_a_profile_requiring_gpu_util_makes_a_lab_shaped_result_not_ready_for_coverage() -> None:
    spec = SPEC.model_copy(update={"require_measured": ["train.gpu_util", "checkpoint"]})
    verdict = judge(lab_shaped(), EXPECT, spec)
    assert not verdict.ready
    [failed] = verdict.failed
    assert failed.name == "coverage"
    assert failed.message == f"required but not measured: train.gpu_util ({CPU_REASON})"
    assert failed.failure_class == failure.HARNESS
    assert failed.action is not None and "make the check measurable" in failed.action
    assert verdict.advised_reasons()[0].startswith("coverage: required but not measured")
    # Measured and passed: coverage met, a passed check that names what was required.
    met = judge(lab_shaped(), EXPECT, SPEC.model_copy(update={"require_measured": ["checkpoint"]}))
    assert met.ready and next(c for c in met.checks if c.name == "coverage").passed


def test_a_required_check_that_never_ran_is_named() -> None:
    check = coverage_check([Check("gemm.gpu0", True, "ok")], ["gemm", "dcgm.memory"])
    assert check is not None and not check.ok
    assert check.message == "required but not measured: dcgm.memory (no such check ran)"
    assert coverage_check([Check("gemm.gpu0", True, "ok")], []) is None


def test_the_lab_profile_requires_only_what_the_lab_measures() -> None:
    lab = lab_profile().acceptance
    assert "train.gpu_util" not in lab.require_measured and lab.require_measured
    # The lab measures its DCGM plugins (its stand-in dcgmi) and its topology.
    assert set(lab.require_measured) <= {"dcgm", "topology"}


def test_require_measured_is_checked_with_its_key_path() -> None:
    raw = {"gpu": {"model": "H100", "count": 8}, "acceptance": {"require_measured": ["gemn"]}}
    with pytest.raises(ConfigError) as err:
        from toolkit.config import validate

        validate(HardwareProfile, raw, "hardware.yml")
    assert "acceptance.require_measured" in err.value.message
    assert "did you mean 'gemm'" in err.value.message
    with pytest.raises(ValueError, match="named once"):
        AcceptanceSpec(require_measured=["gemm", "gemm"])


def test_every_classed_check_family_may_be_required() -> None:
    families = {key.split(".", 1)[0] for key, _ in failure.RULES} - {"runner", "executor"}
    assert families - {"coverage"} <= set(CHECK_FAMILIES)


# --- DCGM ----------------------------------------------------------------------------------------


def _dcgm_result() -> dict[str, Any]:
    return {
        "gpus": {"ok": True, "list": [], "count": 0},
        "dcgm": {"level": 2, "raw_output": GATED.read_text(), "rc": 226, "error": None},
    }


def test_a_dcgm_plugin_skipped_on_every_gpu_is_not_measured_not_failed() -> None:
    spec = AcceptanceSpec(dcgm_diag=LEVEL2)
    verdict = judge(_dcgm_result(), EXPECT, spec)
    checks = {c.name: c for c in verdict.checks if c.name.startswith("dcgm.")}
    memory = checks["dcgm.memory"]
    assert memory.outcome == NOT_MEASURED and memory.ok
    assert memory.reason == "skipped on every GPU (GPU 0 Skip: no warning given)"
    assert "dcgm.memory" not in {c.name for c in verdict.failed}


def test_a_profile_requiring_a_skipped_dcgm_plugin_is_not_ready_for_coverage() -> None:
    spec = AcceptanceSpec(dcgm_diag=LEVEL2, require_measured=["dcgm.memory"])
    verdict = judge(_dcgm_result(), EXPECT, spec)
    coverage = next(c for c in verdict.checks if c.name == "coverage")
    assert not verdict.ready and coverage.outcome == FAILED
    assert coverage.message == (
        "required but not measured: dcgm.memory "
        "(skipped on every GPU (GPU 0 Skip: no warning given))"
    )
    assert coverage.failure_class == failure.HARNESS
    # The lab's profile requires DCGM: its stand-in answers; a node whose DCGM skipped is not.
    lab = lab_profile().acceptance.model_copy(update={"dcgm_diag": LEVEL2})
    assert "coverage" in {c.name for c in judge(_dcgm_result(), EXPECT, lab).failed}


def test_dcgmi_missing_where_not_required_is_not_measured() -> None:
    section = {"level": 2, "raw_output": "", "rc": 127, "error": "dcgmi not found"}
    verdict = judge({"dcgm": section}, EXPECT, AcceptanceSpec(dcgm_diag=LEVEL2))
    run = next(c for c in verdict.checks if c.name == "dcgm.run")
    assert run.outcome == NOT_MEASURED and run.message == "level 2: not judged (dcgmi not found)"


# --- every output --------------------------------------------------------------------------------


def _verdicts() -> tuple[Verdict, Verdict]:
    """A lab-shaped ready node, and a node with one check of each outcome."""
    lab = judge(lab_shaped(), EXPECT, SPEC)
    mixed = Verdict(
        "node-<2>",
        [
            Check("gpu.count", True, "2 GPUs == 2 expected", measured=2, floor=2),
            Check("gemm.gpu0", False, "1.00 TFLOPS < floor 100 TFLOPS", measured=1.0, floor=100),
            not_measured("dcgm.memory", "skipped on every GPU", "level 2: memory: skipped"),
        ],
    )
    return lab, mixed


def test_the_junit_file_skips_what_was_not_measured() -> None:
    lab, mixed = _verdicts()
    root = ET.fromstring(render_junit(run_summary(lab, mixed)))
    cases = {
        (s.get("name"), c.get("name")): c
        for s in root.iter("testsuite")
        for c in s.iter("testcase")
    }
    util = cases[("node-1", "train.gpu_util")]
    skipped = util.find("skipped")
    assert skipped is not None and util.find("failure") is None
    assert skipped.get("message") == f"not measured: {CPU_REASON}"
    suite = next(s for s in root.iter("testsuite") if s.get("name") == "node-<2>")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert cases[("node-<2>", "gpu.count")].find("skipped") is None
    assert cases[("node-<2>", "gemm.gpu0")].find("failure") is not None


def _html_cell(html: str, check: str) -> str:
    match = re.search(rf"<tr><td>{re.escape(check)}</td><td class='([^']+)'>([^<]+)</td>", html)
    assert match, check
    return f"{match.group(1)}:{match.group(2)}"


def test_the_html_report_draws_not_measured_apart_never_green() -> None:
    lab, mixed = _verdicts()
    html = render_html(run_summary(lab, mixed))
    # The training table's row: its own class and word.
    assert _html_cell(html, "train.gpu_util") == "not-measured:not measured"
    assert ".not-measured{" in html and "#116611" not in html.split(".not-measured{")[1][:40]
    section = html.split("<h2>Not measured</h2>")[1]
    assert "train.gpu_util" in section and CPU_REASON in section
    assert "dcgm.memory" in section and "skipped on every GPU" in section
    assert "1 passed, 1 failed, 1 not measured" in html


def test_the_textfile_counts_and_names_what_was_not_measured() -> None:
    lab, mixed = _verdicts()
    text = render_textfile(node_summary(lab), "run-1", 0.0)
    assert (
        'gpunode_acceptance_check{stack_id="abcdef012345",check="train.gpu_util",'
        'outcome="not_measured"} 1\n' in text
    )
    counts = lab.counts()
    for outcome, n in counts.items():
        line = f'gpunode_acceptance_checks{{stack_id="abcdef012345",outcome="{outcome}"}} {n}\n'
        assert line in text
    assert counts["not_measured"] >= 1
    mixed_text = render_textfile(node_summary(mixed), "run-1", 0.0)
    assert 'outcome="not_measured"} 1\n' in mixed_text
    assert "gpunode_failed_checks{" in mixed_text


def test_the_passive_check_textfile_says_not_measured() -> None:
    text = render_check_textfile(
        "ready", [("pcie.aer", "not_measured"), ("health.xid", "passed")], 0.0, 0.1
    )
    assert 'gpunode_check_not_measured{check="pcie.aer"} 1\n' in text
    assert 'gpunode_check_not_measured{check="health.xid"} 0\n' in text
    assert 'gpunode_check_failed{check="pcie.aer"} 0\n' in text
    assert "gpunode_check_failures 0\n" in text
    # Booleans still read as passed and failed.
    assert 'gpunode_check_failed{check="x"} 1\n' in render_check_textfile(
        "not-ready", [("x", False)], 0.0, 0.1
    )


def test_the_certificate_lists_what_was_not_measured_and_why() -> None:
    lab, _ = _verdicts()
    checks = [c.to_dict() for c in lab.checks]
    document = _document(checks=checks, spec=SPEC)
    records = {c["name"]: c for c in document["proof"]["checks"]}
    assert records["train.gpu_util"]["outcome"] == "not_measured"
    assert records["train.gpu_util"]["reason"] == CPU_REASON
    assert records["gpu.count"]["outcome"] == "passed"
    summary = cert.summary(cert.validate_document(cert.render(document)))
    assert f"train.gpu_util: {CPU_REASON}" in summary["not_measured"]


def test_no_certificate_below_the_required_coverage() -> None:
    lab, _ = _verdicts()
    checks = [c.to_dict() for c in lab.checks]
    spec = SPEC.model_copy(update={"require_measured": ["train.gpu_util"]})
    with pytest.raises(cert.CertError, match="below its required coverage"):
        _document(checks=checks, spec=spec)


# --- no renderer prints "passed" for a not-measured check ----------------------------------------


@pytest.mark.parametrize("reason", ["CPU ranks", "skipped on every GPU", "no floor set"])
def test_no_renderer_shows_a_not_measured_check_as_passed(reason: str) -> None:
    """One verdict with each outcome; in every output the not-measured check is never drawn
    or counted as passed, and the passed and failed ones keep their words."""
    verdict = Verdict(
        "node-1",
        [
            Check("gpu.count", True, "2 GPUs == 2 expected"),
            Check("gemm.gpu0", False, "slow"),
            not_measured("train.gpu_util", reason),
        ],
    )
    summary = run_summary(verdict)
    node = summary["nodes"][0]
    # JSON.
    data = json.loads(json.dumps(verdict.to_dict()))
    outcomes = {c["name"]: c["outcome"] for c in data["checks"]}
    assert outcomes == {
        "gpu.count": "passed",
        "gemm.gpu0": "failed",
        "train.gpu_util": "not_measured",
    }
    assert data["outcomes"] == {"passed": 1, "failed": 1, "not_measured": 1}
    # JUnit: skipped, not a plain (passed) test case.
    root = ET.fromstring(render_junit(summary))
    case = next(c for c in root.iter("testcase") if c.get("name") == "train.gpu_util")
    assert [child.tag for child in case] == ["skipped"]
    # HTML: the Not measured section, and no passed word or green class for it.
    html = render_html(summary)
    assert re.search(r"<td>train\.gpu_util</td><td class='(ready|[^']*)'>passed", html) is None
    assert "train.gpu_util" in html.split("<h2>Not measured</h2>")[1]
    # The textfile: outcome not_measured, counted apart.
    text = render_textfile(node, "run-1", 0.0)
    assert 'check="train.gpu_util",outcome="not_measured"} 1' in text
    assert 'outcome="passed"} 1\n' in text
    # The certificate (of the measured and the not measured; no failed check in a ready one).
    ready = [c for c in data["checks"] if c["outcome"] != "failed"]
    document = _document(checks=ready, spec=SPEC)
    record = next(c for c in document["proof"]["checks"] if c["name"] == "train.gpu_util")
    assert record["outcome"] == "not_measured" and record["reason"] == reason


def test_the_terminal_verdict_and_json_show_three_outcomes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from click.testing import CliRunner

    from toolkit.cli import cli, output
    from toolkit.steps.accept import run as step

    lab, mixed = _verdicts()
    summary = run_summary(lab, mixed)
    for node in summary["nodes"]:
        node |= {"certificate": None, "certificate_note": None}

    class Run:
        run_id = "20261129T160000Z-abc123"
        run_dir = tmp_path
        all_ready = False

        def summary(self) -> dict[str, Any]:
            return recorded

    recorded = summary
    monkeypatch.setattr(step, "run_acceptance", lambda *a, **k: Run())
    monkeypatch.setattr(output.out_console, "width", 400)
    shown = CliRunner().invoke(cli, ["accept", "-i", str(tmp_path)])
    assert shown.exit_code == 1, shown.output
    assert "1 passed, 1 failed, 1 not measured" in shown.output
    assert f"train.gpu_util: {CPU_REASON}" in shown.output
    assert "dcgm.memory: skipped on every GPU" in shown.output
    data = CliRunner().invoke(cli, ["accept", "-i", str(tmp_path), "--json"])
    node = json.loads(data.stdout)["nodes"][1]
    assert node["outcomes"] == {"passed": 1, "failed": 1, "not_measured": 1}
    assert [c["outcome"] for c in node["checks"]] == ["passed", "failed", "not_measured"]
