"""The compatibility checker: every rule, passing and failing, table-driven."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.errors import ConfigError
from toolkit.profile.hardware import StackFile
from toolkit.stack.check import RULES, Violation, check, has_errors, security, security_report
from toolkit.stack.matrix import matrix
from toolkit.stack.security import build, floors
from toolkit.stack.versions import numeric
from unit.stack.support import BASE, TODAY, by_rule, make, merge, violations

# CUDA -> minimum driver, every row of domain.md section 2, written out here independently
# of the package's data file so that a typo in either is caught.
CUDA_MIN_DRIVER = [
    ("13.3.0", "610.43.02"),
    ("13.2.2", "595.71.05"),
    ("13.2.1", "595.58.03"),
    ("13.2.0", "595.45.04"),
    ("13.1.1", "590.48.01"),
    ("13.1.0", "590.44.01"),
    ("13.0.2", "580.95.05"),
    ("13.0.1", "580.82.07"),
    ("13.0.0", "580.65.06"),
    ("12.9.1", "575.57.08"),
    ("12.9.0", "575.51.03"),
    ("12.8.1", "570.124.06"),
    ("12.8.0", "570.26"),
    ("12.6.3", "560.35.05"),
    ("12.6.2", "560.35.03"),
    ("12.6.1", "560.35.03"),
    ("12.6.0", "560.28.03"),
    ("12.5.1", "555.42.06"),
    ("12.5.0", "555.42.02"),
    ("12.4.1", "550.54.15"),
    ("12.4.0", "550.54.14"),
    ("12.3.1", "545.23.08"),
    ("12.3.0", "545.23.06"),
    ("12.2.2", "535.104.05"),
    ("12.2.1", "535.86.09"),
    ("12.2.0", "535.54.03"),
    ("12.1.0", "530.30.02"),
    ("12.1.1", "530.30.02"),
    ("12.0.1", "525.85.12"),
    ("12.0.0", "525.60.13"),
    ("11.8.0", "520.61.05"),
    ("11.7.1", "515.48.07"),
    ("11.7.0", "515.43.04"),
    ("11.6.2", "510.47.03"),
    ("11.6.1", "510.47.03"),
    ("11.6.0", "510.39.01"),
    ("11.5.0", "495.29.05"),
    ("11.5.1", "495.29.05"),
    ("11.5.2", "495.29.05"),
    ("11.4.4", "470.82.01"),
    ("11.4.3", "470.82.01"),
    ("11.4.2", "470.57.02"),
    ("11.4.1", "470.57.02"),
    ("11.4.0", "470.42.01"),
    ("11.0.3", "450.51.06"),
]


def just_below(version: str) -> str:
    """The driver version one step below: 570.26 -> 570.25, 550.54.15 -> 550.54.14."""
    parts = version.split(".")
    last = parts[-1]
    parts[-1] = str(int(last) - 1).zfill(len(last))
    return ".".join(parts)


def cuda_stack(cuda: str, driver: str) -> dict[str, Any]:
    major, minor = cuda.split(".")[:2]
    return {
        "driver": {"version": driver, "flavour": "proprietary"},
        "cuda": cuda,
        "nccl": f"2.21.5-1+cuda{major}.{minor}",
        "fabric_manager": "none",
    }


# T4 (Turing) has no CUDA or driver floor inside the table and runs either flavour.
T4 = {"gpu": {"model": "T4", "count": 1, "nvswitch": False}}


@pytest.mark.parametrize(("cuda", "minimum"), CUDA_MIN_DRIVER)
def test_cuda_min_driver_row_at_minimum_passes(cuda: str, minimum: str) -> None:
    found = violations(cuda_stack(cuda, minimum), T4)
    assert by_rule(found, "cuda.min_driver") == []
    assert by_rule(found, "cuda.known_release") == []


@pytest.mark.parametrize(("cuda", "minimum"), CUDA_MIN_DRIVER)
def test_cuda_min_driver_row_just_below_fails(cuda: str, minimum: str) -> None:
    below = just_below(minimum)
    found = by_rule(violations(cuda_stack(cuda, below), T4), "cuda.min_driver")
    assert len(found) == 1
    assert found[0].severity == "error"
    for text in (below, minimum, cuda, "CUDA Toolkit release notes"):
        assert text in found[0].message


def test_data_file_has_exactly_the_rows_of_the_table() -> None:
    table = dict(CUDA_MIN_DRIVER)
    data = {cuda: row.min_driver for row in matrix().cuda_rows for cuda in row.cuda}
    for cuda, minimum in table.items():
        assert data[cuda] == minimum, cuda
    extra = {cuda for cuda in data if cuda not in table}
    # Rows beyond domain.md's table are allowed only when marked unverified.
    for cuda in extra:
        assert not matrix().cuda_row(cuda).verified, cuda  # type: ignore[union-attr]


def test_cuda_13_3_row_is_unverified_and_says_so() -> None:
    found = violations(cuda_stack("13.3.0", "610.43.02"), T4)
    warning = by_rule(found, "cuda.unverified_minimum")
    assert len(warning) == 1
    assert warning[0].severity == "warning"
    assert "610.43.02" in warning[0].message
    assert not has_errors(by_rule(found, "cuda.min_driver"))


def test_two_part_cuda_version_means_the_ga_release() -> None:
    assert by_rule(violations(cuda_stack("12.8", "570.26"), T4), "cuda.min_driver") == []
    assert by_rule(violations(cuda_stack("12.8", "570.25"), T4), "cuda.min_driver")


def test_unknown_patch_release_warns_and_uses_the_nearest_lower_row() -> None:
    found = violations(cuda_stack("12.3.2", "545.23.08"), T4)
    warning = by_rule(found, "cuda.known_release")
    assert [v.severity for v in warning] == ["warning"]
    assert "12.3 U1" in warning[0].message
    failing = violations(cuda_stack("12.3.2", "545.23.07"), T4)
    assert by_rule(failing, "cuda.min_driver")[0].severity == "error"


def test_unknown_minor_release_is_an_error() -> None:
    found = violations(cuda_stack("12.7.0", "580.95.05"), T4)
    error = by_rule(found, "cuda.known_release")
    assert [v.severity for v in error] == ["error"]
    assert "12.7.0" in error[0].message
    assert "12.8.0" in error[0].message  # lists the known 12.x releases


# --- the named failures of issue 2 --------------------------------------------------------


def test_driver_535_with_cuda_12_4_1_fails_naming_both_and_the_minimum() -> None:
    found = violations(
        {"driver": {"version": "535.104.05"}, "cuda": "12.4.1", "nccl": "2.21.5-1+cuda12.4"}
    )
    errors = by_rule(found, "cuda.min_driver")
    assert len(errors) == 1
    message = errors[0].message
    assert "535.104.05" in message
    assert "12.4.1" in message
    assert "550.54.15" in message
    assert "cuda.min_driver" in message
    assert "source:" in message


def test_minor_version_compat_turns_only_that_rule_into_a_warning() -> None:
    stack = {
        "driver": {"version": "535.104.05"},
        "cuda": "12.4.1",
        "nccl": "2.21.5-1+cuda12.2",
        "cuda_minor_version_compat": True,
    }
    found = violations(stack)
    warnings = by_rule(found, "cuda.min_driver")
    assert [v.severity for v in warnings] == ["warning"]
    assert "PTX JIT" in warnings[0].message
    assert "550.54.15" in warnings[0].message
    assert by_rule(found, "cuda.minor_compat_floor") == []
    assert not has_errors(found)
    # The opt-in changes nothing else: a wrong NCCL build is still an error.
    other = violations({**stack, "nccl": "2.21.5-1+cuda11.8"})
    assert [v.rule for v in other if v.severity == "error"] == ["nccl.cuda_build"]


def test_minor_version_compat_never_goes_below_the_major_floor() -> None:
    stack = {
        "driver": {"version": "520.61.05", "flavour": "proprietary"},
        "cuda": "12.4.1",
        "nccl": "2.21.5-1+cuda12.4",
        "cuda_minor_version_compat": True,
    }
    found = violations(stack, T4)
    floor = by_rule(found, "cuda.minor_compat_floor")
    assert [v.severity for v in floor] == ["error"]
    assert "R525" in floor[0].message
    assert "520.61.05" in floor[0].message


def test_cuda_13_on_r575_fails_even_with_minor_version_compat() -> None:
    stack = {
        "driver": {"version": "575.57.08"},
        "cuda": "13.0.0",
        "nccl": "2.27.7-1+cuda13.0",
        "cuda_minor_version_compat": True,
    }
    assert [v.rule for v in violations(stack) if v.severity == "error"] == [
        "cuda.minor_compat_floor"
    ]


def test_b200_with_proprietary_modules_fails() -> None:
    found = violations(
        {"driver": {"flavour": "proprietary"}}, {"gpu": {"model": "B200", "nvswitch": True}}
    )
    errors = by_rule(found, "gpu.open_required")
    assert len(errors) == 1
    assert "B200" in errors[0].message and "proprietary" in errors[0].message


def test_v100_with_open_modules_fails() -> None:
    found = violations(
        {"driver": {"version": "580.95.05", "flavour": "open"}},
        {"gpu": {"model": "Tesla V100-SXM2-32GB", "nvswitch": True}},
    )
    errors = by_rule(found, "gpu.open_unsupported")
    assert len(errors) == 1
    assert "Volta" in errors[0].message and "open" in errors[0].message


def test_nccl_cuda_12_2_build_on_cuda_13_0_fails() -> None:
    found = violations({"cuda": "13.0.0", "nccl": "2.21.5-1+cuda12.2"})
    errors = by_rule(found, "nccl.cuda_build")
    assert len(errors) == 1
    assert "2.21.5-1+cuda12.2" in errors[0].message and "13.0.0" in errors[0].message


def test_every_violation_is_reported_not_just_the_first() -> None:
    found = violations(
        {
            "driver": {"version": "535.104.05", "flavour": "proprietary"},
            "cuda": "13.0.0",
            "nccl": "2.21.5-1+cuda12.2",
            "fabric_manager": "535.104.04",
        },
        {"gpu": {"model": "B200"}},
    )
    rules = {v.rule for v in found if v.severity == "error"}
    assert {
        "cuda.min_driver",
        "nccl.cuda_build",
        "fabric_manager.matches_driver",
        "gpu.open_required",
        "gpu.min_driver",
    } <= rules


# --- every rule, passing and failing ------------------------------------------------------

H100 = {"gpu": {"model": "H100", "count": 8, "nvswitch": True}}
PCIE_L40S = {"gpu": {"model": "L40S", "count": 4, "nvswitch": False}}

# (id, stack changes, hardware changes, rule, expected severity or None when it must pass)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], str, str | None]] = [
    # NCCL +cuda build -> toolkit
    ("nccl same minor", {}, {}, "nccl.cuda_build", None),
    ("nccl older minor", {"nccl": "2.21.5-1+cuda12.4"}, {}, "nccl.cuda_build", None),
    ("nccl newer minor", {"nccl": "2.26.2-1+cuda12.9"}, {}, "nccl.cuda_build", "error"),
    ("nccl older major", {"nccl": "2.21.5-1+cuda11.8"}, {}, "nccl.cuda_build", "error"),
    # cuDNN 8 +cuda build -> toolkit
    ("cudnn8 ok", {"cudnn": "8.9.7.29-1+cuda12.2"}, {}, "cudnn.cuda_build", None),
    ("cudnn8 newer", {"cudnn": "8.9.7.29-1+cuda12.9"}, {}, "cudnn.cuda_build", "error"),
    ("cudnn9 no build", {"cudnn": "9.10.2.21"}, {}, "cudnn.cuda_build", None),
    # Fabric Manager
    ("fm auto nvswitch", {}, {}, "fabric_manager.required", None),
    ("fm none nvswitch", {"fabric_manager": "none"}, {}, "fabric_manager.required", "error"),
    ("fm none pcie", {"fabric_manager": "none"}, PCIE_L40S, "fabric_manager.required", None),
    ("fm none gb200", {"fabric_manager": "none"}, {"gpu": {"model": "GB200"}},
     "fabric_manager.required", None),
    ("fm equal", {"fabric_manager": "580.95.05"}, {}, "fabric_manager.matches_driver", None),
    ("fm differs", {"fabric_manager": "580.82.07"}, {}, "fabric_manager.matches_driver",
     "error"),
    ("fm explicit pcie", {"fabric_manager": "580.95.05"}, PCIE_L40S, "fabric_manager.not_used",
     "warning"),
    ("fm explicit gb200", {"fabric_manager": "580.95.05"}, {"gpu": {"model": "GB200"}},
     "fabric_manager.not_used", "warning"),
    ("fm explicit nvswitch", {"fabric_manager": "580.95.05"}, {}, "fabric_manager.not_used",
     None),
    # IMEX package names per branch (NVIDIA's driver container: none before R550)
    ("imex r580 gb200", {}, {"gpu": {"model": "GB200"}}, "imex.package_name", None),
    ("imex r535 gb200", {"driver": {"version": "535.230.02"}}, {"gpu": {"model": "GB200"}},
     "imex.package_name", "error"),
    ("nvlsm b200", {}, {"gpu": {"model": "B200"}}, "fabric_manager.nvlsm", "error"),
    ("nvlsm b200 pinned", {"nvlsm": "2025.06.10"}, {"gpu": {"model": "B200"}},
     "fabric_manager.nvlsm", None),
    ("nvlsm h100", {}, {}, "fabric_manager.nvlsm", None),
    ("nvlsm pinned h100", {"nvlsm": "2025.06.10"}, {}, "fabric_manager.nvlsm_not_used",
     "warning"),
    ("nvlsm pinned b200", {"nvlsm": "2025.06.10"}, {"gpu": {"model": "B200"}},
     "fabric_manager.nvlsm_not_used", None),
    # architecture -> minimum CUDA and driver
    ("b200 cuda 12.8", {}, {"gpu": {"model": "B200"}}, "gpu.min_cuda", None),
    ("b200 cuda 12.6", {"cuda": "12.6.3", "nccl": "2.21.5-1+cuda12.4"},
     {"gpu": {"model": "B200"}}, "gpu.min_cuda", "error"),
    ("h100 cuda 11.8", {"cuda": "11.8.0", "nccl": "2.16.5-1+cuda11.8"}, {}, "gpu.min_cuda",
     None),
    ("h100 cuda 11.7", {"cuda": "11.7.1", "nccl": "2.14.3-1+cuda11.7"}, {}, "gpu.min_cuda",
     "error"),
    ("l40s cuda 11.7", {"cuda": "11.7.1", "nccl": "2.14.3-1+cuda11.7"}, PCIE_L40S,
     "gpu.min_cuda", "error"),
    ("b200 driver 570.26", {"driver": {"version": "570.26"}, "cuda": "12.8.0"},
     {"gpu": {"model": "B200"}}, "gpu.min_driver", None),
    ("b200 driver 565", {"driver": {"version": "565.57.01"}}, {"gpu": {"model": "B200"}},
     "gpu.min_driver", "error"),
    ("h100 driver 520.61.05", {"driver": {"version": "520.61.05"}, "cuda": "11.8.0",
     "nccl": "2.16.5-1+cuda11.8"}, {}, "gpu.min_driver", None),
    ("h100 driver 515", {"driver": {"version": "515.105.01"}}, {}, "gpu.min_driver", "error"),
    # flavour rules
    ("b200 open", {}, {"gpu": {"model": "B200"}}, "gpu.open_required", None),
    ("gh200 proprietary", {"driver": {"flavour": "proprietary"}},
     {"gpu": {"model": "GH200", "count": 1, "nvswitch": False}}, "gpu.open_required", "error"),
    ("gb200 proprietary", {"driver": {"flavour": "proprietary"}}, {"gpu": {"model": "GB200"}},
     "gpu.open_required", "error"),
    ("h100 proprietary", {"driver": {"flavour": "proprietary"}}, {}, "gpu.open_required", None),
    ("v100 proprietary", {"driver": {"flavour": "proprietary"}}, {"gpu": {"model": "V100"}},
     "gpu.open_unsupported", None),
    ("p100 open", {}, {"gpu": {"model": "P100"}}, "gpu.open_unsupported", "error"),
    ("m60 open", {}, {"gpu": {"model": "M60"}}, "gpu.open_unsupported", "error"),
    ("t4 open", {}, T4, "gpu.open_unsupported", None),
    # pre-Turing: last branch R580, last CUDA 12.x
    ("v100 r580", {"driver": {"flavour": "proprietary"}}, {"gpu": {"model": "V100"}},
     "gpu.last_driver_branch", None),
    ("v100 r595", {"driver": {"version": "595.45.04", "flavour": "proprietary"}},
     {"gpu": {"model": "V100"}}, "gpu.last_driver_branch", "error"),
    ("pascal r595", {"driver": {"version": "595.45.04", "flavour": "proprietary"}},
     {"gpu": {"model": "P40"}}, "gpu.last_driver_branch", "error"),
    ("t4 r595", {"driver": {"version": "595.45.04"}}, T4, "gpu.last_driver_branch", None),
    ("v100 cuda 12.9", {"driver": {"flavour": "proprietary"}, "cuda": "12.9.1",
     "nccl": "2.26.2-1+cuda12.9"}, {"gpu": {"model": "V100"}}, "gpu.max_cuda_major", None),
    ("v100 cuda 13", {"driver": {"flavour": "proprietary"}, "cuda": "13.0.0",
     "nccl": "2.27.7-1+cuda13.0"}, {"gpu": {"model": "V100"}}, "gpu.max_cuda_major", "error"),
    # open modules exist from R515
    ("open r515", {"driver": {"version": "515.105.01"}, "cuda": "11.7.1",
     "nccl": "2.14.3-1+cuda11.7"}, T4, "driver.open_min_branch", None),
    ("open r510", {"driver": {"version": "510.108.03"}, "cuda": "11.6.2",
     "nccl": "2.12.12-1+cuda11.6"}, T4, "driver.open_min_branch", "error"),
    ("proprietary r510", {"driver": {"version": "510.108.03", "flavour": "proprietary"},
     "cuda": "11.6.2", "nccl": "2.12.12-1+cuda11.6"}, T4, "driver.open_min_branch", None),
    # driver branches: known, end of life
    ("branch r580", {}, {}, "driver.branch_known", None),
    ("branch r550", {"driver": {"version": "550.127.05"}, "cuda": "12.4.1",
     "nccl": "2.21.5-1+cuda12.4"}, {}, "driver.branch_known", "warning"),
    ("r580 not eol", {}, {}, "driver.branch_eol", None),
    ("r535 eol", {"driver": {"version": "535.261.03"}, "cuda": "12.2.2",
     "nccl": "2.21.5-1+cuda12.2"}, {}, "driver.branch_eol", "warning"),
    ("r610 eol", {"driver": {"version": "610.43.02"}}, {}, "driver.branch_eol", "warning"),
    ("r620 not eol", {"driver": {"version": "620.10.01"}}, {}, "driver.branch_eol", None),
]  # fmt: skip


@pytest.mark.parametrize(
    ("stack", "hardware", "rule", "severity"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_rule(
    stack: dict[str, Any], hardware: dict[str, Any], rule: str, severity: str | None
) -> None:
    found = by_rule(violations(stack, hardware), rule)
    if severity is None:
        assert found == []
    else:
        assert [v.severity for v in found] == [severity]
        assert f"rule {rule}:" in found[0].message
        assert "source:" in found[0].message


def test_every_rule_has_a_failing_case() -> None:
    failing = {case[3] for case in CASES if case[4] is not None}
    named = {
        "cuda.min_driver",
        "cuda.known_release",
        "cuda.unverified_minimum",
        "cuda.minor_compat_floor",
        # The security floors' rules: their own tests below.
        "security.floor",
        "security.accepted_risk",
    }
    assert set(RULES) == failing | named


def test_base_stack_is_coherent_without_warnings() -> None:
    assert violations() == []


def test_messages_name_both_values_and_the_source() -> None:
    found = by_rule(violations({"fabric_manager": "580.82.07"}), "fabric_manager.matches_driver")
    message = found[0].message
    assert "580.82.07" in message and "580.95.05" in message
    assert "Fabric Manager user guide" in message
    assert found[0].source in message


def test_unverified_compute_capability_minimum_is_flagged_in_the_message() -> None:
    found = by_rule(
        violations(
            {"driver": {"version": "450.51.06", "flavour": "proprietary"}, "cuda": "11.0.3",
             "nccl": "2.7.8-1+cuda11.0"},
            {"gpu": {"model": "A10", "count": 1, "nvswitch": False}},
        ),
        "gpu.min_cuda",
    )  # fmt: skip
    assert "not verified upstream" in found[0].message


def test_check_defaults_to_today() -> None:
    stack, hardware = make({"driver": {"version": "610.43.02"}})
    assert by_rule(check(stack, hardware, today=TODAY), "driver.branch_eol")
    assert isinstance(check(stack, hardware), list)


def test_every_fact_of_the_data_file_names_a_known_source() -> None:
    from importlib import resources

    import yaml

    text = resources.files("toolkit.stack").joinpath("matrix.yml").read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    sources = set(data["sources"])
    for key, value in data["sources"].items():
        assert value["title"] and value["url"].startswith("https://"), key
    assert data["cuda_min_driver"]["source"] in sources
    facts = [
        *data["cuda_majors"],
        *data["driver_branches"],
        data["nccl"],
        data["fabric_manager"],
        data["open_modules_min_branch"],
        *(c for c in data["compute_capabilities"].values() if c.get("min_cuda")),
    ]
    for arch in data["architectures"].values():
        facts += [value for value in arch.values() if isinstance(value, dict)]
    for fact in facts:
        assert fact["source"] in sources, fact


# --- Security floors (toolkit/stack/security.yml) ---------------------------------------------

PSIRT = REPO / "tests" / "data" / "real" / "nvidia-psirt"


def _security(
    stack: dict[str, Any], accepted: list[dict[str, Any]] | None = None
) -> list[Violation]:
    data = merge(BASE, {"stack": stack})
    data["gpunode_accepted_risks"] = accepted or []
    parsed = StackFile.model_validate(data)
    return security(parsed.stack, parsed.gpunode_accepted_risks, today=TODAY)


FIXED = {"driver": {"version": "580.159.03"}, "container_toolkit": "1.19.1"}


def test_fixed_versions_pass_every_floor() -> None:
    assert _security(FIXED) == []


def test_container_toolkit_1_17_7_is_refused_naming_the_cves_and_the_fix() -> None:
    found = _security({**FIXED, "container_toolkit": "1.17.7"})
    assert [(v.rule, v.severity) for v in found] == [
        ("security.floor", "error"),
        ("security.floor", "error"),
    ]
    nvidiascape = found[0]
    for text in ("container toolkit 1.17.7", "1.17.8", "CVE-2025-23266", "CVE-2025-23267"):
        assert text in nvidiascape.message
    assert "a_id/5659" in nvidiascape.source
    assert "1.19.1" in found[1].message and "CVE-2026-24260" in found[1].message
    assert has_errors(found)


def test_accepting_every_cve_of_a_floor_turns_it_into_a_warning() -> None:
    accepted = [
        {"cve": "CVE-2025-23266", "reason": "no untrusted images", "until": "2026-12-31"},
        {"cve": "CVE-2025-23267", "reason": "no untrusted images"},
        {"cve": "CVE-2026-24260", "reason": "no untrusted images"},
    ]
    found = _security({**FIXED, "container_toolkit": "1.17.7"}, accepted)
    assert [(v.rule, v.severity) for v in found] == [("security.accepted_risk", "warning")] * 2
    assert "CVE-2025-23266 (until 2026-12-31): no untrusted images" in found[0].message
    assert "CVE-2025-23267 (no end date)" in found[0].message
    assert not has_errors(found)


def test_a_partial_or_expired_acceptance_still_refuses() -> None:
    expired = {"cve": "CVE-2025-23266", "reason": "r", "until": "2026-11-28"}  # TODAY - 1 day
    found = _security(
        {**FIXED, "container_toolkit": "1.17.7"},
        [expired, {"cve": "CVE-2026-24260", "reason": "r"}],
    )
    assert [(v.rule, v.severity) for v in found] == [
        ("security.floor", "error"),
        ("security.accepted_risk", "warning"),
    ]
    message = found[0].message
    assert "accept the risk of CVE-2025-23266, CVE-2025-23267 in gpunode_accepted_risks" in message
    assert "expired acceptances: CVE-2025-23266 (until 2026-11-28)" in message
    # The last day of an acceptance still holds.
    still = {**expired, "until": TODAY.isoformat()}
    found = _security(
        {**FIXED, "container_toolkit": "1.17.7"},
        [still, {"cve": "CVE-2025-23267", "reason": "r"}, {"cve": "CVE-2026-24260", "reason": "r"}],
    )
    assert not has_errors(found)


def test_driver_floors_apply_to_their_own_branch_only() -> None:
    # The lab's default driver: below both R550 fixes (January and April 2025 bulletins).
    found = _security({**FIXED, "driver": {"version": "550.127.05"}, "cuda": "12.4.1",
                       "nccl": "2.21.5-1+cuda12.4"})  # fmt: skip
    assert [v.message.split(", which")[0] for v in found] == [
        "driver 550.127.05 (R550) is below 550.144.03",
        "driver 550.127.05 (R550) is below 550.163.01",
    ]
    assert "CVE-2024-0150" in found[0].message and "CVE-2025-23244" in found[1].message
    # 580.126.09 fixes the January 2026 bulletin but not May 2026's.
    found = _security({**FIXED, "driver": {"version": "580.126.09"}})
    assert len(found) == 1 and "580.159.03" in found[0].message
    assert "CVE-2026-24187" in found[0].message
    # A branch no advisory lists (R610) is not judged by the floors.
    assert _security({**FIXED, "driver": {"version": "610.43.02"}, "cuda": "13.0.2",
                      "nccl": "2.27.7-1+cuda13.0"}) == []  # fmt: skip


def test_a_malformed_acceptance_is_refused_naming_the_key() -> None:
    for bad, key in (
        ({"cve": "CVE-2025-23266"}, "reason"),
        ({"cve": "CVE-2025-23266", "reason": "r", "by": "me"}, "by"),
        ({"cve": "2025-23266", "reason": "r"}, "cve"),
        ({"cve": "CVE-2025-23266", "reason": "r", "until": "soon"}, "until"),
    ):
        with pytest.raises(ValueError, match=key):
            _security(FIXED, [bad])


def _data() -> dict[str, Any]:
    from importlib import resources

    text = resources.files("toolkit.stack").joinpath("security.yml").read_text(encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def test_every_advisory_names_a_bulletin() -> None:
    data = _data()
    for key, value in data["sources"].items():
        assert value["title"].startswith("Security Bulletin: ") and value["url"].startswith(
            "https://nvidia.custhelp.com/app/answers/detail/a_id/"
        ), key
    assert {a["source"] for a in data["advisories"]} == set(data["sources"])
    assert all(floor.source.url for floor in floors())


def test_an_advisory_without_a_source_is_refused() -> None:
    data = _data()
    del data["advisories"][0]["source"]
    with pytest.raises(ConfigError, match=r"advisories\[0\]\.source"):
        build(data)
    data = _data()
    data["advisories"][1]["source"] = "nvidia_0000"
    with pytest.raises(ConfigError, match=r"advisories\[1\]\.source: 'nvidia_0000' is not a key"):
        build(data)


def test_a_driver_fix_names_its_branch() -> None:
    data = _data()
    driver = next(i for i, a in enumerate(data["advisories"]) if a["component"] == "driver")
    del data["advisories"][driver]["fixed"][0]["branch"]
    with pytest.raises(ConfigError, match=rf"advisories\[{driver}\]\.fixed\[0\]\.branch"):
        build(data)


def _csaf_fixes(bulletin: str) -> dict[str, tuple[str, set[str], str]]:
    """From NVIDIA's CSAF document: product -> (fixed version, CVEs, highest severity), for the
    container toolkit ("toolkit") and the Linux data-center driver branches ("R580")."""
    document = json.loads((PSIRT / f"{bulletin}.json").read_text(encoding="utf-8"))
    products: dict[str, tuple[str, str]] = {}

    def walk(node: dict[str, Any], parent: str) -> None:
        for branch in node.get("branches", []):
            if "product" in branch:
                products[branch["product"]["product_id"]] = (
                    f"{parent}|{branch['name']}",
                    branch["product"]["name"],
                )
            walk(branch, branch["name"])

    walk(document["product_tree"], "")
    order = ["LOW", "MEDIUM", "HIGH", "CRITICAL"]
    found: dict[str, tuple[str, set[str], str]] = {}
    for vulnerability in document["vulnerabilities"]:
        score = vulnerability["scores"][0]
        severity = score["cvss_v3"]["baseSeverity"]
        for product_id in vulnerability["product_status"].get("fixed", []):
            where, version = products[product_id]
            if where.endswith("|NVIDIA Container Toolkit"):
                key = "toolkit"
            elif where.startswith("Linux(R") and where.endswith("|Tesla"):
                key = where.split("|")[0][len("Linux(") : -1]
            else:
                continue
            old = found.get(key, (version.lstrip("v"), set(), "LOW"))
            worst = max(old[2], severity, key=order.index)
            found[key] = (old[0], old[1] | {vulnerability["cve"]}, worst)
    return found


def test_every_floor_matches_nvidias_csaf_document() -> None:
    for floor in floors():
        bulletin = floor.source.url.rsplit("=", 1)[-1].rsplit("/", 1)[-1]
        fixes = _csaf_fixes(bulletin)
        key = "toolkit" if floor.branch is None else f"R{floor.branch}"
        assert key in fixes, (bulletin, key)
        version, cves, severity = fixes[key]
        assert numeric(floor.version) == numeric(version), (bulletin, key)
        assert set(floor.cves) == cves, (bulletin, key)
        assert floor.severity == severity.lower(), (bulletin, key)
    # Every data-center branch and toolkit fix of those bulletins is encoded.
    encoded = {(f.source.key, f.branch) for f in floors()}
    for source in {f.source for f in floors()}:
        for key in _csaf_fixes(source.key.split("_")[1]):
            branch = None if key == "toolkit" else int(key[1:])
            assert (source.key, branch) in encoded, (source.key, key)


def test_the_acceptance_report_lists_the_floors_of_the_pinned_stack() -> None:
    stack = StackFile.model_validate(merge(BASE, {"stack": FIXED})).stack
    assert security_report(stack, {}) == []
    old = stack.model_copy(update={"container_toolkit": "1.17.7"})
    report = security_report(old, {})
    assert [(r["rule"], r["severity"]) for r in report] == [("security.floor", "error")] * 2
    accept = [{"cve": c, "reason": "r"} for c in ("CVE-2025-23266", "CVE-2025-23267")]
    report = security_report(old, {"gpunode_accepted_risks": accept})
    assert [r["rule"] for r in report] == ["security.accepted_risk", "security.floor"]
    # A malformed acceptance (stack check refuses it) accepts nothing here.
    report = security_report(old, {"gpunode_accepted_risks": [{"cve": "CVE-2025-23266"}]})
    assert [r["rule"] for r in report] == ["security.floor"] * 2


@pytest.mark.parametrize("version", ["550.127.05", "570.195.03", "580.95.05", "590.48.01"])
def test_imex_platform_on_a_named_branch_passes_the_imex_rule(version: str) -> None:
    found = violations({"driver": {"version": version}}, {"gpu": {"model": "GB200"}})
    assert by_rule(found, "imex.package_name") == []


def test_imex_platform_on_a_branch_without_an_imex_package_is_refused_with_rule_and_source() -> (
    None
):
    """Before R550 NVIDIA's driver container installs no IMEX package: `stack check` (and so
    `stack lock`, which refuses an incoherent stack) stops before any host is touched."""
    found = by_rule(
        violations({"driver": {"version": "535.230.02"}}, {"gpu": {"model": "GB200"}}),
        "imex.package_name",
    )
    assert len(found) == 1 and found[0].severity == "error"
    assert "branch 535" in found[0].message and "no IMEX package" in found[0].message
    assert "gpu-driver-container" in found[0].source
    # Not an IMEX platform: the rule says nothing, whatever the branch.
    h100 = violations({"driver": {"version": "535.230.02"}}, {"gpu": {"model": "H100"}})
    assert by_rule(h100, "imex.package_name") == []
