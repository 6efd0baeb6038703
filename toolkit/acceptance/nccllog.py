"""NCCL's own debug log (``NCCL_DEBUG=INFO``) read into the transports a run really used, and
the profile's transport rules held against them.

The one owner of NCCL's log grammar: what a log line looks like (``nccltests`` uses it to let
log lines through between the rows of an nccl-tests table), what its messages say about the
transports, the summary (:class:`NcclTransport`) and the findings of the rules (their schema,
:class:`toolkit.profile.floors.TransportSpec`, is the ``transport`` key of ``hardware.acceptance``).
The node runner sets ``NCCL_DEBUG=INFO`` and ships the text raw; the controller parses it here.

The messages read (NCCL's ``src/`` prints them with ``INFO(NCCL_INIT|...)``; public logs in
``tests/data/real/nccl-logs/`` with their sources):

- ``NCCL version 2.24.3+cuda12.2``;
- ``Using network IB`` / ``Using network Socket`` / ``Using network IBext_v8`` (the network
  plugin chosen), ``NET/IB : Using [0]mlx5_0:1/IB ...``, ``NET/Socket : Using [0]eth0:...``;
- ``Channel 01/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA`` (older: ``Ring 00 : 43 -> 44
  [receive] via NET/Socket/0``, aws-ofi-nccl's ``via NET/AWS Libfabric/1(2)/GDRDMA/Shared``):
  one connection, its transport after ``via``; ``GDRDMA`` means the NIC reads and writes GPU
  memory directly (GPUDirect RDMA), without it a network connection stages the data in host
  memory; ``P2P/IPC``, ``P2P/CUMEM``, ``SHM/direct`` are connections between GPUs of one node;
- ``NVLS multicast support is [not ]available on dev 0`` and ``32 coll channels, 16 nvls
  channels, 32 p2p channels, ...`` (NVLink SHARP, CollNet);
- ``comm 0x... rank 0 nRanks 16 nNodes 2 localRanks 8 ...`` and ``... - Init COMPLETE``;
- the fabric under the network: ``NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE ...`` names
  each IB-verbs device with its link layer (``IB`` InfiniBand, ``RoCE`` Ethernet), and a
  connection ``via NET/IB/<n>`` uses device ``[n]``; the OFI plugin (aws-ofi-nccl) says
  ``NET/OFI Initializing aws-ofi-nccl 1.9.1-aws`` and ``NET/OFI Selected Provider is efa``;
  ``NET/IB : GPU Direct RDMA Disabled for GPU 2[2] / HCA 0 (distance 3 >= 2)`` says why a
  connection goes without GPUDirect RDMA.

Lines are read with or without NCCL's ``host:pid:tid [dev] NCCL INFO`` prefix (logs pasted
into issues often lose it, some keep only its ``[dev] NCCL INFO``) and under a launcher's
prefix (``0: ``, ``[1,0]<stdout>:``, or a bare ``[0] ``). Nothing in a log makes the parser
fail: what it cannot place is skipped.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from toolkit.profile.floors import FABRIC_NETWORK, TransportSpec

# The version as NCCL prints it at init ("NCCL version 2.27.3+cuda12.9"; NCCL_DEBUG=VERSION
# prints that line alone).
VERSION_RE = re.compile(
    r"NCCL version (?P<v>[0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,4})"
    r"(?:\+cuda(?P<cuda>[0-9]{1,2}\.[0-9]{1,2}))?"
)
VERSION_LINE_RE = re.compile(VERSION_RE.pattern + r"\s*\Z")
# A whole NCCL debug line, as NCCL's src/debug.cc prints it (github.com/NVIDIA/nccl):
# "%s:%d:%d [%d] NCCL INFO " (host:pid:tid [cudaDev]), "... [%d] %s:%d NCCL WARN " (file:line),
# "... [%d] %f %s:%d NCCL TRACE ", "%s:%d:%d NCCL CALL "; newer releases may put a
# NCCL_DEBUG_TIMESTAMP_FORMAT stamp in brackets first. Anchored at the line's start: a row of
# an nccl-tests table with log text after its numbers is a row, and must parse.
LOG_LINE_RE = re.compile(
    r"(?:\[[^\]]{0,64}\] ?)?[^\s:\[\]]+:[0-9]{1,10}:[0-9]{1,10} "
    r"(?:\[[0-9]{1,4}\] (?:[0-9.]+ )?(?:\S+:[0-9]+ (?:\(\S+\) )?)?)?"
    r"NCCL (?P<level>INFO|WARN|TRACE|ATTN|CALL)\b ?"
)
# The most of one line read: NCCL's lines are short (eight NICs listed take about 300
# characters), and a bound keeps hostile text linear.
MAX_LINE_CHARS = 4096
# Prefixes added by launchers: `mpirun --tag-output` and `srun -l` (task ids may be padded).
_PREFIX_RE = re.compile(r"^(?:\[[0-9]+,[0-9]+\]<(?:stdout|stderr)>:|\s*[0-9]+:(?: |$))")
_CHANNEL_RE = re.compile(
    r"^(?:Channel|Ring) (?P<ch>[0-9]{1,4})(?:/[0-9]{1,4})? : "
    r"(?P<src>[0-9]{1,7})(?:\[[0-9a-fA-F]{1,16}\])? -> "
    r"(?P<dst>[0-9]{1,7})(?:\[[0-9a-fA-F]{1,16}\])?"
    # The transport is the rest of the line: plugin names may hold spaces (aws-ofi-nccl's
    # "NET/AWS Libfabric/1(2)/GDRDMA/Shared").
    r"(?: \[(?P<dir>send|receive)\])? via (?P<via>\S.{0,127}?)\s*$"
)
_USING_NETWORK_RE = re.compile(r"^Using network (?P<net>\S.{0,63}?)\s*$")
_NET_DEVICES_RE = re.compile(r"^NET/(?P<kind>IB|Socket) ?: Using (?P<rest>.{0,2000})")
_NET_DEVICE_RE = re.compile(r"\[(?P<i>[0-9]{1,3})\](?P<dev>[^\s;\[]{1,64})")
# A line that kept only the device part of NCCL's prefix (``[0] NCCL INFO ...``).
_BARE_PREFIX_RE = re.compile(r"^\[[0-9]{1,4}\] NCCL (?:INFO|WARN)\b ?")
# aws-ofi-nccl's own lines (github.com/aws/aws-ofi-nccl, src/nccl_ofi_net.c): the plugin's
# version at init and the libfabric provider it chose.
_OFI_VERSION_RE = re.compile(r"^NET/OFI Initializing aws-ofi-nccl (?P<v>[0-9][0-9A-Za-z.+-]{0,47})")
_OFI_PROVIDER_RE = re.compile(r"^NET/OFI Selected [Pp]rovider is (?P<p>[A-Za-z0-9_;-]{1,32})")
_GDR_DISABLED_RE = re.compile(r"^NET/\S{1,32} ?: GPU Direct RDMA Disabled for (?P<what>.{1,200})")
_NVLS_RE = re.compile(
    r"^NVLS multicast support is (?P<not>not )?available on dev (?P<dev>[0-9]{1,4})"
)
_CHANNEL_COUNTS_RE = re.compile(r"^[0-9]{1,5} coll channels, ")
_COUNT_RE = re.compile(r"(?P<n>[0-9]{1,5}) (?P<what>[a-z0-9]{1,16}) channels(?! per peer)")
_COMM_RE = re.compile(r"\bnRanks (?P<ranks>[0-9]{1,7}) nNodes (?P<nodes>[0-9]{1,6})\b")
_INIT_COMPLETE_RE = re.compile(
    r"\bnranks (?P<ranks>[0-9]{1,7})\b.*- Init COMPLETE\b", re.IGNORECASE
)

Network = Literal["ib", "socket", "other"]
# How each link layer NCCL prints after an IB-verbs device is called as a fabric.
LINK_LAYER_FABRIC = {"IB": "infiniband", "RoCE": "roce"}
# What a socket fallback on an RDMA fabric comes from (domain.md section 6).
SOCKET_FALLBACK_CAUSES = (
    "the ranks could not use the RDMA devices: a container without /dev/infiniband "
    "(uverbs, rdma_cm), IPC_LOCK or an unlimited memlock limit, the RDMA stack not loaded, "
    "or its ports down"
)


def is_ofi(name: str) -> bool:
    """Whether a network transport is the OFI plugin's (aws-ofi-nccl names itself ``AWS
    Libfabric``, newer releases ``Libfabric``; HPE's build ``OFI``)."""
    return "Libfabric" in name or name == "OFI"


