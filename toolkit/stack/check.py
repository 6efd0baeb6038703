"""The one checker: every violation of the compatibility matrix by a stack on its hardware,
and of the security floors (the versions that fix published vulnerabilities)."""

from __future__ import annotations

import calendar
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from toolkit.errors import ConfigError
from toolkit.stack.matrix import Architecture, CudaRow, Fact, Matrix, Source, matrix
from toolkit.stack.models import (
    ACCEPTED_RISKS_KEY,
    AcceptedRisk,
    Hardware,
    Stack,
    parse_accepted_risks,
)
from toolkit.stack.resolve import (
    IMEX_NAME_RULE,
    IMEX_NAME_SOURCE,
    fabric_manager_enabled,
    imex_unnamed_families,
    imex_unnamed_message,
)
from toolkit.stack.security import Floor, floors
from toolkit.stack.versions import cuda_full, driver_branch, numeric, parse_nccl

Severity = Literal["error", "warning"]

# Stable rule ids and what each rule says. Reports and tests refer to these ids.
RULES: dict[str, str] = {
    "cuda.known_release": "the CUDA version is a release the matrix knows",
    "cuda.min_driver": "the driver is at least the CUDA release's minimum driver",
    "cuda.unverified_minimum": "the CUDA release's minimum driver is verified upstream",
    "cuda.minor_compat_floor": "with minor-version compatibility, the driver branch is at least "
    "the CUDA major's floor",
    "nccl.cuda_build": "NCCL's +cuda build has the toolkit's major and at most its minor",
    "cudnn.cuda_build": "cuDNN 8's +cuda build has the toolkit's major and at most its minor",
    "fabric_manager.required": "Fabric Manager is installed where NVSwitch is present",
    "fabric_manager.matches_driver": "Fabric Manager's version equals the driver's",
    "fabric_manager.not_used": "an explicit Fabric Manager version is only for NVSwitch systems "
    "managed by Fabric Manager",
    "fabric_manager.nvlsm": "a fourth-generation NVSwitch system pins NVLSM beside Fabric Manager",
    "fabric_manager.nvlsm_not_used": "NVLSM is pinned only where the NVSwitch generation needs it",
    IMEX_NAME_RULE: "an IMEX platform's driver branch has a public IMEX package name",
    "gpu.min_cuda": "the CUDA toolkit supports the GPU's compute capability",
    "gpu.min_driver": "the driver supports the GPU's compute capability",
    "gpu.open_required": "the GPU's architecture needs the open kernel modules",
    "gpu.open_unsupported": "the GPU's architecture has no open kernel modules",
    "gpu.last_driver_branch": "the driver branch still supports the GPU's architecture",
    "gpu.max_cuda_major": "the CUDA major still supports the GPU's architecture",
    "driver.open_min_branch": "open kernel modules exist on the driver branch",
    "driver.branch_known": "the driver branch is a data-center branch the matrix knows",
    "driver.branch_eol": "the driver branch is not past its end of life",
    "security.floor": "the driver and container toolkit are at least the versions that fix "
    "their published vulnerabilities",
    "security.accepted_risk": f"a version below a security floor is used only while "
    f"{ACCEPTED_RISKS_KEY} accepts each of its CVEs",
}


