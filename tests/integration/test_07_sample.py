"""The shipped sample inventory, with only a site's edits, reaches ``ready`` on the lab.

``inventories/sample`` is what a site copies for its servers. This module copies it into a
temporary directory and makes exactly the edits a site must make (``SITE_EDITS``; the
README's "Making the sample yours" lists the same keys, tests/unit/core/test_sample_edits.py
keeps the two equal), taking every value from the lab's own inventory, as a site takes them
from its servers. Everything else stays as shipped: the stack pins (the lab repository
carries them: toolkit/lab/catalog.py, driver_packages.py), the GPU model and count, the
topology rules, the data disks' file system and mount point.

What the lab cannot be is listed apart (``LAB_ONLY``), with why: the lab's environment
variables (nodes share the host's kernel, run no udev and are unprivileged containers), the
GPU-arithmetic floors (the lab's GPUs are emulated, its all-reduce runs on CPUs: it is judged
by the lab's floors, toolkit/lab/acceptance.yml, written in as ``lab up`` writes its own
inventory's) and md RAID on a host kernel without md. A real site makes none of these.

The lab is its own (``$GPUNODE_TEST_LAB-sample``, 1 node with 2 sparse data disks: the edits
are per group and per host alike for any number of hosts, and a second node cost CI about a
minute of its converge, image push and acceptance). Not the shared lab: that one carries the
lab's default driver (R550) loaded after the earlier modules, and the sample's R580 would
need a reboot between two ``up`` runs; a bare lab keeps this to one ``up``, as a site's first
run on bare servers. The module prints what it cost
(2026-12-03, 2 shared cores, 2 nodes: its lab up 4.4 s with cached images, ``up`` 162 s,
the module 178 s with the session lab's start).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.lab import lab as lab_core
from toolkit.lab import nodes as lab_nodes
from toolkit.lab import paths, server
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.inventory import lab_profile
from toolkit.lab.paths import HARDWARE_FILE
from toolkit.lab.spec import build_spec

pytestmark = pytest.mark.lab

SAMPLE = REPO / "inventories" / "sample"
LAB = os.environ.get("GPUNODE_TEST_LAB", "gpunode-test") + "-sample"
GROUP = "h100_sxm"  # the sample's group the lab's H100 x 8 nodes go into

# The edits a site makes to its copy of the sample: name -> the keys it sets. The README's
# "Making the sample yours" lists exactly these names (tests/unit/core/test_sample_edits.py).
SITE_EDITS: dict[str, tuple[str, ...]] = {
    "hosts": ("hosts.yml: each group's hosts, ansible_host, ansible_port",),
    "login": (
        "ansible_user",
        "ansible_ssh_private_key_file",
        "ansible_ssh_common_args (UserKnownHostsFile)",
    ),
    "disks": ("hardware.data_disks.disks (serial, by_id, size), per host in host_vars",),
    "nics": ("hardware.acceptance.topology.nics",),
    "repositories": (
        "gpunode_nvidia_repo_url",
        "gpunode_nvidia_repo_key_url",
        "gpunode_nvidia_repo_key_fingerprint",
        "gpunode_container_toolkit_repo_url",
        "gpunode_container_toolkit_repo_key_url",
        "gpunode_container_toolkit_repo_key_fingerprint",
        "gpunode_ca_bundle",
        "gpunode_pip_index_url",
        "gpunode_pip_find_links",
    ),
    "os": ("gpunode_stack_os",),
    "image_base": ("gpunode_image_base", "gpunode_image_os", "gpunode_image_python_packages"),
    "python_lock": ("gpunode_acceptance_requirements",),
}

# What only the lab needs; a real site sets none of it.
LAB_ONLY: dict[str, str] = {
    "group_vars/all/lab.yml": "the lab inventory's own file: nodes share the host's kernel "
    "(kernel log, boot id), run no udev, read DMI from a file; its packages are stand-ins",
    "gpunode_accept_container_options": "lab nodes are unprivileged containers: no memlock",
    "hardware.acceptance": "the lab's floors (toolkit/lab/acceptance.yml) in place of the "
    "sample's profile (h100-sxm-8) and its GPU floors: emulated GPUs, a CPU all-reduce",
    "hardware.data_disks.layout": "btrfs-raid0 where the host kernel has no md",
}
GPU_FLOORS = ("allreduce", "min_h2d_gbps", "min_mem_bw_gbps")


def _read(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("---\n" + yaml.safe_dump(data, sort_keys=False, width=100))


@pytest.fixture(scope="module")
def sample_lab(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A bare 1-node lab (the shared ``lab`` fixture only makes sure Docker is there)."""
    if lab_core.lab_state.load(LAB) is not None:
        lab_core.down(LAB)
    spec = build_spec(
        name=LAB, nodes=1, disks=2, disk_size=2 * 1024**3, ca_bundle=lab_nodes.host_ca_bundle()
    )
    started = time.monotonic()
    state = lab_core.up(spec, inventory_dir=tmp_path_factory.mktemp("sample-lab") / "lab")
    print(f"\nlab {LAB} up: {time.monotonic() - started:.1f}s")
    assert spec.gpu_model == "H100" and spec.gpus == 8 and spec.has_nvswitch  # the sample's GPUs
    try:
        yield {"state": state, "tmp": tmp_path_factory.mktemp("sample")}
    finally:
        if os.environ.get("GPUNODE_TEST_KEEP_LAB") != "1":
            lab_core.down(LAB)


