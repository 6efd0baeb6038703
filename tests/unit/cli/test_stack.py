"""`gpunode stack check` and `gpunode stack show`, through the CLI's one error boundary."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from shared_fixtures import REPO, run_cli

from toolkit.lab import inventory as lab_inventory
from toolkit.lab.spec import build_spec
from toolkit.lab.state import NodeState
from toolkit.stack.security import floors

SAMPLE = REPO / "inventories" / "sample"

# The compatibility tests below pin versions below the security floors (the issue's example
# is driver 550.127.05 with container toolkit 1.16.2): they accept every CVE of the floors, so
# only the compatibility rules decide. The floors have their own tests at the end.
ACCEPT_ALL = "gpunode_accepted_risks:\n" + "".join(
    f"  - {{cve: {cve}, reason: compatibility test}}\n"
    for cve in dict.fromkeys(cve for floor in floors() for cve in floor.cves)
)

ISSUE_EXAMPLE = (
    """\
stack:
  driver: {version: "550.127.05", flavour: open}
  cuda: "12.4.1"
  nccl: "2.21.5-1+cuda12.4"
  fabric_manager: auto
  container_toolkit: "1.16.2"
hardware:
  gpu: {model: H100, count: 8, nvswitch: true}
"""
    + ACCEPT_ALL
)


def gpunode(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in-process through its error boundary: (exit code, stdout, stderr)."""
    return run_cli(capsys, *args)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "stack.yml"
    path.write_text(text, encoding="utf-8")
    return path


def test_sample_inventory_is_coherent(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = gpunode(capsys, "stack", "check", str(SAMPLE))
    assert code == 0, out + err
    assert "group h100_sxm: coherent" in out
    assert "group l40s_pcie: coherent" in out


def test_sample_inventory_json_per_group(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = gpunode(capsys, "stack", "check", str(SAMPLE), "--json")
    assert code == 0
    document = json.loads(out)
    assert document["ok"] is True
    assert set(document["groups"]) == {"h100_sxm", "l40s_pcie"}
    for report in document["groups"].values():
        assert report["ok"] is True
        assert len(report["stack_id"]) == 12
        # The sample ships no lock (it is resolved against NVIDIA's repositories by its user).
        assert [v["rule"] for v in report["violations"]] == ["lock.missing"]
        assert all(v["severity"] == "warning" for v in report["violations"])


def test_issue_example_passes_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _err = gpunode(capsys, "stack", "check", str(write(tmp_path, ISSUE_EXAMPLE)))
    assert code == 0
    assert "coherent" in out
    assert "warning" in out and "driver.branch_known" in out  # R550 is not a listed branch


def test_driver_535_with_cuda_12_4_1_exits_2_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, ISSUE_EXAMPLE.replace("550.127.05", "535.104.05"))
    code, out, err = gpunode(capsys, "stack", "check", str(path), "--json")
    assert code == 2
    document = json.loads(out)
    assert document["ok"] is False
    assert set(document) == {"ok", "stack_id", "violations"}
    errors = [v for v in document["violations"] if v["severity"] == "error"]
    assert [v["rule"] for v in errors] == ["cuda.min_driver"]
    for text in ("535.104.05", "12.4.1", "550.54.15"):
        assert text in errors[0]["message"]
    assert set(errors[0]) == {"rule", "message", "severity"}
    assert "incoherent" in err


def test_minor_version_compat_opt_in_passes_with_the_ptx_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = ISSUE_EXAMPLE.replace("550.127.05", "535.104.05").replace(
        'container_toolkit: "1.16.2"',
        'container_toolkit: "1.16.2"\n  cuda_minor_version_compat: true',
    )
    code, out, _err = gpunode(capsys, "stack", "check", str(write(tmp_path, text)))
    assert code == 0
    assert "PTX JIT" in out


B200_PROPRIETARY = (
    """\
stack:
  driver: {version: "580.95.05", flavour: proprietary}
  cuda: "12.8.1"
  nccl: "2.26.2-1+cuda12.8"
  fabric_manager: auto
  container_toolkit: "1.17.8"
  nvlsm: "2025.06.10"
hardware:
  gpu: {model: B200, count: 8, nvswitch: true}
"""
    + ACCEPT_ALL
)

NCCL_12_2_ON_CUDA_13 = (
    """\
stack:
  driver: {version: "580.95.05", flavour: open}
  cuda: "13.0.0"
  nccl: "2.21.5-1+cuda12.2"
  fabric_manager: none
  container_toolkit: "1.17.8"
hardware:
  gpu: {model: L40S, count: 4, nvswitch: false}
"""
    + ACCEPT_ALL
)


@pytest.mark.parametrize(
    ("text", "rule"),
    [(B200_PROPRIETARY, "gpu.open_required"), (NCCL_12_2_ON_CUDA_13, "nccl.cuda_build")],
)
def test_named_failures_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, rule: str
) -> None:
    code, out, _err = gpunode(capsys, "stack", "check", str(write(tmp_path, text)), "--json")
    assert code == 2
    document = json.loads(out)
    assert [v["rule"] for v in document["violations"] if v["severity"] == "error"] == [rule]
    # The same stack with the one value fixed passes.
    fixed = text.replace("proprietary", "open").replace("+cuda12.2", "+cuda13.0")
    code, out, _err = gpunode(capsys, "stack", "check", str(write(tmp_path, fixed)), "--json")
    assert code == 0, out


