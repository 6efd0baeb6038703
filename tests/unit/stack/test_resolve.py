"""Resolving a stack to exact packages per OS, the repositories, and the stack id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import ConfigError
from toolkit.profile.hardware import load_stack_file
from toolkit.stack.resolve import resolve, stack_id
from toolkit.stack.systems import SUPPORTED_OS
from unit.stack.support import make

PRE_R580_OPEN = {"driver": {"version": "550.127.05", "flavour": "open"}, "cuda": "12.4.1",
                 "nccl": "2.21.5-1+cuda12.4"}  # fmt: skip


def test_resolved_shape_matches_the_architecture_contract() -> None:
    resolved = resolve(*make(), "debian12")
    assert set(resolved) == {
        "stack_id", "os", "driver", "cuda", "nccl", "fabric_manager", "imex",
        "container_toolkit", "cudnn", "dcgm", "repositories", "arch",
    }  # fmt: skip
    assert resolved["os"] == "debian12"
    assert len(resolved["stack_id"]) == 12
    int(resolved["stack_id"], 16)
    assert resolved["driver"]["version"] == "580.95.05"
    assert resolved["driver"]["branch"] == "580"
    assert resolved["driver"]["flavour"] == "open"
    # Versions are requirements until a lock fixes them: any Debian revision of 12.8.1.
    assert resolved["cuda"] == {"version": "12.8.1", "packages": {"cuda-toolkit-12-8": "12.8.1-*"}}
    assert resolved["nccl"] == {
        "version": "2.26.2",
        "cuda": "12.8",
        "packages": {"libnccl2": "2.26.2-1+cuda12.8", "libnccl-dev": "2.26.2-1+cuda12.8"},
    }
    assert resolved["container_toolkit"] == {
        "version": "1.17.8",
        "packages": {
            "nvidia-container-toolkit": "1.17.8-*",
            "nvidia-container-toolkit-base": "1.17.8-*",
            "libnvidia-container-tools": "1.17.8-*",
            "libnvidia-container1": "1.17.8-*",
        },
    }
    assert resolved["cudnn"] is None and resolved["dcgm"] is None
    assert resolved["imex"] == {"enabled": False, "version": None, "packages": {}}


# (driver version, flavour, driver packages, pinning packages)
DRIVER_CASES = [
    ("580.95.05", "open",
     ["nvidia-open", "nvidia-driver-580-open", "nvidia-dkms-580-open", "nvidia-utils-580",
      "libnvidia-compute-580", "nvidia-persistenced"],
     ["nvidia-driver-pinning-580.95.05"]),
    ("580.95.05", "proprietary",
     ["cuda-drivers-580", "nvidia-driver-580", "nvidia-dkms-580", "nvidia-utils-580",
      "libnvidia-compute-580", "nvidia-persistenced"],
     ["nvidia-driver-pinning-580.95.05"]),
    # From 590 the Ubuntu names drop the branch (NVIDIA, "Recent Updates").
    ("595.45.04", "proprietary",
     ["cuda-drivers", "nvidia-driver", "nvidia-dkms", "nvidia-utils", "libnvidia-compute",
      "nvidia-persistenced"],
     ["nvidia-driver-pinning-595.45.04"]),
    ("595.45.04", "open",
     ["nvidia-open", "nvidia-driver-open", "nvidia-dkms-open", "nvidia-utils",
      "libnvidia-compute", "nvidia-persistenced"],
     ["nvidia-driver-pinning-595.45.04"]),
    ("550.127.05", "open",
     ["nvidia-driver-550-open", "nvidia-dkms-550-open", "nvidia-utils-550",
      "libnvidia-compute-550", "nvidia-persistenced"],
     []),
    ("535.261.03", "proprietary",
     ["cuda-drivers-535", "nvidia-driver-535", "nvidia-dkms-535", "nvidia-utils-535",
      "libnvidia-compute-535", "nvidia-persistenced"],
     []),
]  # fmt: skip


@pytest.mark.parametrize(("version", "flavour", "packages", "pinning"), DRIVER_CASES)
def test_driver_package_names_by_branch_and_flavour(
    version: str, flavour: str, packages: list[str], pinning: list[str]
) -> None:
    stack, hardware = make({"driver": {"version": version, "flavour": flavour}})
    driver = resolve(stack, hardware, "ubuntu2404")["driver"]
    assert list(driver["packages"]) == packages
    assert set(driver["packages"].values()) == {f"{version}-*"}
    assert list(driver["pinning_packages"]) == pinning
    assert set(driver["pinning_packages"].values()) <= {f"{version}-*"}


@pytest.mark.parametrize(
    ("stack", "packages"),
    [
        ({}, {"nvidia-fabricmanager": "580.95.05-*", "libnvidia-nscq": "580.95.05-*"}),
        (
            PRE_R580_OPEN,
            {"nvidia-fabricmanager-550": "550.127.05-*", "libnvidia-nscq-550": "550.127.05-*"},
        ),
    ],
)
def test_fabric_manager_names_before_and_after_r580(
    stack: dict[str, Any], packages: dict[str, str]
) -> None:
    fabric = resolve(*make(stack), "ubuntu2204")["fabric_manager"]
    assert fabric["enabled"] is True
    assert fabric["packages"] == packages


@pytest.mark.parametrize(
    ("stack", "hardware"),
    [
        ({"fabric_manager": "none"}, {"gpu": {"nvswitch": False}}),
        ({}, {"gpu": {"nvswitch": False}}),
        ({}, {"gpu": {"model": "GB200"}}),  # IMEX, not Fabric Manager
    ],
)
def test_fabric_manager_not_installed(stack: dict[str, Any], hardware: dict[str, Any]) -> None:
    fabric = resolve(*make(stack, hardware), "debian12")["fabric_manager"]
    assert fabric == {
        "enabled": False,
        "version": None,
        "packages": {},
        "nvlsm": None,
    }


@pytest.mark.parametrize("os_id", ["ubuntu2204", "ubuntu2404", "debian12"])
def test_nvlsm_beside_fabric_manager_on_b200(os_id: str) -> None:
    """NVLSM is installed where Fabric Manager is and the NVSwitch generation needs it."""
    b200 = {"gpu": {"model": "B200", "nvswitch": True}}
    fabric = resolve(*make({"nvlsm": "2025.06.10"}, b200), os_id)["fabric_manager"]
    assert fabric["enabled"] is True
    assert fabric["nvlsm"] == "2025.06.10"
    assert fabric["packages"]["nvlsm"] == "2025.06.10-*"
    assert "nvlsm" not in resolve(*make({}, b200), os_id)["fabric_manager"]["packages"]


@pytest.mark.parametrize(
    "hardware",
    [{}, {"gpu": {"model": "B200", "nvswitch": False}}, {"gpu": {"model": "GB200"}}],
    ids=["h100", "b200 without nvswitch", "gb200"],
)
def test_nvlsm_pinned_where_it_is_not_needed_installs_nothing(hardware: dict[str, Any]) -> None:
    resolved = resolve(*make({"nvlsm": "2025.06.10"}, hardware), "ubuntu2404")
    assert "nvlsm" not in resolved["fabric_manager"]["packages"]
    assert resolved["fabric_manager"]["nvlsm"] is None
    assert stack_id(*make({"nvlsm": "2025.06.10"}, hardware)) == stack_id(*make({}, hardware))


def test_stack_id_changes_with_nvlsm_where_it_is_installed() -> None:
    b200 = {"gpu": {"model": "B200"}}
    first = stack_id(*make({"nvlsm": "2025.06.10"}, b200))
    assert first != stack_id(*make({"nvlsm": "2025.10.11"}, b200))
    assert first != stack_id(*make({}, b200))


def test_cudnn_and_dcgm_packages() -> None:
    resolved = resolve(*make({"cudnn": "9.10.2.21", "dcgm": "4.2.3"}), "ubuntu2204")
    assert resolved["cudnn"] == {
        "version": "9.10.2.21",
        "packages": {
            "libcudnn9-cuda-12": "9.10.2.21-*",
            "libcudnn9-dev-cuda-12": "9.10.2.21-*",
        },
    }
    assert resolved["dcgm"]["packages"] == {
        "datacenter-gpu-manager-4-core": "1:4.2.3-*",
        "datacenter-gpu-manager-4-cuda12": "1:4.2.3-*",
    }
    cudnn8 = resolve(*make({"cudnn": "8.9.7.29-1+cuda12.2"}), "ubuntu2204")["cudnn"]
    assert cudnn8 == {
        "version": "8.9.7.29",
        "packages": {"libcudnn8": "8.9.7.29-1+cuda12.2", "libcudnn8-dev": "8.9.7.29-1+cuda12.2"},
    }


@pytest.mark.parametrize("os_id", SUPPORTED_OS)
def test_repositories_default_to_nvidia_with_keyrings(os_id: str) -> None:
    repos = resolve(*make(), os_id)["repositories"]
    assert repos == [
        {
            "name": "cuda",
            "uri": f"https://developer.download.nvidia.com/compute/cuda/repos/{os_id}/x86_64/",
            "suite": "/",
            "keyring": "/usr/share/keyrings/cuda-archive-keyring.gpg",
            "key_url": f"https://developer.download.nvidia.com/compute/cuda/repos/{os_id}/x86_64/"
            "3bf863cc.pub",
            "fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC",
        },
        {
            "name": "nvidia-container-toolkit",
            "uri": "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/",
            "suite": "/",
            "keyring": "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg",
            "key_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
            "fingerprint": "C95B321B61E88C1809C4F759DDCAE044F796ECB0",
        },
    ]


def test_grace_systems_use_the_sbsa_repository() -> None:
    stack, hardware = make({}, {"gpu": {"model": "GH200", "count": 1, "nvswitch": False}})
    repos = resolve(stack, hardware, "ubuntu2404")["repositories"]
    assert repos[0]["uri"].endswith("/ubuntu2404/sbsa/")
    assert repos[1]["uri"].endswith("/deb/arm64/")


def test_repository_variables_override_the_urls() -> None:
    repo_vars = {
        "gpunode_nvidia_repo_url": "http://10.0.0.1:8080/{os}/{arch}/",
        "gpunode_container_toolkit_repo_url": "http://10.0.0.1:8080/ctk/{deb_arch}/",
    }
    repos = resolve(*make(), "debian12", repo_vars=repo_vars)["repositories"]
    assert repos[0]["uri"] == "http://10.0.0.1:8080/debian12/x86_64/"
    assert repos[1]["uri"] == "http://10.0.0.1:8080/ctk/amd64/"


def test_key_urls_are_filled_and_checked_like_the_urls() -> None:
    repo_vars = {
        "gpunode_nvidia_repo_key_url": "http://10.0.0.1/{os}/{arch}/key.pub",
        "gpunode_nvidia_repo_key_fingerprint": "eb69 3b30 35cd 5710 e231 e123 a4b4 6996 3bf8 63cc",
    }
    repo = resolve(*make(), "ubuntu2404", repo_vars=repo_vars)["repositories"][0]
    assert repo["key_url"] == "http://10.0.0.1/ubuntu2404/x86_64/key.pub"
    assert repo["fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"
    with pytest.raises(ConfigError, match=r"gpunode_nvidia_repo_key_url: .*not an http"):
        resolve(*make(), "debian12", repo_vars={"gpunode_nvidia_repo_key_url": "http://x/{os_}/k"})
    with pytest.raises(ConfigError, match="gpunode_nvidia_repo_url: "):
        resolve(*make(), "debian12", repo_vars={"gpunode_nvidia_repo_url": "ftp://x/"})
    with pytest.raises(ConfigError, match=r"gpunode_nvidia_repo_key_fingerprint: .*40-hex"):
        resolve(*make(), "debian12", repo_vars={"gpunode_nvidia_repo_key_fingerprint": "3bf863cc"})


def test_both_nvidia_keys_are_pinned_by_default() -> None:
    cuda, toolkit = resolve(*make(), "ubuntu2204")["repositories"]
    assert cuda["fingerprint"] == "EB693B3035CD5710E231E123A4B469963BF863CC"
    assert toolkit["key_url"] == "https://nvidia.github.io/libnvidia-container/gpgkey"
    assert toolkit["fingerprint"] == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


def test_unknown_os_and_arch_are_errors() -> None:
    with pytest.raises(ConfigError, match="did you mean 'ubuntu2204'"):
        resolve(*make(), "ubuntu2203")
    with pytest.raises(ConfigError, match="unknown arch"):
        resolve(*make(), "debian12", arch="aarch64")


# --- the stack id -------------------------------------------------------------------------

ONE_FILE = """\
stack:
  driver: {version: "550.127.05", flavour: open}
  cuda: "12.4.1"
  nccl: "2.21.5-1+cuda12.4"
  fabric_manager: auto
  container_toolkit: "1.16.2"
