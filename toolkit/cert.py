"""Handover certificates: per node, signed evidence that a customer can verify offline.

A certificate is one file, ``<run>/certs/<host>.cert`` (docs/certificates.md): the canonical
JSON document (the schema below, ``format: gpunode-cert``, ``version: 1``) followed by an
OpenSSH signature of exactly those bytes (``ssh-keygen -Y sign -n gpunode-cert``) in
OpenSSH's own armor. Only nodes an acceptance run found ready get one: the schema allows no
other verdict and no failed check, so a certificate cannot say "not ready".

Signing and verifying are ``ssh-keygen``'s; this module only frames its input and output.
What it adds is strictness around the framing: the document must be in its canonical form and
the armor byte for byte what OpenSSH writes, so that a change of any single byte of the file
(even one that OpenSSH's base64 reader would skip, such as a newline turned into a space)
makes verification fail and say why.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolkit import runs
from toolkit.config import format_loc, parse_json, read_regular
from toolkit.errors import EXIT_USAGE, ConfigError, ToolkitError
from toolkit.inventory import name_path

FORMAT = "gpunode-cert"
VERSION = 1
NAMESPACE = "gpunode-cert"  # the signature's namespace (ssh-keygen -Y sign -n)
FOLDER = "certs"  # inside a run folder
SUFFIX = ".cert"
SIGN_KEY_VAR = "gpunode_sign_key"  # inventory variable (group all) naming the signing key
# OpenSSH's armor (PROTOCOL.sshsig; sshsig.c wraps the base64 at 70 columns).
ARMOR_BEGIN = b"-----BEGIN SSH SIGNATURE-----\n"
ARMOR_END = b"-----END SSH SIGNATURE-----\n"
ARMOR_WIDTH = 70
PRINCIPAL = "gpunode-signer"  # the identity in the allowed-signers file made from --key
SHA256_RE = r"^sha256:[0-9a-f]{64}\Z"
SSH_KEYGEN_TIMEOUT_S = 60.0
# lsblk TYPE values of block devices that sit on disks rather than being disks (lsblk(8)).
_STACKED_TYPES = ("part", "lvm", "crypt", "dm", "mpath", "md", "rom")


class CertError(ToolkitError):
    """A certificate could not be made (the signing key is unusable, ssh-keygen failed)."""


# --- the schema -------------------------------------------------------------------------------


class _Model(BaseModel):
    # Python's re: the patterns are gpunode's own (runs.RUN_ID anchors with \Z), and `$` would
    # accept a trailing newline there.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, regex_engine="python-re")


class System(_Model):
    """The machine as its firmware names it (DMI)."""

    vendor: str | None
    product_name: str | None
    product_serial: str | None
    board_serial: str | None


class Gpu(_Model):
    """One GPU as ``nvidia-smi --query-gpu`` reports it."""

    index: int = Field(ge=0)
    name: str | None
    serial: str | None
    uuid: str | None
    pci_bus_id: str | None
    vbios_version: str | None


class Disk(_Model):
    """One disk reachable under /dev/disk/by-id; ``data`` when the profile lists its serial."""

    name: str
    model: str | None
    serial: str | None
    data: bool


class Nic(_Model):
    """One network interface (loopback and bridges left out); ``physical``: a bus device."""

    name: str
    mac: str | None
    physical: bool


class Identity(_Model):
    """What the node is."""

    hostname: str
    system: System
    gpus: list[Gpu]
    disks: list[Disk]
    nics: list[Nic]


class Installed(_Model):
    """What the node runs."""

    stack_id: str = Field(pattern=r"^[0-9a-f]{12}\Z")
    lock_digest: str | None = Field(pattern=SHA256_RE)
    packages: dict[str, str | None]
    driver_loaded: str | None
    nccl_loaded: str | None
    image_id: str | None


class CheckRecord(_Model):
    """One acceptance check: its result, what it measured, the floor and where that comes from."""

    name: str
    ok: bool
    message: str
    measured: Any
    floor: Any
    unit: str | None
    source: str


class Proof(_Model):
    """What the run proved, and where its raw result is kept."""

    run_id: str = Field(pattern=runs.RUN_ID.pattern)
    started: str
    finished: str
    valid_until: str | None
    checks: list[CheckRecord] = Field(min_length=1)
    result_file: str
    result_sha256: str = Field(pattern=SHA256_RE)


class Certificate(_Model):
    """The document of a certificate (version 1)."""

    format: Literal["gpunode-cert"]
    version: Literal[1]
    verdict: Literal["ready"]
    host: str
    group: str
    identity: Identity
    installed: Installed
    proof: Proof

    @model_validator(mode="after")
    def _all_passed(self) -> Certificate:
        failed = [c.name for c in self.proof.checks if not c.ok]
        if failed:
            raise ValueError(
                f"a ready certificate cannot carry failed checks ({', '.join(failed)})"
            )
        return self


def validate_document(text: bytes | str) -> Certificate:
    """The document checked against the schema.

    Raises:
        ValueError: Every problem, each naming its key path and the rule.
    """
    try:
        return Certificate.model_validate_json(text)
    except ValidationError as err:
        problems = []
        for error in err.errors(include_url=False):
            loc = [p for p in error["loc"] if not (isinstance(p, str) and "[" in p)]
            problems.append(f"{format_loc(loc)}: {error['msg']}")
        raise ValueError("; ".join(problems)) from None


def render(document: Mapping[str, Any]) -> bytes:
    """The canonical bytes of a document: sorted keys, two-space indent, ASCII, one newline."""
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True, allow_nan=False)
    return (text + "\n").encode("ascii")


# --- building a document ---------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes (what ``sha256sum`` prints)."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def disks_from(
    lsblk: Mapping[str, Any] | None,
    by_id: Iterable[Mapping[str, Any]],
    data_serials: Collection[str],
) -> list[dict[str, Any]]:
    """The node's disks: every device that a /dev/disk/by-id name reaches and that lsblk
    lists as a top-level device (partitions, arrays, mappings and optical drives left out),
    with lsblk's model and serial. Sorted by serial, then name."""
    devices = {str(d.get("maj:min")): d for d in (lsblk or {}).get("blockdevices") or []}
    seen: dict[str, str] = {}
    for link in by_id:
        devnum = str(link.get("maj_min"))
        seen.setdefault(devnum, str(link.get("target") or link.get("name")))
    disks = []
    for devnum, name in seen.items():
        device = devices.get(devnum)
        if device is None:
            continue  # a partition (lsblk -d lists only top-level devices)
        kind = str(device.get("type") or "")
        if kind in _STACKED_TYPES or kind.startswith("raid"):
            continue
        serial = device.get("serial") or None
        disks.append(
            {
                "name": name,
                "model": device.get("model") or None,
                "serial": serial,
                "data": serial is not None and serial in data_serials,
            }
        )
    return sorted(disks, key=lambda d: (d["serial"] or "", d["name"]))