def test_v100_with_open_modules_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ISSUE_EXAMPLE.replace("model: H100", 'model: "Tesla V100-SXM2-32GB"')
    code, out, _err = gpunode(capsys, "stack", "check", str(write(tmp_path, text)))
    assert code == 2
    assert "gpu.open_unsupported" in out and "INCOHERENT" in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("stack: [unclosed\n", ":1:"),  # bad YAML, with the position
        (ISSUE_EXAMPLE.replace("flavour: open", "flavor: open"),
         "stack.driver.flavor: unknown key; did you mean 'flavour'?"),
        (ISSUE_EXAMPLE.replace("count: 8", 'count: "eight"'), "hardware.gpu.count:"),
        (ISSUE_EXAMPLE.replace("flavour: open", "flavour: opn"), "stack.driver.flavour:"),
    ],
)  # fmt: skip
def test_malformed_file_exits_2_naming_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = write(tmp_path, text)
    for command in ("check", "show"):
        code, out, err = gpunode(capsys, "stack", command, str(path), "--json")
        assert code == 2
        # --json: the error is the one document on stdout, the message also on stderr.
        assert json.loads(out)["error"]["message"] in err
        assert str(path) in err
        assert expected in err
        assert "Traceback" not in err


def test_show_prints_packages_repositories_and_stack_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _err = gpunode(capsys, "stack", "show", str(write(tmp_path, ISSUE_EXAMPLE)))
    assert code == 0
    for os_id in ("ubuntu2204", "ubuntu2404", "debian12"):
        assert os_id in out
        assert (
            "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
            f"https://developer.download.nvidia.com/compute/cuda/repos/{os_id}/x86_64/ /"
        ) in out
    assert "nvidia-driver-550-open=550.127.05-*" in out
    assert "cuda-toolkit-12-4=12.4.1-*" in out
    assert "libnccl2=2.21.5-1+cuda12.4" in out
    assert "nvidia-fabricmanager-550=550.127.05-*" in out
    assert "nvidia-container-toolkit=1.16.2-*" in out
    code, out_json, _err = gpunode(capsys, "stack", "check", str(tmp_path / "stack.yml"), "--json")
    assert json.loads(out_json)["stack_id"] in out


def test_show_deb822_and_one_os(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, ISSUE_EXAMPLE)
    code, out, _err = gpunode(capsys, "stack", "show", str(path), "--os", "debian12", "--deb822")
    assert code == 0
    assert "ubuntu2204" not in out
    assert "Types: deb" in out
    assert "Signed-By: /usr/share/keyrings/cuda-archive-keyring.gpg" in out


