"""Hostile inventories, round three (issue 41): every value checked by where it goes.

Table tests name each example of the issue; property tests (hypothesis, the profiles of
``core/test_properties.py``: ``GPUNODE_HYPOTHESIS_PROFILE=gpunode-5000`` for 5,000 examples) cover
their classes: every spelling of ``StrictHostKeyChecking=no`` / ``UserKnownHostsFile=/dev/null``
OpenSSH accepts is refused and spellings that keep checking on are read, Jinja in any form,
host names and addresses, scheduler node names. Where OpenSSH is installed, the model of its
option parsing is held against ``ssh -G`` (which prints the configuration and never connects).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st
from shared_fixtures import REPO, run_cli

from toolkit.errors import ConfigError
from toolkit.inventory import load_inventory
from toolkit.inventory.ssh import SSH_ARGS_VARS, SshLineError, config_line
from toolkit.inventory.values import VARIABLES
from unit.core.test_properties import configured

TOOLKIT = REPO / "toolkit"
SSH = shutil.which("ssh")


def write(root: Path, host_vars: dict[str, Any], group_vars: dict[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    hosts = {"all": {"children": {"gpu": {"hosts": {"n1": host_vars}}}}}
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts), encoding="utf-8")
    if group_vars is not None:
        (root / "group_vars").mkdir(exist_ok=True)
        (root / "group_vars" / "gpu.yml").write_text(yaml.safe_dump(group_vars), encoding="utf-8")
    return root


def refused(root: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_inventory(root)
    assert info.value.exit_code == 2
    return info.value.message


# --- the issue's examples, each named -------------------------------------------------------------

EXAMPLES = [
    # 1. host key checking turned off past round two's check
    ("ansible_ssh_common_args", "-o=StrictHostKeyChecking=no", "StrictHostKeyChecking=no"),
    ("ansible_ssh_common_args", "-o =UserKnownHostsFile=/dev/null", "/dev/null"),
    ("ansible_ssh_extra_args", "-o 'Strict\"HostKeyChecking\" no'", "StrictHostKeyChecking=no"),
    ("ansible_ssh_common_args", "-o UserKnownHostsFile=/dev//null", "/dev/null, a device"),
    ("ansible_ssh_common_args", "-o UserKnownHostsFile=/dev/../dev/null", "a device"),
    ("ansible_ssh_common_args", "-o UserKnownHostsFile=none", "is none"),
    ("ansible_ssh_common_args", "-o UserKnownHostsFile=%d/../../dev/null", "% tokens"),
    ("ansible_ssh_common_args", "-o 'KnownHostsCommand=/bin/echo %H %t %K'", "KnownHostsCommand"),
    ("ansible_ssh_common_args", "-oProxyCommand='nc %h %p'", "ProxyCommand"),
    ("ansible_ssh_common_args", "-o LocalCommand=id -o PermitLocalCommand=yes", "LocalCommand"),
    ("ansible_ssh_common_args", "-o PermitLocalCommand=yes", "PermitLocalCommand"),
    ("ansible_ssh_common_args", "-I /tmp/evil.so", "loads a library"),
    ("ansible_ssh_common_args", "-o Include=/tmp/x", "Include is not read"),
    ("ansible_ssh_common_args", "' -oStrictHostKeyChecking=no'", "StrictHostKeyChecking=no"),
    # 2. Jinja other than {{
    ("ansible_ssh_common_args", "{% if true %}-o StrictHostKeyChecking=no{% endif %}", "'{%'"),
    ("ansible_ssh_common_args", "{# c #}-o StrictHostKeyChecking=no", "'{#'"),
    ("gpunode_kernel_log_command", "dmesg {{ x }}", "templated values"),
    ("ansible_python_interpreter", "{{ ansible_playbook_python }}", "templated values"),
    # 3. a Slurm name that names many nodes
    ("gpunode_scheduler_node_name", "n[1-3]", "no Slurm hostlist"),
    ("gpunode_scheduler_node_name", "a,b", "no Slurm hostlist"),
    ("gpunode_scheduler_node_name", "ALL", "Slurm's word for every node"),
    ("gpunode_scheduler_node_name", "all", "Slurm's word for every node"),
    ("gpunode_scheduler_node_name", "a b", "no Slurm hostlist"),
    ("gpunode_scheduler_node_name", "--all", "no Slurm hostlist"),
    ("slurm_healthcheck_node_name", "n[1-3]", "no Slurm hostlist"),
    # 4. ansible_host is a host
    ("ansible_host", "10.0.0.1\n10.0.0.66", "host-address"),
    ("ansible_host", "-oProxyCommand=touch /tmp/x", "host-address"),
    ("ansible_ssh_host", "node 1", "host-address"),
    ("ansible_host", "fe80::1%eth0\nx", "an IPv6 scope"),
    ("ansible_host", "10.1", "all digits at the end"),
    ("ansible_user", "-oProxyCommand=x", "user-name"),
    ("ansible_user", "root\nx", "user-name"),
    ("ansible_port", "22 -o x", "not a TCP port"),
    # 5. values that land in a line-oriented file or on a command line
    ("imex_nodes", ["10.0.0.1", "10.0.0.2\n10.0.0.66"], "address-list"),
    ("gpunode_accept_address", "10.0.0.1 -x", "host-address"),
    ("gpunode_accept_socket_ifname", "eth0\nNCCL_X=1", "interface-names"),
    ("gpunode_kernel_log_command", "dmesg\nrm -rf /", "a control character"),
    ("gpunode_dmi_dir", "relative/dmi", "not an absolute path"),
    ("gpunode_accept_container_options", ["--ipc=host\n--privileged"], "option-list"),
    ("ansible_ssh_private_key_file", '/k" -oProxyCommand="x', "path"),
    ("fabric_manager_service", "-x.service", "unit-name"),
    ("gpunode_slurm_partition", "a,b", "slurm-name"),
    # 6. a switch gpunode reads itself: a quoted "no" would read as yes
    ("gpunode_slurm_gres", "no", "not a boolean"),
    ("gpunode_slurm_gres", 0, "not a boolean"),
    # 7. packages pinned by the inventory: a name and a version that land in apt preferences
    ("container_runtime_docker_packages", {"docker.io": "20.10\nPin-Priority: -1"}, "package-pins"),
    ("container_runtime_docker_packages", {"docker.io -o x": "20.10.24-1"}, "not a Debian package"),
    ("container_runtime_docker_packages", ["docker.io"], "not a mapping"),
    ("fabric_manager_nvlsm_os_packages", {"infiniband-diags": ">=x1"}, "after '>='"),
    ("fabric_manager_nvlsm_os_packages", {"infiniband-diags": "44.0 -*"}, "before '-*'"),
    ("fabric_manager_nvlsm_os_packages", {"infiniband-diags": 44}, "not a string"),
]


@pytest.mark.parametrize(("key", "value", "reason"), EXAMPLES)
def test_each_example_of_issue_41_is_refused_naming_file_key_host_and_rule(
    tmp_path: Path, key: str, value: Any, reason: str
) -> None:
    message = refused(write(tmp_path / "inv", {key: value}))
    assert reason in message, message
    assert f"{tmp_path / 'inv' / 'hosts.yml'}: {key} of " in message
    assert "host 'n1'" in message or "group " in message


@pytest.mark.parametrize(("key", "value", "reason"), EXAMPLES[:3] + EXAMPLES[18:19])
def test_the_cli_exits_2_before_anything_is_touched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: Any, reason: str
) -> None:
    root = write(tmp_path / "inv", {}, group_vars={key: value})
    code, _out, err = run_cli(capsys, "stack", "check", str(root))
    assert code == 2 and reason in err and "group_vars/gpu.yml" in err, err


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ansible_host", "192.0.2.11"),
        ("ansible_host", "2001:db8::1"),
        ("ansible_host", "fe80::1%eth0"),
        ("ansible_host", "node-01.example.com"),
        ("ansible_host", "node-01.example.com."),
        ("ansible_user", "ubuntu"),
        ("ansible_port", 2222),
        ("ansible_port", "22"),
        ("ansible_ssh_common_args", "-o ProxyJump=bastion -o ProxyCommand=none"),
        ("ansible_ssh_common_args", "-o GlobalKnownHostsFile=/dev/null -o BatchMode=yes"),
        ("ansible_ssh_common_args", "-o UserKnownHostsFile=~/.ssh/k1 -o PermitLocalCommand=no"),
        ("gpunode_scheduler_node_name", "gpu-07.cluster"),
        ("gpunode_accept_socket_ifname", "^docker,lo"),
        ("gpunode_accept_container_options", ["--ipc=host", "--ulimit", "memlock=-1"]),
        ("gpunode_kernel_log_command", "journalctl -b -t kernel -o short-monotonic --no-pager"),
        ("fabric_manager_service", "nvidia-fabricmanager"),
        ("gpunode_nvidia_repo_url", "https://mirror/{os}/{arch}/"),
        ("gpunode_slurm_gres", False),
        ("container_runtime_docker_packages", {"docker.io": "20.10.24+dfsg1-*", "runc": ">=1.1"}),
        ("fabric_manager_nvlsm_os_packages", {"infiniband-diags": "44.0-2"}),
    ],
)  # fmt: skip
def test_values_that_follow_their_rule_are_read(tmp_path: Path, key: str, value: Any) -> None:
    assert load_inventory(write(tmp_path / "inv", {key: value})).hosts["n1"]


def test_the_scheduler_name_is_read_once_and_only_through_the_host(tmp_path: Path) -> None:
    """One owner: the inventory checks it; the executor and the hooks read Host.scheduler_name."""
    inventory = load_inventory(write(tmp_path / "inv", {"gpunode_scheduler_node_name": "gpu7"}))
    assert inventory.hosts["n1"].scheduler_name == "gpu7"
    readers = [
        str(path.relative_to(TOOLKIT))
        for path in TOOLKIT.rglob("*.py")
        if "gpunode_scheduler_node_name" in path.read_text()
    ]
    assert sorted(readers) == ["inventory/__init__.py", "inventory/values.py"]


def test_a_host_whose_own_name_is_all_needs_a_scheduler_name(tmp_path: Path) -> None:
    root = tmp_path / "inv"
    root.mkdir()
    (root / "hosts.yml").write_text("all:\n  hosts:\n    ALL: {}\n", encoding="utf-8")
    assert "set gpunode_scheduler_node_name" in refused(root)


def test_every_variable_of_the_table_says_where_it_goes_and_why() -> None:
    names = [variable.name for variable in VARIABLES]
    assert len(names) == len(set(names))
    assert all(v.goes and v.source and v.rule.says for v in VARIABLES)


@pytest.mark.parametrize("inventory", ["inventories/sample"])
def test_the_sample_inventory_still_loads(inventory: str) -> None:
    assert load_inventory(TOOLKIT.parent / inventory).hosts


# --- property tests ---------------------------------------------------------------------------


def _cased(word: str) -> st.SearchStrategy[str]:
    return st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda upper: "".join(
            c.upper() if u else c.lower() for c, u in zip(word, upper, strict=True)
        )
    )


def _quoted(word: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A value word as argv_split reads it: bare, in '' or "", or quoted in part."""
    return st.tuples(word, st.sampled_from(["", "'", '"', "half"])).map(
        lambda t: f'{t[0][:1]}"{t[0][1:]}"' if t[1] == "half" else f"{t[1]}{t[0]}{t[1]}"
    )


