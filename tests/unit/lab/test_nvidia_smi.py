"""The lab's stand-in nvidia-smi, run as the script a node gets, against a temporary root.

The script is rendered exactly as the repository build renders it and run with the system's
Python 3 (what a node runs it with); GPUNODE_LAB_ROOT points it at a temporary directory
that plays the node's / (hardware file, loaded-module state).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.acceptance.topology import judge, parse_topo
from toolkit.lab import package_spec
from toolkit.lab.hardware import GPU_MODELS, NodeHardware
from toolkit.lab.inventory import lab_profile

V550 = "550.127.05"
V550_UPGRADE = "550.144.03"


class Node:
    """A temporary node root with an installed nvidia-smi."""

    def __init__(self, root: Path, version: str = V550, cuda: str = "12.4") -> None:
        self.root = root
        self.state = root / "var/lib/gpunode-lab"
        self.state.mkdir(parents=True, exist_ok=True)
        self.install(version, cuda)

    def install(self, version: str, cuda: str) -> None:
        nvml = ".".join(version.split(".")[:2])
        for file in package_spec.nvidia_smi_files(version, cuda, nvml):
            path = self.root / file.path.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(file.content)
        self.smi = self.root / "usr/bin/nvidia-smi"

    def hardware(self, hw: NodeHardware) -> NodeHardware:
        (self.state / "hardware.json").write_text(hw.to_json())
        return hw

    def load(self, version: str) -> None:
        (self.state / "loaded-driver-version").write_text(version + "\n")

    def run(self, *args: str) -> tuple[int, str]:
        env = {**os.environ, "GPUNODE_LAB_ROOT": str(self.root)}
        done = subprocess.run(
            [sys.executable, str(self.smi), *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=30,
        )
        assert done.stderr == "", done.stderr
        return done.returncode, done.stdout


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.hardware(NodeHardware.for_node("H100", 8, True, seed="smi", index=0))
    n.load(V550)
    return n


def test_list_gpus(node: Node) -> None:
    rc, out = node.run("-L")
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 8
    for i, line in enumerate(lines):
        assert re.fullmatch(
            rf"GPU {i}: NVIDIA H100 80GB HBM3 \(UUID: GPU-[0-9a-f]{{8}}(-[0-9a-f]{{4}}){{3}}"
            r"-[0-9a-f]{12}\)",
            line,
        )


# (fields, format, expected header, expected row of GPU 0)
QUERIES = [
    (
        "index,name,pci.bus_id,driver_version",
        "csv",
        "index, name, pci.bus_id, driver_version",
        "0, NVIDIA H100 80GB HBM3, 00000000:18:00.0, 550.127.05",
    ),
    (
        "memory.total,memory.used,memory.free,power.draw,power.limit",
        "csv",
        "memory.total [MiB], memory.used [MiB], memory.free [MiB], power.draw [W], power.limit [W]",
        "81559 MiB, 0 MiB, 81006 MiB, 69.76 W, 700.00 W",
    ),
    (
        "memory.total,power.limit,clocks.sm,clocks.max.sm",
        "csv,nounits",
        "memory.total [MiB], power.limit [W], clocks.current.sm [MHz], clocks.max.sm [MHz]",
        "81559, 700.00, 345, 1980",
    ),
    (
        "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max",
        "csv,noheader",
        None,
        "5, 5, 16, 16",
    ),
    (
        "ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"
        "retired_pages.pending,remapped_rows.pending,remapped_rows.failure",
        "csv,noheader,nounits",
        None,
        "0, 0, [N/A], 0, 0",
    ),
    (
        "clocks_throttle_reasons.active,clocks_event_reasons.hw_slowdown,persistence_mode,"
        "compute_cap,temperature.gpu,utilization.gpu,fan.speed",
        "csv,noheader",
        None,
        "0x0000000000000000, Not Active, Disabled, 9.0, 33, 0 %, [N/A]",
    ),
    ("gpu_name,gpu_bus_id,count", "csv", "name, pci.bus_id, count", None),
]


@pytest.mark.parametrize(("fields", "fmt", "header", "row0"), QUERIES)
def test_query_gpu_formats(
    node: Node, fields: str, fmt: str, header: str | None, row0: str | None
) -> None:
    rc, out = node.run(f"--query-gpu={fields}", f"--format={fmt}")
    assert rc == 0, out
    lines = out.splitlines()
    if header is not None:
        assert lines.pop(0) == header
    assert len(lines) == 8
    if row0 is not None:
        assert lines[0] == row0
    assert all(line.count(", ") == fields.count(",") for line in lines)


def test_query_accepts_space_separated_option_values(node: Node) -> None:
    rc, out = node.run("--query-gpu", "index", "--format", "csv,noheader", "-i", "2")
    assert (rc, out) == (0, "2\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--query-gpu=index,bogus", "--format=csv"],
            'Field "bogus" is not a valid field to query.',
        ),
        (["--query-gpu=index"], '"--format=" is a required option'),
        (["--query-gpu=index", "--format=json"], "is not a valid format"),
        (["--query-gpu=index", "--format=csv,pretty"], '"pretty" is not a valid format option.'),
        (["--frobnicate"], "Invalid combination of input arguments."),
        (["topo"], "Invalid combination of input arguments."),
        (["-q", "-d", "KITCHEN"], '"KITCHEN" is not a valid display type.'),
    ],
)
def test_bad_arguments_exit_2_with_the_real_message(
    node: Node, args: list[str], message: str
) -> None:
    rc, out = node.run(*args)
    assert rc == 2
    assert message in out


def test_full_query_layout(node: Node) -> None:
    rc, out = node.run("-q")
    assert rc == 0
    assert "==============NVSMI LOG==============" in out
    assert "Driver Version                            : 550.127.05\n" in out
    assert "CUDA Version                              : 12.4\n" in out
    assert "Attached GPUs                             : 8\n" in out
    assert out.count("\nGPU 00000000:") == 8
    assert "    Product Name                          : NVIDIA H100 80GB HBM3\n" in out
    assert "                Max                       : 5\n" in out
    assert "                Current                   : 16x\n" in out
    assert "            DRAM Uncorrectable            : 0\n" in out
    assert "        Pending                           : No\n" in out
    assert "        Total                             : 81559 MiB\n" in out


def test_full_query_display_filter_and_id(node: Node) -> None:
    rc, out = node.run("-q", "-d", "ECC,ROW_REMAPPER", "-i", "00000000:2A:00.0")
    assert rc == 0
    assert out.count("\nGPU 00000000:") == 1
    assert "GPU 00000000:2A:00.0" in out
    assert "ECC Errors" in out
    assert "Remapped Rows" in out
    assert "Product Name" not in out
    assert "FB Memory Usage" not in out


def test_summary_table(node: Node) -> None:
    rc, out = node.run()
    assert rc == 0
    lines = out.splitlines()
    banner = next(line for line in lines if "NVIDIA-SMI" in line)
    assert "NVIDIA-SMI 550.127.05" in banner
    assert "Driver Version: 550.127.05" in banner
    assert "CUDA Version: 12.4" in banner
    boxed = [line for line in lines if line.startswith(("|", "+"))]
    assert {len(line) for line in boxed} == {91}
    rows = [line for line in lines if re.match(r"\|\s+\d+  NVIDIA H100", line)]
    assert len(rows) == 8
    assert "00000000:DB:00.0 Off" in out
    assert "|  No running processes found" in out


def test_cuda_version_follows_the_branch(tmp_path: Path) -> None:
    n = Node(tmp_path, version="580.95.05", cuda="13.0")
    n.hardware(NodeHardware.for_node("H200", 8, True))
    n.load("580.95.05")
    rc, out = n.run()
    assert rc == 0
    assert "CUDA Version: 13.0" in out
    rc, out = n.run("--version")
    assert rc == 0
    assert out == (
        "NVIDIA-SMI version  : 580.95.05\nNVML version        : 580.95\n"
        "DRIVER version      : 580.95.05\nCUDA Version        : 13.0\n"
    )


@pytest.mark.parametrize(
    ("model", "count", "nvswitch", "expected_row0"),
    [
        ("H100", 8, True, [" X ", *["NV18"] * 7]),
        ("A100", 4, True, [" X ", "NV12", "NV12", "NV12"]),
        ("L40S", 4, False, [" X ", "PIX", "SYS", "SYS"]),
        ("L40S", 8, False, [" X ", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]),
        ("H100", 4, False, [" X ", "PIX", "SYS", "SYS"]),
    ],
)
def test_topology_matrix(
    tmp_path: Path, model: str, count: int, nvswitch: bool, expected_row0: list[str]
) -> None:
    n = Node(tmp_path)
    n.hardware(NodeHardware.for_node(model, count, nvswitch))
    n.load(V550)
    rc, out = n.run("topo", "-m")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split("\t")[1 : count + 1] == [f"GPU{i}" for i in range(count)]
    assert lines[0].endswith("CPU Affinity\tNUMA Affinity\tGPU NUMA ID")
    row0 = lines[1].split("\t")
    assert row0[0] == "GPU0"
    assert row0[1 : count + 1] == expected_row0
    assert "  NV#  = Connection traversing a bonded set of # NVLinks" in out


@pytest.mark.parametrize("fault", [[], ["topo"]], ids=["healthy", "topo"])
@pytest.mark.parametrize("model", ["H100", "H200", "A100", "L40S"])
def test_topology_reads_back_through_the_parser(
    tmp_path: Path, model: str, fault: list[str]
) -> None:
    """The matrix in the real layout (tabs, NIC rows and columns, affinities, both legends),
    read by the acceptance parser; the lab profile's rules pass a healthy board and name the
    pair of the `topo` fault."""
    nvswitch = model != "L40S"
    n = Node(tmp_path)
    hw = n.hardware(NodeHardware.for_node(model, 8, nvswitch, fault, seed="t"))
    n.load(V550)
    rc, out = n.run("topo", "-m")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == (
        "\t"
        + "\t".join([f"GPU{i}" for i in range(8)] + [f"NIC{j}" for j in range(4)])
        + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"
    )
    assert lines[1].endswith("\t0-55,112-167\t0\t\tN/A")
    assert lines[9].startswith("NIC0\tPIX\tPIX\tNODE\tNODE\tSYS")
    assert out.endswith(
        "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n"
    )
    topo = parse_topo(out)
    assert [g.label for g in topo.gpus] == [f"GPU{i}" for i in range(8)]
    assert [nic.name for nic in topo.nics] == [f"mlx5_{j}" for j in range(4)]
    assert [g.numa_nodes for g in topo.gpus] == [(0,)] * 4 + [(1,)] * 4
    nv = f"NV{GPU_MODELS[model].nvlinks}"
    expected = nv if nvswitch else "NODE"
    assert topo.link("GPU0", "GPU2") == expected
    assert topo.link("GPU0", "GPU4") == (nv if nvswitch else "SYS")
    rules = lab_profile().acceptance.topology
    assert rules is not None
    findings = {f.rule: f for f in judge(topo, rules)}
    assert findings["nic_gpu_link"].ok and findings["numa_balanced"].ok
    if not fault:
        assert findings["gpu_link_same_numa"].ok, findings["gpu_link_same_numa"].message
        return
    a, b = hw.topo_sys_pair or (0, 0)
    assert topo.link(f"GPU{a}", f"GPU{b}") == "SYS"
    broken = findings["gpu_link_same_numa"]
    assert not broken.ok and broken.pairs == ((f"GPU{a}", f"GPU{b}"),), broken.message


def test_fault_missing_gpu(tmp_path: Path) -> None:
    n = Node(tmp_path)
    hw = n.hardware(NodeHardware.for_node("H100", 8, True, ["missing-gpu"], seed="f"))
    n.load(V550)
    rc, out = n.run("-L")
    assert rc == 0
    assert len(out.splitlines()) == 7
    rc, out = n.run("--query-gpu=pci.bus_id", "--format=csv,noheader")
    assert hw.missing_pci_bus_ids[0] not in out.split()
    assert n.run("-q")[1].count("Attached GPUs                             : 7") == 1


def test_fault_ecc(tmp_path: Path) -> None:
    n = Node(tmp_path)
    n.hardware(NodeHardware.for_node("H100", 8, True, ["ecc"], seed="f"))
    n.load(V550)
    rc, out = n.run(
        "--query-gpu=ecc.errors.uncorrected.volatile.total,ecc.errors.uncorrected.aggregate.total,"
        "remapped_rows.pending,remapped_rows.uncorrectable",
        "--format=csv,noheader",
    )
    assert rc == 0
    rows = out.splitlines()
    assert sorted(rows) == ["0, 0, 0, 0"] * 7 + ["2, 2, 1, 1"]
    rc, out = n.run("--query-remapped-rows=gpu_bus_id,remapped_rows.pending", "--format=csv")
    assert rc == 0
    assert out.splitlines()[0] == "pci.bus_id, remapped_rows.pending"
    assert sum(line.endswith(", 1") for line in out.splitlines()) == 1
    table = n.run()[1]
    assert sum(1 for line in table.splitlines() if line.endswith("|                    2 |")) == 1


def _q_block(out: str, bus: str) -> str:
    """One GPU's part of ``nvidia-smi -q``."""
    start = out.index(f"GPU {bus}\n")
    end = out.find("\nGPU ", start + 1)
    return out[start : end if end > 0 else None]