def check_source(name: str, floor: Any, spec: Any, group: str) -> str:
    """Where a check's floor comes from: the floor's own source, the profile, or the rule."""
    where = f"group {group} hardware.acceptance"
    if getattr(spec, "profile", None):
        where += f" (profile {spec.profile})"
    if "busbw@" in name:
        floors = spec.multi_node_allreduce if name.startswith("multinode") else spec.allreduce
        size = name.split("@", 1)[1]
        for candidate in floors:
            if candidate.size == size and candidate.source:
                return f"{candidate.source}; {where}"
        return where
    return where if floor is not None else "gpunode acceptance rule"


def build(
    *,
    host: str,
    group: str,
    result: Mapping[str, Any],
    checks: Sequence[Mapping[str, Any]],
    spec: Any,
    data_serials: Collection[str],
    stack_id: str,
    lock_digest: str | None,
    image_id: str | None,
    run_id: str,
    started: str,
    finished: str,
    valid_until: str | None,
    result_file: str,
    result_sha256: str,
) -> dict[str, Any]:
    """The certificate document of one ready node, checked against the schema.

    Raises:
        CertError: The node's facts do not make a valid certificate (named).
    """
    identity = result.get("identity") or {}
    dmi = identity.get("dmi") or {}
    versions = result.get("versions") or {}
    loaded = versions.get("driver_loaded")
    document = {
        "format": FORMAT,
        "version": VERSION,
        "verdict": "ready",
        "host": host,
        "group": group,
        "identity": {
            "hostname": str(identity.get("hostname") or result.get("host") or host),
            "system": {
                "vendor": dmi.get("sys_vendor"),
                "product_name": dmi.get("product_name"),
                "product_serial": dmi.get("product_serial"),
                "board_serial": dmi.get("board_serial"),
            },
            "gpus": [
                {
                    "index": gpu.get("index"),
                    "name": gpu.get("name"),
                    "serial": gpu.get("serial"),
                    "uuid": gpu.get("uuid"),
                    "pci_bus_id": gpu.get("bus_id"),
                    "vbios_version": gpu.get("vbios_version"),
                }
                for gpu in (result.get("gpus") or {}).get("list") or []
            ],
            "disks": disks_from(identity.get("lsblk"), identity.get("by_id") or [], data_serials),
            "nics": [
                {"name": n.get("name"), "mac": n.get("mac"), "physical": bool(n.get("physical"))}
                for n in identity.get("nics") or []
            ],
        },
        "installed": {
            "stack_id": stack_id,
            "lock_digest": lock_digest,
            "packages": dict(sorted((versions.get("packages") or {}).items())),
            "driver_loaded": loaded if isinstance(loaded, str) else None,
            "nccl_loaded": versions.get("nccl_loaded"),
            "image_id": image_id,
        },
        "proof": {
            "run_id": run_id,
            "started": started,
            "finished": finished,
            "valid_until": valid_until,
            "checks": [
                {
                    "name": c["name"],
                    "ok": c["ok"],
                    "message": c["message"],
                    "measured": c.get("measured"),
                    "floor": c.get("floor"),
                    "unit": c.get("unit"),
                    "source": check_source(c["name"], c.get("floor"), spec, group),
                }
                for c in checks
            ],
            "result_file": result_file,
            "result_sha256": result_sha256,
        },
    }
    # The document as it will be read back: JSON types only (a tuple becomes a list).
    document = json.loads(render(document))
    try:
        validate_document(render(document))
    except ValueError as err:
        raise CertError(f"{host}: no certificate: {err}") from None
    return document


