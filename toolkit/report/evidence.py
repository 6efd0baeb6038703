"""The RMA evidence pack of a node that failed (``gpunode node evidence``): one archive that
holds what a vendor's RMA asks for, signed like a certificate and verifiable offline.

Everything comes from what the node's last acceptance run recorded (``run.json`` and
``nodes/<host>.result.json`` in its run folder), so a pack can be made when the node is down,
drained or already reset: an RMA is judged on the state the failure was seen in, and a reset
clears the volatile ECC counters and the pending remap that prove it. The only member read
from the inventory as it is now is the group's stack lock; the manifest names each member's
origin (``recorded``: copied from the run folder; ``derived``: gpunode's reading of recorded
data; ``inventory``: the inventory now).

Members (one folder ``<host>-<run id>/``, names sorted, regular files only): ``failure.json``
(the failed checks with measured values, floors and their sources, each one's class and next
action with its source, the parts involved by serial, UUID and PCI address, and the commands
NVIDIA asks for next), ``summary.txt`` (the same for people), ``nvidia-smi-q.txt``,
``xid.json``, ``memory.json`` (ECC and row-remap counters of every GPU), ``dcgm.json`` (when
the run ran ``dcgmi diag``), ``passport.json`` (the node's history of the parts involved),
``stack.lock.yml``, ``SHA256SUMS`` (``sha256sum -c`` reads it), ``MANIFEST.json`` (every
other member's SHA-256, size and origin, canonical JSON as certificates are) and
``MANIFEST.json.sig`` (OpenSSH's signature of the manifest, ``ssh-keygen -Y sign -n
gpunode-evidence``, made and checked by ``toolkit.cert``'s own functions).

Nothing secret goes in: members are built from named fields, never by copying an inventory or
run file whole (the stack lock, which holds package versions, is the one file copied), so no
connection variable, password, token or key reaches the archive.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolkit.acceptance.failure import CLASSES, HARDWARE
from toolkit.acceptance.thresholds import effective
from toolkit.cert.document import check_source, render
from toolkit.cert.signature import (
    armor_of,
    check_signature,
    dearmor,
    sign,
    sign_key_from,
    split,
)
from toolkit.cert.verify import signers_file
from toolkit.config import parse_json, read_regular
from toolkit.errors import EXIT_FAILED, ConfigError, ToolkitError
from toolkit.inventory import Inventory, load_inventory
from toolkit.names import name_path
from toolkit.node import nodefile
from toolkit.records import passport, runs
from toolkit.stack.lock import lock_path

FORMAT = "gpunode-evidence"
VERSION = 1
NAMESPACE = "gpunode-evidence"  # the signature's namespace: never valid as a certificate's
FOLDER = "evidence"  # inside the run folder the pack is made from
SUFFIX = ".evidence.tar.gz"
MANIFEST = "MANIFEST.json"
SIGNATURE = "MANIFEST.json.sig"
SUMS = "SHA256SUMS"
SIGNED = (MANIFEST, SIGNATURE)  # the members the manifest cannot list
MAX_MEMBERS = 64
MAX_MEMBER_BYTES = 64 << 20  # a member (DCGM's JSON is cut at 4 MB by the runner)
MAX_TAR_BYTES = 256 << 20  # the archive unpacked: a gzip bomb stops here

# What NVIDIA asks for next, each with NVIDIA's own words for it.
RMA_PROCESS = (
    "NVIDIA, RMA Process (docs.nvidia.com/deploy/rma-process/), Tools and Diagnostics: "
    "nvidia-bug-report.sh gathers the system data NVIDIA needs and 'should be run immediately "
    "after an issue is observed'; the NVIDIA Field Diagnostic is the hardware test of the RMA "
    "checklist"
)
RMA_SYSTEM_CAUSES = (
    "NVIDIA, RMA Process: 'The RMA submission process will request information demonstrating "
    "that common system-level causes have been eliminated'"
)
DCGM_DIAG = (
    "NVIDIA DCGM User Guide, DCGM Diagnostics (docs.nvidia.com/datacenter/dcgm/latest/"
    "user-guide/dcgm-diagnostics.html): 'Level 3 and Level 4 tests to be run by an "
    "administrator as post-mortem'"
)
DCGM_REPORTING = (
    "NVIDIA DCGM User Guide, Debugging and Troubleshooting, General Problem Reporting: "
    "always include nvidia-bug-report.log.gz and the full output of dcgmi -v"
)


class EvidenceError(ToolkitError):
    """No evidence pack for this node (it was ready, or no run recorded it)."""


@dataclass(frozen=True)
class Member:
    """One file of the pack and where its bytes come from."""

    name: str
    data: bytes
    origin: str  # recorded | derived | inventory


@dataclass
class Pack:
    """A written evidence pack."""

    path: Path
    host: str
    run_id: str
    manifest: dict[str, Any]
    signer: str

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {"path": str(self.path), "signer": self.signer, "manifest": self.manifest}


# --- the run that failed ----------------------------------------------------------------------


def failed_run(
    runs_dir: Path, host: str, run_id: str | None = None
) -> tuple[runs.RunInfo, dict[str, Any], dict[str, Any]]:
    """The newest acceptance or ``up`` run that recorded ``host`` (or the run ``run_id``):
    its folder, its record and the node's entry in it.

    Raises:
        ConfigError: The run's record cannot be read (an older run is not taken instead).
        EvidenceError: No such run, or the node was ready in it.
    """
    for info in reversed(runs.list_runs(runs_dir)):
        if run_id is not None and info.run_id != run_id:
            continue
        if info.kind not in runs.EVIDENCE_KINDS or not (info.path / runs.RECORD).is_file():
            continue
        record = runs.read_record(info.path / runs.RECORD)
        node = next((n for n in record["nodes"] if n["host"] == host), None)
        if node is None:
            continue
        if node["verdict"] == "ready":
            raise EvidenceError(
                f"{host} was ready in run {info.run_id}: an evidence pack is for a node that "
                "failed (a ready node's record is its certificate: gpunode cert show)",
                EXIT_FAILED,
            )
        return info, record, node
    where = f"run {run_id}" if run_id else f"the acceptance runs in {runs_dir}"
    raise EvidenceError(f"{host}: no acceptance verdict in {where}", EXIT_FAILED)


def _slot(bus_id: Any) -> str:
    """A GPU's slot as checks and XID lines name it (``0000:18:00``, lower case)."""
    text = str(bus_id or "").lower()
    return text[4:14] if len(text) >= 14 and text.count(":") == 2 else text[:10]


