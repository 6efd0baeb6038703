"""A node's GPU and NIC topology: ``nvidia-smi topo -m`` read into a model, and the hardware
profile's topology rules held against it.

The one owner of the concept: the link kinds and their order, the parser, the judgement of
the rules (their schema, :class:`toolkit.profile.floors.TopologySpec`, is the ``topology`` key of
``hardware.acceptance``) and what the report draws. The node runner ships the command's text
raw; the controller parses it here.

What the output looks like (nvidia-smi's own ``Legend:`` block, and public captures of
8x H100 SXM and PCIe nodes in ``tests/unit/data/topo/`` with their sources):

- a header row of device columns (``GPU0`` ..., ``NIC0`` ..., or on older drivers the RDMA
  devices themselves, ``mlx5_0`` ...), then ``CPU Affinity``, ``NUMA Affinity`` and, on newer
  drivers, ``GPU NUMA ID``;
- one row per device: its link to every column, and for GPUs the affinity values (``N/A`` or
  empty where the system does not tell);
- ``Legend:`` with the link kinds, and ``NIC Legend:`` mapping ``NIC<n>`` to its RDMA device.

nvidia-smi separates the cells with tabs (and pads one empty field before ``GPU NUMA ID``);
captures pasted into web pages often carry spaces instead, and terminal captures ANSI colour
codes. Both are read; anything else that does not fit is an error naming the line.

Which NICs the ``nic_gpu_link`` rule covers is decided by their type, unless the profile names
them (``nics``): the compute NICs are the RDMA devices whose port's link layer is InfiniBand or
Ethernet (RoCE), read from ``/sys/class/infiniband/<dev>/ports/<n>/link_layer`` by the runner,
that sit on a GPU's PCIe switch (``PXB`` or nearer to some GPU). Storage and management ports
(off every GPU's switch, or of another link layer) are shown, not judged. A node with RDMA
NICs none of which sits on a GPU's switch has all of them judged: the rule is there to catch
that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from toolkit.errors import AcceptanceError, clip
from toolkit.profile.floors import TopologySpec

# What each link kind means: nvidia-smi's `Legend:` block, word for word.
LEGEND: dict[str, str] = {
    "X": "Self",
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
    "(e.g., QPI/UPI)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
    "within a NUMA node",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "NV#": "Connection traversing a bonded set of # NVLinks",
}
# The PCIe path kinds, nearest first, with NVML's levels (`nvmlGpuTopologyLevel_t`: SINGLE 10,
# MULTIPLE 20, HOSTBRIDGE 30, NODE 40, SYSTEM 50), which `topo -m` prints as these names.
PCIE_LEVELS: dict[str, int] = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
SELF = "X"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_NVLINK = re.compile(r"^NV([1-9][0-9]{0,2})$")
_GPU = re.compile(r"^GPU([0-9]+)$")
_NIC_LABEL = re.compile(r"^NIC([0-9]+)$")
# An RDMA device as older drivers name the NIC columns (mlx5_0, bnxt_re0, irdma0, ...).
_DEVICE = re.compile(r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")
_NIC_LEGEND = re.compile(r"^\s*(NIC[0-9]+)\s*:\s*(\S+)\s*$")
# An affinity list as Linux prints one (cpulist format: `0-47,96-143`): ASCII numbers and
# ranges, comma-separated. Ascending and disjoint, so it names at most its bound's count.
_ID_LIST = re.compile(r"[0-9]{1,9}(?:-[0-9]{1,9})?(?:,[0-9]{1,9}(?:-[0-9]{1,9})?)*\Z")
_ID = re.compile(r"[0-9]{1,9}\Z")
# The kernel's own bounds: MAX_NUMNODES is 1 << NODES_SHIFT (include/linux/numa.h), and
# NODES_SHIFT is at most 10 in arch/x86/Kconfig and arch/arm64/Kconfig (1,024 NUMA nodes);
# NR_CPUS is at most 8,192 (x86 with MAXSMP; arm64 allows 4,096). Nothing past them exists.
MAX_NUMA_NODES = 1024
MAX_CPUS = 8192
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_UNKNOWN = {"", "N/A"}


class TopologyUnreadable(AcceptanceError):
    """The text is not an ``nvidia-smi topo -m`` matrix (the message names the line)."""


def link_rank(link: str) -> tuple[int, int]:
    """Order links nearest first: NVLink (more links nearer), then PIX ... SYS.

    Raises:
        ValueError: Not a link kind.
    """
    nv = _NVLINK.match(link)
    if nv:
        return (0, -int(nv.group(1)))
    if link in PCIE_LEVELS:
        return (1, PCIE_LEVELS[link])
    raise ValueError(f"{clip(repr(link))} is not a link kind (NV<n>, PIX, PXB, PHB, NODE, SYS)")


def meets(link: str, rule: str) -> bool:
    """Whether ``link`` is at least as near as ``rule`` allows.

    ``NV<n>`` asks for NVLink with at least n links; a PCIe kind asks for that path or a
    nearer one (NVLink is nearer than any PCIe path).
    """
    return link != SELF and link_rank(link) <= link_rank(rule)


def describe_rule(rule: str) -> str:
    """A rule in words: ``NVLink with at least 18 links`` or ``PXB or nearer``."""
    nv = _NVLINK.match(rule)
    if nv:
        return f"NVLink with at least {nv.group(1)} links"
    return f"{rule} or nearer"


# --- the model ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One row and column of the matrix."""

    label: str  # the column label: GPU0, NIC0, or (older drivers) mlx5_0
    kind: Literal["GPU", "NIC"]
    name: str  # a NIC's RDMA device (NIC Legend), else the label
    cpu_affinity: str | None = None  # as printed, e.g. "0-47,96-143"; None: N/A or empty
    numa_affinity: str | None = None  # e.g. "0"; None: N/A or empty
    gpu_numa_id: str | None = None

    @property
    def numa_nodes(self) -> tuple[int, ...]:
        """The NUMA nodes of a device's affinity (``0-1,3`` gives 0, 1, 3); () when unknown.

        Raises:
            ValueError: Not an affinity list (:func:`id_ranges`); :func:`parse_topo` admits
                none such.
        """
        if self.numa_affinity is None:
            return ()
        ranges = id_ranges(self.numa_affinity, MAX_NUMA_NODES)
        return tuple(n for lo, hi in ranges for n in range(lo, hi + 1))

    @property
    def shown(self) -> str:
        """How the report names it: ``GPU0``, ``NIC0 (mlx5_0)``."""
        return self.label if self.name == self.label else f"{self.label} ({self.name})"


