"""Node facts: table-driven tests of the parsers and the drift comparison."""

from __future__ import annotations

from typing import Any

import pytest

from toolkit.facts.dpkg import (
    parse_dpkg_query,
    parse_holds,
    parse_madison,
    parse_rdepends,
    strip_epoch_revision,
)
from toolkit.facts.nvidia import (
    LoadedDriver,
    parse_nvidia_smi_driver,
    parse_nvidia_smi_list,
    parse_proc_driver_version,
)
from toolkit.facts.pci import lspci_gpus, lspci_nvswitches, parse_lspci
from toolkit.facts.system import os_facts, parse_secure_boot
from toolkit.node.aptpins import (
    family_changes,
    is_stale_driver_package,
    missing_pins,
    pick_versions,
)
from toolkit.node.drift import compare, pinned_packages
from toolkit.node.nodefacts import (
    gpu_model_names,
    node_facts,
    parse_sections,
    profile_warnings,
    with_drift,
)
from toolkit.stack.catalog import lookup_gpu
from toolkit.stack.systems import UnsupportedOS, os_id


@pytest.mark.parametrize(
    ("dist", "version", "expected"),
    [
        ("Ubuntu", "22.04", "ubuntu2204"),
        ("Ubuntu", "24.04", "ubuntu2404"),
        ("Debian", "12", "debian12"),
        ("Debian", "12.7", "debian12"),
    ],
)
def test_os_id(dist: str, version: str, expected: str) -> None:
    assert os_id(dist, version) == expected


@pytest.mark.parametrize(
    ("dist", "version"), [("Ubuntu", "20.04"), ("Debian", "11"), ("CentOS", "9"), ("", "")]
)
def test_os_id_unsupported(dist: str, version: str) -> None:
    with pytest.raises(UnsupportedOS, match=r"supported: Ubuntu 22\.04, Ubuntu 24\.04, Debian 12"):
        os_id(dist, version)


MISMATCH_OUTPUT = (
    "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144\n"
)

LSPCI = """\
00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 04)
05:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)
06:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)
18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
2a:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] (rev a1)
65:00.0 VGA compatible controller [0300]: ASPEED Technology ASPEED Graphics [1a03:2000] (rev 52)
b1:00.0 VGA compatible controller [0300]: NVIDIA Corporation AD102GL [L40S] [10de:26b9] (rev a1)
"""


def test_parse_lspci() -> None:
    devices = parse_lspci(LSPCI)
    assert [d.slot for d in devices] == ["05:00.0", "06:00.0", "18:00.0", "2a:00.0", "b1:00.0"]
    gpus = lspci_gpus(devices)
    assert [g.device_id for g in gpus] == ["2330", "2330", "26b9"]
    assert gpus[0].description == "NVIDIA Corporation GH100 [H100 SXM5 80GB]"
    assert len(lspci_nvswitches(devices)) == 2
    assert parse_lspci("") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1b2c)\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-3d4e)\n",
            [
                ("0", "NVIDIA H100 80GB HBM3", "GPU-1b2c"),
                ("1", "NVIDIA H100 80GB HBM3", "GPU-3d4e"),
            ],
        ),
        ("No devices were found\n", []),
        ("GPU 0: Tesla V100-SXM2-32GB (UUID: GPU-aa)", [("0", "Tesla V100-SXM2-32GB", "GPU-aa")]),
    ],
)
def test_parse_nvidia_smi_list(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert [(g["index"], g["name"], g["uuid"]) for g in parse_nvidia_smi_list(text)] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SecureBoot enabled\n", True),
        ("SecureBoot disabled\n", False),
        ("This system doesn't support Secure Boot\n", False),
        ("EFI variables are not supported on this system\n", None),
        ("", None),
    ],
)
def test_parse_secure_boot(text: str, expected: bool | None) -> None:
    assert parse_secure_boot(text) is expected


def test_parse_dpkg_query_only_installed() -> None:
    text = (
        "nvidia-driver-550-open\t550.127.05-1\thi \n"
        "libnccl2:amd64\t2.21.5-1+cuda12.4\tii \n"
        "nvidia-dkms-550\t550.127.05-1\trc \n"
        "nvidia-utils-550\t\tun \n"
        "broken line\n"
    )
    assert parse_dpkg_query(text) == {
        "nvidia-driver-550-open": "550.127.05-1",
        "libnccl2": "2.21.5-1+cuda12.4",
    }