hardware:
  gpu: {model: H100, count: 8, nvswitch: true}
"""

REORDERED = """\
# The same stack, keys in another order, with comments.
hardware:
  gpu:
    nvswitch: true   # HGX board
    count: 8
    model: H100
stack:
  container_toolkit: '1.16.2'
  fabric_manager: auto
  nccl: '2.21.5-1+cuda12.4'   # matches CUDA 12.4
  cuda: '12.4.1'
  driver:
    flavour: open
    version: '550.127.05'
"""


def test_stack_id_is_stable_across_key_order_and_comments(tmp_path: Path) -> None:
    first = tmp_path / "a.yml"
    second = tmp_path / "b.yml"
    first.write_text(ONE_FILE)
    second.write_text(REORDERED)
    a = load_stack_file(first)
    b = load_stack_file(second)
    assert stack_id(a.stack, a.hardware) == stack_id(b.stack, b.hardware)


def test_stack_id_is_the_same_for_every_os_and_repository() -> None:
    stack, hardware = make()
    ids = {resolve(stack, hardware, os_id)["stack_id"] for os_id in SUPPORTED_OS}
    ids.add(
        resolve(stack, hardware, "debian12", repo_vars={"gpunode_nvidia_repo_url": "http://x/"})[
            "stack_id"
        ]
    )
    assert ids == {stack_id(stack, hardware)}


def test_stack_id_normalises_equivalent_versions() -> None:
    assert stack_id(*make({"cuda": "12.8"})) == stack_id(*make({"cuda": "12.8.0"}))


@pytest.mark.parametrize(
    ("stack", "hardware"),
    [
        ({"driver": {"version": "580.82.07"}}, {}),
        ({"driver": {"flavour": "proprietary"}}, {}),
        ({"cuda": "12.8.0"}, {}),
        ({"nccl": "2.26.5-1+cuda12.8"}, {}),
        ({"container_toolkit": "1.17.7"}, {}),
        ({"fabric_manager": "none"}, {}),
        ({}, {"gpu": {"nvswitch": False}}),
        ({"cudnn": "9.10.2.21"}, {}),
        ({"dcgm": "4.2.3"}, {}),
    ],
)
def test_stack_id_changes_with_what_is_installed(
    stack: dict[str, Any], hardware: dict[str, Any]
) -> None:
    assert stack_id(*make(stack, hardware)) != stack_id(*make())


def test_stack_id_ignores_what_installs_nothing() -> None:
    # GPU model and count and the compat opt-in change no package.
    assert stack_id(*make({"cuda_minor_version_compat": True})) == stack_id(*make())
    assert stack_id(*make({}, {"gpu": {"model": "H200", "count": 4}})) == stack_id(*make())


def test_stack_id_known_value() -> None:
    # Pins the canonical form: changing it changes every stamped stack id (it changed once
    # when per-OS package versions moved from the stack to the stack lock).
    assert stack_id(*make()) == "4a300a098a17"


@pytest.mark.parametrize(
    ("version", "flavour", "packages", "pinning"),
    [
        ("580.95.05", "open",
         ["nvidia-open", "nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-kernel-support",
          "firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-driver-cuda",
          "nvidia-driver-libs", "nvidia-persistenced"],
         ["nvidia-driver-pinning-580.95.05"]),
        ("550.127.05", "proprietary",
         ["cuda-drivers-550", "nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-support",
          "firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-driver-cuda",
          "nvidia-driver-libs", "nvidia-persistenced"],
         []),
        ("595.45.04", "proprietary",
         ["cuda-drivers", "nvidia-driver", "nvidia-kernel-dkms", "nvidia-kernel-support",
          "firmware-nvidia-gsp", "nvidia-smi", "libnvidia-ml1", "libcuda1", "nvidia-driver-cuda",
          "nvidia-driver-libs", "nvidia-persistenced"],
         ["nvidia-driver-pinning-595.45.04"]),
    ],
)  # fmt: skip
def test_debian12_gets_debian_style_names(
    version: str, flavour: str, packages: list[str], pinning: list[str]
) -> None:
    stack, hardware = make({"driver": {"version": version, "flavour": flavour}})
    driver = resolve(stack, hardware, "debian12")["driver"]
    assert list(driver["packages"]) == packages
    assert list(driver["pinning_packages"]) == pinning
    assert set(driver["packages"].values()) == {f"{version}-*"}


@pytest.mark.parametrize("model", ["GB200", "GB300"])
def test_imex_on_grace_blackwell_at_the_drivers_version(model: str) -> None:
    """GB200/GB300 NVL: the IMEX daemon, built with the driver, instead of Fabric Manager."""
    stack, hardware = make({}, {"gpu": {"model": model, "nvswitch": True}})
    resolved = resolve(stack, hardware, "ubuntu2404")
    assert resolved["imex"] == {
        "enabled": True,
        "version": "580.95.05",
        "packages": {"nvidia-imex": "580.95.05-*"},
    }
    assert resolved["fabric_manager"]["enabled"] is False
    assert stack_id(stack, hardware) != stack_id(*make({}, {"gpu": {"model": "H100"}}))


@pytest.mark.parametrize(
    ("version", "name"),
    [
        ("550.127.05", "nvidia-imex-550"),
        ("570.195.03", "nvidia-imex-570"),
        ("580.95.05", "nvidia-imex"),
        ("590.48.01", "nvidia-imex"),
    ],
)
@pytest.mark.parametrize("os_id", SUPPORTED_OS)
def test_imex_is_named_per_branch_as_nvidias_driver_container_names_it(
    version: str, name: str, os_id: str
) -> None:
    """NVIDIA/gpu-driver-container imex_install: nvidia-imex-<branch> for 550-579, nvidia-imex
    from 580 (590.48.01, 595 and 610 are built with it)."""
    stack, hardware = make({"driver": {"version": version}}, {"gpu": {"model": "GB200"}})
    assert resolve(stack, hardware, os_id)["imex"]["packages"] == {name: f"{version}-*"}


def test_imex_has_no_name_before_550() -> None:
    """NVIDIA's scripts install no IMEX package before R550: none is guessed, the rule is named."""
    stack, hardware = make({"driver": {"version": "535.230.02"}}, {"gpu": {"model": "GB200"}})
    with pytest.raises(ConfigError, match=r"branch 535\) has no IMEX package.*imex.package_name"):
        resolve(stack, hardware, "ubuntu2404")


