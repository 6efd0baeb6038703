"""Every inventory value gpunode reads, checked by the grammar of where it goes.

One table, :data:`VARIABLES`: each variable with its rule, where the value goes and where that
place's grammar is written down. The reader (``toolkit.inventory``) applies it to the merged
variables of every group and host when the inventory is loaded, so every command refuses a bad
value (exit 2, naming the file, the key, the group or host and the rule) before it touches a
node. Two rules hold for more than the table:

- **Not templated**: Ansible templates any string holding one of its default delimiters
  (``{{``, ``{%``, ``{#``: ansible-core ``Templar.is_possible_template``), so what this reader
  checked would not be what Ansible uses. Every variable of the table, every ``ansible_*``
  (Ansible's connection and become settings) and every ``gpunode_*`` variable is refused when
  any string in it, nested ones included, holds one.
- **One line**: nothing that lands in a line-oriented file or on a command line may hold a
  control character (a newline adds a line: a peer in IMEX's node list, a unit-file key).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from toolkit.errors import ConfigError, clip
from toolkit.inventory.ssh import SshRefused, check_ssh_args
from toolkit.names import SLURM_NAME_RE, scheduler_name_error
from toolkit.stack.debversion import MAX_DEB_TOKEN, PACKAGE_NAME_RE, requirement_problem

# Ansible's default delimiters (ansible-core: variable_start_string, block_start_string,
# comment_start_string).
JINJA_STARTS = ("{{", "{%", "{#")
# Variables whose names say they reach Ansible's connection or gpunode: none may be templated.
TEMPLATE_FREE_PREFIXES = ("ansible_", "gpunode_")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# RFC 1123 section 2.1 host names: labels of letters, digits and '-', neither end a '-', at
# most 63 characters each and 253 in all; the last label not all digits (then it would read as
# an IPv4 address in the legacy forms inet_aton accepts, `10.1`, RFC 3696 section 2).
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\Z")
# Linux interface names (IFNAMSIZ: at most 15 bytes; no '/', ':' or whitespace:
# net/core/dev.c dev_valid_name), as an IPv6 scope and in NCCL_SOCKET_IFNAME's list (NCCL's
# environment variables: an optional `^` (exclude) or `=` (exact), names separated by `,`).
_IFNAME = r"[A-Za-z0-9_.@-]{1,15}"
_IFNAME_RE = re.compile(rf"{_IFNAME}\Z")
_IFNAME_LIST_RE = re.compile(rf"[=^]?{_IFNAME}(?:,{_IFNAME})*\Z")
# POSIX user names (POSIX.1-2017 3.437, the portable filename characters of 3.282, no leading
# '-'), at most 32 characters (shadow-utils' useradd).
_USER_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}\Z")
_PORT_RE = re.compile(r"[0-9]{1,5}\Z")
# systemd unit names (systemd.unit(5): letters, digits, ':', '-', '_', '.', '\\', '@'; at most
# 255 characters), the suffix optional (systemctl adds .service).
_UNIT_RE = re.compile(r"[A-Za-z0-9_:\\@][A-Za-z0-9_:.\\@-]{0,254}\Z")


@dataclass(frozen=True)
class Rule:
    """One grammar a value must follow: ``check`` says why a value breaks it, or None."""

    name: str
    says: str
    check: Callable[[Any], str | None]
    null_ok: bool = True  # null is "unset" to the reader (a rule of false values says no)


@dataclass(frozen=True)
class Variable:
    """An inventory variable, its rule, where its value goes and that place's grammar."""

    name: str
    rule: Rule
    goes: str
    source: str


def host_name_error(value: str) -> str | None:
    """Why ``value`` is not an RFC 1123 host name, or None."""
    labels = value.removesuffix(".").split(".")
    if len(value) > 253 or not all(_LABEL.match(label) for label in labels):
        return "not an RFC 1123 host name"
    if labels[-1].isdigit():
        return "not an IP address, and all digits at the end: not a host name"
    return None


def address_error(value: Any) -> str | None:
    """Why ``value`` is not a host name or an IPv4/IPv6 address, or None."""
    if not isinstance(value, str):
        return f"a {type(value).__name__}, not a host name or address"
    address, _, scope = value.partition("%")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return host_name_error(value) if "%" not in value else "not an IPv6 address with a scope"
    if "%" in value and not (":" in address and _IFNAME_RE.match(scope)):
        return "an IPv6 scope must be an interface name"
    return None