def test_parse_holds() -> None:
    assert parse_holds("libnccl2\nnvidia-utils-550:amd64\n\n") == {
        "libnccl2",
        "nvidia-utils-550",
    }


@pytest.mark.parametrize(
    ("stdout", "rc", "version", "mismatch", "library", "detail"),
    [
        ("550.127.05\n550.127.05\n", 0, "550.127.05", False, None, ""),
        (None, None, None, False, None, "nvidia-smi not installed"),
        (
            MISMATCH_OUTPUT,
            18,
            None,
            True,
            "550.144",
            "Driver/library version mismatch",
        ),
        (
            "Failed to initialize NVML: Driver/library version mismatch\n",
            18,
            None,
            True,
            None,
            "Driver/library version mismatch",
        ),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
            9,
            None,
            False,
            None,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        ),
        (
            "550.127.05\n580.95.05\n",
            0,
            None,
            False,
            None,
            "GPUs report different drivers: ['550.127.05', '580.95.05']",
        ),
        ("", 0, None, False, None, "no GPU reported"),
    ],
)
def test_parse_nvidia_smi_driver(
    stdout: str | None,
    rc: int | None,
    version: str | None,
    mismatch: bool,
    library: str | None,
    detail: str,
) -> None:
    loaded = parse_nvidia_smi_driver(stdout or "", "", rc)
    assert (loaded.version, loaded.mismatch, loaded.library_version, loaded.detail) == (
        version,
        mismatch,
        library,
        detail,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build"
            "  (dvs-builder@U16)\n"
            "GCC version:  gcc version 12.2.0\n",
            ("550.127.05", True),
        ),
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05"
            "  Sat Aug 19 01:15:15 UTC 2023\n",
            ("535.104.05", False),
        ),
        ("", (None, None)),
    ],
)
def test_parse_proc_driver_version(text: str, expected: tuple[str | None, bool | None]) -> None:
    assert parse_proc_driver_version(text) == expected


def test_parse_madison_and_missing_pins() -> None:
    text = (
        "  libnccl2 | 2.21.5-1+cuda12.4 | http://repo/ Packages\n"
        "  libnccl2 | 2.26.2-1+cuda12.8 | http://repo/ Packages\n"
        "libnccl-dev | 2.21.5-1+cuda12.4 | http://repo/ Packages\n"
        "garbage\n"
    )
    offered = parse_madison(text)
    assert offered == {
        "libnccl2": ["2.21.5-1+cuda12.4", "2.26.2-1+cuda12.8"],
        "libnccl-dev": ["2.21.5-1+cuda12.4"],
    }
    pins = {"libnccl2": "2.26.2-1+cuda12.8", "libnccl-dev": "2.26.2-1+cuda12.8", "x": "1"}
    assert missing_pins(pins, offered) == ["libnccl-dev=2.26.2-1+cuda12.8", "x=1"]
    assert missing_pins({"libnccl2": "2.21.5-1+cuda12.4"}, offered) == []


DEBIAN_OPEN = {"nvidia-driver": "x", "nvidia-kernel-open-dkms": "x", "nvidia-smi": "x"}
DEBIAN_PROPRIETARY = {"nvidia-driver": "x", "nvidia-kernel-dkms": "x", "cuda-drivers-580": "x"}
PINS_580 = {
    "nvidia-open": "580.95.05-1",
    "nvidia-driver-580-open": "580.95.05-1",
    "nvidia-dkms-580-open": "580.95.05-1",
    "nvidia-driver-pinning-580.95.05": "580.95.05-1",
}