# --- signing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignKey:
    """The provider's signing key: a private key file, or a public key whose private half an
    ssh-agent holds (``$SSH_AUTH_SOCK``)."""

    path: Path
    agent: bool
    fingerprint: str  # ``SHA256:...`` as ssh-keygen -l prints it


def _ssh_keygen(
    argv: Sequence[str], stdin: bytes | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``ssh-keygen`` without a terminal (a passphrase prompt fails instead of hanging)."""
    try:
        return subprocess.run(
            ["ssh-keygen", *argv],
            input=stdin if stdin is not None else b"",
            capture_output=True,
            timeout=SSH_KEYGEN_TIMEOUT_S,
            check=False,
            start_new_session=True,
            env=dict(env) if env is not None else None,
        )
    except FileNotFoundError:
        raise ToolkitError(
            "ssh-keygen is not installed (OpenSSH 8.2 or later signs and verifies certificates)",
            EXIT_USAGE,
        ) from None
    except subprocess.TimeoutExpired:
        raise CertError(f"ssh-keygen {argv[0]} {argv[1]} did not finish in time") from None


def _first_line(process: subprocess.CompletedProcess[bytes]) -> str:
    text = (process.stderr or process.stdout).decode(errors="replace").strip()
    return text.splitlines()[-1] if text else f"ssh-keygen exited {process.returncode}"


def _is_private(path: Path) -> bool:
    return b"PRIVATE KEY" in read_regular(path, "SSH key")[:200]


def fingerprint(path: Path) -> str:
    """A key's ``SHA256:...`` fingerprint (private or public key file).

    Raises:
        ConfigError: Not a key ssh-keygen can read.
    """
    process = _ssh_keygen(["-l", "-f", str(path)])
    parts = process.stdout.decode(errors="replace").split()
    if process.returncode != 0 or len(parts) < 2:
        raise ConfigError(f"{path}: not an SSH key ({_first_line(process)})")
    return parts[1]


def sign_key_from(
    explicit: Path | None, inventory_vars: Mapping[str, Any], base: Path
) -> SignKey | None:
    """The signing key: ``--sign-key`` when given, else the inventory's ``gpunode_sign_key``
    (a relative path is relative to the inventory folder); None when neither is set.

    Raises:
        ConfigError: The key file is missing or not a key, or a public key is given without an
            ssh-agent holding its private half.
    """
    if explicit is not None:
        path, where = explicit.expanduser(), "--sign-key"
    else:
        value = inventory_vars.get(SIGN_KEY_VAR)
        if value in (None, ""):
            return None
        if not isinstance(value, str):
            raise ConfigError(f"{SIGN_KEY_VAR}: expected the path of a key file, got {value!r}")
        path, where = Path(value).expanduser(), SIGN_KEY_VAR
        if not path.is_absolute():
            path = base / path
    if not path.exists():
        raise ConfigError(f"{where} {path}: no such key file")
    try:
        private = _is_private(path)
    except ConfigError as err:
        raise ConfigError(f"{where} {err.message}") from None
    key_print = fingerprint(path)
    if private and _ssh_keygen(["-y", "-P", "", "-f", str(path)]).returncode != 0:
        raise ConfigError(
            f"{where} {path} has a passphrase and nothing can ask for it during a run: add it "
            "to the ssh-agent and give its public key (.pub) instead"
        )
    if not private:
        if not os.environ.get("SSH_AUTH_SOCK"):
            raise ConfigError(
                f"{where} {path} is a public key: its private half must be in an ssh-agent, "
                "and SSH_AUTH_SOCK is not set"
            )
        listed = subprocess.run(
            ["ssh-add", "-l"], capture_output=True, text=True, timeout=30, check=False
        )
        if key_print not in listed.stdout:
            raise ConfigError(
                f"{where} {path} is a public key ({key_print}) that the ssh-agent does not hold"
            )
    return SignKey(path=path, agent=not private, fingerprint=key_print)


def armor_of(signature: bytes) -> bytes:
    """OpenSSH's armor of a binary signature (the one and only byte form accepted)."""
    text = base64.b64encode(signature).decode("ascii")
    lines = [text[i : i + ARMOR_WIDTH] for i in range(0, len(text), ARMOR_WIDTH)]
    return ARMOR_BEGIN + "".join(f"{line}\n" for line in lines).encode("ascii") + ARMOR_END


def sign(document: Mapping[str, Any], key: SignKey) -> bytes:
    """The certificate file's bytes: the canonical document, then its signature's armor.

    Raises:
        CertError: ssh-keygen could not sign (its message is named).
    """
    body = render(document)
    with tempfile.TemporaryDirectory(prefix="gpunode-cert-") as tmp:
        message = Path(tmp) / "document.json"
        message.write_bytes(body)
        process = _ssh_keygen(["-Y", "sign", "-n", NAMESPACE, "-f", str(key.path), str(message)])
        sig = message.with_name(message.name + ".sig")
        if process.returncode != 0 or not sig.is_file():
            raise CertError(f"ssh-keygen could not sign with {key.path}: {_first_line(process)}")
        armor = sig.read_bytes()
    if armor != armor_of(_dearmor(armor)):
        raise CertError("ssh-keygen wrote a signature in an unexpected form")
    return body + armor


def write(run_dir: Path, host: str, document: Mapping[str, Any], key: SignKey) -> Path:
    """Sign one document and write it as ``<run>/certs/<host>.cert``."""
    folder = run_dir / FOLDER
    folder.mkdir(exist_ok=True)
    path = name_path(folder, host, SUFFIX)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(sign(document, key))
    tmp.replace(path)
    return path


# --- reading and verifying --------------------------------------------------------------------


def split(data: bytes) -> tuple[bytes, bytes]:
    """(document, armor) of a certificate file.

    Raises:
        ValueError: No signature block where one must be.
    """
    marker = b"\n" + ARMOR_BEGIN
    at = data.find(marker)
    if at < 0:
        raise ValueError("no OpenSSH signature block after the document")
    return data[: at + 1], data[at + 1 :]


def _dearmor(armor: bytes) -> bytes:
    if not armor.startswith(ARMOR_BEGIN) or not armor.endswith(ARMOR_END):
        raise ValueError("the signature block does not start and end with OpenSSH's armor lines")
    inner = armor[len(ARMOR_BEGIN) : len(armor) - len(ARMOR_END)]
    try:
        return base64.b64decode(inner.replace(b"\n", b""), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the signature block is not valid base64") from None


def read(path: Path) -> bytes:
    """A certificate file's bytes (a regular file of at most its kind's size limit).

    Raises:
        ConfigError: The file cannot be read, is not a regular file or is too large
            (unusable input, exit 2).
    """
    return read_regular(path, "certificate")


@dataclass
class Parsed:
    """A certificate file taken apart, its signature not yet checked."""

    body: bytes | None = None  # the signed bytes (None: no signature block found)
    armor: bytes | None = None
    armor_ok: bool = False  # the armor is byte for byte OpenSSH's
    document: Certificate | None = None
    problems: list[str] = field(default_factory=list)


def parse(data: bytes) -> Parsed:
    """A certificate file's parts and document, with every problem of its form and schema."""
    parsed = Parsed()
    try:
        parsed.body, parsed.armor = split(data)
    except ValueError as err:
        parsed.problems.append(str(err))
        return parsed
    try:
        parsed.armor_ok = parsed.armor == armor_of(_dearmor(parsed.armor))
        if not parsed.armor_ok:
            parsed.problems.append("the signature block is not byte for byte OpenSSH's armor")
    except ValueError as err:
        parsed.problems.append(str(err))
    try:
        raw = parse_json(parsed.body.decode("ascii"), "the document")
    except UnicodeDecodeError:
        parsed.problems.append("the document is not JSON: not ASCII (its canonical form is)")
        return parsed
    except ConfigError as err:
        parsed.problems.append(err.message)
        return parsed
    if not isinstance(raw, dict):
        parsed.problems.append("the document is not a JSON object")
        return parsed
    if render(raw) != parsed.body:
        parsed.problems.append("the document is not in its canonical form (docs/certificates.md)")
    try:
        parsed.document = validate_document(parsed.body)
    except ValueError as err:
        parsed.problems.append(f"the document does not follow the schema: {err}")
    return parsed


@dataclass
class Verification:
    """The outcome of verifying one certificate file."""

    path: Path
    document: Certificate | None
    problems: list[str] = field(default_factory=list)
    signer: str | None = None  # the fingerprint of the key that made the signature

    @property
    def valid(self) -> bool:
        """The signature verifies with the given key and the document follows the schema."""
        return not self.problems and self.document is not None

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "path": str(self.path),
            "valid": self.valid,
            "problems": self.problems,
            "signer": self.signer,
            "summary": summary(self.document) if self.document else None,
        }


def _public_key_line(path: Path) -> str:
    """The one public key in a file given as ``--key``.

    Raises:
        ConfigError: Missing, unreadable, a private key, or not one public key.
    """
    try:
        text = read_regular(path, "SSH key").decode("utf-8", errors="replace")
    except ConfigError as err:
        raise ConfigError(f"--key {err.message}") from None
    if "PRIVATE KEY" in text:
        raise ConfigError(f"--key {path} is a private key; give its public key (the .pub file)")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) != 1 or not _key_blob_matches(lines[0]):
        raise ConfigError(
            f"--key {path}: expected one OpenSSH public key line (ssh-ed25519 AAAA... comment)"
        )
    return lines[0]


