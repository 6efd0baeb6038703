"""Facts of apt repositories: key fingerprints, signed Release files, Packages indexes.

Pure parsers (OpenPGP public-key packets, clearsigned armor, deb822 paragraphs) next to the
one function that checks a signature with ``gpgv`` and the one that reads a repository's
signed index. Used by the stack lock on the controller and, through a filter, to check a
downloaded key's fingerprint before a node trusts it.

The rule: **only signed bytes are read.** The Release read is exactly what ``gpgv --output``
writes (the data the good signature covers), never the file around it; an InRelease holding
anything but whitespace outside its one signed message, or a Release.gpg holding anything but
signatures, is refused with its reason (:func:`armor_problem`, :func:`signature_problem`).
Every fetch and unpack is bounded (:mod:`toolkit.stack.fetch`); text must be UTF-8 and every
Version a Debian version, or the file is refused naming the byte or the package and field.
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import StackError, clip
from toolkit.printable import printable
from toolkit.stack.debversion import version_problem
from toolkit.stack.fetch import (
    MAX_PACKAGES_BYTES,
    MAX_SIGNED_BYTES,
    Fetch,
    IndexRefused,
    fetch_url,
    gunzip,
    unxz,
)

__all__ = ["Fetch", "IndexRefused", "fetch_url"]  # re-exported: the lock's callers take them

# -- OpenPGP keys -------------------------------------------------------------------------


def dearmor(data: bytes) -> bytes:
    """The binary packets of an ASCII-armored key, or the data itself when already binary."""
    text = data.decode("ascii", errors="replace")
    if "-----BEGIN PGP" not in text:
        return data
    body = text.split("-----BEGIN PGP", 1)[1].split("\n", 1)[1]
    body = body.split("-----END PGP", 1)[0]
    # Armor headers end at the first blank line; the checksum line starts with "=".
    if "\n\n" in body.replace("\r", ""):
        body = body.replace("\r", "").split("\n\n", 1)[1]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    return base64.b64decode("".join(line for line in lines if not line.startswith("=")))


def _packets(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(tag, body) of each OpenPGP packet (RFC 4880 section 4.2)."""
    i = 0
    while i < len(data):
        head = data[i]
        if not head & 0x80:
            raise ValueError("not an OpenPGP packet stream")
        if head & 0x40:  # new format
            tag = head & 0x3F
            first = data[i + 1]
            if first < 192:
                length, i = first, i + 2
            elif first < 224:
                length, i = ((first - 192) << 8) + data[i + 2] + 192, i + 3
            elif first == 255:
                length, i = int.from_bytes(data[i + 2 : i + 6], "big"), i + 6
            else:
                raise ValueError("partial packet lengths are not used in keys")
        else:  # old format
            tag = (head >> 2) & 0x0F
            kind = head & 0x03
            size = {0: 1, 1: 2, 2: 4}.get(kind)
            if size is None:
                raise ValueError("indeterminate packet length")
            length, i = int.from_bytes(data[i + 1 : i + 1 + size], "big"), i + 1 + size
        yield tag, data[i : i + length]
        i += length


def key_fingerprints(data: bytes) -> list[str]:
    """The v4 fingerprints (40 upper-case hex digits) of the primary keys in a key file.

    Raises:
        ValueError: The data is not an OpenPGP key (armored or binary).
    """
    found = []
    for tag, body in _packets(dearmor(data)):
        if tag == 6 and body[:1] == b"\x04":
            digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body)
            found.append(digest.hexdigest().upper())
    if not found:
        raise ValueError("no OpenPGP public key found")
    return found


# -- signed Release ------------------------------------------------------------------------


BEGIN_MESSAGE = b"-----BEGIN PGP SIGNED MESSAGE-----"
BEGIN_SIGNATURE = b"-----BEGIN PGP SIGNATURE-----"
END_SIGNATURE = b"-----END PGP SIGNATURE-----"