def _keyword(name: str) -> st.SearchStrategy[str]:
    """A keyword as readconf.c reads it: any case, bare or in double quotes."""
    return st.tuples(_cased(name), st.booleans()).map(lambda t: f'"{t[0]}"' if t[1] else t[0])


LEADS = st.sampled_from(["", " ", "=", " =", "= ", "\t", " \t= "])
SEPARATORS = st.sampled_from([" ", "=", " = ", "\t", "=\t", "  "])
COMMENTS = st.sampled_from(["", " ", " #c", "\t# x"])


def option_lines(name: str, values: list[str], cased: bool = True) -> st.SearchStrategy[str]:
    """Lines ssh reads as ``name value``: after a quoted keyword only whitespace separates
    (strdelim skips no '=' after a closing quote: `"Keyword"=value` is refused by ssh)."""
    value = _quoted(st.sampled_from(values).flatmap(_cased) if cased else st.sampled_from(values))
    keyword = _keyword(name).flatmap(
        lambda word: st.tuples(
            st.just(word), st.sampled_from([" ", "\t"]) if word[0] == '"' else SEPARATORS
        )
    )
    return st.tuples(LEADS, keyword.map("".join), value, COMMENTS).map("".join)


OFF = option_lines("StrictHostKeyChecking", ["no", "off", "false", "accept-new"])
ON = option_lines("StrictHostKeyChecking", ["yes", "true", "ask"])
DEV_NULL = option_lines(
    "UserKnownHostsFile",
    ["/dev/null", "/dev//null", "/dev/./null", "/dev/../dev/null"],
    cased=False,
)