def _key_blob_matches(line: str) -> bool:
    """The line is ``<type> <base64 blob>``, the blob starting with its own type name
    (RFC 4253 section 6.6: a length-prefixed string)."""
    parts = line.split()
    if len(parts) < 2:
        return False
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (binascii.Error, ValueError):
        return False
    size = int.from_bytes(blob[:4], "big")
    return len(blob) > 4 + size and blob[4 : 4 + size] == parts[0].encode()


def _check_signature(
    body: bytes, armor: bytes, allowed: Path, principal: str | None
) -> tuple[bool, str | None, str]:
    """(verifies, signer fingerprint, why not) with ``ssh-keygen -Y verify``."""
    with tempfile.TemporaryDirectory(prefix="gpunode-verify-") as tmp:
        sig = Path(tmp) / "cert.sig"
        sig.write_bytes(armor)
        if principal is None:
            found = _ssh_keygen(
                ["-Y", "find-principals", "-n", NAMESPACE, "-s", str(sig), "-f", str(allowed)]
            )
            names = found.stdout.decode(errors="replace").split()
            principal = names[0] if found.returncode == 0 and names else None
        if principal is not None:
            process = _ssh_keygen(
                [
                    "-Y",
                    "verify",
                    "-n",
                    NAMESPACE,
                    "-f",
                    str(allowed),
                    "-I",
                    principal,
                    "-s",
                    str(sig),
                ],
                stdin=body,
            )
            if process.returncode == 0:
                return True, _signer(process), ""
        # Why not: a signature that holds on its own was made by another key; one that does
        # not was changed, or the document was.
        alone = _ssh_keygen(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig)], body)
        if alone.returncode == 0:
            return False, _signer(alone), "signed by a key that is not the one given"
        return False, None, "the signature does not match the document (changed after signing)"