def _text(value: Any, *, dash: bool = False, quote: bool = True) -> str | None:
    """Why ``value`` is not one line of text fit for a command line or a line-oriented file."""
    if not isinstance(value, str) or not value:
        return "not a non-empty string"
    if _CONTROL.search(value):
        return "a control character (a newline, a tab, NUL) in it"
    if not dash and value.startswith("-"):
        return "starts with '-': it would be read as an option"
    if not quote and '"' in value:
        return "a '\"' in it (Ansible passes it inside double quotes)"
    return None


def _pattern(regex: re.Pattern[str], *, numbers: bool = False) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        if numbers and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and regex.match(value):
            return None
        return "does not match"

    return check


def _port(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return "not a TCP port"
    text = str(value)
    return None if _PORT_RE.match(text) and 0 < int(text) < 65536 else "not a TCP port"


def _absolute_path(value: Any) -> str | None:
    why = _text(value)
    if why is None and not str(value).startswith("/"):
        return "not an absolute path"
    return why


def _list_of(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    def each(value: Any) -> str | None:
        if not isinstance(value, list):
            return "not a list"
        for index, item in enumerate(value):
            why = check(item)
            if why:
                return f"item {index} ({clip(repr(item))}): {why}"
        return None

    return each


def _ssh_args(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"a {type(value).__name__}, not a string of SSH arguments"
    try:
        check_ssh_args(value)
    except SshRefused as err:
        return str(err)
    return None


def _package_pins(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return "not a mapping of package names to versions"
    for name, wanted in value.items():
        if (
            not isinstance(name, str)
            or len(name) > MAX_DEB_TOKEN
            or not PACKAGE_NAME_RE.match(name)
        ):
            return f"{clip(repr(name))} is not a Debian package name"
        why = requirement_problem(wanted) if isinstance(wanted, str) else "not a string"
        if why:
            return f"{name}: {clip(repr(wanted))}: {why}"
    return None


def _true(value: Any) -> str | None:
    # ansible-core reads connection booleans with convert_bool.boolean(strict=False): what is
    # not one of its true values is false (null included).
    from ansible.module_utils.parsing.convert_bool import boolean

    if boolean(value, strict=False):
        return None
    return (
        "which Ansible reads as false: it turns host key checking off; gpunode never connects "
        "without checking host keys (remove it or set it to true)"
    )


ADDRESS = Rule("host-address", "an RFC 1123 host name or an IPv4/IPv6 address", address_error)
PORT = Rule("tcp-port", "a TCP port (1 to 65535)", _port)
USER = Rule(
    "user-name",
    "a POSIX user name (letters, digits, '_', '.', '-', not starting with '-', at most 32)",
    _pattern(_USER_RE),
)
PATH = Rule(
    "path",
    "a file path on one line, without '\"', not starting with '-'",
    lambda value: _text(value, quote=False),
)
ABSOLUTE_PATH = Rule("absolute-path", "an absolute path on one line", _absolute_path)
COMMAND = Rule(
    "command-line", "a command on one line, not starting with '-'", lambda value: _text(value)
)
OPTIONS = Rule(
    "option-list",
    "a list of options, each on one line",
    _list_of(lambda value: _text(value, dash=True)),
)
PACKAGE_PINS = Rule(
    "package-pins",
    "Debian package names, each to an exact version, '<upstream>-*' or '>=<version>'",
    _package_pins,
)
SSH_ARGS = Rule("ssh-args", "SSH arguments that keep host key checking on", _ssh_args)
CHECKING = Rule("true", "true (yes, on, 1)", _true, null_ok=False)
SCHEDULER_NAME = Rule(
    "scheduler-node-name", "one scheduler node's name (no Slurm hostlist)", scheduler_name_error
)
SLURM_NAME = Rule(
    "slurm-name",
    "a Slurm name (letters, digits, '.', '_', '-', starting with a letter or digit, at most 64)",
    _pattern(SLURM_NAME_RE),
)
IFNAMES = Rule(
    "interface-names",
    "network interface names as NCCL_SOCKET_IFNAME takes them (^ or =, then names and ',')",
    _pattern(_IFNAME_LIST_RE),
)
UNIT = Rule("unit-name", "a systemd unit name", _pattern(_UNIT_RE))
# gpunode reads these itself, as YAML booleans: "no" in quotes or 0 would be read as "yes".
BOOLEAN = Rule(
    "boolean",
    "true or false (a YAML boolean, not quoted)",
    lambda value: None if isinstance(value, bool) else f"a {type(value).__name__}, not a boolean",
)

_SSH = "the ssh, scp or sftp command line Ansible runs"
_OPENSSH = "OpenSSH ssh(1), ssh_config(5) (toolkit/inventory/ssh.py)"
_CONFIG = "the ssh command line (Ansible's ssh plugin) and gpunode's own SSH connection"
_SPEC = "the runner's spec.json, then a path the runner opens on the node"
VARIABLES: tuple[Variable, ...] = (
    *(Variable(key, ADDRESS, f"{_CONFIG}; IMEX's node list (one address a line)",
               "RFC 1123 2.1; Python ipaddress; NVIDIA IMEX guide, nodes_config.cfg")
      for key in ("ansible_host", "ansible_ssh_host")),
    *(Variable(key, PORT, f"{_CONFIG} (-o Port=)", "RFC 793/9293: a 16-bit port, 0 unusable")
      for key in ("ansible_port", "ansible_ssh_port")),
    *(Variable(key, USER, f"{_CONFIG} (-o User=)", "POSIX.1-2017 3.437, 3.282; useradd(8)")
      for key in ("ansible_user", "ansible_ssh_user")),
    *(Variable(key, PATH, f'{_CONFIG} (-o IdentityFile="...")', "ansible-core ssh plugin")
      for key in ("ansible_ssh_private_key_file", "ansible_private_key_file")),
    *(Variable(key, SSH_ARGS, _SSH, _OPENSSH) for key in (
        "ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args",
        "ansible_scp_extra_args", "ansible_sftp_extra_args")),
    *(Variable(key, CHECKING, "Ansible's host_key_checking option",
               "ansible-core convert_bool.boolean(strict=False)")
      for key in ("ansible_host_key_checking", "ansible_ssh_host_key_checking",
                  "ansible_paramiko_host_key_checking")),
    Variable("gpunode_scheduler_node_name", SCHEDULER_NAME,
             "scontrol update NodeName=, sbatch --nodelist=, kubectl ... node <name>",
             "slurm.conf(5) NodeName, scontrol(1), sbatch(1): hostlist expressions"),
    Variable("slurm_healthcheck_node_name", SCHEDULER_NAME,
             "the Slurm health check's scontrol update NodeName=",
             "slurm.conf(5) NodeName, scontrol(1)"),
    *(Variable(key, SLURM_NAME, "sbatch and scontrol arguments (--partition=, --licenses=)",
               "sbatch(1)")
      for key in ("gpunode_slurm_submit_host", "gpunode_slurm_partition",
                  "gpunode_slurm_license")),
    Variable("gpunode_slurm_gres", BOOLEAN,
             "whether the acceptance job asks for the node's GPUs (sbatch --gres=gpu:<count>)",
             "sbatch(1) --gres"),
    Variable("gpunode_accept_address", ADDRESS,
             "the rendezvous address of a multi-node run (MASTER_ADDR)", "RFC 1123; ipaddress"),
    Variable("imex_nodes", Rule("address-list", "a list of host addresses",
                                _list_of(address_error)),
             "/etc/nvidia-imex/nodes_config.cfg, one address a line", "NVIDIA IMEX guide"),
    Variable("gpunode_accept_socket_ifname", IFNAMES,
             "NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME of the ranks",
             "NCCL environment variables; Linux IFNAMSIZ"),
    Variable("gpunode_accept_container_options", OPTIONS, "docker run's command line",
             "docker run(1)"),
    *(Variable(key, COMMAND, "a command the node runs (spec.json, a role's shell task)",
               "one line: the runner and the roles run it as one command")
      for key in ("gpunode_kernel_log_command", "gpunode_reboot_boot_time_command",
                  "data_disks_udev_settle_command")),
    *(Variable(key, ABSOLUTE_PATH, _SPEC, "the runner's spec.json")
      for key in ("gpunode_dmi_dir", "gpunode_pci_dir", "gpunode_rdma_dir")),
    *(Variable(key, PATH, "a file gpunode reads on this machine", "one path")
      for key in ("gpunode_sign_key", "gpunode_ca_bundle")),
    Variable("fabric_manager_service", UNIT, "systemctl's command line; the unit checked",
             "systemd.unit(5)"),
    *(Variable(key, PACKAGE_PINS,
               "apt's preferences (Package:, Pin: version) and apt-get's install arguments",
               "Debian policy 5.6.1 and 5.6.12; apt_preferences(5); toolkit/stack/debversion.py")
      for key in ("container_runtime_docker_packages", "fabric_manager_nvlsm_os_packages")),
)  # fmt: skip
_BY_NAME = {variable.name: variable for variable in VARIABLES}


def template_in(value: Any) -> str | None:
    """The first Jinja delimiter in any string of ``value`` (lists and mappings walked)."""
    if isinstance(value, str):
        return next((start for start in JINJA_STARTS if start in value), None)
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list):
        return next((found for item in value if (found := template_in(item))), None)
    return None


def _checked_keys(values: Mapping[str, Any]) -> Iterator[str]:
    for key in values:
        if key in _BY_NAME or (isinstance(key, str) and key.startswith(TEMPLATE_FREE_PREFIXES)):
            yield key


def check_values(values: Mapping[str, Any], sources: Mapping[str, str], whose: str) -> None:
    """Check the merged variables of a group or host against :data:`VARIABLES`.

    Args:
        values: The variables, merged as Ansible merges them.
        sources: The file each came from.
        whose: ``host 'x'`` or ``group 'y'``, for messages.

    Raises:
        ConfigError: A value breaks its rule; the message names the file, the key, ``whose``,
            the rule and where the value goes.
    """
    for key in _checked_keys(values):
        value = values[key]
        source = sources.get(key, "inventory")
        start = template_in(value)
        if start:
            raise ConfigError(
                f"{source}: {key} of {whose}: templated values are not supported by gpunode's "
                f"inventory reader ({start!r} starts a Jinja template Ansible would render, "
                "unchecked); write the value"
            )
        variable = _BY_NAME.get(key)
        if variable is None or (value is None and variable.rule.null_ok):
            continue
        why = variable.rule.check(value)
        if why:
            raise ConfigError(
                f"{source}: {key} of {whose}: {why}: {clip(repr(value))} (rule "
                f"{variable.rule.name}: {variable.rule.says}; it goes to {variable.goes}; "
                f"{variable.source})"
            )


class HostVars(Protocol):
    """A host as the readers below need it (``toolkit.inventory.Host``)."""

    @property
    def name(self) -> str: ...

    @property
    def vars(self) -> Mapping[str, Any]: ...


# Inventory variables of the multi-node plan and of rollouts (host or group vars): a node's
# topology domain (rack or NVLink clique: screened as one group by acceptance's adaptive plan,
# never two of one in a rollout's wave) and the most multi-node sets run at once.
DOMAIN_VAR = "gpunode_accept_domain"
MAX_SETS_VAR = "gpunode_accept_max_sets"


def multi_node_vars(host: HostVars) -> tuple[str | None, int | None]:
    """The host's topology domain and its bound on sets at once, checked.

    Raises:
        ConfigError: Either is not what it must be (named: the variable and the rule).
    """
    domain = host.vars.get(DOMAIN_VAR)
    if domain is not None and (not isinstance(domain, str | int) or isinstance(domain, bool)):
        raise ConfigError(
            f"host {host.name}: {DOMAIN_VAR} must be a name (its rack or NVLink clique), "
            f"not {type(domain).__name__}"
        )
    max_sets = host.vars.get(MAX_SETS_VAR)
    if max_sets is not None and (
        not isinstance(max_sets, int) or isinstance(max_sets, bool) or max_sets < 1
    ):
        raise ConfigError(
            f"host {host.name}: {MAX_SETS_VAR} must be a whole number of at least 1, "
            f"not {max_sets!r}"
        )
    return (None if domain is None else str(domain)), max_sets
