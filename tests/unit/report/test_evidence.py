"""The RMA evidence pack (issue 38, item 4): ``gpunode node evidence`` of an ``ecc``-failed
node, built offline from its acceptance run, signed as certificates are, verified offline, and
free of the inventory's and the run folder's secrets."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from shared_fixtures import REPO

from toolkit.acceptance.check import Check
from toolkit.acceptance.memory_health import judge as judge_memory
from toolkit.acceptance.node_runner.facts import parse_xids
from toolkit.cli import cli
from toolkit.facts.nvidia import memory_health, parse_smi_q
from toolkit.lab.faults import ECC_FAULT_UNCORRECTED, XID63_MESSAGE
from toolkit.records import runs
from toolkit.report import evidence
from unit.stack.test_lock_schema import make_inventory, valid_lock, write_raw

REAL = REPO / "tests" / "data" / "real"
# A10 with 4 rows remapped for uncorrectable errors and a remap pending (SOURCES.md).
SMI_Q = (REAL / "nvidia-smi-q.a10.535.129.03.txt").read_text()
BUS = "00000000:07:00.0"
SERIAL = "1324521052681"
UUID = "GPU-73d12ef7-f589-f867-4259-c7090ab44736"
SECRETS = {
    "ansible_become_password": "BECOME-S3CRET-0f1e",
    "ansible_password": "SSH-S3CRET-9a8b",
    "vault_token": "VAULT-S3CRET-7c6d",
}
KEY_FILE_SECRET = "KEYFILE-S3CRET-5e4d"
RUN_SECRETS = ("RESULT-S3CRET-3c2b", "RUNDIR-S3CRET-1a09", "RECORD-S3CRET-ffee")


def _keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(path)], check=True
    )
    return path


def _gpu() -> dict[str, Any]:
    """The A10 of the capture as the runner lists it, with the lab's `ecc` fault's count of
    uncorrectable errors since the driver loaded."""
    tree = parse_smi_q(SMI_Q)[BUS]
    gpu = {
        "index": 0,
        "name": "NVIDIA A10",
        "uuid": UUID,
        "bus_id": BUS,
        "serial": SERIAL,
        "vbios_version": "94.02.5C.00.03",
        **memory_health(tree),
    }
    gpu["ecc_uncorrected_volatile"] = ECC_FAULT_UNCORRECTED
    gpu["ecc_uncorrected_aggregate"] = ECC_FAULT_UNCORRECTED
    return gpu


def _checks(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    checks = [Check(f.check, f.ok, f.message, measured=f.measured) for f in judge_memory([gpu])]
    checks.append(Check("gpu.count", True, "1 GPU", measured=1, floor=1))
    return [c.to_dict() for c in checks]


class Lab:
    """An inventory (group g: n1 and n2) with planted secrets, a signing key and a runs folder
    holding one acceptance run: n1 failed by the `ecc` fault, n2 ready."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.inventory = make_inventory(root / "inv")
        (self.inventory / "hosts.yml").write_text(
            "all:\n  children:\n    g:\n      hosts:\n        n1:\n        n2:\n"
        )
        write_raw(self.inventory, valid_lock())
        self.key = _keygen(root / "sign_ed25519")
        self.public = root / "sign_ed25519.pub"
        ssh_key = root / "node_key"
        ssh_key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_FILE_SECRET}\n")
        (self.inventory / "group_vars" / "all").mkdir(parents=True)
        (self.inventory / "group_vars" / "all" / "connection.yml").write_text(
            yaml.safe_dump(
                {
                    **SECRETS,
                    "ansible_ssh_private_key_file": str(ssh_key),
                    "gpunode_sign_key": str(self.key),
                }
            )
        )
        self.state = root / "state"
        self.run_id = runs.new_run_id("accept")
        self.run_dir = self.state / "runs" / self.run_id
        (self.run_dir / "nodes").mkdir(parents=True)
        gpu = _gpu()
        xid_line = "2026-11-01T10:15:02+0000 node kernel: NVRM: Xid (PCI:0000:07:00): 63, "
        xids = parse_xids(xid_line + XID63_MESSAGE + "\n")
        result = {
            "host": "n1",
            "gpus": {"ok": True, "count": 1, "list": [gpu], "smi_q": SMI_Q},
            "versions": {"driver_loaded": "535.129.03"},
            "kernel_log": {"command": "journalctl -k -b", "ok": True, "xid_events": xids},
            "dcgm": {"level": 2, "rc": 0, "error": None, "raw_output": '{"tests": []}'},
            "identity": {"dmi": {"sys_vendor": "Lab", "product_serial": "SYS-0001"}},
            "env": {"API_TOKEN": RUN_SECRETS[0]},
        }
        (self.run_dir / "nodes" / "n1.result.json").write_text(json.dumps(result))
        (self.run_dir / "nodes" / "n1.secret").write_text(RUN_SECRETS[1])
        checks = _checks(gpu)
        failed = [
            {"check": c["name"], **{k: c[k] for k in ("message", "measured", "floor")}}
            | {k: c[k] for k in ("failure_class", "action", "action_source")}
            for c in checks
            if not c["ok"]
        ]
        ready = [c for c in checks if c["name"] == "gpu.count"]
        record = {
            "run_id": self.run_id,
            "started": "2026-11-01T10:00:00+00:00",
            "finished": "2026-11-01T10:20:00+00:00",
            "hooks": [{"vault": RUN_SECRETS[2]}],
            "nodes": [
                {
                    "host": "n1",
                    "group": "g",
                    "verdict": "not-ready",
                    "checks": checks,
                    "failed_checks": failed,
                },
                {"host": "n2", "group": "g", "verdict": "ready", "checks": ready},
            ],
        }
        (self.run_dir / runs.RECORD).write_text(json.dumps(record))

    def invoke(self, *args: str) -> Result:
        return CliRunner().invoke(cli, ["node", "evidence", *args])

    def make(self) -> tuple[Path, dict[str, Any]]:
        result = self.invoke("n1", "-i", str(self.inventory), "--json")
        assert result.exit_code == 0, (result.output, result.exception)
        document = json.loads(result.stdout)
        return Path(document["path"]), document

    def verify(self, archive: Path) -> tuple[int, dict[str, Any]]:
        result = self.invoke("--verify", str(archive), "--key", str(self.public), "--json")
        return result.exit_code, json.loads(result.stdout)


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Lab:
    made = Lab(tmp_path)
    monkeypatch.setenv("GPUNODE_STATE_DIR", str(made.state))
    return made


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {
            m.name.split("/", 1)[1]: tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar
        }


