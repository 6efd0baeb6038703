"""From a recipe to a build context: the Dockerfile rendered from ``images/training/`` and the
files it copies, with the recipe's input digest over all of them.

The context is a tar made here with fixed owners, modes and times, so that what the engine
receives depends only on the recipe and those files.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import tarfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import jinja2

from toolkit.acceptance.payload import ARCHIVE, runner_zipapp
from toolkit.ansible.content import find_content
from toolkit.errors import ImageError, StackError, clip
from toolkit.images.recipe import (
    LABEL_CUDA,
    LABEL_INPUT_DIGEST,
    LABEL_NCCL,
    LABEL_SOURCE_DATE,
    LABEL_STACK_ID,
    LABEL_VERSION,
    Recipe,
)
from toolkit.stack.aptindex import fetch_url, key_fingerprints

TEMPLATE = "Dockerfile.j2"
KEY_FILE = "nvidia-repo.key"
# Where the image holds the acceptance runner: `gpunode accept` starts its ranks with it.
RUNNER_PATH = f"/opt/gpunode/{ARCHIVE}"
# What a recipe value may hold to land in the Dockerfile: no whitespace, quote, `$` (a
# Dockerfile variable), `#`, backslash or anything a shell reads. The URL and base rules
# (check_url, check_base) already keep inventory values inside it; this is the last guard.
_DOCKERFILE_VALUE_RE = re.compile(r"[A-Za-z0-9._:/@+~%=,?-]*\Z")


@dataclass(frozen=True)
class Context:
    """A rendered build context."""

    files: dict[str, tuple[bytes, int]]  # name -> (content, mode)
    digest: str  # sha256:<hex> of the recipe and every input file

    @property
    def dockerfile(self) -> str:
        """The rendered Dockerfile."""
        return self.files["Dockerfile"][0].decode()

    def tar(self, mtime: int) -> bytes:
        """The context as a tar with sorted entries, root-owned, at ``mtime``."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name, (data, mode) in sorted(self.files.items()):
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), mode, mtime
                archive.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


def template_dir() -> Path:
    """``images/training/`` beside the playbooks (a checkout or ``$GPUNODE_CONTENT_DIR``)."""
    return find_content().root / "images" / "training"


def fetch_key(url: str) -> bytes:
    """The repository key, fetched on this machine (the build never fetches it itself).

    Raises:
        ImageError: It cannot be fetched.
    """
    try:
        return fetch_url(url)
    except StackError as err:
        raise ImageError(f"cannot fetch the repository key: {err.message}") from err


def check_key(key: bytes, expected: str, where: str) -> None:
    """Trust the repository key only when its fingerprint is the pinned one: the bytes checked
    here are the bytes the build copies and names in ``signed-by``.

    Raises:
        ImageError: No fingerprint is pinned, the data is not a key, or the fingerprint differs
            (the message names the expected and the found ones).
    """
    if not expected:
        raise ImageError(
            "gpunode_nvidia_repo_key_fingerprint is empty: the image's repository key is "
            "never trusted without a pinned fingerprint"
        )
    try:
        found = key_fingerprints(key)
    except ValueError as err:
        raise ImageError(f"the repository key {where} is not an OpenPGP key: {err}") from err
    if expected not in found:
        raise ImageError(
            f"the repository key {where} has fingerprint {', '.join(found)}, not the pinned "
            f"gpunode_nvidia_repo_key_fingerprint {expected}; the image build trusts no other key"
        )


def pip_source(recipe: Recipe) -> str:
    """pip's source options: the index or none, find-links, and the plain-http hosts."""
    parts = ["--index-url", recipe.pip_index_url] if recipe.pip_index_url else ["--no-index"]
    if recipe.pip_find_links:
        parts += ["--find-links", recipe.pip_find_links]
    for url in (recipe.pip_index_url, recipe.pip_find_links):
        # pip ignores plain-http sources unless their host is trusted by name; the hashes
        # vouch for the files.
        parsed = urlsplit(url or "")
        if parsed.scheme == "http" and parsed.hostname:
            parts += ["--trusted-host", parsed.hostname]
    return " ".join(shlex.quote(p) for p in parts)


