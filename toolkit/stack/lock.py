"""The stack lock: a group's stack resolved against its repositories' signed indexes.

``gpunode stack lock`` writes ``group_vars/<group>/stack.lock.yml`` (top-level key
``stack_lock``), to be committed like a pip-tools lock: for each OS of the group
(``gpunode_stack_os``), every package of the resolved stack with the exact Debian version the
repository carries for the pinned upstream version, its architecture, SHA256 and repository,
plus the stack id it was resolved for. Because the file lies in ``group_vars``, Ansible hands it
to the ``gpunode_stack`` action plugin, which installs exactly those versions
(:func:`apply_lock`); :func:`verify_lock` re-reads the repositories before a node changes.

This module owns the lock's one schema (:class:`StackLock`): :func:`read_lock` reads the file,
:func:`lock_from_vars` and :func:`parse_lock` validate the ``stack_lock`` variable as the
inventory reader and Ansible hand it, and :func:`resolve_lock` validates what it writes. No
other code reads a lock.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, ConfigDict, model_validator

from toolkit.config import StrictModel, did_you_mean, load_yaml, validate
from toolkit.errors import ConfigError, StackError, clip
from toolkit.names import NAME_RE, name_path
from toolkit.printable import printable
from toolkit.stack.aptindex import (
    Fetch,
    IndexEntry,
    fetch_url,
    key_fingerprints,
    read_index,
)
from toolkit.stack.debversion import (
    DEB_VERSION_RE,
    MAX_DEB_TOKEN,
    PACKAGE_NAME_RE,
    compare_versions,
    satisfies,
)
from toolkit.stack.fetch import MAX_SIGNED_BYTES
from toolkit.stack.resolve import DEB_ARCH, check_url
from toolkit.stack.systems import SUPPORTED_OS

LOCK_FILE = "stack.lock.yml"
LOCK_KEY = "stack_lock"
# The inventory variable listing the OSes of a group's nodes (a list of SUPPORTED_OS).
OS_VARIABLE = "gpunode_stack_os"
# The repository arch of a group's nodes (`x86_64` or `sbsa`); unset, it follows the GPU (Grace
# systems are sbsa, toolkit.stack.resolve.default_arch). Set where the nodes' CPUs are not the
# ones their GPU comes with: the lab's emulated GB200 nodes are amd64 containers.
ARCH_VARIABLE = "gpunode_stack_arch"
_PACKAGE_KEYS = ("packages", "pinning_packages")


# -- the schema: what a lock may hold, checked whenever one is read or written ---------------

_STACK_ID_RE = re.compile(r"^[0-9a-f]{12}\Z")
# SHA-256 as Packages indexes write it (Debian's repository format: lower-case hex).
_SHA256_RE = re.compile(r"^[0-9a-f]{64}\Z")
# A repository's name in naming.yml (``cuda``, ``nvidia-container-toolkit``).
_REPOSITORY_RE = re.compile(r"^[a-z0-9][a-z0-9._\-]{0,63}\Z")
# A Packages index's Filename: a relative path of plain components (NVIDIA's flat
# repositories write ``./name_version_arch.deb``, Debian's ``pool/main/...``); never ``..``.
_FILENAME_RE = re.compile(r"^(?:\./)?(?:[A-Za-z0-9_+~%:][A-Za-z0-9_.+~%:\-]{0,254}/){0,16}"
                          r"[A-Za-z0-9_+~%:][A-Za-z0-9_.+~%:\-]{0,254}\Z")  # fmt: skip


def _shown(value: str) -> str:
    """A value quoted in a message: cut, and its control characters escaped."""
    return printable(clip(repr(value)))


def _pattern(pattern: re.Pattern[str], rule: str) -> AfterValidator:
    def check(value: str) -> str:
        if len(value) > MAX_DEB_TOKEN or not pattern.match(value):
            raise ValueError(f"not {rule} (got {_shown(value)})")
        return value

    return AfterValidator(check)


def _one_of(allowed: tuple[str, ...], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"unknown {what} {_shown(value)}" + did_you_mean(value, allowed))
        return value

    return AfterValidator(check)


def _url(value: str) -> str:
    try:
        return check_url(value, "repository URL")
    except ConfigError as err:
        raise ValueError(err.message) from None


DebVersion = Annotated[
    str,
    _pattern(DEB_VERSION_RE, "a Debian version like 580.95.05-1 (Debian policy 5.6.12)"),
]
PackageName = Annotated[
    str, _pattern(PACKAGE_NAME_RE, "a Debian package name (Debian policy 5.6.1)")
]
Sha256 = Annotated[str, _pattern(_SHA256_RE, "a SHA-256: 64 lower-case hex digits")]
RepositoryName = Annotated[str, _pattern(_REPOSITORY_RE, "a repository name like cuda")]
FileName = Annotated[str, _pattern(_FILENAME_RE, "a relative path like ./name_1.0-1_amd64.deb")]
OsId = Annotated[str, _one_of(SUPPORTED_OS, "OS")]
Arch = Annotated[str, _one_of(tuple(DEB_ARCH), "arch")]
DebArch = Annotated[str, _one_of((*DEB_ARCH.values(), "all"), "Debian architecture")]


class _LockModel(StrictModel):
    # Exact types: YAML's `1.10` is a float, `12` an int; a lock written by gpunode quotes
    # every such string, so a number where text belongs is an edit, refused, not converted.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class LockedPackage(_LockModel):
    """One package as locked: the exact build a repository's signed index listed."""

    version: DebVersion
    architecture: DebArch
    sha256: Sha256
    repository: RepositoryName
    filename: FileName
    # The package whose build pins this one exactly (``Depends: x (= V)``); None for the
    # packages the stack names itself.
    needed_by: PackageName | None = None