@pytest.mark.parametrize(
    ("name", "pins", "branch", "flavour", "stale"),
    [
        ("nvidia-driver-550-open", PINS_580, "580", "open", True),
        ("libnvidia-compute-550", PINS_580, "580", "open", True),
        ("libnvidia-compute-580", PINS_580, "580", "open", False),  # a dependency stays
        ("nvidia-persistenced", PINS_580, "580", "open", False),
        ("nvidia-driver-pinning-580.82.07", PINS_580, "580", "open", True),
        ("nvidia-driver-580", PINS_580, "580", "open", True),  # the other flavour
        ("cuda-drivers", PINS_580, "580", "open", True),
        ("nvidia-open", {"nvidia-driver-550-open": "x"}, "550", "open", True),
        ("nvidia-open", {"cuda-drivers-550": "x"}, "550", "proprietary", True),
        ("nvidia-driver-550-open", {"nvidia-driver-550": "x"}, "550", "proprietary", True),
        ("nvidia-driver-580-open", PINS_580, "580", "open", False),
        # From R590 Ubuntu's names carry no branch; Debian's never do.
        ("nvidia-driver", {"nvidia-driver-open": "x"}, "595", "open", True),
        ("nvidia-dkms", {"nvidia-dkms-open": "x"}, "595", "open", True),
        ("nvidia-dkms-open", {"nvidia-dkms": "x"}, "595", "proprietary", True),
        ("nvidia-kernel-dkms", DEBIAN_OPEN, "580", "open", True),
        ("nvidia-kernel-open-dkms", DEBIAN_PROPRIETARY, "580", "proprietary", True),
        ("nvidia-open-kernel-dkms", DEBIAN_PROPRIETARY, "580", "proprietary", True),  # Debian's
        ("nvidia-driver", DEBIAN_OPEN, "580", "open", False),  # both flavours pin it
        ("nvidia-kernel-open-dkms", DEBIAN_OPEN, "580", "open", False),
    ],
)
def test_is_stale_driver_package(
    name: str, pins: dict[str, str], branch: str, flavour: str, stale: bool
) -> None:
    assert is_stale_driver_package(name, pins, branch, flavour) is stale


def test_family_changes_driver_move() -> None:
    installed = {
        "nvidia-driver-550-open": "550.127.05-1",
        "nvidia-dkms-550-open": "550.127.05-1",
        "libnvidia-compute-550": "550.127.05-1",
        "nvidia-persistenced": "550.127.05-1",
    }
    pins = {**PINS_580, "nvidia-persistenced": "580.95.05-1"}
    changes = family_changes(installed, pins, "580", "open")
    assert changes == {
        "stale": ["libnvidia-compute-550", "nvidia-dkms-550-open", "nvidia-driver-550-open"],
        "moving": ["nvidia-persistenced"],
        "install": sorted(PINS_580),
    }


def test_family_changes_without_branch_every_unpinned_is_stale() -> None:
    changes = family_changes({"cuda-toolkit-12-4": "12.4.1-1"}, {"cuda-toolkit-12-8": "12.8.1-1"})
    assert changes == {
        "stale": ["cuda-toolkit-12-4"],
        "moving": [],
        "install": ["cuda-toolkit-12-8"],
    }


RESOLVED: dict[str, Any] = {
    "stack_id": "abc",
    "driver": {
        "version": "550.127.05",
        "packages": {"nvidia-driver-550-open": "550.127.05-1", "nvidia-utils-550": "550.127.05-1"},
        "pinning_packages": {},
    },
    "cuda": {"version": "12.4.1", "packages": {"cuda-toolkit-12-4": "12.4.1-1"}},
    "nccl": {"version": "2.21.5", "packages": {"libnccl2": "2.21.5-1+cuda12.4"}},
    "fabric_manager": {"enabled": False, "packages": {}},
    "container_toolkit": {"packages": {"nvidia-container-toolkit": "1.16.2-1"}},
}


def test_pinned_packages_leaves_out_disabled_parts() -> None:
    pins = pinned_packages(RESOLVED)
    assert set(pins) == {"driver", "cuda", "nccl", "container_toolkit"}
    assert pins["driver"]["nvidia-utils-550"] == "550.127.05-1"


def test_compare_converged_node_has_no_drift() -> None:
    installed = {p: v for part in pinned_packages(RESOLVED).values() for p, v in part.items()}
    loaded = LoadedDriver(version="550.127.05")
    report, drifts = compare(RESOLVED, installed, set(installed), loaded)
    assert drifts == []
    assert report["driver"]["nvidia-utils-550"] == {
        "pinned": "550.127.05-1",
        "installed": "550.127.05-1",
        "held": True,
    }
    assert report["loaded_driver"]["loaded"] == "550.127.05"


