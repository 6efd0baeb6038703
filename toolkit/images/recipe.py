"""The recipe of a group's training image: pure data derived from the resolved stack.

Everything that decides the image's bytes is in the recipe (or in the files it names, whose
contents ``render`` adds to the input digest): the base pinned by digest or ID, the exact apt
versions of the stack's NCCL, the hashed Python lock, where packages come from, the source
date and the gpunode version. The inventory supplies it through variables (group_vars/all or
the group's own), documented in docs/architecture.md:

``gpunode_image_base``              base image by digest (``name@sha256:...``) or local ID
                                    (``sha256:...``); a tag alone is refused unless
``gpunode_image_allow_tag_base``    is true
``gpunode_image_base_kind``         what the base carries: ``cuda-runtime`` (NVIDIA's CUDA runtime
                                    image: NCCL installed and held, no Python; the default) or
                                    ``framework`` (NGC PyTorch style: Python, torch and NCCL);
                                    the build probes the base and fails when it is the other kind
``gpunode_image_python_packages``   on a ``cuda-runtime`` base: the exact apt versions of
                                    ``python3`` and ``python3-pip`` installed from the base OS's
                                    own repositories (required there, refused on a framework base)
``gpunode_image_os``                the base's OS (ubuntu2204, ubuntu2404, debian12) for the
                                    stack's apt names; default ubuntu2204 (NVIDIA CUDA bases)
``gpunode_image_source_date_epoch`` the source date stamped on every file and on the config;
                                    default ``$SOURCE_DATE_EPOCH``, else 0
``gpunode_image_registry``          a registry to push to (``host:port/path``); unset: SSH
``gpunode_acceptance_requirements`` the hashed Python lock (torch, the NCCL wheel, ...)
``gpunode_pip_find_links``, ``gpunode_pip_index_url``  where the lock's wheels are fetched
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit import __version__
from toolkit.errors import ConfigError, clip
from toolkit.inventory import inventory_flag
from toolkit.stack.debversion import DEB_VERSION_RE, MAX_DEB_TOKEN, PACKAGE_NAME_RE
from toolkit.stack.resolve import check_url
from toolkit.stack.versions import cuda_major_minor

REPOSITORY = "gpunode-training"
DEFAULT_OS = "ubuntu2204"
# An image reference as the Docker reference grammar allows (distribution/reference: a
# domain with a port, path components, a tag, a digest): nothing a Dockerfile line reads.
REFERENCE_RE = re.compile(r"[a-z0-9][a-z0-9._/:@-]{0,254}\Z", re.IGNORECASE)
DIGEST_RE = re.compile(
    r"(?:sha256:[0-9a-f]{64}|[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}@sha256:[0-9a-f]{64})\Z"
)
LOCK_LINE_RE = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!_-]+)"
    r"(?:[ \t]+--hash=sha256:[0-9a-f]{64})+\Z"
)
# The pip distribution that carries NCCL for a CUDA major (PyPI: nvidia-nccl-cu12; CUDA 13
# builds are published as nvidia-nccl-cu13).
NCCL_WHEEL = "nvidia-nccl-cu{major}"
# Labels every training image carries (the OCI annotation keys where one exists).
LABEL_STACK_ID = "org.gpunode.stack-id"
LABEL_SOURCE_DATE = "org.gpunode.source-date-epoch"
LABEL_INPUT_DIGEST = "org.gpunode.recipe-digest"
LABEL_VERSION = "org.gpunode.version"
LABEL_NCCL = "org.gpunode.nccl"
LABEL_CUDA = "org.gpunode.cuda"
# What a base carries, as gpunode_image_base_kind names it. cuda-runtime: NVIDIA's CUDA runtime
# image, whose Dockerfile installs libnccl2 and holds it (`apt-mark hold ... libnccl2`) and
# installs no Python (gitlab.com/nvidia/container-images/cuda, dist/<version>/<os>/runtime/
# Dockerfile). framework: an NGC framework image such as PyTorch, which ships Python, torch and
# NCCL (docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes, "Contents of the PyTorch
# container"). Sources: tests/data/real/SOURCES.md, "training image bases".
BASE_KIND_CUDA_RUNTIME = "cuda-runtime"
BASE_KIND_FRAMEWORK = "framework"
BASE_KINDS = (BASE_KIND_CUDA_RUNTIME, BASE_KIND_FRAMEWORK)
DEFAULT_BASE_KIND = BASE_KIND_CUDA_RUNTIME
# What a cuda-runtime base lacks and the image installs from the base OS's apt repositories,
# each at the exact version gpunode_image_python_packages pins: the interpreter (the runner and
# the framework) and pip (the hashed lock).
PYTHON_APT_PACKAGES = ("python3", "python3-pip")


@dataclass(frozen=True)
class AptSource:
    """The NVIDIA repository the stack's packages come from."""

    uri: str
    suite: str
    key_url: str | None
    fingerprint: str  # the key's pinned fingerprint (40 hex digits), "" when none is pinned


