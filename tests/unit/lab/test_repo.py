"""The lab's signed stand-in repository: the catalog's shapes, the build, and apt's verdict.

apt runs for real in an isolated configuration (its own state, cache, sources, keyrings and
preferences under a temporary directory), so the host's apt setup is neither read nor
changed. Dependency resolution is checked with `apt-get -s` against a status file made from
the catalog, which is how apt would resolve on a node.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from shared_fixtures import REPO, lab_driver_packages

from toolkit.lab import catalog, repo
from toolkit.lab.package_spec import PackageSpec, render
from toolkit.lab.repo import RepoInfo, build_repository
from toolkit.stack.aptindex import clearsigned_text, paragraphs, read_index

# --- the catalog ------------------------------------------------------------------------------


def _versions(name: str) -> set[str]:
    return {p.version for p in catalog.packages() if p.name == name}


def _spec(name: str, version: str) -> PackageSpec:
    (spec,) = [p for p in catalog.packages() if (p.name, p.version) == (name, version)]
    return spec


FM_DEBIAN12 = REPO / "roles/fabric_manager/vars/debian12.yml"
D550 = {"550.127.05-1", "550.144.03-1"}
D580 = {"580.95.05-1", "580.105.08-1", "580.159.03-1"}

# The debian12 shape of NVIDIA's CUDA repository (toolkit/stack/naming.yml, source
# debian12_repository): Debian-style names without the branch, at V-1.
DEBIAN_DRIVER = (
    "nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-open-dkms", "nvidia-kernel-support",
    "firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-driver-cuda",
    "nvidia-driver-libs", "nvidia-persistenced",
)  # fmt: skip
# The parts of a build that the named packages pin exactly (Debian's packaging): the stack
# lock adds them (`needed_by`, toolkit/stack/lock.py), by the lock's own rule.
COMPANIONS = tuple(name for name in lab_driver_packages() if name not in DEBIAN_DRIVER)
EXPECTED_VERSIONS = {
    **{name: D550 | D580 for name in DEBIAN_DRIVER + COMPANIONS},
    "cuda-drivers-550": D550,
    "nvidia-fabricmanager-550": D550,
    "libnvidia-nscq-550": D550,
    "nvidia-open": D580,
    "cuda-drivers-580": D580,
    "nvidia-fabricmanager": D580,
    "libnvidia-nscq": D580,
    "nvidia-driver-pinning-580.95.05": {"580.95.05-1"},
    "nvidia-driver-pinning-580.105.08": {"580.105.08-1"},
    "nvidia-driver-pinning-580.159.03": {"580.159.03-1"},
    "cuda-toolkit-12-4": {"12.4.1-1"},
    "cuda-toolkit-12-8": {"12.8.1-1"},
    "libnccl2": {"2.21.5-1+cuda12.4", "2.26.2-1+cuda12.8"},
    "libnccl-dev": {"2.21.5-1+cuda12.4", "2.26.2-1+cuda12.8"},
    "nvidia-container-toolkit": {"1.16.2-1", "1.17.8-1", "1.19.1-1"},
    "nvidia-container-toolkit-base": {"1.16.2-1", "1.17.8-1", "1.19.1-1"},
    "libnvidia-container-tools": {"1.16.2-1", "1.17.8-1", "1.19.1-1"},
    "libnvidia-container1": {"1.16.2-1", "1.17.8-1", "1.19.1-1"},
    "nvlsm": {"2025.06.10-1"},
    # IMEX as NVIDIA's driver container names it: branched for R550-R579, nvidia-imex from R580.
    "nvidia-imex-550": D550,
    "nvidia-imex": D580,
    # Beside NVLSM (B200): libnvsdm from R580 (infiniband-diags is Debian's own, from
    # deb.debian.org: no stand-in).
    "libnvsdm": D580,
}


@pytest.mark.parametrize(("name", "versions"), sorted(EXPECTED_VERSIONS.items()))
def test_catalog_carries_the_documented_versions(name: str, versions: set[str]) -> None:
    assert _versions(name) == versions


def test_catalog_has_no_other_packages_and_no_duplicates() -> None:
    pairs = [(p.name, p.version) for p in catalog.packages()]
    assert len(pairs) == len(set(pairs))
    assert {name for name, _ in pairs} == set(EXPECTED_VERSIONS)


def test_catalog_carries_every_name_the_naming_rules_give_debian12() -> None:
    from toolkit.stack.lock import requirements
    from toolkit.stack.resolve import resolve
    from unit.stack.support import make

    names = {p.name for p in catalog.packages()}
    for version, cuda, nccl in (("550.127.05", "12.4.1", "2.21.5-1+cuda12.4"),
                                ("580.95.05", "12.8.1", "2.26.2-1+cuda12.8")):  # fmt: skip
        for flavour in ("open", "proprietary"):
            stack, hardware = make(
                {"driver": {"version": version, "flavour": flavour}, "cuda": cuda, "nccl": nccl}
            )
            assert set(requirements(resolve(stack, hardware, "debian12"))) <= names
    # A fourth-generation NVSwitch system adds NVLSM beside Fabric Manager.
    stack, hardware = make({"nvlsm": "2025.06.10"}, {"gpu": {"model": "B200"}})
    b200 = set(requirements(resolve(stack, hardware, "debian12")))
    assert {"nvlsm", "libnvsdm"} <= b200 <= names
    # What roles/fabric_manager installs from the OS archive beside NVLSM comes from Debian's
    # archive on a lab node as on a real one: the lab repository carries none of it.
    os_pins = yaml.safe_load(FM_DEBIAN12.read_text())["fabric_manager_os_nvlsm_packages"]
    assert os_pins and names.isdisjoint(os_pins)
    # GB200 (IMEX) at both lab branches: nvidia-imex-550, nvidia-imex from R580.
    for version in ("550.127.05", "580.95.05"):
        gb200 = make({"driver": {"version": version}}, {"gpu": {"model": "GB200"}})
        assert set(requirements(resolve(*gb200, "debian12"))) <= names


def test_no_branch_suffix_free_names_before_580() -> None:
    assert not _versions("nvidia-driver-pinning-550.127.05")
    assert not any(v.startswith("550.") for v in _versions("nvidia-open"))
    assert not _versions("cuda-drivers")  # only for branches after 580


def _compare(a: str, op: str, b: str) -> bool:
    ops = {"=": "eq", ">=": "ge", "<=": "le", "<<": "lt", ">>": "gt"}
    done = subprocess.run(["dpkg", "--compare-versions", a, ops[op], b], check=False)
    return done.returncode == 0


def _satisfied(relation: str, candidates: list[PackageSpec]) -> bool:
    m = re.fullmatch(r"([a-z0-9.+-]+)(?: \((=|>=|<=|<<|>>) ([^)]+)\))?", relation.strip())
    assert m, f"unparsable relation {relation!r}"
    name, op, version = m.groups()
    for spec in candidates:
        if spec.name == name and (op is None or _compare(spec.version, op, version)):
            return True
        provided = {re.sub(r" \(.*\)$", "", p) for p in spec.provides}
        if name in provided and op is None:
            return True
    return False


def test_every_dependency_resolves_within_the_catalog() -> None:
    specs = list(catalog.packages())
    for spec in specs:
        in_repo = [s for s in specs if s.repository == spec.repository]
        for relation in spec.depends:
            alternatives = [alt.strip() for alt in relation.split("|")]
            if all(alt.split()[0] in catalog.EXTERNAL_DEPENDS for alt in alternatives):
                continue
            assert any(_satisfied(alt, in_repo) for alt in alternatives), (
                f"{spec.name} {spec.version}: {relation} has no provider in its repository"
            )


@pytest.mark.parametrize(
    ("name", "version", "depends"),
    [
        # Debian's packaging (deb.debian.org bookworm non-free, nvidia-graphics-drivers
        # 535.261.03-1): one build pins itself through nvidia-alternative, reaches the module
        # through alternatives and virtual names, and uses ranges for "this branch or later";
        # NVIDIA's debian12 repository names the open module nvidia-kernel-open-dkms
        # (tests/data/real/nvidia-debian12-apt-driver-depends.txt).
        (
            "nvidia-driver",
            "550.127.05-1",
            (
                "nvidia-driver-libs (= 550.127.05-1)",
                "nvidia-alternative (= 550.127.05-1)",
                "nvidia-kernel-dkms (= 550.127.05-1) | nvidia-kernel-550.127.05"
                " | nvidia-kernel-open-dkms (= 550.127.05-1)",
            ),
        ),
        (
            "nvidia-kernel-open-dkms",
            "580.105.08-1",
            (
                "firmware-nvidia-gsp (= 580.105.08) | firmware-nvidia-gsp-580.105.08",
                "nvidia-kernel-support--v1",
            ),
        ),
        (
            "nvidia-kernel-support",
            "550.127.05-1",
            ("nvidia-alternative (= 550.127.05-1)", "nvidia-alternative--kmod-alias"),
        ),
        ("libnvidia-ml1", "550.127.05-1", ("nvidia-alternative (= 550.127.05-1)",)),
        (
            "nvidia-driver-libs",
            "580.95.05-1",
            ("libgl1-nvidia-glvnd-glx (= 580.95.05-1)", "nvidia-egl-icd (= 580.95.05-1)"),
        ),
        ("nvidia-persistenced", "580.95.05-1", ("libnvidia-ml1 (>= 580.95.05)",)),
        (
            "nvidia-driver-cuda",
            "580.95.05-1",
            (
                "libcuda1 (= 580.95.05-1)",
                "nvidia-smi (= 580.95.05-1)",
                "nvidia-persistenced (>= 580)",
            ),
        ),
        (
            "nvidia-open",
            "580.95.05-1",
            ("nvidia-driver (= 580.95.05-1)", "nvidia-kernel-open-dkms (= 580.95.05-1)"),
        ),
        (
            "cuda-drivers-550",
            "550.144.03-1",
            ("nvidia-driver (= 550.144.03-1)", "nvidia-kernel-dkms (= 550.144.03-1)"),
        ),
        (
            "nvidia-smi",
            "550.127.05-1",
            ("nvidia-alternative (= 550.127.05-1)", "libnvidia-ml1 (= 550.127.05-1)", "python3"),
        ),
        ("libnccl-dev", "2.21.5-1+cuda12.4", ("libnccl2 (= 2.21.5-1+cuda12.4)",)),
        ("libnccl-dev", "2.26.2-1+cuda12.8", ("libnccl2 (= 2.26.2-1+cuda12.8)",)),
        ("nvidia-fabricmanager-550", "550.127.05-1", ("python3",)),
        ("libnvidia-nscq", "580.95.05-1", ()),
        (
            "nvidia-container-toolkit",
            "1.16.2-1",
            (
                "nvidia-container-toolkit-base (= 1.16.2-1)",
                "libnvidia-container-tools (>= 1.16.2-1)",
                "libnvidia-container-tools (<< 2.0.0)",
            ),
        ),
    ],
)
def test_dependency_shapes(name: str, version: str, depends: tuple[str, ...]) -> None:
    assert _spec(name, version).depends == depends


def test_provides_and_recommends_follow_debian() -> None:
    gsp = _spec("firmware-nvidia-gsp", "550.127.05-1")
    assert gsp.provides == ("firmware-nvidia-gsp (= 550.127.05)", "firmware-nvidia-gsp-550.127.05")
    dkms = _spec("nvidia-kernel-dkms", "550.127.05-1")
    assert "nvidia-kernel-550.127.05" in dkms.provides
    # The open module is reached by its name, not a virtual one.
    assert _spec("nvidia-kernel-open-dkms", "550.127.05-1").provides == (
        "nvidia-kernel-open-dkms-any (= 550.127.05)",
    )
    libcuda = _spec("libcuda1", "580.95.05-1")
    assert "nvidia-persistenced (>= 580)" in libcuda.recommends
    assert "Recommends: " in libcuda.control() and "Provides: libcuda.so.1 (= 580.95.05)" in (
        libcuda.control()
    )


def test_exclusive_packages_exclude_each_other_symmetrically() -> None:
    specs = catalog.packages()
    for spec in specs:
        for other in spec.conflicts:
            if " " in other or other in {p for s in specs for p in s.provides}:
                continue
            for back in (s for s in specs if s.name == other):
                assert spec.name in back.conflicts, f"{other} does not conflict {spec.name}"
    # The two kernel module flavours; Fabric Manager across its R580 rename.
    dkms = _spec("nvidia-kernel-open-dkms", "550.127.05-1")
    assert dkms.conflicts == ("nvidia-kernel-dkms",)
    fm = _spec("nvidia-fabricmanager", "580.95.05-1")
    assert fm.conflicts == ("nvidia-fabricmanager-550",)
    assert _spec("libnvidia-nscq", "580.95.05-1").conflicts == ("libnvidia-nscq-550",)


def test_pinning_package_ships_an_apt_preferences_file() -> None:
    spec = _spec("nvidia-driver-pinning-580.95.05", "580.95.05-1")
    (pref,) = spec.files
    assert pref.path == "/etc/apt/preferences.d/nvidia-driver-pinning-580.95.05"
    assert pref.conffile
    text = pref.content.decode()
    assert "\nPin: version 580.95.05-1\nPin-Priority: 1000\n" in text
    package_line = next(line for line in text.splitlines() if line.startswith("Package:"))
    for name in ("nvidia-open", "nvidia-driver", "nvidia-smi", "libcuda1", "nvidia-fabricmanager"):
        assert name in package_line.split()
    assert "nvidia-driver-pinning" in spec.provides
    assert "nvidia-driver-pinning" in spec.conflicts


def test_render_refuses_unfilled_markers() -> None:
    with pytest.raises(ValueError, match="@CUDA_VERSION@"):
        render("nvidia_smi.py", version="550.127.05", nvml_version="550.127")


def test_control_text_is_a_valid_stanza() -> None:
    text = _spec("nvidia-driver", "550.127.05-1").control()
    assert text.startswith("Package: nvidia-driver\n")
    assert "\nVersion: 550.127.05-1\n" in text
    assert "\nDepends: nvidia-driver-libs (= 550.127.05-1), " in text
    assert all(line.startswith(" ") or ": " in line for line in text.splitlines())


# --- the build ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> RepoInfo:
    return build_repository(tmp_path_factory.mktemp("labrepo"))


def test_build_layout(built: RepoInfo) -> None:
    cuda = built.path / built.suite_path
    toolkit = built.path / built.container_toolkit_suite_path
    for name in ("InRelease", "Release", "Release.gpg", "Packages", "Packages.gz"):
        assert (cuda / name).is_file(), cuda / name
    # NVIDIA's container-toolkit repository serves InRelease, Packages and Packages.xz only.
    assert {p.name for p in toolkit.iterdir() if not p.name.endswith(".deb")} == {
        "InRelease", "Packages", "Packages.xz"
    }  # fmt: skip
    assert re.fullmatch(r"[0-9A-F]{40}", built.fingerprint)
    assert built.armored_key.name == built.fingerprint[-8:].lower() + ".pub"
    assert built.armored_key.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert built.public_key.read_bytes()[:1] in (b"\x98", b"\x99", b"\xc6")  # an OpenPGP key
    assert built.armored_key_url_path == f"{built.suite_path}/{built.armored_key.name}"
    assert built.container_toolkit_key_url_path == "libnvidia-container/gpgkey"
    in_cuda = {p.name for p in cuda.glob("*.deb")}
    in_toolkit = {p.name for p in toolkit.glob("*.deb")}
    assert "nvidia-smi_550.127.05-1_amd64.deb" in in_cuda
    assert "nvidia-container-toolkit_1.16.2-1_amd64.deb" in in_toolkit
    assert not any(name.startswith("nvidia-container") for name in in_cuda)
    assert len(in_cuda) + len(in_toolkit) == len(catalog.packages())
    release = (cuda / "Release").read_text()
    assert "Origin: NVIDIA\n" in release
    assert "Label: NVIDIA CUDA\n" in release


def test_the_toolkit_release_lists_sha512_alone_as_nvidias_does(built: RepoInfo) -> None:
    inrelease = built.path / built.container_toolkit_suite_path / "InRelease"
    (release,) = paragraphs(clearsigned_text(inrelease.read_bytes()))
    hashes = {k for k in release if k in ("MD5Sum", "SHA1", "SHA256", "SHA512")}
    assert hashes == {"SHA512"}
    assert {line.split()[2] for line in release["SHA512"].splitlines() if line} == {
        "Packages", "Packages.xz"
    }  # fmt: skip
    cuda = paragraphs((built.path / built.suite_path / "Release").read_text())[0]
    assert "SHA256" in cuda and "Packages.gz" in cuda["SHA256"]


def test_the_lock_reads_both_lab_repositories(built: RepoInfo) -> None:
    key = built.armored_key.read_bytes()
    toolkit = read_index((built.path / built.container_toolkit_suite_path).as_uri(), key)
    cuda = read_index((built.path / built.suite_path).as_uri(), key)
    assert ("nvidia-container-toolkit", "1.17.8-1") in {(e.package, e.version) for e in toolkit}
    assert ("nvidia-smi", "550.127.05-1") in {(e.package, e.version) for e in cuda}
    assert all(re.fullmatch(r"[0-9a-f]{64}", e.sha256) for e in toolkit + cuda)


def test_release_is_signed_by_the_lab_key(built: RepoInfo) -> None:
    for suite in (built.suite_path, built.container_toolkit_suite_path):
        d = built.path / suite
        inline = subprocess.run(
            ["gpgv", "--keyring", str(built.public_key), str(d / "InRelease")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert inline.returncode == 0, inline.stderr
        assert built.fingerprint in inline.stderr.replace(" ", "")
        if not (d / "Release.gpg").exists():
            continue
        detached = subprocess.run(
            [
                "gpgv",
                "--keyring",
                str(built.public_key),
                str(d / "Release.gpg"),
                str(d / "Release"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert detached.returncode == 0, detached.stderr


def test_second_build_is_cached(built: RepoInfo) -> None:
    inrelease = built.path / built.suite_path / "InRelease"
    before = inrelease.stat().st_mtime_ns
    again = build_repository(built.path.parent)
    assert again == built
    assert inrelease.stat().st_mtime_ns == before


def test_key_is_generated_once_and_private(built: RepoInfo) -> None:
    keydir = built.path.parent / "key"
    assert (keydir / "lab-signing-key.asc").stat().st_mode & 0o077 == 0
    assert repo._ensure_key(keydir) == built.fingerprint


def test_debs_are_root_owned_and_reproducible(tmp_path: Path) -> None:
    spec = _spec("nvidia-smi", "550.127.05-1")
    a = repo.build_deb(spec, tmp_path, tmp_path / "a.deb")
    b = repo.build_deb(spec, tmp_path, tmp_path / "b.deb")
    assert a.read_bytes() == b.read_bytes()
    listing = subprocess.run(
        ["dpkg-deb", "--contents", str(a)], capture_output=True, text=True, check=True
    ).stdout
    assert "-rwxr-xr-x root/root" in listing
    assert "./usr/bin/nvidia-smi" in listing
    assert "2024-01-01 00:00" in listing


# --- apt, for real ----------------------------------------------------------------------------


class Apt:
    """apt-get/apt-cache with every path under one temporary directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        for sub in ("state/lists/partial", "cache/archives/partial", "etc/apt.conf.d"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        for sub in ("etc/trusted.gpg.d", "etc/preferences.d"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        self.status = base / "status"
        self.installed([])

    def options(self) -> list[str]:
        b = self.base
        pairs = {
            "Dir::State": b / "state",
            "Dir::State::status": self.status,
            "Dir::Cache": b / "cache",
            "Dir::Etc::SourceList": b / "sources.list",
            "Dir::Etc::SourceParts": "/dev/null",
            "Dir::Etc::Parts": b / "etc/apt.conf.d",
            "Dir::Etc::Trusted": b / "etc/trusted.gpg",
            "Dir::Etc::TrustedParts": b / "etc/trusted.gpg.d",
            "Dir::Etc::Preferences": b / "etc/preferences",
            "Dir::Etc::PreferencesParts": b / "etc/preferences.d",
            "APT::Architecture": "amd64",
            "APT::Sandbox::User": "root",
            "Debug::NoLocking": "1",
            "Acquire::Languages": "none",
            "Acquire::http::Proxy": "DIRECT",
            "Acquire::Retries": "0",
        }
        out: list[str] = []
        for key, value in pairs.items():
            out += ["-o", f"{key}={value}"]
        return out

    def sources(self, *lines: str) -> None:
        (self.base / "sources.list").write_text("".join(line + "\n" for line in lines))

    def installed(self, specs: list[PackageSpec]) -> None:
        """Write a dpkg status file: python3 (in every node image) plus these packages."""
        stanzas = [
            "Package: python3\nStatus: install ok installed\nPriority: optional\n"
            "Section: python\nMaintainer: Debian\nArchitecture: amd64\nVersion: 3.11.2-1+b1\n"
            "Description: interactive high-level object-oriented language\n"
        ]
        for spec in specs:
            control = spec.control().replace(
                f"Package: {spec.name}\n", f"Package: {spec.name}\nStatus: install ok installed\n"
            )
            stanzas.append(control)
        self.status.write_text("\n".join(stanzas))

    def __call__(self, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
        env["LC_ALL"] = "C"
        return subprocess.run(
            [tool, *self.options(), *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )


@pytest.fixture
def apt(tmp_path: Path) -> Apt:
    return Apt(tmp_path / "apt")


def _line(info: RepoInfo, root_uri: str, keyring: Path | None = None, suite: str = "") -> str:
    keyring = keyring or info.public_key
    return f"deb [signed-by={keyring}] {root_uri}/{suite or info.suite_path}/ /"


def test_apt_accepts_the_signed_repository(built: RepoInfo, apt: Apt) -> None:
    uri = f"file:{built.path}"
    apt.sources(_line(built, uri), _line(built, uri, suite=built.container_toolkit_suite_path))
    done = apt("apt-get", "update")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not signed" not in done.stdout + done.stderr
    assert "W:" not in done.stderr, done.stderr
    policy = apt("apt-cache", "policy", "cuda-drivers-550", "nvidia-container-toolkit").stdout
    assert "Candidate: 550.144.03-1" in policy
    assert "550.127.05-1 500" in policy
    assert "Candidate: 1.19.1-1" in policy


def test_apt_accepts_the_repository_over_http(built: RepoInfo, apt: Apt) -> None:
    handler = functools.partial(_QuietHandler, directory=str(built.path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        apt.sources(_line(built, f"http://127.0.0.1:{server.server_address[1]}"))
        done = apt("apt-get", "update")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "InRelease" in done.stdout
        policy = apt("apt-cache", "policy", "libnccl2").stdout
        assert "2.21.5-1+cuda12.4 500" in policy
        assert "2.26.2-1+cuda12.8 500" in policy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_apt_refuses_a_repository_signed_by_another_key(
    built: RepoInfo, apt: Apt, tmp_path: Path
) -> None:
    other = repo._ensure_key(tmp_path / "other-key")
    assert other != built.fingerprint
    apt.sources(
        _line(built, f"file:{built.path}", keyring=tmp_path / "other-key/lab-archive-keyring.gpg")
    )
    done = apt("apt-get", "update")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"NO_PUBKEY {built.fingerprint[-16:]}" in out
    assert "is not signed" in out
    assert not list((apt.base / "state/lists").glob("*Packages*"))


@pytest.fixture
def copied(built: RepoInfo, tmp_path: Path) -> Path:
    dest = tmp_path / "copy"
    shutil.copytree(built.path, dest)
    return dest


def test_apt_refuses_an_unsigned_repository(built: RepoInfo, apt: Apt, copied: Path) -> None:
    suite = copied / built.suite_path
    (suite / "InRelease").unlink()
    (suite / "Release.gpg").unlink()
    apt.sources(_line(built, f"file:{copied}"))
    done = apt("apt-get", "update")
    assert done.returncode != 0
    assert re.search(r"E: The repository 'file:\S+\s+Release' is not signed\.", done.stderr)


def test_apt_refuses_a_tampered_release(built: RepoInfo, apt: Apt, copied: Path) -> None:
    suite = copied / built.suite_path
    text = (suite / "InRelease").read_text()
    (suite / "InRelease").write_text(text.replace("Label: NVIDIA CUDA", "Label: NVIDIA CUDB"))
    apt.sources(_line(built, f"file:{copied}"))
    done = apt("apt-get", "update")
    out = done.stdout + done.stderr
    assert done.returncode != 0
    assert "BADSIG" in out


@pytest.fixture
def updated(built: RepoInfo, apt: Apt) -> Apt:
    apt.sources(_line(built, f"file:{built.path}"))
    done = apt("apt-get", "update")
    assert done.returncode == 0, done.stderr
    return apt


def _driver_set(
    branch: str, version: str, flavour: str = "open", companions: bool = True
) -> list[str]:
    """The driver packages the naming rules give debian12 at one version, with the
    companions the lock adds."""
    other = "nvidia-kernel-dkms" if flavour == "open" else "nvidia-kernel-open-dkms"
    names = [name for name in DEBIAN_DRIVER + COMPANIONS * companions if name != other]
    if branch == "580" and flavour == "open":
        names.insert(0, "nvidia-open")
    return [f"{name}={version}-1" for name in names]


def test_the_default_stack_installs(updated: Apt) -> None:
    done = updated(
        "apt-get",
        "-s",
        "-y",
        "install",
        *_driver_set("550", "550.127.05"),
        "nvidia-fabricmanager-550=550.127.05-1",
        "libnvidia-nscq-550=550.127.05-1",
        "cuda-toolkit-12-4=12.4.1-1",
        "libnccl2=2.21.5-1+cuda12.4",
        "libnccl-dev=2.21.5-1+cuda12.4",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Inst nvidia-driver (550.127.05-1 NVIDIA CUDA" in done.stdout
    assert "Inst nvidia-kernel-open-dkms (550.127.05-1" in done.stdout
    assert "Inst libnccl2 (2.21.5-1+cuda12.4" in done.stdout
    assert "Remv" not in done.stdout


def test_without_the_companions_an_older_build_does_not_install(updated: Apt) -> None:
    """Why the lock pins a build's companions: apt takes an automatic dependency at its
    newest version, so an older driver's exact relations cannot be met."""
    done = updated(
        "apt-get", "-s", "-y", "install", *_driver_set("550", "550.127.05", companions=False)
    )
    assert done.returncode != 0
    assert "Depends: nvidia-alternative (= 550.127.05-1) but 580.159.03-1 is to be installed" in (
        done.stdout
    )


def _installed_550() -> list[PackageSpec]:
    names = {n.split("=")[0] for n in _driver_set("550", "550.127.05")}
    names |= {"nvidia-fabricmanager-550", "libnvidia-nscq-550"}
    return [_spec(name, "550.127.05-1") for name in sorted(names)]


def test_550_to_580_swaps_cleanly(updated: Apt) -> None:
    updated.installed(_installed_550())
    done = updated(
        "apt-get",
        "-s",
        "-y",
        "install",
        *_driver_set("580", "580.95.05"),
        "nvidia-fabricmanager=580.95.05-1",
        "libnvidia-nscq=580.95.05-1",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # Debian names carry no branch: the driver moves in place; Fabric Manager's R580 rename
    # replaces the branch-suffixed package.
    for old in ("nvidia-fabricmanager-550", "libnvidia-nscq-550"):
        assert f"Remv {old} [550.127.05-1]" in done.stdout
    for name in ("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-smi", "libcuda1"):
        assert f"Inst {name} [550.127.05-1] (580.95.05-1" in done.stdout
    assert "Inst nvidia-open (580.95.05-1" in done.stdout
    assert "Inst nvidia-persistenced [550.127.05-1] (580.95.05-1" in done.stdout


def test_an_unattended_upgrade_moves_the_driver(updated: Apt) -> None:
    updated.installed(_installed_550())
    done = updated("apt-get", "-s", "-y", "upgrade")
    assert done.returncode == 0, done.stderr
    # Unbranched names follow the newest driver of any branch unless pinned (which is what
    # the version-lock packages and gpunode's own apt preferences and holds are for).
    assert "Inst nvidia-smi [550.127.05-1] (580.159.03-1" in done.stdout
    assert "Inst nvidia-fabricmanager-550 [550.127.05-1] (550.144.03-1" in done.stdout


def test_the_pinning_package_holds_the_580_driver(updated: Apt, tmp_path: Path) -> None:
    spec = _spec("nvidia-driver-pinning-580.95.05", "580.95.05-1")
    (pref,) = spec.files
    (updated.base / "etc/preferences.d/nvidia-driver-pinning").write_bytes(pref.content)
    policy = updated("apt-cache", "policy", "nvidia-open", "nvidia-smi").stdout
    assert policy.count("Candidate: 580.95.05-1") == 2
    assert "580.95.05-1 1000" in policy
    plain = updated("apt-cache", "policy", "libnccl2").stdout
    assert "Candidate: 2.26.2-1+cuda12.8" in plain  # the pin touches NVIDIA driver parts only
