"""Only signed bytes are trusted (issue 41, class 2): the index reader reads exactly the text
the signature covers, refuses anything outside the armor by name, reads every legal Debian
version and refuses an illegal one, and bounds every fetch and unpack.

The attacks are made on NVIDIA's real signed container-toolkit index
(``tests/data/real/libnvidia-container/``, see SOURCES.md), checked with the real gpgv; the
others on small repositories signed with a throw-away key (the ``signer`` fixture of
stack/test_aptindex_real.py). Repositories are served as ``file://`` URLs, as the other stack
tests serve them.
"""

from __future__ import annotations

import hashlib
import http.server
import lzma
import os
import shutil
import subprocess
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.errors import EXIT_USAGE, ConfigError, StackError
from toolkit.stack import aptindex
from toolkit.stack.aptindex import dearmor, gpgv, read_index
from toolkit.stack.debversion import compare_versions, satisfies, split_version
from toolkit.stack.lock import LOCK_KEY, lock_document, parse_lock, resolve_lock
from unit.stack.test_aptindex_real import REAL, _toolkit_only
from unit.stack.test_lock import Key, _gpg, _make_key

# The names below are reached through the aptindex module (which re-exports toolkit.stack.fetch)
# so that, run against a tree without them, each test fails on its own instead of the module.

KEY = (REAL / "gpgkey").read_bytes()


@pytest.fixture(scope="module")
def signer() -> Iterator[tuple[str, bytes]]:
    """(GNUPGHOME, armored public key) of a throw-away signing key."""
    key: Key
    for key in _make_key("signed"):
        yield key.home, key.armored


EVIL_SHA256 = "e" * 64


def _copy(tmp_path: Path, snapshot: str = "24feed94") -> Path:
    dest = tmp_path / snapshot
    shutil.copytree(REAL / snapshot, dest)
    return dest


def _real_gpgv_accepts(path: Path) -> bool:
    """Whether gpgv itself, run as a user would, reports a good signature for a file."""
    keyring = path.parent / "nvidia.gpg"
    keyring.write_bytes(dearmor(KEY))
    done = subprocess.run(
        ["gpgv", "--homedir", str(path.parent), "--keyring", str(keyring), str(path)],
        capture_output=True, check=False,
    )  # fmt: skip
    return done.returncode == 0


# --- the finding: an unsigned paragraph before NVIDIA's real InRelease ------------------------


def _forge(snapshot: Path) -> None:
    """The attack: a Packages of the attacker's, listed by an unsigned Release paragraph put
    before the real clearsigned InRelease, whose signed part is kept intact."""
    packages = (snapshot / "Packages").read_bytes()
    real = b"SHA256: 477524f1077a17869d00b79a86a4e427e3af9c6e098489f81855d5007bc1e0cd"
    assert packages.count(real) == 1
    forged = packages.replace(real, b"SHA256: " + EVIL_SHA256.encode())
    (snapshot / "Packages").write_bytes(forged)
    digest = hashlib.sha512(forged).hexdigest()
    paragraph = f"Origin: attacker\nSHA512:\n {digest} {len(forged)} Packages\n\n".encode()
    (snapshot / "InRelease").write_bytes(paragraph + (REAL / "24feed94" / "InRelease").read_bytes())


def test_an_unsigned_paragraph_before_the_real_inrelease_is_refused_by_the_lock(
    tmp_path: Path,
) -> None:
    snapshot = _copy(tmp_path)
    _forge(snapshot)
    # gpgv still reports NVIDIA's good signature: the signed part is intact.
    assert _real_gpgv_accepts(snapshot / "InRelease")
    resolved = _toolkit_only(snapshot)
    with pytest.raises(StackError) as err:
        resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})
    assert err.value.exit_code == EXIT_USAGE
    assert err.value.message == (
        f"{snapshot.as_uri()}/InRelease: refused: the clearsigned file: line 1: unsigned text "
        "before -----BEGIN PGP SIGNED MESSAGE-----; only signed text is read"
    )


