"""Handover certificates: the document, the schema, OpenSSH signatures, tampering, compare, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toolkit import cert
from toolkit.errors import ConfigError
from toolkit.profile.floors import AcceptanceSpec
from toolkit.records import passport

RUN_ID = "20260101T120000Z-accept-abc123"
DIGEST = "sha256:" + "ab" * 32


def _keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(path)], check=True
    )
    return path


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The provider's key and somebody else's (private key files; .pub next to them)."""
    folder = tmp_path_factory.mktemp("keys")
    return _keygen(folder / "provider"), _keygen(folder / "other")


def _result(serial_of_gpu1: str = "1650123456789") -> dict[str, Any]:
    return {
        "host": "node-1",
        "gpus": {
            "list": [
                {
                    "index": 0,
                    "name": "NVIDIA H100 80GB HBM3",
                    "serial": "1650000000001",
                    "uuid": "GPU-11111111-2222-3333-4444-555555555555",
                    "bus_id": "00000000:18:00.0",
                    "vbios_version": "96.00.99.00.01",
                },
                {
                    "index": 1,
                    "name": "NVIDIA H100 80GB HBM3",
                    "serial": serial_of_gpu1,
                    "uuid": "GPU-66666666-2222-3333-4444-555555555555",
                    "bus_id": "00000000:2A:00.0",
                    "vbios_version": "96.00.99.00.01",
                },
            ]
        },
        "versions": {
            "driver_loaded": "550.127.05",
            "nccl_loaded": "2.21.5",
            "packages": {"libnccl2": "2.21.5-1+cuda12.4", "nvidia-open": "550.127.05-1"},
        },
        "identity": {
            "hostname": "node-1",
            "dmi": {
                "sys_vendor": "Supermicro",
                "product_name": "SYS-821GE-TNHR",
                "product_serial": "S123456X",
                "board_serial": "OM123456",
            },
            "lsblk": {
                "blockdevices": [
                    {
                        "name": "nvme0n1",
                        "maj:min": "259:0",
                        "type": "disk",
                        "model": "SAMSUNG MZ",
                        "serial": "S64HNE0R100001",
                    },
                    {
                        "name": "nvme1n1",
                        "maj:min": "259:1",
                        "type": "disk",
                        "model": "SAMSUNG MZ",
                        "serial": "S64HNE0R100002",
                    },
                    {
                        "name": "md0",
                        "maj:min": "9:0",
                        "type": "raid0",
                        "model": None,
                        "serial": None,
                    },
                    {
                        "name": "zram0",
                        "maj:min": "253:0",
                        "type": "disk",
                        "model": None,
                        "serial": None,
                    },
                ]
            },
            "by_id": [
                {"name": "md-name-data", "maj_min": "9:0", "target": "md0"},
                {"name": "nvme-SAMSUNG_MZ_S64HNE0R100001", "maj_min": "259:0", "target": "nvme0n1"},
                {
                    "name": "nvme-SAMSUNG_MZ_S64HNE0R100001-part1",
                    "maj_min": "259:3",
                    "target": "nvme0n1p1",
                },
                {"name": "nvme-eui.0025", "maj_min": "259:1", "target": "nvme1n1"},
                {"name": "nvme-SAMSUNG_MZ_S64HNE0R100002", "maj_min": "259:1", "target": "nvme1n1"},
            ],
            "nics": [{"name": "ens1f0", "mac": "b8:3f:d2:00:00:01", "physical": True}],
        },
    }


CHECKS = [
    {
        "name": "gpu.count",
        "ok": True,
        "message": "2 GPUs == 2 expected",
        "measured": 2,
        "floor": None,
        "unit": None,
    },
    {
        "name": "allreduce.busbw@16MiB",
        "ok": True,
        "message": "busbw ok",
        "measured": 0.5,
        "floor": 0.05,
        "unit": "GB/s",
    },
]