@dataclass(frozen=True)
class Topology:
    """The matrix of one node: devices in column order and the link of every pair."""

    devices: tuple[Device, ...]
    cells: dict[tuple[str, str], str] = field(repr=False)

    @property
    def gpus(self) -> list[Device]:
        """The GPUs, in column order."""
        return [d for d in self.devices if d.kind == "GPU"]

    @property
    def nics(self) -> list[Device]:
        """The NICs, in column order."""
        return [d for d in self.devices if d.kind == "NIC"]

    def link(self, a: str, b: str) -> str:
        """The link between two devices (by label); the farther of the two directions."""
        if a == b:
            return SELF
        return max(self.cells[(a, b)], self.cells[(b, a)], key=link_rank)

    def device(self, label: str) -> Device:
        """A device by its label."""
        return next(d for d in self.devices if d.label == label)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: devices and the matrix in column order."""
        labels = [d.label for d in self.devices]
        return {
            "devices": [
                {
                    "label": d.label,
                    "kind": d.kind,
                    "name": d.name,
                    "shown": d.shown,
                    "cpu_affinity": d.cpu_affinity,
                    "numa_affinity": d.numa_affinity,
                    "gpu_numa_id": d.gpu_numa_id,
                }
                for d in self.devices
            ],
            "matrix": [[self.cells[(a, b)] for b in labels] for a in labels],
        }


# --- the parser ---------------------------------------------------------------------------------


def id_ranges(text: str, bound: int) -> list[tuple[int, int]]:
    """An affinity list (``0-47,96-143``) read as its ranges, each ``(first, last)``.

    Strict: ASCII numbers ``N`` or ``N-M`` separated by commas, ascending and disjoint as
    Linux prints them, every number below ``bound``; so the list names at most ``bound``
    numbers, whatever its length.

    Raises:
        ValueError: Anything else; the message says which rule it breaks.
    """
    if not _ID_LIST.match(text):
        raise ValueError("not a list of numbers and ranges (N, N-M, separated by commas)")
    ranges: list[tuple[int, int]] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first:
            raise ValueError(f"range {part} runs backwards")
        if last >= bound:
            raise ValueError(f"{last} is past the kernel's bound ({bound}; at most {bound - 1})")
        if ranges and first <= ranges[-1][1]:
            raise ValueError(f"{part} is not after {ranges[-1][1]} (the list must ascend)")
        ranges.append((first, last))
    return ranges


def _checked(value: str | None, column: str, bound: int, number: int) -> str | None:
    """An affinity value checked by :func:`id_ranges` (None: unknown)."""
    if value is not None:
        try:
            id_ranges(value, bound)
        except ValueError as err:
            raise TopologyUnreadable(
                f"line {number}: {column} {clip(repr(value))} is not an affinity list: {err}"
            ) from None
    return value


def _fields(line: str) -> list[str]:
    """A line's fields: tab-separated as nvidia-smi prints it, else by runs of whitespace."""
    if "\t" in line:
        return [f.strip() for f in line.rstrip().split("\t")]
    return line.split()


