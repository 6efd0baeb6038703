"""A real Slurm cluster in the lab (``gpunode lab up --slurm``), from Debian's packages.

Node 1 is the head node: it runs ``slurmctld`` beside its own ``slurmd``, as a small cluster's
first node often does, and the accounting a site runs beside it: ``slurmdbd`` over a MariaDB
database, so that ``sacct`` answers for finished jobs. Every node runs ``slurmd`` and MUNGE
with one key per lab. The node image carries the packages disabled, keyless and without a
database user (toolkit/lab/image.py); this module writes the key, ``slurm.conf`` and (on the
head node) ``slurmdbd.conf`` into the nodes once they have booted and starts the daemons in
the order each needs the one before: MariaDB, slurmdbd (the cluster registered in it with
``sacctmgr``), slurmctld, slurmd. The configuration names the nodes by their hostnames with
the hardware ``slurmd -C`` reports on the head node (the nodes share the host's CPUs and
memory), one partition with every node, and a license that bounds how many acceptance jobs
run at once (as Nebius soperator does with its ``gpu_checks`` license). The emulated GPUs are
generic resources over the device files the lab makes in every node (``toolkit.lab.devices``):
``GresTypes=gpu``, ``Gres=gpu:<N>`` on each node and a ``gres.conf`` naming
``/dev/nvidia[0-<N-1>]``, so that a job that asks for GPUs (``--gres=gpu:N``) is scheduled on
them and the accounting keeps what it was given (``AccountingStorageTRES=gres/gpu``: sacct's
``AllocTRES`` shows ``gres/gpu=<N>``). Nothing runs on the control machine: ``gpunode accept
--executor slurm`` submits over SSH on the head node (the inventory's
``gpunode_slurm_submit_host``), and ``lab down`` removes the containers and so the whole
cluster.

The database password is made per lab and lives only in the head node's ``slurmdbd.conf``
(mode 0600, owned by the Slurm user, as slurmdbd.conf(5) asks) and, for the moment the grant
takes, in a root-only file there: it never travels on a command line and is never printed.

Sources: slurm.conf(5), slurmdbd.conf(5), slurmd(8) and sacctmgr(1) of Slurm 22.05 (Debian
12's slurm-wlm 22.05.8): ``slurmd -C`` prints the node's ``NodeName=... CPUs=...
RealMemory=...`` line; ``Licenses=name:count``; ``ProctrackType=proctrack/linuxproc`` needs no
cgroup plugin, which a container cannot own; ``DbdHost`` is the name ``hostname -s`` gives on
the slurmdbd machine; ``StoragePass`` may not hold ``#``. GRES: slurm.conf(5) ``GresTypes``
and the node's ``Gres=<name>:<count>``; gres.conf(5) ``NodeName=`` (one file for every node),
``Name=gpu`` and ``File=`` (a hostlist expression of device files, one GRES each); Slurm's
TRES guide (slurm.schedmd.com/tres.html): a GRES is accounted only when
``AccountingStorageTRES`` names it (the default TRES are billing, cpu, energy, mem, node,
fs/disk, pages and vmem); slurmd exits when a ``File=`` does not exist after 20 s
(SchedMD/slurm src/common/gres.c, ``_my_stat``).
"""

from __future__ import annotations

import io
import re
import secrets
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from docker.models.containers import Container

from toolkit.check.healthcheck import PROGRAM_PATH
from toolkit.errors import LabError
from toolkit.lab import nodes
from toolkit.lab.devices import gpu_device_paths
from toolkit.lab.state import NodeState