def _spec() -> AcceptanceSpec:
    return AcceptanceSpec.model_validate(
        {"allreduce": [{"size": "16MiB", "min_busbw_gbps": 0.05, "source": "lab measurement"}]}
    )


# Three acceptance runs of node-1: its GPU 1 fails in the first (XID on its slot), is replaced
# in the second, and the same board is back in the third (this certificate's run).
EARLIER = ("20251201T120000Z-accept-abc001", "20251215T120000Z-accept-abc002")
RETURNED = "1650999999999"


def _summary(verdict: str = "ready", failed: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "host": "node-1",
        "group": "gpu",
        "verdict": verdict,
        "busbw_at_largest_gbps": 0.5,
        "failed_checks": [{"check": "health.xid", "message": m} for m in failed],
    }


def _passport() -> dict[str, Any]:
    fleet = passport.with_run(
        {},
        EARLIER[0],
        None,
        [(_summary("not-ready", ("XID 79 on 0000:2a:00",)), _result(RETURNED))],
    )
    fleet = passport.with_run(fleet, EARLIER[1], None, [(_summary(), _result())])
    fleet = passport.with_run(fleet, RUN_ID, None, [(_summary(), _result(RETURNED))])
    return passport.summary(passport.passport("node-1", fleet))


def _document(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "host": "node-1",
        "group": "gpu",
        "result": _result(),
        "checks": CHECKS,
        "spec": _spec(),
        "data_serials": ["S64HNE0R100001", "S64HNE0R100002"],
        "stack_id": "0123456789ab",
        "lock_digest": DIGEST,
        "image_id": "sha256:" + "cd" * 32,
        "run_id": RUN_ID,
        "started": "2026-01-01T12:00:00+00:00",
        "finished": "2026-01-01T12:05:00+00:00",
        "valid_until": "2026-01-02T12:05:00Z",
        "result_file": "nodes/node-1.result.json",
        "result_sha256": DIGEST,
        "passport": _passport(),
    }
    args.update(overrides)
    return cert.build(**args)


def _sign_key(private: Path) -> cert.SignKey:
    key = cert.sign_key_from(private, {}, private.parent)
    assert key is not None
    return key


# --- the document -------------------------------------------------------------------------------


def test_document_holds_identity_installed_and_proof() -> None:
    doc = _document()
    assert doc["format"] == "gpunode-cert" and doc["version"] == 2 and doc["verdict"] == "ready"
    ident = doc["identity"]
    assert ident["system"]["product_serial"] == "S123456X"
    assert [g["serial"] for g in ident["gpus"]] == ["1650000000001", "1650123456789"]
    assert ident["gpus"][1]["pci_bus_id"] == "00000000:2A:00.0"
    # Disks: each by-id device once, partitions and the array left out, the data flag by serial.
    assert ident["disks"] == [
        {"name": "nvme0n1", "model": "SAMSUNG MZ", "serial": "S64HNE0R100001", "data": True},
        {"name": "nvme1n1", "model": "SAMSUNG MZ", "serial": "S64HNE0R100002", "data": True},
    ]
    assert ident["nics"] == [{"name": "ens1f0", "mac": "b8:3f:d2:00:00:01", "physical": True}]
    assert doc["installed"]["packages"]["libnccl2"] == "2.21.5-1+cuda12.4"
    assert doc["installed"]["driver_loaded"] == "550.127.05"
    sources = {c["name"]: c["source"] for c in doc["proof"]["checks"]}
    assert sources["allreduce.busbw@16MiB"].startswith("lab measurement")
    assert sources["gpu.count"] == "gpunode acceptance rule"
    assert doc["proof"]["result_sha256"] == DIGEST


