"""The GPU memory-error rules: which of nvidia-smi's counters make a node not ready.

Pure, and the one owner of these rules. The runner (``toolkit.facts.nvidia.memory_health``)
reads per GPU, from ``nvidia-smi -q``: ``ecc_uncorrected_volatile`` and
``ecc_uncorrected_aggregate`` (uncorrectable ECC errors since the driver loaded, and over the
board's life),
``retired_pages_pending`` (page retirement, Volta and older), ``remapped_rows`` (row
remapping, Ampere and newer: ``correctable``, ``uncorrectable``, ``pending``, ``failure``) and
``recovery_action`` (newer drivers). None means the GPU or driver does not report it: shown
as "not reported", never a reason on its own.

Only the counters that say the GPU needs something *now* fail a node. The lifetime counts
(aggregate ECC, rows already remapped) are history: a row remapped and activated by a reset
is the repair working, so they are shown in the ``health.ecc`` message and kept in run.json,
never judged (NVIDIA's guide below; leptonai/gpud stopped marking such GPUs unhealthy in its
PR #108, "do not unhealthy when driver recovers uncorrectable ecc errors").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# NVIDIA, "NVIDIA GPU Memory Error Management", Error Recovery and Response Flags
# (https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/error-recovery-and-response-flags.html)
MEM_ERROR_FLAGS = "NVIDIA GPU Memory Error Management, Error Recovery and Response Flags"


@dataclass(frozen=True)
class Rule:
    """One counter that fails a GPU, with what it asks for and where that comes from."""

    check: str
    counter: str  # as nvidia-smi names it
    asks: str  # what the GPU needs, in the failing message
    source: str
    value: Callable[[dict[str, Any]], Any]  # the counter in one GPU's runner record
    fails: Callable[[Any], bool]
    action: str = ""  # the next action, imperative (the failed check's, failure.py's class)


def _rows(key: str) -> Callable[[dict[str, Any]], Any]:
    return lambda gpu: (gpu.get("remapped_rows") or {}).get(key)


RULES: tuple[Rule, ...] = (
    # Volatile counts restart when the driver loads: an uncorrectable error since then is an
    # error of this boot that no reset has cleared. Meta's GCM judges
    # `ecc_uncorrected_volatile_total` (facebookresearch/gcm, health_checks check-nvidia-smi);
    # the aggregate count is the board's history and is only shown.
    Rule(
        "health.ecc",
        "ecc.errors.uncorrected.volatile.total",
        "uncorrectable ECC errors since the driver loaded: reset the GPU or reboot",
        "NVIDIA GPU Memory Error Management; Meta GCM check-nvidia-smi",
        lambda gpu: gpu.get("ecc_uncorrected_volatile"),
        lambda v: isinstance(v, int) and v > 0,
        action="reset the GPU (nvidia-smi -r) or reboot the node",
    ),
    # "Row-remapping pending flag: this flag indicates that row-remapping will happen at the
    # next GPU reset" (MEM_ERROR_FLAGS); GCM's row_remap check is CRITICAL on a pending remap.
    Rule(
        "health.row_remap",
        "remapped_rows.pending",
        "a row remap waits for the next GPU reset: reset the GPU",
        f"{MEM_ERROR_FLAGS}; Meta GCM row_remap",
        _rows("pending"),
        lambda v: v is True,
        action="reset the GPU (nvidia-smi -r) to activate the remap",
    ),
    # "Row-remapping failure flag" (MEM_ERROR_FLAGS), defined by the guide's "RMA Policy
    # Thresholds for Row-Remapping": the GPU is an RMA candidate; GCM's row_remap_failed
    # check calls it a hardware issue requiring GPU replacement.
    Rule(
        "health.row_remap",
        "remapped_rows.failure",
        "a row remapping failed: the GPU meets NVIDIA's RMA policy, replace it",
        f"{MEM_ERROR_FLAGS}, RMA Policy Thresholds; Meta GCM row_remap_failed",
        _rows("failure"),
        lambda v: v is True,
        action="contact NVIDIA support: replace the GPU (RMA)",
    ),
    # Dynamic page retirement (Volta and older): a page retired while the driver runs is only
    # blacklisted at the next driver load (NVIDIA, Dynamic Page Retirement, Visibility: XID 63
    # "New retired page, reload the driver to activate"); GCM's gpu_retired_pages check is
    # CRITICAL on pending > 0.
    Rule(
        "health.retired_pages",
        "retired_pages.pending",
        "a retired page waits for the driver to reload: reboot or reset the GPU",
        "NVIDIA Dynamic Page Retirement, Visibility; Meta GCM gpu_retired_pages",
        lambda gpu: gpu.get("retired_pages_pending"),
        lambda v: v is True,
        action="reset the GPU or reboot the node to reload the driver",
    ),
    # The recovery action flag: None ("the GPU can be immediately used again"), Reset
    # ("requires a reset to recover"), Reboot, Drain P2P, Drain and Reset (MEM_ERROR_FLAGS;
    # NVML nvmlDeviceGpuRecoveryAction_t). DCGM's health watch did not read it
    # (NVIDIA/DCGM#263: a GPU stuck at "Reset" reported Healthy).
    Rule(
        "health.recovery_action",
        "gpu_recovery_action",
        "the driver asks for this recovery action before the GPU is used again",
        MEM_ERROR_FLAGS,
        lambda gpu: gpu.get("recovery_action"),
        lambda v: isinstance(v, str) and v.strip().lower() not in {"", "none"},
        action="do the recovery action the driver names (Reset: nvidia-smi -r; Reboot: reboot)",
    ),
)


@dataclass(frozen=True)
class Finding:
    """One check's outcome over every GPU."""

    check: str
    ok: bool
    message: str
    measured: list[str]
    actions: tuple[str, ...] = ()  # the failing rules' actions, in RULES order
    sources: tuple[str, ...] = ()