@dataclass(frozen=True)
class Recipe:
    """Everything that decides a training image's bytes."""

    group: str
    stack_id: str
    os: str
    base: str
    base_kind: str
    cuda: str
    nccl: str
    apt: AptSource | None
    apt_packages: dict[str, str]
    python_apt: dict[str, str]  # cuda-runtime: name -> exact apt version from the base OS
    python_lock: tuple[str, ...]
    pip_find_links: str | None
    pip_index_url: str | None
    source_date_epoch: int
    gpunode_version: str = __version__
    registry: str | None = None
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def tag(self) -> str:
        """The local tag: the repository and the stack id."""
        return f"{REPOSITORY}:{self.stack_id}"

    @property
    def nccl_wheel(self) -> str:
        """The NCCL wheel's distribution name for the stack's CUDA major."""
        return NCCL_WHEEL.format(major=self.cuda.split(".")[0])

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (the input of the digest, with the files ``render`` adds)."""
        data = asdict(self)
        data.pop("warnings")
        return data


def _var(values: Mapping[str, Any], key: str, where: str) -> str | None:
    value = values.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string, not {type(value).__name__}")
    return value


def _url_var(values: Mapping[str, Any], key: str, where: str) -> str | None:
    value = _var(values, key, where)
    return None if value is None else check_url(value, f"{where}: {key}")


def check_base(base: str | None, allow_tag: bool, where: str) -> str:
    """The base reference, refused unless pinned by digest or ID (or a tag is allowed).

    Raises:
        ConfigError: missing, or a tag alone without ``gpunode_image_allow_tag_base``.
    """
    if not base:
        raise ConfigError(
            f"{where}: gpunode_image_base is not set; name the training image's base by "
            "digest (nvcr.io/nvidia/cuda@sha256:...) or local image ID (sha256:...)"
        )
    if not REFERENCE_RE.match(base):
        raise ConfigError(
            f"{where}: gpunode_image_base {clip(repr(base))} is not an image reference "
            "(letters, digits and . _ / : @ -, as name[:tag][@sha256:digest] or sha256:<id>)"
        )
    if not DIGEST_RE.match(base) and not allow_tag:
        raise ConfigError(
            f"{where}: gpunode_image_base {base!r} is not pinned by digest; a tag can move "
            "and NVIDIA deletes old CUDA tags, so use name@sha256:<digest> or sha256:<id> "
            "(or set gpunode_image_allow_tag_base: true to accept the risk)"
        )
    return base


def check_base_kind(value: Any, where: str) -> str:
    """The base's kind: one of :data:`BASE_KINDS` (default :data:`DEFAULT_BASE_KIND`).

    Raises:
        ConfigError: Another value; the message names the variable and the kinds.
    """
    if value is None or value == "":
        return DEFAULT_BASE_KIND
    if value not in BASE_KINDS:
        raise ConfigError(
            f"{where}: gpunode_image_base_kind {clip(repr(value))} is not one of "
            f"{', '.join(BASE_KINDS)} (cuda-runtime: NVIDIA's CUDA runtime image, NCCL held and "
            "no Python; framework: Python, torch and NCCL already in the base)"
        )
    return str(value)


def check_python_packages(value: Any, kind: str, where: str) -> dict[str, str]:
    """The exact apt versions of Python and pip on a cuda-runtime base ({} on a framework base).

    Raises:
        ConfigError: Missing on a cuda-runtime base, set on a framework base, not a mapping, a
            name of :data:`PYTHON_APT_PACKAGES` not pinned, or a name or version that is not
            Debian's (the message names the variable and the rule).
    """
    key = "gpunode_image_python_packages"
    example = "{python3: 3.10.6-1~22.04.1, python3-pip: 22.0.2+dfsg-1ubuntu0.5} on Ubuntu 22.04"
    if kind != BASE_KIND_CUDA_RUNTIME:
        if value not in (None, "", {}):
            raise ConfigError(
                f"{where}: {key} is set but gpunode_image_base_kind is {kind}: a framework "
                "base brings its own Python; remove it"
            )
        return {}
    if value is None or value == "" or value == {}:
        raise ConfigError(
            f"{where}: {key} is not set; a cuda-runtime base has no Python, so pin the exact "
            f"apt versions of {' and '.join(PYTHON_APT_PACKAGES)} its OS's repositories offer "
            f"(`apt-cache policy` in the base), e.g. {example}"
        )
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: {key} must be a mapping of apt package -> exact version")
    pins: dict[str, str] = {}
    for name, version in value.items():
        name, version = str(name), str(version)
        if len(name) > MAX_DEB_TOKEN or not PACKAGE_NAME_RE.match(name):
            raise ConfigError(
                f"{where}: {key}: {clip(repr(name))} is not a Debian package name "
                "(Debian policy 5.6.1)"
            )
        if len(version) > MAX_DEB_TOKEN or not DEB_VERSION_RE.match(version):
            raise ConfigError(
                f"{where}: {key}.{name}: {clip(repr(version))} is not an exact Debian version "
                "(Debian policy 5.6.12, e.g. 3.11.2-1+b1)"
            )
        pins[name] = version
    missing = [name for name in PYTHON_APT_PACKAGES if name not in pins]
    if missing:
        raise ConfigError(
            f"{where}: {key} does not pin {', '.join(missing)}: a cuda-runtime base needs "
            f"{' and '.join(PYTHON_APT_PACKAGES)}, each at an exact version"
        )
    return dict(sorted(pins.items()))


def check_lock(lock: Any, where: str) -> tuple[str, ...]:
    """The Python lock's lines, each ``name==version --hash=sha256:<hex>``.

    Raises:
        ConfigError: not a list, or a line without an exact pin and a hash.
    """
    if lock is None:
        return ()
    if isinstance(lock, str) or not isinstance(lock, list):
        raise ConfigError(
            f"{where}: gpunode_acceptance_requirements must be a list of "
            "'name==version --hash=sha256:<digest>' lines (pip --require-hashes)"
        )
    lines = tuple(str(line).strip() for line in lock)
    for number, line in enumerate(lines, 1):
        if not LOCK_LINE_RE.match(line):
            raise ConfigError(
                f"{where}: gpunode_acceptance_requirements line {number} {line!r}: every "
                "line needs an exact version and at least one --hash=sha256: (pip "
                "--require-hashes)"
            )
    return lines


def locked_version(lock: tuple[str, ...], distribution: str) -> str | None:
    """The version the lock pins a distribution at (names compared as PEP 503 does)."""

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    for line in lock:
        m = LOCK_LINE_RE.match(line)
        if m and norm(m["name"]) == norm(distribution):
            return m["version"]
    return None


def make_recipe(
    group: str, resolved: Mapping[str, Any], values: Mapping[str, Any], where: str
) -> Recipe:
    """The recipe of ``group``'s image from its resolved stack and its variables.

    Args:
        group: The inventory group.
        resolved: ``toolkit.stack.resolve.resolve(...)`` for the image's OS.
        values: The group's merged variables.
        where: Where the variables come from, for messages.

    Raises:
        ConfigError: A variable breaks a rule (the message names it).
    """
    allow_tag = inventory_flag(values, "gpunode_image_allow_tag_base", where)
    base = check_base(_var(values, "gpunode_image_base", where), allow_tag, where)
    lock = check_lock(values.get("gpunode_acceptance_requirements"), where)
    find_links = _url_var(values, "gpunode_pip_find_links", where)
    index_url = _url_var(values, "gpunode_pip_index_url", where)
    if lock and not (find_links or index_url):
        raise ConfigError(
            f"{where}: gpunode_acceptance_requirements is set but neither "
            "gpunode_pip_find_links nor gpunode_pip_index_url says where its wheels are"
        )
    epoch_value = values.get("gpunode_image_source_date_epoch", os.environ.get("SOURCE_DATE_EPOCH"))
    try:
        epoch = int(epoch_value) if epoch_value not in (None, "") else 0
    except (TypeError, ValueError):
        epoch = -1
    if epoch < 0:
        raise ConfigError(
            f"{where}: gpunode_image_source_date_epoch {epoch_value!r} is not a number of "
            "seconds since 1970"
        )
    nccl = resolved["nccl"]
    apt_packages = {"libnccl2": str(nccl["packages"]["libnccl2"])}
    cuda_repo = next((r for r in resolved.get("repositories", []) if r["name"] == "cuda"), None)
    apt = (
        AptSource(
            uri=str(cuda_repo["uri"]),
            suite=str(cuda_repo["suite"]),
            # The resolved repository's key URL where resolve() fills one in (its {os} and
            # {arch} templated like the repository URL), else the variable as written.
            key_url=cuda_repo.get("key_url") or _var(values, "gpunode_nvidia_repo_key_url", where),
            fingerprint=str(cuda_repo.get("fingerprint") or ""),
        )
        if cuda_repo
        else None
    )
    base_kind = check_base_kind(values.get("gpunode_image_base_kind"), where)
    python_apt = check_python_packages(
        values.get("gpunode_image_python_packages"), base_kind, where
    )
    recipe = Recipe(
        group=group,
        stack_id=str(resolved["stack_id"]),
        os=str(resolved["os"]),
        base=base,
        base_kind=base_kind,
        cuda="{}.{}".format(*cuda_major_minor(str(resolved["cuda"]["version"]))),
        nccl=str(nccl["version"]),
        apt=apt,
        apt_packages=apt_packages,
        python_apt=python_apt,
        python_lock=lock,
        pip_find_links=find_links,
        pip_index_url=index_url,
        source_date_epoch=epoch,
        registry=_var(values, "gpunode_image_registry", where),
    )
    warnings = []
    wheel_version = locked_version(lock, recipe.nccl_wheel)
    if lock and wheel_version is None:
        warnings.append(
            f"the Python lock does not pin {recipe.nccl_wheel}: the framework's NCCL is "
            "whatever its wheel brings"
        )
    elif wheel_version is not None and wheel_version != recipe.nccl:
        warnings.append(
            f"the Python lock pins {recipe.nccl_wheel}=={wheel_version} but the stack pins "
            f"NCCL {recipe.nccl}: the image will carry two NCCLs"
        )
    return Recipe(**{**recipe.__dict__, "warnings": tuple(warnings)})
