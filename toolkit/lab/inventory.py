"""The inventory a lab writes, so every later command works with ``-i inventories/lab``.

Layout (docs/architecture.md, "Inventory layout")::

    hosts.yml                       group `lab` with every node (ansible_host = its address)
    group_vars/all/ssh.yml          root over the lab key, strict host key checking
    group_vars/all/repos.yml        the lab's repository, key, CA bundle and wheel URLs
    group_vars/all/slurm.yml        (--slurm) acceptance through the lab's Slurm: executor,
                                    submit host, partition, license
    group_vars/all/lab.yml          how to read a lab node's kernel log and boot id; the CVEs
                                    the lab accepts (its packages are stand-ins)
    group_vars/lab/stack.yml        the lab's stack: the default, or R580 for Blackwell
    group_vars/lab/hardware.yml     the group's hardware profile (GPUs, acceptance floors)
    host_vars/<node>/hardware.yml   the same profile plus that node's data disks

Data disks are per host because serials are per disk, as on real servers: node 1's disks
are ``S<lab tag>N01D00``, ``S<lab tag>N01D01``, node 2's ``S<lab tag>N02D00`` and so on.
Ansible replaces a variable per top-level key, so each host's ``hardware`` is the whole
group profile with its own ``data_disks`` added.

The directory carries a marker file naming the lab; ``down`` removes a directory only
when the marker says it is this lab's.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from toolkit.config import parse_yaml
from toolkit.errors import LabError
from toolkit.lab import kmods
from toolkit.lab.driver_packages import NVLSM_RELEASES
from toolkit.lab.image import LOGIN_USER
from toolkit.lab.paths import DMI_DIR, PCI_DIR, RDMA_DIR
from toolkit.lab.spec import LabSpec
from toolkit.lab.state import NodeState
from toolkit.profile.floors import ShippedProfile, build_profile, floor_factors
from toolkit.stack import catalog as gpu_catalog
from toolkit.stack.matrix import matrix
from toolkit.stack.models import ACCEPTED_RISKS_KEY
from toolkit.stack.security import floors

MARKER = ".gpunode-lab"
DEFAULT_DIR = Path("inventories") / "lab"
GROUP = "lab"
BOOT_ID_COMMAND = "cat /run/gpunode-lab/boot_id"
KERNEL_LOG_COMMAND = "journalctl -b -t kernel -o short-monotonic --no-pager"
UDEV_COMMAND = "/usr/local/sbin/gpunode-lab-udev"  # what udev does on its own on a real node

# The lab's default stack (docs/architecture.md, "The lab"): what the lab repository
# carries and what `gpunode provision -i inventories/lab` installs unless told otherwise.
DEFAULT_STACK: dict[str, Any] = {
    "driver": {"version": "550.127.05", "flavour": "open"},
    "cuda": "12.4.1",
    "nccl": "2.21.5-1+cuda12.4",
    "fabric_manager": "auto",
    "container_toolkit": "1.16.2",
}

# The lab's stack for GPUs the default stack cannot drive (Blackwell: compute capability 10.0
# needs CUDA >= 12.8 and driver >= 570.26, matrix.yml; the open modules, domain.md): R580, where
# NVIDIA's packages name IMEX `nvidia-imex` and libnvsdm unsuffixed (naming.yml), at the release
# inventories/sample pins, with the CUDA 12.8 toolkit and NCCL build the lab repository carries
# (toolkit/lab/catalog.py). A fourth-generation NVSwitch system (B200 with NVSwitch) also pins
# NVLSM (gpus.yml `nvlsm`) at the release the lab repository carries.
R580_STACK: dict[str, Any] = {
    "driver": {"version": "580.159.03", "flavour": "open"},
    "cuda": "12.8.1",
    "nccl": "2.26.2-1+cuda12.8",
    "fabric_manager": "auto",
    "container_toolkit": "1.19.1",
}


def lab_stack(spec: LabSpec) -> dict[str, Any]:
    """The stack a lab of ``spec`` writes into its inventory: the default stack, or the R580
    stack where the default's CUDA is older than the GPU needs, with NVLSM pinned where the
    GPU's NVSwitch generation needs it. Pure."""
    info = gpu_catalog.gpu(spec.gpu_model)
    needs = matrix().compute_capabilities[info.compute_capability].min_cuda
    default_cuda = _version_key(str(DEFAULT_STACK["cuda"]))
    if needs is None or _version_key(str(needs.value)) <= default_cuda:
        return dict(DEFAULT_STACK)
    stack = dict(R580_STACK)
    if info.nvlsm and spec.has_nvswitch:
        stack["nvlsm"] = NVLSM_RELEASES[-1]
    return stack


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