@pytest.mark.parametrize(
    ("where", "extra", "reason"),
    [
        (
            "after",
            b"\nOrigin: attacker\n",
            "line 32: unsigned text after -----END PGP SIGNATURE-----",
        ),
        ("after", b"", "line 31: a second signed message"),
        ("before", b"-----BEGIN PGP SIGNATURE-----\n", "line 1: unsigned text before"),
        ("inside", b"-----END PGP SIGNATURE-----\n", "line 4: a line starting with '-' that"),
    ],
    ids=["paragraph-after", "two-messages", "armor-before", "unescaped-dash"],
)
def test_anything_outside_the_one_signed_message_is_refused(
    tmp_path: Path, where: str, extra: bytes, reason: str
) -> None:
    snapshot = _copy(tmp_path)
    real = (REAL / "24feed94" / "InRelease").read_bytes()
    head, _, tail = real.partition(b"Hash: SHA512\n\n")
    data = {
        "before": extra + real,
        "after": real + (extra or real),
        "inside": head + b"Hash: SHA512\n\n" + extra + tail,
    }[where]
    (snapshot / "InRelease").write_bytes(data)
    with pytest.raises(StackError) as err:
        read_index(snapshot.as_uri(), KEY)
    assert err.value.message.startswith(f"{snapshot.as_uri()}/InRelease: refused: ")
    assert reason in err.value.message