class LockedSystem(_LockModel):
    """One OS of the group: its arch, repositories and every locked package."""

    arch: Arch
    repositories: dict[RepositoryName, Annotated[str, AfterValidator(_url)]]
    packages: dict[PackageName, LockedPackage]

    @model_validator(mode="after")
    def _coherent(self) -> LockedSystem:
        problems = []
        archs = (DEB_ARCH[self.arch], "all")
        for name, entry in self.packages.items():
            where = f"packages.{name}"
            if entry.architecture not in archs:
                problems.append(
                    f"{where}.architecture: {entry.architecture} is not one of {', '.join(archs)}"
                    f" (arch {self.arch})"
                )
            if entry.repository not in self.repositories:
                problems.append(
                    f"{where}.repository: {entry.repository} is not one of the repositories "
                    f"({', '.join(sorted(self.repositories)) or 'none'})"
                )
            if entry.needed_by is not None and entry.needed_by not in self.packages:
                problems.append(f"{where}.needed_by: {entry.needed_by} is not a locked package")
        for name in self.packages:
            seen = [name]
            parent = self.packages[name].needed_by
            while parent is not None and parent in self.packages:
                if parent in seen:
                    if parent == name:
                        chain = " -> ".join([*seen, parent])
                        problems.append(f"packages.{name}.needed_by: a cycle ({chain})")
                    break
                seen.append(parent)
                parent = self.packages[parent].needed_by
        if problems:
            raise ValueError("; ".join(problems))
        return self


class StackLock(_LockModel):
    """A group's stack lock: the value of ``stack_lock`` in ``stack.lock.yml``."""

    group: Annotated[str, _pattern(NAME_RE, "an inventory group name")]
    stack_id: Annotated[str, _pattern(_STACK_ID_RE, "a stack id: 12 lower-case hex digits")]
    systems: dict[OsId, LockedSystem]


class _LockFile(_LockModel):
    """The whole lock file: ``stack_lock`` and nothing else (gpunode writes nothing else)."""

    stack_lock: StackLock


def parse_lock(value: Any, source: str | Path) -> StackLock:
    """A lock from the value of the ``stack_lock`` variable, as the inventory or Ansible
    read it from ``source``: the one schema of every lock gpunode reads.

    Raises:
        ConfigError: Every problem, naming ``source`` and the key path
            (``stack_lock.systems.debian12.packages.libnccl2.version``) and the rule.
    """
    return validate(StackLock, value, source, prefix=(LOCK_KEY,))


def lock_from_vars(values: Mapping[str, Any], source: str | Path) -> StackLock | None:
    """The lock among a group's or host's variables (``stack_lock``), validated; None when
    there is none. The inventory reader and Ansible read ``stack.lock.yml`` as variables:
    this is how each of them hands the value to the schema.

    Args:
        values: The variables.
        source: The file the variable came from (or a description), named in messages.

    Raises:
        ConfigError: A lock that breaks the schema, naming ``source`` and the key.
    """
    if values.get(LOCK_KEY) is None:
        return None
    return parse_lock(values[LOCK_KEY], source)