@dataclass(frozen=True)
class Violation:
    """One broken rule: a stable id, a message naming both values, the rule and its source."""

    rule: str
    severity: Severity
    message: str
    source: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form of ``gpunode stack check --json``."""
        return {"rule": self.rule, "message": self.message, "severity": self.severity}


def _violation(rule: str, severity: Severity, text: str, source: Source | str) -> Violation:
    message = f"{text} [rule {rule}: {RULES[rule]}; source: {source}]"
    return Violation(rule, severity, message, str(source))


def _unverified(fact: Fact | CudaRow) -> str:
    return "" if fact.verified else " (this minimum is not verified upstream)"


def check(stack: Stack, hardware: Hardware, *, today: date | None = None) -> list[Violation]:
    """Check a stack against the compatibility matrix for the group's hardware.

    Args:
        stack: The validated stack.
        hardware: The group's hardware profile.
        today: The date end-of-life rules are judged on (default: today).

    Returns:
        Every violation, errors and warnings, in a stable order; empty when coherent.
    """
    m = matrix()
    today = today or date.today()
    info = hardware.gpu.info
    arch = m.architectures[info.architecture]
    found: list[Violation] = []
    found += _cuda_driver(m, stack)
    found += _nccl(m, stack)
    found += _cudnn(m, stack)
    found += _fabric_manager(m, stack, hardware, arch)
    found += _imex(stack, hardware)
    found += _gpu(m, stack, hardware, arch)
    found += _driver(m, stack, today)
    return found


def has_errors(violations: list[Violation]) -> bool:
    """Whether any violation is an error (a stack with only warnings is coherent)."""
    return any(v.severity == "error" for v in violations)


def _cuda_row(m: Matrix, cuda: str) -> tuple[CudaRow | None, list[Violation]]:
    row = m.cuda_row(cuda)
    if row is not None:
        return row, []
    major, minor, _patch = numeric(cuda)
    source = m.sources["cuda_release_notes"]
    lower = [r for r in m.cuda_rows_of_minor(major, minor) if numeric(r.cuda[0]) < numeric(cuda)]
    if lower:
        nearest = lower[-1]
        text = (
            f"CUDA {cuda} is not in the matrix; its minimum driver is taken from CUDA "
            f"{nearest.release} ({nearest.min_driver})"
        )
        return nearest, [_violation("cuda.known_release", "warning", text, source)]
    known = sorted({c for r in m.cuda_rows for c in r.cuda}, key=numeric)
    nearby = [c for c in known if numeric(c)[:1] == (major,)] or known
    text = (
        f"CUDA {cuda} is not a CUDA release the matrix knows (known {major}.x releases: "
        f"{', '.join(nearby)})"
    )
    return None, [_violation("cuda.known_release", "error", text, source)]


def _cuda_driver(m: Matrix, stack: Stack) -> list[Violation]:
    cuda = cuda_full(stack.cuda)
    driver = stack.driver.version
    row, found = _cuda_row(m, cuda)
    if row is None:
        return found
    if not row.verified:
        found.append(
            _violation(
                "cuda.unverified_minimum",
                "warning",
                f"the minimum driver {row.min_driver} of CUDA {row.release} is not verified "
                "against NVIDIA's release notes; check it before relying on driver "
                f"{driver}",
                row.source,
            )
        )
    if numeric(driver) >= numeric(row.min_driver):
        return found
    base = (
        f"driver {driver} is below the minimum driver {row.min_driver} of CUDA {cuda} "
        f"(CUDA {row.release})"
    )
    if not stack.cuda_minor_version_compat:
        found.append(_violation("cuda.min_driver", "error", base, row.source))
        return found
    major = numeric(cuda)[0]
    floor = m.cuda_majors.get(major)
    compat_source = m.sources["cuda_compatibility"]
    found.append(
        _violation(
            "cuda.min_driver",
            "warning",
            base + "; allowed because the stack opts into cuda_minor_version_compat, but PTX "
            f'JIT of code built with CUDA {cuda} will fail on driver {driver} ("the provided '
            'PTX was compiled with an unsupported toolchain") and newer CUDA features are '
            "unavailable",
            f"{row.source}; {compat_source}",
        )
    )
    branch = driver_branch(driver)
    if floor is None or branch < floor.min_driver_branch:
        needed = f"R{floor.min_driver_branch}" if floor else "a known floor"
        found.append(
            _violation(
                "cuda.minor_compat_floor",
                "error",
                f"driver {driver} (R{branch}) cannot run CUDA {cuda} even with minor-version "
                f"compatibility: CUDA {major}.x needs {needed} or later",
                floor.source if floor else compat_source,
            )
        )
    return found


def _build_rule(
    rule: str, what: str, pin: str, build_major: int, build_minor: int, cuda: str, source: Source
) -> list[Violation]:
    major, minor, _patch = numeric(cuda)
    if build_major == major and build_minor <= minor:
        return []
    why = (
        f"the build's major must be {major}"
        if build_major != major
        else f"the build's minor must be at most {minor}"
    )
    text = (
        f"{what} {pin} is built for CUDA {build_major}.{build_minor}, but the toolkit is "
        f"CUDA {cuda}: {why}"
    )
    return [_violation(rule, "error", text, source)]


def _nccl(m: Matrix, stack: Stack) -> list[Violation]:
    pin = parse_nccl(stack.nccl)
    return _build_rule(
        "nccl.cuda_build",
        "NCCL",
        stack.nccl,
        pin.cuda_major,
        pin.cuda_minor,
        cuda_full(stack.cuda),
        m.nccl.source,
    )


def _cudnn(m: Matrix, stack: Stack) -> list[Violation]:
    if stack.cudnn is None or "+cuda" not in stack.cudnn:
        return []
    build = stack.cudnn.rsplit("+cuda", 1)[1]
    build_major, build_minor = (int(p) for p in build.split("."))
    return _build_rule(
        "cudnn.cuda_build",
        "cuDNN",
        stack.cudnn,
        build_major,
        build_minor,
        cuda_full(stack.cuda),
        m.sources["cudnn_install"],
    )


def _fabric_manager(
    m: Matrix, stack: Stack, hardware: Hardware, arch: Architecture
) -> list[Violation]:
    found = []
    gpu = hardware.gpu
    fm = stack.fabric_manager
    source = m.fabric_manager.source
    uses_imex = arch.fabric is not None and arch.fabric.value == "imex"
    explicit = fm not in ("auto", "none")
    if gpu.nvswitch and not uses_imex and fm == "none":
        found.append(
            _violation(
                "fabric_manager.required",
                "error",
                f"fabric_manager is none, but hardware.gpu.nvswitch is true ({gpu.count}x "
                f"{gpu.model}): without Fabric Manager CUDA fails with error 802",
                source,
            )
        )
    if explicit and fm != stack.driver.version:
        found.append(
            _violation(
                "fabric_manager.matches_driver",
                "error",
                f"fabric_manager {fm} differs from driver {stack.driver.version}",
                source,
            )
        )
    if explicit and uses_imex:
        assert arch.fabric is not None
        found.append(
            _violation(
                "fabric_manager.not_used",
                "warning",
                f"fabric_manager {fm} is set, but {gpu.model} ({arch.name}) uses IMEX instead "
                "of Fabric Manager; it will not be installed",
                arch.fabric.source,
            )
        )
    elif explicit and not gpu.nvswitch:
        found.append(
            _violation(
                "fabric_manager.not_used",
                "warning",
                f"fabric_manager {fm} is set, but hardware.gpu.nvswitch is false; it will not "
                "be installed",
                source,
            )
        )
    needs_nvlsm = fabric_manager_enabled(stack, hardware) and gpu.info.nvlsm
    if needs_nvlsm and stack.nvlsm is None:
        found.append(
            _violation(
                "fabric_manager.nvlsm",
                "error",
                f"{gpu.model} with NVSwitch needs the NVLink Subnet Manager (NVLSM) beside "
                f"Fabric Manager {stack.driver.version}: without it Fabric Manager fails to start "
                "(NV_WARN_NOTHING_TO_DO) and CUDA with cudaErrorSystemNotReady (802); pin it "
                '(stack.nvlsm, e.g. "2025.06.10")',
                source,
            )
        )
    elif stack.nvlsm is not None and not needs_nvlsm:
        found.append(
            _violation(
                "fabric_manager.nvlsm_not_used",
                "warning",
                f"nvlsm {stack.nvlsm} is pinned, but {gpu.model}"
                + (" with NVSwitch" if gpu.nvswitch else " without NVSwitch")
                + " does not use it; it will not be installed",
                source,
            )
        )
    return found


def _imex(stack: Stack, hardware: Hardware) -> list[Violation]:
    """An IMEX platform on a branch NVIDIA names no IMEX package for: refused before the lock
    or any host is touched, rather than guessed."""
    families = imex_unnamed_families(stack, hardware)
    if not families:
        return []
    text = f"{hardware.gpu.model}: {imex_unnamed_message(stack)} (families: {', '.join(families)})"
    return [_violation(IMEX_NAME_RULE, "error", text, IMEX_NAME_SOURCE)]


def _gpu(m: Matrix, stack: Stack, hardware: Hardware, arch: Architecture) -> list[Violation]:
    found = []
    info = hardware.gpu.info
    gpu = f"{hardware.gpu.model} ({arch.name}, compute capability {info.compute_capability})"
    cuda = cuda_full(stack.cuda)
    driver = stack.driver.version
    cc = m.compute_capabilities.get(info.compute_capability)
    if cc is not None and cc.min_cuda is not None and numeric(cuda) < numeric(cc.min_cuda.value):
        found.append(
            _violation(
                "gpu.min_cuda",
                "error",
                f"{gpu} needs CUDA {cc.min_cuda.value} or later, but the stack pins CUDA "
                f"{cuda}{_unverified(cc.min_cuda)}",
                cc.min_cuda.source,
            )
        )
    if (
        cc is not None
        and cc.min_driver is not None
        and numeric(driver) < numeric(cc.min_driver.value)
    ):
        found.append(
            _violation(
                "gpu.min_driver",
                "error",
                f"{gpu} needs driver {cc.min_driver.value} or later, but the stack pins driver "
                f"{driver}{_unverified(cc.min_driver)}",
                cc.min_driver.source,
            )
        )
    flavour = stack.driver.flavour
    if arch.flavour.value == "open_required" and flavour != "open":
        found.append(
            _violation(
                "gpu.open_required",
                "error",
                f"{gpu} needs the open kernel modules, but driver.flavour is {flavour}",
                arch.flavour.source,
            )
        )
    if arch.flavour.value == "proprietary_only" and flavour == "open":
        found.append(
            _violation(
                "gpu.open_unsupported",
                "error",
                f"{gpu} has no open kernel modules (proprietary only), but driver.flavour is "
                f"{flavour}",
                arch.flavour.source,
            )
        )
    branch = driver_branch(driver)
    last = arch.last_driver_branch
    if last is not None and branch > int(last.value):
        found.append(
            _violation(
                "gpu.last_driver_branch",
                "error",
                f"{gpu} is unsupported after driver branch R{last.value}, but the stack pins "
                f"driver {driver} (R{branch})",
                last.source,
            )
        )
    max_major = arch.max_cuda_major
    if max_major is not None and numeric(cuda)[0] > int(max_major.value):
        found.append(
            _violation(
                "gpu.max_cuda_major",
                "error",
                f"{gpu} is supported up to CUDA {max_major.value}.x, but the stack pins CUDA "
                f"{cuda}",
                max_major.source,
            )
        )
    return found


def _driver(m: Matrix, stack: Stack, today: date) -> list[Violation]:
    found = []
    driver = stack.driver.version
    branch = driver_branch(driver)
    open_min = int(m.open_min_branch.value)
    if stack.driver.flavour == "open" and branch < open_min:
        found.append(
            _violation(
                "driver.open_min_branch",
                "error",
                f"driver {driver} (R{branch}) has no open kernel modules: they exist from "
                f"R{open_min}",
                m.open_min_branch.source,
            )
        )
    known = m.branches.get(branch)
    if known is None:
        listed = ", ".join(f"R{b}" for b in sorted(m.branches))
        found.append(
            _violation(
                "driver.branch_known",
                "warning",
                f"driver {driver} is on branch R{branch}, which is not a data-center branch "
                f"the matrix knows ({listed}); its support status is unknown",
                m.sources["driver_branches"],
            )
        )
    elif _past_eol(known.eol, today):
        found.append(
            _violation(
                "driver.branch_eol",
                "warning",
                f"driver {driver} is on branch R{branch} ({known.kind}), which reached its end "
                f"of life in {known.eol} (today is {today.isoformat()})",
                known.source,
            )
        )
    return found


def _past_eol(eol: str, today: date) -> bool:
    year, month = (int(p) for p in eol.split("-"))
    last_day = date(year, month, calendar.monthrange(year, month)[1])
    return today > last_day


_COMPONENTS = {"container_toolkit": "container toolkit", "driver": "driver"}


def security(
    stack: Stack, accepted: Sequence[AcceptedRisk] = (), *, today: date | None = None
) -> list[Violation]:
    """Check a stack against the security floors (toolkit/stack/security.yml).

    A version below a floor is an error naming the component, the version, the CVEs and
    the fixed version, unless every CVE of that floor is accepted (an acceptance holds
    through its ``until`` day): then it is a warning naming the accepted CVEs.

    Args:
        stack: The validated stack.
        accepted: The risks the inventory accepts (``gpunode_accepted_risks``).
        today: The date acceptances are judged on (default: today).

    Returns:
        One violation per floor the stack is below, in the data file's order.
    """
    today = today or date.today()
    found = []
    for floor in floors():
        version = _version_of(stack, floor)
        if version is None or numeric(version) >= numeric(floor.version):
            continue
        found.append(_below_floor(floor, version, accepted, today))
    return found


def security_report(stack: Stack, host_vars: Mapping[str, Any]) -> list[dict[str, str]]:
    """The security findings of a node's pinned stack as acceptance records them in run.json
    (informational: the verdict does not use them; ``gpunode stack check`` refuses them).

    Args:
        stack: The node's validated stack.
        host_vars: The node's variables; their ``gpunode_accepted_risks`` is applied. A
            malformed value (``stack check`` refuses it) accepts nothing here.
    """
    try:
        accepted = parse_accepted_risks(host_vars.get(ACCEPTED_RISKS_KEY, []), ACCEPTED_RISKS_KEY)
    except ConfigError:
        accepted = ()
    return [v.to_dict() for v in security(stack, accepted)]


def _version_of(stack: Stack, floor: Floor) -> str | None:
    if floor.component == "container_toolkit":
        return stack.container_toolkit
    driver = stack.driver.version
    return driver if driver_branch(driver) == floor.branch else None


def _below_floor(
    floor: Floor, version: str, accepted: Sequence[AcceptedRisk], today: date
) -> Violation:
    what = _COMPONENTS[floor.component]
    branch = f" (R{floor.branch})" if floor.branch is not None else ""
    base = (
        f"{what} {version}{branch} is below {floor.version}, which fixes "
        f"{', '.join(floor.cves)} ({floor.severity})"
    )
    holding = {r.cve: r for r in accepted if r.until is None or r.until >= today}
    expired = [
        f"{r.cve} (until {r.until})"
        for r in accepted
        if r.cve in floor.cves and r.cve not in holding
    ]
    pending = [cve for cve in floor.cves if cve not in holding]
    if pending:
        text = (
            f"{base}: pin {what} {floor.version} or later, or accept the risk of "
            f"{', '.join(pending)} in {ACCEPTED_RISKS_KEY}"
        )
        if expired:
            text += f"; expired acceptances: {', '.join(expired)}"
        return _violation("security.floor", "error", text, floor.source)
    reasons = "; ".join(_acceptance(holding[cve]) for cve in floor.cves)
    return _violation(
        "security.accepted_risk", "warning", f"{base}; risk accepted: {reasons}", floor.source
    )


def _acceptance(risk: AcceptedRisk) -> str:
    until = f"until {risk.until}" if risk.until else "no end date"
    return f"{risk.cve} ({until}): {risk.reason}"
