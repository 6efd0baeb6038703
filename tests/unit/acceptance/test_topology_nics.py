"""NICs by type: the compute NICs are the RDMA devices whose link layer is InfiniBand or
Ethernet (RoCE) on a GPU's PCIe switch; storage and management ports are shown, not judged; an
explicit ``nics`` list overrides; the runner reads the link layers and PCI addresses from sysfs.

The DGX-shaped matrix is the real 8x H100 capture (tests/unit/data/topo/h100-sxm-8.txt: eight
ConnectX ports ``mlx5_0``..``mlx5_7``, each PIX to its GPU) with two more ports added the way
a DGX H100 shows its storage and in-band management ConnectX ports: NODE to the GPUs of their
socket, SYS to the others.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.acceptance import topology
from toolkit.acceptance.node_runner import facts as runner
from toolkit.acceptance.perf_checks import topology_checks
from toolkit.acceptance.topology import judge, nic_facts, nic_roles, parse_topo, report
from toolkit.check import probe
from toolkit.lab import hardware as lab_hardware
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.inventory import lab_profile
from toolkit.profile.floors import AcceptanceSpec, TopologySpec
from unit.lab.test_nvidia_smi import V550, Node

H100 = (REPO / "tests" / "unit" / "data" / "topo" / "h100-sxm-8.txt").read_text()
COMPUTE = [f"mlx5_{i}" for i in range(8)]
STORAGE, MANAGEMENT = "mlx5_8", "mlx5_9"


def _dgx(extra: dict[str, str] | None = None) -> str:
    """The real capture with a storage port (socket 0) and a management port (socket 1) added:
    ``extra`` maps each added device to its links to GPU0-3 / GPU4-7 ("NODE,SYS")."""
    extra = extra or {STORAGE: "NODE,SYS", MANAGEMENT: "SYS,NODE"}
    base = parse_topo(H100)
    labels = [d.label for d in base.devices]
    names = {d.label: d.name for d in base.nics}
    new = {f"NIC{8 + i}": name for i, name in enumerate(extra)}
    names.update(new)
    cells = dict(base.cells)
    for label, name in new.items():
        near, far = extra[name].split(",")
        for gpu in base.gpus:
            link = near if int(gpu.label[3:]) < 4 else far
            cells[(label, gpu.label)] = cells[(gpu.label, label)] = link
        for other in [*labels, *new]:
            if other.startswith("NIC") and other != label:
                cells.setdefault((label, other), "SYS")
                cells.setdefault((other, label), "SYS")
        cells[(label, label)] = "X"
    columns = [*labels, *new]
    lines = ["\t" + "\t".join(columns) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for row in columns:
        values = [cells[(row, c)] for c in columns]
        if row.startswith("GPU"):
            gpu = base.device(row)
            values += [gpu.cpu_affinity or "", gpu.numa_affinity or "", "N/A"]
        lines.append(row + "\t" + "\t".join(values))
    lines += ["", "Legend:", "", "  X    = Self", "", "NIC Legend:", ""]
    lines += [f"  {label}: {name}" for label, name in names.items()]
    return "\n".join(lines) + "\n"


def _rdma(layers: dict[str, str], pci: dict[str, str] | None = None) -> dict[str, Any]:
    """The runner's RDMA section for devices with one port each."""
    return {
        "dir": "/sys/class/infiniband",
        "error": None,
        "ports": {
            f"{dev}/1": {
                "state": "4: ACTIVE",
                "phys_state": "5: LinkUp",
                "link_layer": layer,
                "counters/link_downed": "0",
            }
            for dev, layer in layers.items()
        },
        "pci": dict(pci or {}),
    }


DGX_RDMA = _rdma(
    {**{n: "InfiniBand" for n in COMPUTE}, STORAGE: "Ethernet", MANAGEMENT: "Ethernet"},
    {STORAGE: "0000:aa:00.0"},
)