def _is_header(line: str) -> bool:
    """The header row: its first name is GPU0 (a data row's second field is X)."""
    tokens = line.split()
    return bool(tokens) and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != SELF)


def _header(line: str, number: int) -> tuple[list[str], list[str]]:
    """The device columns and the affinity columns of the header row.

    Read by words, not by field separators: pasted captures put a single space between
    wide names (``mlx5_10 mlx5_11``), and the affinity names have spaces of their own.
    """
    tokens = line.split()
    multiword = {tuple(name.split()): name for name in AFFINITY_COLUMNS}
    devices: list[str] = []
    trailing: list[str] = []
    i = 0
    while i < len(tokens):
        for words, name in multiword.items():
            if tuple(tokens[i : i + len(words)]) == words:
                trailing.append(name)
                i += len(words)
                break
        else:
            name = tokens[i]
            i += 1
            if trailing:
                raise TopologyUnreadable(
                    f"line {number}: device column {clip(repr(name))} after the affinity columns"
                )
            if not (_GPU.match(name) or _DEVICE.match(name)):
                raise TopologyUnreadable(
                    f"line {number}: {clip(repr(name))} is not a device column"
                )
            devices.append(name)
    if len(set(devices)) != len(devices):
        raise TopologyUnreadable(f"line {number}: a device column is named twice")
    if trailing != list(AFFINITY_COLUMNS[: len(trailing)]):
        raise TopologyUnreadable(
            f"line {number}: affinity columns {trailing} are not in nvidia-smi's order "
            f"{list(AFFINITY_COLUMNS)}"
        )
    return devices, trailing


def _affinity(values: list[str], columns: list[str], number: int, tabbed: bool) -> list[str]:
    """A GPU row's affinity values, one per affinity column.

    nvidia-smi pads the field before ``GPU NUMA ID`` with an extra tab; an empty field that is
    a real (unknown) value sits first. With spaces an empty value cannot be seen, so the count
    must match.
    """
    values = list(values)
    if tabbed:
        while len(values) > len(columns) and "" in values[1:]:
            last = max(i for i, v in enumerate(values) if v == "" and i > 0)
            del values[last]
    if len(values) != len(columns):
        raise TopologyUnreadable(
            f"line {number}: expected {len(columns)} value(s) for the column(s) "
            f"{', '.join(columns) or '(none)'}, found {len(values)}: {clip(repr(values))}"
        )
    return values


def _value(text: str) -> str | None:
    return None if text.strip() in _UNKNOWN else text.strip()