def _repack(archive: Path, change: Any) -> Path:
    """The archive with its members changed by ``change`` (name -> bytes, in place)."""
    with tarfile.open(archive, "r:gz") as tar:
        folder = tar.getmembers()[0].name.split("/", 1)[0]
    files = _members(archive)
    change(files)
    out = archive.with_name("changed" + evidence.SUFFIX)
    out.write_bytes(evidence.archive(folder, sorted(files.items()), 0))
    return out


def test_the_pack_holds_the_failure_its_raw_evidence_and_a_manifest(lab: Lab) -> None:
    path, document = lab.make()
    assert path == lab.run_dir / "evidence" / "n1.evidence.tar.gz"
    files = _members(path)
    names = [m["name"] for m in document["manifest"]["members"]]
    assert set(files) == {*names, "MANIFEST.json", "MANIFEST.json.sig"}
    for name in ("failure.json", "nvidia-smi-q.txt", "xid.json", "memory.json", "dcgm.json"):
        assert name in names, name
    assert {"passport.json", "stack.lock.yml", "SHA256SUMS", "summary.txt"} <= set(names)
    assert files["nvidia-smi-q.txt"] == SMI_Q.encode()
    failure = json.loads(files["failure.json"])
    assert failure["verdict"] == "not-ready" and failure["failure_class"] == "hardware"
    by_name = {c["name"]: c for c in failure["failed_checks"]}
    assert "health.ecc" in by_name and "health.row_remap" in by_name, sorted(by_name)
    ecc = by_name["health.ecc"]
    assert ecc["failure_class"] == "hardware" and ecc["action"] and ecc["action_source"]
    assert ecc["measured"] and ecc["source"] == "gpunode acceptance rule"
    assert failure["parts"] == [
        {
            "index": 0,
            "name": "NVIDIA A10",
            "serial": SERIAL,
            "uuid": UUID,
            "pci_bus_id": BUS,
            "vbios_version": "94.02.5C.00.03",
        }
    ]
    commands = [s["command"] for s in failure["next_steps"]]
    assert "sudo nvidia-bug-report.sh" in commands and "sudo dcgmi diag -r 4 -j -i 0" in commands
    assert all("NVIDIA" in s["source"] for s in failure["next_steps"])
    (event,) = json.loads(files["xid.json"])["events"]
    assert event["xid"] == 63 and event["time"] == "2026-11-01T10:15:02Z"
    (memory,) = json.loads(files["memory.json"])
    assert memory["remapped_rows"] == {
        "correctable": 0,
        "uncorrectable": 4,
        "pending": True,
        "failure": False,
    }
    assert memory["ecc_uncorrected_volatile"] == ECC_FAULT_UNCORRECTED
    part = json.loads(files["passport.json"])
    assert part["serials"] == [SERIAL] and part["history"][0]["failed_here"] is True
    assert files["stack.lock.yml"] == (lab.inventory / "group_vars/g/stack.lock.yml").read_bytes()
    origins = {m["name"]: m["origin"] for m in document["manifest"]["members"]}
    assert origins["nvidia-smi-q.txt"] == "recorded" and origins["stack.lock.yml"] == "inventory"
    assert "health.ecc" in files["summary.txt"].decode()