CONF_PATH = "/etc/slurm/slurm.conf"
GRES_CONF_PATH = "/etc/slurm/gres.conf"  # beside slurm.conf, where slurmd reads it (gres.conf(5))
DBD_CONF_PATH = "/etc/slurm/slurmdbd.conf"
KEY_PATH = "/etc/munge/munge.key"
# The accounting database and its user (slurmdbd.conf(5)'s StorageLoc default and the Slurm
# user), and the root-only file that carries their grant for the moment MariaDB reads it.
DATABASE = "slurm_acct_db"
GRANT_PATH = "/root/.gpunode-lab-slurmdbd.sql"
PARTITION = "gpunode"
LICENSE = "gpunode_checks"
LICENSE_COUNT = 2  # acceptance jobs at once in a lab (of its 3 nodes in the tests: one waits)
SLURM_USER = "slurm"
# slurmd runs gpunode's health check (toolkit/check/healthcheck.py, installed by the
# slurm_healthcheck role when provision runs) this often, in seconds: short, so that a test
# sees a fault drained within one interval; a site's usual value is minutes.
HEALTHCHECK_INTERVAL_S = 15
# The hardware fields of `slurmd -C` that slurm.conf's NodeName line takes.
HARDWARE_FIELDS = (
    "CPUs",
    "Boards",
    "SocketsPerBoard",
    "CoresPerSocket",
    "ThreadsPerCore",
    "RealMemory",
)


@dataclass(frozen=True)
class SlurmLab:
    """What the inventory of a Slurm lab says about its cluster."""

    head: str  # the node that runs slurmctld and where jobs are submitted
    partition: str = PARTITION
    license: str = LICENSE


def parse_hardware(text: str) -> dict[str, str]:
    """The ``NodeName`` hardware fields of ``slurmd -C`` output.

    Raises:
        LabError: No ``CPUs=`` field (not slurmd -C output).
    """
    fields = dict(re.findall(r"(\w+)=(\S+)", text))
    if "CPUs" not in fields:
        raise LabError(f"`slurmd -C` printed no CPUs= field: {text.strip()[:200]!r}")
    return {key: fields[key] for key in HARDWARE_FIELDS if key in fields}


def cluster_name(lab_name: str) -> str:
    """The Slurm cluster's name for a lab: slurm.conf's ClusterName, slurmdbd's record. Pure."""
    return re.sub(r"[^a-z0-9]", "", lab_name.lower())[:32] or "gpunode"


def render_dbd_conf(head: NodeState, password: str) -> str:
    """slurmdbd.conf for the head node: MUNGE between the daemons, MariaDB on the node. Pure.

    Raises:
        LabError: The password holds a character slurmdbd.conf(5) does not allow.
    """
    if not password or "#" in password or any(c.isspace() for c in password):
        raise LabError("slurmdbd: the database password must be non-empty, without '#' or space")
    lines = [
        "# Written by `gpunode lab up --slurm`: readable by the Slurm user only (password).",
        "AuthType=auth/munge",
        f"DbdHost={head.name}",
        f"DbdAddr={head.ip}",
        f"SlurmUser={SLURM_USER}",
        "PidFile=/run/slurmdbd.pid",
        "LogFile=/var/log/slurm/slurmdbd.log",
        "StorageType=accounting_storage/mysql",
        "StorageHost=localhost",
        f"StorageLoc={DATABASE}",
        f"StorageUser={SLURM_USER}",
        f"StoragePass={password}",
    ]
    return "\n".join(lines) + "\n"


def grant_sql(password: str) -> str:
    """The database, its user with ``password`` and the user's rights; repeatable. Pure."""
    user = f"'{SLURM_USER}'@'localhost'"
    return (
        f"CREATE DATABASE IF NOT EXISTS {DATABASE};\n"
        f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{password}';\n"
        f"ALTER USER {user} IDENTIFIED BY '{password}';\n"
        f"GRANT ALL PRIVILEGES ON {DATABASE}.* TO {user};\n"
    )


def stored_password(dbd_conf: str) -> str | None:
    """The ``StoragePass`` of a slurmdbd.conf, or None. Pure."""
    found = re.search(r"^StoragePass=(\S+)$", dbd_conf, re.MULTILINE)
    return found.group(1) if found else None