@pytest.mark.parametrize(
    ("version", "os_id", "arch", "expected"),
    [
        ("580.95.05", "ubuntu2404", "x86_64", {"libnvsdm": "580.95.05-*"}),
        ("570.195.03", "ubuntu2204", "x86_64", {"libnvsdm-570": "570.195.03-*"}),
        ("550.127.05", "ubuntu2204", "x86_64", {}),  # none before R570
        ("580.95.05", "ubuntu2404", "sbsa", {}),  # not built for arm64
    ],
)
def test_libnvsdm_beside_nvlsm_as_nvidias_driver_container_installs_it(
    version: str, os_id: str, arch: str, expected: dict[str, str]
) -> None:
    b200 = {"gpu": {"model": "B200", "nvswitch": True}}
    stack, hardware = make({"driver": {"version": version}, "nvlsm": "2025.06.10"}, b200)
    packages = resolve(stack, hardware, os_id, arch=arch)["fabric_manager"]["packages"]
    assert {k: v for k, v in packages.items() if k.startswith("libnvsdm")} == expected
    h100 = resolve(*make({}, {"gpu": {"model": "H100", "nvswitch": True}}), os_id, arch=arch)
    assert not any(k.startswith(("libnvsdm", "nvlsm")) for k in h100["fabric_manager"]["packages"])