def _parts(gpus: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]]) -> list[int]:
    """The indexes of the GPUs the failed checks name (by PCI slot or ``GPU <index>``)."""
    text = " ".join(
        f"{c.get('message')} {json.dumps(c.get('measured'), default=str)}" for c in failed
    ).lower()
    named = []
    for position, gpu in enumerate(gpus):
        slot = _slot(gpu.get("bus_id"))
        if (slot and slot in text) or f"gpu {gpu.get('index')} (" in text:
            named.append(position)
    return named


def _sources(inventory: Inventory, host: str, group: str) -> tuple[Any, str | None]:
    """The acceptance spec floors are read from, or why it cannot be read now."""
    try:
        _stack, hardware = inventory.host_config(host)
    except ConfigError as err:
        return None, err.message
    return effective(hardware.acceptance), None


def _source(name: str, floor: Any, spec: Any, group: str, why_not: str | None) -> str:
    if spec is not None:
        return check_source(name, floor, spec, group)
    if floor is None:
        return "gpunode acceptance rule"
    return f"group {group} hardware.acceptance (the inventory's profile cannot be read: {why_not})"


def _next_steps(leading: str | None, indexes: list[int]) -> list[dict[str, str]]:
    """The commands NVIDIA asks for next, on the node as root, each with its source."""
    if leading != HARDWARE:
        return [
            {
                "command": "",
                "why": "no failed check is classed hardware: fix what each check's action "
                "says and re-accept before asking NVIDIA for an RMA",
                "source": RMA_SYSTEM_CAUSES,
            }
        ]
    only = f" -i {','.join(str(i) for i in indexes)}" if indexes else ""
    return [
        {
            "command": "sudo nvidia-bug-report.sh",
            "why": "NVIDIA's system report (nvidia-bug-report.log.gz), run as soon as the "
            "failure is seen; attach it to the RMA",
            "source": RMA_PROCESS,
        },
        {
            "command": f"sudo dcgmi diag -r 4 -j{only}",
            "why": "DCGM's longest diagnostic on the GPUs involved (hours, the node drained); "
            "attach its JSON",
            "source": DCGM_DIAG,
        },
        {
            "command": "dcgmi -v",
            "why": "the DCGM version the diagnostic ran with",
            "source": DCGM_REPORTING,
        },
        {
            "command": "",
            "why": "the NVIDIA Field Diagnostic for this board (from NVIDIA Enterprise Support "
            "or the system vendor, run as its own guide says); attach its log",
            "source": RMA_PROCESS,
        },
    ]


