"""Resolving a stack to packages per OS, and the stack id.

The package names are data (``naming.yml``: per OS family and driver branch range, each rule
with its source); this module fills them from the stack. A package's version is a
*requirement* until a lock fixes it: ``V-*`` (any Debian revision of upstream version ``V``) or
an exact version (NCCL's ``2.21.5-1+cuda12.4``). ``toolkit.stack.lock`` turns requirements into
the exact versions a repository carries. The repositories (URL, key URL, key fingerprint) are
filled here too, by one rule (:func:`repositories`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from toolkit.config import did_you_mean, parse_yaml
from toolkit.errors import ConfigError, clip
from toolkit.stack import systems
from toolkit.stack.matrix import matrix
from toolkit.stack.models import Hardware, Stack
from toolkit.stack.systems import SUPPORTED_OS
from toolkit.stack.versions import cuda_full, cuda_major_minor, driver_branch, parse_nccl

# Architectures whose servers are Arm (Grace): NVIDIA's repositories call that arch "sbsa".
_ARM_ARCHITECTURES = frozenset({"grace_hopper", "grace_blackwell"})
DEB_ARCH = {"x86_64": "amd64", "sbsa": "arm64"}
# A requirement on the upstream version only: any Debian revision.
ANY_REVISION = "-*"
# A repository URL: http(s) with a host, or file; RFC 3986 characters less the ones a shell or
# an apt sources line reads (`$ ( ) ; & ! * #`, and backticks and quotes, which RFC 3986 lacks),
# so no whitespace, control character, quote, command substitution or comment can reach an apt
# sources line, a shell or a template.
_URL_RE = re.compile(
    r"(?:https?://(?:[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?|file://)"
    r"(?:/[A-Za-z0-9\-._~:/?@+,=%]*)?\Z"
)
_FINGERPRINT_RE = re.compile(r"^[0-9A-F]{40}\Z")


@lru_cache(maxsize=1)
def naming_rules() -> dict[str, Any]:
    """The package naming rules shipped with the package (``naming.yml``)."""
    text = resources.files("toolkit.stack").joinpath("naming.yml").read_text(encoding="utf-8")
    data: dict[str, Any] = parse_yaml(text, "toolkit/stack/naming.yml")
    return data


def os_family(os_id: str) -> str:
    """The naming-rule family of an OS (``ubuntu2204`` -> ``ubuntu``)."""
    return systems.family(os_id)


def repository_variables() -> tuple[str, ...]:
    """Every inventory variable that moves a repository: URLs, key URLs, key fingerprints."""
    return tuple(
        repo[field]["variable"]
        for repo in naming_rules()["repositories"]
        for field in ("url", "key_url", "fingerprint")
    )


def fabric_manager_enabled(stack: Stack, hardware: Hardware) -> bool:
    """Whether Fabric Manager is installed: NVSwitch present, not an IMEX platform, not "none"."""
    return hardware.gpu.nvswitch and not imex_enabled(hardware) and stack.fabric_manager != "none"


def imex_enabled(hardware: Hardware) -> bool:
    """Whether the IMEX daemon is installed: a platform whose NVLink domain spans nodes and is
    managed by IMEX, not by Fabric Manager (matrix.yml ``fabric: imex``: GB200/GB300 NVL)."""
    arch = matrix().architectures[hardware.gpu.info.architecture]
    return arch.fabric is not None and arch.fabric.value == "imex"


def nvlsm_version(stack: Stack, hardware: Hardware) -> str | None:
    """NVLSM's pinned version where it is installed: beside Fabric Manager on a GPU whose
    NVSwitch generation needs it (gpus.yml ``nvlsm``); None elsewhere."""
    if stack.nvlsm and fabric_manager_enabled(stack, hardware) and hardware.gpu.info.nvlsm:
        return stack.nvlsm
    return None


# The rule that refuses an IMEX platform on a branch without a public IMEX package name.
IMEX_NAME_RULE = "imex.package_name"
IMEX_NAME_SOURCE = (
    "NVIDIA/gpu-driver-container install.sh imex_install: nvidia-imex from R580, "
    "nvidia-imex-<branch> for R550-R579, none before (toolkit/stack/naming.yml, sources.imex)"
)


def imex_unnamed_families(stack: Stack, hardware: Hardware) -> list[str]:
    """The OS families where this IMEX platform's driver branch has no IMEX package name
    (``naming.yml`` ``imex``); empty where IMEX is not installed or every family names one."""
    if not imex_enabled(hardware):
        return []
    branch = driver_branch(stack.driver.version)
    families = sorted({f for rule in naming_rules()["driver"] for f in rule["families"]})
    return [family for family in families if not _covered("imex", family, branch)]


def imex_unnamed_message(stack: Stack) -> str:
    """Why an IMEX platform's branch is refused, naming the branch and the names that exist."""
    branch = driver_branch(stack.driver.version)
    return (
        f"driver {stack.driver.version} (branch {branch}) has no IMEX package: NVIDIA's "
        "driver container installs nvidia-imex-<branch> from R550 and nvidia-imex from R580, "
        f"and none on R{branch}; pin a driver of R550 or later for this IMEX platform"
    )