def test_the_certificate_carries_the_node_passport_at_issue_time() -> None:
    """Its flags (the failed board back, the swap that took it out and the one that brought
    it back) and every board seen, from runs before this one and this run itself."""
    card = _document()["passport"]
    assert card["observed_runs"] == 3 and card["since"] == EARLIER[0]
    kinds = [f["kind"] for f in card["flags"]]
    assert kinds == ["gpu-swapped", "gpu-swapped", "failed-part-returned"], card["flags"]
    [back] = [f for f in card["flags"] if f["kind"] == "failed-part-returned"]
    assert back["run_id"] == RUN_ID and back["message"].startswith(f"GPU serial {RETURNED} ")
    assert (
        f"failed on node-1 in run {EARLIER[0]}, was gone from it in run {EARLIER[1]}"
        in (back["message"])
    )
    seen = {(g["serial"], g["first_run"], g["last_run"]) for g in card["gpus_seen"]}
    assert (RETURNED, EARLIER[0], RUN_ID) in seen
    assert ("1650123456789", EARLIER[1], EARLIER[1]) in seen
    assert ("1650000000001", EARLIER[0], RUN_ID) in seen and len(seen) == 3
    summary = cert.summary(cert.validate_document(cert.render(_document())))
    assert summary["passport_flags"] == kinds


def test_a_version_1_certificate_without_passport_still_reads() -> None:
    """Certificates issued before the passport are evidence: they stay valid."""
    doc = _document()
    doc.pop("passport")
    doc["version"] = 1
    old = cert.validate_document(cert.render(doc))
    assert old.version == 1 and old.passport is None
    assert cert.summary(old)["passport_flags"] is None
    assert cert.compare(old, cert.validate_document(cert.render(_document()))) == []


def test_render_is_canonical_and_stable() -> None:
    doc = _document()
    assert cert.render(doc) == cert.render(json.loads(cert.render(doc)))
    assert cert.render(doc).endswith(b"}\n")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d.update(verdict="not-ready"), "verdict"),
        (lambda d: d.update(version=3), "version"),
        (lambda d: d.update(version=1), "version 2 carries the node passport"),
        (lambda d: d.pop("passport"), "version 2 carries the node passport"),
        (lambda d: d["passport"].update(observed_runs=0), "passport.observed_runs"),
        (lambda d: d["passport"]["flags"][0].update(run_id="yesterday"), "passport.flags"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d["proof"].update(result_sha256="md5:x"), "proof.result_sha256"),
        (lambda d: d["proof"]["checks"][0].update(ok=False), "failed checks"),
        (lambda d: d["identity"]["gpus"][0].update(index="0"), "identity.gpus[0].index"),
        (lambda d: d["installed"].pop("stack_id"), "installed.stack_id"),
    ],
)
def test_schema_names_the_key_and_rule(change: Any, named: str) -> None:
    doc = _document()
    change(doc)
    with pytest.raises(ValueError, match=named.replace("[", r"\[").replace("]", r"\]")):
        cert.validate_document(cert.render(doc))


def test_a_failed_check_makes_no_certificate() -> None:
    failed = [dict(CHECKS[0], ok=False)]
    with pytest.raises(cert.CertError, match="failed checks"):
        _document(checks=failed)


# --- signing and verifying ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def signed(keys: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    return cert.write(run_dir, "node-1", _document(), _sign_key(keys[0]))


def test_signed_file_is_document_then_openssh_armor(signed: Path) -> None:
    data = signed.read_bytes()
    body, armor = cert.split(data)
    assert json.loads(body)["host"] == "node-1"
    assert armor.startswith(b"-----BEGIN SSH SIGNATURE-----\n")
    assert armor.endswith(b"-----END SSH SIGNATURE-----\n")
    assert signed.name == "node-1.cert" and signed.parent.name == "certs"


def test_verify_accepts_the_provider_key(signed: Path, keys: tuple[Path, Path]) -> None:
    outcome = cert.verify(signed, key=Path(f"{keys[0]}.pub"))
    assert outcome.valid, outcome.problems
    assert outcome.signer == cert.fingerprint(Path(f"{keys[0]}.pub"))


