"""The acceptance executors: SSH or a Slurm job per node.

Slurm's answers are real: captured from the lab's slurmctld (Debian 12's slurm-wlm 22.05.8,
tests/data/real/slurm, SOURCES.md); a scripted command runner plays them back with the job's
state changed where a case needs another one. The whole flow runs against the real cluster
in tests/integration/test_08_slurm.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance import executors
from toolkit.acceptance.executors.base import SshExecutor
from toolkit.acceptance.executors.slurm import (
    MAX_NICE,
    SlurmExecutor,
    SlurmSettings,
    drained_by_gpunode,
    exit_status,
    job_record,
    node_unavailable,
    parse_fields,
    sbatch_argv,
    settings_from,
)
from toolkit.acceptance.hooks import CommandResult
from toolkit.acceptance.verdict import NOT_TESTED, NOT_TESTED_CHECK, not_tested_verdict
from toolkit.errors import ConfigError, RemoteError
from toolkit.inventory import Host

REAL = REPO / "tests" / "data" / "real" / "slurm"
JOB = (REAL / "scontrol-show-job-completed.txt").read_text()
IDLE = (REAL / "scontrol-show-node-idle.txt").read_text()
DRAINED = (REAL / "scontrol-show-node-drained.txt").read_text()


def _host_named(name: str) -> Host:
    return Host(name, "10.0.0.2", 22, None, None, None, (), {})


HOST = _host_named("gpu-2")


def _job(state: str, reason: str = "None", exit_code: str = "0:0") -> str:
    text = re.sub(r"JobState=\S+", f"JobState={state}", JOB)
    text = re.sub(r"Reason=\S+", f"Reason={reason}", text)
    return re.sub(r" ExitCode=\S+", f" ExitCode={exit_code}", text)


class Slurm:
    """Answers sbatch, scontrol and scancel like the lab's slurmctld, from a script of job
    states (the last one repeats)."""

    def __init__(self, node: str = IDLE, states: Sequence[str] = ()) -> None:
        self.node = node
        self.states = list(states)
        self.commands: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.commands.append(list(argv))
        if argv[0] == "sbatch":
            return CommandResult(0, "2\n", "")
        if list(argv[1:3]) == ["show", "node"]:
            return CommandResult(0, self.node, "")
        if "job" in argv:
            state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
            return CommandResult(0, state, "")
        return CommandResult(0, "", "")


class Output:
    """The node's side: the job's output file (read over SSH in a real run)."""

    def __init__(self, text: str = "runner output\n") -> None:
        self.text = text
        self.read: list[str] = []

    def get_text(self, path: str) -> str:
        self.read.append(path)
        return self.text


def _executor(slurm: Slurm, start_timeout_s: float = 60) -> SlurmExecutor:
    settings = SlurmSettings("head", "gpunode", "gpunode_checks", start_timeout_s)
    return SlurmExecutor(settings, lambda: slurm, poll_s=0)


def _launch(executor: SlurmExecutor, node: Any = None, host: Host = HOST, gpus: int = 0) -> Any:
    return executor.launch(host, node or Output(), "python3 run", "/opt/gpunode/accept", 1800, gpus)


def test_real_job_record_has_the_lowest_priority() -> None:
    record = job_record(parse_fields(JOB))
    assert record["priority"] == 1 and record["nice"] == MAX_NICE
    assert record["jobstate"] == "COMPLETED" and record["exitcode"] == "0:0"
    assert record["executor"] == "slurm"


def test_real_node_states() -> None:
    assert node_unavailable(IDLE) is None
    why = node_unavailable(DRAINED)
    assert why == "Slurm node state IDLE+DRAIN (Reason=maintenance window)"


@pytest.mark.parametrize(
    ("state", "down"),
    [("DOWN+NOT_RESPONDING", True), ("IDLE*", True), ("MIXED", False), ("ALLOCATED", False)],
)
def test_other_node_states(state: str, down: bool) -> None:
    assert (node_unavailable(IDLE.replace("State=IDLE", f"State={state}")) is not None) is down


@pytest.mark.parametrize(("code", "status"), [("0:0", 0), ("1:0", 1), ("0:9", 137), ("x", 1)])
def test_exit_status(code: str, status: int) -> None:
    assert exit_status(code) == status


def test_sbatch_asks_for_the_node_whole_at_the_lowest_priority() -> None:
    settings = SlurmSettings(None, "gpunode", "gpunode_checks", 60)
    argv = sbatch_argv(settings, "gpu-2", "gpunode-accept-gpu-2", "python3 r.py", "/w", 1801)
    assert argv[0] == "sbatch" and argv[-1] == "--wrap=python3 r.py"
    assert {
        "--nodelist=gpu-2",
        "--exclusive",
        "--nice=2147483645",
        "--no-requeue",
        "--time=31",
        "--partition=gpunode",
        "--licenses=gpunode_checks:1",
        "--output=/w/slurm-%j.out",
    } <= set(argv)
    bare = sbatch_argv(SlurmSettings(), "gpu-2", "n", "c", "/w", 10)
    assert not [a for a in bare if a.startswith(("--partition", "--licenses", "--gres"))]


def test_sbatch_asks_for_the_nodes_gpus_as_gres() -> None:
    argv = sbatch_argv(SlurmSettings(), "gpu-2", "n", "python3 r.py", "/w", 10, gpus=8)
    assert argv.count("--gres=gpu:8") == 1 and argv[-1] == "--wrap=python3 r.py"
    assert argv.index("--gres=gpu:8") < argv.index("--wrap=python3 r.py")
    assert "--exclusive" in argv


def _sbatch(slurm: Slurm) -> list[str]:
    return next(c for c in slurm.commands if c[0] == "sbatch")


def test_the_job_asks_for_the_profiles_gpus_unless_the_inventory_says_not_to() -> None:
    slurm = Slurm(states=[_job("COMPLETED")])
    launch = _launch(_executor(slurm), gpus=8)
    assert "--gres=gpu:8" in _sbatch(slurm)
    # the real job record's TRES (what the accounting keeps), here without a GRES
    assert launch.job["tres"] == "cpu=2,node=1,billing=2"
    off = Host("gpu-2", "10.0.0.2", 22, None, None, None, (), {"gpunode_slurm_gres": False})
    slurm = Slurm(states=[_job("COMPLETED")])
    _launch(_executor(slurm), host=off, gpus=8)
    assert not [a for a in _sbatch(slurm) if a.startswith("--gres")]
    on = Host("gpu-2", "10.0.0.2", 22, None, None, None, (), {"gpunode_slurm_gres": True})
    slurm = Slurm(states=[_job("COMPLETED")])
    _launch(_executor(slurm), host=on, gpus=4)
    assert "--gres=gpu:4" in _sbatch(slurm)


class Refusing(Slurm):
    """sbatch refuses the job with the lab's slurmctld's words (Slurm 22.05.8)."""

    def __init__(self, said: str) -> None:
        super().__init__(states=[_job("COMPLETED")])
        self.said = said

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        if argv[0] == "sbatch":
            self.commands.append(list(argv))
            return CommandResult(1, "", self.said)
        return super().__call__(argv)


@pytest.mark.parametrize(
    "said",
    [
        # --gres=gpu:9 on a node of Gres=gpu:8; --gres on a cluster without GresTypes=gpu
        "sbatch: error: Batch job submission failed: Requested node configuration is not "
        "available\n",
        "sbatch: error: Invalid generic resource (gres) specification\n",
    ],
)
def test_a_gres_slurm_cannot_give_leaves_the_node_not_tested(said: str) -> None:
    with pytest.raises(executors.NotTested, match=r"refused the job's --gres=gpu:9 on gpu-2") as e:
        _launch(_executor(Refusing(said)), gpus=9)
    assert said.strip()[-40:] in e.value.reason and "gpunode_slurm_gres: false" in e.value.reason


def test_any_other_sbatch_refusal_is_an_error() -> None:
    with pytest.raises(RemoteError, match="Invalid account"):
        _launch(_executor(Refusing("sbatch: error: Invalid account or account/partition")), gpus=8)
    # without GRES asked for, Slurm's words are an error too, never a not-tested
    with pytest.raises(RemoteError, match="node configuration"):
        _launch(_executor(Refusing("Requested node configuration is not available")))


def test_a_completed_job_gives_the_runner_exit_status_and_output() -> None:
    slurm = Slurm(states=[_job("PENDING", "Licenses"), _job("RUNNING"), _job("FAILED", "", "3:0")])
    node = Output("Traceback: boom\n")
    launch = _launch(_executor(slurm), node)
    assert launch.returncode == 3 and launch.output == "Traceback: boom\n"
    assert node.read == ["/tmp/slurm-2.out"]  # the job's own StdOut
    assert launch.job["jobid"] == "2" and launch.job["priority"] == 1
    sbatch = next(c for c in slurm.commands if c[0] == "sbatch")
    assert "--nodelist=gpu-2" in sbatch and "--job-name=gpunode-accept-gpu-2" in sbatch


def test_a_drained_node_is_not_tested_and_nothing_is_submitted() -> None:
    slurm = Slurm(node=DRAINED, states=[_job("COMPLETED")])
    with pytest.raises(executors.NotTested, match=r"IDLE\+DRAIN .*maintenance window"):
        _launch(_executor(slurm))
    assert not [c for c in slurm.commands if c[0] == "sbatch"]


# The real drained capture with gpunode's reason, as the health check or a hook drains.
DRAINED_BY_GPUNODE = DRAINED.replace(
    "Reason=maintenance window", "Reason=gpunode: health.xid: 1 critical XID(s)"
)


class Ssh(Output):
    """The node's side over SSH: the command it ran, its result."""

    def __init__(self) -> None:
        super().__init__()
        self.ran: list[str] = []

    def run(self, command: str, timeout: float) -> Any:
        self.ran.append(command)
        return type("Res", (), {"returncode": 0, "stdout": "", "stderr": "ran over ssh"})()