def fabric_manager_version(stack: Stack) -> str:
    """The Fabric Manager version: the driver's unless pinned explicitly."""
    if stack.fabric_manager in ("auto", "none"):
        return stack.driver.version
    return stack.fabric_manager


def _applies(rule: Mapping[str, Any], family: str, key: str, value: int) -> bool:
    return family in rule["families"] and (
        int(rule.get(f"min_{key}", 0)) <= value <= int(rule.get(f"max_{key}", 10_000))
    )


def _rule(component: str, family: str, key: str, value: int) -> Mapping[str, Any]:
    for rule in naming_rules()[component]:
        if _applies(rule, family, key, value):
            return dict(rule)
    raise ConfigError(f"no naming rule for {component} on the {family} family ({key} {value})")


def requirement(entry: Mapping[str, Any], version: str) -> str:
    """The version requirement of one package entry for a component version."""
    if entry.get("match", "upstream") == "exact":
        return version
    epoch = f"{entry['epoch']}:" if entry.get("epoch") else ""
    return f"{epoch}{version}{ANY_REVISION}"


def _fill(entries: list[dict[str, Any]], fields: Mapping[str, Any]) -> dict[str, str]:
    """Package name -> version requirement, for the entries that apply to the driver branch."""
    branch = int(fields["branch"])
    return {
        str(entry["name"]).format(**fields): requirement(entry, str(fields["version"]))
        for entry in entries
        if int(entry.get("min_branch", 0)) <= branch <= int(entry.get("max_branch", 10_000))
    }


def _sections(stack: Stack, hardware: Hardware, os_id: str, arch: str) -> dict[str, Any]:
    """Each component's version and its packages (name -> requirement) on one OS and arch."""
    family = os_family(os_id)
    driver = stack.driver.version
    branch = driver_branch(driver)
    cuda = cuda_full(stack.cuda)
    cuda_major, cuda_minor = cuda_major_minor(cuda)
    base = {"branch": branch, "cuda_major": cuda_major, "cuda_minor": cuda_minor}
    nccl = parse_nccl(stack.nccl)
    driver_rule = _rule("driver", family, "branch", branch)

    def packages(component: str, version: str) -> dict[str, str]:
        rule = _rule(component, family, "branch", branch)
        return _fill(rule["packages"], {**base, "version": version})

    sections: dict[str, Any] = {
        "driver": {
            "version": driver,
            "branch": str(branch),
            "flavour": stack.driver.flavour,
            "packages": _fill(driver_rule[stack.driver.flavour], {**base, "version": driver}),
            "pinning_packages": _fill(driver_rule["pinning"], {**base, "version": driver}),
        },
        "cuda": {"version": cuda, "packages": packages("cuda", cuda)},
        "nccl": {
            "version": nccl.version,
            "cuda": nccl.cuda,
            "packages": packages("nccl", nccl.package_version),
        },
    }
    enabled = fabric_manager_enabled(stack, hardware)
    fm_version = fabric_manager_version(stack)
    nvlsm = nvlsm_version(stack, hardware)
    nvsdm = bool(nvlsm) and arch == "x86_64" and _covered("nvsdm", family, branch)
    # NVLSM is one family with Fabric Manager: installed, pinned, held and started with it
    # (Fabric Manager's start script launches it where the platform needs it).
    sections["fabric_manager"] = {
        "enabled": enabled,
        "version": fm_version if enabled else None,
        "packages": {
            **(packages("fabric_manager", fm_version) if enabled else {}),
            **(packages("nvlsm", nvlsm) if nvlsm else {}),
            # NVIDIA's driver container installs libnvsdm with NVLSM's family, at the
            # driver's version, on amd64 only and from R570 (naming.yml sources.nvsdm).
            **(packages("nvsdm", driver) if nvsdm else {}),
        },
        "nvlsm": nvlsm,
    }
    imex = imex_enabled(hardware)
    if imex and imex_unnamed_families(stack, hardware):
        raise ConfigError(
            f"{imex_unnamed_message(stack)} [rule {IMEX_NAME_RULE}; source: {IMEX_NAME_SOURCE}]"
        )
    sections["imex"] = {
        "enabled": imex,
        "version": driver if imex else None,
        "packages": packages("imex", driver) if imex else {},
    }
    sections["container_toolkit"] = {
        "version": stack.container_toolkit,
        "packages": packages("container_toolkit", stack.container_toolkit),
    }
    sections["cudnn"] = _cudnn(stack.cudnn, base, family)
    sections["dcgm"] = _dcgm(stack.dcgm, base, family)
    return sections