def armor_problem(data: bytes) -> str | None:
    """Why a clearsigned file (InRelease) is more than one signed message, or None.

    Allowed: blank lines, then ``-----BEGIN PGP SIGNED MESSAGE-----``, armor headers up to a
    blank line, the signed text (every line starting with ``-`` dash-escaped as ``- ``), one
    ``-----BEGIN PGP SIGNATURE-----`` block up to ``-----END PGP SIGNATURE-----``, then blank
    lines. Anything else is refused, as apt refuses it (apt-pkg/contrib/gpgv.cc,
    ``SplitClearSignedFile``: "does not start with a signed message block", "contains
    unsigned lines", "contains unexpected line starting with a dash"): gpgv itself skips text
    around the armor and still reports a good signature. Lines end in LF or CRLF; trailing
    spaces and tabs are ignored, as OpenPGP's cleartext framework ignores them (RFC 4880 7.1).
    """
    state = "before"
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw.rstrip(b" \t\r")
        where = f"line {number}"
        if state == "before":
            if line == BEGIN_MESSAGE:
                state = "headers"
            elif line:
                if BEGIN_MESSAGE not in data:
                    return "not a clearsigned message (no -----BEGIN PGP SIGNED MESSAGE-----)"
                return f"{where}: unsigned text before -----BEGIN PGP SIGNED MESSAGE-----"
        elif state == "headers":
            if not line:
                state = "text"
            elif line.startswith(b"-"):
                return f"{where}: an armor line among the armor headers"
        elif state == "text":
            if line == BEGIN_SIGNATURE:
                state = "signature"
            elif line.startswith(b"-") and not raw.startswith(b"- "):
                return f"{where}: a line starting with '-' that is not dash-escaped"
        elif state == "signature":
            if line == END_SIGNATURE:
                state = "after"
            elif line.startswith(b"-"):
                return f"{where}: an armor line inside the signature block"
        elif line:
            if line == BEGIN_MESSAGE:
                return f"{where}: a second signed message"
            return f"{where}: unsigned text after -----END PGP SIGNATURE-----"
    unclosed = {
        "headers": "the armor headers never end",
        "text": "no -----BEGIN PGP SIGNATURE----- block",
        "signature": "the signature block is not closed",
    }
    return unclosed.get(state)


def signature_problem(data: bytes) -> str | None:
    """Why a detached signature file (Release.gpg) is more than signatures, or None.

    A Release.gpg holding a signed message instead would be verified by gpgv on its own,
    whatever the Release beside it says; so it must be one ``-----BEGIN PGP SIGNATURE-----``
    block (blank lines around it) or binary OpenPGP, and hold signature packets only
    (tag 2, RFC 4880 5.2).
    """
    if b"-----BEGIN PGP" in data:
        lines = [line.rstrip(b" \t\r") for line in data.split(b"\n")]
        armor = [i for i, line in enumerate(lines) if line.startswith(b"-")]
        if [lines[i] for i in armor] != [BEGIN_SIGNATURE, END_SIGNATURE]:
            return "not one -----BEGIN PGP SIGNATURE----- block"
        if any(lines[: armor[0]]) or any(lines[armor[1] + 1 :]):
            return "text outside its -----BEGIN PGP SIGNATURE----- block"
    try:
        tags = [tag for tag, _body in _packets(dearmor(data))]
    except (ValueError, IndexError):
        return "not OpenPGP data"
    if not tags or set(tags) != {2}:
        return f"packets other than signatures (tags {sorted(set(tags))})"
    return None


def clearsigned_text(data: bytes) -> str:
    """The signed text of a clearsigned message (InRelease), read without checking the
    signature: for looking at a file; :func:`read_index` reads gpgv's output instead.

    Dash-escaping is undone, trailing spaces and tabs dropped and CRLF read as LF, as gpgv
    writes the signed text.

    Raises:
        ValueError: Anything outside the one signed message (:func:`armor_problem`), or
            text that is not UTF-8.
    """
    problem = armor_problem(data)
    if problem is not None:
        raise ValueError(problem)
    lines = [line.rstrip(b" \t\r") for line in data.split(b"\n")]
    start = lines.index(BEGIN_MESSAGE)
    body = lines[lines.index(b"", start) + 1 : lines.index(BEGIN_SIGNATURE)]
    signed = b"".join((line[2:] if line.startswith(b"- ") else line) + b"\n" for line in body)
    return signed.decode("utf-8")


def gpgv(keyring: bytes, signed: bytes, signature: bytes | None = None) -> bytes:
    """Check a signature with ``gpgv`` against a keyring (binary or armored), and return the
    bytes it covers: for a clearsigned file what ``gpgv --output`` writes, for a detached
    signature the signed file itself.

    Args:
        keyring: The repository's key.
        signed: An InRelease (clearsigned) file, or a Release file when ``signature`` is given.
        signature: A detached signature (Release.gpg).

    Raises:
        IndexRefused: Anything outside the one signed message (:func:`armor_problem`), or a
            detached signature that is more than signatures (:func:`signature_problem`).
        StackError: The signature does not verify, or gpgv is missing.
    """
    problem = armor_problem(signed) if signature is None else signature_problem(signature)
    if problem is not None:
        what = "Release.gpg" if signature is not None else "the clearsigned file"
        raise IndexRefused(f"refused: {what}: {problem}; only signed text is read")
    with tempfile.TemporaryDirectory(prefix="gpunode-gpgv-") as tmp:
        root = Path(tmp)
        (root / "key.gpg").write_bytes(dearmor(keyring))
        (root / "signed").write_bytes(signed)
        argv = ["gpgv", "--homedir", tmp, "--keyring", str(root / "key.gpg")]
        if signature is not None:
            (root / "signed.sig").write_bytes(signature)
            argv += [str(root / "signed.sig")]
        else:
            argv += ["--output", str(root / "covered")]
        argv += [str(root / "signed")]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        except FileNotFoundError as err:
            raise StackError("gpgv is not installed (Debian package gpgv)") from err
        except subprocess.TimeoutExpired as err:
            raise StackError("bad signature: gpgv did not finish within 120 s") from err
        if done.returncode != 0:
            detail = done.stderr.strip().splitlines()[-1:] or ["no detail"]
            raise StackError(f"bad signature: {detail[0]}")
        if signature is not None:
            return signed
        return (root / "covered").read_bytes()


