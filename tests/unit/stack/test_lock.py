"""The stack lock, resolved against small signed repositories that the tests build.

The repositories are flat (``deb <url> /``) and InRelease-signed like NVIDIA's, listing
Packages.gz under SHA256 (apt-ftparchive's shape; NVIDIA's own SHA512-only index is read in
stack/test_aptindex_real.py) and carry the Debian revisions seen in public install scripts: Ubuntu
driver packages at ``-0ubuntu1`` and ``-1ubuntu1`` beside ``-1``
(``cuda-drivers-550=550.90.07-1`` next to ``libnvidia-compute-550=550.90.07-0ubuntu1``;
``nvidia-driver-580-open=580.159.04-1ubuntu1``), and a 590-style index whose Ubuntu names
carry no branch (NVIDIA, "Recent Updates"). Keys are made with gpg in a throw-away GNUPGHOME;
signatures are checked with the real gpgv.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.errors import ConfigError, StackError
from toolkit.inventory.targets import check_locks, load_targets, lock_inventory
from toolkit.stack.aptindex import IndexEntry, key_fingerprints
from toolkit.stack.debversion import compare_versions, satisfies
from toolkit.stack.lock import (
    LOCK_KEY,
    apply_lock,
    lock_document,
    read_lock,
    requirements,
    resolve_lock,
    verify_lock,
)
from toolkit.stack.resolve import resolve
from unit.stack.support import make

SAMPLE = REPO / "inventories" / "sample"


@dataclass(frozen=True)
class Key:
    home: str
    fingerprint: str
    armored: bytes


def _gpg(home: str, *args: str, data: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["gpg", "--homedir", home, "--batch", "--yes", "--pinentry-mode", "loopback",
         "--passphrase", "", *args],
        input=data, capture_output=True, check=True,
    )  # fmt: skip
    return done.stdout


def _make_key(name: str) -> Iterator[Key]:
    home = tempfile.mkdtemp(prefix="gk")  # short: gpg-agent's socket path is limited
    os.chmod(home, 0o700)
    try:
        _gpg(
            home, "--quick-gen-key", f"{name} <{name}@gpunode.invalid>", "ed25519", "sign", "never"
        )
        colons = _gpg(home, "--with-colons", "--list-keys").decode()
        fingerprint = next(
            line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr")
        )
        yield Key(home, fingerprint, _gpg(home, "--armor", "--export"))
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], check=False)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def key() -> Iterator[Key]:
    yield from _make_key("repo")


@pytest.fixture(scope="module")
def other_key() -> Iterator[Key]:
    yield from _make_key("other")


def build_repo(root: Path, key: Key, packages: list[tuple[str, ...]]) -> Path:
    """A flat signed repository of (name, version, arch[, depends]) entries; returns its
    directory."""
    root.mkdir(parents=True, exist_ok=True)
    stanzas = []
    for name, version, arch, *depends in packages:
        filename = f"./{name}_{version}_{arch}.deb"
        digest = hashlib.sha256(f"{name} {version} {arch}".encode()).hexdigest()
        relations = f"Depends: {depends[0]}\n" if depends else ""
        stanzas.append(
            f"Package: {name}\nVersion: {version}\nArchitecture: {arch}\n{relations}"
            f"Filename: {filename}\nSize: 1\nSHA256: {digest}\nDescription: test\n"
        )
    text = "\n".join(stanzas).encode()
    packed = gzip.compress(text, mtime=0)
    (root / "Packages").write_bytes(text)
    (root / "Packages.gz").write_bytes(packed)
    lines = [
        f" {hashlib.sha256(data).hexdigest()} {len(data)} {name}"
        for name, data in (("Packages", text), ("Packages.gz", packed))
    ]
    release = "Origin: NVIDIA\nLabel: test\nArchitectures: amd64 all\nSHA256:\n" + "\n".join(lines)
    (root / "Release").write_text(release + "\n")
    (root / "InRelease").write_bytes(
        _gpg(key.home, "--clearsign", "--output", "-", str(root / "Release"))
    )
    (root / "key.asc").write_bytes(key.armored)
    return root


def driver_entries(version: str, names: dict[str, str]) -> list[tuple[str, str, str]]:
    """Packages of one driver: name -> Debian revision."""
    return [(name, f"{version}-{revision}", "amd64") for name, revision in names.items()]


# The sample's h100_sxm group (580.159.03 open, CUDA 12.8.1, NCCL 2.26.2+cuda12.8, Fabric
# Manager, container toolkit 1.19.1) and l40s_pcie (580.159.03 open, CUDA 13.0.2, NCCL
# 2.27.7+cuda13.0) as an Ubuntu-shaped CUDA repository carries them.
UBUNTU_580 = [
    *driver_entries(
        "580.159.03",
        {
            "nvidia-open": "1",
            "nvidia-driver-580-open": "1ubuntu1",
            "nvidia-dkms-580-open": "1ubuntu1",
            "nvidia-utils-580": "0ubuntu1",
            "libnvidia-compute-580": "0ubuntu1",
            "nvidia-persistenced": "1",
            "nvidia-driver-pinning-580.159.03": "1",
            "nvidia-fabricmanager": "1",
            "libnvidia-nscq": "1",
        },
    ),
    # Both revisions of one upstream version: the higher one wins.
    ("nvidia-utils-580", "580.159.03-1ubuntu1", "amd64"),
    # Another R580 driver that must not be picked, and a foreign architecture.
    ("nvidia-driver-580-open", "580.105.08-1ubuntu1", "amd64"),
    ("libnvidia-compute-580", "580.159.03-0ubuntu2", "arm64"),
    ("cuda-toolkit-12-8", "12.8.1-1", "amd64"),
    ("cuda-toolkit-13-0", "13.0.2-1", "amd64"),
    ("libnccl2", "2.26.2-1+cuda12.8", "amd64"),
    ("libnccl-dev", "2.26.2-1+cuda12.8", "amd64"),
    ("libnccl2", "2.26.2-1+cuda12.9", "amd64"),
    ("libnccl2", "2.27.7-1+cuda13.0", "amd64"),
    ("libnccl-dev", "2.27.7-1+cuda13.0", "amd64"),
]
# 1.19.1 for the sample; 1.17.8 for the base stack of test_stack_support.
CONTAINER_TOOLKIT = [
    (name, version, "amd64")
    for version in ("1.17.8-1", "1.19.1-1")
    for name in (
        "nvidia-container-toolkit",
        "nvidia-container-toolkit-base",
        "libnvidia-container-tools",
        "libnvidia-container1",
    )
]
# The documented result for the sample on ubuntu2204 (docs/architecture.md, "The stack lock").
SAMPLE_H100_UBUNTU = {
    "nvidia-driver-pinning-580.159.03": "580.159.03-1",
    "nvidia-open": "580.159.03-1",
    "nvidia-driver-580-open": "580.159.03-1ubuntu1",
    "nvidia-dkms-580-open": "580.159.03-1ubuntu1",
    "nvidia-utils-580": "580.159.03-1ubuntu1",
    "libnvidia-compute-580": "580.159.03-0ubuntu1",
    "nvidia-persistenced": "580.159.03-1",
    "cuda-toolkit-12-8": "12.8.1-1",
    "libnccl2": "2.26.2-1+cuda12.8",
    "libnccl-dev": "2.26.2-1+cuda12.8",
    "nvidia-fabricmanager": "580.159.03-1",
    "libnvidia-nscq": "580.159.03-1",
    "nvidia-container-toolkit": "1.19.1-1",
    "nvidia-container-toolkit-base": "1.19.1-1",
    "libnvidia-container-tools": "1.19.1-1",
    "libnvidia-container1": "1.19.1-1",
}


def sample_inventory(tmp: Path, key: Key, cuda: Path, ctk: Path, systems: str) -> Path:
    """A copy of the sample inventory pointed at the test repositories."""
    inventory = tmp / "inventory"
    shutil.copytree(SAMPLE, inventory)
    repos = inventory / "group_vars" / "all" / "repositories.yml"
    data = yaml.safe_load(repos.read_text())
    data.update(
        {
            "gpunode_stack_os": yaml.safe_load(systems),
            "gpunode_nvidia_repo_url": f"{cuda.as_uri()}/",
            "gpunode_nvidia_repo_key_url": (cuda / "key.asc").as_uri(),
            "gpunode_nvidia_repo_key_fingerprint": key.fingerprint,
            "gpunode_container_toolkit_repo_url": f"{ctk.as_uri()}/",
            "gpunode_container_toolkit_repo_key_url": (ctk / "key.asc").as_uri(),
            "gpunode_container_toolkit_repo_key_fingerprint": key.fingerprint,
        }
    )
    repos.write_text("---\n" + yaml.safe_dump(data))
    return inventory


@pytest.fixture
def ubuntu(tmp_path: Path, key: Key) -> Path:
    cuda = build_repo(tmp_path / "cuda", key, UBUNTU_580)
    ctk = build_repo(tmp_path / "ctk", key, CONTAINER_TOOLKIT)
    return sample_inventory(tmp_path, key, cuda, ctk, "[ubuntu2204]")


def test_the_key_fingerprint_is_the_one_gpg_shows(key: Key) -> None:
    assert key_fingerprints(key.armored) == [key.fingerprint]
    binary = _gpg(key.home, "--export")
    assert key_fingerprints(binary) == [key.fingerprint]
    with pytest.raises(ValueError):
        key_fingerprints(b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n\n-----END PGP")


@pytest.mark.parametrize(
    ("a", "b", "order"),
    [
        ("580.95.05-1ubuntu1", "580.95.05-0ubuntu1", 1),
        ("580.95.05-1", "580.95.05-1ubuntu1", -1),
        ("580.105.08-1", "580.95.05-1", 1),
        ("1:4.2.3-1", "4.9.9-1", 1),
        ("1.0~rc1-1", "1.0-1", -1),
        ("2.26.2-1+cuda12.8", "2.26.2-1+cuda12.8", 0),
        ("27.5.1-0ubuntu3~22.04.2", "27.5.1-0ubuntu3~22.04.3", -1),
    ],
)
def test_dpkg_version_order(a: str, b: str, order: int) -> None:
    assert compare_versions(a, b) == order
    assert compare_versions(b, a) == -order


@pytest.mark.parametrize(
    ("requirement", "version", "ok"),
    [
        ("580.95.05-*", "580.95.05-0ubuntu1", True),
        ("580.95.05-*", "580.95.05-1ubuntu1", True),
        ("580.95.05-*", "580.95.051-1", False),
        ("580.95.05-*", "1:580.95.05-1", False),
        ("1:4.2.3-*", "1:4.2.3-1", True),
        ("2.26.2-1+cuda12.8", "2.26.2-1+cuda12.9", False),
        (">=27.5.1", "28.2.2-0ubuntu1~22.04.1", True),
        (">=27.5.1", "27.5.1-0ubuntu3~22.04.2", True),
        (">=27.5.1", "26.1.3-0ubuntu1~22.04.1", False),
        (">=", "27.5.1-1", False),
    ],
)
def test_requirements(requirement: str, version: str, ok: bool) -> None:
    assert satisfies(requirement, version) is ok


def test_sample_locks_to_the_ubuntu_revisions_the_repository_carries(ubuntu: Path) -> None:
    outcomes = lock_inventory(ubuntu)
    assert [o.group for o in outcomes] == ["h100_sxm", "l40s_pcie"]
    h100 = outcomes[0]
    assert h100.packages["ubuntu2204"] == SAMPLE_H100_UBUNTU
    l40s = outcomes[1].packages["ubuntu2204"]
    assert l40s["cuda-toolkit-13-0"] == "13.0.2-1"
    assert l40s["libnccl2"] == "2.27.7-1+cuda13.0"
    assert "nvidia-fabricmanager" not in l40s  # PCIe: no NVSwitch
    lock = read_lock(ubuntu / "group_vars" / "h100_sxm" / "stack.lock.yml")
    entry = lock.systems["ubuntu2204"].packages["libnvidia-compute-580"]
    assert entry.architecture == "amd64" and entry.repository == "cuda"
    assert len(entry.sha256) == 64
    assert lock.stack_id == h100.stack_id
    # The lock is read back as group vars: stack check is clean, show prints exact versions.
    _is_inventory, targets = load_targets(ubuntu)
    assert all(t.lock_violations() == [] for t in targets)
    locked = apply_lock(targets[0].resolve("ubuntu2204"), targets[0].lock)
    assert locked["driver"]["packages"]["nvidia-utils-580"] == "580.159.03-1ubuntu1"
    assert check_locks(ubuntu) == []
    # A second lock from the same repositories changes nothing.
    assert not any(o.changed for o in lock_inventory(ubuntu))


def test_r590_and_later_lock_the_unbranched_ubuntu_names(tmp_path: Path, key: Key) -> None:
    names = ["nvidia-open", "nvidia-driver-open", "nvidia-dkms-open", "nvidia-utils",
             "libnvidia-compute", "nvidia-persistenced", "nvidia-driver-pinning-595.45.04",
             "nvidia-fabricmanager", "libnvidia-nscq"]  # fmt: skip
    packages = [(name, "595.45.04-1ubuntu1", "amd64") for name in names]
    packages += [("cuda-toolkit-13-1", "13.1.0-1", "amd64"), ("libnccl2", "2.28.3-1+cuda13.1",
                 "amd64"), ("libnccl-dev", "2.28.3-1+cuda13.1", "amd64")]  # fmt: skip
    cuda = build_repo(tmp_path / "cuda", key, packages)
    ctk = build_repo(tmp_path / "ctk", key, CONTAINER_TOOLKIT)
    stack, hardware = make(
        {"driver": {"version": "595.45.04"}, "cuda": "13.1.0", "nccl": "2.28.3-1+cuda13.1"}
    )
    resolved = resolve(stack, hardware, "ubuntu2404", repo_vars=_vars(key, cuda, ctk))
    lock = resolve_lock("g", resolved["stack_id"], {"ubuntu2404": resolved})
    locked = lock_document(lock)[LOCK_KEY]["systems"]["ubuntu2404"]["packages"]
    assert {p for p in locked if "595" not in p and "nvidia" in p} >= {
        "nvidia-open", "nvidia-driver-open", "nvidia-dkms-open", "nvidia-utils",
        "nvidia-persistenced",
    }  # fmt: skip
    assert "nvidia-driver-595-open" not in locked and "cuda-drivers-595" not in locked
    assert locked["libnvidia-compute"]["version"] == "595.45.04-1ubuntu1"


def _vars(key: Key, cuda: Path, ctk: Path) -> dict[str, Any]:
    return {
        "gpunode_nvidia_repo_url": f"{cuda.as_uri()}/",
        "gpunode_nvidia_repo_key_url": (cuda / "key.asc").as_uri(),
        "gpunode_nvidia_repo_key_fingerprint": key.fingerprint,
        "gpunode_container_toolkit_repo_url": f"{ctk.as_uri()}/",
        "gpunode_container_toolkit_repo_key_url": (ctk / "key.asc").as_uri(),
        "gpunode_container_toolkit_repo_key_fingerprint": key.fingerprint,
    }


def test_a_version_the_repository_lacks_is_named_and_nothing_is_written(
    tmp_path: Path, key: Key
) -> None:
    cuda = build_repo(tmp_path / "cuda", key, [p for p in UBUNTU_580 if p[0] != "libnccl-dev"])
    ctk = build_repo(tmp_path / "ctk", key, CONTAINER_TOOLKIT)
    inventory = sample_inventory(tmp_path, key, cuda, ctk, "[ubuntu2204]")
    with pytest.raises(StackError) as info:
        lock_inventory(inventory)
    assert "libnccl-dev 2.26.2-1+cuda12.8: not in the repositories" in info.value.message
    assert not list(inventory.glob("group_vars/*/stack.lock.yml"))


def test_a_republished_or_withdrawn_version_fails_the_check_naming_the_package(
    ubuntu: Path, key: Key
) -> None:
    lock_inventory(ubuntu)
    cuda = ubuntu.parent / "cuda"
    changed = [p for p in UBUNTU_580 if p[0] != "libnccl-dev"]
    build_repo(cuda, key, changed)
    # Republish nvidia-open 580.159.03-1 with other bytes: its SHA256 in the index changes.
    packages = (
        (cuda / "Packages")
        .read_text()
        .replace(hashlib.sha256(b"nvidia-open 580.159.03-1 amd64").hexdigest(), "f" * 64)
    )
    _rewrite(cuda, key, packages)
    with pytest.raises(StackError) as info:
        check_locks(ubuntu)
    message = info.value.message
    assert "libnccl-dev=2.26.2-1+cuda12.8 is no longer in repository cuda" in message
    assert "nvidia-open=580.159.03-1 was republished" in message and "f" * 64 in message
    assert "nothing was changed" in message


def _rewrite(root: Path, key: Key, packages: str) -> None:
    text = packages.encode()
    packed = gzip.compress(text, mtime=0)
    (root / "Packages").write_bytes(text)
    (root / "Packages.gz").write_bytes(packed)
    lines = [f" {hashlib.sha256(d).hexdigest()} {len(d)} {n}" for n, d in
             (("Packages", text), ("Packages.gz", packed))]  # fmt: skip
    (root / "Release").write_text("Origin: NVIDIA\nSHA256:\n" + "\n".join(lines) + "\n")
    (root / "InRelease").write_bytes(
        _gpg(key.home, "--clearsign", "--output", "-", str(root / "Release"))
    )


def test_a_stale_or_missing_lock_is_refused_unless_relocked(ubuntu: Path) -> None:
    with pytest.raises(StackError, match="group h100_sxm: the stack lock is missing"):
        check_locks(ubuntu)
    lock_inventory(ubuntu)
    stack_file = ubuntu / "group_vars" / "h100_sxm" / "stack.yml"
    stack_file.write_text(stack_file.read_text().replace('cuda: "12.8.1"', 'cuda: "12.8.0"'))
    _is_inventory, targets = load_targets(ubuntu)
    assert [v.rule for v in targets[0].lock_violations()] == ["lock.stale"]
    with pytest.raises(StackError, match="group h100_sxm: the stack lock is stale"):
        check_locks(ubuntu)
    with pytest.raises(StackError, match=r"cuda-toolkit-12-8 12.8.0-\*: not in the repositories"):
        check_locks(ubuntu, relock=True)


def test_a_key_with_another_fingerprint_or_signature_is_refused(
    tmp_path: Path, key: Key, other_key: Key
) -> None:
    cuda = build_repo(tmp_path / "cuda", key, UBUNTU_580)
    ctk = build_repo(tmp_path / "ctk", key, CONTAINER_TOOLKIT)
    stack, hardware = make()
    repo_vars = {
        **_vars(key, cuda, ctk),
        "gpunode_nvidia_repo_key_fingerprint": other_key.fingerprint,
    }
    resolved = resolve(stack, hardware, "ubuntu2204", repo_vars=repo_vars)
    with pytest.raises(StackError, match=f"is not the pinned {other_key.fingerprint}"):
        resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})
    # The right fingerprint, but the index is signed by another key.
    (cuda / "InRelease").write_bytes(
        _gpg(other_key.home, "--clearsign", "--output", "-", str(cuda / "Release"))
    )
    resolved = resolve(stack, hardware, "ubuntu2204", repo_vars=_vars(key, cuda, ctk))
    with pytest.raises(StackError, match="InRelease: bad signature"):
        resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})


def test_the_oses_of_a_group_must_be_named(ubuntu: Path) -> None:
    repos = ubuntu / "group_vars" / "all" / "repositories.yml"
    repos.write_text(repos.read_text().replace("- ubuntu2204", "- ubuntu2004"))
    with pytest.raises(ConfigError, match="gpunode_stack_os: unknown OS 'ubuntu2004'"):
        lock_inventory(ubuntu)


def test_verify_lock_is_clean_for_a_fresh_lock(tmp_path: Path, key: Key) -> None:
    cuda = build_repo(tmp_path / "cuda", key, UBUNTU_580)
    ctk = build_repo(tmp_path / "ctk", key, CONTAINER_TOOLKIT)
    stack, hardware = make({"driver": {"version": "580.159.03"}})  # the driver UBUNTU_580 carries
    resolved = resolve(stack, hardware, "ubuntu2204", repo_vars=_vars(key, cuda, ctk))
    lock = resolve_lock("g", resolved["stack_id"], {"ubuntu2204": resolved})
    assert verify_lock("g", lock, {"ubuntu2204": resolved}) == []


# Debian's packaging of the driver (deb.debian.org bookworm non-free, nvidia-graphics-drivers
# 535.261.03-1): the parts of one build pin each other through `nvidia-alternative (= V-1)`,
# and nvidia-driver-libs pins its GL parts; the module is reached through alternatives (the
# open one by NVIDIA's name, tests/data/real/nvidia-debian12-apt-driver-depends.txt).
def _debian_build(version: str, names: list[str]) -> list[tuple[str, ...]]:
    av = f"{version}-1"
    alt = f"nvidia-alternative (= {av})"
    depends = {
        "nvidia-driver": f"nvidia-driver-libs (= {av}), {alt}, nvidia-kernel-dkms (= {av}) | "
        f"nvidia-kernel-{version} | nvidia-kernel-open-dkms (= {av})",
        "nvidia-driver-libs": f"libgl1-nvidia-glvnd-glx (= {av}), nvidia-egl-icd (= {av})",
        "libgl1-nvidia-glvnd-glx": alt,
        "nvidia-egl-icd": alt,
        "libcuda1": f"{alt}, libc6 (>= 2.34)",
        "nvidia-persistenced": "libnvidia-ml1 (>= 535)",
    }
    extra = ["nvidia-alternative", "libgl1-nvidia-glvnd-glx", "nvidia-egl-icd"]
    return [(n, av, "amd64", depends.get(n, alt)) for n in [*names, *extra]]


def test_the_lock_pins_the_parts_a_locked_build_needs_exactly(tmp_path: Path, key: Key) -> None:
    stack, hardware = make(
        {"driver": {"version": "550.127.05"}, "cuda": "12.4.1", "nccl": "2.21.5-1+cuda12.4"}
    )
    vars_ = _vars(key, tmp_path / "cuda", tmp_path / "ctk")
    resolved = resolve(stack, hardware, "debian12", repo_vars=vars_)
    driver = [p for p in resolved["driver"]["packages"] if not p.startswith("cuda-drivers")]
    others = [
        (name, wanted.replace("-*", "-1"), "amd64")
        for name, wanted in requirements(resolved).items()
        if name not in driver
    ]
    # The repository also carries a later build: apt alone would take its companions.
    build_repo(
        tmp_path / "cuda",
        key,
        _debian_build("550.127.05", driver) + _debian_build("580.95.05", driver) + others,
    )
    build_repo(tmp_path / "ctk", key, CONTAINER_TOOLKIT)
    lock = resolve_lock("g", resolved["stack_id"], {"debian12": resolved})
    locked = lock_document(lock)[LOCK_KEY]["systems"]["debian12"]["packages"]
    assert locked["nvidia-alternative"]["version"] == "550.127.05-1"
    assert locked["nvidia-alternative"]["needed_by"] in driver
    assert locked["libgl1-nvidia-glvnd-glx"] == {
        **locked["libgl1-nvidia-glvnd-glx"],
        "version": "550.127.05-1",
        "needed_by": "nvidia-driver-libs",
    }
    assert "libc6" not in locked  # ranges and alternatives are left to apt
    assert all("needed_by" not in locked[name] for name in driver)
    # Provisioning installs and pins the companions with the driver.
    applied = apply_lock(resolved, lock)
    assert applied["driver"]["packages"]["nvidia-egl-icd"] == "550.127.05-1"
    assert applied["driver"]["packages"]["nvidia-driver"] == "550.127.05-1"
    assert verify_lock("g", lock, {"debian12": resolved}) == []
    # A build whose exact companion the repository lacks is refused, both named.
    build_repo(
        tmp_path / "cuda",
        key,
        [e for e in _debian_build("550.127.05", driver) if e[0] != "nvidia-egl-icd"] + others,
    )
    with pytest.raises(StackError) as refused:
        resolve_lock("g", resolved["stack_id"], {"debian12": resolved})
    assert (
        "nvidia-driver-libs=550.127.05-1 needs nvidia-egl-icd (= 550.127.05-1), which the "
        "repositories do not carry" in refused.value.message
    )


@pytest.mark.parametrize(
    ("depends", "exact"),
    [
        (
            "nvidia-alternative (= 550.127.05-1), libc6 (>= 2.34)",
            [("nvidia-alternative", "550.127.05-1")],
        ),
        ("a (= 1) | b, c:amd64 (= 2-1)", [("c", "2-1")]),
        ("firmware-nvidia-gsp (= 535.261.03) | firmware-nvidia-gsp-535.261.03", []),
        ("", []),
        ("x (<< 2), y (=1:2.0-1ubuntu1)", [("y", "1:2.0-1ubuntu1")]),
    ],
)
def test_exact_depends(depends: str, exact: list[tuple[str, str]]) -> None:
    entry = IndexEntry("p", "1", "amd64", "", "", depends)
    assert entry.exact_depends() == exact