@pytest.mark.parametrize(
    ("fault", "lines"),
    [
        # Remapped and reset long ago: lifetime counts only, nothing pending.
        (
            "remapped",
            [
                "            DRAM Uncorrectable            : 0\n",  # volatile
                "            DRAM Uncorrectable            : 2\n",  # aggregate
                "        Uncorrectable Error               : 1\n",
                "        Pending                           : No\n",
                "        Remapping Failure Occurred        : No\n",
                "    GPU Recovery Action                   : None\n",
            ],
        ),
        (
            "remap-failure",
            [
                "        Uncorrectable Error               : 8\n",
                "        Remapping Failure Occurred        : Yes\n",
            ],
        ),
        ("xid154", ["    GPU Recovery Action                   : Reset\n"]),
    ],
)
def test_memory_faults_in_the_full_query(tmp_path: Path, fault: str, lines: list[str]) -> None:
    n = Node(tmp_path)
    hw = n.hardware(NodeHardware.for_node("H100", 8, True, [fault], seed="f"))
    n.load(V550)
    rc, out = n.run("-q")
    assert rc == 0
    changed = [
        g
        for g in hw.gpus
        if g.ecc_uncorrected_aggregate or g.remapped_rows_failure or g.recovery_action != "None"
    ]
    assert len(changed) == 1
    block = _q_block(out, changed[0].pci_bus_id)
    for line in lines:
        assert line in block, (line, block)
    # Every other GPU reads clean.
    assert out.count("    GPU Recovery Action                   : None\n") == (
        8 if fault != "xid154" else 7
    )
    rc, out = n.run("--query-gpu=index,gpu_recovery_action", "--format=csv,noheader")
    assert rc == 0
    assert f"{changed[0].index}, {changed[0].recovery_action}" in out.splitlines()