def signed_text(data: bytes, where: str) -> str:
    """Text of a repository file as apt's formats define it: UTF-8 (Debian Policy 5.1,
    "control files must be encoded in UTF-8"), lines ending in LF or CRLF (the line ends
    OpenPGP's canonical text treats alike, RFC 4880 5.2.1), read as LF.

    Raises:
        IndexRefused: A byte that is not UTF-8, or a carriage return alone, naming ``where``
            and the byte offset.
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise IndexRefused(
            f"{where}: refused: byte {err.start} (0x{data[err.start]:02x}) is not UTF-8 "
            "(Debian Policy 5.1: control files are UTF-8)"
        ) from None
    lone = _LONE_CR.search(data)
    if lone is not None:
        raise IndexRefused(
            f"{where}: refused: byte {lone.start()} is a carriage return that ends no line"
        )
    return text.replace("\r\n", "\n")


_LONE_CR = re.compile(rb"\r(?!\n)")


def paragraphs(text: str) -> list[dict[str, str]]:
    """deb822 paragraphs (Release, Packages); continuation lines are kept with newlines."""
    out: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    # Lines end at LF alone, as apt splits them (str.splitlines would also split at VT, FF,
    # U+2028 and others); a line of spaces and tabs separates paragraphs (deb822(5)).
    for line in text.split("\n"):
        if not line.strip(" \t"):
            if current:
                out.append(current)
            current, key = {}, ""
        elif line[0] in " \t" and key:
            current[key] += "\n" + line.strip(" \t")
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip(" \t")
    if current:
        out.append(current)
    return out


# -- one repository's signed index -------------------------------------------------------


@dataclass(frozen=True)
class IndexEntry:
    """One package version of a repository's Packages index."""

    package: str
    version: str
    architecture: str
    sha256: str
    filename: str
    depends: str = ""  # the Depends field as the index writes it

    def exact_depends(self) -> list[tuple[str, str]]:
        """(package, version) of every unconditional ``name (= version)`` dependency.

        These are the parts of one build that pin each other (Debian's nvidia-graphics-drivers:
        ``nvidia-driver-libs (= V-1)``, ``nvidia-alternative (= V-1)``); a relation with
        alternatives (``a (= V) | b``) or a range is left to apt.
        """
        out = []
        for relation in self.depends.split(","):
            if "|" in relation:
                continue
            match = _EXACT_RELATION.match(relation)
            if match:
                out.append((match.group(1), match.group(2)))
        return out


# `name[:arch] (= version)` (deb-control(5), "Syntax of relationship fields").
_EXACT_RELATION = re.compile(
    r"^\s*([a-z0-9][a-z0-9.+-]*)(?::[a-z0-9]+)?\s*\(\s*=\s*([^)\s]+)\s*\)\s*\Z"
)


# The Release fields that list index files, strongest first. Debian's repository format
# (https://wiki.debian.org/DebianRepository/Format, "MD5Sum, SHA1, SHA256") lets a Release
# carry any of them; apt trusts only SHA256 and SHA512. NVIDIA's container-toolkit repository
# lists SHA512 alone (tests/data/real/libnvidia-container/*/InRelease); apt-ftparchive writes both.
_RELEASE_HASHES: tuple[tuple[str, Callable[[bytes], str]], ...] = (
    ("SHA512", lambda data: hashlib.sha512(data).hexdigest()),
    ("SHA256", lambda data: hashlib.sha256(data).hexdigest()),
)
# The Packages files read, preferred first (the smallest download), with how each unpacks
# (bounded: at most MAX_PACKAGES_BYTES out, so a decompression bomb is refused by name).
# NVIDIA's container-toolkit repository publishes Packages and Packages.xz, no .gz.
_PACKAGES_FILES: tuple[tuple[str, Callable[[bytes], bytes]], ...] = (
    ("Packages.xz", lambda data: unxz(data, MAX_PACKAGES_BYTES)),
    ("Packages.gz", lambda data: gunzip(data, MAX_PACKAGES_BYTES)),
    ("Packages", lambda data: data),
)