def _signer(process: subprocess.CompletedProcess[bytes]) -> str | None:
    match = re.search(rb"key (SHA256:[A-Za-z0-9+/=]+)", process.stdout + process.stderr)
    return match.group(1).decode() if match else None


def verify(
    path: Path, *, key: Path | None = None, allowed_signers: Path | None = None
) -> Verification:
    """Verify a certificate file with the provider's public key or an allowed-signers file.

    Raises:
        ConfigError: Unusable input: the file or key cannot be read, or neither or both of
            ``key`` and ``allowed_signers`` are given.
    """
    if (key is None) == (allowed_signers is None):
        raise ConfigError(
            "give the provider's public key (--key) or --allowed-signers, one of them"
        )
    data = read(path)
    with tempfile.TemporaryDirectory(prefix="gpunode-signers-") as tmp:
        if key is not None:
            allowed = Path(tmp) / "allowed_signers"
            allowed.write_text(
                f'{PRINCIPAL} namespaces="{NAMESPACE}" {_public_key_line(key)}\n', encoding="utf-8"
            )
            principal: str | None = PRINCIPAL
        else:
            assert allowed_signers is not None
            # ssh-keygen reads a copy: the file itself may be a FIFO or a device.
            try:
                signers = read_regular(allowed_signers, "allowed-signers file")
            except ConfigError as err:
                raise ConfigError(f"--allowed-signers {err.message}") from None
            allowed, principal = Path(tmp) / "allowed_signers", None
            allowed.write_bytes(signers)
        parsed = parse(data)
        outcome = Verification(path=path, document=parsed.document, problems=parsed.problems)
        if parsed.body is None or parsed.armor is None or not parsed.armor_ok:
            return outcome  # OpenSSH's reader would accept more forms than a certificate has
        ok, outcome.signer, why = _check_signature(parsed.body, parsed.armor, allowed, principal)
        if not ok:
            outcome.problems.insert(0, why)
    return outcome