def test_blank_lines_around_the_armor_are_not_refused(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    real = (REAL / "24feed94" / "InRelease").read_bytes()
    (snapshot / "InRelease").write_bytes(b"\n  \n" + real + b"\n\t\n")
    assert read_index(snapshot.as_uri(), KEY) == read_index((REAL / "24feed94").as_uri(), KEY)


# --- line ends and encodings ---------------------------------------------------------------------


def test_a_crlf_copy_of_the_real_inrelease_reads_as_the_original(tmp_path: Path) -> None:
    """OpenPGP signs canonical text (CRLF line ends, RFC 4880 5.2.1), so NVIDIA's signature
    holds over a CRLF copy: it is read as the same Release, not an internal error."""
    snapshot = _copy(tmp_path)
    real = (REAL / "24feed94" / "InRelease").read_bytes()
    (snapshot / "InRelease").write_bytes(real.replace(b"\n", b"\r\n"))
    assert _real_gpgv_accepts(snapshot / "InRelease")
    entries = read_index(snapshot.as_uri(), KEY)
    assert entries == read_index((REAL / "24feed94").as_uri(), KEY)
    assert ("nvidia-container-toolkit", "1.17.8-1") in {(e.package, e.version) for e in entries}


def _signed_repo(
    root: Path, signer: tuple[str, bytes], packages: bytes, release_extra: bytes = b""
) -> str:
    """A flat repository whose signed InRelease lists ``packages`` as Packages (SHA256)."""
    root.mkdir()
    (root / "Packages").write_bytes(packages)
    digest = hashlib.sha256(packages).hexdigest()
    release = b"Origin: test\n" + release_extra + f"SHA256:\n {digest} 1 Packages\n".encode()
    (root / "InRelease").write_bytes(_gpg(signer[0], "--clearsign", data=release))
    return root.as_uri()


def _stanza(name: str, version: str) -> bytes:
    return (
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\n"
        f"Filename: ./{name}_{version.partition(':')[2] or version}_amd64.deb\n"
        f"SHA256: {'ab' * 32}\n\n"
    ).encode()


def test_a_non_utf8_byte_in_a_signed_release_is_refused_naming_the_offset(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    uri = _signed_repo(tmp_path / "r", signer, _stanza("a", "1.0-1"), b"Label: caf\xe9\n")
    with pytest.raises(StackError) as err:
        read_index(uri, signer[1])
    assert err.value.exit_code == EXIT_USAGE
    assert err.value.message == (
        f"{uri}/InRelease (its signed text): refused: byte 23 (0xe9) is not UTF-8 (Debian "
        "Policy 5.1: control files are UTF-8)"
    )


def test_a_non_utf8_byte_in_a_packages_file_is_refused_naming_the_offset(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    uri = _signed_repo(tmp_path / "r", signer, _stanza("a", "1.0-1") + b"Package: \xff\n")
    with pytest.raises(StackError) as err:
        read_index(uri, signer[1])
    offset = len(_stanza("a", "1.0-1")) + len(b"Package: ")
    assert err.value.message == (
        f"{uri}/Packages: refused: byte {offset} (0xff) is not UTF-8 (Debian Policy 5.1: "
        "control files are UTF-8)"
    )


def test_crlf_packages_read_as_lf_and_a_lone_carriage_return_is_refused(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    stanza = _stanza("aa", "1.0-1")
    lf = read_index(_signed_repo(tmp_path / "lf", signer, stanza), signer[1])
    crlf = _signed_repo(tmp_path / "crlf", signer, stanza.replace(b"\n", b"\r\n"))
    assert read_index(crlf, signer[1]) == lf
    uri = _signed_repo(tmp_path / "cr", signer, stanza, b"Label: a\rb\n")
    with pytest.raises(StackError) as err:
        read_index(uri, signer[1])
    assert err.value.message == (
        f"{uri}/InRelease (its signed text): refused: byte 21 is a carriage return that ends "
        "no line"
    )


# --- Debian versions ---------------------------------------------------------------------------


def test_the_legal_version_1_2_3_1_reads_orders_and_locks(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    """``1:2:3-1``: epoch 1, upstream ``2:3`` (a colon is legal after an epoch), revision 1
    (Debian Policy 5.6.12; deb-version(7))."""
    assert split_version("1:2:3-1") == (1, "2:3", "1")
    assert split_version("1:2:3-4-5") == (1, "2:3-4", "5")
    assert compare_versions("1:2:3-1", "1:2:3-2") == -1
    assert compare_versions("1:2:3-1", "1:2-1") == 1
    assert compare_versions("1:2:3-1", "2:3") == -1
    assert satisfies("1:2:3-*", "1:2:3-1")
    assert satisfies(">=1:2:2", "1:2:3-1")
    packages = _stanza("a", "1:2:3-1") + _stanza("a", "1:2:3-2")
    entries = read_index(_signed_repo(tmp_path / "r", signer, packages), signer[1])
    assert [e.version for e in entries] == ["1:2:3-1", "1:2:3-2"]
    document = lock_document(parse_lock(_one_package_lock("1:2:3-1"), "test"))
    assert document[LOCK_KEY]["systems"]["ubuntu2204"]["packages"]["pkg"]["version"] == "1:2:3-1"


def _one_package_lock(version: str) -> dict[str, object]:
    entry = {
        "version": version,
        "architecture": "amd64",
        "sha256": "ab" * 32,
        "repository": "cuda",
        "filename": "./a_1_amd64.deb",
    }
    return {
        "group": "g",
        "stack_id": "0123456789ab",
        "systems": {
            "ubuntu2204": {
                "arch": "x86_64",
                "repositories": {"cuda": "https://example.invalid/repo/"},
                "packages": {"pkg": entry},
            }
        },
    }


@pytest.mark.parametrize(
    ("version", "reason"),
    [
        ("x:1.0-1", "the epoch before the first ':' is not a number"),
        ("1.0-", "the revision after the last '-' is empty"),
        ("1:", "the upstream version is empty"),
        ("1.0_1-1", "the upstream version has a character outside A-Za-z0-9 . + ~ - :"),
        ("1.0-1_1", "the revision has a character outside A-Za-z0-9 . + ~"),
        ("a1.0-1", "the upstream version does not start with a digit"),
    ],
)
def test_an_illegal_version_in_an_index_is_refused_naming_package_and_field(
    tmp_path: Path, signer: tuple[str, bytes], version: str, reason: str
) -> None:
    uri = _signed_repo(tmp_path / "r", signer, _stanza("ok", "1.0-1") + _stanza("bad", version))
    with pytest.raises(StackError) as err:
        read_index(uri, signer[1])
    assert err.value.exit_code == EXIT_USAGE
    assert err.value.message == (
        f"{uri}/Packages: refused: package 'bad', field Version: {version!r} is not a Debian "
        f"version ({reason}; Debian Policy 5.6.12)"
    )
    with pytest.raises(ValueError, match="not a Debian version"):
        compare_versions(version, "1.0-1")
    assert not satisfies("1.0-*", version) and not satisfies(">=0", version)
    with pytest.raises(ConfigError, match="version: not a Debian version"):
        parse_lock(_one_package_lock(version), "test")


# --- every fetch and unpack bounded --------------------------------------------------------


def _in_thread(call: object, timeout: float = 10.0) -> object:
    """``call()`` in a thread that must finish within ``timeout`` seconds (a read that blocks
    forever fails the test instead of hanging it)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()  # type: ignore[operator]
        except BaseException as err:  # handed to the test
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return box if not thread.is_alive() else None


def test_a_fifo_where_a_file_is_expected_is_refused_not_waited_on(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    (snapshot / "InRelease").unlink()
    os.mkfifo(snapshot / "InRelease")
    done = _in_thread(lambda: read_index(snapshot.as_uri(), KEY))
    if done is None:  # release the blocked reader, then fail
        with open(snapshot / "InRelease", "wb"):
            pass
        pytest.fail("reading a FIFO blocked")
    error = done.get("error")  # type: ignore[union-attr]
    assert isinstance(error, aptindex.IndexRefused)
    assert error.message == f"{snapshot.as_uri()}/InRelease: refused: not a regular file"


def test_a_device_that_never_ends_is_refused_as_not_a_regular_file() -> None:
    with pytest.raises(StackError, match="/dev/zero: refused: not a regular file"):
        aptindex.fetch_url("file:///dev/zero", 1024)


class _Endless(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # the http.server interface
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"\n" * 65536)
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endless() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/InRelease"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_whose_file_never_ends_is_read_only_to_the_cap(endless: str) -> None:
    with pytest.raises(StackError) as err:
        aptindex.fetch_url(endless, aptindex.MAX_SIGNED_BYTES)
    assert err.value.message == (
        f"{endless}: refused: larger than {aptindex.MAX_SIGNED_BYTES} bytes (the cap for this file)"
    )


def test_the_caps_fit_the_real_indexes_with_room() -> None:
    assert max(len((d / "InRelease").read_bytes()) for d in REAL.iterdir() if d.is_dir()) * 100 < (
        aptindex.MAX_SIGNED_BYTES
    )
    assert len(KEY) * 100 < aptindex.MAX_SIGNED_BYTES
    # 178415 bytes: 69f4ab79's Packages, not kept (SOURCES.md); 24feed94's is kept.
    assert max(178415, len((REAL / "24feed94" / "Packages").read_bytes())) * 100 < (
        aptindex.MAX_PACKAGES_BYTES
    )


def test_an_inrelease_over_its_cap_is_refused_by_name(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path)
    real = (REAL / "24feed94" / "InRelease").read_bytes()
    (snapshot / "InRelease").write_bytes(real + b"\n" * aptindex.MAX_SIGNED_BYTES)
    with pytest.raises(StackError) as err:
        read_index(snapshot.as_uri(), KEY)
    assert err.value.message == (
        f"{snapshot.as_uri()}/InRelease: refused: larger than {aptindex.MAX_SIGNED_BYTES} bytes "
        "(the cap for this file)"
    )


def test_a_packages_file_over_its_cap_is_refused_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aptindex, "MAX_PACKAGES_BYTES", 100_000)
    snapshot = _copy(tmp_path)  # its Packages: 128229 bytes
    with pytest.raises(StackError) as err:
        read_index(snapshot.as_uri(), KEY)
    assert err.value.message == (
        f"{snapshot.as_uri()}/Packages: refused: larger than 100000 bytes (the cap for this file)"
    )


@pytest.mark.parametrize("name", ["Packages.xz", "Packages.gz"])
def test_a_decompression_bomb_is_refused_by_name(
    tmp_path: Path, signer: tuple[str, bytes], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setattr(aptindex, "MAX_PACKAGES_BYTES", 1 << 20)
    root = tmp_path / "r"
    root.mkdir()
    plain = _stanza("a", "1.0-1") + b"\n" * (2 << 20)
    packed = lzma.compress(plain) if name == "Packages.xz" else _gzip(plain)
    assert len(packed) < 20_000
    (root / name).write_bytes(packed)
    release = f"SHA256:\n {hashlib.sha256(packed).hexdigest()} {len(packed)} {name}\n"
    (root / "InRelease").write_bytes(_gpg(signer[0], "--clearsign", data=release.encode()))
    with pytest.raises(StackError) as err:
        read_index(root.as_uri(), signer[1])
    assert err.value.message == (
        f"{root.as_uri()}/{name}: cannot unpack it: it unpacks to more than 1048576 bytes "
        "(the cap for this file)"
    )


def _gzip(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def test_bounded_unpacking_reads_every_stream_and_refuses_a_truncated_one() -> None:
    assert aptindex.unxz(lzma.compress(b"a") + lzma.compress(b"b"), 10) == b"ab"
    assert aptindex.gunzip(_gzip(b"a") + _gzip(b"b") + b"\0\0", 10) == b"ab"
    with pytest.raises(ValueError, match="ends before its end-of-stream marker"):
        aptindex.unxz(lzma.compress(b"a" * 1000)[:-8], 10_000)
    with pytest.raises(ValueError, match="more than 10 bytes"):
        aptindex.gunzip(_gzip(b"a" * 11), 10)


# --- the detached pair -------------------------------------------------------------------------


def _detached_repo(root: Path, signer: tuple[str, bytes]) -> tuple[str, bytes]:
    """A repository serving Release and Release.gpg only; returns (URI, Release)."""
    packages = _stanza("a", "1.0-1")
    root.mkdir()
    (root / "Packages").write_bytes(packages)
    release = f"SHA256:\n {hashlib.sha256(packages).hexdigest()} 1 Packages\n".encode()
    (root / "Release").write_bytes(release)
    (root / "Release.gpg").write_bytes(
        _gpg(signer[0], "--armor", "--detach-sign", "--output", "-", str(root / "Release"))
    )
    return root.as_uri(), release


def test_a_detached_release_reads_and_must_match_its_signature_exactly(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    uri, release = _detached_repo(tmp_path / "r", signer)
    assert [e.version for e in read_index(uri, signer[1])] == ["1.0-1"]
    (tmp_path / "r" / "Release").write_bytes(b"Origin: attacker\n" + release)
    with pytest.raises(StackError, match=f"^{uri}/Release: bad signature"):
        read_index(uri, signer[1])


def test_a_release_gpg_holding_a_signed_message_is_refused(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    """gpgv verifies a signed message given as the 'signature' on its own, whatever the
    Release beside it says."""
    uri, _release = _detached_repo(tmp_path / "r", signer)
    (tmp_path / "r" / "Release").write_bytes(b"Origin: attacker\n")
    inline = _gpg(signer[0], "--armor", "--sign", data=b"SHA256:\n")
    (tmp_path / "r" / "Release.gpg").write_bytes(inline)
    with pytest.raises(StackError) as err:
        read_index(uri, signer[1])
    assert err.value.message.startswith(f"{uri}/Release: refused: Release.gpg: ")
    junk = _gpg(signer[0], "--armor", "--detach-sign", data=b"Origin: attacker\n")
    (tmp_path / "r" / "Release.gpg").write_bytes(b"junk\n" + junk)
    with pytest.raises(StackError, match="text outside its -----BEGIN PGP SIGNATURE"):
        read_index(uri, signer[1])


def test_gpgv_returns_exactly_the_signed_text_of_the_real_inrelease() -> None:
    covered = gpgv(KEY, (REAL / "24feed94" / "InRelease").read_bytes())
    assert covered.startswith(b"Architectures: amd64\nCodename: stable\n")
    assert b"PGP" not in covered and covered.endswith(b" Packages.xz\n")