def parse_topo(text: str) -> Topology:
    """Read ``nvidia-smi topo -m`` output.

    Args:
        text: The command's stdout (ANSI colour codes and a leading prompt line are tolerated).

    Returns:
        The topology, devices in column order.

    Raises:
        TopologyUnreadable: The text is not such a matrix; the message names the line.
    """
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if _is_header(line)), None)
    if start is None:
        raise TopologyUnreadable("no header row with a GPU0 column: not `nvidia-smi topo -m`")
    labels, trailing = _header(lines[start], start + 1)
    rows: dict[str, tuple[list[str], list[str], bool]] = {}
    numbers: dict[str, int] = {}
    end = len(lines)
    for i in range(start + 1, len(lines)):
        line = lines[i]
        number = i + 1
        if not line.strip():
            end = i
            break
        if line.strip().startswith("Legend"):
            end = i
            break
        fields = _fields(line)
        label = fields[0]
        if label not in labels:
            raise TopologyUnreadable(
                f"line {number}: row {clip(repr(label))} is not one of the header's columns"
            )
        if label in rows:
            raise TopologyUnreadable(f"line {number}: a second row for {label}")
        cells = fields[1 : 1 + len(labels)]
        if len(cells) < len(labels):
            raise TopologyUnreadable(
                f"line {number}: {label} has {len(cells)} fields for {len(labels)} link columns"
            )
        rest = fields[1 + len(labels) :]
        rows[label] = (cells, rest, "\t" in line)
        numbers[label] = number
        for column, cell in zip(labels, cells, strict=True):
            want_self = column == label
            if want_self != (cell == SELF):
                raise TopologyUnreadable(
                    f"line {number}: {label} to {column} reads {clip(repr(cell))}; "
                    + ("expected X (self)" if want_self else "X is only the diagonal")
                )
            if not want_self:
                try:
                    link_rank(cell)
                except ValueError as err:
                    raise TopologyUnreadable(f"line {number}: {label} to {column}: {err}") from err
    missing = [label for label in labels if label not in rows]
    if missing:
        raise TopologyUnreadable(
            f"line {start + 1}: the header names {', '.join(missing)} but no such row follows"
        )
    # nvidia-smi always prints the Legend after the matrix: without it the text was cut, and
    # the last row may be cut with it.
    if not any(line.strip() == "Legend:" for line in lines[end:]):
        raise TopologyUnreadable(
            f"line {end + 1}: no `Legend:` block after the matrix: the output is cut short"
        )
    legend = _nic_legend(lines[end:], end)
    known = {label for label in labels if _NIC_LABEL.match(label)}
    stray = sorted(set(legend) - known)
    if stray:
        raise TopologyUnreadable(f"NIC Legend names {', '.join(stray)}, which no column shows")
    if legend and known - set(legend):
        raise TopologyUnreadable(
            f"NIC Legend does not name {', '.join(sorted(known - set(legend)))}"
        )
    devices = []
    for label in labels:
        _cells, rest, tabbed = rows[label]
        number = numbers[label]
        if _GPU.match(label):
            values = _affinity(rest, trailing, number, tabbed)
            named = dict(zip(trailing, values, strict=True))
            numa = _checked(
                _value(named.get("NUMA Affinity", "")), "NUMA Affinity", MAX_NUMA_NODES, number
            )
            cpus = _checked(_value(named.get("CPU Affinity", "")), "CPU Affinity", MAX_CPUS, number)
            numa_id = _value(named.get("GPU NUMA ID", ""))
            if numa_id is not None and not (_ID.match(numa_id) and int(numa_id) < MAX_NUMA_NODES):
                raise TopologyUnreadable(
                    f"line {number}: GPU NUMA ID {clip(repr(numa_id))} is not a NUMA node "
                    f"(0 to {MAX_NUMA_NODES - 1})"
                )
            devices.append(
                Device(
                    label=label,
                    kind="GPU",
                    name=label,
                    cpu_affinity=cpus,
                    numa_affinity=numa,
                    gpu_numa_id=numa_id,
                )
            )
        else:
            if any(v for v in rest):
                raise TopologyUnreadable(
                    f"line {number}: {label} carries values past its link cells: "
                    f"{clip(repr([v for v in rest if v]))}"
                )
            devices.append(Device(label=label, kind="NIC", name=legend.get(label, label)))
    matrix = {
        (label, column): rows[label][0][j] for label in labels for j, column in enumerate(labels)
    }
    return Topology(devices=tuple(devices), cells=matrix)