LAB_PROFILE_FILE = "toolkit/lab/acceptance.yml"

# The lab's packages are stand-ins (toolkit/lab/standins) that carry no NVIDIA code, so the
# vulnerabilities of the versions they are named after (toolkit/stack/security.yml) are not
# there: the lab accepts every CVE of the security floors, and its default stack (driver
# 550.127.05, container toolkit 1.16.2) passes `gpunode stack check` with warnings naming them.
LAB_RISK_REASON = "lab stand-in packages carry no NVIDIA code"


def accepted_risks() -> list[dict[str, str]]:
    """``gpunode_accepted_risks`` of a lab: every CVE of the security floors."""
    cves = dict.fromkeys(cve for floor in floors() for cve in floor.cves)
    return [{"cve": cve, "reason": LAB_RISK_REASON} for cve in cves]


HEADER = (
    "---\n"
    "# Written by `gpunode lab up` for lab {name}; `gpunode lab down` removes it.\n"
    "# Edit the lab's options instead of this file: the next `lab up` rewrites it.\n"
)


class _Dumper(yaml.SafeDumper):
    """YAML the project's yamllint accepts: indented lists, long strings folded."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = ">" if len(value) > 80 and "\n" not in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _yaml(name: str, comment: str, data: dict[str, Any]) -> str:
    body = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return HEADER.format(name=name) + f"# {comment}\n" + body


@lru_cache(maxsize=1)
def lab_profile() -> ShippedProfile:
    """The lab's acceptance floors (``acceptance.yml`` next to this module, with sources),
    measured on lab nodes, where the all-reduce runs on CPUs over the lab network.

    Raises:
        ConfigError: The file is malformed (naming the key).
    """
    text = resources.files("toolkit.lab").joinpath("acceptance.yml").read_text("utf-8")
    raw = parse_yaml(text, LAB_PROFILE_FILE)
    return build_profile("lab", raw, floor_factors(), LAB_PROFILE_FILE)


def hardware_profile(spec: LabSpec) -> dict[str, Any]:
    """The group's hardware profile: the emulated GPUs, and the lab's acceptance floors
    (:func:`lab_profile`) written in as a site writes its own."""
    floors = lab_profile().acceptance.model_dump(mode="json", exclude_unset=True)
    return {
        "gpu": {"model": spec.gpu_model, "count": spec.gpus, "nvswitch": spec.has_nvswitch},
        "acceptance": floors,
    }


def data_disks(node: NodeState, md_available: bool) -> dict[str, Any]:
    """A node's ``data_disks`` (by serial), in the layout this host kernel can build."""
    disks = [
        {"serial": d.serial, "by_id": d.by_id, "size": f"{d.size // 1024**2}MiB"}
        for d in sorted(node.disks, key=lambda d: d.index)
    ]
    # Several disks become one md RAID0 where the host kernel has md; a kernel without it
    # (like many CI machines) gets btrfs' own RAID0 instead.
    layout = "auto" if md_available or len(disks) < 2 else "btrfs-raid0"
    return {"disks": disks, "layout": layout, "filesystem": "xfs", "mount_point": "/data"}