def read_lock(path: str | Path) -> StackLock:
    """Read a lock file (``group_vars/<group>/stack.lock.yml``) through the one YAML loader.

    Raises:
        ConfigError: The file cannot be read, is not YAML, or breaks the schema (the message
            names the file and the key).
    """
    return validate(_LockFile, load_yaml(path), path).stack_lock


def stack_arch(group: str, group_vars: Mapping[str, Any]) -> str | None:
    """The repository arch of a group's nodes (``gpunode_stack_arch``), None where unset.

    Raises:
        ConfigError: An arch that is not one of NVIDIA's repository archs.
    """
    value = group_vars.get(ARCH_VARIABLE)
    if value is None:
        return None
    if value not in DEB_ARCH:
        raise ConfigError(
            f"group {group}: {ARCH_VARIABLE}: unknown arch {clip(repr(value))}"
            + did_you_mean(str(value), list(DEB_ARCH))
        )
    return str(value)


def lock_path(inventory: Path, group: str) -> Path:
    """Where a group's lock lies: ``group_vars/<group>/stack.lock.yml``."""
    return name_path(inventory / "group_vars", group, what="group") / LOCK_FILE


def stack_systems(group: str, group_vars: Mapping[str, Any]) -> list[str]:
    """The OSes of a group's nodes (``gpunode_stack_os``).

    Raises:
        ConfigError: Unset, or naming an unsupported OS.
    """
    value = group_vars.get(OS_VARIABLE)
    if isinstance(value, str):
        value = [value]
    if not value or not isinstance(value, list):
        raise ConfigError(
            f"group {group}: {OS_VARIABLE} is not set: list the OSes of its nodes "
            f"({', '.join(SUPPORTED_OS)}) in group_vars, e.g. `{OS_VARIABLE}: [ubuntu2204]`"
        )
    for os_id in value:
        if os_id not in SUPPORTED_OS:
            raise ConfigError(
                f"group {group}: {OS_VARIABLE}: unknown OS {os_id!r}"
                + did_you_mean(str(os_id), list(SUPPORTED_OS))
            )
    return [str(v) for v in value]


def requirements(resolved: Mapping[str, Any]) -> dict[str, str]:
    """Every package of a resolved stack -> its version requirement (or locked version)."""
    out: dict[str, str] = {}
    for section in resolved.values():
        if isinstance(section, dict):
            for key in _PACKAGE_KEYS:
                out.update(section.get(key) or {})
    return out


@dataclass
class _Indexes:
    """Repository indexes read once per (URL, key URL, fingerprint)."""

    fetch: Fetch
    cache: dict[tuple[str, str, str], list[IndexEntry]] = field(default_factory=dict)

    def entries(self, repo: Mapping[str, str]) -> list[IndexEntry]:
        key = (repo["uri"], repo["key_url"], repo["fingerprint"])
        if key not in self.cache:
            data = self.fetch(repo["key_url"], MAX_SIGNED_BYTES)
            try:
                found = key_fingerprints(data)
            except ValueError as err:
                raise StackError(f"{repo['key_url']}: not an OpenPGP key: {err}") from err
            if repo["fingerprint"] and repo["fingerprint"] not in found:
                raise StackError(
                    f"{repo['key_url']}: the key's fingerprint {', '.join(found)} is not the "
                    f"pinned {repo['fingerprint']} (repository {repo['name']}); nothing trusted"
                )
            self.cache[key] = read_index(repo["uri"], data, self.fetch)
        return self.cache[key]


def _entry(entry: IndexEntry, repo_name: str, needed_by: str | None = None) -> dict[str, str]:
    out = {
        "version": entry.version,
        "architecture": entry.architecture,
        "sha256": entry.sha256,
        "repository": repo_name,
        "filename": entry.filename,
    }
    if needed_by:
        out["needed_by"] = needed_by
    return out