def show(path: Path) -> Verification:
    """Read a certificate and check that its signature matches it, naming the signer's key
    fingerprint but trusting no key (``ssh-keygen -Y check-novalidate``)."""
    parsed = parse(read(path))
    outcome = Verification(path=path, document=parsed.document, problems=parsed.problems)
    if parsed.body is not None and parsed.armor is not None and parsed.armor_ok:
        with tempfile.TemporaryDirectory(prefix="gpunode-show-") as tmp:
            sig = Path(tmp) / "cert.sig"
            sig.write_bytes(parsed.armor)
            alone = _ssh_keygen(
                ["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig)], parsed.body
            )
        if alone.returncode == 0:
            outcome.signer = _signer(alone)
        else:
            outcome.problems.insert(0, "the signature does not match the document")
    return outcome


def summary(document: Certificate) -> dict[str, Any]:
    """The facts a person checks first."""
    ident = document.identity
    return {
        "host": document.host,
        "hostname": ident.hostname,
        "verdict": document.verdict,
        "product": ident.system.product_name,
        "system_serial": ident.system.product_serial,
        "gpus": len(ident.gpus),
        "gpu_serials": [g.serial for g in ident.gpus],
        "disks": [d.serial for d in ident.disks],
        "stack_id": document.installed.stack_id,
        "driver_loaded": document.installed.driver_loaded,
        "image_id": document.installed.image_id,
        "run_id": document.proof.run_id,
        "finished": document.proof.finished,
        "valid_until": document.proof.valid_until,
        "checks": len(document.proof.checks),
    }


# --- comparing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One difference between two certificates."""

    section: str  # identity, installed or proof
    item: str  # e.g. "gpu 00000000:18:00.0", "disk S1A2BN01D00", "packages"
    key: str
    a: Any
    b: Any

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "section": self.section,
            "item": self.item,
            "key": self.key,
            "a": self.a,
            "b": self.b,
        }


