"""What nvidia-smi prints about the GPUs: ``-L``, the summary table and ``-q``."""

from __future__ import annotations

import time

from .state import (
    EXIT_INVALID,
    Driver,
    Gpu,
    SmiExit,
    enabled,
    free_mib,
    hbm,
    link_gen,
    load_hardware,
    persistence_enabled,
    yes_no,
)


def list_gpus(gpus: list[Gpu]) -> str:
    """`nvidia-smi -L`."""
    return "".join(f"GPU {g['index']}: {g['name']} (UUID: {g['uuid']})\n" for g in gpus)


def _cell(left: str, right: str, width: int) -> str:
    return left + " " * max(1, width - len(left) - len(right)) + right


HEADINGS = (
    (
        " GPU  Name                 Persistence-M ",
        " Bus-Id          Disp.A ",
        " Volatile Uncorr. ECC ",
    ),
    (
        " Fan  Temp   Perf          Pwr:Usage/Cap ",
        "           Memory-Usage ",
        " GPU-Util  Compute M. ",
    ),
    ("", "", "               MIG M. "),
)


def summary_table(gpus: list[Gpu], driver: Driver) -> str:
    """The table `nvidia-smi` prints without options."""
    rule = "+" + "-" * 89 + "+"
    lines = [time.strftime("%a %b %e %H:%M:%S %Y").ljust(31), rule]
    banner = (
        f" NVIDIA-SMI {driver.version}".ljust(35)
        + f"Driver Version: {driver.version}".ljust(31)
        + f"CUDA Version: {driver.cuda}"
    )
    lines.append("|" + banner.ljust(89) + "|")
    lines.append("|" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+")
    for left, middle, right in HEADINGS:
        lines.append(f"|{left:<41}|{middle:>24}|{right:>22}|")
    lines.append("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for gpu in gpus:
        name = gpu["name"] if len(gpu["name"]) <= 24 else gpu["name"][:21] + "..."
        pm = "On" if persistence_enabled(gpu) else "Off"
        ecc = str(gpu["ecc_uncorrected_volatile"]) if gpu["ecc_enabled"] else "N/A"
        used = f"{gpu['memory_used_mib']}MiB / {gpu['memory_total_mib']}MiB"
        power = f"{round(gpu['power_draw_w']):>4}W / {round(gpu['power_limit_w']):>4}W"
        mig = "Disabled" if hbm(gpu) else "N/A"
        col1 = _cell(f"{gpu['index']:>4}  {name}", f"{pm}  ", 41)
        col2 = f"{gpu['pci_bus_id']:>19} Off "
        col3 = f"{ecc:>21} "
        lines.append(f"|{col1}|{col2}|{col3}|")
        col1 = _cell(f" N/A  {gpu['temperature_c']:>3}C    P0", f"{power} ", 41)
        col2 = f"{used:>23} "
        col3 = f"{gpu['utilization_gpu_pct']:>7}%{'Default':>13} "
        lines.append(f"|{col1}|{col2}|{col3}|")
        lines.append(f"|{' ' * 41}|{' ' * 24}|{mig:>21} |")
        lines.append("+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+")
    lines += [
        " " * 91,
        rule,
        "| Processes:".ljust(90) + "|",
        "|  GPU   GI   CI        PID   Type   Process name" + " " * 30 + "GPU Memory |",
        "|        ID   ID" + " " * 63 + "Usage      |",
        "|" + "=" * 89 + "|",
        "|  No running processes found".ljust(90) + "|",
        rule,
    ]
    return "\n".join(lines) + "\n"


Node = tuple[str, object]  # (key, value) or (key, [children]) in the -q layout

DISPLAY_SECTIONS = {
    "MEMORY": {"FB Memory Usage", "BAR1 Memory Usage"},
    "UTILIZATION": {"Utilization"},
    "ECC": {"ECC Mode", "ECC Errors"},
    "TEMPERATURE": {"Temperature"},
    "POWER": {"GPU Power Readings"},
    "CLOCK": {"Clocks", "Max Clocks"},
    "COMPUTE": {"Compute Mode"},
    "PIDS": {"Processes"},
    "PERFORMANCE": {"Performance State", "Clocks Event Reasons"},
    "PAGE_RETIREMENT": {"Retired Pages"},
    "ROW_REMAPPER": {"Remapped Rows"},
}


def _gpu_nodes(gpu: Gpu, driver: Driver) -> list[Node]:
    g = gpu
    bus = g["pci_bus_id"]
    active = int(g["throttle_reasons_active"])
    ecc_v = [
        ("SRAM Correctable", 0),
        ("SRAM Uncorrectable Parity", 0),
        ("SRAM Uncorrectable SEC-DED", 0),
        ("DRAM Correctable", g["ecc_corrected_volatile"]),
        ("DRAM Uncorrectable", g["ecc_uncorrected_volatile"]),
    ]
    ecc_a = [
        ("SRAM Correctable", 0),
        ("SRAM Uncorrectable Parity", 0),
        ("SRAM Uncorrectable SEC-DED", 0),
        ("DRAM Correctable", g["ecc_corrected_aggregate"]),
        ("DRAM Uncorrectable", g["ecc_uncorrected_aggregate"]),
        ("SRAM Threshold Exceeded", "No"),
    ]
    banks = g["row_remap_banks"]
    reasons = [
        ("Idle", 0x1),
        ("Applications Clocks Setting", 0x2),
        ("SW Power Cap", 0x4),
        ("HW Slowdown", 0x8),
        ("HW Thermal Slowdown", 0x40),
        ("HW Power Brake Slowdown", 0x80),
        ("Sync Boost", 0x10),
        ("SW Thermal Slowdown", 0x20),
    ]
    return [
        ("Product Name", g["name"]),
        ("Product Brand", g["brand"]),
        ("Product Architecture", g["architecture"]),
        ("Display Mode", "Disabled"),
        ("Display Active", "Disabled"),
        ("Persistence Mode", enabled(persistence_enabled(g))),
        ("Addressing Mode", "None"),
        ("MIG Mode", [("Current", "Disabled"), ("Pending", "Disabled")] if hbm(g) else "N/A"),
        ("Accounting Mode", "Disabled"),
        ("Accounting Mode Buffer Size", "4000"),
        ("Driver Model", [("Current", "N/A"), ("Pending", "N/A")]),
        ("Serial Number", g["serial"]),
        ("GPU UUID", g["uuid"]),
        ("Minor Number", g["minor_number"]),
        ("VBIOS Version", g["vbios_version"]),
        ("MultiGPU Board", "No"),
        ("Board ID", "0x" + bus[9:11].lower() + "00"),
        ("Board Part Number", g["board_part_number"]),
        ("GPU Part Number", g["pci_device_id"][2:6] + "-885-A1"),
        # Where R565+ drivers print it, between "GPU Reset Status" and the GSP firmware
        # (tests/data/real/nvidia-smi-q.h100-sxm-8.565.57.01.txt).
        ("GPU Recovery Action", g.get("recovery_action", "None")),
        ("GSP Firmware Version", driver.version),
        (
            "PCI",
            [
                ("Bus", "0x" + bus[9:11]),
                ("Device", "0x" + bus[12:14]),
                ("Domain", "0x" + bus[4:8]),
                ("Device Id", g["pci_device_id"]),
                ("Bus Id", bus),
                ("Sub System Id", g["pci_subsystem_id"]),
                (
                    "GPU Link Info",
                    [
                        (
                            "PCIe Generation",
                            [
                                ("Max", g["pcie_gen_max"]),
                                ("Current", link_gen(g)),
                                ("Device Current", link_gen(g)),
                                ("Device Max", g.get("pcie_gen_gpu_max", g["pcie_gen_max"])),
                                ("Host Max", g.get("pcie_gen_host_max", g["pcie_gen_max"])),
                            ],
                        ),
                        (
                            "Link Width",
                            [
                                ("Max", f"{g['pcie_width_max']}x"),
                                ("Current", f"{g['pcie_width_current']}x"),
                            ],
                        ),
                    ],
                ),
                ("Replays Since Reset", "0"),
                ("Tx Throughput", "0 KB/s"),
                ("Rx Throughput", "0 KB/s"),
                ("Atomic Caps Inbound", "N/A"),
                ("Atomic Caps Outbound", "N/A"),
            ],
        ),
        ("Fan Speed", "N/A"),
        ("Performance State", "P0"),
        (
            "Clocks Event Reasons",
            [(label, "Active" if active & bit else "Not Active") for label, bit in reasons],
        ),
        (
            "FB Memory Usage",
            [
                ("Total", f"{g['memory_total_mib']} MiB"),
                ("Reserved", f"{g['memory_reserved_mib']} MiB"),
                ("Used", f"{g['memory_used_mib']} MiB"),
                ("Free", f"{free_mib(g)} MiB"),
            ],
        ),
        (
            "BAR1 Memory Usage",
            [("Total", "131072 MiB"), ("Used", "1 MiB"), ("Free", "131071 MiB")],
        ),
        ("Compute Mode", "Default"),
        (
            "Utilization",
            [
                ("Gpu", f"{g['utilization_gpu_pct']} %"),
                ("Memory", f"{g['utilization_mem_pct']} %"),
                ("Encoder", "0 %"),
                ("Decoder", "0 %"),
            ],
        ),
        (
            "ECC Mode",
            [("Current", enabled(g["ecc_enabled"])), ("Pending", enabled(g["ecc_enabled"]))],
        ),
        ("ECC Errors", [("Volatile", ecc_v), ("Aggregate", ecc_a)]),
        (
            "Retired Pages",
            [
                ("Single Bit ECC", "N/A"),
                ("Double Bit ECC", "N/A"),
                ("Pending Page Blacklist", "N/A"),
            ],
        ),
        (
            "Remapped Rows",
            [
                ("Correctable Error", g["remapped_rows_correctable"]),
                ("Uncorrectable Error", g["remapped_rows_uncorrectable"]),
                ("Pending", yes_no(g["remapped_rows_pending"])),
                ("Remapping Failure Occurred", yes_no(g["remapped_rows_failure"])),
                (
                    "Bank Remap Availability Histogram",
                    [
                        ("Max", f"{banks - g['remapped_rows_uncorrectable']} bank(s)"),
                        ("High", "0 bank(s)"),
                        ("Partial", f"{g['remapped_rows_uncorrectable']} bank(s)"),
                        ("Low", "0 bank(s)"),
                        ("None", "0 bank(s)"),
                    ],
                ),
            ],
        ),
        (
            "Temperature",
            [
                ("GPU Current Temp", f"{g['temperature_c']} C"),
                ("GPU T.Limit Temp", f"{g['slowdown_temp_c'] - g['temperature_c']} C"),
                ("GPU Shutdown Temp", f"{g['shutdown_temp_c']} C"),
                ("GPU Slowdown Temp", f"{g['slowdown_temp_c']} C"),
                ("GPU Max Operating Temp", f"{g['slowdown_temp_c'] - 2} C"),
                ("Memory Current Temp", f"{g['temperature_c'] + 9} C" if hbm(g) else "N/A"),
                ("Memory Max Operating Temp", "95 C" if hbm(g) else "N/A"),
            ],
        ),
        (
            "GPU Power Readings",
            [
                ("Power Draw", f"{g['power_draw_w']:.2f} W"),
                ("Current Power Limit", f"{g['power_limit_w']:.2f} W"),
                ("Requested Power Limit", f"{g['power_limit_w']:.2f} W"),
                ("Default Power Limit", f"{g['power_limit_w']:.2f} W"),
                ("Min Power Limit", f"{g['power_min_limit_w']:.2f} W"),
                ("Max Power Limit", f"{g['power_limit_w']:.2f} W"),
            ],
        ),
        (
            "Clocks",
            [
                ("Graphics", f"{g['clocks_sm_mhz']} MHz"),
                ("SM", f"{g['clocks_sm_mhz']} MHz"),
                ("Memory", f"{g['clocks_mem_mhz']} MHz"),
                ("Video", "765 MHz"),
            ],
        ),
        (
            "Max Clocks",
            [
                ("Graphics", f"{g['clocks_max_sm_mhz']} MHz"),
                ("SM", f"{g['clocks_max_sm_mhz']} MHz"),
                ("Memory", f"{g['clocks_max_mem_mhz']} MHz"),
                ("Video", f"{g['clocks_max_video_mhz']} MHz"),
            ],
        ),
        ("Processes", "None"),
    ]


def _render(nodes: list[Node], depth: int, out: list[str]) -> None:
    indent = "    " * depth
    for key, value in nodes:
        if isinstance(value, list):
            out.append(indent + key)
            _render(value, depth + 1, out)
        else:
            out.append(f"{indent + key:<42}: {value}")


def full_query(gpus: list[Gpu], display: str | None, driver: Driver) -> str:
    """`nvidia-smi -q` (with `-d`, only those sections)."""
    wanted: set[str] | None = None
    if display is not None:
        wanted = set()
        for kind in display.split(","):
            kind = kind.strip().upper()
            if kind not in DISPLAY_SECTIONS:
                raise SmiExit(
                    f'"{kind}" is not a valid display type.\n'
                    "Please run 'nvidia-smi -h' for help.\n",
                    EXIT_INVALID,
                )
            wanted |= DISPLAY_SECTIONS[kind]
    hardware = load_hardware()
    out = ["", "==============NVSMI LOG==============", ""]
    _render(
        [
            ("Timestamp", time.strftime("%a %b %e %H:%M:%S %Y")),
            ("Driver Version", driver.version),
            ("CUDA Version", driver.cuda),
        ],
        0,
        out,
    )
    out.append("")
    _render([("Attached GPUs", len(hardware.get("gpus", gpus)))], 0, out)
    for gpu in gpus:
        nodes = _gpu_nodes(gpu, driver)
        if wanted is not None:
            nodes = [node for node in nodes if node[0] in wanted]
        out.append(f"GPU {gpu['pci_bus_id']}")
        _render(nodes, 1, out)
        out.append("")
    return "\n".join(out) + "\n"