def test_remapped_rows_query_rejects_gpu_fields(node: Node) -> None:
    rc, out = node.run("--query-remapped-rows=memory.total", "--format=csv")
    assert rc == 2
    assert 'Field "memory.total" is not a valid field to query.' in out


def test_fault_pcie(tmp_path: Path) -> None:
    n = Node(tmp_path)
    n.hardware(NodeHardware.for_node("H100", 8, True, ["pcie"], seed="f"))
    n.load(V550)
    rc, out = n.run(
        "--query-gpu=pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
        "pcie.link.width.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax",
        "--format=csv,noheader",
    )
    assert rc == 0
    # A really degraded link: the root port caps the Gen5 card at Gen3 x8, busy or idle.
    assert sorted(out.splitlines()) == ["3, 3, 8, 8, 5, 3"] + ["5, 5, 16, 16, 5, 5"] * 7


LINK_QUERY = ("--query-gpu=pcie.link.gen.current,pcie.link.gen.max", "--format=csv,noheader")


def test_fault_pcie_idle_lowers_the_link_until_the_gpus_are_busy(tmp_path: Path) -> None:
    n = Node(tmp_path)
    n.hardware(NodeHardware.for_node("H100", 8, True, ["pcie-idle"], seed="f"))
    n.load(V550)
    assert n.run(*LINK_QUERY) == (0, "1, 5\n" * 8)
    busy = tmp_path / "run/gpunode-lab/gpu-busy"
    busy.parent.mkdir(parents=True)
    worker = subprocess.Popen(["sleep", "30"])
    try:
        busy.write_text(f"{worker.pid}\n")
        assert n.run(*LINK_QUERY) == (0, "5, 5\n" * 8)
    finally:
        worker.kill()
        worker.wait()
    assert n.run(*LINK_QUERY) == (0, "1, 5\n" * 8)  # the work ended: idle again