def site_copy(state: Any, dest: Path) -> Path:
    """Copy the sample and make ``SITE_EDITS`` (then ``LAB_ONLY``) from the lab's values."""
    lab_inv = state.inventory_dir
    shutil.copytree(SAMPLE, dest)
    nodes = sorted(state.nodes, key=lambda n: n.index)
    ssh = _read(lab_inv / "group_vars/all/ssh.yml")
    repos = _read(lab_inv / "group_vars/all/repos.yml")
    known_hosts = ssh["ansible_ssh_common_args"].split("UserKnownHostsFile=")[1].split()[0]

    # hosts: the site's servers in the group of their kind; no L40S servers here.
    hosts = _read(dest / "hosts.yml")
    groups = hosts["all"]["children"]["gpu_nodes"]["children"]
    groups[GROUP]["hosts"] = {n.name: {"ansible_host": n.ip, "ansible_port": 22} for n in nodes}
    groups["l40s_pcie"]["hosts"] = {}
    _write(dest / "hosts.yml", hosts)

    # login
    connection = _read(dest / "group_vars/all/connection.yml")
    connection["ansible_user"] = ssh["ansible_user"]
    connection["ansible_ssh_private_key_file"] = ssh["ansible_ssh_private_key_file"]
    connection["ansible_ssh_common_args"] = (
        f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    )
    _write(dest / "group_vars/all/connection.yml", connection)

    # repositories (the lab's mirror, its own key) and os
    repositories = _read(dest / "group_vars/all/repositories.yml")
    for key in SITE_EDITS["repositories"]:
        if key in repos:
            repositories[key] = repos[key]
    (os_key,) = SITE_EDITS["os"]
    repositories[os_key] = repos[os_key]
    _write(dest / "group_vars/all/repositories.yml", repositories)

    # image_base and python_lock: the lab's base; a lock whose NCCL wheel is the sample's NCCL
    image = _read(dest / "group_vars/all/image.yml")
    for key in SITE_EDITS["image_base"]:
        image[key] = repos[key]
    stack = _read(dest / f"group_vars/{GROUP}/stack.yml")["stack"]
    (lock_key,) = SITE_EDITS["python_lock"]
    image[lock_key] = server.requirements_lock(
        paths.cache_dir() / "wheels", nccl=str(stack["nccl"]).split("-")[0]
    )
    _write(dest / "group_vars/all/image.yml", image)

    # nics: the NICs `nvidia-smi topo -m` shows on the site's servers
    hardware_file = dest / f"group_vars/{GROUP}/hardware.yml"
    profile = _read(hardware_file)
    seen = lab_core.ssh_run(LAB, nodes[0].name, f"cat {HARDWARE_FILE}").stdout
    nics = [nic.name for nic in NodeHardware.from_json(seen).nics]
    profile["hardware"]["acceptance"]["topology"]["nics"] = nics

    # LAB_ONLY: the lab's environment, its acceptance profile, its disk layout
    lab_vars = _read(lab_inv / "group_vars/all/lab.yml")
    lab_vars["gpunode_accept_container_options"] = repos["gpunode_accept_container_options"]
    _write(dest / "group_vars/all/lab.yml", lab_vars)
    # The lab's floors as `lab up` writes them into its own inventory, under the sample's own
    # keys (a group's keys win over its profile's), less the GPU floors and the profile name.
    own = {
        key: value
        for key, value in profile["hardware"]["acceptance"].items()
        if key not in GPU_FLOORS and key != "profile"
    }
    floors = lab_profile().acceptance.model_dump(mode="json", exclude_unset=True)
    profile["hardware"]["acceptance"] = {**floors, **own}
    _write(hardware_file, profile)

    # disks: serials are per server, so each host gets the group's hardware with its disks
    for node in nodes:
        lab_disks = _read(lab_inv / f"host_vars/{node.name}/hardware.yml")["hardware"]
        per_host = json.loads(json.dumps(profile))
        data_disks = per_host["hardware"]["data_disks"]
        data_disks["disks"] = lab_disks["data_disks"]["disks"]
        if lab_disks["data_disks"]["layout"] == "btrfs-raid0":  # LAB_ONLY: no md here
            data_disks["layout"] = "btrfs-raid0"
        _write(dest / f"host_vars/{node.name}/hardware.yml", per_host)
    return dest