def check_values(recipe: Recipe) -> None:
    """Refuse a recipe with a value the Dockerfile or its shell would read as syntax.

    Raises:
        ImageError: A value holds such a character; the message names the value.
    """
    values = {
        "base": recipe.base,
        "stack_id": recipe.stack_id,
        "os": recipe.os,
        "base_kind": recipe.base_kind,
        "cuda": recipe.cuda,
        "nccl": recipe.nccl,
        "gpunode_version": recipe.gpunode_version,
        **{f"apt_packages.{n}": f"{n}={v}" for n, v in recipe.apt_packages.items()},
        **{f"python_apt.{n}": f"{n}={v}" for n, v in recipe.python_apt.items()},
    }
    if recipe.apt:
        values.update({"apt.uri": recipe.apt.uri, "apt.suite": recipe.apt.suite})
    for name, value in values.items():
        if not _DOCKERFILE_VALUE_RE.match(value):
            raise ImageError(
                f"the image recipe's {name} {clip(repr(value))} holds a character a "
                "Dockerfile or a shell reads (whitespace, a quote, $, #, a backslash, ...)"
            )


def render(
    recipe: Recipe,
    key: bytes | None = None,
    templates: Path | None = None,
    runner: bytes | None = None,
) -> Context:
    """The build context of a recipe.

    Args:
        recipe: The recipe.
        key: The repository key's bytes (fetched from ``recipe.apt.key_url`` when None);
            either way checked against ``recipe.apt.fingerprint`` (:func:`check_key`).
        templates: Where the templates are (default ``images/training/``).
        runner: The acceptance runner the image carries (default: this gpunode's zipapp).

    Raises:
        ImageError: The template is missing, the key cannot be fetched or is not the pinned
            one, or a value would be
            read as Dockerfile or shell syntax (:func:`check_values`).
    """
    check_values(recipe)
    folder = templates or template_dir()
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["shquote"] = shlex.quote
    try:
        template = env.get_template(TEMPLATE)
    except jinja2.TemplateNotFound as err:
        raise ImageError(f"the training image template {folder / TEMPLATE} is missing") from err
    files: dict[str, tuple[bytes, int]] = {ARCHIVE: (runner or runner_zipapp(), 0o755)}
    key_ext = "gpg"
    if recipe.apt and recipe.apt_packages:
        if key is None:
            if not recipe.apt.key_url:
                raise ImageError(
                    "the image installs the stack's NCCL from the NVIDIA repository, but "
                    "gpunode_nvidia_repo_key_url is not set"
                )
            key = fetch_key(recipe.apt.key_url)
        check_key(key, recipe.apt.fingerprint, recipe.apt.key_url or "given")
        # apt reads an armored key only from a file named .asc (apt-secure(8), signed-by).
        key_ext = "asc" if key.lstrip().startswith(b"-----BEGIN PGP") else "gpg"
        files[KEY_FILE] = (key, 0o644)
    if recipe.python_lock:
        files["requirements.txt"] = (
            "".join(f"{line}\n" for line in recipe.python_lock).encode(),
            0o644,
        )
    inputs = {
        "recipe": recipe.to_dict(),
        "template": (folder / TEMPLATE).read_text(),
        "files": {n: hashlib.sha256(d).hexdigest() for n, (d, _m) in sorted(files.items())},
    }
    digest = "sha256:" + hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    labels = {
        LABEL_STACK_ID: recipe.stack_id,
        LABEL_SOURCE_DATE: str(recipe.source_date_epoch),
        LABEL_INPUT_DIGEST: digest,
        LABEL_VERSION: recipe.gpunode_version,
        LABEL_CUDA: recipe.cuda,
        LABEL_NCCL: recipe.nccl,
    }
    text = template.render(
        r=recipe,
        key_file=KEY_FILE,
        key_ext=key_ext,
        pip_source=pip_source(recipe),
        runner_file=ARCHIVE,
        runner_path=RUNNER_PATH,
        labels=labels,
    )
    files["Dockerfile"] = (text.encode(), 0o644)
    return Context(files=files, digest=digest)
