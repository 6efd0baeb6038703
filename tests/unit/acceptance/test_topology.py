"""`nvidia-smi topo -m`: the parser on public captures (tests/unit/data/topo/SOURCES.md) and
on the variations real captures carry, the topology rules, and the spec's validation."""

from __future__ import annotations

import pytest
from shared_fixtures import REPO

from toolkit.acceptance.topology import (
    TopologyUnreadable,
    describe_rule,
    judge,
    link_rank,
    meets,
    parse_topo,
    read_section,
    report,
)
from toolkit.config import validate
from toolkit.errors import ConfigError
from toolkit.profile.floors import AcceptanceSpec, TopologySpec, shipped_profile

DATA = REPO / "tests" / "unit" / "data" / "topo"
H100 = (DATA / "h100-sxm-8.txt").read_text()
H20_TABS = (DATA / "h20-sxm-8-tabs.txt").read_text()
L40S = (DATA / "l40s-pcie-4.txt").read_text()


def _replace_cell(text: str, row: str, column: int, value: str) -> str:
    """The capture with one cell of a space-separated row replaced (column 1 = first link)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        fields = line.split()
        if fields and fields[0] == row:
            fields[column] = value
            lines[i] = "\t".join(fields)
    return "\n".join(lines) + "\n"


# --- parsing the public captures ----------------------------------------------------------------


def test_h100_sxm_capture() -> None:
    topo = parse_topo(H100)
    assert [g.label for g in topo.gpus] == [f"GPU{i}" for i in range(8)]
    assert [n.name for n in topo.nics] == [f"mlx5_{i}" for i in range(8)]
    assert [n.label for n in topo.nics] == [f"NIC{i}" for i in range(8)]
    assert {topo.link(a.label, b.label) for a in topo.gpus for b in topo.gpus if a != b} == {"NV18"}
    assert topo.link("GPU3", "NIC3") == "PIX" and topo.link("NIC3", "GPU4") == "SYS"
    gpu0, gpu7 = topo.device("GPU0"), topo.device("GPU7")
    assert gpu0.cpu_affinity == "0-47,96-143" and gpu0.numa_nodes == (0,)
    assert gpu7.cpu_affinity == "48-95,144-191" and gpu7.numa_nodes == (1,)
    assert gpu0.gpu_numa_id is None  # "N/A"
    assert topo.device("NIC0").cpu_affinity is None


def test_tab_capture_with_padding_field_and_offset_nic_names() -> None:
    topo = parse_topo(H20_TABS)
    assert [n.name for n in topo.nics] == [f"mlx5_{i}" for i in range(1, 9)]
    assert topo.device("GPU5").numa_affinity == "1" and topo.device("GPU5").gpu_numa_id is None
    assert topo.link("GPU0", "NIC0") == "PIX"
    assert topo.device("NIC7").shown == "NIC7 (mlx5_8)"


def test_pcie_capture() -> None:
    topo = parse_topo(L40S)
    assert len(topo.gpus) == 4 and [n.name for n in topo.nics] == ["mlx5_0", "mlx5_1"]
    assert topo.link("GPU0", "GPU1") == "NODE" and topo.link("GPU1", "GPU2") == "SYS"
    assert topo.link("NIC0", "NIC1") == "PIX"
    assert topo.device("GPU3").cpu_affinity == "96-191,288-383"


def test_the_model_serialises_in_column_order() -> None:
    data = parse_topo(L40S).to_dict()
    labels = ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]
    assert [d["label"] for d in data["devices"]] == labels
    assert data["matrix"][0] == ["X", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert data["devices"][4]["name"] == "mlx5_0"


# --- variations real captures carry (derived from the captures above) ---------------------------


def test_ansi_colour_codes_and_a_prompt_line_are_ignored() -> None:
    coloured = H100.replace("NV18", "\x1b[32mNV18\x1b[0m").replace("SYS", "\x1b[1;31mSYS\x1b[0m")
    topo = parse_topo("root@node:~# nvidia-smi topo -m\n" + coloured)
    assert topo.link("GPU0", "GPU1") == "NV18" and topo.link("GPU0", "NIC4") == "SYS"


def test_older_layout_names_nic_columns_by_device_without_legend() -> None:
    """Before the NIC Legend, the columns were the RDMA devices themselves, and the table had
    no GPU NUMA ID column."""
    old = L40S.split("\nNIC Legend:")[0]
    old = old.replace("NIC0", "mlx5_0").replace("NIC1", "mlx5_1")
    old = old.replace("   GPU NUMA ID", "").replace("               N/A", "")
    topo = parse_topo(old)
    assert [n.label for n in topo.nics] == ["mlx5_0", "mlx5_1"]
    assert [n.name for n in topo.nics] == ["mlx5_0", "mlx5_1"]
    assert topo.device("GPU2").numa_nodes == (1,) and topo.device("GPU2").gpu_numa_id is None


def test_unknown_affinities_read_as_none() -> None:
    text = H20_TABS.replace("\t0-47,96-143\t0\t", "\tN/A\tN/A\t").replace(
        "\t48-95,144-191\t1\t", "\t\t1\t"
    )
    topo = parse_topo(text)
    gpu0, gpu4 = topo.device("GPU0"), topo.device("GPU4")
    assert gpu0.cpu_affinity is None and gpu0.numa_affinity is None and gpu0.numa_nodes == ()
    assert gpu4.cpu_affinity is None and gpu4.numa_nodes == (1,)


def test_text_after_the_nic_legend_is_not_read() -> None:
    topo = parse_topo(H100 + "\n\nulimit soft: 1000000\n")
    assert topo.device("NIC7").name == "mlx5_7"


def test_single_spaces_between_wide_device_names_in_the_header() -> None:
    text = L40S.replace("NIC0    NIC1    CPU", "NIC0 NIC1 CPU")
    assert [n.label for n in parse_topo(text).nics] == ["NIC0", "NIC1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no header row with a GPU0 column"),
        ("hello\nworld\n", "no header row with a GPU0 column"),
        (_replace_cell(H100, "GPU2", 5, "NVX"), "line 4: GPU2 to GPU4: 'NVX' is not a link kind"),
        (_replace_cell(H100, "GPU2", 3, "NV18"), "line 4: GPU2 to GPU2 reads 'NV18'; expected X"),
        (_replace_cell(H100, "GPU2", 4, "X"), "line 4: GPU2 to GPU3 reads 'X'; X is only the"),
        (H100.replace("GPU6    NV18", "GPU9    NV18"), "line 8: row 'GPU9' is not one of"),
        (
            "\n".join(line for line in H100.splitlines() if not line.startswith("NIC3")),
            "the header names NIC3 but no such row follows",
        ),
        (
            H100.replace("0-47,96-143     0               N/A", "0-47,96-143     N/A", 1),
            "line 2: expected 3 value(s) for the column(s) CPU Affinity, NUMA Affinity, "
            "GPU NUMA ID, found 2",
        ),
        (H100.replace("  NIC7: mlx5_7", "  NIC8: mlx5_8"), "NIC Legend names NIC8"),
        (H100.split("\nLegend:")[0], "line 18: no `Legend:` block after the matrix: the output"),
        (H100.replace("               N/A", "               N", 1), "GPU NUMA ID 'N' is not"),
        (H100.replace("  NIC7: mlx5_7", "  mlx5_7"), "is not a NIC Legend entry"),
        (
            H100.replace(
                "PIX     NODE    NODE    NODE    SYS     SYS     SYS     SYS     0-47", "PIX", 1
            ),
            "line 2: GPU0 has 11 fields for 16 link columns",
        ),
        (H100.replace("0-47,96-143     0  ", "0-47,96-143     zero", 1), "NUMA Affinity 'zero'"),
        (
            H100.replace("NIC0    PIX     NODE", "NIC0    PIX     NODE", 1).replace(
                "SYS     SYS     SYS     SYS\nNIC1", "SYS     SYS     SYS     SYS  0-47\nNIC1"
            ),
            "line 10: NIC0 carries values past its link cells",
        ),
    ],
)
def test_unreadable_input_names_the_line(text: str, expected: str) -> None:
    with pytest.raises(TopologyUnreadable) as info:
        parse_topo(text)
    assert expected in info.value.message


# --- link order and rules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("link", "rule", "ok"),
    [
        ("NV18", "NV18", True),
        ("NV12", "NV18", False),
        ("NV18", "NV12", True),
        ("NV1", "SYS", True),
        ("PIX", "NV1", False),
        ("PIX", "PXB", True),
        ("PXB", "PIX", False),
        ("PHB", "NODE", True),
        ("SYS", "NODE", False),
        ("SYS", "SYS", True),
        ("X", "SYS", False),
    ],
)
def test_meets(link: str, rule: str, ok: bool) -> None:
    assert meets(link, rule) is ok


def test_link_rank_orders_nearest_first() -> None:
    ordered = ["NV18", "NV12", "NV2", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert sorted(reversed(ordered), key=link_rank) == ordered
    with pytest.raises(ValueError, match="not a link kind"):
        link_rank("QPI")
    assert describe_rule("NV18") == "NVLink with at least 18 links"
    assert describe_rule("PXB") == "PXB or nearer"


def test_shipped_h100_rules_pass_the_h100_capture() -> None:
    rules = shipped_profile("h100-sxm-8").acceptance.topology
    assert rules is not None
    findings = judge(parse_topo(H100), rules)
    assert [(f.rule, f.ok) for f in findings] == [
        ("gpu_link", True),
        ("nic_gpu_link", True),
        ("numa_balanced", True),
    ]
    assert findings[0].message == "every one of 28 GPU pairs at NVLink with at least 18 links"


def test_a_pair_off_nvlink_is_named_with_its_link_and_the_rule() -> None:
    text = _replace_cell(_replace_cell(H100, "GPU3", 6, "SYS"), "GPU5", 4, "SYS")
    [finding] = judge(parse_topo(text), TopologySpec(gpu_link="NV18"))
    assert not finding.ok
    assert finding.message == (
        "1 of 28 GPU pairs farther than NV18: GPU3-GPU5 SYS (rule: NVLink with at least 18 links)"
    )
    assert finding.measured == [{"pair": ["GPU3", "GPU5"], "link": "SYS"}]
    assert finding.floor == "NV18" and finding.pairs == (("GPU3", "GPU5"),)


def test_one_direction_off_is_enough_to_fail() -> None:
    text = _replace_cell(H100, "GPU1", 8, "NV12")  # GPU1 -> GPU7 only
    [finding] = judge(parse_topo(text), TopologySpec(gpu_link="NV18"))
    assert "GPU1-GPU7 NV12" in finding.message


def test_same_numa_rule_skips_pairs_across_sockets() -> None:
    topo = parse_topo(L40S)
    [within] = judge(topo, TopologySpec(gpu_link_same_numa="NODE"))
    assert within.ok and "every one of 2 GPU pairs on one NUMA node" in within.message
    [everywhere] = judge(topo, TopologySpec(gpu_link="NODE"))
    assert not everywhere.ok and "4 of 6 GPU pairs farther than NODE" in everywhere.message


def test_nics_away_from_every_gpu_switch_are_named() -> None:
    [finding] = judge(parse_topo(L40S), TopologySpec(nic_gpu_link="PXB"))
    assert not finding.ok
    assert finding.message.startswith(
        "2 of 2 NICs farther than PXB from every GPU: NIC0 (mlx5_0): nearest GPU GPU2 at NODE"
    )
    assert finding.pairs == (("NIC0", "GPU2"), ("NIC1", "GPU2"))


def test_nic_rule_covers_only_the_named_nics() -> None:
    topo = parse_topo(_replace_cell(H100, "NIC7", 8, "SYS"))
    spec = TopologySpec(nic_gpu_link="PXB", nics=[f"mlx5_{i}" for i in range(7)])
    assert judge(topo, spec)[0].ok
    # Named, NIC7 is judged; left to its type, a NIC off every GPU's switch is a storage or
    # management port: shown, not judged (tests/unit/acceptance/test_topology_nics.py).
    [bad] = judge(topo, TopologySpec(nic_gpu_link="PXB", nics=[f"mlx5_{i}" for i in range(8)]))
    assert "NIC7 (mlx5_7): nearest GPU" in bad.message
    [shown] = judge(topo, TopologySpec(nic_gpu_link="PXB"))
    assert shown.ok and "not judged (storage or management): NIC7 (mlx5_7)" in shown.message
    [absent] = judge(topo, TopologySpec(nic_gpu_link="PXB", nics=["mlx5_9"]))
    assert not absent.ok and absent.message.startswith("NIC(s) mlx5_9 not in the topology")


def test_numa_balance() -> None:
    assert judge(parse_topo(H100), TopologySpec(numa_balanced=True))[0].measured == {
        "NUMA 0": 4,
        "NUMA 1": 4,
    }
    lopsided = H100.replace("48-95,144-191   1 ", "0-47,96-143     0 ", 3)
    [finding] = judge(parse_topo(lopsided), TopologySpec(numa_balanced=True))
    assert not finding.ok
    assert (
        finding.message
        == "7 GPUs on NUMA 0, 1 GPUs on NUMA 1: uneven (counts differ by more than one)"
    )
    unknown = H20_TABS.replace("\t0-47,96-143\t0\t", "\t\tN/A\t", 1)
    [finding] = judge(parse_topo(unknown), TopologySpec(numa_balanced=True))
    assert not finding.ok and finding.message.startswith("NUMA node not known for GPU0")


# --- the runner's section and the report's data --------------------------------------------------


def test_read_section() -> None:
    assert read_section(None) == (None, "nvidia-smi topo -m was not run")
    assert read_section({"raw_output": "", "error": "exited 6"}) == (
        None,
        "nvidia-smi topo -m failed: exited 6",
    )
    topo, error = read_section({"raw_output": "No devices were found\n", "error": None})
    assert topo is None and error is not None and "unreadable: no header row" in error
    topo, error = read_section({"raw_output": H100, "error": None})
    assert topo is not None and error is None


def test_report_marks_the_failing_pairs() -> None:
    text = _replace_cell(_replace_cell(H100, "GPU3", 6, "SYS"), "GPU5", 4, "SYS")
    data = report({"raw_output": text, "error": None}, TopologySpec(gpu_link="NV18"))
    assert data is not None and data["failing"] == [["GPU3", "GPU5"]] and data["error"] is None
    assert data["matrix"][3][5] == "SYS" and len(data["devices"]) == 16
    assert report(None, TopologySpec(gpu_link="NV18")) is None
    broken = report({"raw_output": "", "error": "exited 9"}, None)
    assert broken == {
        "error": "nvidia-smi topo -m failed: exited 9",
        "devices": [],
        "matrix": [],
        "failing": [],
    }


# --- the spec ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        ({"gpu_link": "NV"}, "hardware.acceptance.topology.gpu_link"),
        ({"gpu_link": "NVLINK"}, "'NVLINK' is not a link rule: NV<n>"),
        ({"nic_gpu_link": "pix"}, "hardware.acceptance.topology.nic_gpu_link"),
        ({"gpu_link_same_numa": "QPI"}, "one of PIX, PXB, PHB, NODE, SYS"),
        ({"numa_balance": True}, "hardware.acceptance.topology.numa_balance"),
        ({"numa_balance": True}, "numa_balanced"),
    ],
)
def test_spec_errors_name_the_key_and_the_rule(topology: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(
            AcceptanceSpec,
            {"topology": topology},
            "hw.yml",
            prefix=("hardware", "acceptance"),
        )
    assert expected in info.value.message


def test_spec_keys_replace_the_profiles_topology() -> None:
    from toolkit.acceptance.thresholds import effective

    own = AcceptanceSpec.model_validate({"profile": "h100-sxm-8", "topology": {"gpu_link": "NV12"}})
    rules = effective(own).topology
    assert rules is not None and rules.gpu_link == "NV12" and rules.nic_gpu_link is None
    assert TopologySpec().has_rules is False and TopologySpec(numa_balanced=True).has_rules


@pytest.mark.parametrize("capture", [H100, H20_TABS, L40S], ids=["h100", "h20-tabs", "l40s"])
def test_every_cut_and_every_dropped_line_parses_whole_or_fails_cleanly(capture: str) -> None:
    """Truncated or damaged captures give TopologyUnreadable, never another exception, and a
    capture that still parses has every device of its header (nothing silently dropped)."""
    lines = capture.splitlines()
    variants = [capture[:cut] for cut in range(0, len(capture), 5)]
    variants += ["\n".join(lines[:i] + lines[i + 1 :]) for i in range(len(lines))]
    for text in variants:
        try:
            topo = parse_topo(text)
        except TopologyUnreadable:
            continue
        header = next(line for line in text.splitlines() if line.split()[:1] == ["GPU0"])
        devices = [w for w in header.split() if w[:3] in ("GPU", "NIC") and w[3:].isdigit()]
        assert [d.label for d in topo.devices] == devices
