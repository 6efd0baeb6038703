"""A certificate's document: its schema (version 2; version 1, before the node passport, is
still read), its canonical bytes, and how one is built from an acceptance run's result of a
ready node."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from toolkit.config import format_loc
from toolkit.errors import ToolkitError
from toolkit.records import runs

FORMAT = "gpunode-cert"
VERSION = 2  # 2: the node passport at issue time (`passport`); 1 has none
FOLDER = "certs"  # inside a run folder
SUFFIX = ".cert"
SHA256_RE = r"^sha256:[0-9a-f]{64}\Z"
# lsblk TYPE values of block devices that sit on disks rather than being disks (lsblk(8)).
_STACKED_TYPES = ("part", "lvm", "crypt", "dm", "mpath", "md", "rom")


class CertError(ToolkitError):
    """A certificate could not be made (the signing key is unusable, ssh-keygen failed)."""


# --- the schema -------------------------------------------------------------------------------


class _Model(BaseModel):
    # Python's re: the patterns are gpunode's own (runs.RUN_ID anchors with \Z), and `$` would
    # accept a trailing newline there.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, regex_engine="python-re")


class System(_Model):
    """The machine as its firmware names it (DMI)."""

    vendor: str | None
    product_name: str | None
    product_serial: str | None
    board_serial: str | None


class Gpu(_Model):
    """One GPU as ``nvidia-smi --query-gpu`` reports it."""

    index: int = Field(ge=0)
    name: str | None
    serial: str | None
    uuid: str | None
    pci_bus_id: str | None
    vbios_version: str | None


class Disk(_Model):
    """One disk reachable under /dev/disk/by-id; ``data`` when the profile lists its serial."""

    name: str
    model: str | None
    serial: str | None
    data: bool


class Nic(_Model):
    """One network interface (loopback and bridges left out); ``physical``: a bus device."""

    name: str
    mac: str | None
    physical: bool


class Identity(_Model):
    """What the node is."""

    hostname: str
    system: System
    gpus: list[Gpu]
    disks: list[Disk]
    nics: list[Nic]


class Installed(_Model):
    """What the node runs."""

    stack_id: str = Field(pattern=r"^[0-9a-f]{12}\Z")
    lock_digest: str | None = Field(pattern=SHA256_RE)
    packages: dict[str, str | None]
    driver_loaded: str | None
    nccl_loaded: str | None
    image_id: str | None


class CheckRecord(_Model):
    """One acceptance check: its result, what it measured, the floor and where that comes from.

    ``outcome`` says whether it was measured: passed, or not measured with the ``reason``
    (``ok`` is True for both: a certificate holds no failed check). Certificates issued before
    the three outcomes have neither (their checks that were not judged cannot be told)."""

    name: str
    ok: bool
    message: str
    measured: Any
    floor: Any
    unit: str | None
    source: str
    outcome: Literal["passed", "failed", "not_measured"] | None = None
    reason: str | None = None


class Proof(_Model):
    """What the run proved, and where its raw result is kept."""

    run_id: str = Field(pattern=runs.RUN_ID.pattern)
    started: str
    finished: str
    valid_until: str | None
    checks: list[CheckRecord] = Field(min_length=1)
    # The coverage the profile required (hardware.acceptance.require_measured): each name was
    # measured, or no certificate is issued. None: issued before coverage was recorded.
    require_measured: list[str] | None = None
    result_file: str
    result_sha256: str = Field(pattern=SHA256_RE)


class PassportFlag(_Model):
    """Something the node passport says (toolkit.records.passport: a GPU swapped, a failed part
    back, remaps rising, a figure below the node's baseline or the fleet's), and the run it
    names."""

    kind: str
    message: str
    run_id: str = Field(pattern=runs.RUN_ID.pattern)


class GpuSeen(_Model):
    """A GPU board the node has held, and the first and last run that saw it there."""

    serial: str | None
    uuid: str | None
    first_run: str = Field(pattern=runs.RUN_ID.pattern)
    last_run: str = Field(pattern=runs.RUN_ID.pattern)


class PassportSummary(_Model):
    """The node's passport at issue time, this run included: how far it reaches back, every
    GPU seen in the node, and the flags. Flags inform; they never make a node not ready."""

    observed_runs: int = Field(ge=1)
    since: str = Field(pattern=runs.RUN_ID.pattern)
    gpus_seen: list[GpuSeen]
    flags: list[PassportFlag]


class Certificate(_Model):
    """The document of a certificate (version 2; version 1 has no passport)."""

    format: Literal["gpunode-cert"]
    version: Literal[1, 2]
    verdict: Literal["ready"]
    host: str
    group: str
    identity: Identity
    installed: Installed
    proof: Proof
    passport: PassportSummary | None = None

    @model_validator(mode="after")
    def _all_passed(self) -> Certificate:
        failed = [c.name for c in self.proof.checks if not c.ok or c.outcome == "failed"]
        if failed:
            raise ValueError(
                f"a ready certificate cannot carry failed checks ({', '.join(failed)})"
            )
        missing = uncovered(self.proof.require_measured or [], self.proof.checks)
        if missing:
            raise ValueError(
                "a ready certificate cannot be below its required coverage: not measured "
                + "; ".join(missing)
            )
        if (self.version == 2) != (self.passport is not None):
            raise ValueError("version 2 carries the node passport (passport), version 1 none")
        return self


def uncovered(required: Sequence[str], checks: Sequence[CheckRecord]) -> list[str]:
    """Each required check (or family: ``gemm`` for ``gemm.gpu0``) that no check measured, or
    that a check under it did not measure, with why (``check.coverage_check``'s rule)."""
    missing = []
    for name in required:
        under = [c for c in checks if c.name == name or c.name.startswith(name + ".")]
        if not under:
            missing.append(f"{name} (no such check ran)")
        missing += [f"{c.name} ({c.reason})" for c in under if c.outcome == "not_measured"]
    return missing


def validate_document(text: bytes | str) -> Certificate:
    """The document checked against the schema.

    Raises:
        ValueError: Every problem, each naming its key path and the rule.
    """
    try:
        return Certificate.model_validate_json(text)
    except ValidationError as err:
        problems = []
        for error in err.errors(include_url=False):
            loc = [p for p in error["loc"] if not (isinstance(p, str) and "[" in p)]
            problems.append(f"{format_loc(loc)}: {error['msg']}")
        raise ValueError("; ".join(problems)) from None


def render(document: Mapping[str, Any]) -> bytes:
    """The canonical bytes of a document: sorted keys, two-space indent, ASCII, one newline."""
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=True, allow_nan=False)
    return (text + "\n").encode("ascii")


