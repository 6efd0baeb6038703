"""The stack lock against NVIDIA's real container-toolkit index, and the index shapes it reads.

``tests/data/real/libnvidia-container/`` holds NVIDIA's signed ``InRelease`` and ``Packages``
of ``nvidia.github.io/libnvidia-container/stable/deb/amd64/`` at three snapshots of the
NVIDIA/libnvidia-container gh-pages branch, and the repository's public key (see
``tests/data/real/SOURCES.md``). Its Release lists SHA512 alone, for ``Packages`` and
``Packages.xz``. Signatures are checked with the real gpgv; the synthetic repositories below
are signed with a key made in a throw-away GNUPGHOME.
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.errors import StackError
from toolkit.stack.aptindex import (
    clearsigned_text,
    gpgv,
    key_fingerprints,
    paragraphs,
    read_index,
)
from toolkit.stack.lock import LOCK_KEY, lock_document, resolve_lock
from toolkit.stack.resolve import resolve
from unit.stack.support import make

REAL = REPO / "tests" / "data" / "real" / "libnvidia-container"
SNAPSHOTS = ("8fe04301", "24feed94", "69f4ab79")  # 1.14.0, 1.17.8, 1.20.1
WITH_PACKAGES = ("8fe04301", "24feed94")  # 69f4ab79's Packages (178 kB) is not kept
# NVIDIA's container-toolkit signing key (toolkit/stack/naming.yml, nvidia-container-toolkit).
NVIDIA_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base")
LIBRARY = ("libnvidia-container-tools", "libnvidia-container1")


def _release(snapshot: str) -> dict[str, str]:
    (release,) = paragraphs(clearsigned_text((REAL / snapshot / "InRelease").read_bytes()))
    return release


def _copy(tmp_path: Path, snapshot: str) -> Path:
    dest = tmp_path / snapshot
    shutil.copytree(REAL / snapshot, dest)
    return dest


def _flip(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) == 1 and len(old) == len(new)
    path.write_bytes(data.replace(old, new))


# --- the real index ---------------------------------------------------------------------------


def test_the_key_is_nvidias_pinned_container_toolkit_key() -> None:
    assert key_fingerprints((REAL / "gpgkey").read_bytes()) == [NVIDIA_FINGERPRINT]


@pytest.mark.parametrize("snapshot", SNAPSHOTS)
def test_the_real_inrelease_verifies_with_gpgv_and_lists_sha512_alone(snapshot: str) -> None:
    gpgv((REAL / "gpgkey").read_bytes(), (REAL / snapshot / "InRelease").read_bytes())
    release = _release(snapshot)
    assert {"MD5Sum", "SHA1", "SHA256"}.isdisjoint(release)
    listed = [line.split()[2] for line in release["SHA512"].splitlines() if line]
    assert listed == ["Packages", "Packages.xz"]


@pytest.mark.parametrize("snapshot", WITH_PACKAGES)
def test_the_real_packages_has_the_sha512_the_signed_release_lists(snapshot: str) -> None:
    data = (REAL / snapshot / "Packages").read_bytes()
    (line,) = [x for x in _release(snapshot)["SHA512"].splitlines() if x.endswith(" Packages")]
    digest, size, _name = line.split()
    assert (hashlib.sha512(data).hexdigest(), len(data)) == (digest, int(size))
    entries = read_index((REAL / snapshot).as_uri(), (REAL / "gpgkey").read_bytes())
    # The lock records each package's own SHA256 field, which NVIDIA's index carries.
    assert entries and all(len(e.sha256) == 64 for e in entries)


def _toolkit_only(snapshot_dir: Path, fingerprint: str | None = None) -> dict[str, Any]:
    """The resolved stack (container toolkit 1.17.8) with only its toolkit section and
    repository, the repository moved to the snapshot the way an inventory moves it."""
    stack, hardware = make({"container_toolkit": "1.17.8"})
    repo_vars = {
        "gpunode_container_toolkit_repo_url": f"{snapshot_dir.as_uri()}/",
        "gpunode_container_toolkit_repo_key_url": (REAL / "gpgkey").as_uri(),
    }
    if fingerprint:
        repo_vars["gpunode_container_toolkit_repo_key_fingerprint"] = fingerprint
    resolved = resolve(stack, hardware, "ubuntu2204", repo_vars=repo_vars)
    (repo,) = [r for r in resolved["repositories"] if r["name"] == "nvidia-container-toolkit"]
    keep = ("stack_id", "os", "arch", "container_toolkit")
    return {**{k: resolved[k] for k in keep}, "repositories": [repo]}


def test_the_lock_resolves_toolkit_1_17_8_from_the_real_index() -> None:
    resolved = _toolkit_only(REAL / "24feed94")
    lock = resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})
    locked = lock_document(lock)[LOCK_KEY]["systems"]["ubuntu2204"]["packages"]
    assert set(locked) == set(TOOLKIT + LIBRARY)
    assert {p: e["version"] for p, e in locked.items()} == dict.fromkeys(locked, "1.17.8-1")
    # The package-level SHA256 fields of NVIDIA's index, as the lock records them.
    assert locked["nvidia-container-toolkit"]["sha256"] == (
        "477524f1077a17869d00b79a86a4e427e3af9c6e098489f81855d5007bc1e0cd"
    )
    assert locked["nvidia-container-toolkit-base"]["sha256"] == (
        "36d24f95ae16de034fbf3c6c462f64d6c91532a9b0479527166074c16e2322d7"
    )
    assert all(e["repository"] == "nvidia-container-toolkit" for e in locked.values())


def test_the_real_depends_pin_only_the_toolkit_base_exactly() -> None:
    entries = read_index((REAL / "24feed94").as_uri(), (REAL / "gpgkey").read_bytes())
    by_name = {(e.package, e.version): e for e in entries}
    toolkit = by_name[("nvidia-container-toolkit", "1.17.8-1")]
    # Depends: nvidia-container-toolkit-base (= 1.17.8-1), libnvidia-container-tools
    # (>= 1.17.8-1), libnvidia-container-tools (<< 2.0.0): only the base is an exact part.
    assert toolkit.exact_depends() == [("nvidia-container-toolkit-base", "1.17.8-1")]
    assert "libnvidia-container-tools (>= 1.17.8-1)" in toolkit.depends
    tools = by_name[("libnvidia-container-tools", "1.17.8-1")]
    assert "libnvidia-container1 (>= 1.17.8)" in tools.depends
    assert tools.exact_depends() == []


def test_a_snapshot_without_the_version_names_what_it_carries() -> None:
    resolved = _toolkit_only(REAL / "8fe04301")
    with pytest.raises(StackError) as err:
        resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})
    assert "nvidia-container-toolkit 1.17.8-*: not in the repositories" in err.value.message
    assert "(they carry: 1.14.0-1)" in err.value.message


def test_another_pinned_fingerprint_refuses_the_real_key() -> None:
    resolved = _toolkit_only(REAL / "24feed94", fingerprint="0" * 40)
    with pytest.raises(StackError) as err:
        resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})
    assert f"the key's fingerprint {NVIDIA_FINGERPRINT} is not the pinned" in err.value.message


def test_one_byte_changed_in_the_real_inrelease_fails_its_signature(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path, "24feed94")
    _flip(snapshot / "InRelease", b"Codename: stable", b"Codename: stabl3")
    with pytest.raises(StackError) as err:
        read_index(snapshot.as_uri(), (REAL / "gpgkey").read_bytes())
    assert f"{snapshot.as_uri()}/InRelease: bad signature" in err.value.message
    resolved = _toolkit_only(snapshot)
    with pytest.raises(StackError, match="InRelease: bad signature"):
        resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})


def test_one_byte_changed_in_the_real_packages_fails_its_sha512(tmp_path: Path) -> None:
    snapshot = _copy(tmp_path, "24feed94")
    # nvidia-container-toolkit's entry is the only one with this Installed-Size.
    entry = b"Version: 1.17.8-1\nPriority: optional\nSection: utils\n%sInstalled-Size: 4063"
    maintainer = b"Maintainer: NVIDIA CORPORATION <cudatools@nvidia.com>\n"
    _flip(snapshot / "Packages", entry % maintainer, entry.replace(b"8-1", b"9-1") % maintainer)
    with pytest.raises(StackError) as err:
        read_index(snapshot.as_uri(), (REAL / "gpgkey").read_bytes())
    assert err.value.message == (
        f"{snapshot.as_uri()}/Packages: its SHA512 differs from the one the signed Release lists"
    )


# --- the shapes, on small repositories signed here ------------------------------------------


def _gpg(home: str, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["gpg", "--homedir", home, "--batch", "--yes", "--pinentry-mode", "loopback",
         "--passphrase", "", *args],
        input=data, capture_output=True, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.fixture(scope="module")
def signer() -> Iterator[tuple[str, bytes]]:
    """(GNUPGHOME, armored public key) of a throw-away signing key."""
    home = tempfile.mkdtemp(prefix="gk")  # short: gpg-agent's socket path is limited
    os.chmod(home, 0o700)
    try:
        _gpg(home, "--quick-gen-key", "shapes <shapes@gpunode.invalid>", "ed25519", "sign", "never")
        yield home, _gpg(home, "--armor", "--export")
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], check=False)
        shutil.rmtree(home, ignore_errors=True)


PACKAGES = (
    b"Package: nvidia-container-toolkit\nVersion: 1.17.8-1\nArchitecture: amd64\n"
    b"Filename: ./nvidia-container-toolkit_1.17.8-1_amd64.deb\nSHA256: " + b"ab" * 32 + b"\n"
)
_PACK: dict[str, Callable[[bytes], bytes]] = {
    "Packages": lambda data: data,
    "Packages.gz": lambda data: gzip.compress(data, mtime=0),
    "Packages.xz": lambda data: lzma.compress(data, format=lzma.FORMAT_XZ),
}
_DIGEST = {"SHA512": hashlib.sha512, "SHA256": hashlib.sha256, "SHA1": hashlib.sha1}


def _repo(
    root: Path, signer: tuple[str, bytes], listed: dict[str, tuple[str, ...]], wrong: str = ""
) -> str:
    """A flat repository serving every Packages form, whose signed InRelease lists
    ``hash field -> file names`` (the ``wrong`` field with digests of other bytes); returns
    its URI."""
    root.mkdir()
    for name, pack in _PACK.items():
        (root / name).write_bytes(pack(PACKAGES))
    lines = ["Origin: NVIDIA", "Label: test"]
    for field_name, names in listed.items():
        lines.append(f"{field_name}:")
        for name in names:
            data = (root / name).read_bytes() + (b"x" if field_name == wrong else b"")
            lines.append(f" {_DIGEST[field_name](data).hexdigest()} {len(data)} {name}")
    (root / "InRelease").write_bytes(
        _gpg(signer[0], "--clearsign", data="\n".join(lines).encode() + b"\n")
    )
    return root.as_uri()


@pytest.mark.parametrize(
    "listed",
    [
        {"SHA256": ("Packages", "Packages.gz")},  # apt-ftparchive's shape (the lab's CUDA one)
        {"SHA512": ("Packages", "Packages.xz")},  # NVIDIA's container-toolkit shape
        {"SHA512": ("Packages.xz",)},
        {"SHA512": ("Packages",)},
        {"SHA1": ("Packages.gz",), "SHA256": ("Packages.gz",)},
    ],
    ids=["sha256-gz", "sha512-xz-and-plain", "sha512-xz", "sha512-plain", "sha1-and-sha256-gz"],
)
def test_every_listed_shape_reads(
    tmp_path: Path, signer: tuple[str, bytes], listed: dict[str, tuple[str, ...]]
) -> None:
    (entry,) = read_index(_repo(tmp_path / "r", signer, listed), signer[1])
    assert (entry.package, entry.version, entry.sha256) == ("nvidia-container-toolkit",
                                                            "1.17.8-1", "ab" * 32)  # fmt: skip


def test_the_strongest_hash_is_the_one_checked(tmp_path: Path, signer: tuple[str, bytes]) -> None:
    listed = {"SHA256": ("Packages.xz",), "SHA512": ("Packages.xz",)}
    # The SHA256 line matches the file; the SHA512 line does not, and it is the one checked.
    uri = _repo(tmp_path / "r", signer, listed, wrong="SHA512")
    with pytest.raises(StackError, match=r"Packages.xz: its SHA512 differs"):
        read_index(uri, signer[1])
    assert read_index(_repo(tmp_path / "s", signer, listed, wrong="SHA256"), signer[1])


def test_a_release_without_a_usable_hash_names_what_it_lists(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    uri = _repo(tmp_path / "r", signer, {"SHA1": ("Packages", "Packages.gz")})
    with pytest.raises(StackError) as err:
        read_index(uri, signer[1])
    assert err.value.message == (
        f"{uri}/: the signed Release lists no Packages file (Packages.xz, Packages.gz or "
        "Packages) under SHA512 or SHA256; it lists SHA1: Packages, Packages.gz"
    )


def test_an_unreadable_listed_file_gives_way_to_the_next(
    tmp_path: Path, signer: tuple[str, bytes]
) -> None:
    uri = _repo(tmp_path / "r", signer, {"SHA512": ("Packages", "Packages.xz")})
    (tmp_path / "r" / "Packages.xz").unlink()
    assert [e.version for e in read_index(uri, signer[1])] == ["1.17.8-1"]
    (tmp_path / "r" / "Packages").unlink()
    with pytest.raises(StackError, match=r"/: no listed Packages file can be read: cannot read"):
        read_index(uri, signer[1])
