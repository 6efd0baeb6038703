"""`gpunode lab`: bad options are refused with the option and the rule, before Docker."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from toolkit import cli
from toolkit.cli.lab import status_table


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["lab", *args])
    captured = capsys.readouterr()
    code = exit_info.value.code
    assert isinstance(code, int)
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["up", "--nodes", "0"], "--nodes: Input should be greater than or equal to 1"),
        (["up", "--gpus", "12"], "--gpus: Input should be less than or equal to 8"),
        (["up", "--gpu-model", "K80"], "unknown GPU model 'K80'"),
        (["up", "--disk-size", "big"], "disk size 'big'"),
        (["up", "--disk-size", "1M"], "at least 64M"),
        (["up", "--fault", "1:eec"], "did you mean 'ecc'"),
        (["up", "--fault", "ecc"], "expected NODE_INDEX:FAULT"),
        (["up", "--nodes", "2", "--fault", "3:xid"], "names node 3"),
        (["up", "--name", "Bad Name"], "--name: String should match pattern"),
        (["up", "--slow-net-rate", "fast"], "--slow-net-rate"),
    ],
)
def test_up_refuses_bad_options(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.setenv("GPUNODE_LAB_HOME", str(tmp_path))
    code, out, err = _run(capsys, *args, "--no-ca-bundle")
    assert code == 2
    assert message in err
    assert out == ""
    assert "Traceback" not in err
    assert not any(tmp_path.iterdir())  # nothing was created


def test_up_refuses_a_ca_bundle_that_is_not_pem(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUNODE_LAB_HOME", str(tmp_path / "home"))
    bundle = tmp_path / "bundle.crt"
    bundle.write_text("not a certificate\n")
    code, _out, err = _run(capsys, "up", "--ca-bundle", str(bundle))
    assert code == 2
    assert "not a PEM file" in err


def test_fault_needs_faults_or_clear(capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = _run(capsys, "fault", "1")
    assert code == 2
    assert "--clear" in err


def test_status_of_a_lab_that_does_not_exist(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GPUNODE_LAB_HOME", str(tmp_path))
    code, out, err = _run(capsys, "status", "--name", "nope", "--json")
    assert code == 1
    # --json: one error document on stdout, the message for people on stderr.
    error = json.loads(out)["error"]
    assert error["exit_code"] == 1 and "there is no lab 'nope'" in error["message"]
    assert "there is no lab 'nope'" in err


def test_help_lists_the_lab_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = _run(capsys, "--help")
    assert code == 0
    for command in ("up", "status", "ssh", "down", "fault", "restart"):
        assert command in out


def test_every_fault_is_listed_by_both_helps(capsys: pytest.CaptureFixture[str]) -> None:
    """`lab fault --help` explains, and `lab up --help` names, every fault of the one registry."""
    from toolkit.lab.faults import FAULTS

    _code, fault_help, _err = _run(capsys, "fault", "--help")
    _code, up_help, _err = _run(capsys, "up", "--help")
    for name, meaning in FAULTS.items():
        assert f"  {name} " in fault_help, name
        assert " ".join(meaning.split())[:30] in " ".join(fault_help.split()), name
        assert name in " ".join(up_help.split()), name


def _lab_document(name: str, faults: list[str], disks: int) -> dict[str, object]:
    nodes = []
    for index in (1, 2):
        serials = [f"S{name[:4].upper()}N{index:02d}D{d:02d}" for d in range(disks)]
        nodes.append(
            {
                "name": f"{name}-node-{index}",
                "ip": f"172.31.255.{10 + index}",
                "container": "running",
                "ssh": index == 1,
                "faults": faults if index == 1 else [],
                "disks": [
                    {
                        "serial": serial,
                        "by_id": f"/dev/disk/by-id/nvme-LAB_NVMe_SSD_{serial}",
                        "kernel_name": f"nvme{d + 1}n1",
                    }
                    for d, serial in enumerate(serials)
                ],
            }
        )
    return {"name": name, "server": {"url": "http://172.31.255.2:8080"}, "nodes": nodes}


@pytest.mark.parametrize(
    ("name", "faults"),
    [
        ("gpunode", []),
        ("a-long-lab-name-for-ci", ["ecc", "xid", "nvlink-down", "slow-data", "runfile-driver"]),
    ],
)
def test_the_lab_table_fits_80_columns_and_shows_every_serial(name: str, faults: list[str]) -> None:
    document = _lab_document(name, faults, disks=3)
    buffer = StringIO()
    Console(file=buffer, width=80).print(status_table(document))
    lines = buffer.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    text = buffer.getvalue()
    for node in document["nodes"]:  # type: ignore[attr-defined]
        for disk in node["disks"]:
            assert f"{disk['serial']} ({disk['kernel_name']})" in text
    assert "/dev/disk/by-id" not in text and "…" not in text