def render(
    *,
    spec: LabSpec,
    nodes: list[NodeState],
    key_file: Path,
    known_hosts: Path,
    repo_vars: Mapping[str, object],
    ca_bundle: Path | None,
    md_available: bool,
    slurm_vars: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """Every file of the inventory: relative path -> text. Pure."""
    name = spec.name
    hosts = {node.name: {"ansible_host": node.ip} for node in nodes}
    files = {
        "hosts.yml": _yaml(
            name,
            f"Group `{GROUP}`: the nodes of lab {name}.",
            {"all": {"children": {GROUP: {"hosts": hosts}}}},
        ),
        "group_vars/all/ssh.yml": _yaml(
            name,
            "The cloud image's sudo user over the lab's key; host keys are checked.",
            {
                "ansible_user": LOGIN_USER,
                "ansible_ssh_private_key_file": str(key_file),
                "ansible_ssh_common_args": (
                    f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes "
                    "-o IdentitiesOnly=yes"
                ),
                "ansible_python_interpreter": "/usr/bin/python3",
            },
        ),
        "group_vars/all/repos.yml": _yaml(
            name,
            "The lab's signed repository of NVIDIA stand-ins and its wheels (torch, CPU).",
            {**repo_vars, **({"gpunode_ca_bundle": str(ca_bundle)} if ca_bundle else {})},
        ),
        "group_vars/all/lab.yml": _yaml(
            name,
            "Lab nodes share the host's kernel (kernel log, boot id) and sysfs, run no udev, "
            "and have stand-in NVIDIA packages.",
            {
                "gpunode_kernel_log_command": KERNEL_LOG_COMMAND,
                "gpunode_reboot_boot_time_command": BOOT_ID_COMMAND,
                "data_disks_udev_settle_command": UDEV_COMMAND,
                "gpunode_dmi_dir": DMI_DIR,
                "gpunode_pci_dir": PCI_DIR,
                "gpunode_rdma_dir": RDMA_DIR,
                # The node shares the host's kernel: modules load through the lab's stand-in.
                **kmods.inventory_vars(),
                ACCEPTED_RISKS_KEY: accepted_risks(),
            },
        ),
        f"group_vars/{GROUP}/stack.yml": _yaml(
            name,
            "The lab's stack for its GPUs (docs/architecture.md, toolkit/lab/inventory.py).",
            {"stack": lab_stack(spec)},
        ),
        f"group_vars/{GROUP}/hardware.yml": _yaml(
            name,
            "The emulated GPUs of every node; data disks are per host (host_vars).",
            {"hardware": hardware_profile(spec)},
        ),
    }
    if slurm_vars:
        files["group_vars/all/slurm.yml"] = _yaml(
            name,
            "The lab's Slurm cluster: acceptance runs as Slurm jobs (gpunode accept --executor).",
            dict(slurm_vars),
        )
    for node in nodes:
        if not node.disks:
            continue
        profile = {**hardware_profile(spec), "data_disks": data_disks(node, md_available)}
        files[f"host_vars/{node.name}/hardware.yml"] = _yaml(
            name,
            f"The group profile plus the data disks of {node.name}, by serial.",
            {"hardware": profile},
        )
    return files


def write(directory: Path, lab_name: str, files: dict[str, str]) -> Path:
    """Write the inventory, replacing an earlier one of the same lab.

    Raises:
        LabError: The directory holds something that is not this lab's inventory.
    """
    directory = directory.resolve()
    if directory.exists() and any(directory.iterdir()):
        owner = owner_of(directory)
        if owner != lab_name:
            what = f"lab {owner}'s inventory" if owner else "files gpunode did not write"
            raise LabError(
                f"{directory} already holds {what}; choose another --inventory-dir or remove it"
            )
        # Rewrite from scratch: a node or disk that is gone must not linger in host_vars.
        remove(directory, lab_name)
    for relative, text in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (directory / MARKER).write_text(lab_name + "\n")
    return directory


def owner_of(directory: Path) -> str | None:
    """The lab that wrote this inventory directory, if any."""
    marker = directory / MARKER
    try:
        return marker.read_text().strip() or None
    except OSError:
        return None


def remove(directory: Path, lab_name: str) -> bool:
    """Remove the inventory if (and only if) this lab wrote it; True when removed."""
    if not directory.is_dir() or owner_of(directory) != lab_name:
        return False
    shutil.rmtree(directory)
    return True