def network_kind(name: str) -> Network:
    """What a network transport's name is: NCCL's own ``IB`` (InfiniBand and RoCE verbs) and
    the IB plugins of HPC-X (``IBext``, ``IBext_v8``), its ``Socket``, or another plugin
    (``AWS Libfabric``, ``GPUDirectTCPX`` ...)."""
    if name.startswith("IB"):
        return "ib"
    if name == "Socket":
        return "socket"
    return "other"


@dataclass
class NcclTransport:
    """What one NCCL log says about the transports a run used."""

    lines: int = 0  # NCCL log lines read
    version: str | None = None
    cuda: str | None = None
    # The network plugin NCCL chose ("Using network IB") and the devices it listed.
    network: str | None = None
    net_devices: list[str] = field(default_factory=list)
    # Connections (one per Channel/Ring line) by transport after "via", e.g. NET/IB/0/GDRDMA.
    connections: dict[str, int] = field(default_factory=dict)
    channels: int = 0  # distinct channel ids seen
    nvls_multicast: bool | None = None  # "NVLS multicast support is [not ]available"
    channel_counts: dict[str, int] = field(default_factory=dict)  # coll, nvls, collnet, p2p
    ranks: int | None = None
    nodes: int | None = None
    init_complete: int = 0
    # The IB-verbs devices by NCCL's index ("NET/IB : Using [0]mlx5_0:1/IB ..."): a connection
    # via NET/IB/<n> uses device n.
    ib_devices: dict[int, str] = field(default_factory=dict)
    ofi_plugin_version: str | None = None  # "NET/OFI Initializing aws-ofi-nccl 1.9.1-aws"
    ofi_provider: str | None = None  # "NET/OFI Selected Provider is efa"
    # Why GPUDirect RDMA is off, as NCCL says it ("GPU 2[2] / HCA 0 (distance 3 >= 2)").
    gdr_disabled: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        """Whether the text held any NCCL log line at all."""
        return self.lines > 0

    @property
    def net_connections(self) -> dict[str, int]:
        """The connections that crossed the network (``NET/...``)."""
        return {k: v for k, v in self.connections.items() if k.startswith("NET/")}

    @property
    def network_kind(self) -> Network | None:
        """IB, sockets or another plugin: from the connections when any crossed the network,
        else from the plugin NCCL chose; None when the log says neither."""
        names = {via.split("/")[1] for via in self.net_connections if via.count("/") >= 1}
        kinds = {network_kind(n) for n in names if n}
        if len(kinds) == 1:
            return kinds.pop()
        if kinds:
            # Mixed: the weakest is what the run is held to.
            return "socket" if "socket" in kinds else "other"
        return network_kind(self.network) if self.network else None

    @property
    def gpudirect_rdma(self) -> bool | None:
        """Whether every network connection used GPUDirect RDMA; None when none crossed the
        network (a single node's run says nothing about it), False on sockets."""
        net = self.net_connections
        if net:
            return all("/GDRDMA" in via for via in net)
        return False if self.network_kind == "socket" else None

    @property
    def local_transports(self) -> dict[str, int]:
        """Connections between GPUs of one node by kind (``P2P/IPC``, ``P2P/CUMEM``,
        ``SHM/direct`` ...)."""
        out: Counter[str] = Counter()
        for via, n in self.connections.items():
            if not via.startswith("NET/"):
                out["/".join(via.split("/")[:2])] += n
        return dict(sorted(out.items()))

    @property
    def nvls_channels(self) -> int | None:
        """NVLink SHARP channels in use (None when the log has no channel counts)."""
        return self.channel_counts.get("nvls")

    @property
    def collnet_channels(self) -> int | None:
        """CollNet (in-network reduction, SHARP) channels in use."""
        return self.channel_counts.get("collnet")

    @property
    def crossed_network(self) -> bool:
        """Whether the run crossed the network: a connection via ``NET/``, or a communicator
        of more than one node."""
        return bool(self.net_connections) or (self.nodes or 0) > 1

    @property
    def link_layers(self) -> list[str]:
        """The link layers (``IB``, ``RoCE``) of the IB-verbs devices the network connections
        used (by their index), else of every device NCCL listed; [] when the log names none."""
        used = set()
        for via in self.net_connections:
            parts = via.split("/")
            if len(parts) >= 3 and network_kind(parts[1]) == "ib" and parts[2].isdigit():
                used.add(int(parts[2]))
        devices = [self.ib_devices[i] for i in sorted(used) if i in self.ib_devices]
        if not devices:
            devices = list(self.ib_devices.values())
        return sorted({d.split("/")[1] for d in devices if d.count("/") >= 1})

    @property
    def fabric(self) -> str | None:
        """The fabric the run crossed the network over: ``infiniband``, ``roce``, ``efa``,
        ``tcp``, ``ib`` (IB verbs, link layer not named), ``infiniband+roce`` (both used),
        ``ofi/<provider>`` (another libfabric provider) or the plugin's name; None when no
        connection crossed the network."""
        if not self.crossed_network:
            return None
        kind = self.network_kind
        if kind == "socket":
            return "tcp"
        if kind == "ib":
            named = [LINK_LAYER_FABRIC.get(layer, layer) for layer in self.link_layers]
            return "+".join(named) if named else "ib"
        names = {via.split("/")[1] for via in self.net_connections if via.count("/") >= 1}
        if not names and self.network:
            names = {self.network}
        if names and all(is_ofi(n) for n in names):
            provider = (self.ofi_provider or "efa").split(";")[0]
            return "efa" if provider == "efa" else f"ofi/{provider}"
        return ", ".join(sorted(names)) or None

    def describe(self) -> str:
        """One line: what ran over what."""
        if not self.found:
            return "no NCCL log"
        parts = []
        if self.version:
            parts.append(f"NCCL {self.version}")
        net = self.network_kind
        if net:
            over = ", ".join(sorted(self.net_connections)[:3]) or self.network or net
            parts.append(f"network {net} ({over})")
        if self.fabric and net != "socket":  # sockets are TCP: nothing more to say
            parts.append(f"fabric {self.fabric}")
        if self.ofi_plugin_version:
            parts.append(f"aws-ofi-nccl {self.ofi_plugin_version}")
        gdr = self.gpudirect_rdma
        if gdr is not None:
            parts.append(f"GPUDirect RDMA {'used' if gdr else 'not used'}")
        if self.nvls_channels is not None:
            parts.append(f"{self.nvls_channels} NVLS channels")
        elif self.nvls_multicast is not None:
            parts.append(
                f"NVLS multicast {'available' if self.nvls_multicast else 'not available'}"
            )
        if self.collnet_channels:
            parts.append(f"{self.collnet_channels} CollNet channels")
        local = self.local_transports
        if local:
            parts.append("local " + ", ".join(local))
        return "; ".join(parts) or f"{self.lines} NCCL log lines, no transport named"

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data (with the derived figures)."""
        return {
            "lines": self.lines,
            "version": self.version,
            "cuda": self.cuda,
            "network": self.network,
            "network_kind": self.network_kind,
            "net_devices": list(self.net_devices),
            "gpudirect_rdma": self.gpudirect_rdma,
            "connections": dict(sorted(self.connections.items())),
            "local_transports": self.local_transports,
            "channels": self.channels,
            "nvls_multicast": self.nvls_multicast,
            "nvls_channels": self.nvls_channels,
            "collnet_channels": self.collnet_channels,
            "channel_counts": dict(self.channel_counts),
            "ranks": self.ranks,
            "nodes": self.nodes,
            "init_complete": self.init_complete,
            "fabric": self.fabric,
            "link_layers": self.link_layers,
            "ib_devices": {str(i): d for i, d in sorted(self.ib_devices.items())},
            "ofi_plugin_version": self.ofi_plugin_version,
            "ofi_provider": self.ofi_provider,
            "gdr_disabled": list(self.gdr_disabled),
            "describe": self.describe(),
        }


def strip_prefix(line: str) -> str:
    """Remove an ``mpirun --tag-output`` or ``srun -l`` prefix from one line."""
    match = _PREFIX_RE.match(line)
    return line[match.end() :] if match else line


def _body(line: str) -> tuple[str, bool]:
    """The message of one line and whether it carried NCCL's log prefix (a bare ``[rank] ``
    in front, as some wrappers print, passes as LOG_LINE_RE's bracketed stamp)."""
    text = strip_prefix(line[:MAX_LINE_CHARS]).strip()
    if m := LOG_LINE_RE.match(text) or _BARE_PREFIX_RE.match(text):
        return text[m.end() :].strip(), True
    return text, False


