"""Limits that cannot be walked around (issue 27).

Each test failed before the fix: the YAML node limit was counted after the whole document was
composed (a 4 MiB list took a minute and 1.5 GB before it was refused), the host-range cap was
per pattern (five ranges of 10,000 loaded quadratically for 92 s), integers of more than 4,300
digits and ``ansible_group_priority: "²"`` were internal errors, and one node's garbled
``nvidia-smi topo -m`` could fail the whole acceptance run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO, run_cli

from toolkit.acceptance.plan import NodePlan
from toolkit.acceptance.topology import (
    MAX_CPUS,
    MAX_NUMA_NODES,
    TopologyUnreadable,
    parse_topo,
)
from toolkit.acceptance.verdict import judge
from toolkit.config import MAX_YAML_BYTES, MAX_YAML_INT_CHARS, MAX_YAML_NODES
from toolkit.inventory import MAX_INVENTORY_HOSTS, Host, load_inventory
from toolkit.profile.floors import AcceptanceSpec
from toolkit.steps.accept import run as accept
from unit.acceptance.test_verdict import EXPECT, SPEC, healthy

TOPO = (REPO / "tests" / "unit" / "data" / "topo" / "h100-sxm-8.txt").read_text()
GPU0_AFFINITY = "0-47,96-143     0               N/A"


def flow_list(items: int) -> str:
    """A one-line YAML list of ``items`` ones: 2 million fit in 4 MiB."""
    return "[" + "1," * (items - 1) + "1]\n"


# --- YAML: counted while composing ---------------------------------------------------------------

# Loads a file in a fresh interpreter and prints the error, then the peak RSS in KiB.
_LOAD = """
import resource, sys
from toolkit.config import load_yaml
from toolkit.errors import ConfigError
try:
    load_yaml(sys.argv[1])
except ConfigError as err:
    print(err.message)
# VmHWM: the peak of this process's own memory (ru_maxrss would count the pytest
# process that forked it, whose memory the child shares until exec).
print(next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')))
"""


def load_in_subprocess(path: Path) -> tuple[str, int]:
    """(the loader's error, peak RSS in MiB) of loading ``path`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _LOAD, str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    message, rss_kib = done.stdout.strip().rsplit("\n", 1)
    return message, int(rss_kib) // 1024


def test_a_4mib_list_of_2_million_items_is_refused_while_composing(tmp_path: Path) -> None:
    path = tmp_path / "list.yml"
    text = flow_list(2_000_000)
    assert len(text) <= MAX_YAML_BYTES
    path.write_text(text)
    message, rss_mib = load_in_subprocess(path)
    assert f"more than {MAX_YAML_NODES} values" in message and str(path) in message
    # Refused at the item past the limit, not at the end of the document: `1,` is 2 columns.
    column = int(message.split(": invalid YAML")[0].rsplit(":", 1)[1])
    assert column <= 2 * MAX_YAML_NODES + 2
    # Was 1.5 GB; the text itself is 4 MiB and the interpreter with toolkit.config ~40 MiB.
    assert rss_mib < 300


def test_aliases_count_at_their_size_while_composing(tmp_path: Path) -> None:
    # 1,000 items named 200 times: 200,000 values expanded, refused at the alias past it.
    text = "a: &a " + flow_list(1000) + "b: [" + ", ".join(["*a"] * 200) + "]\n"
    path = tmp_path / "aliases.yml"
    path.write_text(text)
    message, _rss = load_in_subprocess(path)
    assert f"{path}:2:" in message and "aliases expanded" in message


def test_the_cli_exits_2_on_a_huge_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "stack.yml"
    path.write_text("stack:\n  extra: " + flow_list(2_000_000))
    code, _out, err = run_cli(capsys, "stack", "check", str(path))
    assert code == 2, err
    assert f"{path}:2:" in err and f"more than {MAX_YAML_NODES} values" in err


# --- integers ------------------------------------------------------------------------------------

HUGE = "9" * 5000  # past Python's 4,300-digit limit of int(), so int() raised ValueError


@pytest.mark.parametrize(
    "value",
    [HUGE, "-" + HUGE, "0x" + "f" * 5000, "0" + "7" * 5000, "1_" * 3000 + "1", "1:" * 3000 + "1"],
)
def test_a_huge_integer_anywhere_exits_2_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    path = tmp_path / "stack.yml"
    path.write_text(f"stack:\n  driver: {{version: {value}}}\n")
    code, _out, err = run_cli(capsys, "stack", "check", str(path))
    assert code == 2, err
    assert f"{path}:2:" in err and f"more than {MAX_YAML_INT_CHARS}" in err
    assert len(err) < 2000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0x_", "'0x_' is not a valid int"),
        ("0b_", "'0b_' is not a valid int"),
        ("2024-13-45", "'2024-13-45' is not a valid timestamp (month must be in 1..12)"),
    ],
)
def test_scalars_yaml_resolves_but_python_cannot_build_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    path = tmp_path / "stack.yml"
    path.write_text(f"stack:\n  driver: {{version: {value}}}\n")
    code, _out, err = run_cli(capsys, "stack", "check", str(path))
    assert code == 2, err
    assert f"{path}:2:" in err and expected in err