def test_version_mismatch_after_an_upgrade_without_reboot(node: Node) -> None:
    node.install(V550_UPGRADE, "12.4")  # the upgrade replaced user space, module still 127.05
    expected = (
        "Failed to initialize NVML: Driver/library version mismatch\n"
        "NVML library version: 550.144\n"
    )
    for args in ([], ["-L"], ["--query-gpu=driver_version", "--format=csv,noheader"], ["-q"]):
        rc, out = node.run(*args)
        assert (rc, out) == (18, expected), args
    node.load(V550_UPGRADE)  # the reboot
    rc, out = node.run("--query-gpu=driver_version", "--format=csv,noheader")
    assert (rc, out) == (0, "550.144.03\n" * 8)


def test_no_module_loaded(node: Node) -> None:
    (node.state / "loaded-driver-version").unlink()
    rc, out = node.run("-L")
    assert rc == 9
    assert out.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA")


def test_no_gpus(node: Node) -> None:
    (node.state / "hardware.json").unlink()
    assert node.run("-L") == (6, "No devices were found\n")


def test_unknown_gpu_id(node: Node) -> None:
    assert node.run("-L", "-i", "8") == (6, "No devices were found\n")


def test_persistence_mode_legacy_and_daemon(node: Node) -> None:
    query = ("--query-gpu=persistence_mode", "--format=csv,noheader")
    assert node.run(*query)[1].splitlines() == ["Disabled"] * 8
    rc, out = node.run("-pm", "1", "-i", "0")
    assert rc == 0
    assert out == "Enabled Legacy persistence mode for GPU 00000000:18:00.0.\nAll done.\n"
    assert node.run(*query)[1].splitlines() == ["Enabled"] + ["Disabled"] * 7
    piddir = node.root / "run/nvidia-persistenced"
    piddir.mkdir(parents=True)
    (piddir / "nvidia-persistenced.pid").write_text(f"{os.getpid()}\n")  # a live process
    (piddir / "gpunode-lab-persistence-mode").write_text("0\n")  # --no-persistence-mode
    assert node.run(*query)[1].splitlines() == ["Enabled"] + ["Disabled"] * 7
    (piddir / "gpunode-lab-persistence-mode").write_text("1\n")  # --persistence-mode
    assert node.run(*query)[1].splitlines() == ["Enabled"] * 8
    rc, out = node.run("-pm", "maybe")
    assert rc == 2


def test_compute_apps_query_prints_the_header_only(node: Node) -> None:
    rc, out = node.run("--query-compute-apps=pid,process_name,used_memory", "--format=csv")
    assert (rc, out) == (0, "pid, process_name, used_gpu_memory [MiB]\n")


def test_unrendered_script_refuses_to_run(tmp_path: Path) -> None:
    raw = Path(package_spec.STANDINS / "nvidia_smi.py")
    done = subprocess.run(
        [sys.executable, str(raw), "-L"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 255
    assert "was not built" in done.stderr