def test_the_pack_is_deterministic_and_verifies(lab: Lab) -> None:
    path, _document = lab.make()
    first = path.read_bytes()
    path, _document = lab.make()
    assert path.read_bytes() == first
    code, checked = lab.verify(path)
    assert code == 0 and checked["valid"] and checked["problems"] == [], checked
    with tarfile.open(path, "r:gz") as tar:
        entries = tar.getmembers()
    assert [e.name for e in entries] == sorted(e.name for e in entries)
    assert all(e.isreg() and e.name.startswith(f"n1-{lab.run_id}/") for e in entries)
    # sha256sum -c reads SHA256SUMS as it is.
    files = _members(path)
    for line in files["SHA256SUMS"].decode().splitlines():
        digest, name = line.split("  ")
        assert evidence.hashlib.sha256(files[name]).hexdigest() == digest


@pytest.mark.parametrize(
    "name",
    [
        "failure.json",
        "nvidia-smi-q.txt",
        "xid.json",
        "memory.json",
        "dcgm.json",
        "passport.json",
        "stack.lock.yml",
        "SHA256SUMS",
        "summary.txt",
        "MANIFEST.json",
    ],
)
def test_a_changed_byte_in_any_member_fails_naming_it(lab: Lab, name: str) -> None:
    path, _document = lab.make()

    def flip(files: dict[str, bytes]) -> None:
        data = bytearray(files[name])
        data[len(data) // 2] ^= 0x01
        files[name] = bytes(data)

    code, checked = lab.verify(_repack(path, flip))
    assert code == 1 and not checked["valid"]
    assert any(name in problem for problem in checked["problems"]), checked["problems"]


def test_a_removed_or_added_member_fails(lab: Lab) -> None:
    path, _document = lab.make()
    code, checked = lab.verify(_repack(path, lambda files: files.pop("xid.json")))
    assert code == 1
    assert checked["problems"] == ["member xid.json: listed in the manifest, not in the archive"], (
        checked
    )
    code, checked = lab.verify(_repack(path, lambda files: files.update({"extra.txt": b"x"})))
    assert code == 1
    assert checked["problems"] == ["member extra.txt: in the archive, not in the manifest"]
    code, checked = lab.verify(_repack(path, lambda files: files.pop("MANIFEST.json.sig")))
    assert code == 1 and "no MANIFEST.json.sig" in checked["problems"][0]


def test_another_key_or_a_corrupt_archive_fails(lab: Lab, tmp_path: Path) -> None:
    path, _document = lab.make()
    other = _keygen(tmp_path / "other_ed25519")
    result = lab.invoke("--verify", str(path), "--key", f"{other}.pub", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["problems"] == [
        "MANIFEST.json: signed by a key that is not the one given"
    ]
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(path.read_bytes()[:-40])
    code, checked = lab.verify(broken)
    assert code == 1 and "not a readable gzip'd tar" in checked["problems"][0]


def test_a_link_or_an_unsafe_name_is_refused(lab: Lab, tmp_path: Path) -> None:
    path, _document = lab.make()
    files = _members(path)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in sorted(files.items()):
            entry = tarfile.TarInfo(f"pack/{name}")
            entry.size = len(data)
            tar.addfile(entry, io.BytesIO(data))
        link = tarfile.TarInfo("pack/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
        tar.addfile(link)
        outside = tarfile.TarInfo("../escape")
        tar.addfile(outside, io.BytesIO(b""))
    hostile = tmp_path / "hostile.tar.gz"
    hostile.write_bytes(gzip.compress(buffer.getvalue()))
    code, checked = lab.verify(hostile)
    assert code == 1
    assert "member pack/link: not a regular file" in checked["problems"]
    assert "member ../escape: not a file of the folder pack/" in checked["problems"]


def test_no_secret_of_the_inventory_or_the_run_folder_is_in_the_pack(lab: Lab) -> None:
    path, _document = lab.make()
    with gzip.open(path) as handle:
        raw = handle.read()
    key_body = [
        line.encode()
        for line in lab.key.read_text().splitlines()
        if line and not line.startswith("-----")
    ]
    planted = [*SECRETS.values(), KEY_FILE_SECRET, *RUN_SECRETS]
    for secret in [s.encode() for s in planted] + key_body:
        assert secret not in raw, secret
        assert secret not in path.read_bytes()


def test_a_ready_node_is_refused_and_verify_takes_no_node(lab: Lab) -> None:
    result = lab.invoke("n2", "-i", str(lab.inventory))
    assert isinstance(result.exception, evidence.EvidenceError)
    assert result.exception.exit_code == 1
    assert "n2 was ready in run" in result.exception.message
    result = lab.invoke("n1", "--verify", "x.tar.gz", "--key", str(lab.public))
    assert "--verify takes the archive" in str(result.exception)


def test_plain_mode_prints_the_archive_path(lab: Lab) -> None:
    result = lab.invoke("n1", "-i", str(lab.inventory))
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout.strip().endswith("n1.evidence.tar.gz")