def test_compare_finds_every_kind_of_drift() -> None:
    installed = {
        "nvidia-driver-550-open": "550.144.03-1",  # unattended upgrade
        "nvidia-utils-550": "550.127.05-1",  # right version, hold released
        "cuda-toolkit-12-4": "12.4.1-1",
        "nvidia-container-toolkit": "1.16.2-1",
    }
    held = {"cuda-toolkit-12-4", "nvidia-container-toolkit", "nvidia-driver-550-open"}
    loaded = parse_nvidia_smi_driver(
        MISMATCH_OUTPUT,
        "",
        18,
    )
    _, drifts = compare(RESOLVED, installed, held, loaded)
    messages = [d.message("n1") for d in drifts]
    assert messages == [
        "n1: nvidia-driver-550-open pinned 550.127.05-1, installed 550.144.03-1",
        "n1: nvidia-utils-550 550.127.05-1 is not held",
        "n1: libnccl2 pinned 2.21.5-1+cuda12.4 is not installed",
        "n1: driver module loaded mismatch (library 550.144), pinned 550.127.05",
    ]


PROBE_OUTPUT = """\
@@gpunode-fact lspci@@
@@gpunode-fact-end missing@@
@@gpunode-fact smi_list@@
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)
@@gpunode-fact-end 0@@
@@gpunode-fact smi_driver@@
550.127.05
550.127.05
@@gpunode-fact-end 0@@
@@gpunode-fact proc_version@@
cat: /proc/driver/nvidia/version: No such file or directory
@@gpunode-fact-end 1@@
@@gpunode-fact mokutil@@
@@gpunode-fact-end missing@@
@@gpunode-fact dpkg@@
nvidia-driver-550-open\t550.127.05-1\thi
nvidia-utils-550\t550.127.05-1\thi
cuda-toolkit-12-4\t12.4.1-1\thi
libnccl2\t2.21.5-1+cuda12.4\thi
nvidia-container-toolkit\t1.16.2-1\thi
bash\t5.2.15-2+b7\tii
@@gpunode-fact-end 0@@
@@gpunode-fact holds@@
nvidia-driver-550-open
nvidia-utils-550
cuda-toolkit-12-4
libnccl2
nvidia-container-toolkit
@@gpunode-fact-end 0@@
@@gpunode-fact kernel@@
6.1.0-28-amd64
@@gpunode-fact-end 0@@
""".replace("\\t", "\t")


def test_parse_sections() -> None:
    sections = parse_sections(PROBE_OUTPUT)
    assert sections["lspci"] == (None, "")
    assert sections["proc_version"][0] == 1
    assert sections["kernel"] == (0, "6.1.0-28-amd64")


def test_node_facts_with_a_stack() -> None:
    facts = node_facts(parse_sections(PROBE_OUTPUT), RESOLVED)
    assert facts["gpu_count"] == 2 and facts["gpu_source"] == "nvidia-smi"
    assert facts["nvswitch_count"] is None and facts["secure_boot"] is None
    assert facts["kernel"] == "6.1.0-28-amd64"
    assert "bash" not in facts["installed"]
    assert facts["loaded_driver"]["version"] == "550.127.05"
    assert facts["drift"] == []
    assert facts["versions"]["nccl"]["libnccl2"]["held"] is True


def test_node_facts_without_a_stack_or_driver() -> None:
    sections = {"lspci": (0, LSPCI), "smi_list": (None, ""), "mokutil": (0, "SecureBoot enabled")}
    facts = node_facts(sections, None)
    assert facts["gpu_source"] == "lspci" and facts["gpu_count"] == 3
    assert facts["nvswitch_count"] == 2 and facts["secure_boot"] is True
    assert "drift" not in facts


def test_gpu_model_names() -> None:
    names = ["NVIDIA H100 80GB HBM3", "NVIDIA Corporation GH100 [H100 SXM5 80GB]", "Matrox G200"]
    assert gpu_model_names(names, lookup_gpu) == ["H100", "H100", None]


def test_strip_epoch_revision() -> None:
    assert strip_epoch_revision("550.127.05-1") == "550.127.05"
    assert strip_epoch_revision("1:4.1.1-1") == "4.1.1"
    assert strip_epoch_revision("12") == "12"