def ssh_words(line: str) -> st.SearchStrategy[str]:
    """The -o option in every getopt spelling, as one Ansible variable's text."""
    quoted = "'" + line.replace("'", "'\"'\"'") + "'"
    return st.sampled_from(
        [f"-o {quoted}", f"-o{quoted}", f"-4o {quoted}", f"-vo{quoted}", f"-C -o {quoted} -v"]
    )


@configured
@given(st.sampled_from(SSH_ARGS_VARS), OFF.flatmap(ssh_words) | DEV_NULL.flatmap(ssh_words))
def test_every_spelling_that_turns_checking_off_is_refused(
    tmp_path_factory: Any, key: str, args: str
) -> None:
    message = refused(write(tmp_path_factory.mktemp("inv"), {key: args}))
    assert key in message and ("StrictHostKeyChecking" in message or "/dev" in message)


@configured
@given(st.sampled_from(SSH_ARGS_VARS), ON.flatmap(ssh_words))
def test_every_spelling_that_keeps_checking_on_is_read(
    tmp_path_factory: Any, key: str, args: str
) -> None:
    assert load_inventory(write(tmp_path_factory.mktemp("inv"), {key: args})).hosts


def _ssh_g(line: str) -> str:
    """StrictHostKeyChecking as ssh -G reads the line ("error" when ssh refuses it)."""
    assert SSH is not None
    result = subprocess.run(
        [SSH, "-G", "-F", "/dev/null", "-o", line, "gpunode.invalid"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    if result.returncode != 0:
        return "error"
    return next(
        (row.split()[1] for row in result.stdout.splitlines() if row.startswith("stricthost")),
        "error",
    )


def _model(line: str) -> str:
    try:
        read = config_line(line)
    except SshLineError:
        return "error"
    if read is None:
        return "ask"  # a line ssh ignores leaves the default
    keyword, words = read
    values = {"yes": "true", "true": "true", "ask": "ask", "accept-new": "accept-new"}
    values |= {"no": "false", "off": "false", "false": "false"}
    if keyword != "stricthostkeychecking" or len(words) != 1:
        return "error"
    return values.get(words[0].lower(), "error")


@pytest.mark.skipif(SSH is None, reason="OpenSSH's client is not installed (scripts/setup-host)")
@configured
@given(
    OFF
    | ON
    | st.tuples(LEADS, _keyword("StrictHostKeyChecking"), SEPARATORS, st.text("no\"'\\ #=\t")).map(
        "".join
    )
)
def test_the_model_reads_an_option_line_as_ssh_G_does(line: str) -> None:
    assert _model(line) == _ssh_g(line), line


JINJA = st.tuples(
    st.text(max_size=8), st.sampled_from(["{{", "{%", "{#"]), st.text(max_size=8)
).map("".join)
CHECKED_KEYS = st.sampled_from(
    [v.name for v in VARIABLES] + ["ansible_python_interpreter", "gpunode_anything"]
)


@configured
@given(CHECKED_KEYS, JINJA, st.booleans())
def test_any_jinja_in_a_checked_variable_is_refused(
    tmp_path_factory: Any, key: str, text: str, nested: bool
) -> None:
    value: Any = [text] if nested else text
    message = refused(write(tmp_path_factory.mktemp("inv"), {key: value}))
    assert key in message


LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
HOST_NAMES = (
    st.lists(LABEL, min_size=1, max_size=4)
    .map(".".join)
    .filter(lambda name: not name.rsplit(".", 1)[-1].isdigit())
)
ADDRESSES = st.ip_addresses().map(str) | HOST_NAMES
HOSTILE = st.sampled_from(["\n", " ", "\t", "\x00", ",", "/", "[", "]", "=", ";", "'", "%", "\\"])


@configured
@given(ADDRESSES)
def test_host_names_and_addresses_are_read(tmp_path_factory: Any, address: str) -> None:
    inventory = load_inventory(write(tmp_path_factory.mktemp("inv"), {"ansible_host": address}))
    assert inventory.hosts["n1"].address == address


@configured
@given(ADDRESSES, HOSTILE, st.integers(min_value=0, max_value=40))
def test_a_host_address_with_anything_else_in_it_is_refused(
    tmp_path_factory: Any, address: str, hostile: str, at: int
) -> None:
    value = address[:at] + hostile + address[at:]
    assume(":" not in value or hostile != "%")  # fe80::1%eth0 is an address with its scope
    root = write(tmp_path_factory.mktemp("inv"), {"ansible_host": value})
    assert "host-address" in refused(root)


SCHEDULER_NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True).filter(
    lambda name: name.lower() != "all"
)
HOSTLISTS = (
    st.tuples(SCHEDULER_NAMES, st.sampled_from(["[1-3]", "[1,4]", ",", " ", "\t", "\n"])).map(
        "".join
    )
    | _cased("all")
    | SCHEDULER_NAMES.map(lambda name: f"-{name}")
)


@configured
@given(SCHEDULER_NAMES)
def test_scheduler_node_names_are_read(tmp_path_factory: Any, name: str) -> None:
    root = write(tmp_path_factory.mktemp("inv"), {"gpunode_scheduler_node_name": name})
    assert load_inventory(root).hosts["n1"].scheduler_name == name


@configured
@given(HOSTLISTS)
def test_a_scheduler_name_naming_many_nodes_is_refused(tmp_path_factory: Any, name: str) -> None:
    root = write(tmp_path_factory.mktemp("inv"), {"gpunode_scheduler_node_name": name})
    assert "scheduler-node-name" in refused(root)