def _covered(component: str, family: str, branch: int) -> bool:
    """Whether a naming rule of the component covers the family and driver branch."""
    return any(_applies(rule, family, "branch", branch) for rule in naming_rules()[component])


def _cudnn(version: str | None, base: dict[str, Any], family: str) -> dict[str, Any] | None:
    if version is None:
        return None
    major = int(version.split(".", 1)[0])
    rule = _rule("cudnn", family, "major", major)
    fields = {**base, "version": version, "cudnn_major": major}
    plain = version.split("-", 1)[0]
    return {"version": plain, "packages": _fill(rule["packages"], fields)}


def _dcgm(version: str | None, base: dict[str, Any], family: str) -> dict[str, Any] | None:
    if version is None:
        return None
    major = int(version.split(".", 1)[0])
    rule = _rule("dcgm", family, "major", major)
    fields = {**base, "version": version, "dcgm_major": major}
    return {"version": version, "packages": _fill(rule["packages"], fields)}


def canonical(stack: Stack, hardware: Hardware) -> dict[str, Any]:
    """The resolved, OS-independent stack that the stack id is a hash of.

    Versions are normalised (``12.8`` -> ``12.8.0``); the repositories (a site choice, the
    lab's differ) and the minor-version-compat opt-in (installs nothing) are not part of it.
    """
    enabled = fabric_manager_enabled(stack, hardware)
    return {
        "driver": {
            "version": stack.driver.version,
            "branch": str(driver_branch(stack.driver.version)),
            "flavour": stack.driver.flavour,
        },
        "cuda": cuda_full(stack.cuda),
        "nccl": parse_nccl(stack.nccl).package_version,
        "fabric_manager": {
            "enabled": enabled,
            "version": fabric_manager_version(stack) if enabled else None,
            # Only where it is installed, so that no other stack's id changes.
            **({"nvlsm": nvlsm} if (nvlsm := nvlsm_version(stack, hardware)) else {}),
        },
        # Only where it is installed, so that no other stack's id changes.
        **({"imex": stack.driver.version} if imex_enabled(hardware) else {}),
        "container_toolkit": stack.container_toolkit,
        "cudnn": stack.cudnn,
        "dcgm": stack.dcgm,
    }