# Distinct transports and NIC names kept from one log: far above any real node (a few of
# each), so hostile text cannot grow the summary without bound.
MAX_DISTINCT = 256


class LogReader:
    """Reads an NCCL log line by line into a :class:`NcclTransport`, in bounded memory (the
    nccl-tests parser feeds it the log lines between its rows)."""

    def __init__(self) -> None:
        self._out = NcclTransport()
        self._channel_ids: set[int] = set()
        self._devices: dict[str, None] = {}
        self._nvls: set[bool] = set()

    def feed(self, line: str) -> None:
        """Read one line; a line that says nothing of the transports is skipped."""
        out = self._out
        body, logged = _body(line)
        if m := VERSION_RE.search(body):
            out.version = out.version or m["v"]
            out.cuda = out.cuda or m["cuda"]
        elif m := _CHANNEL_RE.match(body):
            via = m["via"]
            if via in out.connections or len(out.connections) < MAX_DISTINCT:
                out.connections[via] = out.connections.get(via, 0) + 1
            self._channel_ids.add(int(m["ch"]))
        elif m := _USING_NETWORK_RE.match(body):
            out.network = out.network or m["net"]
        elif m := _NET_DEVICES_RE.match(body):
            ib = m["kind"] == "IB" and not out.ib_devices
            for dev in _NET_DEVICE_RE.finditer(m["rest"].split(";")[0]):
                if len(self._devices) < MAX_DISTINCT:
                    self._devices.setdefault(dev["dev"], None)
                if ib and len(out.ib_devices) < MAX_DISTINCT:
                    out.ib_devices.setdefault(int(dev["i"]), dev["dev"])
        elif m := _OFI_VERSION_RE.match(body):
            out.ofi_plugin_version = out.ofi_plugin_version or m["v"]
        elif m := _OFI_PROVIDER_RE.match(body):
            out.ofi_provider = out.ofi_provider or m["p"]
        elif m := _GDR_DISABLED_RE.match(body):
            if m["what"] not in out.gdr_disabled and len(out.gdr_disabled) < 8:
                out.gdr_disabled.append(m["what"])
        elif m := _NVLS_RE.match(body):
            self._nvls.add(not m["not"])
        elif _CHANNEL_COUNTS_RE.match(body):
            for count in _COUNT_RE.finditer(body):
                out.channel_counts.setdefault(count["what"], int(count["n"]))
        elif m := _INIT_COMPLETE_RE.search(body):
            out.init_complete += 1
            out.ranks = out.ranks or int(m["ranks"])
        elif m := _COMM_RE.search(body):
            out.ranks = out.ranks or int(m["ranks"])
            out.nodes = out.nodes or int(m["nodes"])
        elif not logged:
            return
        out.lines += 1

    def summary(self) -> NcclTransport:
        """What the lines read so far say."""
        out = self._out
        out.net_devices = list(self._devices)
        out.channels = len(self._channel_ids)
        out.nvls_multicast = (True in self._nvls) if self._nvls else None
        return out