def test_integers_within_the_limit_still_load(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpus:\n      vars: {ansible_group_priority: 10, big: "
        + "1" * MAX_YAML_INT_CHARS
        + "}\n      hosts:\n        n1: {ansible_port: 2222}\n"
    )
    inventory = load_inventory(tmp_path)
    assert inventory.hosts["n1"].port == 2222
    assert inventory.groups["gpus"].vars["big"] == int("1" * MAX_YAML_INT_CHARS)


def _inventory(tmp_path: Path, group_vars: str = "{}", host_vars: str = "{}") -> Path:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n    gpus:\n"
        f"      vars: {group_vars}\n"
        f"      hosts:\n        n1: {host_vars}\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    ("group_vars", "host_vars", "expected"),
    [
        ("{}", f"{{ansible_port: {HUGE}}}", f"more than {MAX_YAML_INT_CHARS}"),
        ("{}", f"{{ansible_ssh_port: {HUGE}}}", f"more than {MAX_YAML_INT_CHARS}"),
        ("{}", f'{{ansible_port: "{HUGE}"}}', "ansible_port of host 'n1': not a TCP port"),
        ("{}", '{ansible_port: "²²"}', "ansible_port of host 'n1': not a TCP port"),
        ("{}", '{ansible_port: "٢٢"}', "ansible_port of host 'n1': not a TCP port"),
        (f"{{ansible_group_priority: {HUGE}}}", "{}", f"more than {MAX_YAML_INT_CHARS}"),
        ('{ansible_group_priority: "²"}', "{}", "ansible_group_priority of group 'gpus'"),
        ('{ansible_group_priority: "١"}', "{}", "ansible_group_priority of group 'gpus'"),
        (f'{{ansible_group_priority: "{HUGE}"}}', "{}", "ansible_group_priority of group"),
        ("{ansible_group_priority: -1}", "{}", "ansible_group_priority of group 'gpus'"),
        ("{ansible_group_priority: [1]}", "{}", "ansible_group_priority of group 'gpus'"),
    ],
)
def test_connection_numbers_are_ascii_and_bounded(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    group_vars: str,
    host_vars: str,
    expected: str,
) -> None:
    inventory = _inventory(tmp_path, group_vars, host_vars)
    code, _out, err = run_cli(capsys, "stack", "check", str(inventory))
    assert code == 2, err
    assert str(inventory / "hosts.yml") in err and expected in err
    assert len(err) < 2000


def test_group_priority_orders_the_merge(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  children:\n"
        "    a:\n      vars: {ansible_group_priority: 10, x: from-a}\n      hosts: {n1: }\n"
        "    b:\n      vars: {ansible_group_priority: 2, x: from-b}\n      hosts: {n1: }\n"
    )
    assert load_inventory(tmp_path).hosts["n1"].vars["x"] == "from-a"


# --- host ranges: one cap per inventory ----------------------------------------------------------


def _ranges(tmp_path: Path, lines: int) -> Path:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n" + "".join(f'    "p{n}-[0:9999]": {{}}\n' for n in range(lines))
    )
    return tmp_path


@pytest.mark.parametrize("lines", [2, 5, 10])
def test_many_ranges_cannot_add_up_past_the_inventory_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: int
) -> None:
    inventory = _ranges(tmp_path, lines)
    code, _out, err = run_cli(capsys, "stack", "check", str(inventory))
    assert code == 2, err
    assert str(inventory / "hosts.yml") in err and f"past {MAX_INVENTORY_HOSTS} hosts" in err
    assert "'p1-[0:9999]'" in err  # the pattern that crossed the cap


def test_an_inventory_at_the_cap_loads_whole(tmp_path: Path) -> None:
    inventory = load_inventory(_ranges(tmp_path, 1))
    assert len(inventory.hosts) == MAX_INVENTORY_HOSTS
    assert inventory.group_hosts("ungrouped")[-1] == "p0-9999"
    assert inventory.hosts["p0-42"].groups == ("all", "ungrouped")


