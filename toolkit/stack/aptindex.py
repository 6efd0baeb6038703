"""Facts of apt repositories: key fingerprints, signed Release files, Packages indexes.

Pure parsers (OpenPGP public-key packets, clearsigned text, deb822 paragraphs, dpkg version
order) next to the one function that checks a signature with ``gpgv`` and the one that reads
a repository's signed index. Used by the stack lock on the controller and, through a filter,
to check a downloaded key's fingerprint before a node trusts it.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import lzma
import re
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import StackError

# (url) -> bytes; tests pass file:// URLs, sites http(s).
Fetch = Callable[[str], bytes]


def fetch_url(url: str) -> bytes:
    """Read a URL (http, https or file).

    Raises:
        StackError: It cannot be read.
    """
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data: bytes = response.read()
            return data
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise StackError(f"cannot read {url}: {err}") from err


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


def clearsigned_text(data: bytes) -> str:
    """The signed text of a clearsigned message (InRelease), dash-escaping undone."""
    text = data.decode("utf-8")
    if not text.startswith("-----BEGIN PGP SIGNED MESSAGE-----"):
        return text
    body = text.split("\n\n", 1)[1].split("\n-----BEGIN PGP SIGNATURE-----", 1)[0]
    lines = (line[2:] if line.startswith("- ") else line for line in body.split("\n"))
    return "\n".join(lines) + "\n"


def gpgv(keyring: bytes, signed: bytes, signature: bytes | None = None) -> None:
    """Check a signature with ``gpgv`` against a keyring (binary or armored).

    Args:
        keyring: The repository's key.
        signed: An InRelease (clearsigned) file, or a Release file when ``signature`` is given.
        signature: A detached signature (Release.gpg).

    Raises:
        StackError: The signature does not verify, or gpgv is missing.
    """
    with tempfile.TemporaryDirectory(prefix="gpunode-gpgv-") as tmp:
        root = Path(tmp)
        (root / "key.gpg").write_bytes(dearmor(keyring))
        (root / "signed").write_bytes(signed)
        argv = ["gpgv", "--homedir", tmp, "--keyring", str(root / "key.gpg")]
        if signature is not None:
            (root / "signed.sig").write_bytes(signature)
            argv += [str(root / "signed.sig")]
        argv += [str(root / "signed")]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except FileNotFoundError as err:
            raise StackError("gpgv is not installed (Debian package gpgv)") from err
        if done.returncode != 0:
            detail = done.stderr.strip().splitlines()[-1:] or ["no detail"]
            raise StackError(f"bad signature: {detail[0]}")


def paragraphs(text: str) -> list[dict[str, str]]:
    """deb822 paragraphs (Release, Packages); continuation lines are kept with newlines."""
    out: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                out.append(current)
            current, key = {}, ""
        elif line[0] in " \t" and key:
            current[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            current[key] = value.strip()
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
# The Packages files read, preferred first (the smallest download), with how each unpacks.
# NVIDIA's container-toolkit repository publishes Packages and Packages.xz, no .gz.
_PACKAGES_FILES: tuple[tuple[str, Callable[[bytes], bytes]], ...] = (
    ("Packages.xz", lzma.decompress),
    ("Packages.gz", gzip.decompress),
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


def _read_packages(base: str, release: dict[str, str], fetch: Fetch) -> bytes:
    """The Packages text a signed Release vouches for, by its strongest listed hash.

    The Packages files listed under that hash are tried in :data:`_PACKAGES_FILES` order; one
    that cannot be read gives way to the next (as apt does), one whose hash differs is an error.
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
                data = fetch(base + name)
            except StackError as err:
                unread.append(err.message)
                continue
            if digest(data) != files[name]:
                raise StackError(
                    f"{base}{name}: its {hash_name} differs from the one the signed Release lists"
                )
            try:
                return unpack(data)
            except (lzma.LZMAError, OSError, EOFError) as err:
                raise StackError(f"{base}{name}: cannot unpack it: {err}") from err
        raise StackError(f"{base}: no listed Packages file can be read: {'; '.join(unread)}")
    offered = "; ".join(f"{h}: {', '.join(sorted(f))}" for h, f in listed.items()) or "no files"
    raise StackError(
        f"{base}: the signed Release lists no Packages file (Packages.xz, Packages.gz or "
        f"Packages) under SHA512 or SHA256; it lists {offered}"
    )


def read_index(uri: str, key: bytes, fetch: Fetch = fetch_url) -> list[IndexEntry]:
    """Read a flat repository's (``deb <uri> /``) signed package index.

    InRelease (or Release with Release.gpg) is checked with ``gpgv`` against ``key``; the
    Packages file (``Packages.xz``, ``Packages.gz`` or plain ``Packages``, whichever the Release
    lists, in that order) must have the digest the Release lists under its strongest hash
    (SHA512, else SHA256).

    Raises:
        StackError: Unreadable, unsigned or badly signed, a Release listing no Packages file
            under SHA512 or SHA256 (naming what it lists), or a Packages file whose digest
            differs from the Release's, naming the URL.
    """
    base = uri if uri.endswith("/") else uri + "/"
    try:
        inrelease = fetch(base + "InRelease")
    except StackError:
        release = fetch(base + "Release")
        try:
            gpgv(key, release, fetch(base + "Release.gpg"))
        except StackError as err:
            raise StackError(f"{base}Release: {err.message}") from err
        text = release.decode("utf-8")
    else:
        try:
            gpgv(key, inrelease)
        except StackError as err:
            raise StackError(f"{base}InRelease: {err.message}") from err
        text = clearsigned_text(inrelease)
    fields = paragraphs(text)
    data = _read_packages(base, fields[0] if fields else {}, fetch)
    return [
        IndexEntry(
            package=p["Package"],
            version=p["Version"],
            architecture=p.get("Architecture", ""),
            sha256=p.get("SHA256", ""),
            filename=p.get("Filename", ""),
            depends=p.get("Depends", ""),
        )
        for p in paragraphs(data.decode("utf-8"))
        if "Package" in p and "Version" in p
    ]