# --- the members ------------------------------------------------------------------------------


def _json(value: Any) -> bytes:
    return render(json.loads(json.dumps(value, default=str)))


def _summary_text(failure: Mapping[str, Any], xids: Sequence[Mapping[str, Any]]) -> bytes:
    lines = [
        f"RMA evidence: {failure['host']} (group {failure['group']}), run {failure['run_id']}",
        f"verdict {failure['verdict']}, leading failure class {failure['failure_class']}",
        f"system: {json.dumps(failure['system'], sort_keys=True)}",
        "",
        "Failed checks:",
    ]
    for check in failure["failed_checks"]:
        lines += [
            f"- {check['name']}: {check['message']}",
            f"  measured {json.dumps(check['measured'])}, floor {json.dumps(check['floor'])}"
            f" ({check['source']})",
            f"  [{check['failure_class']}] {check['action']} ({check['action_source']})",
        ]
    lines += ["", "Parts involved:"]
    for part in failure["parts"] or [{"note": "no single GPU is named by the failed checks"}]:
        lines.append("- " + ", ".join(f"{k} {v}" for k, v in part.items()))
    lines += ["", "XID events (kernel log):"]
    lines += [f"- {x.get('time') or 'time unknown'} {x.get('line')}" for x in xids] or ["- none"]
    lines += ["", "Next, on the node:"]
    for step in failure["next_steps"]:
        lines.append(f"- {step['command'] or '(no command)'}: {step['why']}")
        lines.append(f"  source: {step['source']}")
    lines += [f"note: {note}" for note in failure["notes"]]
    return ("\n".join(lines) + "\n").encode("utf-8")


def _part_history(card: passport.Passport, serials: set[str]) -> dict[str, Any]:
    """What the passport saw of the parts involved, run by run, and its flags."""
    history = []
    for obs in card.observations:
        for gpu in obs.gpus:
            if gpu.get("serial") in serials:
                history.append(
                    {
                        "run_id": obs.run_id,
                        "kind": obs.kind,
                        "started": obs.started,
                        "node_ok": obs.ok,
                        "serial": gpu.get("serial"),
                        "uuid": gpu.get("uuid"),
                        "bus_id": gpu.get("bus_id"),
                        "remapped_rows": gpu.get("remapped_rows"),
                        "failed_here": gpu.get("bus_id") in obs.failed_slots,
                    }
                )
    return {
        "host": card.host,
        "serials": sorted(serials),
        "observed_runs": len(card.observations),
        "history": history,
        "flags": [f.to_dict() for f in card.flags],
        "problems": [p.to_dict() for p in card.problems],
    }


