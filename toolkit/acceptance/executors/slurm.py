"""Acceptance as Slurm jobs: each node's single-node run is one batch job on that node.

What the sites that run checks through their scheduler do (issue 25: Nebius soperator's
active checks as Slurm jobs bounded by a ``gpu_checks`` license; CoreWeave's checks as
preemptible lowest-priority jobs): the job asks for exactly its node (``--nodelist``), the
whole of it (``--exclusive``) with every GPU its hardware profile says it has as generic
resources (``--gres=gpu:<count>``: where the site constrains devices, ``ConstrainDevices=yes``
in cgroup.conf, a job sees only the GPUs it was given, and Slurm accounts them with the job),
at the lowest priority a job can have (``--nice`` at its maximum), never requeued
(``--no-requeue``: a preempted check is reported, not rerun behind the run's back), with one
of the inventory's license when it names one, so the cluster bounds how many run at once. A
site whose Slurm does not schedule GPUs as GRES sets ``gpunode_slurm_gres: false`` (a host's
or a group's variable). Slurm refusing the GRES request (the node's slurm.conf offers fewer
GPUs, or none) leaves the node *not tested* with Slurm's words. Commands run on the submit
host over SSH (``gpunode_slurm_submit_host``, an inventory host: a login node) or on this
machine when there is none.

Every way a job can fail to test its node is a per-node outcome, never a hang:

- the node is down, drained or failing before the run: not submitted, *not tested*; except a
  node gpunode drained itself (its drain reason starts with ``gpunode:`` or
  ``gpunode[<class>]:``, the health check's or a hook's) that runs nothing (``IDLE+DRAIN``):
  Slurm starts no job on a drained node, and this one is drained precisely until gpunode
  proves it again, so its re-acceptance runs over SSH on the node (its job record says so)
  and a ready verdict lets the hook resume it;
- the job is still pending after ``gpunode_slurm_start_timeout_s``: cancelled, *not tested*
  with Slurm's pending reason (ReqNodeNotAvail, Licenses, Resources, Priority...);
- preempted, cancelled by someone else, node failure, boot failure: *not tested*;
- it ran and exited: the runner's exit status, exactly as over SSH;
- it ran past its time limit: a failed runner (exit 124), as an SSH timeout is.

Sources (Slurm 22.05, Debian 12's slurm-wlm): sbatch(1) ``--nice``: "The adjustment range is
+/- 2147483645"; ``--parsable`` prints ``jobid[;cluster]``; squeue(1)/scontrol(1) job states
(PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT, PREEMPTED, CANCELLED, NODE_FAIL, BOOT_FAIL,
DEADLINE, OUT_OF_MEMORY) and ``ExitCode=<exit>:<signal>``; sbatch(1) ``--gres``, a list of
``name[[:type]:count]``; cgroup.conf(5) ``ConstrainDevices``: 'If configured to "yes" then
constrain the job's allowed devices based on GRES allocated resources'
(https://slurm.schedmd.com/cgroup.conf.html). sbatch's refusals of a GRES it cannot give, as
the lab's slurmctld (22.05.8) answered them: "Batch job submission failed: Requested node
configuration is not available" (``--gres=gpu:9`` on a node of ``Gres=gpu:8``) and "Invalid
generic resource (gres) specification" (a GRES name not in ``GresTypes``).
"""

from __future__ import annotations

import math
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.acceptance.executors.base import SLURM, Launch, NotTested
from toolkit.acceptance.hooks import (
    CommandResult,
    CommandRunner,
    is_gpunode_reason,
    local_runner,
    parse_scontrol_node,
)
from toolkit.errors import ConfigError, RemoteError
from toolkit.inventory import Host
from toolkit.names import SLURM_NAME_RE
from toolkit.remote import Node