def test_compute_nics_are_judged_and_storage_and_management_ports_shown() -> None:
    topo = parse_topo(_dgx())
    facts = nic_facts(DGX_RDMA)
    roles = {r.nic.name: r for r in nic_roles(topo, facts)}
    assert [n for n, r in roles.items() if r.compute] == COMPUTE
    assert not roles[STORAGE].compute and roles[STORAGE].link == "NODE"
    [finding] = judge(topo, TopologySpec(nic_gpu_link="PXB"), facts)
    assert finding.ok
    assert finding.message == (
        "every one of 8 compute NICs (InfiniBand) at PXB or nearer to a GPU; shown, not judged "
        "(storage or management): NIC8 (mlx5_8) Ethernet 0000:aa:00.0, nearest GPU GPU0 at "
        "NODE; NIC9 (mlx5_9) Ethernet, nearest GPU GPU4 at NODE"
    )
    judged = {m["nic"]: m["judged"] for m in finding.measured}
    assert judged == {**dict.fromkeys(COMPUTE, True), STORAGE: False, MANAGEMENT: False}


def test_before_nics_by_type_the_storage_ports_failed_the_rule() -> None:
    # The same node with every port named (the old default, and the override): storage and
    # management ports are judged and fail.
    [finding] = judge(
        parse_topo(_dgx()), TopologySpec(nic_gpu_link="PXB", nics=[*COMPUTE, STORAGE, MANAGEMENT])
    )
    assert not finding.ok and finding.message.startswith("2 of 10 NICs farther than PXB")


def test_an_explicit_nics_list_overrides_the_type() -> None:
    topo = parse_topo(_dgx())
    [named] = judge(topo, TopologySpec(nic_gpu_link="PXB", nics=COMPUTE[:4]), nic_facts(DGX_RDMA))
    assert named.ok and named.message == "every one of 4 NICs at PXB or nearer to a GPU"
    [storage] = judge(topo, TopologySpec(nic_gpu_link="PXB", nics=[STORAGE]), nic_facts(DGX_RDMA))
    assert not storage.ok and "NIC8 (mlx5_8): nearest GPU GPU0 at NODE" in storage.message


def test_a_compute_nic_off_its_pix_link_fails_a_pix_rule() -> None:
    # On a GPU's switch but two bridges away (PXB): a compute NIC, judged against PIX.
    topo = parse_topo(_dgx())
    cells = dict(topo.cells)
    cells[("NIC3", "GPU3")] = cells[("GPU3", "NIC3")] = "PXB"
    moved = topology.Topology(topo.devices, cells)
    [finding] = judge(moved, TopologySpec(nic_gpu_link="PIX"), nic_facts(DGX_RDMA))
    assert not finding.ok
    assert finding.message.startswith(
        "1 of 8 compute NICs (InfiniBand) farther than PIX from every GPU: NIC3 (mlx5_3): "
        "nearest GPU GPU3 at PXB"
    )


def test_a_port_of_another_link_layer_is_not_a_compute_nic() -> None:
    rdma = _rdma({**{n: "InfiniBand" for n in COMPUTE[1:]}, "mlx5_0": "Unknown"})
    roles = {r.nic.name: r for r in nic_roles(parse_topo(H100), nic_facts(rdma))}
    assert not roles["mlx5_0"].compute and roles["mlx5_0"].link == "PIX"
    assert all(roles[n].compute for n in COMPUTE[1:])


def test_roce_ports_are_compute_nics_too() -> None:
    rdma = _rdma(dict.fromkeys(COMPUTE, "Ethernet"))
    [finding] = judge(parse_topo(H100), TopologySpec(nic_gpu_link="PXB"), nic_facts(rdma))
    assert finding.ok and finding.message.startswith("every one of 8 compute NICs (Ethernet)")


def test_rdma_nics_none_on_a_gpu_switch_are_all_judged() -> None:
    # Every port off every GPU's switch: the rule is there to catch that, so none is excused.
    text = _dgx({STORAGE: "NODE,SYS", MANAGEMENT: "SYS,NODE"})
    topo = parse_topo(text)
    far = {
        k: ("SYS" if "NIC" in k[0] + k[1] and "GPU" in k[0] + k[1] else v)
        for k, v in topo.cells.items()
    }
    [finding] = judge(topology.Topology(topo.devices, far), TopologySpec(nic_gpu_link="PXB"))
    assert not finding.ok and finding.message.startswith("10 of 10 NICs farther than PXB")