def members(
    inventory: Inventory,
    host: str,
    info: runs.RunInfo,
    record: Mapping[str, Any],
    node: Mapping[str, Any],
) -> list[Member]:
    """Every member of the pack but ``SHA256SUMS`` and the signed manifest."""
    result_path = name_path(info.path / "nodes", host, runs.RESULT_SUFFIX)
    result = runs.read_result(result_path) if result_path.is_file() else {}
    notes = [] if result else ["no runner result was recorded: the runner did not finish"]
    group = str(node.get("group") or "all")
    spec, why_not = _sources(inventory, host, group)
    failed = [c for c in node.get("checks") or [] if not c.get("ok")]
    if not failed:  # an older record: its failed_checks only
        failed = [{"name": c["check"], **c} for c in node.get("failed_checks") or []]
    gpus = list((result.get("gpus") or {}).get("list") or [])
    involved = [gpus[i] for i in _parts(gpus, failed)]
    classes = {c.get("failure_class") for c in failed}
    leading = next((c for c in CLASSES if c in classes), None)
    dmi = (result.get("identity") or {}).get("dmi") or {}
    failure = {
        "host": host,
        "group": group,
        "run_id": info.run_id,
        "started": record.get("started"),
        "finished": record.get("finished"),
        "verdict": node.get("verdict"),
        "failure_class": leading,
        "failed_checks": [
            {
                "name": c.get("name"),
                "message": c.get("message"),
                "measured": c.get("measured"),
                "floor": c.get("floor"),
                "unit": c.get("unit"),
                "source": _source(str(c.get("name")), c.get("floor"), spec, group, why_not),
                "failure_class": c.get("failure_class"),
                "action": c.get("action"),
                "action_source": c.get("action_source"),
            }
            for c in failed
        ],
        "system": {k: dmi.get(k) for k in ("sys_vendor", "product_name", "product_serial")}
        | {"board_serial": dmi.get("board_serial")},
        "driver_loaded": (result.get("versions") or {}).get("driver_loaded"),
        "parts": [
            {
                "index": g.get("index"),
                "name": g.get("name"),
                "serial": g.get("serial"),
                "uuid": g.get("uuid"),
                "pci_bus_id": g.get("bus_id"),
                "vbios_version": g.get("vbios_version"),
            }
            for g in involved
        ],
        "next_steps": _next_steps(
            leading, [int(g["index"]) for g in involved if g.get("index") is not None]
        ),
        "result_file": str(result_path.relative_to(info.path)),
        "result_sha256": "sha256:" + hashlib.sha256(result_path.read_bytes()).hexdigest()
        if result
        else None,
        "notes": notes,
    }
    kernel_log = result.get("kernel_log") or {}
    xids = list(kernel_log.get("xid_events") or [])
    out = [
        Member(
            "xid.json",
            _json(
                {
                    "command": kernel_log.get("command"),
                    "boot_time": kernel_log.get("boot_time"),
                    "error": kernel_log.get("error"),
                    "events": xids,
                }
            ),
            "recorded",
        ),
        Member(
            "memory.json",
            _json(
                [
                    {
                        k: g.get(k)
                        for k in (
                            "index",
                            "bus_id",
                            "serial",
                            "uuid",
                            "ecc_uncorrected_volatile",
                            "ecc_uncorrected_aggregate",
                            "retired_pages_pending",
                            "remapped_rows",
                            "recovery_action",
                        )
                    }
                    for g in gpus
                ]
            ),
            "recorded",
        ),
    ]
    smi_q = (result.get("gpus") or {}).get("smi_q")
    if isinstance(smi_q, str):
        out.append(Member("nvidia-smi-q.txt", smi_q.encode("utf-8"), "recorded"))
    else:
        notes.append("nvidia-smi -q was not recorded by this run (a runner before it kept it)")
    dcgm = result.get("dcgm")
    if isinstance(dcgm, dict):
        out.append(Member("dcgm.json", _json(dcgm), "recorded"))
    reading = passport.read_fleet(info.path.parent, [h.name for h in inventory.hosts_for(None)])
    card = passport.passport(host, reading.observations, problems=reading.problems)
    serials = {str(g["serial"]) for g in involved if g.get("serial")}
    out.append(Member("passport.json", _json(_part_history(card, serials)), "derived"))
    lock = lock_path(inventory.path, group)
    if lock.is_file():
        out.append(Member("stack.lock.yml", read_regular(lock, "YAML file"), "inventory"))
    else:
        notes.append(f"no stack lock at {lock.relative_to(inventory.path)}")
    out.append(Member("failure.json", _json(failure), "derived"))
    out.append(Member("summary.txt", _summary_text(failure, xids), "derived"))
    return out


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_of(host: str, run_id: str, finished: Any, listed: Sequence[Member]) -> dict[str, Any]:
    """The manifest document: every member's SHA-256, size and origin."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "host": host,
        "run_id": run_id,
        "finished": finished,
        "members": [
            {
                "name": m.name,
                "sha256": f"sha256:{_digest(m.data)}",
                "bytes": len(m.data),
                "origin": m.origin,
            }
            for m in sorted(listed, key=lambda m: m.name)
        ],
    }


def archive(folder: str, files: Sequence[tuple[str, bytes]], mtime: int) -> bytes:
    """A gzip'd tar of regular files under one folder, sorted by name, with fixed times,
    owners and modes: the same members make the same bytes."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in sorted(files):
            entry = tarfile.TarInfo(f"{folder}/{name}")
            entry.size, entry.mtime, entry.mode = len(data), mtime, 0o644
            entry.uid = entry.gid = 0
            entry.uname = entry.gname = ""
            tar.addfile(entry, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0)


