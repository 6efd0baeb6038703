"""Reading an Ansible inventory directory: groups, hosts, connection settings, stacks.

Pure Python on purpose: importing Ansible's inventory machinery takes seconds. The subset
read here is the one gpunode writes and documents (docs/architecture.md, "Inventory layout"):
``hosts.yml`` (YAML inventory: ``all`` -> ``children`` -> groups -> ``hosts``, inline ``vars``),
``group_vars/<group>.yml`` or ``group_vars/<group>/*.yml``, ``host_vars/<host>`` likewise.

Variables are merged the way Ansible merges them (top-level variables replace each other;
Ansible's default ``hash_behaviour=replace``), lowest first: inline group vars of
``hosts.yml``, then ``group_vars/all``, then ``group_vars/<group>``, then inline host vars,
then ``host_vars/<host>``. Within one layer, groups are ordered by depth (parents before
children), ``ansible_group_priority``, then name. So a ``stack:`` set for a child group
replaces its parent's whole ``stack:``, exactly as the roles will see it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.config import did_you_mean, load_yaml, validate
from toolkit.errors import ConfigError, clip
from toolkit.inventory.ssh import SSH_ARGS_VARS, check_ssh_args
from toolkit.inventory.values import check_values
from toolkit.names import check_name, check_scheduler_name, name_path
from toolkit.profile.hardware import HardwareProfile
from toolkit.stack.models import Stack

HOSTS_FILES = ("hosts.yml", "hosts.yaml")
_VAR_SUFFIXES = ("", ".yml", ".yaml", ".json")
_GROUP_KEYS = ("hosts", "vars", "children")
_RANGE_RE = re.compile(r"\[([0-9]{1,9}|[a-z]):([0-9]{1,9}|[a-z])(?::([0-9]{1,9}))?\]")
# The most hosts one inventory may name, ranges expanded (`node[0:99][0:99]` is already
# 10,000): counted across every pattern, so many ranges cannot add up past it, and at every
# listing (a host listed in two groups counts twice: the work is in the listings).
MAX_INVENTORY_HOSTS = 10_000
# `ansible_group_priority`: ASCII digits only (str.isdigit admits `²`, which int() refuses).
_PRIORITY_RE = re.compile(r"[0-9]{1,9}\Z")


@dataclass(frozen=True)
class Host:
    """One host and how to reach it over SSH."""

    name: str
    address: str
    port: int
    user: str | None
    private_key_file: Path | None
    known_hosts_file: Path | None
    groups: tuple[str, ...]
    vars: Mapping[str, Any] = field(repr=False)
    # The node's name in its scheduler (Slurm, Kubernetes): gpunode_scheduler_node_name, else
    # the host's name, checked when the inventory is loaded (names.check_scheduler_name). The
    # executor and the hooks read it here, never the raw variable.
    scheduler_name: str = ""

    def __post_init__(self) -> None:
        if not self.scheduler_name:
            object.__setattr__(self, "scheduler_name", self.name)


@dataclass(frozen=True)
class Group:
    """One inventory group with its direct members."""

    name: str
    parents: tuple[str, ...]
    children: tuple[str, ...]
    hosts: tuple[str, ...]
    vars: Mapping[str, Any] = field(repr=False)
    sources: Mapping[str, str] = field(repr=False)


@dataclass
class _Vars:
    """Variables of one group or host from one layer, with the file each came from."""

    values: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)

    def update(self, values: Mapping[str, Any], source: str) -> None:
        for key, value in values.items():
            self.values[key] = value
            self.sources[key] = source


@dataclass
class _Raw:
    """What was read, before merging."""

    hosts_file: Path
    group_order: list[str] = field(default_factory=list)
    parents: dict[str, list[str]] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    # Ordered sets (dicts with None values): membership costs O(1), so loading is linear.
    group_hosts: dict[str, dict[str, None]] = field(default_factory=dict)
    host_order: dict[str, None] = field(default_factory=dict)
    host_direct: dict[str, list[str]] = field(default_factory=dict)  # host -> its groups
    expanded: int = 0  # hosts named by every pattern so far, ranges expanded
    inline_group: dict[str, _Vars] = field(default_factory=dict)
    inline_host: dict[str, _Vars] = field(default_factory=dict)


class Inventory:
    """An inventory directory: groups, hosts with connection settings, per-group stacks."""

    def __init__(self, path: Path, raw: _Raw) -> None:
        self.path = path
        self.hosts_file = raw.hosts_file
        self._raw = raw
        self._group_vars_files = {g: var_files(path / "group_vars", g) for g in raw.group_order}
        self._host_vars_files = {h: var_files(path / "host_vars", h) for h in raw.host_order}
        self._file_vars: dict[Path, dict[str, Any]] = {}
        self._depth = {g: self._depth_of(g, ()) for g in raw.group_order}
        self._priority = {g: self._priority_of(g) for g in raw.group_order}
        self.groups: dict[str, Group] = {}
        for name in raw.group_order:
            merged = self._merge(self._lineage(name), host=None)
            check_values(merged.values, merged.sources, f"group {name!r}")
            self.groups[name] = Group(
                name=name,
                parents=tuple(raw.parents.get(name, ())),
                children=tuple(raw.children.get(name, ())),
                hosts=tuple(raw.group_hosts.get(name, ())),
                vars=merged.values,
                sources=merged.sources,
            )
        self.hosts: dict[str, Host] = {h: self._host(h) for h in raw.host_order}

    # -- structure -------------------------------------------------------------------------

    def _depth_of(self, group: str, seen: tuple[str, ...]) -> int:
        if group in seen:
            cycle = " -> ".join((*seen, group))
            raise ConfigError(f"{self.hosts_file}: group cycle: {cycle}")
        parents = self._raw.parents.get(group, [])
        if not parents:
            return 0
        return 1 + max(self._depth_of(p, (*seen, group)) for p in parents)

    def _priority_of(self, group: str) -> int:
        """The group's ``ansible_group_priority`` (1 when unset), ASCII digits only.

        Raises:
            ConfigError: Anything else (``-1``, ``²``, 5,000 digits); the message names the key.
        """
        value = self._raw.inline_group[group].values.get("ansible_group_priority", 1)
        text = str(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
        if not _PRIORITY_RE.match(text):
            raise ConfigError(
                f"{self.hosts_file}: ansible_group_priority of group {group!r} is "
                f"{clip(repr(value))}: not a priority (a whole number of at most 9 ASCII digits)"
            )
        return int(text)

    def _lineage(self, group: str) -> set[str]:
        """The group and all its ancestors."""
        found = {group}
        stack = [group]
        while stack:
            for parent in self._raw.parents.get(stack.pop(), []):
                if parent not in found:
                    found.add(parent)
                    stack.append(parent)
        return found

    def _sorted(self, groups: Iterable[str]) -> list[str]:
        def key(name: str) -> tuple[int, int, str]:
            return (self._depth[name], self._priority[name], name)

        return sorted(groups, key=key)

    def host_groups(self, host: str) -> list[str]:
        """Every group the host belongs to, with ancestors, in merge order (``all`` first)."""
        lineage: set[str] = set()
        for group in self._raw.host_direct.get(host, []):
            lineage |= self._lineage(group)
        return self._sorted(lineage)

    def group_hosts(self, group: str) -> list[str]:
        """Every host of the group and of its descendant groups, in inventory order."""
        if group not in self.groups:
            raise ConfigError(f"{self.hosts_file}: unknown group {group!r}")
        members: set[str] = set()
        pending = [group]
        seen: set[str] = set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            members.update(self._raw.group_hosts.get(name, []))
            pending.extend(self._raw.children.get(name, []))
        return [h for h in self._raw.host_order if h in members]

    # -- variables -------------------------------------------------------------------------

    def _file(self, path: Path) -> dict[str, Any]:
        if path not in self._file_vars:
            data = load_yaml(path)
            if data is None:
                data = {}
            if not isinstance(data, dict):
                raise ConfigError(f"{path}: expected a mapping of variables")
            self._file_vars[path] = data
        return self._file_vars[path]

    def _merge(self, groups: Iterable[str], host: str | None) -> _Vars:
        ordered = self._sorted(groups)
        merged = _Vars()
        hosts_file = str(self.hosts_file)
        # Ansible's precedence: inline group vars < group_vars/all < group_vars/<group>
        # < inline host vars < host_vars/<host>.
        for group in ordered:
            merged.update(self._raw.inline_group.get(group, _Vars()).values, hosts_file)
        for group in ordered:  # `all` has depth 0: it comes first
            for path in self._group_vars_files.get(group, []):
                merged.update(self._file(path), str(path))
        if host is not None:
            merged.update(self._raw.inline_host.get(host, _Vars()).values, hosts_file)
            for path in self._host_vars_files.get(host, []):
                merged.update(self._file(path), str(path))
        return merged

    def host_vars(self, host: str) -> _Vars:
        """The merged variables of one host, with the file each came from."""
        return self._merge(self.host_groups(host), host=host)

    def _host(self, name: str) -> Host:
        merged = self.host_vars(name)
        values = merged.values
        check_values(values, merged.sources, f"host {name!r}")

        def var(*keys: str) -> tuple[str | None, Any]:
            return next(((k, values[k]) for k in keys if values.get(k) is not None), (None, None))

        _key, address = var("ansible_host", "ansible_ssh_host")
        _key, port = var("ansible_port", "ansible_ssh_port")
        _key, user = var("ansible_user", "ansible_ssh_user")
        _key, key_file = var("ansible_ssh_private_key_file", "ansible_private_key_file")
        # OpenSSH keeps the first UserKnownHostsFile it reads; Ansible passes ssh_args first.
        found = (check_ssh_args(str(values[k])) for k in SSH_ARGS_VARS if values.get(k))
        known_hosts = next((f for f in found if f), None)
        _key, scheduler = var("gpunode_scheduler_node_name")
        if scheduler is None:
            try:
                check_scheduler_name(name)
            except ConfigError as err:
                raise ConfigError(
                    f"{self.hosts_file}: host {name!r}: {err.message}; set "
                    "gpunode_scheduler_node_name to its name in the scheduler"
                ) from None
        return Host(
            name=name,
            address=str(address) if address is not None else name,
            port=int(port) if port is not None else 22,
            user=str(user) if user is not None else None,
            private_key_file=Path(str(key_file)).expanduser() if key_file else None,
            known_hosts_file=Path(known_hosts).expanduser() if known_hosts else None,
            groups=tuple(self.host_groups(name)),
            vars=values,
            scheduler_name=str(scheduler or name),
        )

    # -- stacks ----------------------------------------------------------------------------

    def stack_groups(self) -> list[str]:
        """Groups to check: those with hosts of their own and a ``stack`` or ``hardware``.

        ``all`` is never one: hosts listed directly under it are in ``ungrouped``.
        """
        return [
            name
            for name, group in self.groups.items()
            if name != "all" and group.hosts and ("stack" in group.vars or "hardware" in group.vars)
        ]

    def stack_group_of(self, host: str) -> str:
        """The group whose stack and hardware a host takes: the last of its
        :meth:`stack_groups`, else ``all`` (how acceptance, ``up`` and rollouts name it)."""
        groups = [g for g in self.stack_groups() if g in self.hosts[host].groups]
        return groups[-1] if groups else "all"

    def group_config(self, group: str) -> tuple[Stack, HardwareProfile]:
        """The validated stack and hardware profile of a group (merged along its parents).

        Raises:
            ConfigError: The group is unknown, lacks ``stack`` or ``hardware``, or either is
                malformed (the message names the file and key path).
        """
        if group not in self.groups:
            raise ConfigError(
                f"{self.hosts_file}: unknown group {group!r}" + did_you_mean(group, [*self.groups])
            )
        info = self.groups[group]
        return _config(info.vars, info.sources, f"group {group!r}", self.path)

    def host_config(self, host: str | Host) -> tuple[Stack, HardwareProfile]:
        """The validated stack and hardware profile a host gets (its groups and host vars).

        Raises:
            ConfigError: As for :meth:`group_config`.
        """
        name = host.name if isinstance(host, Host) else host
        if name not in self.hosts:
            raise ConfigError(
                f"{self.hosts_file}: unknown host {name!r}" + did_you_mean(name, [*self.hosts])
            )
        merged = self.host_vars(name)
        return _config(merged.values, merged.sources, f"host {name!r}", self.path)

    # -- patterns --------------------------------------------------------------------------

    def hosts_for(self, limit: str | None = None) -> list[Host]:
        """Hosts matching an Ansible-style pattern, in inventory order.

        Supported: host and group names, ``all``/``*``, globs (``gpu-*``), ``~regex``, lists
        separated by ``,`` or ``:``, ``!name`` exclusions and ``&name`` intersections.

        Raises:
            ConfigError: A term matches no host or group.
        """
        if limit is None or not limit.strip():
            return list(self.hosts.values())
        terms = [t.strip() for t in re.split(r"[,:]" if "," not in limit else ",", limit)]
        selected: set[str] = set()
        excluded: set[str] = set()
        intersections: list[set[str]] = []
        positives = [t for t in terms if t and t[0] not in "!&"]
        if not positives:
            selected = set(self.hosts)
        for term in terms:
            if not term:
                continue
            if term[0] == "!":
                excluded |= self._match(term[1:], limit)
            elif term[0] == "&":
                intersections.append(self._match(term[1:], limit))
            else:
                selected |= self._match(term, limit)
        for subset in intersections:
            selected &= subset
        selected -= excluded
        return [self.hosts[h] for h in self._raw.host_order if h in selected]

    def _match(self, term: str, limit: str) -> set[str]:
        if term in ("all", "*"):
            return set(self.hosts)
        if term in self.groups:
            return set(self.group_hosts(term))
        if term in self.hosts:
            return {term}
        matched: set[str] = set()
        if term.startswith("~"):
            try:
                regex = re.compile(term[1:])
            except re.error as err:
                raise ConfigError(
                    f"--limit {limit!r}: bad regular expression {term!r}: {err}"
                ) from None
            names = [n for n in [*self.groups, *self.hosts] if regex.search(n)]
        elif any(c in term for c in "*?["):
            names = [n for n in [*self.groups, *self.hosts] if fnmatch.fnmatchcase(n, term)]
        else:
            names = []
        for name in names:
            matched |= set(self.group_hosts(name)) if name in self.groups else {name}
        if not matched:
            raise ConfigError(
                f"--limit {limit!r}: {term!r} matches no host or group of {self.hosts_file}"
                + did_you_mean(term, [*self.groups, *self.hosts])
            )
        return matched


def _config(
    values: Mapping[str, Any], sources: Mapping[str, str], what: str, path: Path
) -> tuple[Stack, HardwareProfile]:
    missing = [key for key in ("stack", "hardware") if key not in values]
    if missing:
        raise ConfigError(
            f"{path}: {what} has no {' and no '.join(missing)}: set "
            + " and ".join(f"`{m}:` in group_vars/<group>/{m}.yml" for m in missing)
        )
    stack = validate(Stack, values["stack"], sources["stack"], prefix=("stack",))
    hardware = validate(
        HardwareProfile, values["hardware"], sources["hardware"], prefix=("hardware",)
    )
    return stack, hardware


def ansible_boolean(value: Any, *, strict: bool = True) -> bool:
    """An inventory value read as a boolean the way Ansible reads it (ansible-core's
    ``module_utils.parsing.convert_bool.boolean``: yes/no, true/false, on/off, y/n, t/f, 1/0).

    Args:
        value: The value as loaded from YAML.
        strict: As Ansible's: when False, whatever is not true is false (Ansible's reading of
            connection options); when True, a value that is not a boolean raises.

    Raises:
        TypeError: ``strict`` and not one of Ansible's booleans (callers name the key).
    """
    from ansible.module_utils.parsing.convert_bool import boolean

    return bool(boolean(value, strict=strict))


def inventory_flag(values: Mapping[str, Any], key: str, where: str) -> bool:
    """A boolean inventory variable (false when unset), read as Ansible reads booleans.

    Raises:
        ConfigError: Set to something that is not a boolean; the message names the key.
    """
    value = values.get(key)
    if value is None:
        return False
    try:
        return ansible_boolean(value)
    except TypeError:
        raise ConfigError(
            f"{where}: {key} is {clip(repr(value))}, not a boolean (true/false, yes/no)"
        ) from None


def var_files(base: Path, name: str) -> list[Path]:
    """The variable files of a group or host, as Ansible finds them: the first of ``<name>``
    (a directory: its files, sorted; or a file), ``<name>.yml``, ``<name>.yaml`` and
    ``<name>.json`` that exists, and only that one (ansible-core's
    ``DataLoader.find_vars_files`` stops at the first path that exists, so a ``host.yml``
    beside a ``host/`` folder is never read by Ansible, and not here either)."""
    for suffix in _VAR_SUFFIXES:
        candidate = name_path(base, name, suffix)
        if candidate.is_dir():
            return sorted(
                p
                for p in candidate.rglob("*")
                if p.is_file()
                and p.suffix in (".yml", ".yaml", ".json")
                and not p.name.startswith(".")
            )
        if candidate.is_file():
            return [candidate]
    return []


def _expand(pattern: str, where: str, before: int = 0) -> list[str]:
    """Expand Ansible host ranges: ``node[01:03]`` -> node01, node02, node03.

    Args:
        pattern: A host name, with ranges or without.
        where: The file and key, for messages.
        before: The hosts the inventory's earlier patterns named.

    Raises:
        ConfigError: A bad range, or the inventory would name more than
            :data:`MAX_INVENTORY_HOSTS` hosts with this pattern (counted before expanding).
    """
    total = 1
    for match in _RANGE_RE.finditer(pattern):
        start, end, step = match.group(1), match.group(2), int(match.group(3) or 1)
        if start.isdigit() != end.isdigit():
            raise ConfigError(
                f"{where}: bad host range {clip(pattern)!r}: both ends must be numbers or "
                "both letters"
            )
        first, last = (int(start), int(end)) if start.isdigit() else (ord(start), ord(end))
        total *= max(0, (last - first) // max(step, 1) + 1)
        _check_count(before + total, pattern, where)
    _check_count(before + total, pattern, where)
    return _expand_one(pattern, where)


def _check_count(count: int, pattern: str, where: str) -> None:
    if count > MAX_INVENTORY_HOSTS:
        raise ConfigError(
            f"{where}: {clip(pattern)!r} takes the inventory past {MAX_INVENTORY_HOSTS} hosts "
            "(the limit of one inventory: ranges expanded, every listing counted); split it"
        )


def _expand_one(pattern: str, where: str) -> list[str]:
    match = _RANGE_RE.search(pattern)
    if match is None:
        return [pattern]
    start, end, step = match.group(1), match.group(2), int(match.group(3) or 1)
    head, tail = pattern[: match.start()], pattern[match.end() :]
    if start.isdigit() != end.isdigit() or step < 1:
        raise ConfigError(f"{where}: bad host range {clip(pattern)!r}")
    if start.isdigit():
        width = len(start) if start.startswith("0") else 0
        values = [str(i).zfill(width) for i in range(int(start), int(end) + 1, step)]
    else:
        values = [chr(c) for c in range(ord(start), ord(end) + 1, step)]
    if not values:
        raise ConfigError(f"{where}: empty host range {clip(pattern)!r}")
    return [name for value in values for name in _expand_one(head + value + tail, where)]


def load_inventory(path: str | Path) -> Inventory:
    """Read an inventory directory (or a ``hosts.yml`` file inside one).

    Raises:
        ConfigError: A file is missing, is not valid YAML or does not have the inventory
            shape; the message names the file and the key.
    """
    path = Path(path)
    if path.is_file():
        hosts_file, directory = path, path.parent
    else:
        directory = path
        candidates = [path / name for name in HOSTS_FILES if (path / name).is_file()]
        if not candidates:
            raise ConfigError(f"{path}: not an inventory directory (no hosts.yml)")
        hosts_file = candidates[0]
    data = load_yaml(hosts_file)
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{hosts_file}: expected a mapping of groups (all: children: ...)")
    raw = _Raw(hosts_file=hosts_file)
    _add_group(raw, "all", None, "all")
    for name, body in data.items():
        _walk(raw, str(name), body, None if name == "all" else "all", str(name))
    # Hosts listed only directly under `all` form the implicit `ungrouped` group, as in Ansible.
    grouped = {h for g, members in raw.group_hosts.items() if g != "all" for h in members}
    ungrouped = [h for h in raw.group_hosts.get("all", {}) if h not in grouped]
    if ungrouped or "ungrouped" in raw.group_order:
        _add_group(raw, "ungrouped", "all", "ungrouped")
        for host in ungrouped:
            _add_member(raw, "ungrouped", host)
    return Inventory(directory, raw)


def _add_group(raw: _Raw, name: str, parent: str | None, where: str) -> None:
    try:
        check_name(name, "group")
    except ConfigError as err:
        raise ConfigError(f"{raw.hosts_file}: {clip(where)}: {err.message}") from None
    if name not in raw.group_order:
        raw.group_order.append(name)
        raw.parents[name] = []
        raw.children[name] = []
        raw.group_hosts[name] = {}
        raw.inline_group[name] = _Vars()
    if parent is not None and parent not in raw.parents[name]:
        raw.parents[name].append(parent)
        raw.children[parent].append(name)


def _add_member(raw: _Raw, group: str, host: str) -> None:
    if host not in raw.group_hosts[group]:
        raw.group_hosts[group][host] = None
        raw.host_direct.setdefault(host, []).append(group)


def _walk(raw: _Raw, name: str, body: Any, parent: str | None, where: str) -> None:
    file = raw.hosts_file
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise ConfigError(
            f"{file}: {where}: a group must be a mapping with hosts, vars or children, "
            f"got {type(body).__name__}"
        )
    _add_group(raw, name, parent, where)
    for key in body:
        if key not in _GROUP_KEYS:
            raise ConfigError(
                f"{file}: {clip(where)}.{clip(key)}: unknown key in group {name!r}"
                + did_you_mean(str(key), list(_GROUP_KEYS))
            )
    group_vars = body.get("vars") or {}
    if not isinstance(group_vars, dict):
        raise ConfigError(f"{file}: {where}.vars: expected a mapping of variables")
    raw.inline_group[name].update(group_vars, str(file))
    hosts = body.get("hosts") or {}
    if not isinstance(hosts, dict):
        raise ConfigError(
            f"{file}: {where}.hosts: expected a mapping of host names to their variables"
        )
    for pattern, host_vars in hosts.items():
        if host_vars is not None and not isinstance(host_vars, dict):
            raise ConfigError(
                f"{file}: {clip(where)}.hosts.{clip(pattern)}: expected a mapping of variables"
            )
        names = _expand(str(pattern), f"{file}: {clip(where)}.hosts", raw.expanded)
        raw.expanded += len(names)
        for host in names:
            try:
                check_name(host)
            except ConfigError as err:
                raise ConfigError(f"{file}: {clip(where)}.hosts: {err.message}") from None
            if host not in raw.host_order:
                raw.host_order[host] = None
                raw.inline_host[host] = _Vars()
            raw.inline_host[host].update(host_vars or {}, str(file))
            _add_member(raw, name, host)
    children = body.get("children") or {}
    if not isinstance(children, dict):
        raise ConfigError(f"{file}: {where}.children: expected a mapping of groups")
    for child, child_body in children.items():
        _walk(raw, str(child), child_body, name, f"{where}.children.{child}")