def _locate(
    resolved: Mapping[str, Any], indexes: _Indexes
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """(package -> lock entry, problems) for one resolved OS.

    Every package the stack names gets the newest version its requirement allows. Then the
    parts of each package's build that it pins exactly (``Depends: x (= V)``) are locked too,
    transitively, each with ``needed_by``: apt takes an automatic dependency at its newest
    version, so installing ``nvidia-driver=550.127.05-1`` where 580 is also published fails
    ("Depends: nvidia-alternative (= 550.127.05-1) but 580... is to be installed") unless
    those parts are pinned as well.
    """
    deb_arch = DEB_ARCH[resolved["arch"]]
    archs = (deb_arch, "all")
    found: dict[str, dict[str, str]] = {}
    chosen: dict[str, IndexEntry] = {}
    problems: list[str] = []
    repos = resolved["repositories"]
    for package, wanted in requirements(resolved).items():
        best: tuple[IndexEntry, str] | None = None
        offered: set[str] = set()
        for repo in repos:
            for entry in indexes.entries(repo):
                if entry.package != package or entry.architecture not in archs:
                    continue
                offered.add(entry.version)
                if satisfies(wanted, entry.version) and (
                    best is None or compare_versions(entry.version, best[0].version) > 0
                ):
                    best = (entry, repo["name"])
        if best is None:
            have = ", ".join(sorted(offered)) or "none"
            problems.append(
                f"{resolved['os']}: {package} {wanted}: not in the repositories "
                f"(they carry: {have})"
            )
            continue
        found[package] = _entry(*best)
        chosen[package] = best[0]
    pending = sorted(chosen)
    while pending:
        parent = pending.pop(0)
        for name, version in chosen[parent].exact_depends():
            if name in chosen:
                if chosen[name].version != version:
                    problems.append(
                        f"{resolved['os']}: {parent}={chosen[parent].version} needs "
                        f"{name} (= {version}), but the stack locks {name}={chosen[name].version}"
                    )
                continue
            match = next(
                (
                    (entry, repo["name"])
                    for repo in repos
                    for entry in indexes.entries(repo)
                    if entry.package == name
                    and entry.version == version
                    and entry.architecture in archs
                ),
                None,
            )
            if match is None:
                problems.append(
                    f"{resolved['os']}: {parent}={chosen[parent].version} needs {name} "
                    f"(= {version}), which the repositories do not carry"
                )
                continue
            found[name] = _entry(*match, needed_by=parent)
            chosen[name] = match[0]
            pending.append(name)
    return found, problems


def resolve_lock(
    group: str,
    stack_id: str,
    resolved_by_os: Mapping[str, Mapping[str, Any]],
    fetch: Fetch = fetch_url,
) -> StackLock:
    """The lock of one group: every package at the version its repository carries.

    Args:
        group: The inventory group.
        stack_id: The stack id the lock is resolved for.
        resolved_by_os: ``os_id -> resolve(...)`` for each OS of the group.
        fetch: Reads a URL.

    Raises:
        StackError: A key with another fingerprint, a bad signature or index, or packages
            the repositories lack (every one named).
        ConfigError: An index entry the lock's schema refuses (a version that is not a
            Debian version, say): what is written is always what is read back.
    """
    indexes = _Indexes(fetch)
    systems: dict[str, Any] = {}
    problems: list[str] = []
    for os_id, resolved in resolved_by_os.items():
        packages, missing = _locate(resolved, indexes)
        problems += missing
        systems[os_id] = {
            "arch": resolved["arch"],
            "repositories": {r["name"]: r["uri"] for r in resolved["repositories"]},
            "packages": dict(sorted(packages.items())),
        }
    if problems:
        raise StackError(f"group {group}: cannot lock the stack:\n  " + "\n  ".join(problems))
    data = {"group": group, "stack_id": stack_id, "systems": systems}
    return parse_lock(data, f"the lock resolved for group {group}")


def lock_document(lock: StackLock) -> dict[str, Any]:
    """The lock file's document: ``{"stack_lock": ...}`` as plain data."""
    return {LOCK_KEY: lock.model_dump(exclude_none=True)}


def dump_lock(lock: StackLock) -> str:
    """The lock file's text (a YAML document with a header for people)."""
    header = (
        "---\n"
        f"# The stack lock of group {lock.group}, written by `gpunode stack lock`: commit it.\n"
        "# Exact package versions resolved from the repositories' signed indexes for stack\n"
        f"# {lock.stack_id}; `gpunode provision` installs exactly these and refuses a stale\n"
        "# lock (`--relock` resolves it again).\n"
    )
    return header + yaml.safe_dump(lock_document(lock), sort_keys=False, width=100)


def write_lock(inventory: Path, group: str, lock: StackLock) -> Path:
    """Write a group's lock file and return its path."""
    path = lock_path(inventory, group)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_lock(lock), encoding="utf-8")
    return path