def test_a_node_gpunode_drained_is_re_accepted_over_ssh_and_nothing_is_submitted() -> None:
    assert drained_by_gpunode(DRAINED_BY_GPUNODE) == "gpunode: health.xid: 1 critical XID(s)"
    slurm = Slurm(node=DRAINED_BY_GPUNODE, states=[_job("COMPLETED")])
    node = Ssh()
    launch = _launch(_executor(slurm), node)
    assert node.ran == ["cd /opt/gpunode/accept && python3 run"]
    assert launch.returncode == 0 and launch.output == "ran over ssh"
    assert launch.job == {
        "executor": "slurm",
        "nodelist": "gpu-2",
        "ran": "ssh",
        "drained": "gpunode: health.xid: 1 critical XID(s)",
    }
    assert [c[0] for c in slurm.commands] == ["scontrol"]  # shown, never submitted


@pytest.mark.parametrize(
    "state",
    ["MIXED+DRAIN", "ALLOCATED+DRAIN", "DOWN+DRAIN", "IDLE+DRAIN+NOT_RESPONDING"],
)
def test_a_node_gpunode_drained_that_runs_jobs_or_is_down_is_not_tested(state: str) -> None:
    text = DRAINED_BY_GPUNODE.replace("State=IDLE+DRAIN", f"State={state}")
    assert drained_by_gpunode(text) is None
    with pytest.raises(executors.NotTested, match=r"gpunode: health\.xid"):
        _launch(_executor(Slurm(node=text, states=[_job("COMPLETED")])), Ssh())


