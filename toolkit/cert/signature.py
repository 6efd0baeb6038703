"""Signing and the signature's framing: the provider's key, ``ssh-keygen -Y sign`` and
``-Y verify``, and OpenSSH's armor, byte for byte (PROTOCOL.sshsig)."""

from __future__ import annotations

import base64
import binascii
import os
import re
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.cert.document import FOLDER, SUFFIX, CertError, render
from toolkit.config import read_regular
from toolkit.errors import EXIT_USAGE, ConfigError, ToolkitError
from toolkit.names import name_path

NAMESPACE = "gpunode-cert"  # the signature's namespace (ssh-keygen -Y sign -n)
SIGN_KEY_VAR = "gpunode_sign_key"  # inventory variable (group all) naming the signing key
# OpenSSH's armor (PROTOCOL.sshsig; sshsig.c wraps the base64 at 70 columns).
ARMOR_BEGIN = b"-----BEGIN SSH SIGNATURE-----\n"
ARMOR_END = b"-----END SSH SIGNATURE-----\n"
ARMOR_WIDTH = 70
PRINCIPAL = "gpunode-signer"  # the identity in the allowed-signers file made from --key
SSH_KEYGEN_TIMEOUT_S = 60.0


# --- signing ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SignKey:
    """The provider's signing key: a private key file, or a public key whose private half an
    ssh-agent holds (``$SSH_AUTH_SOCK``)."""

    path: Path
    agent: bool
    fingerprint: str  # ``SHA256:...`` as ssh-keygen -l prints it


def ssh_keygen(
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
    process = ssh_keygen(["-l", "-f", str(path)])
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
    if private and ssh_keygen(["-y", "-P", "", "-f", str(path)]).returncode != 0:
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


def sign(document: Mapping[str, Any], key: SignKey, namespace: str = NAMESPACE) -> bytes:
    """The certificate file's bytes: the canonical document, then its signature's armor.

    ``namespace`` keeps one kind of signed document from passing for another (PROTOCOL.sshsig:
    the namespace is signed with the message): certificates are ``gpunode-cert``, evidence
    packs' manifests ``gpunode-evidence`` (``toolkit.report.evidence``).

    Raises:
        CertError: ssh-keygen could not sign (its message is named).
    """
    body = render(document)
    with tempfile.TemporaryDirectory(prefix="gpunode-cert-") as tmp:
        message = Path(tmp) / "document.json"
        message.write_bytes(body)
        process = ssh_keygen(["-Y", "sign", "-n", namespace, "-f", str(key.path), str(message)])
        sig = message.with_name(message.name + ".sig")
        if process.returncode != 0 or not sig.is_file():
            raise CertError(f"ssh-keygen could not sign with {key.path}: {_first_line(process)}")
        armor = sig.read_bytes()
    if armor != armor_of(dearmor(armor)):
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


def dearmor(armor: bytes) -> bytes:
    if not armor.startswith(ARMOR_BEGIN) or not armor.endswith(ARMOR_END):
        raise ValueError("the signature block does not start and end with OpenSSH's armor lines")
    inner = armor[len(ARMOR_BEGIN) : len(armor) - len(ARMOR_END)]
    try:
        return base64.b64decode(inner.replace(b"\n", b""), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("the signature block is not valid base64") from None


def public_key_line(path: Path) -> str:
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


def check_signature(
    body: bytes, armor: bytes, allowed: Path, principal: str | None, namespace: str = NAMESPACE
) -> tuple[bool, str | None, str]:
    """(verifies, signer fingerprint, why not) with ``ssh-keygen -Y verify`` in ``namespace``."""
    with tempfile.TemporaryDirectory(prefix="gpunode-verify-") as tmp:
        sig = Path(tmp) / "cert.sig"
        sig.write_bytes(armor)
        if principal is None:
            found = ssh_keygen(
                ["-Y", "find-principals", "-n", namespace, "-s", str(sig), "-f", str(allowed)]
            )
            names = found.stdout.decode(errors="replace").split()
            principal = names[0] if found.returncode == 0 and names else None
        if principal is not None:
            process = ssh_keygen(
                [
                    "-Y",
                    "verify",
                    "-n",
                    namespace,
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
                return True, signer_of(process), ""
        # Why not: a signature that holds on its own was made by another key; one that does
        # not was changed, or the document was.
        alone = ssh_keygen(["-Y", "check-novalidate", "-n", namespace, "-s", str(sig)], body)
        if alone.returncode == 0:
            return False, signer_of(alone), "signed by a key that is not the one given"
        return False, None, "the signature does not match the document (changed after signing)"


def signer_of(process: subprocess.CompletedProcess[bytes]) -> str | None:
    match = re.search(rb"key (SHA256:[A-Za-z0-9+/=]+)", process.stdout + process.stderr)
    return match.group(1).decode() if match else None