def _nic_legend(lines: list[str], offset: int) -> dict[str, str]:
    """``NIC<n> -> device`` from the ``NIC Legend:`` block (empty when there is none).

    The block is its entries up to the first blank line after them; what follows (a prompt
    in a pasted capture) is not nvidia-smi's.
    """
    legend: dict[str, str] = {}
    inside = False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped == "NIC Legend:":
            inside = True
            continue
        if inside and not stripped and legend:
            break
        if not inside or not stripped:
            continue
        match = _NIC_LEGEND.match(line)
        if not match:
            raise TopologyUnreadable(
                f"line {offset + i + 1}: {clip(repr(stripped))} is not a NIC Legend entry "
                "(NIC<n>: <device>)"
            )
        if match.group(1) in legend:
            raise TopologyUnreadable(f"line {offset + i + 1}: {match.group(1)} named twice")
        legend[match.group(1)] = match.group(2)
    return legend


# --- the rules ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One rule held against one topology."""

    rule: str  # the TopologySpec key
    ok: bool
    message: str
    measured: Any = None
    floor: Any = None
    # Device pairs (labels) that broke the rule, for the report to mark.
    pairs: tuple[tuple[str, str], ...] = ()


def _some(items: list[str], limit: int = 6) -> str:
    more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more


def _pair_rule(topo: Topology, rule_key: str, rule: str, same_numa: bool) -> Finding:
    gpus = topo.gpus
    bad: list[tuple[str, str, str]] = []
    judged = 0
    for i, a in enumerate(gpus):
        for b in gpus[i + 1 :]:
            if same_numa and (not a.numa_nodes or set(a.numa_nodes) != set(b.numa_nodes)):
                continue
            judged += 1
            link = topo.link(a.label, b.label)
            if not meets(link, rule):
                bad.append((a.label, b.label, link))
    scope = "GPU pairs on one NUMA node" if same_numa else "GPU pairs"
    if bad:
        message = (
            f"{len(bad)} of {judged} {scope} farther than {rule}: "
            + _some([f"{a}-{b} {link}" for a, b, link in bad])
            + f" (rule: {describe_rule(rule)})"
        )
    else:
        message = f"every one of {judged} {scope} at {describe_rule(rule)}"
    return Finding(
        rule=rule_key,
        ok=not bad,
        message=message,
        measured=[{"pair": [a, b], "link": link} for a, b, link in bad],
        floor=rule,
        pairs=tuple((a, b) for a, b, _ in bad),
    )


# The link layers of an RDMA port that carry RDMA traffic (sysfs-class-infiniband: InfiniBand,
# or Ethernet for RoCE); and how near a GPU a compute NIC sits: on its PCIe switch.
RDMA_LINK_LAYERS = ("InfiniBand", "Ethernet")
COMPUTE_NIC_LINK = "PXB"


@dataclass(frozen=True)
class NicFact:
    """What the node's sysfs says of one RDMA device (``rdma`` of the runner's section)."""

    link_layers: tuple[str, ...]  # of its ports, sorted; () when unread
    pci: str | None = None