def stack_id(stack: Stack, hardware: Hardware) -> str:
    """12 hex characters of the SHA-256 of the canonical JSON of :func:`canonical`."""
    text = json.dumps(canonical(stack, hardware), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def default_arch(hardware: Hardware) -> str:
    """``sbsa`` for Grace (Arm) systems, else ``x86_64`` (NVIDIA's repository arch names)."""
    return "sbsa" if hardware.gpu.info.architecture in _ARM_ARCHITECTURES else "x86_64"


def fill_template(template: str, os_id: str, arch: str) -> str:
    """Fill ``{os}``, ``{arch}`` and ``{deb_arch}`` in a repository URL or key URL."""
    for key, value in (("{os}", os_id), ("{arch}", arch), ("{deb_arch}", DEB_ARCH[arch])):
        template = template.replace(key, value)
    return template


def check_url(value: str, where: str, hint: str = "") -> str:
    """A URL gpunode hands to apt, pip or a template: the one rule for every URL variable.

    Raises:
        ConfigError: Not an http(s):// URL with a host or a file:// URL, or it holds
            whitespace, a control character, a quote or a character a shell or apt reads
            (``$ ( ) ; & ! * #``, a backtick); the message names ``where``.
    """
    if not _URL_RE.match(value):
        raise ConfigError(
            f"{where}: {clip(repr(value))} is not an http(s):// or file:// URL without "
            f"whitespace, control characters, quotes or any of $ ` ( ) ; & ! * #{hint}"
        )
    return value


def repositories(
    os_id: str, arch: str, repo_vars: Mapping[str, Any] | None = None
) -> list[dict[str, str]]:
    """The repositories of one OS and arch: name, uri, suite, keyring, key_url, fingerprint.

    The one rule for repository variables: each of URL, key URL and fingerprint comes from its
    inventory variable (``naming.yml``, ``repositories``) or NVIDIA's default, and ``{os}``,
    ``{arch}``, ``{deb_arch}`` are filled in URL and key URL alike.

    Raises:
        ConfigError: A URL that is not http(s)/file or keeps a ``{...}`` placeholder, or a
            fingerprint that is not 40 hex digits, naming the variable.
    """
    values = repo_vars or {}
    out = []
    for repo in naming_rules()["repositories"]:
        entry = {"name": str(repo["name"]), "suite": str(repo["suite"])}
        entry["keyring"] = str(repo["keyring"])
        for field in ("url", "key_url"):
            variable = repo[field]["variable"]
            value = fill_template(str(values.get(variable) or repo[field]["default"]), os_id, arch)
            check_url(value, variable, "; only {os}, {arch} and {deb_arch} are filled in")
            entry["uri" if field == "url" else "key_url"] = value
        variable = repo["fingerprint"]["variable"]
        fingerprint = re.sub(r"\s", "", str(values.get(variable) or repo["fingerprint"]["default"]))
        if fingerprint and not _FINGERPRINT_RE.match(fingerprint.upper()):
            raise ConfigError(
                f"{variable}: {clip(repr(fingerprint))} is not a 40-hex-digit fingerprint"
            )
        entry["fingerprint"] = fingerprint.upper()
        out.append(entry)
    return out


def resolve(
    stack: Stack,
    hardware: Hardware,
    os_id: str,
    *,
    arch: str | None = None,
    repo_vars: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The resolved stack for one OS: packages, repositories and the stack id.

    Package versions are requirements (``V-*`` or exact) until a lock is applied
    (``toolkit.stack.lock.apply_lock``).

    Args:
        stack: The validated stack.
        hardware: The group's hardware profile (decides Fabric Manager and the arch).
        os_id: ``ubuntu2204``, ``ubuntu2404`` or ``debian12``.
        arch: ``x86_64`` or ``sbsa``; by default from the GPU (Grace systems are ``sbsa``).
        repo_vars: Inventory variables moving the repositories (:func:`repository_variables`).

    Returns:
        The shape documented in docs/architecture.md, "The resolved stack".

    Raises:
        ConfigError: Unknown OS or arch, or a bad repository variable.
    """
    if os_id not in SUPPORTED_OS:
        raise ConfigError(f"unknown OS {os_id!r}" + did_you_mean(os_id, list(SUPPORTED_OS)))
    arch = arch or default_arch(hardware)
    if arch not in DEB_ARCH:
        raise ConfigError(f"unknown arch {arch!r}" + did_you_mean(arch, list(DEB_ARCH)))
    return {
        "stack_id": stack_id(stack, hardware),
        "os": os_id,
        "arch": arch,
        **_sections(stack, hardware, os_id, arch),
        "repositories": repositories(os_id, arch, repo_vars),
    }