def test_show_json_is_one_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = gpunode(
        capsys, "stack", "show", str(write(tmp_path, ISSUE_EXAMPLE)), "--json"
    )
    assert code == 0
    document = json.loads(out)
    assert set(document["resolved"]) == {"ubuntu2204", "ubuntu2404", "debian12"}
    assert document["resolved"]["debian12"]["stack_id"] == document["stack_id"]


def test_show_of_an_incoherent_stack_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, ISSUE_EXAMPLE.replace("550.127.05", "535.104.05"))
    code, out, err = gpunode(capsys, "stack", "show", str(path))
    assert code == 2
    assert "cuda-toolkit-12-4=12.4.1-*" in out
    assert "cuda.min_driver" in err


def test_show_sample_inventory_uses_group_repository_variables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _err = gpunode(capsys, "stack", "show", str(SAMPLE), "--json")
    assert code == 0
    groups = json.loads(out)["groups"]
    h100 = groups["h100_sxm"]["resolved"]["ubuntu2404"]
    assert h100["fabric_manager"]["enabled"] is True
    assert h100["driver"]["pinning_packages"] == {
        "nvidia-driver-pinning-580.159.03": "580.159.03-*"
    }
    l40s = groups["l40s_pcie"]["resolved"]["ubuntu2404"]
    assert l40s["fabric_manager"]["enabled"] is False