@dataclass(frozen=True)
class NicRole:
    """One NIC of the matrix, and whether the ``nic_gpu_link`` rule covers it."""

    nic: Device
    gpu: str  # the nearest GPU's label
    link: str  # the link to it
    compute: bool
    fact: NicFact | None = None

    @property
    def kind(self) -> str:
        """The link layer(s) in words: ``InfiniBand``, ``Ethernet``; ``link layer not read``."""
        return (
            "/".join(self.fact.link_layers)
            if self.fact and self.fact.link_layers
            else ("link layer not read")
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as the check's ``measured`` shows it."""
        return {
            "nic": self.nic.name,
            "link_layer": list(self.fact.link_layers) if self.fact else [],
            "pci": self.fact.pci if self.fact else None,
            "gpu": self.gpu,
            "link": self.link,
            "judged": self.compute,
        }


def nic_facts(rdma: dict[str, Any] | None) -> dict[str, NicFact]:
    """The runner's RDMA section (``node_runner.facts.read_rdma``) read per device."""
    if not isinstance(rdma, dict) or not isinstance(rdma.get("ports"), dict):
        return {}
    layers: dict[str, set[str]] = {}
    for key, files in rdma["ports"].items():
        device = str(key).rpartition("/")[0]
        layer = files.get("link_layer") if isinstance(files, dict) else None
        layers.setdefault(device, set())
        if isinstance(layer, str) and layer:
            layers[device].add(layer)
    found_pci = rdma.get("pci")
    pci: dict[str, Any] = found_pci if isinstance(found_pci, dict) else {}
    return {
        device: NicFact(tuple(sorted(found)), str(pci[device]) if pci.get(device) else None)
        for device, found in layers.items()
    }


def nic_roles(topo: Topology, facts: dict[str, NicFact] | None = None) -> list[NicRole]:
    """Every NIC of the matrix with its nearest GPU and whether it is a compute NIC (see the
    module's docstring); without facts (an older runner) placement alone decides."""
    facts = facts or {}
    placed: list[tuple[Device, str, str, bool, NicFact | None]] = []
    for nic in topo.nics:
        if not topo.gpus:
            continue
        nearest = min(topo.gpus, key=lambda g: link_rank(topo.link(nic.label, g.label)))
        fact = facts.get(nic.name)
        rdma = (
            fact is None
            or not fact.link_layers
            or bool(set(fact.link_layers) & set(RDMA_LINK_LAYERS))
        )
        placed.append((nic, nearest.label, topo.link(nic.label, nearest.label), rdma, fact))
    near = any(rdma and meets(link, COMPUTE_NIC_LINK) for _, _, link, rdma, _ in placed)
    # No RDMA NIC on any GPU's switch: every one is judged (the rule says how far is allowed).
    return [
        NicRole(nic, gpu, link, rdma and (meets(link, COMPUTE_NIC_LINK) or not near), fact)
        for nic, gpu, link, rdma, fact in placed
    ]


def _nic_rule(
    topo: Topology, rule: str, names: list[str] | None, facts: dict[str, NicFact] | None = None
) -> Finding:
    nics = topo.nics
    shown: list[NicRole] = []
    if names is None and nics:
        roles = nic_roles(topo, facts)
        nics = [r.nic for r in roles if r.compute]
        shown = [r for r in roles if not r.compute]
    if names is not None:
        known = {n.name for n in nics}
        absent = [n for n in names if n not in known]
        if absent:
            return Finding(
                "nic_gpu_link",
                False,
                f"NIC(s) {', '.join(absent)} not in the topology (it shows "
                f"{', '.join(sorted(known)) or 'no NIC'})",
                measured=sorted(known),
                floor=names,
            )
        nics = [n for n in nics if n.name in names]
    if not nics:
        what = "no RDMA NIC" if shown else "no NIC"
        return Finding(
            "nic_gpu_link",
            False,
            f"the topology shows {what}" + _not_judged(shown),
            measured=[r.to_dict() for r in shown],
            floor=rule,
        )
    bad: list[str] = []
    pairs: list[tuple[str, str]] = []
    measured: list[dict[str, Any]] = []
    for nic in nics:
        nearest = min(topo.gpus, key=lambda g: link_rank(topo.link(nic.label, g.label)))
        link = topo.link(nic.label, nearest.label)
        entry: dict[str, Any] = {"nic": nic.name, "gpu": nearest.label, "link": link}
        if facts and nic.name in facts:
            entry.update(link_layer=list(facts[nic.name].link_layers), pci=facts[nic.name].pci)
        measured.append({**entry, "judged": True})
        if not meets(link, rule):
            bad.append(f"{nic.shown}: nearest GPU {nearest.label} at {link}")
            pairs.append((nic.label, nearest.label))
    message = (
        f"{len(bad)} of {len(nics)} NICs farther than {rule} from every GPU: "
        + _some(bad)
        + f" (rule: {describe_rule(rule)})"
        if bad
        else f"every one of {len(nics)} NICs at {describe_rule(rule)} to a GPU"
    )
    if names is None and facts:
        kinds = {"/".join(facts[n.name].link_layers) for n in nics if n.name in facts}
        if kinds and "" not in kinds:
            message = message.replace(" NICs ", f" compute NICs ({', '.join(sorted(kinds))}) ", 1)
    measured += [role.to_dict() for role in shown]
    return Finding(
        "nic_gpu_link", not bad, message + _not_judged(shown), measured, rule, tuple(pairs)
    )


def _not_judged(shown: list[NicRole]) -> str:
    """The NICs shown, not judged, in words (empty when none)."""
    if not shown:
        return ""
    items = [
        f"{r.nic.shown} {r.kind}"
        + (f" {r.fact.pci}" if r.fact and r.fact.pci else "")
        + f", nearest GPU {r.gpu} at {r.link}"
        for r in shown
    ]
    return "; shown, not judged (storage or management): " + _some(items)


def _numa_rule(topo: Topology) -> Finding:
    unknown = [g.label for g in topo.gpus if len(g.numa_nodes) != 1]
    if unknown:
        return Finding(
            "numa_balanced",
            False,
            f"NUMA node not known for {', '.join(unknown)} (NUMA Affinity N/A, empty or more "
            "than one node)",
            measured=unknown,
            floor="balanced",
        )
    counts: dict[int, list[str]] = {}
    for gpu in topo.gpus:
        counts.setdefault(gpu.numa_nodes[0], []).append(gpu.label)
    spread = {f"NUMA {node}": len(labels) for node, labels in sorted(counts.items())}
    ok = max(spread.values()) - min(spread.values()) <= 1
    text = ", ".join(f"{n} GPUs on {k}" for k, n in spread.items())
    return Finding(
        "numa_balanced",
        ok,
        f"{text}: " + ("balanced" if ok else "uneven (counts differ by more than one)"),
        measured=spread,
        floor="counts differ by at most one",
    )


def judge(
    topo: Topology, spec: TopologySpec, facts: dict[str, NicFact] | None = None
) -> list[Finding]:
    """Every rule of ``spec`` held against ``topo``, in the spec's key order (``facts``: the
    RDMA devices' link layers, :func:`nic_facts`, which tell compute NICs from the others)."""
    findings = []
    if spec.gpu_link:
        findings.append(_pair_rule(topo, "gpu_link", spec.gpu_link, same_numa=False))
    if spec.gpu_link_same_numa:
        findings.append(
            _pair_rule(topo, "gpu_link_same_numa", spec.gpu_link_same_numa, same_numa=True)
        )
    if spec.nic_gpu_link:
        findings.append(_nic_rule(topo, spec.nic_gpu_link, spec.nics, facts))
    if spec.numa_balanced:
        findings.append(_numa_rule(topo))
    return findings


def read_section(section: dict[str, Any] | None) -> tuple[Topology | None, str | None]:
    """The runner's ``topology`` section (raw ``nvidia-smi topo -m`` text) parsed.

    Returns:
        The topology, or None and why there is none.
    """
    if not section:
        return None, "nvidia-smi topo -m was not run"
    if not isinstance(section, dict):
        return None, f"the runner's topology section is not a mapping: {clip(repr(section))}"
    if section.get("error"):
        return None, f"nvidia-smi topo -m failed: {section['error']}"
    try:
        return parse_topo(str(section.get("raw_output") or "")), None
    except TopologyUnreadable as err:
        return None, f"nvidia-smi topo -m output unreadable: {err.message}"


def report(section: dict[str, Any] | None, spec: TopologySpec | None) -> dict[str, Any] | None:
    """What the report draws for one node: the matrix, and the pairs that broke a rule.

    None when the node's result has no topology section at all (an older runner).
    """
    if section is None:
        return None
    topo, error = read_section(section)
    if topo is None:
        return {"error": error, "devices": [], "matrix": [], "failing": []}
    facts = nic_facts(section.get("rdma")) if isinstance(section, dict) else {}
    findings = judge(topo, spec, facts) if spec is not None else []
    failing = sorted({pair for f in findings if not f.ok for pair in f.pairs})
    return {**topo.to_dict(), "error": None, "failing": [list(p) for p in failing]}
