"""What a node's passive check reads and holds the node to, computed from the inventory on the
control machine: the probe's settings, the expectation per OS, the units that must run, the
thresholds. ``gpunode check`` (``toolkit.steps.check``) runs the probe over SSH and judges with
it; the node-side health check (``healthcheck``) is installed with the same, as its
:class:`~toolkit.check.healthcheck.Settings` (:func:`healthcheck_settings`), and with its
program (:func:`healthcheck_program`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from toolkit.acceptance import payload
from toolkit.acceptance.check import Check
from toolkit.acceptance.expectation import expected_node
from toolkit.acceptance.thresholds import critical_xids, effective
from toolkit.check import healthcheck, rules
from toolkit.errors import ConfigError
from toolkit.inventory import Host, Inventory
from toolkit.node import nodestate
from toolkit.profile.floors import AcceptanceSpec
from toolkit.stack import catalog
from toolkit.stack.lock import OS_VARIABLE
from toolkit.stack.systems import SUPPORTED_OS

# Where the probe reads PCIe AER statistics and RDMA ports; the inventory may name other
# folders (the lab does: its nodes share the host's sysfs).
PCI_DIR = "/sys/bus/pci/devices"
RDMA_DIR = "/sys/class/infiniband"
PCI_DIR_VAR = "gpunode_pci_dir"
RDMA_DIR_VAR = "gpunode_rdma_dir"
# The RDMA devices that carry training traffic (``[mlx5_0, ...]``); unset: every port.
COMPUTE_NICS_VAR = "gpunode_compute_nics"
# What the roles name the units (roles/*/defaults/main.yml): persistenced is enabled unless
# `nvidia_driver_persistenced` is off, Fabric Manager and IMEX where the stack has them.
PERSISTENCED_UNIT = "nvidia-persistenced"
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"
IMEX_UNIT = "nvidia-imex"


@dataclass
class NodePlan:
    """What one node's passive check reads and holds it to."""

    host: Host
    expected: dict[str, rules.Expected]  # per OS id
    spec: AcceptanceSpec
    probe_spec: dict[str, Any]

    @property
    def compute_nics(self) -> list[str] | None:
        wanted = self.host.vars.get(COMPUTE_NICS_VAR)
        return [str(n) for n in wanted] if wanted else None


def plan_node(inventory: Inventory, host: Host) -> NodePlan:
    """What one node must be, for each OS it may run (its OS is read in the same command)."""
    stack, hardware = inventory.host_config(host)
    named = host.vars.get(OS_VARIABLE)
    systems = [named] if isinstance(named, str) else [str(s) for s in named or SUPPORTED_OS]
    expected = {}
    for system in systems:
        try:
            expect, resolved = expected_node(host, stack, hardware, system)
        except ConfigError:
            if named:
                raise
            continue  # no OS named: only those the stack resolves for can be the node's
        expected[system] = rules.Expected(expect, required_units(host, resolved))
    names = sorted({p for e in expected.values() for p in e.node.packages})
    units = sorted({u for e in expected.values() for u in e.units})
    probe_spec = {
        "packages": names,
        "kernel_log_command": host.vars.get("gpunode_kernel_log_command"),
        "state_file": nodestate.PATH,
        "dmi_dir": host.vars.get("gpunode_dmi_dir"),
        "pci_dir": str(host.vars.get(PCI_DIR_VAR) or PCI_DIR),
        "rdma_dir": str(host.vars.get(RDMA_DIR_VAR) or RDMA_DIR),
        "units": units,
    }
    return NodePlan(host, expected, effective(hardware.acceptance), probe_spec)


