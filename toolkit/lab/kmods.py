"""The kernel modules of a lab node's emulated stack: a ``modprobe`` stand-in and where a loaded
module shows itself.

A lab node shares the host's kernel: it may not load modules into it, and its ``/sys/module``
is the host's. Roles that load a module read ``/sys/module/<name>`` (the sysfs-module ABI) and
run ``modprobe`` by default; the lab's inventory points them at :data:`MODULE_DIR` and
:data:`MODPROBE` instead (``fabric_manager_module_dir``, ``fabric_manager_modprobe``), as it
points the node facts at its emulated sysfs (``gpunode_rdma_dir``). Loaded modules live on a
tmpfs (``/run``), so they go with the node's boot as real ones do; a oneshot unit loads what
``/etc/modules-load.d`` asks for at every boot, as systemd-modules-load does on a real host
(it skips a container: ``ConditionCapability=CAP_SYS_MODULE``).

:data:`MODULES` are those a real node of the emulated kind has in ``/lib/modules``: the RDMA
core (rdma-core's kernel side, in every Debian kernel) that NVLSM reaches the NVSwitches
through (``ib_umad``: NVIDIA's driver container waits for ``mlx5_core`` and ``ib_umad`` on an
NVLink5 system, domain.md section 6). Any other module fails as ``modprobe`` fails for a
module the kernel does not have. Nothing is behind them: loading one makes its directory.
"""

from __future__ import annotations

from importlib import resources

from docker.models.containers import Container

from toolkit.lab import nodes, paths

MODULE_DIR = paths.MODULE_DIR
MODPROBE = "/usr/local/sbin/gpunode-lab-modprobe"
LIST_FILE = f"{paths.NODE_STATE_DIR}/modules"
# The in-tree RDMA modules (drivers/infiniband/core: ib_core, ib_uverbs, ib_umad, rdma_cm,
# rdma_ucm; drivers/net/ethernet/mellanox/mlx5: mlx5_core; drivers/infiniband/hw/mlx5: mlx5_ib).
MODULES = ("ib_core", "ib_umad", "ib_uverbs", "mlx5_core", "mlx5_ib", "rdma_cm", "rdma_ucm")
UNIT_NAME = "gpunode-lab-modules-load.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
UNIT = f"""\
[Unit]
Description=gpunode lab: load the emulated kernel modules /etc/modules-load.d asks for
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={MODPROBE} --modules-load

[Install]
WantedBy=sysinit.target
"""


def inventory_vars() -> dict[str, str]:
    """The role variables that point module loading at the lab's stand-in."""
    return {"fabric_manager_module_dir": MODULE_DIR, "fabric_manager_modprobe": MODPROBE}


def node_files() -> dict[str, nodes.NodeFile]:
    """The modules a node has, the ``modprobe`` stand-in and the unit that loads at boot."""
    folder = resources.files("toolkit.lab").joinpath("node_files")
    script = folder.joinpath("gpunode-lab-modprobe.sh")
    return {
        LIST_FILE: nodes.NodeFile("".join(f"{m}\n" for m in MODULES).encode()),
        MODPROBE: nodes.NodeFile(script.read_bytes(), 0o755),
        UNIT_PATH: nodes.NodeFile(UNIT.encode()),
    }


def make(container: Container) -> None:
    """Enable the boot unit and run it now (a node up from before it existed gets it here)."""
    nodes.exec_in(container, ["systemctl", "daemon-reload"])
    nodes.exec_in(container, ["systemctl", "enable", "--quiet", UNIT_NAME])
    nodes.exec_in(container, ["systemctl", "restart", UNIT_NAME])