MAX_NICE = 2147483645  # sbatch(1): the adjustment range of --nice is +/- 2147483645
JOB_PREFIX = "gpunode-accept"
SUBMIT_HOST_VAR = "gpunode_slurm_submit_host"
PARTITION_VAR = "gpunode_slurm_partition"
LICENSE_VAR = "gpunode_slurm_license"
START_TIMEOUT_VAR = "gpunode_slurm_start_timeout_s"
# Whether the job asks for the node's GPUs as GRES (a host's or a group's; default yes).
GRES_VAR = "gpunode_slurm_gres"
GRES_NAME = "gpu"
# sbatch's words when the cluster cannot give the GRES asked for (module docstring).
GRES_REFUSALS = ("Requested node configuration is not available", "Invalid generic resource")
DEFAULT_START_TIMEOUT_S = 600.0
POLL_S = 2.0
# Slurm node state flags under which a node takes no job (scontrol's State=A+B+...).
UNAVAILABLE = ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "FUTURE", "MAINT", "POWERED_DOWN")
PENDING = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED")
RUNNING = ("RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING")
FINISHED = ("COMPLETED", "FAILED", "OUT_OF_MEMORY")


@dataclass(frozen=True)
class SlurmSettings:
    """The inventory's Slurm settings (group ``all``)."""

    submit_host: str | None = None
    partition: str | None = None
    license: str | None = None
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S


def settings_from(variables: Mapping[str, Any], hosts: Mapping[str, Host]) -> SlurmSettings:
    """Read and check the settings.

    Raises:
        ConfigError: A setting breaks its rule (named with the key).
    """
    values: dict[str, str | None] = {}
    for key in (SUBMIT_HOST_VAR, PARTITION_VAR, LICENSE_VAR):
        value = variables.get(key)
        if value is not None and (not isinstance(value, str) or not SLURM_NAME_RE.match(value)):
            raise ConfigError(
                f"{key} must be a name of letters, digits, '.', '_' and '-' (got {value!r})"
            )
        values[key] = value
    submit = values[SUBMIT_HOST_VAR]
    if submit is not None and submit not in hosts:
        raise ConfigError(f"{SUBMIT_HOST_VAR}: {submit!r} is not a host of the inventory")
    timeout = variables.get(START_TIMEOUT_VAR, DEFAULT_START_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise ConfigError(f"{START_TIMEOUT_VAR} must be a positive number of seconds")
    return SlurmSettings(submit, values[PARTITION_VAR], values[LICENSE_VAR], float(timeout))


def parse_fields(text: str) -> dict[str, str]:
    """``Key=Value`` pairs of a one-line ``scontrol show -o`` record (values without spaces;
    the first occurrence of a key wins)."""
    fields: dict[str, str] = {}
    for key, value in re.findall(r"(?:^|\s)(\w+)=(\S*)", text):
        fields.setdefault(key, value)
    return fields


def node_unavailable(scontrol_node: str) -> str | None:
    """Why a node takes no job (its state and reason, from ``scontrol show node``), or None
    when it can run one.

    Raises:
        AcceptanceError: The output has no ``State=`` field.
    """
    node = parse_scontrol_node(scontrol_node)
    flags = node.state.upper().replace("*", "+NOT_RESPONDING").split("+")
    if not any(flag.startswith(UNAVAILABLE) for flag in flags):
        return None
    return f"Slurm node state {node.state}" + (f" (Reason={node.reason})" if node.reason else "")


def drained_by_gpunode(scontrol_node: str) -> str | None:
    """gpunode's drain reason when the node is drained by gpunode and runs nothing (state
    ``IDLE+DRAIN``), else None.

    Raises:
        AcceptanceError: The output has no ``State=`` field.
    """
    node = parse_scontrol_node(scontrol_node)
    flags = set(node.state.upper().split("+"))
    ours = is_gpunode_reason(node.reason)
    return node.reason if ours and flags == {"IDLE", "DRAIN"} else None


def exit_status(exit_code: str) -> int:
    """The shell's status from Slurm's ``ExitCode=<exit>:<signal>``."""
    code, _, signal = exit_code.partition(":")
    if signal.isdigit() and int(signal):
        return 128 + int(signal)
    return int(code) if code.isdigit() else 1


def job_record(fields: Mapping[str, str]) -> dict[str, Any]:
    """The job's facts kept in run.json."""
    record: dict[str, Any] = {"executor": SLURM}
    # TRES: what the job was given (``cpu=..,node=1,gres/gpu=8``), as the accounting keeps it.
    keys = ("JobId", "JobName", "Partition", "NodeList", "JobState", "Reason", "ExitCode", "TRES")
    for key in keys:
        if key in fields:
            record[key.lower()] = fields[key]
    for key in ("Priority", "Nice"):
        if fields.get(key, "").lstrip("-").isdigit():
            record[key.lower()] = int(fields[key])
    return record


def gres_wanted(host_vars: Mapping[str, Any]) -> bool:
    """Whether the host's job asks for its GPUs as GRES (``gpunode_slurm_gres``, default yes;
    the inventory reader has checked it is a boolean)."""
    return host_vars.get(GRES_VAR) is not False


def sbatch_argv(
    settings: SlurmSettings,
    slurm_node: str,
    job_name: str,
    command: str,
    workdir: str,
    timeout_s: float,
    gpus: int = 0,
) -> list[str]:
    """The ``sbatch`` command line of one node's acceptance job; ``gpus`` GPUs asked for as
    GRES (none when 0). Pure."""
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_name}",
        f"--nodelist={slurm_node}",
        "--nodes=1",
        "--exclusive",
        *([f"--gres={GRES_NAME}:{gpus}"] if gpus > 0 else []),
        f"--nice={MAX_NICE}",
        "--no-requeue",
        f"--time={max(1, math.ceil(timeout_s / 60))}",
        f"--chdir={workdir}",
        f"--output={workdir}/slurm-%j.out",
    ]
    if settings.partition:
        argv.append(f"--partition={settings.partition}")
    if settings.license:
        argv.append(f"--licenses={settings.license}:1")
    return [*argv, f"--wrap={command}"]