def required_units(host: Host, resolved: dict[str, Any]) -> dict[str, str]:
    """The units that must be active on a node of this resolved stack, with why."""
    units = {}
    if host.vars.get("nvidia_driver_persistenced", True):
        units[PERSISTENCED_UNIT] = "nvidia_driver_persistenced"
    if (resolved.get("fabric_manager") or {}).get("enabled"):
        name = str(host.vars.get("fabric_manager_service") or FABRIC_MANAGER_UNIT)
        units[name] = "Fabric Manager: the GPUs sit on NVSwitches"
    if (resolved.get("imex") or {}).get("enabled"):
        units[IMEX_UNIT] = "IMEX: the stack enables it"
    return units


# The probe's module, shipped with the runner (standard library and the runner only).
PROBE_MODULE = "toolkit.check.probe"


def probe_program(spec: dict[str, Any]) -> bytes:
    """The one Python program the node runs: the runner's modules and the probe, carried in
    it (``payload.inline_program``), then the probe, its result as JSON on stdout."""
    main = (
        "from toolkit.check import probe\n"
        f"json.dump(probe.main(json.loads({json.dumps(spec)!r})), sys.stdout)\n"
    )
    return payload.inline_program(main, shipped=(PROBE_MODULE,))


def judge(
    node: NodePlan, probe: dict[str, Any], before: dict[str, Any] | None
) -> tuple[list[Check], dict[str, Any]]:
    """The checks of one node's probe, and the baseline the next check starts from."""
    return rules.judge(
        probe,
        node.expected,
        node.spec,
        before,
        compute_nics=node.compute_nics,
        xids=critical_xids(),
        model_of=catalog.model_of,
    )


# The node-side health check's module and what it imports beyond the runner (standard
# library only, tests/unit/check/test_healthcheck.py checks it), shipped as one program.
HEALTHCHECK_MODULES = (
    "toolkit.acceptance.check",
    "toolkit.acceptance.failure",
    "toolkit.acceptance.health_checks",
    "toolkit.acceptance.hooks",
    "toolkit.acceptance.memory_health",
    "toolkit.acceptance.node_checks",
    "toolkit.acceptance.passive",
    PROBE_MODULE,
    "toolkit.check.healthcheck",
    "toolkit.check.rules",
    "toolkit.errors",
    "toolkit.facts.system",
    "toolkit.node.nodefile",
    "toolkit.node.nodestate",
    "toolkit.report.prometheus",
    "toolkit.stack.debversion",
    "toolkit.stack.gpunames",
    "toolkit.stack.systems",
)


def healthcheck_program() -> str:
    """The health check as one Python program (``payload.inline_program``: the modules it
    imports carried in it), run by slurmd as ``HealthCheckProgram``; the same text from the
    same sources."""
    main = "from toolkit.check import healthcheck\nsys.exit(healthcheck.main(sys.argv[1:]))\n"
    text = payload.inline_program(main, shipped=HEALTHCHECK_MODULES).decode()
    return "#!/usr/bin/python3\n# gpunode's passive checks as Slurm's HealthCheckProgram.\n" + text


def healthcheck_settings(
    node: NodePlan, node_name: str, scontrol: str = "scontrol"
) -> healthcheck.Settings:
    """The settings the health check of this node is installed with."""
    spec = node.spec
    return healthcheck.Settings(
        node_name=node_name,
        probe=node.probe_spec,
        expected=node.expected,
        thresholds=healthcheck.Thresholds(
            check_pcie=spec.check_pcie,
            check_throttle=spec.check_throttle,
            pcie_gen=spec.pcie_gen,
            pcie_width=spec.pcie_width,
            critical_xids=list(spec.critical_xids) if spec.critical_xids is not None else None,
            xid_window_h=spec.xid_window_h,
        ),
        xids={
            n: healthcheck.XidName(x.name, x.action, x.failure_class, x.todo, x.fails)
            for n, x in critical_xids().items()
        },
        gpu_models=catalog.model_index(),
        compute_nics=node.compute_nics,
        scontrol=scontrol,
    )


def render_settings(settings: healthcheck.Settings) -> str:
    """The settings file's text (sorted keys, one trailing newline)."""
    return json.dumps(settings.to_dict(), indent=1, sort_keys=True) + "\n"