def test_verify_rejects_another_key(signed: Path, keys: tuple[Path, Path]) -> None:
    outcome = cert.verify(signed, key=Path(f"{keys[1]}.pub"))
    assert not outcome.valid
    assert outcome.problems == ["signed by a key that is not the one given"]


def test_verify_with_allowed_signers(signed: Path, keys: tuple[Path, Path], tmp_path: Path) -> None:
    pub = Path(f"{keys[0]}.pub").read_text().strip()
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f'provider@example.com namespaces="gpunode-cert" {pub}\n')
    assert cert.verify(signed, allowed_signers=allowed).valid
    other = Path(f"{keys[1]}.pub").read_text().strip()
    allowed.write_text(f"someone@example.com {other}\n")
    assert not cert.verify(signed, allowed_signers=allowed).valid


def test_plain_openssh_verifies_the_split_file(
    signed: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    """What docs/certificates.md tells a customer without gpunode to do."""
    body, armor = cert.split(signed.read_bytes())
    (tmp_path / "doc.json").write_bytes(body)
    (tmp_path / "doc.json.sig").write_bytes(armor)
    pub = Path(f"{keys[0]}.pub").read_text().strip()
    (tmp_path / "allowed").write_text(f"provider {pub}\n")
    done = subprocess.run(
        [
            "ssh-keygen",
            "-Y",
            "verify",
            "-n",
            "gpunode-cert",
            "-f",
            str(tmp_path / "allowed"),
            "-I",
            "provider",
            "-s",
            str(tmp_path / "doc.json.sig"),
        ],
        input=body,
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def _flips(data: bytes, armor_at: int) -> list[tuple[int, int]]:
    """Every byte of the signature block and its boundary, each changed two ways (a bit flip,
    and a space or a newline, which OpenSSH's base64 reader would skip); in the document a
    dense sample (the first 64 bytes and every 29th byte), each bit-flipped: any change there
    breaks the signature, so the sample stands for the rest."""
    flips = []
    for at in range(armor_at - 2, len(data)):
        flips += [(at, data[at] ^ 0x01), (at, 0x20 if data[at] != 0x20 else 0x0A)]
    for at in sorted(set(range(64)) | set(range(0, armor_at - 2, 29))):
        flips.append((at, data[at] ^ 0x01))
    return flips


def test_every_single_byte_change_fails_and_names_why(
    signed: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    data = signed.read_bytes()
    body, _armor = cert.split(data)
    key = Path(f"{keys[0]}.pub")
    target = tmp_path / "tampered.cert"
    for at, flipped in _flips(data, len(body)):
        changed = bytearray(data)
        changed[at] = flipped
        target.write_bytes(bytes(changed))
        outcome = cert.verify(target, key=key)
        assert not outcome.valid, f"byte {at} {data[at]:#x} -> {flipped:#x} still verifies"
        assert outcome.problems and all(outcome.problems), at


def test_verify_unusable_input_raises_config_error(
    signed: Path, keys: tuple[Path, Path], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        cert.verify(tmp_path / "missing.cert", key=Path(f"{keys[0]}.pub"))
    with pytest.raises(ConfigError, match="private key"):
        cert.verify(signed, key=keys[0])
    with pytest.raises(ConfigError, match="one of them"):
        cert.verify(signed)
    junk = tmp_path / "junk.pub"
    junk.write_text("not a key\n")
    with pytest.raises(ConfigError, match="public key"):
        cert.verify(signed, key=junk)


def test_show_names_the_signer_without_a_key(signed: Path, keys: tuple[Path, Path]) -> None:
    outcome = cert.show(signed)
    assert outcome.valid and outcome.signer == cert.fingerprint(keys[0])
    assert outcome.to_dict()["summary"]["gpu_serials"] == ["1650000000001", "1650123456789"]


# --- the signing key ----------------------------------------------------------------------------


def test_sign_key_from_option_inventory_or_none(keys: tuple[Path, Path], tmp_path: Path) -> None:
    assert cert.sign_key_from(None, {}, tmp_path) is None
    by_var = cert.sign_key_from(None, {"gpunode_sign_key": keys[0].name}, keys[0].parent)
    assert by_var is not None and by_var.path == keys[0] and not by_var.agent
    with pytest.raises(ConfigError, match=r"--sign-key .*no such key file"):
        cert.sign_key_from(tmp_path / "nope", {}, tmp_path)
    with pytest.raises(ConfigError, match="gpunode_sign_key: expected the path"):
        cert.sign_key_from(None, {"gpunode_sign_key": 3}, tmp_path)
    locked = tmp_path / "locked"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "secret", "-f", str(locked)], check=True
    )
    with pytest.raises(ConfigError, match="passphrase"):
        cert.sign_key_from(locked, {}, tmp_path)
    not_key = tmp_path / "x"
    not_key.write_text("hello\n")
    with pytest.raises(ConfigError, match="not an SSH key"):
        cert.sign_key_from(not_key, {}, tmp_path)


def test_agent_key_signs(
    keys: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A public key whose private half is in an ssh-agent (ssh-keygen -Y sign -f KEY.pub)."""
    sock = tmp_path / "agent.sock"
    agent = subprocess.run(
        ["ssh-agent", "-a", str(sock)], capture_output=True, text=True, check=True
    )
    pid = int(agent.stdout.split("SSH_AGENT_PID=")[1].split(";")[0])
    try:
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        pub = Path(f"{keys[1]}.pub")
        with pytest.raises(ConfigError, match="does not hold"):
            cert.sign_key_from(pub, {}, tmp_path)
        subprocess.run(["ssh-add", "-q", str(keys[1])], check=True, capture_output=True)
        key = cert.sign_key_from(pub, {}, tmp_path)
        assert key is not None and key.agent
        path = cert.write(tmp_path, "node-1", _document(), key)
        assert cert.verify(path, key=pub).valid
    finally:
        os.kill(pid, 15)
    monkeypatch.delenv("SSH_AUTH_SOCK")
    with pytest.raises(ConfigError, match="SSH_AUTH_SOCK"):
        cert.sign_key_from(Path(f"{keys[1]}.pub"), {}, tmp_path)


# --- compare ------------------------------------------------------------------------------------


def test_compare_shows_exactly_the_swapped_gpu() -> None:
    before = cert.validate_document(cert.render(_document()))
    after_doc = _document(
        result=_result(serial_of_gpu1="1650999999999"),
        run_id="20260201T120000Z-accept-def456",
    )
    after = cert.validate_document(cert.render(after_doc))
    diffs = cert.compare(before, after)
    identity = [d for d in diffs if d.section == "identity"]
    assert [(d.item, d.key, d.a, d.b) for d in identity] == [
        ("gpu 00000000:2A:00.0", "serial", "1650123456789", "1650999999999")
    ]
    assert not [d for d in diffs if d.section == "installed"]
    assert any(d.key == "run_id" for d in diffs if d.section == "proof")
    assert cert.compare(before, before) == []


def test_compare_names_added_and_removed_disks() -> None:
    before = cert.validate_document(cert.render(_document()))
    after = cert.validate_document(cert.render(_document(data_serials=["S64HNE0R100001"])))
    diffs = [d for d in cert.compare(before, after) if d.section == "identity"]
    assert [(d.item, d.key, d.a, d.b) for d in diffs] == [
        ("disk S64HNE0R100002", "data", True, False)
    ]


# --- the runs folder ----------------------------------------------------------------------------


def test_latest_certificate_per_host(tmp_path: Path) -> None:
    for run_id, hosts in (
        ("20260101T000000Z-accept-aaaaaa", ["node-1", "node-2"]),
        ("20260102T000000Z-accept-bbbbbb", ["node-1"]),
        ("20260103T000000Z-provision-cccccc", []),
    ):
        folder = tmp_path / run_id / cert.FOLDER
        folder.mkdir(parents=True)
        for host in hosts:
            (folder / f"{host}.cert").write_text("x")
    found = cert.latest(tmp_path)
    assert found["node-1"].parts[-3] == "20260102T000000Z-accept-bbbbbb"
    assert found["node-2"].parts[-3] == "20260101T000000Z-accept-aaaaaa"


# --- the CLI ------------------------------------------------------------------------------------


def gpunode(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", "cert", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,  # a FIFO read without a writer would block for ever
        env={**os.environ, "COLUMNS": "200"},
    )


def test_cli_exit_codes(signed: Path, keys: tuple[Path, Path], tmp_path: Path) -> None:
    good = gpunode("verify", str(signed), "--key", f"{keys[0]}.pub", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["valid"] is True
    wrong = gpunode("verify", str(signed), "--key", f"{keys[1]}.pub")
    assert wrong.returncode == 1 and "not the one given" in wrong.stderr
    tampered = tmp_path / "t.cert"
    tampered.write_bytes(signed.read_bytes().replace(b"1650123456789", b"1650123456780"))
    bad = gpunode("verify", str(tampered), "--key", f"{keys[0]}.pub")
    assert bad.returncode == 1 and "changed after signing" in bad.stderr
    assert gpunode("verify", str(tmp_path / "none.cert"), "--key", f"{keys[0]}.pub").returncode == 2
    assert gpunode("verify", str(signed), "--key", str(keys[0])).returncode == 2
    assert gpunode("verify", str(signed)).returncode == 2
    shown = gpunode("show", str(signed), "--json")
    assert shown.returncode == 0 and json.loads(shown.stdout)["document"]["host"] == "node-1"
    same = gpunode("compare", str(signed), str(signed), "--json")
    assert same.returncode == 0 and json.loads(same.stdout)["same"] is True
    assert gpunode("compare", str(signed), str(tampered)).returncode == 1
    assert gpunode("compare", str(signed), str(tmp_path / "none.cert")).returncode == 2


# --- hostile certificates and inputs (issue 27) ---------------------------------------------------


def _signed_bytes(body: bytes, key: Path, tmp_path: Path) -> bytes:
    """``body`` signed as it is, by OpenSSH itself (cert.sign renders a document first)."""
    message = tmp_path / "body"
    message.write_bytes(body)
    subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-n", "gpunode-cert", "-f", str(key), str(message)],
        check=True,
        capture_output=True,
    )
    return body + (tmp_path / "body.sig").read_bytes()


@pytest.mark.parametrize(
    ("number", "problem"), [("NaN", "NaN is not a JSON number"), ("1e999", "out of range")]
)
def test_a_signed_non_number_is_refused_cleanly(
    keys: tuple[Path, Path], tmp_path: Path, number: str, problem: str
) -> None:
    body = cert.render(_document()).replace(b'"measured": 2,', f'"measured": {number},'.encode())
    assert number.encode() in body
    path = tmp_path / "nan.cert"
    path.write_bytes(_signed_bytes(body, keys[0], tmp_path))
    outcome = cert.verify(path, key=Path(f"{keys[0]}.pub"))
    assert not outcome.valid and any(problem in p for p in outcome.problems), outcome.problems
    shown = gpunode("show", str(path))
    assert shown.returncode == 1 and problem in shown.stderr
    compared = gpunode("compare", str(path), str(path))
    assert compared.returncode == 2 and problem in compared.stderr


def test_a_document_nested_100000_deep_is_refused(signed: Path, tmp_path: Path) -> None:
    _body, armor = cert.split(signed.read_bytes())
    path = tmp_path / "deep.cert"
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n" + armor)
    assert any("nested deeper than 64" in p for p in cert.show(path).problems)
    done = gpunode("compare", str(path), str(signed))
    assert done.returncode == 2 and "nested deeper than 64" in done.stderr
    assert "internal error" not in done.stderr


@pytest.mark.parametrize("command", ["show", "verify", "compare"])
@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory"])
def test_a_certificate_that_is_no_regular_file_exits_2(
    keys: tuple[Path, Path], tmp_path: Path, command: str, kind: str
) -> None:
    path = tmp_path / f"{kind}.cert"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    args = {
        "show": [str(path)],
        "verify": [str(path), "--key", f"{keys[0]}.pub"],
        "compare": [str(path), str(path)],
    }[command]
    done = gpunode(command, *args)  # bounded by the helper's timeout: a hang fails the test
    assert done.returncode == 2, done.stderr
    assert str(path) in done.stderr and "internal error" not in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_key_that_is_no_regular_file_exits_2(
    signed: Path, keys: tuple[Path, Path], tmp_path: Path, kind: str
) -> None:
    path = tmp_path / f"{kind}.pub"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    for option in ("--key", "--allowed-signers"):
        done = gpunode("verify", str(signed), option, str(path))
        assert done.returncode == 2, done.stderr
        assert f"{option} {path}: not a regular file" in done.stderr
    with pytest.raises(ConfigError, match="not a regular file"):
        cert.sign_key_from(path, {}, tmp_path)


def test_an_oversized_certificate_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "big.cert"
    path.write_bytes(b" " * (1024 * 1024 + 1))
    done = gpunode("show", str(path))
    assert done.returncode == 2 and "larger than 1048576 bytes" in done.stderr


def _with(*changes: Any) -> cert.Certificate:
    doc = _document()
    for change in changes:
        change(doc["identity"])
    return cert.validate_document(cert.render(doc))


def _cloud_disk(name: str) -> Any:
    return lambda i: i["disks"].append({"name": name, "model": None, "serial": None, "data": False})


def _gpu_without_bus(index: int) -> Any:
    return lambda i: i["gpus"].append(dict(i["gpus"][0], index=index, pci_bus_id=None))


def _same_gpu_again(identity: dict[str, Any]) -> None:
    identity["gpus"].append(dict(identity["gpus"][0]))


@pytest.mark.parametrize(
    ("before", "after", "item"),
    [
        # Cloud and virtio disks have no serial: one of two gone is a difference.
        ([_cloud_disk("vda"), _cloud_disk("vdb")], [_cloud_disk("vdb")], "disk (no serial)"),
        ([_gpu_without_bus(2), _gpu_without_bus(3)], [_gpu_without_bus(3)], "gpu (no pci_bus_id)"),
        # The same record twice (a tampered or broken identity) is not the same identity.
        ([], [_same_gpu_again], "gpu 00000000:18:00.0"),
    ],
)
def test_compare_sees_records_that_share_or_lack_their_key(
    before: list[Any], after: list[Any], item: str
) -> None:
    a, b = _with(*before), _with(*after)
    for left, right in ((a, b), (b, a)):
        identity = [d for d in cert.compare(left, right) if d.section == "identity"]
        assert [(d.item, d.key) for d in identity] == [(item, "record")], identity
        assert (identity[0].a is None) != (identity[0].b is None)  # on one side only, whole
    assert cert.compare(a, a) == [] and cert.compare(b, b) == []


def test_cli_compare_says_a_missing_cloud_disk_differs(
    keys: tuple[Path, Path], tmp_path: Path
) -> None:
    key = _sign_key(keys[0])
    doc = _document()
    (tmp_path / "before").mkdir()
    before = cert.write(tmp_path / "before", "node-1", doc, key)
    doc["identity"]["disks"].append({"name": "vdb", "model": None, "serial": None, "data": False})
    (tmp_path / "after").mkdir()
    after = cert.write(tmp_path / "after", "node-1", doc, key)
    done = gpunode("compare", str(after), str(before))
    assert done.returncode == 1 and "1 difference(s) in identity" in done.stderr
    assert "disk (no serial)" in done.stdout and "name=vdb" in done.stdout