@pytest.mark.parametrize(
    ("facts", "warnings"),
    [
        ({"gpu_count": 8, "gpu_source": "nvidia-smi", "nvswitch_count": None}, []),
        (
            {"gpu_count": 7, "gpu_source": "nvidia-smi", "nvswitch_count": None},
            ["7 GPU(s) seen by nvidia-smi, the hardware profile says 8"],
        ),
        (
            {"gpu_count": 8, "gpu_source": "lspci", "nvswitch_count": 0},
            ["the hardware profile says NVSwitch, but lspci shows no NVSwitch"],
        ),
        (
            {"gpu_count": 0, "gpu_source": "lspci", "nvswitch_count": 4},
            ["no NVIDIA GPU on the PCI bus (lspci)"],
        ),
        ({"gpu_count": 0, "gpu_source": "none", "nvswitch_count": None}, []),
    ],
)
def test_profile_warnings(facts: dict[str, Any], warnings: list[str]) -> None:
    hardware = {"gpu": {"model": "H100", "count": 8, "nvswitch": True}}
    assert profile_warnings(facts, hardware) == warnings


def test_parse_rdepends() -> None:
    text = (
        "nvidia-driver-580-open\nReverse Depends:\n  nvidia-open\n |cuda-drivers\n"
        "libnvidia-compute-580\nReverse Depends:\n  nvidia-utils-580\n  nvidia-open\n"
    )
    assert parse_rdepends(text) == ["cuda-drivers", "nvidia-open", "nvidia-utils-580"]
    assert parse_rdepends("") == []


# Real-format `lspci -nn` lines: a current pci.ids names the product, an older one only the id.
LSPCI_BY_ID = [
    (
        "18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5 80GB] [10de:2330] "
        "(rev a1)",
        "H100",
    ),
    ("18:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2330] (rev a1)", "H100"),
    ("19:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2335] (rev a1)", "H200"),
    (
        "07:00.0 3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 80GB] [10de:20b2] "
        "(rev a1)",
        "A100",
    ),
    (
        "01:00.0 3D controller [0302]: NVIDIA Corporation AD102GL [L40S] [10de:26b9] (rev a1)",
        "L40S",
    ),
    (
        "3b:00.0 3D controller [0302]: NVIDIA Corporation TU104GL [Tesla T4] [10de:1eb8] (rev a1)",
        "T4",
    ),
    # An id the catalog lacks: the bracketed name is the hint.
    (
        "41:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 PCIe] [10de:9999] (rev a1)",
        "H100",
    ),
    ("41:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:9999] (rev a1)", None),
]


@pytest.mark.parametrize(("line", "model"), LSPCI_BY_ID)
def test_gpu_model_from_lspci_device_id(line: str, model: str | None) -> None:
    from toolkit.stack.catalog import lookup_gpu_by_pci_id

    sections = {"lspci": (0, line + "\n"), "smi_list": (None, "")}
    facts = node_facts(sections, None)
    assert facts["gpu_source"] == "lspci" and facts["gpu_count"] == 1
    assert facts["gpu_pci_ids"] == ["10de:" + line.split("[10de:")[1][:4]]
    models = gpu_model_names(facts["gpus"], lookup_gpu, facts["gpu_pci_ids"], lookup_gpu_by_pci_id)
    assert models == [model]


def test_every_catalog_pci_id_is_one_models() -> None:
    from toolkit.stack.catalog import catalog, lookup_gpu_by_pci_id

    ids = [i for info in catalog() for i in info.pci_device_ids]
    assert len(ids) == len(set(ids)) and all(len(i) == 4 for i in ids)
    assert lookup_gpu_by_pci_id("10de:2330").model == "H100"  # type: ignore[union-attr]
    assert lookup_gpu_by_pci_id("0x2335").model == "H200"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("pins", "expected"),
    [
        # The newest revision of the upstream version wins, not a newer upstream version.
        ({"docker.io": "27.5.1-*"}, {"docker.io": "27.5.1-0ubuntu3~22.04.3"}),
        ({"docker.io": "27.5.1-0ubuntu3~22.04.2"}, {"docker.io": "27.5.1-0ubuntu3~22.04.2"}),
        ({"docker.io": "26.1.3-*"}, {"docker.io": "26.1.3-*"}),  # gone: named by the check
        ({"runc": "1.2.5-*"}, {"runc": "1.2.5-*"}),
        # A floor (Ubuntu moves Docker's upstream version within a release): the newest.
        ({"docker.io": ">=27.5.1"}, {"docker.io": "28.2.2-0ubuntu1~22.04.1"}),
        ({"docker.io": ">=29.0.0"}, {"docker.io": ">=29.0.0"}),
    ],
)
def test_pick_versions_of_upstream_requirements(
    pins: dict[str, str], expected: dict[str, str]
) -> None:
    offered = {"docker.io": ["28.2.2-0ubuntu1~22.04.1", "27.5.1-0ubuntu3~22.04.3",
                             "27.5.1-0ubuntu3~22.04.2"]}  # fmt: skip
    assert pick_versions(pins, offered) == expected