def test_the_check_and_the_report_read_the_runners_rdma_facts() -> None:
    section = {"raw_output": _dgx(), "error": None, "rdma": DGX_RDMA}
    spec = AcceptanceSpec(topology=TopologySpec(nic_gpu_link="PXB"))
    [check] = topology_checks({"topology": section}, spec)
    assert check.name == "topology.nic_gpu_link" and check.ok
    assert "shown, not judged (storage or management)" in check.message
    drawn = report(section, spec.topology)
    assert drawn is not None and drawn["failing"] == []


@pytest.mark.parametrize("fault", [[], ["missing-gpu"], ["link-flap"]])
@pytest.mark.parametrize("model", ["H100", "L40S"])
def test_the_lab_nics_are_judged_compute_nics_and_pass(
    tmp_path: Path, model: str, fault: list[str]
) -> None:
    """The lab's emulated nodes, as acceptance reads them: its nvidia-smi's matrix (one NIC on
    each GPU pair's switch) and its sysfs-shaped RDMA ports (InfiniBand)."""
    node = Node(tmp_path)
    hw = node.hardware(NodeHardware.for_node(model, 8, model != "L40S", fault, seed="t"))
    node.load(V550)
    rc, out = node.run("topo", "-m")
    assert rc == 0
    base = tmp_path / "infiniband"
    for relative, text in lab_hardware.rdma_files(hw).items():
        (base / relative).parent.mkdir(parents=True, exist_ok=True)
        (base / relative).write_text(text)
    facts = nic_facts(runner.read_rdma(str(base)))
    assert {f.link_layers for f in facts.values()} == {("InfiniBand",)}
    rules = lab_profile().acceptance.topology
    assert rules is not None
    findings = {f.rule: f for f in judge(parse_topo(out), rules, facts)}
    nic = findings["nic_gpu_link"]
    assert nic.ok, nic.message
    assert nic.message == "every one of 4 compute NICs (InfiniBand) at PIX or nearer to a GPU"


def _sysfs(root: Path, layers: dict[str, str], pci: dict[str, str]) -> Path:
    base = root / "infiniband"
    for dev, layer in layers.items():
        port = base / dev / "ports" / "1"
        (port / "counters").mkdir(parents=True)
        (port / "link_layer").write_text(layer + "\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "phys_state").write_text("5: LinkUp\n")
        (port / "counters" / "link_downed").write_text("0\n")
        if dev in pci:
            function = root / "devices" / pci[dev]
            function.mkdir(parents=True)
            os.symlink(function, base / dev / "device")
    return base


def test_the_runner_reads_link_layers_and_pci_addresses(tmp_path: Path) -> None:
    base = _sysfs(
        tmp_path, {"mlx5_0": "InfiniBand", "mlx5_8": "Ethernet"}, {"mlx5_0": "0000:17:00.0"}
    )
    rdma = runner.read_rdma(str(base))
    assert rdma["error"] is None and rdma["pci"] == {"mlx5_0": "0000:17:00.0", "mlx5_8": None}
    assert rdma["ports"]["mlx5_8/1"]["link_layer"] == "Ethernet"
    assert nic_facts(rdma)["mlx5_0"] == topology.NicFact(("InfiniBand",), "0000:17:00.0")
    # The passive check reads the very same facts.
    assert probe.read_rdma(str(base)) == rdma
    missing = runner.read_rdma(str(tmp_path / "none"))
    assert missing["error"] and missing["ports"] == {} and nic_facts(missing) == {}


def test_the_runner_ships_the_rdma_facts_with_the_topology(tmp_path: Path) -> None:
    base = _sysfs(tmp_path, {"mlx5_0": "InfiniBand"}, {})
    section = runner.query_topology(None, str(base))
    assert section["error"] == "nvidia-smi not found"
    assert section["rdma"]["ports"]["mlx5_0/1"]["link_layer"] == "InfiniBand"
    assert "rdma" not in runner.query_topology(None)


@pytest.mark.parametrize("facts", [None, {}])
def test_without_facts_placement_alone_decides(facts: dict[str, Any] | None) -> None:
    roles = nic_roles(parse_topo(_dgx()), facts)
    assert [r.nic.name for r in roles if r.compute] == COMPUTE
    assert {r.kind for r in roles} == {"link layer not read"}
