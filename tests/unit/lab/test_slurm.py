"""The lab's Slurm cluster: its slurm.conf, its inventory settings and the node image's part.

The daemons themselves run in tests/integration/test_08_slurm.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_fixtures import REPO

from toolkit.errors import LabError
from toolkit.lab import image, slurm
from toolkit.lab.inventory import render
from toolkit.lab.spec import build_spec
from toolkit.lab.state import NodeState

REAL = REPO / "tests" / "data" / "real" / "slurm"
NODES = [NodeState(index=i, name=f"lab-node-{i}", ip=f"10.9.0.{10 + i}") for i in (2, 1, 3)]


def test_hardware_from_real_slurmd_c() -> None:
    hardware = slurm.parse_hardware((REAL / "slurmd-C.txt").read_text())
    assert list(hardware) == list(slurm.HARDWARE_FIELDS)
    assert hardware["CPUs"].isdigit() and hardware["RealMemory"].isdigit()
    with pytest.raises(LabError, match="no CPUs= field"):
        slurm.parse_hardware("slurmd: error: something")


def test_conf_names_every_node_with_node_1_as_controller() -> None:
    conf = slurm.render_conf("My_Lab-1", NODES, {"CPUs": "2", "RealMemory": "1000"})
    lines = conf.splitlines()
    assert "ClusterName=mylab1" in lines
    assert "SlurmctldHost=lab-node-1(10.9.0.11)" in lines
    nodes = [line for line in lines if line.startswith("NodeName=")]
    assert nodes == [
        f"NodeName=lab-node-{i} NodeAddr=10.9.0.{10 + i} CPUs=2 RealMemory=1000 State=UNKNOWN"
        for i in (1, 2, 3)
    ]
    assert f"Licenses={slurm.LICENSE}:{slurm.LICENSE_COUNT}" in lines
    # nice lowers a job's priority only under the multifactor plugin
    assert "PriorityType=priority/multifactor" in lines
    assert "ProctrackType=proctrack/linuxproc" in lines
    # gpunode's passive checks as slurmd's health check, at the path the role installs it
    assert "HealthCheckProgram=/usr/local/sbin/gpunode-healthcheck" in lines
    assert f"HealthCheckInterval={slurm.HEALTHCHECK_INTERVAL_S}" in lines
    assert "HealthCheckNodeState=ANY" in lines
    # accounting in slurmdbd on the head node; no job-completion file beside it
    assert "AccountingStorageType=accounting_storage/slurmdbd" in lines
    assert "AccountingStorageHost=10.9.0.11" in lines
    assert not [line for line in lines if line.startswith("JobComp")]
    assert (
        f"PartitionName={slurm.PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP" in lines
    )


def test_conf_declares_the_gpus_as_gres_and_accounts_them() -> None:
    conf = slurm.render_conf("lab", NODES, {"CPUs": "2", "RealMemory": "1000"}, gpus=8)
    lines = conf.splitlines()
    # slurm.conf(5) GresTypes; tres.html: a GRES is in sacct's AllocTRES only when named here
    assert "GresTypes=gpu" in lines and "AccountingStorageTRES=gres/gpu" in lines
    assert [line for line in lines if line.startswith("NodeName=")] == [
        f"NodeName=lab-node-{i} NodeAddr=10.9.0.{10 + i} CPUs=2 RealMemory=1000 Gres=gpu:8 "
        "State=UNKNOWN"
        for i in (1, 2, 3)
    ]
    # the health check and its drain path are as they were
    assert "HealthCheckProgram=/usr/local/sbin/gpunode-healthcheck" in lines
    assert "HealthCheckNodeState=ANY" in lines and "ReturnToService=2" in lines
    without = slurm.render_conf("lab", NODES, {"CPUs": "2"}).splitlines()
    assert not [line for line in without if "gres" in line.lower()]


@pytest.mark.parametrize(("gpus", "files"), [(8, "/dev/nvidia[0-7]"), (2, "/dev/nvidia[0-1]"),
                                             (1, "/dev/nvidia0")])  # fmt: skip
def test_gres_conf_names_each_nodes_device_files(gpus: int, files: str) -> None:
    lines = slurm.render_gres_conf(NODES, gpus).splitlines()
    assert lines[0].startswith("#")
    assert lines[1:] == [f"NodeName=lab-node-{i} Name=gpu File={files}" for i in (1, 2, 3)]
    with pytest.raises(ValueError, match="at least one"):
        slurm.render_gres_conf(NODES, 0)


def test_slurmdbd_conf_keeps_the_password_for_the_slurm_user_and_the_head_node() -> None:
    head = NODES[1]
    conf = slurm.render_dbd_conf(head, "s3cret")
    lines = conf.splitlines()
    assert "AuthType=auth/munge" in lines
    # slurmdbd(8) runs only where `hostname -s` is DbdHost: the head node, by its name
    assert "DbdHost=lab-node-1" in lines and "DbdAddr=10.9.0.11" in lines
    assert "StorageType=accounting_storage/mysql" in lines
    assert f"StorageLoc={slurm.DATABASE}" in lines and f"StorageUser={slurm.SLURM_USER}" in lines
    assert slurm.stored_password(conf) == "s3cret"
    assert slurm.stored_password("StorageUser=slurm\n") is None
    # the lab made it: repeating it (lab up again) keeps the password, so the grant holds
    assert slurm.render_dbd_conf(head, slurm.stored_password(conf) or "") == conf
    for bad in ("", "has#hash", "has space"):
        with pytest.raises(LabError, match="without '#' or space"):
            slurm.render_dbd_conf(head, bad)


def test_grant_is_repeatable_and_renews_the_password() -> None:
    sql = slurm.grant_sql("s3cret").splitlines()
    assert sql == [
        f"CREATE DATABASE IF NOT EXISTS {slurm.DATABASE};",
        "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 's3cret';",
        "ALTER USER 'slurm'@'localhost' IDENTIFIED BY 's3cret';",
        f"GRANT ALL PRIVILEGES ON {slurm.DATABASE}.* TO 'slurm'@'localhost';",
    ]


def test_cluster_name_is_what_slurm_accepts() -> None:
    assert slurm.cluster_name("My_Lab-1") == "mylab1"
    assert slurm.cluster_name("_-_") == "gpunode"
    assert len(slurm.cluster_name("x" * 60)) == 32


def test_inventory_says_acceptance_runs_through_slurm(tmp_path: Path) -> None:
    spec = build_spec(name="lab", nodes=3, disks=0, slurm=True)
    files = render(
        spec=spec,
        nodes=NODES,
        key_file=tmp_path / "key",
        known_hosts=tmp_path / "known_hosts",
        repo_vars={},
        ca_bundle=None,
        md_available=True,
        slurm_vars=slurm.inventory_vars(NODES),
    )
    text = files["group_vars/all/slurm.yml"]
    assert "gpunode_accept_executor: slurm\n" in text
    assert "gpunode_slurm_submit_host: lab-node-1\n" in text
    assert f"gpunode_slurm_license: {slurm.LICENSE}\n" in text
    assert "gpunode_slurm_healthcheck: true\n" in text
    plain = render(
        spec=build_spec(name="lab", nodes=3, disks=0),
        nodes=NODES,
        key_file=tmp_path / "key",
        known_hosts=tmp_path / "known_hosts",
        repo_vars={},
        ca_bundle=None,
        md_available=True,
    )
    assert "group_vars/all/slurm.yml" not in plain


def test_slurm_is_part_of_the_lab_shape() -> None:
    assert build_spec(slurm=True).shape()["slurm"] is True
    assert build_spec().shape()["slurm"] is False


def test_node_image_carries_slurm_disabled_and_keyless() -> None:
    assert set(image.SLURM_PACKAGES) <= set(image.PACKAGES)
    script = image.CUSTOMIZE_SCRIPT
    assert f"systemctl disable {' '.join(image.SLURM_UNITS)}" in script
    # the accounting daemon and its database come disabled as well: only the head node of a
    # Slurm lab starts them
    assert {"slurmdbd", "mariadb-server"} <= set(image.SLURM_PACKAGES)
    assert {"slurmdbd.service", "mariadb.service"} <= set(image.SLURM_UNITS)
    assert "/etc/munge/munge.key" in script.split("rm -f /etc/ssh/ssh_host_*")[1].splitlines()[0]