def parse_log(text: str) -> NcclTransport:
    """Read the transports out of an NCCL debug log (or any text holding one).

    Never raises on what the text says: a line it cannot place is skipped.
    """
    reader = LogReader()
    for line in text.splitlines():
        reader.feed(line)
    return reader.summary()


@dataclass(frozen=True)
class Finding:
    """One rule held against one log: ``ok`` None when the log cannot tell (not judged)."""

    rule: str
    ok: bool | None
    message: str


def _fabric_finding(summary: NcclTransport, declared: str) -> Finding:
    """The group's declared fabric against the one the run crossed the network over."""
    got = summary.fabric
    if got is None:
        chose = f"; NCCL chose network {summary.network}" if summary.network else ""
        return Finding("fabric", None, f"no connection crossed the network{chose}")
    over = ", ".join(sorted(summary.net_connections)[:3]) or f"network {summary.network}"
    if got == declared:
        return Finding("fabric", True, f"fabric {got} ({over}) as the group declares")
    kind = summary.network_kind
    if declared == "efa" and got.startswith("ofi/"):
        return Finding(
            "fabric",
            False,
            f"the OFI plugin chose provider {summary.ofi_provider}, not efa ({over})",
        )
    if declared in ("infiniband", "roce") and got == "ib":
        return Finding(
            "fabric",
            True,
            f"IB verbs ({over}); the log names no device's link layer, so {declared} is "
            "taken on trust",
        )
    if got == "tcp" and declared != "tcp":
        return Finding(
            "fabric",
            False,
            f"NCCL fell back to TCP sockets ({over}) on a group that declares {declared}: "
            f"{SOCKET_FALLBACK_CAUSES}",
        )
    if kind == "ib" and declared in ("infiniband", "roce"):
        devices = ", ".join(list(summary.ib_devices.values())[:4])
        return Finding(
            "fabric",
            False,
            f"fabric {got} ({over}; devices {devices}) on a group that declares {declared}",
        )
    return Finding(
        "fabric",
        False,
        f"fabric {got} ({over}) on a group that declares {declared} (NCCL network "
        f"{FABRIC_NETWORK[declared]} expected)",
    )