def make(
    host: str,
    inventory_path: Path,
    *,
    sign_key: Path | None = None,
    run_id: str | None = None,
    out: Path | None = None,
    runs_dir: Path | None = None,
) -> Pack:
    """Write the signed evidence pack of a node that failed its last acceptance run.

    Args:
        host: The node (an inventory host).
        inventory_path: The inventory folder.
        sign_key: The signing key (``--sign-key``); else the inventory's ``gpunode_sign_key``.
        run_id: The run to take the failure from (default: the newest that recorded the node).
        out: Where to write the archive (default ``<run>/evidence/<host>.evidence.tar.gz``).
        runs_dir: The runs folder (default: the state directory's).

    Raises:
        ConfigError: Not a host of the inventory, no signing key, or a record that cannot be
            read (exit 2).
        EvidenceError: No acceptance run recorded the node, or it was ready (exit 1).
        CertError: ssh-keygen could not sign.
    """
    inventory = load_inventory(inventory_path)
    hosts = [h.name for h in inventory.hosts_for(None)]
    if host not in hosts:
        raise ConfigError(f"{inventory_path}: no host {host!r} (hosts: {', '.join(hosts)})")
    group_all = inventory.groups.get("all")
    key = sign_key_from(sign_key, group_all.vars if group_all else {}, inventory_path)
    if key is None:
        raise ConfigError(
            "no signing key: an evidence pack is signed as certificates are (pass --sign-key "
            "or set gpunode_sign_key, docs/certificates.md)"
        )
    runs_dir = runs_dir if runs_dir is not None else runs.runs_dir()
    info, record, node = failed_run(runs_dir, host, run_id)
    listed = members(inventory, host, info, record, node)
    sums = "".join(f"{_digest(m.data)}  {m.name}\n" for m in sorted(listed, key=lambda m: m.name))
    listed.append(Member(SUMS, sums.encode("ascii"), "derived"))
    manifest = manifest_of(host, info.run_id, record.get("finished"), listed)
    body, armor = split(sign(manifest, key, NAMESPACE))
    files = [(m.name, m.data) for m in listed] + [(MANIFEST, body), (SIGNATURE, armor)]
    started = info.started
    data = archive(f"{host}-{info.run_id}", files, int(started.timestamp()) if started else 0)
    path = out if out is not None else name_path(info.path / FOLDER, host, SUFFIX)
    nodefile.replace(str(path), data)
    return Pack(path=path, host=host, run_id=info.run_id, manifest=manifest, signer=key.fingerprint)


# --- verifying a pack -------------------------------------------------------------------------


@dataclass
class Verification:
    """The outcome of verifying one evidence pack."""

    path: Path
    manifest: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)
    signer: str | None = None

    @property
    def valid(self) -> bool:
        """Signed by the given key, and every member is the one the manifest lists."""
        return not self.problems and self.manifest is not None

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {
            "path": str(self.path),
            "valid": self.valid,
            "problems": self.problems,
            "signer": self.signer,
            "manifest": self.manifest,
        }