def _listed_files(release: dict[str, str]) -> dict[str, dict[str, str]]:
    """Hash field -> (file name -> hex digest) of every hash field a Release paragraph has."""
    out: dict[str, dict[str, str]] = {}
    for field_name, value in release.items():
        files = {}
        for line in value.splitlines():
            parts = line.split()
            if len(parts) == 3:
                files[parts[2]] = parts[0].lower()
        if files:
            out[field_name] = files
    return out


def _read_packages(base: str, release: dict[str, str], fetch: Fetch) -> tuple[str, bytes]:
    """(URL, Packages bytes) of the Packages file a signed Release vouches for, by its
    strongest listed hash.

    The Packages files listed under that hash are tried in :data:`_PACKAGES_FILES` order; one
    that cannot be read gives way to the next (as apt does), one whose hash differs, or that is
    refused (too large, not a regular file), is an error.
    """
    listed = _listed_files(release)
    for hash_name, digest in _RELEASE_HASHES:
        files = listed.get(hash_name, {})
        candidates = [(name, unpack) for name, unpack in _PACKAGES_FILES if name in files]
        if not candidates:
            continue
        unread = []
        for name, unpack in candidates:
            try:
                data = fetch(base + name, MAX_PACKAGES_BYTES)
            except IndexRefused:
                raise
            except StackError as err:
                unread.append(err.message)
                continue
            if digest(data) != files[name]:
                raise StackError(
                    f"{base}{name}: its {hash_name} differs from the one the signed Release lists"
                )
            try:
                return base + name, unpack(data)
            except ValueError as err:
                raise IndexRefused(f"{base}{name}: cannot unpack it: {err}") from err
        raise StackError(f"{base}: no listed Packages file can be read: {'; '.join(unread)}")
    offered = "; ".join(f"{h}: {', '.join(sorted(f))}" for h, f in listed.items()) or "no files"
    raise StackError(
        f"{base}: the signed Release lists no Packages file (Packages.xz, Packages.gz or "
        f"Packages) under SHA512 or SHA256; it lists {offered}"
    )


def _signed_release(base: str, key: bytes, fetch: Fetch) -> str:
    """The text a good signature over the repository's Release covers: InRelease's signed
    part as gpgv writes it, else Release when Release.gpg verifies it byte for byte."""
    try:
        inrelease = fetch(base + "InRelease", MAX_SIGNED_BYTES)
    except IndexRefused:
        raise
    except StackError:
        where = base + "Release"
        release = fetch(where, MAX_SIGNED_BYTES)
        signature = fetch(base + "Release.gpg", MAX_SIGNED_BYTES)
        try:
            covered = gpgv(key, release, signature)
        except StackError as err:
            raise type(err)(f"{where}: {err.message}") from err
    else:
        where = base + "InRelease"
        try:
            covered = gpgv(key, inrelease)
        except StackError as err:
            raise type(err)(f"{where}: {err.message}") from err
    return signed_text(covered, f"{where} (its signed text)")


def _shown(value: str) -> str:
    return printable(clip(repr(value)))


def read_index(uri: str, key: bytes, fetch: Fetch = fetch_url) -> list[IndexEntry]:
    """Read a flat repository's (``deb <uri> /``) signed package index.

    InRelease (or Release with Release.gpg) is checked with ``gpgv`` against ``key``, and
    only the text the signature covers is read; the Packages file (``Packages.xz``,
    ``Packages.gz`` or plain ``Packages``, whichever the Release lists, in that order) must
    have the digest the Release lists under its strongest hash (SHA512, else SHA256).

    Raises:
        IndexRefused: Anything outside the signed message, a file over its size cap or not a
            regular file, text that is not UTF-8, or a Version that is not a Debian version
            (naming the package and the field).
        StackError: Unreadable, unsigned or badly signed, a Release listing no Packages file
            under SHA512 or SHA256 (naming what it lists), or a Packages file whose digest
            differs from the Release's, naming the URL.
    """
    base = uri if uri.endswith("/") else uri + "/"
    fields = paragraphs(_signed_release(base, key, fetch))
    where, data = _read_packages(base, fields[0] if fields else {}, fetch)
    entries = []
    for p in paragraphs(signed_text(data, where)):
        if "Package" not in p or "Version" not in p:
            continue
        problem = version_problem(p["Version"])
        if problem is not None:
            raise IndexRefused(
                f"{where}: refused: package {_shown(p['Package'])}, field Version: "
                f"{_shown(p['Version'])} is not a Debian version ({problem}; Debian Policy "
                "5.6.12)"
            )
        entries.append(
            IndexEntry(
                package=p["Package"],
                version=p["Version"],
                architecture=p.get("Architecture", ""),
                sha256=p.get("SHA256", ""),
                filename=p.get("Filename", ""),
                depends=p.get("Depends", ""),
            )
        )
    return entries
