"""The lab's signed apt repository of stand-in NVIDIA packages.

:func:`build_repository` builds two flat repositories shaped like NVIDIA's (the CUDA
repository ``compute/cuda/repos/debian12/x86_64/`` and the container toolkit's
``libnvidia-container/stable/deb/amd64/``), each used as ``deb [signed-by=<keyring>] <url> /``.
Each publishes its index in the shape of the NVIDIA repository it stands in for
(:data:`_SHAPES`), signed with a lab key generated once into the destination, so apt's
signature and hash checks run for real on the nodes.

The user's ``~/.gnupg`` is never touched: every gpg call runs in a throw-away ``GNUPGHOME``
(with a short path, because gpg-agent's socket path is limited) whose agent is stopped
before returning. The built tree is cached under a digest of the catalog, the stand-in
sources and the key, so a second build with nothing changed only compares one file.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from toolkit.errors import LabError
from toolkit.filelock import file_lock
from toolkit.lab import catalog, driver_packages, package_spec

# Bumped when the layout or build recipe changes in a way the digest would not see.
RECIPE = "3"
# File times inside the .debs, so that a package's bytes depend only on its recipe.
SOURCE_DATE_EPOCH = 1704067200  # 2024-01-01T00:00:00Z

CUDA_SUITE = "compute/cuda/repos/debian12/x86_64"
CONTAINER_TOOLKIT_SUITE = "libnvidia-container/stable/deb/amd64"
KEY_UID = "gpunode lab repository signing key <lab-repo@gpunode.invalid>"


@dataclass(frozen=True)
class _Shape:
    """How one lab repository publishes its index.

    Attributes:
        fields: Release fields, like NVIDIA's, so that roles pinning by origin work unchanged.
        hashes: The digests the Release lists (apt-ftparchive's MD5, SHA1, SHA256, SHA512).
        packages: The Packages files served (``Packages``, ``Packages.gz``, ``Packages.xz``).
        detached: Whether ``Release`` and ``Release.gpg`` are served beside ``InRelease``.
    """

    fields: dict[str, str]
    hashes: tuple[str, ...]
    packages: tuple[str, ...]
    detached: bool


_ALL_HASHES = ("MD5", "SHA1", "SHA256", "SHA512")
_SHAPES = {
    # The CUDA repository's index shape is not verified (review real-hardware-748e562, N1:
    # "Not verified: whether the CUDA repo's InRelease carries SHA256"): apt-ftparchive's own,
    # every digest, Packages and Packages.gz, InRelease and Release.gpg.
    CUDA_SUITE: _Shape(
        fields={"Origin": "NVIDIA", "Label": "NVIDIA CUDA", "Architectures": "amd64 all"},
        hashes=_ALL_HASHES,
        packages=("Packages", "Packages.gz"),
        detached=True,
    ),
    # NVIDIA's container-toolkit repository (NVIDIA/libnvidia-container, gh-pages,
    # stable/deb/amd64/ at 24feed94 and 69f4ab79; tests/data/real/libnvidia-container/): an
    # InRelease listing SHA512 alone, for Packages and Packages.xz; no Packages.gz, Release
    # or Release.gpg.
    CONTAINER_TOOLKIT_SUITE: _Shape(
        fields={"Origin": "NVIDIA", "Label": "libnvidia-container", "Architectures": "amd64 all"},
        hashes=("SHA512",),
        packages=("Packages", "Packages.xz"),
        detached=False,
    ),
}
_SUITE_OF_REPOSITORY = {"cuda": CUDA_SUITE, "container-toolkit": CONTAINER_TOOLKIT_SUITE}


@dataclass(frozen=True)
class RepoInfo:
    """Where the built repository lies and how nodes trust it.

    Attributes:
        path: The directory to serve over HTTP (its root is the server's root).
        suite_path: The CUDA flat repository inside ``path``:
            ``deb [signed-by=<keyring>] http://<server>/<suite_path>/ /``.
        public_key: The binary keyring to install on nodes as ``signed-by``.
        armored_key: The ASCII-armored key, served at ``<suite_path>/<keyid>.pub`` like
            NVIDIA's ``3bf863cc.pub``.
        fingerprint: The signing key's fingerprint (40 hex digits, upper case).
        container_toolkit_suite_path: The container toolkit's flat repository inside ``path``.
        container_toolkit_armored_key: Its key file (the same lab key), served as ``gpgkey``.
        digest: The cache key the tree was built from.
    """

    path: Path
    suite_path: str
    public_key: Path
    armored_key: Path
    fingerprint: str
    container_toolkit_suite_path: str
    container_toolkit_armored_key: Path
    digest: str

    @property
    def armored_key_url_path(self) -> str:
        """The armored key's path relative to ``path`` (for ``<server>/<this>`` URLs)."""
        return self.armored_key.relative_to(self.path).as_posix()

    @property
    def container_toolkit_key_url_path(self) -> str:
        """The container toolkit key's path relative to ``path``."""
        return self.container_toolkit_armored_key.relative_to(self.path).as_posix()


def build_repository(dest: Path) -> RepoInfo:
    """Build (or reuse) the signed lab repository under ``dest``.

    Layout: ``dest/key/`` holds the lab key (secret key, binary keyring, armored key),
    ``dest/www/`` is what to serve. Concurrent builds into one ``dest`` wait for each other.

    Args:
        dest: A directory owned by the lab (created when missing).

    Returns:
        Where the repository and its key lie.

    Raises:
        LabError: A tool is missing (``dpkg-deb``, ``apt-ftparchive`` from apt-utils, ``gpg``)
            or failed.
    """
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with file_lock(dest / ".lock"):
        fingerprint = _ensure_key(dest / "key")
        digest = _digest(fingerprint)
        www = dest / "www"
        stamp = dest / "build.json"
        info = _info(dest, fingerprint, digest)
        if _stamp_matches(stamp, digest) and _tree_complete(www):
            return info
        # Stages left by a build that was killed half-way (we hold the lock: none is live).
        for leftover in dest.glob("www.*"):
            if leftover.is_dir():
                shutil.rmtree(leftover)
        stage = Path(tempfile.mkdtemp(prefix="www.", dir=dest))
        try:
            _build_tree(stage, dest / "key")
            _publish_keys(stage, dest / "key", fingerprint)
            old = dest / "www.old"
            if old.exists():
                shutil.rmtree(old)
            if www.exists():
                www.rename(old)
            stage.rename(www)
            if old.exists():
                shutil.rmtree(old)
        finally:
            if stage.exists():
                shutil.rmtree(stage)
        stamp.write_text(json.dumps({"digest": digest, "fingerprint": fingerprint}) + "\n")
        return info


def _info(dest: Path, fingerprint: str, digest: str) -> RepoInfo:
    www = dest / "www"
    keyid = fingerprint[-8:].lower()
    return RepoInfo(
        path=www,
        suite_path=CUDA_SUITE,
        public_key=dest / "key" / "lab-archive-keyring.gpg",
        armored_key=www / CUDA_SUITE / f"{keyid}.pub",
        fingerprint=fingerprint,
        container_toolkit_suite_path=CONTAINER_TOOLKIT_SUITE,
        container_toolkit_armored_key=www / "libnvidia-container" / "gpgkey",
        digest=digest,
    )


def _stamp_matches(stamp: Path, digest: str) -> bool:
    try:
        return bool(json.loads(stamp.read_text()).get("digest") == digest)
    except (OSError, ValueError):
        return False


def _tree_complete(www: Path) -> bool:
    return all(
        (www / suite / name).is_file()
        for suite, shape in _SHAPES.items()
        for name in ("InRelease", *shape.packages)
    )


def _digest(fingerprint: str) -> str:
    """The cache key: recipe, key, catalog (control fields and file bytes) and sources."""
    h = hashlib.sha256()
    h.update(f"{RECIPE}\0{fingerprint}\0".encode())
    modules = (catalog, driver_packages, package_spec)
    for path in [
        Path(__file__),
        *(Path(str(m.__file__)) for m in modules),
        *package_spec.source_files(),
    ]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# --- the key -------------------------------------------------------------------------------


@contextlib.contextmanager
def _gnupg_home() -> Iterator[Path]:
    """A private, short-lived GNUPGHOME whose agent is stopped on the way out."""
    home = Path(tempfile.mkdtemp(prefix="gpunode-gpg-", dir="/tmp"))
    home.chmod(0o700)
    try:
        yield home
    finally:
        if shutil.which("gpgconf"):
            subprocess.run(
                ["gpgconf", "--homedir", str(home), "--kill", "all"],
                capture_output=True,
                check=False,
                timeout=30,
            )
        shutil.rmtree(home, ignore_errors=True)


def _gpg(home: Path, *args: str) -> str:
    return _tool(["gpg", "--homedir", str(home), "--batch", "--yes", "--no-tty", *args])


def _ensure_key(keydir: Path) -> str:
    """Generate the lab key once; return its fingerprint."""
    secret = keydir / "lab-signing-key.asc"
    keyring = keydir / "lab-archive-keyring.gpg"
    armored = keydir / "lab-archive-key.asc"
    fpr_file = keydir / "fingerprint"
    if secret.is_file() and keyring.is_file() and armored.is_file() and fpr_file.is_file():
        return fpr_file.read_text().strip()
    keydir.mkdir(parents=True, exist_ok=True)
    keydir.chmod(0o700)
    with _gnupg_home() as home:
        _gpg(
            home,
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            "",
            "--quick-generate-key",
            KEY_UID,
            "ed25519",
            "sign",
            "never",
        )
        fingerprint = _fingerprint(home)
        secret_text = _gpg(home, "--armor", "--export-secret-keys", fingerprint)
        armored_text = _gpg(home, "--armor", "--export", fingerprint)
        binary = Path(home) / "export.gpg"
        _gpg(home, "--output", str(binary), "--export", fingerprint)
        # Write the secret last, with a private mode, so a half-made key dir is regenerated.
        keyring.write_bytes(binary.read_bytes())
        keyring.chmod(0o644)
        armored.write_text(armored_text)
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secret_text)
        fpr_file.write_text(fingerprint + "\n")
    return fingerprint


def _fingerprint(home: Path) -> str:
    listing = _gpg(home, "--with-colons", "--list-secret-keys")
    for line in listing.splitlines():
        if line.startswith("fpr:"):
            return line.split(":")[9]
    raise LabError("gpg generated no key for the lab repository")


def _publish_keys(www: Path, keydir: Path, fingerprint: str) -> None:
    armored = (keydir / "lab-archive-key.asc").read_bytes()
    keyid = fingerprint[-8:].lower()
    (www / CUDA_SUITE / f"{keyid}.pub").write_bytes(armored)
    (www / "libnvidia-container" / "gpgkey").write_bytes(armored)
    # The binary keyring too, as NVIDIA's cuda-keyring package installs it.
    shutil.copyfile(
        keydir / "lab-archive-keyring.gpg", www / CUDA_SUITE / "lab-archive-keyring.gpg"
    )


# --- the packages and indices --------------------------------------------------------------


def _build_tree(www: Path, keydir: Path) -> None:
    for suite in _SHAPES:
        (www / suite).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpunode-debs-") as scratch:
        for spec in catalog.packages():
            suite_dir = www / _SUITE_OF_REPOSITORY[spec.repository]
            build_deb(spec, Path(scratch), suite_dir / spec.filename)
    with _gnupg_home() as home:
        _gpg(home, "--import", str(keydir / "lab-signing-key.asc"))
        fingerprint = (keydir / "fingerprint").read_text().strip()
        for suite, shape in _SHAPES.items():
            _index_and_sign(www / suite, shape, home, fingerprint)


def build_deb(spec: package_spec.PackageSpec, scratch: Path, out: Path) -> Path:
    """Build one stand-in ``.deb`` (root-owned, file times fixed) at ``out``.

    Raises:
        LabError: ``dpkg-deb`` is missing or refused the package.
    """
    root = scratch / f"{spec.name}_{spec.version}"
    if root.exists():
        shutil.rmtree(root)
    debian = root / "DEBIAN"
    debian.mkdir(parents=True)
    for file in spec.files:
        target = root / file.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if file.link is not None:
            target.symlink_to(file.link)
            continue
        target.write_bytes(file.content)
        target.chmod(file.mode)
    (debian / "control").write_text(spec.control())
    conffiles = [f.path for f in spec.files if f.conffile]
    if conffiles:
        (debian / "conffiles").write_text("\n".join(conffiles) + "\n")
    for name, text in spec.scripts:
        script = debian / name
        script.write_text(text)
        script.chmod(0o755)
    for path in [root, *root.rglob("*")]:
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
        os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)
    # dpkg-deb clamps member times to SOURCE_DATE_EPOCH: equal recipes give equal bytes.
    _tool(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)],
        env={"SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)},
    )
    shutil.rmtree(root)
    return out


