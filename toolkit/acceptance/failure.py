"""Failure classes: what kind of failure a failed check is, and what to do next.

The one owner of the table. Every failed check (``check.Check``) carries a class and the
recommended next action, with its source:

- ``configuration``: a setting or a piece the stack owns (packages, the loaded driver,
  persistence mode, units, the inventory) is wrong; gpunode provision fixes what gpunode owns,
  then the node is re-accepted; never an RMA;
- ``hardware``: the node's parts (a GPU, its memory, a link, a NIC) need a reset, a reboot,
  mechanical attention or the vendor; a re-acceptance proves nothing until that is done;
- ``transient``: the condition may pass by itself (a figure under load, an application-level
  error, a job that never started): re-accept;
- ``harness``: the test setup itself (the runner, the image, the container, the executor)
  failed, not the node (design.md, "the host-to-container contract"): fix it, re-accept.

Checks whose class and action depend on what they read (``health.xid``: NVIDIA's Xid catalog
through ``xids.yml``; ``dcgm.<plugin>``: DCGM's error severity; the memory-error rules of
``memory_health.py``) set their own; every other check is classed here by its name. Standard
library only: the node-side health check ships it (``check.plan.HEALTHCHECK_MODULES``), which
is why the table is Python and not YAML.
"""

from __future__ import annotations

from dataclasses import dataclass

CONFIGURATION = "configuration"
HARDWARE = "hardware"
TRANSIENT = "transient"
HARNESS = "harness"
# Most consequential first: a node's leading class (its drain reason's) is the first of these
# that any of its failed checks has.
CLASSES = (HARDWARE, CONFIGURATION, TRANSIENT, HARNESS)
# The classes ``up --accept-only`` re-accepts without being forced: they can heal by
# themselves or were fixed by a provision (configuration is re-accepted after one).
HEALABLE = (CONFIGURATION, TRANSIENT, HARNESS)

PROVISION = "run gpunode provision, then re-accept"
GPUNODE_OWNS = "gpunode owns it on the node (roles nvidia_driver, nccl, apt_pins, node_state)"
HARNESS_SOURCE = "design.md: harness problems are never blamed on the node"
XID_CATALOG = "NVIDIA Xid catalog (xids.yml)"
MEM_ERRORS = "NVIDIA GPU Memory Error Management, Error Recovery and Response Flags"
# DCGM's dcgmErrorSeverity_t with the header's own words (NVIDIA/DCGM dcgmlib/dcgm_errors.h @
# 72fa3fe, DCGM 4.6.0; the same in v3.3.9): MONITOR "Can perform workload, but needs to be
# monitored", ISOLATE "Cannot perform workload. GPU should be isolated", UNKNOWN "This error
# code is not recognized", TRIAGE "This error should be triaged", CONFIG "This error can be
# configured", RESET "Drain and reset GPU".
DCGM_SEVERITY_SOURCE = "DCGM dcgm_errors.h, dcgmErrorSeverity_t"


@dataclass(frozen=True)
class Advice:
    """A failure's class and the recommended next action, with where that comes from."""

    failure_class: str
    action: str
    source: str


# DCGM severity name -> advice. NONE (0) names no severity: the plugin's category decides.
DCGM_SEVERITY: dict[str, Advice] = {
    "MONITOR": Advice(
        TRANSIENT, "re-accept, and watch the GPU: DCGM says it can still work", DCGM_SEVERITY_SOURCE
    ),
    "ISOLATE": Advice(
        HARDWARE,
        "isolate the GPU (keep the node drained) and contact NVIDIA support",
        DCGM_SEVERITY_SOURCE,
    ),
    "UNKNOWN": Advice(
        HARDWARE, "triage the DCGM error by hand before the node takes work", DCGM_SEVERITY_SOURCE
    ),
    "TRIAGE": Advice(
        HARDWARE, "triage the DCGM error by hand before the node takes work", DCGM_SEVERITY_SOURCE
    ),
    "CONFIG": Advice(CONFIGURATION, PROVISION, f"{DCGM_SEVERITY_SOURCE}; {GPUNODE_OWNS}"),
    "RESET": Advice(HARDWARE, "drain the node and reset the GPU", DCGM_SEVERITY_SOURCE),
}
# A DCGM failure without a severity (older releases, a Fail with no warning): by the test's
# category in the document (DCGM 4's category names, dcgmi/Diag.cpp).
DCGM_CATEGORY: dict[str, Advice] = {
    "Deployment": Advice(
        CONFIGURATION, PROVISION, f"DCGM's Deployment tests check the software; {GPUNODE_OWNS}"
    ),
}
DCGM_DEFAULT = Advice(
    HARDWARE,
    "reset the GPU and re-run DCGM's diagnostic; contact NVIDIA support if it fails again",
    "DCGM's Hardware, Integration, Stress and Performance tests measure the GPU itself",
)
DCGM_NOT_MEASURED = Advice(
    HARNESS,
    "make the plugin run (DCGM skipped it on every GPU), then re-accept",
    HARNESS_SOURCE,
)

