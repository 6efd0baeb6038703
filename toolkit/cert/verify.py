"""Reading certificates: the file, its parts and document, verifying its signature, and the
newest certificate of every host among the recorded runs."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.cert.document import FOLDER, SUFFIX, Certificate, render, validate_document
from toolkit.cert.signature import (
    NAMESPACE,
    PRINCIPAL,
    armor_of,
    check_signature,
    dearmor,
    public_key_line,
    signer_of,
    split,
    ssh_keygen,
)
from toolkit.config import parse_json, read_regular
from toolkit.errors import ConfigError
from toolkit.records import runs


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
        parsed.armor_ok = parsed.armor == armor_of(dearmor(parsed.armor))
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
        allowed, principal = signers_file(Path(tmp), key, allowed_signers)
        parsed = parse(data)
        outcome = Verification(path=path, document=parsed.document, problems=parsed.problems)
        if parsed.body is None or parsed.armor is None or not parsed.armor_ok:
            return outcome  # OpenSSH's reader would accept more forms than a certificate has
        ok, outcome.signer, why = check_signature(parsed.body, parsed.armor, allowed, principal)
        if not ok:
            outcome.problems.insert(0, why)
    return outcome


def signers_file(
    tmp: Path, key: Path | None, allowed_signers: Path | None, namespace: str = NAMESPACE
) -> tuple[Path, str | None]:
    """The allowed-signers file ssh-keygen reads, in ``tmp``, and the principal to verify as
    (None: whoever the file names): from the provider's public key (``--key``, allowed for
    ``namespace`` only) or a copy of an allowed-signers file.

    Raises:
        ConfigError: Neither or both given, or the key or file cannot be read.
    """
    if (key is None) == (allowed_signers is None):
        raise ConfigError(
            "give the provider's public key (--key) or --allowed-signers, one of them"
        )
    allowed = tmp / "allowed_signers"
    if key is not None:
        allowed.write_text(
            f'{PRINCIPAL} namespaces="{namespace}" {public_key_line(key)}\n', encoding="utf-8"
        )
        return allowed, PRINCIPAL
    assert allowed_signers is not None
    # ssh-keygen reads a copy: the file itself may be a FIFO or a device.
    try:
        signers = read_regular(allowed_signers, "allowed-signers file")
    except ConfigError as err:
        raise ConfigError(f"--allowed-signers {err.message}") from None
    allowed.write_bytes(signers)
    return allowed, None


def show(path: Path) -> Verification:
    """Read a certificate and check that its signature matches it, naming the signer's key
    fingerprint but trusting no key (``ssh-keygen -Y check-novalidate``)."""
    parsed = parse(read(path))
    outcome = Verification(path=path, document=parsed.document, problems=parsed.problems)
    if parsed.body is not None and parsed.armor is not None and parsed.armor_ok:
        with tempfile.TemporaryDirectory(prefix="gpunode-show-") as tmp:
            sig = Path(tmp) / "cert.sig"
            sig.write_bytes(parsed.armor)
            alone = ssh_keygen(
                ["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig)], parsed.body
            )
        if alone.returncode == 0:
            outcome.signer = signer_of(alone)
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
        # What was measured and what was not, with why (certificates before the three
        # outcomes say nothing of it: None).
        "not_measured": [
            f"{c.name}: {c.reason}" for c in document.proof.checks if c.outcome == "not_measured"
        ]
        if any(c.outcome for c in document.proof.checks)
        else None,
        "require_measured": document.proof.require_measured,
        # Version 1 certificates carry no passport (None); otherwise its flags' kinds.
        "passport_flags": [f.kind for f in document.passport.flags] if document.passport else None,
    }


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