# --- building a document ---------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    """``sha256:<hex>`` of a file's bytes (what ``sha256sum`` prints)."""
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def disks_from(
    lsblk: Mapping[str, Any] | None,
    by_id: Iterable[Mapping[str, Any]],
    data_serials: Collection[str],
) -> list[dict[str, Any]]:
    """The node's disks: every device that a /dev/disk/by-id name reaches and that lsblk
    lists as a top-level device (partitions, arrays, mappings and optical drives left out),
    with lsblk's model and serial. Sorted by serial, then name."""
    devices = {str(d.get("maj:min")): d for d in (lsblk or {}).get("blockdevices") or []}
    seen: dict[str, str] = {}
    for link in by_id:
        devnum = str(link.get("maj_min"))
        seen.setdefault(devnum, str(link.get("target") or link.get("name")))
    disks = []
    for devnum, name in seen.items():
        device = devices.get(devnum)
        if device is None:
            continue  # a partition (lsblk -d lists only top-level devices)
        kind = str(device.get("type") or "")
        if kind in _STACKED_TYPES or kind.startswith("raid"):
            continue
        serial = device.get("serial") or None
        disks.append(
            {
                "name": name,
                "model": device.get("model") or None,
                "serial": serial,
                "data": serial is not None and serial in data_serials,
            }
        )
    return sorted(disks, key=lambda d: (d["serial"] or "", d["name"]))