def _diff_fields(
    section: str, item: str, left: Mapping[str, Any], right: Mapping[str, Any]
) -> list[Difference]:
    return [
        Difference(section, item, key, left.get(key), right.get(key))
        for key in sorted(set(left) | set(right))
        if left.get(key) != right.get(key)
    ]


Records = Sequence[Mapping[str, Any]]


def _diff_records(section: str, label: str, key: str, a: Records, b: Records) -> list[Difference]:
    """Two lists of records compared as multisets of whole records.

    Records present on both sides (as often on each) are the same. Of the rest, a record
    whose ``key`` (a PCI slot, a serial) is set and found once on each side is one item that
    changed, shown field by field; any other record (no key, as cloud disks have no serial,
    or a key found more than once) is shown whole, as only in ``a`` or only in ``b``.
    """
    only_b = [dict(r) for r in b]
    only_a = []
    for record in map(dict, a):
        if record in only_b:
            only_b.remove(record)
        else:
            only_a.append(record)

    def keys(records: list[dict[str, Any]]) -> list[Any]:
        return [r.get(key) for r in records]

    out = []
    for record in only_a:
        value = record.get(key)
        item = f"{label} {value if value is not None else '(no ' + key + ')'}"
        if value is not None and keys(only_a).count(value) == 1 and keys(only_b).count(value) == 1:
            other = only_b.pop(keys(only_b).index(value))
            out += _diff_fields(section, item, record, other)
        else:
            out.append(Difference(section, item, "record", record, None))
    for record in only_b:
        value = record.get(key)
        item = f"{label} {value if value is not None else '(no ' + key + ')'}"
        out.append(Difference(section, item, "record", None, record))
    return out


def compare(a: Certificate, b: Certificate) -> list[Difference]:
    """What differs between two certificates: GPUs, disks, NICs and checks compared as
    multisets of whole records (a changed one matched by PCI slot, serial or name, so a
    swapped board shows as its serial and UUID), then what is installed and what was proven."""
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    ia, ib = da["identity"], db["identity"]
    diffs: list[Difference] = []
    if ia["hostname"] != ib["hostname"]:
        diffs.append(Difference("identity", "node", "hostname", ia["hostname"], ib["hostname"]))
    diffs += _diff_fields("identity", "system", ia["system"], ib["system"])
    diffs += _diff_records("identity", "gpu", "pci_bus_id", ia["gpus"], ib["gpus"])
    diffs += _diff_records("identity", "disk", "serial", ia["disks"], ib["disks"])
    diffs += _diff_records("identity", "nic", "name", ia["nics"], ib["nics"])
    pa, pb = da["installed"].pop("packages"), db["installed"].pop("packages")
    diffs += _diff_fields("installed", "stack", da["installed"], db["installed"])
    diffs += _diff_fields("installed", "packages", pa, pb)
    checks_a, checks_b = da["proof"].pop("checks"), db["proof"].pop("checks")
    diffs += _diff_fields("proof", "run", da["proof"], db["proof"])
    diffs += _diff_records("proof", "check", "name", checks_a, checks_b)
    return diffs


def load(path: Path) -> Certificate:
    """A certificate's document, read for comparison (its signature is not checked here).

    Raises:
        ConfigError: The file cannot be read or holds no valid document (exit 2).
    """
    parsed = parse(read(path))
    if parsed.document is None:
        raise ConfigError(f"{path}: not a readable certificate: {'; '.join(parsed.problems)}")
    return parsed.document


# --- certificates in the runs folder ----------------------------------------------------------


def latest(runs_dir: Path | None = None) -> dict[str, Path]:
    """The newest certificate of every host among the recorded runs."""
    found: dict[str, Path] = {}
    for info in reversed(runs.list_runs(runs_dir)):
        folder = info.path / FOLDER
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            found.setdefault(path.name[: -len(SUFFIX)], path)
    return found
