"""`gpunode stack check` and `gpunode stack show`, through the CLI's one error boundary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from shared_fixtures import run_cli

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "inventories" / "sample"

ISSUE_EXAMPLE = """\
stack:
  driver: {version: "550.127.05", flavour: open}
  cuda: "12.4.1"
  nccl: "2.21.5-1+cuda12.4"
  fabric_manager: auto
  container_toolkit: "1.16.2"
hardware:
  gpu: {model: H100, count: 8, nvswitch: true}
"""


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


B200_PROPRIETARY = """\
stack:
  driver: {version: "580.95.05", flavour: proprietary}
  cuda: "12.8.1"
  nccl: "2.26.2-1+cuda12.8"
  fabric_manager: auto
  container_toolkit: "1.17.8"
hardware:
  gpu: {model: B200, count: 8, nvswitch: true}
"""

NCCL_12_2_ON_CUDA_13 = """\
stack:
  driver: {version: "580.95.05", flavour: open}
  cuda: "13.0.0"
  nccl: "2.21.5-1+cuda12.2"
  fabric_manager: none
  container_toolkit: "1.17.8"
hardware:
  gpu: {model: L40S, count: 4, nvswitch: false}
"""


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
    assert h100["driver"]["pinning_packages"] == {"nvidia-driver-pinning-580.95.05": "580.95.05-*"}
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