# A profile's required coverage not met (check.coverage_check): the test setup could not
# measure what the profile needs, which says nothing against the node.
COVERAGE = Advice(
    HARNESS,
    "make the check measurable on the node (the runner, the image, the profile's tools), "
    "then re-accept",
    f"{HARNESS_SOURCE}; the profile's hardware.acceptance.require_measured",
)

HARNESS_RUN = Advice(
    HARNESS,
    "read the error; fix the test setup (image, container runtime, executor), then re-accept",
    HARNESS_SOURCE,
)
_SLOW_GPU = Advice(
    HARDWARE,
    "check the GPU's clocks, throttling and PCIe link, reset it and re-accept; contact NVIDIA "
    "support if it stays below its floor",
    "gpunode: a GPU below its own floor or the node's median is the GPU or its slot",
)
_LINK = Advice(
    HARDWARE,
    "check mechanicals: reseat the board, its riser or cable, then re-accept",
    "NVIDIA Xid catalog, bucket CHECK_MECHANICALS; Linux pcieaer-howto",
)
_LOAD = Advice(
    TRANSIENT,
    "re-accept; if it fails again, check the data disks (nvme smart-log) or the file system",
    "gpunode: figures under load vary with what else runs; a failing disk fails again",
)

# Check name (exact, or a prefix ending in ".") -> advice; the first match wins.
RULES: tuple[tuple[str, Advice], ...] = (
    # What gpunode owns on the node: the pinned stack, the loaded driver, the units it needs.
    ("versions.installed", Advice(CONFIGURATION, PROVISION, GPUNODE_OWNS)),
    (
        "versions.driver_loaded",
        Advice(
            CONFIGURATION,
            "run gpunode provision (it reboots onto the pinned driver), then re-accept",
            f"{GPUNODE_OWNS}; domain.md: Driver/library version mismatch until reboot",
        ),
    ),
    (
        "versions.nccl_loaded",
        Advice(
            CONFIGURATION,
            "rebuild the training image from the stack (gpunode up), then re-accept",
            "gpunode builds the training image from the stack's NCCL pin",
        ),
    ),
    ("stack_id", Advice(CONFIGURATION, PROVISION, GPUNODE_OWNS)),
    ("services.active", Advice(CONFIGURATION, PROVISION, GPUNODE_OWNS)),
    ("gpu.query", Advice(CONFIGURATION, PROVISION, f"{GPUNODE_OWNS}: nvidia-smi is the driver's")),
    (
        "gpu.model",
        Advice(
            CONFIGURATION,
            "put the node in the group of its GPU model, or fix the group's hardware profile",
            "the inventory's hardware profile (hardware.yml)",
        ),
    ),
    (
        "os.supported",
        Advice(
            CONFIGURATION,
            "install an OS the group is pinned for, or pin the group for this OS",
            "the group's stack lock (stack.lock.yml)",
        ),
    ),
    (
        "allreduce.transport",
        Advice(
            CONFIGURATION,
            f"{PROVISION} (RDMA stack, nvidia_peermem, the container's devices)",
            "domain.md: NCCL falls back to NET/Socket without the verbs devices or peermem",
        ),
    ),
    (
        "multinode.transport",
        Advice(
            CONFIGURATION,
            f"{PROVISION} (RDMA stack, nvidia_peermem, the container's devices)",
            "domain.md: NCCL falls back to NET/Socket without the verbs devices or peermem",
        ),
    ),
    # Each transport rule (fabric, gpudirect_rdma, ofi_plugin_version, ...) as its check.
    *(
        (
            f"{stage}.transport.",
            Advice(
                CONFIGURATION,
                f"{PROVISION} (RDMA stack, nvidia_peermem, the container's devices, the pinned "
                "OFI plugin)",
                "domain.md: NCCL falls back to NET/Socket without the verbs devices or peermem",
            ),
        )
        for stage in ("allreduce", "multinode")
    ),
    (
        "gpudirect.kernel",
        Advice(
            CONFIGURATION,
            "load nvidia_peermem (modprobe nvidia-peermem, after the RDMA stack) or run the open "
            "GPU kernel module on Linux >= 5.12 for DMA-BUF, then re-accept",
            "NVIDIA GPU Operator docs, GPUDirect RDMA: DMA-BUF or the nvidia-peermem module",
        ),
    ),
    # The node's parts.
    (
        "gpu.count",
        Advice(
            HARDWARE,
            "reboot the node; if a GPU is still missing, check mechanicals (power, seating), "
            "then contact NVIDIA support",
            "NVIDIA Xid catalog: XID 79 (RESTART_BM), XID 54 (CHECK_MECHANICALS)",
        ),
    ),
    (
        "health.ecc",
        Advice(HARDWARE, "reset the GPU (nvidia-smi -r) or reboot the node", MEM_ERRORS),
    ),
    ("health.row_remap", Advice(HARDWARE, "reset the GPU (nvidia-smi -r)", MEM_ERRORS)),
    ("health.retired_pages", Advice(HARDWARE, "reset the GPU or reboot the node", MEM_ERRORS)),
    (
        "health.recovery_action",
        Advice(HARDWARE, "do the recovery action the driver names (reset or reboot)", MEM_ERRORS),
    ),
    (
        "health.xid",
        Advice(HARDWARE, "do the action NVIDIA's Xid catalog gives each XID", XID_CATALOG),
    ),
    ("health.pcie", _LINK),
    ("pcie.aer", _LINK),
    (
        "health.throttle",
        Advice(
            HARDWARE,
            "check the node's cooling and power supply (hardware or thermal slowdown)",
            "nvidia-smi --help-query-gpu, clocks_throttle_reasons",
        ),
    ),
    (
        "nic.",
        Advice(
            HARDWARE,
            "check the NIC's cable, transceiver and switch port, then re-accept",
            "Linux sysfs-class-infiniband, ports/<port>/state and counters/link_downed",
        ),
    ),
    ("gemm.", _SLOW_GPU),
    ("mem_bw.", _SLOW_GPU),
    ("h2d.", _SLOW_GPU),
    (
        "topology.read",
        HARNESS_RUN,
    ),
    (
        "topology.",
        Advice(
            HARDWARE,
            "reset the GPUs or reboot the node; check the NVLink boards if links stay down",
            "NVIDIA Xid catalog, bucket WORKFLOW_NVLINK_ERR",
        ),
    ),
    ("allreduce.run", HARNESS_RUN),
    ("multinode.run", HARNESS_RUN),
    (
        "allreduce.correctness",
        Advice(
            HARDWARE,
            "isolate the GPU that computes wrong results: run DCGM's diagnostic, then contact "
            "NVIDIA support",
            "domain.md: gate correctness separately (#wrong, exit 7)",
        ),
    ),
    (
        "multinode.correctness",
        Advice(
            HARDWARE,
            "isolate the node or link that corrupts data: run DCGM's diagnostic on each",
            "domain.md: gate correctness separately (#wrong, exit 7)",
        ),
    ),
    (
        "allreduce.",
        Advice(
            HARDWARE,
            "check NVLink/NVSwitch (Fabric Manager) and the NICs, then re-accept",
            "domain.md: expected large-message busbw per system",
        ),
    ),
    (
        "multinode.",
        Advice(
            HARDWARE,
            "check the blamed node's NICs, cables and switch ports, then re-accept",
            "domain.md: multi-node isolation (the blamed node, with a known-good one)",
        ),
    ),
    ("scaling.", _LOAD),
    # Figures under load: they may pass next time; a failing disk fails again.
    ("storage.run", HARNESS_RUN),
    ("data.run", HARNESS_RUN),
    ("train.run", HARNESS_RUN),
    ("gpu_perf.run", HARNESS_RUN),
    ("checkpoint.roundtrip", HARNESS_RUN),
    ("storage.", _LOAD),
    ("data.", _LOAD),
    ("checkpoint.", _LOAD),
    ("train.", _LOAD),
    # The test setup itself.
    ("coverage", COVERAGE),
    ("runner", HARNESS_RUN),
    (
        "container.fabric",
        Advice(
            HARNESS,
            "give the ranks' container what it lacks (the container runtime or the executor "
            "dropped it, or gpunode_accept_container_options took it away), then re-accept",
            f"{HARNESS_SOURCE}; design.md, the host-to-container contract",
        ),
    ),
    ("container.", HARNESS_RUN),
    ("dcgm.run", HARNESS_RUN),
    (
        "executor.",
        Advice(
            TRANSIENT,
            "re-accept when the scheduler can run the node's job",
            "toolkit/acceptance/executors: a node the executor could not test has no verdict",
        ),
    ),
    ("dcgm.", DCGM_DEFAULT),
)
# A check no rule names is held for a person: never re-accepted on its own.
DEFAULT = Advice(
    HARDWARE,
    "read the check's message and fix its cause, then re-accept",
    "gpunode: a failure without a rule is not assumed to heal",
)


def advice_for(name: str) -> Advice:
    """The class and next action of a failed check by its name (``RULES``, else ``DEFAULT``)."""
    for key, advice in RULES:
        if name == key or (key.endswith(".") and name.startswith(key)):
            return advice
    return DEFAULT


def leading(classes: list[str | None] | tuple[str | None, ...]) -> str | None:
    """The most consequential of ``classes`` (``CLASSES`` order), None when there is none."""
    present = {c for c in classes if c}
    return next((c for c in CLASSES if c in present), None)


def worst(advices: list[Advice]) -> Advice | None:
    """One advice for several (an XID check with several XIDs): the leading class, every
    distinct action of that class, and their sources."""
    top = leading([a.failure_class for a in advices])
    if top is None:
        return None
    chosen = [a for a in advices if a.failure_class == top]
    actions = list(dict.fromkeys(a.action for a in chosen))
    sources = list(dict.fromkeys(a.source for a in chosen))
    return Advice(top, "; ".join(actions), "; ".join(sources))