def check_source(name: str, floor: Any, spec: Any, group: str) -> str:
    """Where a check's floor comes from: the floor's own source, the profile, or the rule."""
    where = f"group {group} hardware.acceptance"
    if getattr(spec, "profile", None):
        where += f" (profile {spec.profile})"
    if "busbw@" in name:
        floors = spec.multi_node_allreduce if name.startswith("multinode") else spec.allreduce
        size = name.split("@", 1)[1]
        for candidate in floors:
            if candidate.size == size and candidate.source:
                return f"{candidate.source}; {where}"
        return where
    transport = getattr(spec, "transport", None)
    if ".transport." in name and transport is not None and transport.source:
        return f"{transport.source}; {where}"
    return where if floor is not None else "gpunode acceptance rule"


def build(
    *,
    host: str,
    group: str,
    result: Mapping[str, Any],
    checks: Sequence[Mapping[str, Any]],
    spec: Any,
    data_serials: Collection[str],
    stack_id: str,
    lock_digest: str | None,
    image_id: str | None,
    run_id: str,
    started: str,
    finished: str,
    valid_until: str | None,
    result_file: str,
    result_sha256: str,
    passport: Mapping[str, Any],
) -> dict[str, Any]:
    """The certificate document of one ready node, checked against the schema; ``passport``
    is the node's passport at issue time (``toolkit.records.passport.summary``).

    Raises:
        CertError: The node's facts do not make a valid certificate (named).
    """
    identity = result.get("identity") or {}
    dmi = identity.get("dmi") or {}
    versions = result.get("versions") or {}
    loaded = versions.get("driver_loaded")
    document = {
        "format": FORMAT,
        "version": VERSION,
        "verdict": "ready",
        "host": host,
        "group": group,
        "identity": {
            "hostname": str(identity.get("hostname") or result.get("host") or host),
            "system": {
                "vendor": dmi.get("sys_vendor"),
                "product_name": dmi.get("product_name"),
                "product_serial": dmi.get("product_serial"),
                "board_serial": dmi.get("board_serial"),
            },
            "gpus": [
                {
                    "index": gpu.get("index"),
                    "name": gpu.get("name"),
                    "serial": gpu.get("serial"),
                    "uuid": gpu.get("uuid"),
                    "pci_bus_id": gpu.get("bus_id"),
                    "vbios_version": gpu.get("vbios_version"),
                }
                for gpu in (result.get("gpus") or {}).get("list") or []
            ],
            "disks": disks_from(identity.get("lsblk"), identity.get("by_id") or [], data_serials),
            "nics": [
                {"name": n.get("name"), "mac": n.get("mac"), "physical": bool(n.get("physical"))}
                for n in identity.get("nics") or []
            ],
        },
        "installed": {
            "stack_id": stack_id,
            "lock_digest": lock_digest,
            "packages": dict(sorted((versions.get("packages") or {}).items())),
            "driver_loaded": loaded if isinstance(loaded, str) else None,
            "nccl_loaded": versions.get("nccl_loaded"),
            "image_id": image_id,
        },
        "proof": {
            "run_id": run_id,
            "started": started,
            "finished": finished,
            "valid_until": valid_until,
            "checks": [
                {
                    "name": c["name"],
                    "ok": c["ok"],
                    "message": c["message"],
                    "measured": c.get("measured"),
                    "floor": c.get("floor"),
                    "unit": c.get("unit"),
                    "source": check_source(c["name"], c.get("floor"), spec, group),
                    # What was measured and what was not, with why (never shown as passed).
                    "outcome": c.get("outcome") or ("passed" if c["ok"] else "failed"),
                    "reason": c.get("reason"),
                }
                for c in checks
            ],
            "require_measured": list(getattr(spec, "require_measured", None) or []),
            "result_file": result_file,
            "result_sha256": result_sha256,
        },
        "passport": dict(passport),
    }
    # The document as it will be read back: JSON types only (a tuple becomes a list).
    document = json.loads(render(document))
    try:
        validate_document(render(document))
    except ValueError as err:
        raise CertError(f"{host}: no certificate: {err}") from None
    return document