@pytest.mark.parametrize("args", [("stack",), ("stack", "check"), ("stack", "show")])
def test_help_has_summary_and_examples(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    code, out, _err = gpunode(capsys, *args, "--help")
    assert code == 0
    assert "Examples:" in out
    assert "gpunode stack" in out


def test_missing_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = gpunode(capsys, "stack", "check", "/no/such/stack.yml")
    assert code == 2
    assert "does not exist" in err


def test_end_to_end_through_python_m_toolkit(tmp_path: Path) -> None:
    path = write(tmp_path, ISSUE_EXAMPLE.replace("flavour: open", "flavor: open"))
    result = subprocess.run(
        [sys.executable, "-m", "toolkit", "stack", "check", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert f"{path}:2: stack.driver.flavor: unknown key; did you mean 'flavour'?" in result.stderr
    sample = subprocess.run(
        [sys.executable, "-m", "toolkit", "stack", "check", str(SAMPLE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert sample.returncode == 0, sample.stdout + sample.stderr


def lab_like_inventory(tmp_path: Path, host_hardware: str) -> Path:
    """A group with a stack, and one host whose host_vars replace `hardware` (as the lab's)."""
    root = tmp_path / "inv"
    (root / "group_vars" / "lab").mkdir(parents=True)
    (root / "host_vars" / "n1").mkdir(parents=True)
    (root / "hosts.yml").write_text(
        "all:\n  children:\n    lab:\n      hosts:\n        n1:\n        n2:\n"
    )
    stack, hardware = ISSUE_EXAMPLE.split("hardware:\n")
    (root / "group_vars" / "lab" / "stack.yml").write_text(stack)
    (root / "group_vars" / "lab" / "hardware.yml").write_text("hardware:\n" + hardware)
    (root / "host_vars" / "n1" / "hardware.yml").write_text(host_hardware)
    return root


def test_inventory_host_vars_are_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    disks = "  data_disks:\n    disks:\n      - {serial: S1}\n"
    root = lab_like_inventory(
        tmp_path, "hardware:\n  gpu: {model: V100, count: 8, nvswitch: true}\n" + disks
    )
    code, out, _err = gpunode(capsys, "stack", "check", str(root), "--json")
    assert code == 2
    violations = json.loads(out)["groups"]["lab"]["violations"]
    errors = [v for v in violations if v["severity"] == "error"]
    assert [v["rule"] for v in errors] == ["gpu.open_unsupported"]
    assert errors[0]["message"].startswith("host n1: ")
    # The same host profile with the group's GPU passes.
    good = lab_like_inventory(
        tmp_path / "ok", "hardware:\n  gpu: {model: H100, count: 8, nvswitch: true}\n" + disks
    )
    code, out, _err = gpunode(capsys, "stack", "check", str(good), "--json")
    assert code == 0, out


def test_inventory_malformed_host_vars_exit_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = lab_like_inventory(tmp_path, "hardware:\n  gpu: {model: H100, count: 8, nvswitch: 1}\n")
    code, out, err = gpunode(capsys, "stack", "check", str(root))
    assert code == 2
    assert out == ""
    assert f"{root / 'host_vars' / 'n1' / 'hardware.yml'}:2: hardware.gpu.nvswitch:" in err


def test_show_sample_fills_every_placeholder_in_urls_and_key_urls(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _err = gpunode(capsys, "stack", "show", str(SAMPLE))
    assert code == 0
    assert "{os}" not in out and "{arch}" not in out and "{deb_arch}" not in out
    assert "/repos/ubuntu2204/x86_64/3bf863cc.pub" in out
    assert "fingerprint EB693B3035CD5710E231E123A4B469963BF863CC" in out


# --- Security floors ------------------------------------------------------------------------

FIXED_STACK = """\
stack:
  driver: {version: "580.159.03", flavour: open}
  cuda: "13.0.2"
  nccl: "2.27.7-1+cuda13.0"
  fabric_manager: none
  container_toolkit: "1.17.7"
hardware:
  gpu: {model: L40S, count: 4, nvswitch: false}
gpunode_accepted_risks:
  - {cve: CVE-2026-24260, reason: "only our own images run here", until: 2027-06-30}
"""


def test_container_toolkit_1_17_7_is_refused_naming_the_cves_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = gpunode(capsys, "stack", "check", str(write(tmp_path, FIXED_STACK)), "--json")
    assert code == 2, out + err
    document = json.loads(out)
    errors = [v for v in document["violations"] if v["severity"] == "error"]
    assert [v["rule"] for v in errors] == ["security.floor"]
    message = errors[0]["message"]
    for text in ("container toolkit 1.17.7", "below 1.17.8", "CVE-2025-23266", "CVE-2025-23267"):
        assert text in message
    assert "a_id/5659" in message  # the bulletin
    # The accepted CVE of the 1.19.1 floor is a warning naming it.
    warnings = [v for v in document["violations"] if v["rule"] == "security.accepted_risk"]
    assert len(warnings) == 1 and "CVE-2026-24260 (until 2027-06-30)" in warnings[0]["message"]
    # Text output: the rule, the version and the CVE on the error line.
    code, out, _err = gpunode(capsys, "stack", "check", str(tmp_path / "stack.yml"))
    assert code == 2
    assert "INCOHERENT" in out and "security.floor: container toolkit 1.17.7" in out


def test_container_toolkit_1_17_7_passes_when_its_cves_are_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = FIXED_STACK + (
        "  - {cve: CVE-2025-23266, reason: CDI mode off, until: 2027-01-01}\n"
        "  - {cve: CVE-2025-23267, reason: CDI mode off, until: 2027-01-01}\n"
    )
    code, out, err = gpunode(capsys, "stack", "check", str(write(tmp_path, text)), "--json")
    assert code == 0, out + err
    violations = json.loads(out)["violations"]
    assert {(v["rule"], v["severity"]) for v in violations} == {
        ("security.accepted_risk", "warning")
    }
    assert any(
        "CVE-2025-23266 (until 2027-01-01): CDI mode off" in v["message"] for v in violations
    )


def _sample_copy(tmp_path: Path) -> Path:
    inventory = tmp_path / "inventory"
    shutil.copytree(SAMPLE, inventory)
    stack = inventory / "group_vars" / "h100_sxm" / "stack.yml"
    stack.write_text(stack.read_text().replace('"1.19.1"', '"1.17.7"'))
    return inventory


def test_an_inventory_group_below_a_floor_is_refused_until_it_accepts_the_cves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = _sample_copy(tmp_path)
    code, out, _err = gpunode(capsys, "stack", "check", str(inventory), "--json")
    assert code == 2
    groups = json.loads(out)["groups"]
    assert groups["l40s_pcie"]["ok"] is True
    rules = [v["rule"] for v in groups["h100_sxm"]["violations"] if v["severity"] == "error"]
    assert rules == ["security.floor", "security.floor"]  # 1.17.8 and 1.19.1
    risks = [
        {"cve": cve, "reason": "images are built in-house", "until": "2027-01-01"}
        for cve in ("CVE-2025-23266", "CVE-2025-23267", "CVE-2026-24260")
    ]
    accepted = inventory / "group_vars" / "h100_sxm" / "accepted_risks.yml"
    accepted.write_text("---\n" + yaml.safe_dump({"gpunode_accepted_risks": risks}))
    code, out, err = gpunode(capsys, "stack", "check", str(inventory))
    assert code == 0, out + err
    assert "group h100_sxm: coherent" in out
    assert "security.accepted_risk: container toolkit 1.17.7" in out
    assert "CVE-2025-23266 (until 2027-01-01): images are built in-house" in out


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"cve": "CVE-2025-23266", "reason": "r", "by": "me"}, "[0].by: unknown key"),
        ({"cve": "CVE-2025-23266"}, "[0].reason: required key is missing"),
        ({"cve": "NVIDIAScape", "reason": "r"}, "[0].cve:"),
        ({"cve": "CVE-2025-23266", "reason": "r", "until": "next year"}, "[0].until:"),
    ],
)
def test_a_malformed_acceptance_exits_2_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: dict[str, str], expected: str
) -> None:
    inventory = _sample_copy(tmp_path)
    accepted = inventory / "group_vars" / "h100_sxm" / "accepted_risks.yml"
    accepted.write_text("---\n" + yaml.safe_dump({"gpunode_accepted_risks": [entry]}))
    code, _out, err = gpunode(capsys, "stack", "check", str(inventory))
    assert code == 2
    assert str(accepted) in err and "group h100_sxm" in err
    assert f"gpunode_accepted_risks{expected}" in err
    assert "Traceback" not in err


def test_the_lab_inventory_accepts_the_risks_of_its_stand_ins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = lab_inventory.render(
        spec=build_spec(name="lab1", nodes=1, disks=0),
        nodes=[NodeState(index=1, name="lab1-node-1", ip="10.213.1.11")],
        key_file=tmp_path / "id_ed25519",
        known_hosts=tmp_path / "known_hosts",
        repo_vars={},
        ca_bundle=None,
        md_available=False,
    )
    directory = lab_inventory.write(tmp_path / "lab", "lab1", files)
    code, out, err = gpunode(capsys, "stack", "check", str(directory), "--json")
    assert code == 0, out + err
    violations = json.loads(out)["groups"]["lab"]["violations"]
    accepted = [v["message"] for v in violations if v["rule"] == "security.accepted_risk"]
    # The default stack: driver 550.127.05 (two R550 floors) and container toolkit 1.16.2
    # (the five toolkit floors above it).
    assert len(accepted) == 7
    assert any("container toolkit 1.16.2" in m and "CVE-2025-23266" in m for m in accepted)
    assert any("driver 550.127.05 (R550)" in m and "CVE-2024-0150" in m for m in accepted)
    assert all("lab stand-in packages carry no NVIDIA code" in m for m in accepted)


def test_host_changing_commands_refuse_a_stack_below_a_floor_unless_accepted(
    tmp_path: Path,
) -> None:
    from toolkit.errors import StackError
    from toolkit.steps.precheck import check_inventory

    inventory = _sample_copy(tmp_path)
    with pytest.raises(StackError) as info:
        check_inventory(inventory)
    assert "container toolkit 1.17.7 is below 1.17.8" in info.value.message
    assert "CVE-2025-23266" in info.value.message and "nothing was changed" in info.value.message
    risks = [
        {"cve": cve, "reason": "in-house images only"}
        for cve in ("CVE-2025-23266", "CVE-2025-23267", "CVE-2026-24260")
    ]
    accepted = inventory / "group_vars" / "h100_sxm" / "accepted_risks.yml"
    accepted.write_text("---\n" + yaml.safe_dump({"gpunode_accepted_risks": risks}))
    found = check_inventory(inventory)
    assert any("risk accepted: CVE-2025-23266 (no end date)" in w for w in found.warnings)