def read_members(data: bytes) -> tuple[str | None, dict[str, bytes], list[str]]:
    """The pack's folder, its members by name, and every problem of its form (a member that
    is not a regular file, an unsafe or repeated name, one outside the folder)."""
    problems: list[str] = []
    found: dict[str, bytes] = {}
    folder: str | None = None
    try:
        # The whole stream first: gzip checks its CRC and length only at its end, which a
        # tar reader that stops at the archive's last member never reaches.
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as unpacked:
            tar_bytes = unpacked.read(MAX_TAR_BYTES + 1)
        if len(tar_bytes) > MAX_TAR_BYTES:
            return None, {}, [f"larger than {MAX_TAR_BYTES} bytes unpacked"]
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tar:
            for count, entry in enumerate(tar):
                if count >= MAX_MEMBERS:
                    problems.append(f"more than {MAX_MEMBERS} members")
                    break
                head, _, name = entry.name.partition("/")
                folder = folder or head
                if not entry.isreg():
                    problems.append(f"member {entry.name}: not a regular file")
                    continue
                if head != folder or not name or "/" in name or name in {".", ".."}:
                    problems.append(f"member {entry.name}: not a file of the folder {folder}/")
                    continue
                if name in found:
                    problems.append(f"member {name}: in the archive twice")
                    continue
                if entry.size > MAX_MEMBER_BYTES:
                    problems.append(f"member {name}: larger than {MAX_MEMBER_BYTES} bytes")
                    continue
                stream = tar.extractfile(entry)
                found[name] = stream.read() if stream is not None else b""
    except (tarfile.TarError, OSError, EOFError, zlib.error) as err:
        problems.append(f"not a readable gzip'd tar archive ({err})")
    return folder, found, problems


def _manifest(body: bytes, problems: list[str]) -> dict[str, Any] | None:
    try:
        raw = parse_json(body, MANIFEST)
    except ConfigError as err:
        problems.append(err.message)
        return None
    if not isinstance(raw, dict) or raw.get("format") != FORMAT or raw.get("version") != VERSION:
        problems.append(f"{MANIFEST}: not a {FORMAT} manifest of version {VERSION}")
        return None
    if render(raw) != body:
        problems.append(f"{MANIFEST}: not in its canonical form (docs/certificates.md)")
    listed = raw.get("members")
    if not isinstance(listed, list) or not all(
        isinstance(m, dict) and isinstance(m.get("name"), str) for m in listed
    ):
        problems.append(f"{MANIFEST}: members is not a list of named members")
        return None
    return raw


def verify(
    path: Path, *, key: Path | None = None, allowed_signers: Path | None = None
) -> Verification:
    """Verify an evidence pack offline: the manifest's signature by the provider's key (or an
    allowed-signers file), then every member against the manifest's SHA-256.

    Raises:
        ConfigError: Unusable input: the archive or key cannot be read, or neither or both of
            ``key`` and ``allowed_signers`` are given (exit 2).
    """
    data = read_regular(path, "evidence pack")
    outcome = Verification(path=path)
    with tempfile.TemporaryDirectory(prefix="gpunode-evidence-") as tmp:
        allowed, principal = signers_file(Path(tmp), key, allowed_signers, NAMESPACE)
        _folder, found, outcome.problems = read_members(data)
        if MANIFEST not in found or SIGNATURE not in found:
            missing = [name for name in SIGNED if name not in found]
            outcome.problems.append(f"no {' and no '.join(missing)} in the archive")
            return outcome
        body, armor = found[MANIFEST], found[SIGNATURE]
        try:
            if armor != armor_of(dearmor(armor)):
                outcome.problems.append(f"{SIGNATURE}: not byte for byte OpenSSH's armor")
                return outcome
        except ValueError as err:
            outcome.problems.append(f"{SIGNATURE}: {err}")
            return outcome
        ok, outcome.signer, why = check_signature(body, armor, allowed, principal, NAMESPACE)
        if not ok:
            outcome.problems.append(f"{MANIFEST}: {why}")
    manifest = _manifest(body, outcome.problems)
    if manifest is None:
        return outcome
    outcome.manifest = manifest
    listed = {str(m["name"]): m for m in manifest["members"]}
    for name, entry in sorted(listed.items()):
        if name not in found:
            outcome.problems.append(f"member {name}: listed in the manifest, not in the archive")
        elif entry.get("sha256") != f"sha256:{_digest(found[name])}":
            outcome.problems.append(
                f"member {name}: changed (its SHA-256 is not the one the manifest lists)"
            )
    for name in sorted(set(found) - set(listed) - set(SIGNED)):
        outcome.problems.append(f"member {name}: in the archive, not in the manifest")
    return outcome
