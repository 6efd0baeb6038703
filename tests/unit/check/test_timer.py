"""The passive check from a systemd timer (sites without Slurm): the role's units, verified by
systemd-analyze, and the program run for real (``--no-slurm --textfile``) on a fake node, its
node_exporter textfile read back with a strict parser of the text exposition format 0.0.4
(https://prometheus.io/docs/instrumenting/exposition_formats/)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from shared_fixtures import REPO

from toolkit.facts import systemd
from toolkit.node import nodefacts
from toolkit.report import prometheus
from unit.check.test_healthcheck import IDLE, READY, Node

ROLE = REPO / "roles" / "slurm_healthcheck"

# --- a strict reader of the text exposition format ---------------------------------------------

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(
    rf"^(?P<name>{NAME})(?P<labels>\{{(?:{LABEL})(?:,{LABEL})*\}})? "
    r"(?P<value>[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|NaN|Inf))$"
)
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def parse_exposition(text: str) -> dict[str, dict[str, float]]:
    """Each metric's samples by their label text; raises on anything the format forbids or a
    reader could take two ways: no final line feed, a HELP or TYPE line given twice or after
    the metric's samples, a sample with no TYPE, a series given twice, a malformed line."""
    assert text.endswith("\n"), "the last line must end with a line feed"
    helps: set[str] = set()
    types: dict[str, str] = {}
    samples: dict[str, dict[str, float]] = {}
    for number, line in enumerate(text[:-1].split("\n"), 1):
        where = f"line {number}: {line!r}"
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            assert re.fullmatch(NAME, name) and name not in helps and name not in samples, where
            helps.add(name)
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in TYPES and name not in types and name not in samples, where
            types[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, where
            name, labels = match["name"], match["labels"] or ""
            assert name in types and name in helps, f"{where}: no HELP or TYPE before it"
            series = samples.setdefault(name, {})
            assert labels not in series, f"{where}: series given twice"
            series[labels] = float(match["value"])
    return samples


@pytest.mark.parametrize(
    "text",
    [
        "a 1",  # no final line feed
        "a 1\n",  # no TYPE
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n",  # a series twice
        "# HELP a x\n# TYPE a gauge\na 1\n# TYPE a gauge\n",  # TYPE twice
        '# HELP a x\n# TYPE a gauge\na{l="\n"} 1\n',  # an unescaped line feed
    ],
)
def test_the_reader_refuses_what_the_format_forbids(text: str) -> None:
    with pytest.raises(AssertionError):
        parse_exposition(text)


def test_the_check_textfile_reads_back_one_series_per_check_with_escaped_labels() -> None:
    text = prometheus.render_check_textfile(
        "not-ready",
        [("health.xid", False), ("nic.link", True), ("health.xid", True), ('odd"\\\n', True)],
        1767225600.25,
        0.4321,
    )
    samples = parse_exposition(text)
    assert samples["gpunode_check_node_ready"] == {'{state="not-ready"}': 0.0}
    assert samples["gpunode_check_failed"] == {
        '{check="health.xid"}': 1.0,  # failed once: failed
        '{check="nic.link"}': 0.0,
        '{check="odd\\"\\\\\\n"}': 0.0,
    }
    assert samples["gpunode_check_failures"] == {"": 1.0}
    assert samples["gpunode_check_timestamp_seconds"] == {"": 1767225600.25}
    assert samples["gpunode_check_duration_seconds"] == {"": 0.432}
    # No name shared with acceptance's textfile: the collector reads both files as one.
    acceptance = prometheus.render_textfile(
        {"verdict": "ready", "allreduce_rows": [], "failed_checks": []}, "r1", 0.0
    )
    assert not set(parse_exposition(acceptance)) & set(samples)


# --- the program as the timer's service runs it ------------------------------------------------


def test_the_timer_s_check_writes_the_state_and_the_textfile_and_leaves_slurm(
    tmp_path: Path,
) -> None:
    node = Node(tmp_path, ["xid"], IDLE, READY)
    textfile = tmp_path / "textfile_collector" / "gpunode-check.prom"
    done = node.run("--no-slurm", "--textfile", str(textfile))
    assert done.returncode == 0, done.stderr
    assert node.state()["state"] == "not-ready"  # the same write as under Slurm
    assert node.scontrol_calls() == []  # no Slurm here
    samples = parse_exposition(textfile.read_text())
    assert samples["gpunode_check_node_ready"] == {'{state="not-ready"}': 0.0}
    assert samples["gpunode_check_failed"]['{check="health.xid"}'] == 1.0
    assert sum(samples["gpunode_check_failed"].values()) == samples["gpunode_check_failures"][""]
    assert 0 < samples["gpunode_check_duration_seconds"][""] < 30
    assert [p.name for p in textfile.parent.iterdir()] == ["gpunode-check.prom"]  # no temp left


def test_a_clean_node_s_textfile_says_ready(tmp_path: Path) -> None:
    node = Node(tmp_path, [], IDLE, READY)
    textfile = tmp_path / "gpunode-check.prom"
    done = node.run("--no-slurm", "--textfile", str(textfile))
    assert done.returncode == 0, done.stderr
    samples = parse_exposition(textfile.read_text())
    assert samples["gpunode_check_node_ready"] == {'{state="ready"}': 1.0}
    assert samples["gpunode_check_failures"] == {"": 0.0}


def test_an_unwritable_textfile_exits_1_naming_it(tmp_path: Path) -> None:
    node = Node(tmp_path, [], IDLE, READY)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    done = node.run("--no-slurm", "--textfile", str(blocker / "gpunode-check.prom"))
    assert done.returncode == 1 and str(blocker) in done.stderr


# --- the role's units ----------------------------------------------------------------------------


def _render(name: str, values: dict[str, str]) -> str:
    source = (ROLE / "templates" / name).read_text()
    template = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(source)
    return template.render(ansible_managed="Ansible managed", **values)


def _role_values(tmp: Path, interval: str) -> dict[str, str]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    program = tmp / "gpunode-healthcheck"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    return {
        **{k: v for k, v in defaults.items() if "{{" not in str(v)},
        "slurm_healthcheck_program_path": str(program),
        "slurm_healthcheck_timer_interval": interval,
    }


def _verify(tmp: Path, interval: str) -> subprocess.CompletedProcess[str]:
    values = _role_values(tmp, interval)
    unit = values["slurm_healthcheck_timer_unit"]
    for kind in ("service", "timer"):
        (tmp / f"{unit}.{kind}").write_text(_render(f"healthcheck.{kind}.j2", values))
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze (package systemd) is needed to verify the role's units"
    return subprocess.run(
        [analyze, "verify", str(tmp / f"{unit}.service"), str(tmp / f"{unit}.timer")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_systemd_accepts_the_role_s_service_and_timer(tmp_path: Path) -> None:
    done = _verify(tmp_path, "5min")
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    service = (tmp_path / "gpunode-healthcheck.service").read_text()
    assert "Type=oneshot" in service
    execute = next(line for line in service.splitlines() if line.startswith("ExecStart="))
    assert execute.split()[1:4] == ["--no-slurm", "--textfile", prometheus.CHECK_TEXTFILE_PATH]
    timer = (tmp_path / "gpunode-healthcheck.timer").read_text()
    assert "OnActiveSec=5min" in timer and "OnUnitActiveSec=5min" in timer


def test_systemd_refuses_an_interval_that_is_no_time_span(tmp_path: Path) -> None:
    done = _verify(tmp_path, "5 parsecs")
    assert done.returncode != 0 and "Failed to parse timer value" in done.stderr


def test_the_role_s_textfile_is_the_one_the_report_module_names() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["slurm_healthcheck_textfile"] == prometheus.CHECK_TEXTFILE_PATH
    assert "gpunode_check_timer" in defaults["slurm_healthcheck_timer"]


# --- the role's switches: the timer installed when asked for, removed when not -----------------


def _tasks(name: str) -> list[dict[str, object]]:
    return list(yaml.safe_load((ROLE / "tasks" / name).read_text()))


@pytest.mark.parametrize(
    ("slurm", "timer", "install"),
    [(False, False, False), (True, False, True), (False, True, True), (True, True, True)],
)
def test_the_program_is_installed_when_either_switch_is_on(
    slurm: bool, timer: bool, install: bool
) -> None:
    from ansible.module_utils.parsing.convert_bool import boolean

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)
    environment.filters["bool"] = boolean
    switches = {"gpunode_slurm_healthcheck": slurm, "gpunode_check_timer": timer}
    text = environment.from_string(defaults["slurm_healthcheck_install"]).render(**switches)
    assert boolean(text.strip()) is install
    timer_on = environment.from_string(defaults["slurm_healthcheck_timer"]).render(**switches)
    assert boolean(timer_on) is timer  # the timer's own switch: its units or their removal


def test_the_timer_is_installed_when_on_and_removed_when_off() -> None:
    main = {str(t["name"]): t for t in _tasks("main.yml")}
    install = next(
        t for t in main.values() if t.get("ansible.builtin.include_tasks") == "timer.yml"
    )
    remove = next(
        t for t in main.values() if t.get("ansible.builtin.include_tasks") == "timer_absent.yml"
    )
    assert install["when"] == "slurm_healthcheck_timer | bool"
    assert remove["when"] == "not (slurm_healthcheck_timer | bool)"
    # Removal covers what the installer writes: its units' paths and the service's textfile.
    [installed] = [t for t in _tasks("timer.yml") if "ansible.builtin.template" in t]
    template = installed["ansible.builtin.template"]
    assert isinstance(template, dict) and installed["loop"] == ["service", "timer"]
    written = {template["dest"].replace("{{ item }}", kind) for kind in ("service", "timer")}
    [found, block] = _tasks("timer_absent.yml")
    steps = block["block"]
    assert isinstance(steps, list)
    stop, delete, reload = steps
    assert stop["ansible.builtin.systemd_service"] == {
        "name": "{{ slurm_healthcheck_timer_unit }}.timer",
        "state": "stopped",
        "enabled": False,
    }
    assert set(delete["loop"]) == written | {"{{ slurm_healthcheck_textfile }}"}
    assert delete["ansible.builtin.file"] == {"path": "{{ item }}", "state": "absent"}
    assert reload["ansible.builtin.systemd_service"] == {"daemon_reload": True}
    # What is looked for is what is installed: the same folder and unit names.
    look = found["ansible.builtin.find"]
    assert isinstance(look, dict)
    assert {f"{look['paths']}/{name}" for name in look["patterns"]} == written


def test_the_preflight_probe_lists_the_timer_s_units_so_removal_needs_no_round_trip(
    tmp_path: Path,
) -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    unit = defaults["slurm_healthcheck_timer_unit"]
    assert unit.startswith(systemd.OWN_UNIT_PREFIX)  # what the probe lists, it removes
    [found, _block] = _tasks("timer_absent.yml")
    look = found["ansible.builtin.find"]
    assert isinstance(look, dict) and look["paths"] == systemd.UNIT_DIR
    assert systemd.OWN_UNITS in nodefacts.FACTS
    # The probe's own command, run on a folder shaped like /etc/systemd/system.
    for name in (f"{unit}.service", f"{unit}.timer", "other.service", "gpunode-x.timer"):
        (tmp_path / name).write_text("")
    argv = [tmp_path.as_posix() if a == systemd.UNIT_DIR else a for a in systemd.OWN_UNITS.argv]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    listed = systemd.parse_own_units(done.returncode, done.stdout)
    assert listed == ["gpunode-healthcheck.service", "gpunode-healthcheck.timer", "gpunode-x.timer"]
    assert systemd.parse_own_units(None, "") is None  # find missing: the role looks itself
    assert systemd.parse_own_units(1, "find: '/etc/systemd/system': No such file") is None