def lock_state(lock: StackLock | None, stack_id: str) -> str:
    """``missing``, ``stale`` (resolved for another stack id) or ``current``."""
    if lock is None:
        return "missing"
    return "current" if lock.stack_id == stack_id else "stale"


def apply_lock(resolved: Mapping[str, Any], lock: StackLock | None) -> dict[str, Any]:
    """The resolved stack with every package at its locked version.

    Raises:
        StackError: No lock, a stale lock, or a lock without this OS or package.
    """
    os_id = resolved["os"]
    state = lock_state(lock, resolved["stack_id"])
    if state != "current" or lock is None:
        detail = "" if lock is None else f" (resolved for stack {lock.stack_id})"
        raise StackError(
            f"the stack lock is {state}{detail} for stack {resolved['stack_id']}: run "
            "`gpunode stack lock -i INVENTORY` (or `gpunode provision --relock`)"
        )
    system = lock.systems.get(os_id)
    if system is None:
        raise StackError(
            f"the stack lock has no {os_id}: add it to {OS_VARIABLE} and run `gpunode stack lock`"
        )
    locked = system.packages
    out = copy.deepcopy(dict(resolved))
    missing = []
    for section in out.values():
        if isinstance(section, dict):
            for key in _PACKAGE_KEYS:
                packages = section.get(key) or {}
                for package in packages:
                    if package in locked:
                        packages[package] = locked[package].version
                    else:
                        missing.append(package)
    if missing:
        raise StackError(
            f"the stack lock of {os_id} lacks {', '.join(sorted(missing))}: run "
            "`gpunode stack lock` again"
        )
    _add_companions(out, locked)
    return out


def _add_companions(resolved: dict[str, Any], locked: Mapping[str, LockedPackage]) -> None:
    """Each locked companion (``needed_by``) joins the packages of the section that needs it."""
    sections = {
        package: section
        for section in resolved.values()
        if isinstance(section, dict)
        for key in _PACKAGE_KEYS
        for package in section.get(key) or {}
    }
    for package, entry in sorted(locked.items()):
        # The schema holds every needed_by to a locked package and refuses cycles.
        root = package
        while root not in sections and locked[root].needed_by is not None:
            root = str(locked[root].needed_by)
        if package not in sections and root in sections:
            section = sections[root]
            section.setdefault("packages", {})[package] = entry.version


def verify_lock(
    group: str,
    lock: StackLock,
    resolved_by_os: Mapping[str, Mapping[str, Any]],
    fetch: Fetch = fetch_url,
) -> list[str]:
    """What the repositories no longer carry as locked, every package named.

    A locked version the repository lacks, or carries with another SHA256 (republished), is a
    problem; nothing on a node should change while there is one.
    """
    indexes = _Indexes(fetch)
    problems = []
    for os_id, resolved in resolved_by_os.items():
        system = lock.systems.get(os_id)
        if system is None:
            continue
        repos = {r["name"]: r for r in resolved["repositories"]}
        for package, entry in sorted(system.packages.items()):
            repo = repos.get(entry.repository)
            if repo is None:
                problems.append(f"{os_id}: {package}: unknown repository {entry.repository}")
                continue
            versions = [
                e
                for e in indexes.entries(repo)
                if e.package == package
                and e.version == entry.version
                and e.architecture == entry.architecture
            ]
            if not versions:
                problems.append(
                    f"group {group}, {os_id}: {package}={entry.version} is no longer in "
                    f"repository {repo['name']} ({repo['uri']})"
                )
            elif all(e.sha256 != entry.sha256 for e in versions):
                problems.append(
                    f"group {group}, {os_id}: {package}={entry.version} was republished by "
                    f"repository {repo['name']} with SHA256 {printable(clip(versions[0].sha256))}"
                    f", locked {entry.sha256}"
                )
    return problems