def test_plain_names_count_toward_the_cap(tmp_path: Path) -> None:
    (tmp_path / "hosts.yml").write_text(
        "all:\n  hosts:\n    p-[1:9999]: {}\n    extra-a: {}\n    extra-b: {}\n"
    )
    with pytest.raises(
        Exception, match=f"'extra-b' takes the inventory past {MAX_INVENTORY_HOSTS}"
    ):
        load_inventory(tmp_path)


# --- topology: strict affinity lists -------------------------------------------------------------


def _gpu0(affinity: str) -> str:
    assert GPU0_AFFINITY in TOPO
    return TOPO.replace(GPU0_AFFINITY, affinity, 1)


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        ("0-47,96-143     0-1-2           N/A", "NUMA Affinity '0-1-2' is not an affinity list"),
        ("0-47,96-143     0-99999999      N/A", f"past the kernel's bound ({MAX_NUMA_NODES}"),
        ("0-47,96-143     3-1             N/A", "range 3-1 runs backwards"),
        ("0-47,96-143     1,0             N/A", "0 is not after 1"),
        ("0-47,96-143     0,,1            N/A", "NUMA Affinity '0,,1' is not an affinity list"),
        ("0-47,96-143     ١               N/A", "NUMA Affinity '١' is not an affinity list"),
        ("0-47,96-143     " + "9" * 5000 + " N/A", "NUMA Affinity '999"),
        ("0-99999999      0               N/A", f"past the kernel's bound ({MAX_CPUS}"),
        ("0-47,40-143     0               N/A", "CPU Affinity '0-47,40-143'"),
        ("0-47-96         0               N/A", "CPU Affinity '0-47-96' is not an affinity list"),
        ("0-47,96-143     0               ²", "GPU NUMA ID '²' is not a NUMA node"),
        ("0-47,96-143     0               99999", "GPU NUMA ID '99999' is not a NUMA node"),
    ],
)
def test_affinity_lists_are_strict_and_bounded(affinity: str, expected: str) -> None:
    with pytest.raises(TopologyUnreadable) as info:
        parse_topo(_gpu0(affinity))
    assert info.value.message.startswith("line 2: ") and expected in info.value.message
    assert len(info.value.message) < 2000


def test_affinity_lists_within_the_bounds_parse() -> None:
    topo = parse_topo(_gpu0(f"0-47,96-{MAX_CPUS - 1}     0-1,3,{MAX_NUMA_NODES - 1}      7"))
    gpu0 = topo.gpus[0]
    assert gpu0.numa_nodes == (0, 1, 3, MAX_NUMA_NODES - 1)
    assert gpu0.cpu_affinity == f"0-47,96-{MAX_CPUS - 1}" and gpu0.gpu_numa_id == "7"


def _topology_spec() -> AcceptanceSpec:
    rules = {"gpu_link_same_numa": "NV18", "numa_balanced": True}
    return AcceptanceSpec.model_validate({**SPEC.model_dump(), "topology": rules})


@pytest.mark.parametrize("numa", ["0-1-2", "0-99999999"])
def test_a_garbled_topology_fails_its_node_with_the_line(numa: str) -> None:
    garbled = _gpu0(f"0-47,96-143     {numa:<16}N/A")
    result = {**healthy(), "topology": {"raw_output": garbled, "error": None}}
    verdict = judge(result, EXPECT, _topology_spec())
    assert not verdict.ready
    [check] = verdict.failed
    assert check.name == "topology.read" and "line 2: NUMA Affinity" in check.message


def _plan(name: str, result: Any) -> NodePlan:
    host = Host(name, name, 22, None, None, None, ("all",), {})
    plan = NodePlan(host, "all", _topology_spec(), None, None, result=result)
    plan.expect = EXPECT
    return plan


@pytest.mark.parametrize(
    "hostile",
    [
        [],  # result.json holding a list
        {**healthy(), "topology": 5},
        {**healthy(), "topology": {"raw_output": _gpu0("0-47,96-143     0-1-2           N/A")}},
    ],
)
def test_one_nodes_hostile_result_fails_only_that_node(hostile: Any) -> None:
    good = accept._judge(_plan("good", {**healthy(), "topology": {"raw_output": TOPO}}))
    bad = accept._judge(_plan("bad", hostile))
    assert good.ready, good.reasons()
    assert not bad.ready and bad.reasons()