class SlurmExecutor:
    """Runs each node's runner as a Slurm batch job on that node (module docstring)."""

    name = SLURM

    def __init__(
        self,
        settings: SlurmSettings,
        submit: Callable[[], CommandRunner],
        *,
        poll_s: float = POLL_S,
    ) -> None:
        self.settings = settings
        self._submit_factory = submit
        self._runner: CommandRunner | None = None
        self._lock = threading.Lock()
        self.poll_s = poll_s

    def _run(self, argv: list[str]) -> CommandResult:
        with self._lock:
            if self._runner is None:
                self._runner = self._submit_factory()
            return self._runner(argv)

    def _checked(self, argv: list[str]) -> str:
        result = self._run(argv)
        if result.returncode != 0:
            raise RemoteError(
                f"Slurm: `{shlex.join(argv[:3])}` exited {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()[-400:]}"
            )
        return result.stdout

    def launch(
        self, host: Host, node: Node, command: str, workdir: str, timeout_s: float, gpus: int = 0
    ) -> Launch:
        """Submit the runner as a job on the host's Slurm node, with its ``gpus`` GPUs as GRES
        unless the inventory says not to, and wait for it."""
        slurm_node = host.scheduler_name  # checked when the inventory was loaded
        shown = self._checked(["scontrol", "show", "node", slurm_node])
        ours = drained_by_gpunode(shown)
        if ours is not None:
            res = node.run(f"cd {workdir} && {command}", timeout=timeout_s)
            record = {"executor": SLURM, "nodelist": slurm_node, "ran": "ssh", "drained": ours}
            return Launch(res.returncode, res.stderr or res.stdout, record)
        why = node_unavailable(shown)
        if why:
            raise NotTested(f"{why} before the run: not submitted")
        job_name = f"{JOB_PREFIX}-{host.name}"
        gres = gpus if gres_wanted(host.vars) else 0
        argv = sbatch_argv(self.settings, slurm_node, job_name, command, workdir, timeout_s, gres)
        job_id = self._submit(argv, slurm_node, gres).strip().split(";")[0]
        if not job_id.isdigit():
            raise RemoteError(f"Slurm: sbatch printed no job id: {job_id[:200]!r}")
        fields = self._wait(job_id, timeout_s)
        record = job_record(fields)
        state = fields.get("JobState", "")
        if state in FINISHED:
            output = _read_output(node, fields.get("StdOut") or f"{workdir}/slurm-{job_id}.out")
            return Launch(exit_status(fields.get("ExitCode", "1:0")), output, record)
        if state == "TIMEOUT":
            return Launch(124, f"Slurm job {job_id} ran past its time limit", record)
        reason = fields.get("Reason") or "no reason given"
        raise NotTested(f"Slurm job {job_id} ended {state} (Reason={reason})", record)

    def _submit(self, argv: list[str], slurm_node: str, gpus: int) -> str:
        """sbatch's answer; a GRES request the cluster refuses is no verdict on the node."""
        result = self._run(argv)
        said = (result.stderr or result.stdout).strip()
        if result.returncode != 0 and gpus and any(r in said for r in GRES_REFUSALS):
            raise NotTested(
                f"Slurm refused the job's --gres={GRES_NAME}:{gpus} on {slurm_node} "
                f"({said[-300:]}): the node's Slurm GRES (slurm.conf Gres=, gres.conf) does not "
                f"offer the {gpus} GPUs its hardware profile has; fix the node's GRES, or set "
                f"{GRES_VAR}: false where the site does not schedule GPUs as GRES"
            )
        if result.returncode != 0:
            raise RemoteError(
                f"Slurm: `{shlex.join(argv[:3])}` exited {result.returncode}: {said[-400:]}"
            )
        return result.stdout

    def _wait(self, job_id: str, timeout_s: float) -> dict[str, str]:
        """Poll the job to its end; cancel it when it does not start or outlives its limit."""
        start_deadline = time.monotonic() + self.settings.start_timeout_s
        run_deadline: float | None = None
        while True:
            fields = self._job(job_id)
            state = fields.get("JobState", "")
            now = time.monotonic()
            if state in PENDING:
                if now > start_deadline:
                    self._run(["scancel", job_id])
                    reason = fields.get("Reason") or "none given"
                    raise NotTested(
                        f"Slurm job {job_id} did not start within "
                        f"{self.settings.start_timeout_s:.0f}s (pending, Reason={reason}); "
                        "cancelled",
                        job_record(fields),
                    )
            elif state in RUNNING:
                run_deadline = run_deadline or now + timeout_s + 120
                if now > run_deadline:
                    self._run(["scancel", job_id])
                    return {**fields, "JobState": "TIMEOUT"}
            else:
                return fields
            time.sleep(self.poll_s)

    def _job(self, job_id: str) -> dict[str, str]:
        return parse_fields(self._checked(["scontrol", "--oneliner", "show", "job", job_id]))

    def close(self) -> None:
        """Drop the submit host's connection."""
        with self._lock:
            closer = getattr(self._runner, "close", None)
            if callable(closer):
                closer()
            self._runner = None


def _read_output(node: Node, path: str) -> str:
    try:
        return node.get_text(path)
    except RemoteError as err:
        return f"(the job's output {path} could not be read: {err.message})"


class NodeRunner:
    """A :class:`CommandRunner` over one SSH connection (the submit host), as root."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        """Run argv on the submit host as root."""
        res = self.node.run(shlex.join(argv), timeout=120)
        return CommandResult(res.returncode, res.stdout, res.stderr)

    def close(self) -> None:
        """Close the connection."""
        self.node.close()


def local_submit() -> CommandRunner:
    """Slurm's commands on this machine (a control machine that is a Slurm client)."""
    return local_runner