def _ofi_plugin_finding(summary: NcclTransport, pinned: str) -> Finding:
    """The aws-ofi-nccl version NCCL loaded against the one the site pins: equal, or the
    pin without the build tag the plugin adds (``1.9.1`` matches ``1.9.1-aws``)."""
    loaded = summary.ofi_plugin_version
    if loaded is None:
        if summary.fabric == "tcp":
            return Finding(
                "ofi_plugin_version",
                False,
                f"aws-ofi-nccl {pinned} expected; NCCL ran over TCP sockets and the log names "
                "no aws-ofi-nccl",
            )
        return Finding(
            "ofi_plugin_version",
            None,
            "the log names no aws-ofi-nccl version (NET/OFI Initializing)",
        )
    ok = loaded == pinned or loaded.startswith(pinned + "-")
    return Finding(
        "ofi_plugin_version",
        ok,
        f"aws-ofi-nccl {loaded} loaded {'==' if ok else '!='} pinned {pinned}",
    )


def judge(
    summary: NcclTransport, spec: TransportSpec, *, across_nodes: bool = False
) -> list[Finding]:
    """Every rule of ``spec`` held against ``summary``, in the spec's key order.

    ``across_nodes``: the run spanned nodes (the multi-node stage); only then are the fabric
    rules (``fabric``, ``ofi_plugin_version``) held: one node's run shows no fabric.
    """
    findings = []
    if across_nodes and spec.fabric:
        findings.append(_fabric_finding(summary, spec.fabric))
    if across_nodes and spec.ofi_plugin_version:
        findings.append(_ofi_plugin_finding(summary, spec.ofi_plugin_version))
    if spec.network:
        kind = summary.network_kind
        over = ", ".join(sorted(summary.net_connections)[:3]) or summary.network
        findings.append(
            Finding("network", None, "the log names no network transport")
            if kind is None
            else Finding(
                "network",
                kind == spec.network,
                f"network {kind} ({over}) {'==' if kind == spec.network else '!='} "
                f"profile {spec.network}",
            )
        )
    if spec.gpudirect_rdma:
        gdr = summary.gpudirect_rdma
        net = summary.net_connections
        plain = sorted(v for v in net if "/GDRDMA" not in v)
        if gdr is None:
            finding = Finding("gpudirect_rdma", None, "no connection crossed the network")
        elif gdr:
            finding = Finding(
                "gpudirect_rdma",
                True,
                f"GPUDirect RDMA on every network connection ({sum(net.values())})",
            )
        else:
            how = ", ".join(plain[:3]) or f"network {summary.network}"
            why = (
                "; NCCL: GPU Direct RDMA Disabled for " + "; ".join(summary.gdr_disabled[:2])
                if summary.gdr_disabled
                else ""
            )
            finding = Finding(
                "gpudirect_rdma",
                False,
                f"GPUDirect RDMA required, not used: connections via {how}{why}",
            )
        findings.append(finding)
    if spec.nvls:
        channels, multicast = summary.nvls_channels, summary.nvls_multicast
        if channels is None and multicast is None:
            findings.append(Finding("nvls", None, "the log says nothing of NVLS"))
        elif multicast is False or channels == 0:
            why = "multicast not available" if multicast is False else "0 NVLS channels"
            findings.append(Finding("nvls", False, f"NVLS required, not used: {why}"))
        else:
            what = f"{channels} NVLS channels" if channels else "NVLS multicast available"
            findings.append(Finding("nvls", True, what))
    return findings


def read_section(section: dict[str, Any] | None) -> NcclTransport | None:
    """The NCCL log of one runner all-reduce section, read: the ranks' output (``nccl_log``,
    torch on GPUs) or all_reduce_perf's (``raw_output``, its log lines between the rows).

    Returns:
        The summary, or None when the section carries no NCCL log (gloo on CPU ranks, an
        older runner, no all-reduce).
    """
    if not isinstance(section, dict):
        return None
    text = section.get("nccl_log")
    if text is None and section.get("engine") == "nccl-tests":
        text = section.get("raw_output")
    if not isinstance(text, str):
        return None
    summary = parse_log(text)
    return summary if summary.found else None