def _index_and_sign(suite_dir: Path, shape: _Shape, home: Path, fingerprint: str) -> None:
    if not any(suite_dir.glob("*.deb")):
        raise LabError(f"lab repository {suite_dir.name}: no packages to index")
    packages = _tool(["apt-ftparchive", "packages", "."], cwd=suite_dir).encode()
    packed = {
        "Packages": packages,
        "Packages.gz": gzip.compress(packages, mtime=0),
        "Packages.xz": lzma.compress(packages, format=lzma.FORMAT_XZ),
    }
    for name in shape.packages:
        (suite_dir / name).write_bytes(packed[name])
    options: list[str] = []
    for key, value in shape.fields.items():
        options += ["-o", f"APT::FTPArchive::Release::{key}={value}"]
    for digest in _ALL_HASHES:
        wanted = "true" if digest in shape.hashes else "false"
        options += ["-o", f"APT::FTPArchive::Release::{digest}={wanted}"]
    release = _tool(["apt-ftparchive", *options, "release", "."], cwd=suite_dir)
    (suite_dir / "Release").write_text(release)
    sign = ["--local-user", fingerprint, "--digest-algo", "SHA512"]
    _gpg(
        home,
        *sign,
        "--clearsign",
        "--output",
        str(suite_dir / "InRelease"),
        str(suite_dir / "Release"),
    )
    if not shape.detached:
        (suite_dir / "Release").unlink()
        return
    _gpg(
        home,
        *sign,
        "--armor",
        "--detach-sign",
        "--output",
        str(suite_dir / "Release.gpg"),
        str(suite_dir / "Release"),
    )


def _tool(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a build tool; a missing tool or a failure becomes ``LabError`` naming it."""
    if shutil.which(argv[0]) is None:
        package = {"apt-ftparchive": "apt-utils", "dpkg-deb": "dpkg", "gpg": "gnupg"}.get(
            argv[0], argv[0]
        )
        raise LabError(
            f"`{argv[0]}` is needed to build the lab repository; install the Debian package "
            f"{package} (scripts/setup-host does)"
        )
    try:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
    except subprocess.TimeoutExpired as err:
        raise LabError(f"`{' '.join(argv)}` did not finish within 120s") from err
    if done.returncode != 0:
        detail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise LabError(f"`{' '.join(argv)}` failed with exit code {done.returncode}: {detail}")
    return done.stdout