def test_the_sample_with_site_edits_only_reaches_ready(sample_lab: dict[str, Any]) -> None:
    state = sample_lab["state"]
    inventory = site_copy(state, sample_lab["tmp"] / "site")
    # The pins are the sample's as shipped, not edited.
    for group in (GROUP, "l40s_pcie"):
        shipped = (SAMPLE / f"group_vars/{group}/stack.yml").read_text()
        assert (inventory / f"group_vars/{group}/stack.yml").read_text() == shipped
    env = {
        **os.environ,
        "GPUNODE_STATE_DIR": str(sample_lab["tmp"] / "state"),
        "COLUMNS": "200",
    }
    started = time.monotonic()
    # `--relock`: the site's first run writes the stack lock from its repositories.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "toolkit",
            "up",
            "-i",
            str(inventory),
            "--yes",
            "--relock",
            "--json",
        ],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    spent = time.monotonic() - started
    nodes = json.loads(proc.stdout)["nodes"] if proc.stdout.strip() else {}
    failed = {h: (n["stages"], n["reason"]) for h, n in nodes.items() if not n["ready"]}
    assert proc.returncode == 0, f"{failed}\n{proc.stderr[-5000:]}"
    names = sorted(n.name for n in state.nodes)
    assert sorted(nodes) == names
    for name in names:
        assert nodes[name]["ready"], json.dumps(nodes[name], indent=1)[-3000:]
        written = lab_core.ssh_run(LAB, name, "cat /etc/gpunode/state.json").stdout
        assert json.loads(written)["state"] == "ready"
        installed = lab_core.ssh_run(LAB, name, "dpkg-query -W -f '${Version}' nvidia-driver")
        assert installed.stdout == "580.159.03-1"  # the sample's pin
    print(f"\nup of the sample copy on {len(names)} bare node(s): {spent:.1f}s")