def render_conf(
    cluster: str, node_states: Sequence[NodeState], hardware: dict[str, str], gpus: int = 0
) -> str:
    """slurm.conf for the lab: node 1 is the controller, every node computes, each with its
    ``gpus`` emulated GPUs as GRES (none when 0). Pure."""
    ordered = sorted(node_states, key=lambda n: n.index)
    head = ordered[0]
    spec = " ".join(f"{k}={v}" for k, v in hardware.items())
    if gpus:
        spec += f" Gres=gpu:{gpus}"
    lines = [
        f"# Written by `gpunode lab up --slurm` for lab {cluster}.",
        f"ClusterName={cluster_name(cluster)}",
        f"SlurmctldHost={head.name}({head.ip})",
        f"SlurmUser={SLURM_USER}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        "StateSaveLocation=/var/lib/slurm/slurmctld",
        "SlurmdSpoolDir=/var/lib/slurm/slurmd",
        "SlurmctldPidFile=/run/slurmctld.pid",
        "SlurmdPidFile=/run/slurmd.pid",
        "SlurmctldLogFile=/var/log/slurm/slurmctld.log",
        "SlurmdLogFile=/var/log/slurm/slurmd.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        # Every job's record in slurmdbd on the head node (sacct), as a site keeps them.
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={head.ip}",
        # The GPUs are generic resources (gres.conf names their device files), accounted
        # with each job: sacct's AllocTRES carries gres/gpu=<N> only when this names it.
        *(["GresTypes=gpu", "AccountingStorageTRES=gres/gpu"] if gpus else []),
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        # Priorities from factors, so that a job's nice lowers it: an ordinary job gets the
        # partition's 1000, an acceptance job at the maximum nice ends at 1, the lowest.
        # (priority/basic ignores nice: its priorities only follow the submit order.)
        "PriorityType=priority/multifactor",
        "PriorityWeightPartition=1000",
        "PriorityWeightAge=100",
        # A node that was down comes back by itself once its slurmd registers again; a node
        # somebody drained stays drained.
        "ReturnToService=2",
        "SlurmdTimeout=60",
        "MinJobAge=600",
        f"Licenses={LICENSE}:{LICENSE_COUNT}",
        # gpunode's passive checks as slurmd's health check, on nodes in any state
        # (slurm.conf(5): HealthCheckProgram runs as root every HealthCheckInterval seconds;
        # until provision installs it there is nothing to run and slurmd logs that).
        f"HealthCheckProgram={PROGRAM_PATH}",
        f"HealthCheckInterval={HEALTHCHECK_INTERVAL_S}",
        "HealthCheckNodeState=ANY",
        *(f"NodeName={n.name} NodeAddr={n.ip} {spec} State=UNKNOWN" for n in ordered),
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


def render_gres_conf(node_states: Sequence[NodeState], gpus: int) -> str:
    """gres.conf for every node: each node's ``gpus`` GPUs over their device files (minors
    0..gpus-1, as the driver numbers them). Pure.

    Raises:
        ValueError: ``gpus`` is below 1.
    """
    files = gpu_device_paths(gpus)
    lines = [
        "# Written by `gpunode lab up --slurm`: the emulated GPUs and their device files.",
        *(
            f"NodeName={n.name} Name=gpu File={files}"
            for n in sorted(node_states, key=lambda n: n.index)
        ),
    ]
    return "\n".join(lines) + "\n"


def inventory_vars(node_states: Sequence[NodeState]) -> dict[str, object]:
    """The inventory's word on the lab's Slurm: acceptance runs through it, submitted on the
    head node, in the lab's partition, one license per job; provision installs gpunode's
    health check for slurmd."""
    head = min(node_states, key=lambda n: n.index)
    return {
        "gpunode_accept_executor": "slurm",
        "gpunode_slurm_healthcheck": True,
        "gpunode_slurm_submit_host": head.name,
        "gpunode_slurm_partition": PARTITION,
        "gpunode_slurm_license": LICENSE,
    }


def start(
    lab_name: str,
    containers: Sequence[tuple[Container, NodeState]],
    gpus: int = 0,
    timeout: float = 90,
) -> None:
    """Write MUNGE's key, slurm.conf and gres.conf (``gpus`` GPUs a node) into every node and
    (re)start the daemons, then wait until slurmctld sees every node idle (or drained, when
    somebody drained it).

    Converges: a node whose key and configuration are already in place keeps its daemons.

    Raises:
        LabError: A daemon did not start or a node did not register in ``timeout``.
    """
    ordered = sorted(containers, key=lambda pair: pair[1].index)
    head_container, head_node = ordered[0]
    _code, probe = nodes.exec_in(head_container, ["slurmd", "-C"])
    states = [n for _c, n in ordered]
    conf = render_conf(lab_name, states, parse_hardware(probe), gpus)
    gres = render_gres_conf(states, gpus) if gpus else None
    key = _read_file(head_container, KEY_PATH) or secrets.token_bytes(1024)
    for position, (container, _node) in enumerate(ordered):
        changed = _install(container, conf, gres, key)
        verb = "restart" if changed else "start"
        nodes.exec_in(container, ["systemctl", "enable", "--quiet", "munge", "slurmd"])
        nodes.exec_in(container, ["systemctl", verb, "munge"])
        if position == 0:
            start_accounting(head_container, head_node, cluster_name(lab_name), timeout)
            nodes.exec_in(container, ["systemctl", "enable", "--quiet", "slurmctld"])
            nodes.exec_in(container, ["systemctl", verb, "slurmctld"])
        nodes.exec_in(container, ["systemctl", verb, "slurmd"])
    try:
        wait_registered(head_container, [n.name for _c, n in ordered], timeout)
    except LabError as err:
        raise LabError(f"{err.message}; {_slurmd_ends(ordered)}") from err


def _slurmd_ends(containers: Sequence[tuple[Container, NodeState]]) -> str:
    """The last lines of each node's slurmd log (a missing GRES device file ends slurmd)."""
    said = []
    for container, node in containers:
        _code, log = nodes.exec_in(
            container, ["tail", "-n", "2", "/var/log/slurm/slurmd.log"], check=False
        )
        said.append(f"{node.name}: {log.strip()[-300:]!r}")
    return "slurmd.log: " + "; ".join(said)


def start_accounting(head: Container, node: NodeState, cluster: str, timeout: float) -> None:
    """MariaDB and slurmdbd on the head node, the cluster registered; before slurmctld starts.

    The first time (no slurmdbd.conf yet) a new password is made and granted to the database
    user; later calls keep the lab's password and a running slurmdbd.

    Raises:
        LabError: MariaDB or slurmdbd did not start, or slurmdbd did not answer in ``timeout``.
    """
    nodes.exec_in(head, ["systemctl", "enable", "--quiet", "mariadb", "slurmdbd"])
    nodes.exec_in(head, ["systemctl", "start", "mariadb"])
    current = (_read_file(head, DBD_CONF_PATH) or b"").decode()
    password = stored_password(current) or secrets.token_hex(24)
    dbd_conf = render_dbd_conf(node, password)
    changed = current != dbd_conf
    if changed:
        # The grant first: a slurmdbd.conf in place always names a password MariaDB knows.
        nodes.put_files(head, {GRANT_PATH: nodes.NodeFile(grant_sql(password).encode(), 0o600)})
        code, out = nodes.exec_in(
            head, ["sh", "-c", f"mariadb --batch < {GRANT_PATH}; rc=$?; rm -f {GRANT_PATH}; "
                   "exit $rc"], check=False,
        )  # fmt: skip
        if code != 0:
            said = out.strip()[-400:].replace(password, "<password>")
            raise LabError(f"slurmdbd: granting {DATABASE} to {SLURM_USER} failed: {said}")
        nodes.put_files(head, {DBD_CONF_PATH: nodes.NodeFile(dbd_conf.encode(), 0o600)})
        nodes.exec_in(head, ["chown", f"{SLURM_USER}:{SLURM_USER}", DBD_CONF_PATH])
    nodes.exec_in(head, ["systemctl", "restart" if changed else "start", "slurmdbd"])
    clusters = wait_accounting(head, timeout)
    if cluster not in clusters:
        nodes.exec_in(head, ["sacctmgr", "--immediate", "add", "cluster", cluster])


def wait_accounting(head: Container, timeout: float) -> list[str]:
    """Wait until slurmdbd answers ``sacctmgr``; the clusters it knows.

    Raises:
        LabError: No answer after ``timeout``, with the daemons' states and slurmdbd's log.
    """
    deadline = time.monotonic() + timeout
    argv = ["sacctmgr", "--immediate", "--noheader", "--parsable2", "list", "cluster",
            "format=Cluster"]  # fmt: skip
    while True:
        code, out = nodes.exec_in(head, argv, check=False)
        if code == 0:
            return out.split()
        if time.monotonic() >= deadline:
            break
        time.sleep(1)
    _code, states = nodes.exec_in(head, ["systemctl", "is-active", "mariadb", "slurmdbd"],
                                  check=False)  # fmt: skip
    _code, log = nodes.exec_in(head, ["tail", "-n", "5", "/var/log/slurm/slurmdbd.log"],
                               check=False)  # fmt: skip
    raise LabError(
        f"Slurm: slurmdbd on {head.name} did not answer sacctmgr after {timeout:.0f}s "
        f"(mariadb, slurmdbd: {', '.join(states.split())}); sacctmgr: {out.strip()[-200:]!r}; "
        f"slurmdbd.log: {log.strip()[-600:]!r}"
    )


def _read_file(container: Container, path: str) -> bytes | None:
    code, _out = nodes.exec_in(container, ["test", "-s", path], check=False)
    if code != 0:
        return None
    raw = container.get_archive(path)[0]
    with tarfile.open(fileobj=io.BytesIO(b"".join(raw))) as tar:
        member = tar.extractfile(tar.getmembers()[0])
        return member.read() if member else None


def _install(container: Container, conf: str, gres: str | None, key: bytes) -> bool:
    """Place the key and the configuration (gres.conf when the nodes have GPUs); True when any
    changed."""
    code, current = nodes.exec_in(container, ["cat", CONF_PATH], check=False)
    same_conf = code == 0 and current == conf
    same_gres = (_read_file(container, GRES_CONF_PATH) or b"").decode() == (gres or "")
    same_key = _read_file(container, KEY_PATH) == key
    if same_conf and same_gres and same_key:
        return False
    files = {CONF_PATH: nodes.NodeFile(conf.encode()), KEY_PATH: nodes.NodeFile(key, 0o400)}
    if gres is not None:
        files[GRES_CONF_PATH] = nodes.NodeFile(gres.encode())
    else:
        nodes.exec_in(container, ["rm", "-f", GRES_CONF_PATH])
    nodes.put_files(container, files)
    script = (
        f"chown munge:munge {KEY_PATH} && "
        f"install -d -o {SLURM_USER} -g {SLURM_USER} /var/lib/slurm/slurmctld "
        f"/var/lib/slurm/slurmd /var/log/slurm"
    )
    nodes.exec_in(container, ["sh", "-c", script])
    return True


def wait_registered(head: Container, names: Sequence[str], timeout: float) -> None:
    """Wait until slurmctld knows every node as up (idle, allocated or drained by hand).

    Raises:
        LabError: Some node is still down or unknown after ``timeout``.
    """
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        code, out = nodes.exec_in(
            head, ["sinfo", "--noheader", "--Node", "--format=%N %T"], check=False
        )
        if code == 0:
            states = dict(line.split(None, 1) for line in out.splitlines() if " " in line)
            if all(n in states and not states[n].startswith(("down", "unknown")) for n in names):
                return
        time.sleep(1)
    raise LabError(
        f"Slurm: nodes not up after {timeout:.0f}s: "
        + ", ".join(f"{n}={states.get(n, 'unknown')}" for n in names)
    )