def test_a_job_that_never_starts_is_cancelled_and_not_tested() -> None:
    slurm = Slurm(states=[_job("PENDING", "ReqNodeNotAvail,_UnavailableNodes:gpu-2")])
    with pytest.raises(executors.NotTested, match=r"did not start within 0s.*ReqNodeNotAvail") as e:
        _launch(_executor(slurm, start_timeout_s=1e-9))
    assert ["scancel", "2"] in slurm.commands
    assert e.value.job is not None and e.value.job["jobstate"] == "PENDING"


@pytest.mark.parametrize("state", ["PREEMPTED", "CANCELLED", "NODE_FAIL", "BOOT_FAIL"])
def test_a_job_that_ends_without_running_through_is_not_tested(state: str) -> None:
    slurm = Slurm(states=[_job("RUNNING"), _job(state, "Preemption")])
    with pytest.raises(executors.NotTested, match=f"job 2 ended {state}"):
        _launch(_executor(slurm))


def test_a_job_past_its_time_limit_is_a_failed_runner() -> None:
    launch = _launch(_executor(Slurm(states=[_job("TIMEOUT")])))
    assert launch.returncode == 124 and "time limit" in launch.output


def test_not_tested_is_its_own_verdict() -> None:
    verdict = not_tested_verdict("gpu-2", "Slurm node state IDLE+DRAIN")
    assert verdict.verdict == NOT_TESTED and not verdict.ready
    assert verdict.reasons() == [f"{NOT_TESTED_CHECK}: Slurm node state IDLE+DRAIN"]


def test_select_follows_the_option_then_the_inventory() -> None:
    hosts = {"head": _host_named("head")}
    assert isinstance(executors.select(None, {}, hosts), SshExecutor)
    chosen = executors.select(None, {"gpunode_accept_executor": "slurm"}, hosts)
    assert chosen.name == "slurm"
    assert executors.select("ssh", {"gpunode_accept_executor": "slurm"}, hosts).name == "ssh"


@pytest.mark.parametrize(
    ("asked", "variables", "message"),
    [
        ("lsf", {}, "--executor: unknown executor 'lsf'"),
        (None, {"gpunode_accept_executor": "pbs"}, "gpunode_accept_executor: unknown executor"),
        ("slurm", {"gpunode_slurm_submit_host": "nowhere"}, "not a host of the inventory"),
        ("slurm", {"gpunode_slurm_partition": "a b"}, "gpunode_slurm_partition must be a name"),
        ("slurm", {"gpunode_slurm_start_timeout_s": 0}, "gpunode_slurm_start_timeout_s must"),
        ("slurm", {"gpunode_slurm_start_timeout_s": True}, "gpunode_slurm_start_timeout_s must"),
    ],
)
def test_bad_settings_name_the_key(
    asked: str | None, variables: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        executors.select(asked, variables, {})


def test_settings_from_the_inventory() -> None:
    hosts = {"head": _host_named("head")}
    settings = settings_from(
        {
            "gpunode_slurm_submit_host": "head",
            "gpunode_slurm_partition": "gpunode",
            "gpunode_slurm_license": "gpunode_checks",
            "gpunode_slurm_start_timeout_s": 30,
        },
        hosts,
    )
    assert settings == SlurmSettings("head", "gpunode", "gpunode_checks", 30.0)