def test_a_floor_nothing_meets_is_named_as_a_floor() -> None:
    offered = {"docker.io": ["27.5.1-0ubuntu3~22.04.2"]}
    assert missing_pins({"docker.io": ">=28.2.2"}, offered) == ["docker.io (>=28.2.2)"]
    assert missing_pins({"docker.io": "27.5.1-0ubuntu3~22.04.2"}, offered) == []


# /etc/os-release and /etc/debian_version as the distributions ship them (Debian 12's
# base-files 12.4+deb12u7, Ubuntu 22.04's and 24.04's base-files; see os-release(5)).
DEBIAN_12 = """PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
"""
UBUNTU_2204 = """PRETTY_NAME="Ubuntu 22.04.5 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.5 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
UBUNTU_CODENAME=jammy
"""
UBUNTU_2404 = UBUNTU_2204.replace("22.04.5 LTS", "24.04.1 LTS").replace('"22.04"', '"24.04"')


@pytest.mark.parametrize(
    ("os_release", "debian_version", "expected", "target"),
    [
        (DEBIAN_12, "12.7\n", ("Debian", "12.7", "12"), "debian12"),
        (UBUNTU_2204, "bookworm/sid\n", ("Ubuntu", "22.04", "22"), "ubuntu2204"),
        (UBUNTU_2404, "trixie/sid\n", ("Ubuntu", "24.04", "24"), "ubuntu2404"),
    ],
)
def test_os_facts_are_named_as_ansible_setup_names_them(
    os_release: str, debian_version: str, expected: tuple[str, str, str], target: str
) -> None:
    facts = os_facts(os_release, debian_version, "6.1.0-26-amd64\n", "x86_64\n")
    got = (facts["distribution"], facts["distribution_version"])
    assert (*got, facts["distribution_major_version"]) == expected
    assert facts["kernel"] == "6.1.0-26-amd64" and facts["architecture"] == "x86_64"
    assert os_id(facts["distribution"], facts["distribution_version"]) == target


def test_os_facts_of_an_unsupported_os_name_it() -> None:
    rocky = 'NAME="Rocky Linux"\nID="rocky"\nVERSION_ID="9.4"\n'
    facts = os_facts(rocky, "", "5.14.0", "x86_64")
    assert facts["distribution"] == "Rocky Linux"
    with pytest.raises(UnsupportedOS, match=r"Rocky Linux 9\.4"):
        os_id(facts["distribution"], facts["distribution_version"])


def test_drift_added_after_the_facts_is_the_drift_read_with_them() -> None:
    sections = {
        "dpkg": (0, "nvidia-utils-550\t550.90.07-1\tii \n"),
        "holds": (0, ""),
        "smi_driver": (0, "550.127.05\n"),
        "kernel": (0, "6.1.0-26-amd64\n"),
        "os_release": (0, DEBIAN_12),
        "debian_version": (0, "12.7\n"),
        "machine": (0, "x86_64\n"),
    }
    resolved = {
        "stack_id": "x",
        "driver": {"version": "550.127.05", "packages": {"nvidia-utils-550": "550.127.05-1"}},
    }
    late = with_drift(node_facts(sections, None), resolved)
    assert late == node_facts(sections, resolved)
    assert [d["kind"] for d in late["drift"]] == ["version"]
    assert late["os"]["distribution_version"] == "12.7"