def _gpu(gpu: dict[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('bus_id')})"


def _shown(value: Any) -> str:
    if value is True:
        return "Yes"
    if value is False:
        return "No"
    return str(value)


def history(gpus: list[dict[str, Any]]) -> str:
    """The lifetime counts, per GPU that has any: shown, never judged."""
    parts = []
    for gpu in gpus:
        rows = gpu.get("remapped_rows") or {}
        counts = {
            "aggregate uncorrectable ECC": gpu.get("ecc_uncorrected_aggregate"),
            "rows remapped (uncorrectable)": rows.get("uncorrectable"),
            "rows remapped (correctable)": rows.get("correctable"),
        }
        seen = [f"{name} {n}" for name, n in counts.items() if isinstance(n, int) and n > 0]
        if seen:
            parts.append(f"{_gpu(gpu)}: {', '.join(seen)}")
    if not parts:
        return "lifetime counts all 0 or not reported"
    return "lifetime (history, not judged): " + "; ".join(parts)


def judge(gpus: list[dict[str, Any]], error: str | None = None) -> list[Finding]:
    """Every rule's check over the GPUs, in ``RULES`` order; one finding per check id.

    ``error`` is why ``nvidia-smi -q`` gave nothing (its counters then read not reported).
    """
    order: list[str] = []
    failing: dict[str, list[str]] = {}
    fired: dict[str, list[Rule]] = {}
    unreported: dict[str, list[str]] = {}
    for rule in RULES:
        if rule.check not in order:
            order.append(rule.check)
            failing[rule.check] = []
            unreported[rule.check] = []
        for gpu in gpus:
            value = rule.value(gpu)
            if value is None:
                unreported[rule.check].append(f"{rule.counter} on GPU {gpu.get('index')}")
            elif rule.fails(value):
                if rule not in fired.setdefault(rule.check, []):
                    fired[rule.check].append(rule)
                failing[rule.check].append(
                    f"{_gpu(gpu)}: {rule.counter} = {_shown(value)}: {rule.asks} "
                    f"(rule: {rule.source})"
                )
    findings = []
    for check in order:
        bad = failing[check]
        counters = sorted({r.counter for r in RULES if r.check == check})
        message = "; ".join(bad) if bad else f"{', '.join(counters)}: nothing asks for action"
        if unreported[check]:
            gone = unreported[check]
            more = f" (+{len(gone) - 3} more)" if len(gone) > 3 else ""
            message += f"; not reported: {', '.join(gone[:3])}{more}"
            if error:
                message += f" (nvidia-smi -q: {error})"
        if check == "health.ecc":
            message += f"; {history(gpus)}"
        rules = fired.get(check, [])
        findings.append(
            Finding(
                check,
                not bad,
                message,
                bad,
                tuple(r.action for r in rules),
                tuple(dict.fromkeys(r.source for r in rules)),
            )
        )
    return findings
