"""Emulated B200 and GB200 lab nodes: their GPUs, the stack the lab writes for them, the packages
of that stack in the lab repository, and the kernel modules NVLSM needs (issue 37, item 7)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from shared_fixtures import REPO

from toolkit.errors import ConfigError
from toolkit.lab import catalog, inventory, kmods
from toolkit.lab.gpu_models import GPU_MODELS
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.spec import build_spec
from toolkit.lab.state import NodeState
from toolkit.stack.catalog import gpu as catalog_gpu
from toolkit.stack.check import check, has_errors
from toolkit.stack.lock import stack_arch
from toolkit.stack.models import GpuSpec, Stack
from toolkit.stack.resolve import resolve

MODPROBE = REPO / "toolkit/lab/node_files/gpunode-lab-modprobe.sh"
FM_DEBIAN12 = REPO / "roles/fabric_manager/vars/debian12.yml"


# --- the GPUs ---


@pytest.mark.parametrize(
    ("key", "device", "memory", "board"),
    [("B200", "0x290110DE", 183359, 8), ("GB200", "0x294110DE", 189471, 4)],
)
def test_blackwell_boards_are_the_catalogues(
    key: str, device: str, memory: int, board: int
) -> None:
    model = GPU_MODELS[key]
    assert model.pci_device_id == device  # pci.ids 2901 "GB100 [B200]", 2941 "[HGX GB200]"
    assert model.memory_total_mib == memory  # nvidia-smi's memory.total of the public captures
    assert model.nvlinks == 18  # NVLink5: `topo -m` prints NV18
    assert model.compute_cap == "10.0"
    assert model.board_gpus == board == len(model.bus_ids)
    hw = NodeHardware.for_node(key, board, True)
    assert [g.name for g in hw.gpus] == [catalog_gpu(key).names[0]] * board
    assert len({g.pci_bus_id for g in hw.gpus}) == board


def test_gb200_says_what_the_lab_cannot_be() -> None:
    gap = GPU_MODELS["GB200"].lab_gap or ""
    assert "arm64" in gap and "sbsa" in gap and "amd64" in gap
    hw = NodeHardware.for_node("GB200", 4, True)
    assert [g.cpu_affinity for g in hw.gpus] == ["0-71", "0-71", "72-143", "72-143"]


def test_a_gb200_tray_has_four_gpus() -> None:
    with pytest.raises(ConfigError, match="between 1 and 4, got 8"):
        NodeHardware.for_node("GB200", 8, True)
    with pytest.raises(ConfigError, match="--gpus 8: a GB200 board has 4 GPUs at most"):
        build_spec(gpu_model="GB200")


@pytest.mark.parametrize(
    ("model", "gpus", "nvswitch"),
    [("B200", 8, True), ("B200", 4, False), ("GB200", 4, True), ("GB200", 2, False)],
)
def test_nvswitch_is_derived_from_a_full_board(model: str, gpus: int, nvswitch: bool) -> None:
    assert build_spec(gpu_model=model, gpus=gpus).has_nvswitch is nvswitch


# --- the stack the lab writes ---


def _hardware(model: str, gpus: int) -> SimpleNamespace:
    spec = build_spec(gpu_model=model, gpus=gpus)
    return SimpleNamespace(gpu=GpuSpec(model=model, count=gpus, nvswitch=spec.has_nvswitch))


def test_hopper_keeps_the_default_stack() -> None:
    assert inventory.lab_stack(build_spec(gpu_model="H100")) == inventory.DEFAULT_STACK


@pytest.mark.parametrize(("model", "gpus"), [("B200", 8), ("B200", 4), ("GB200", 4)])
def test_blackwell_gets_an_r580_stack_that_checks_clean(model: str, gpus: int) -> None:
    stack = inventory.lab_stack(build_spec(gpu_model=model, gpus=gpus))
    assert stack["driver"] == {"version": "580.159.03", "flavour": "open"}
    assert stack["cuda"] == "12.8.1"  # compute capability 10.0 needs CUDA >= 12.8
    # NVLSM only where Fabric Manager runs a fourth-generation NVSwitch (8-GPU B200).
    assert ("nvlsm" in stack) is (model == "B200" and gpus == 8)
    violations = check(Stack.model_validate(stack), _hardware(model, gpus))
    assert not has_errors(violations), [v.to_dict() for v in violations]


def _lab_versions() -> dict[str, list[str]]:
    versions: dict[str, list[str]] = {}
    for spec in catalog.packages():
        versions.setdefault(spec.name, []).append(spec.version)
    return versions


def _carried(requirement: str, versions: list[str]) -> bool:
    if requirement.endswith("-*"):
        return any(v.startswith(requirement[:-1]) for v in versions)
    return requirement in versions


@pytest.mark.parametrize(
    ("model", "gpus", "must"),
    [
        ("B200", 8, {"nvidia-fabricmanager", "nvlsm", "libnvsdm", "libnvidia-nscq"}),
        ("GB200", 4, {"nvidia-imex"}),
    ],
)
def test_the_lab_repository_carries_every_package_of_the_stack(
    model: str, gpus: int, must: set[str]
) -> None:
    stack = Stack.model_validate(inventory.lab_stack(build_spec(gpu_model=model, gpus=gpus)))
    resolved = resolve(stack, _hardware(model, gpus), "debian12", arch="x86_64")
    wanted = {
        name: requirement
        for section in resolved.values()
        if isinstance(section, dict)
        for name, requirement in (section.get("packages") or {}).items()
    }
    assert must <= set(wanted)
    versions = _lab_versions()
    missing = {n: r for n, r in wanted.items() if not _carried(r, versions.get(n, []))}
    assert not missing
    # NVLSM's companion from the OS archive (roles/fabric_manager/vars/debian12.yml, pinned and
    # held) comes from Debian's archive, as on a real node: the lab repository has no stand-in.
    os_pins = yaml.safe_load(FM_DEBIAN12.read_text())["fabric_manager_os_nvlsm_packages"]
    assert "infiniband-diags" in os_pins and not set(os_pins) & set(versions)


def test_a_gb200_stack_resolves_for_grace_unless_the_group_names_its_arch() -> None:
    stack = Stack.model_validate(inventory.lab_stack(build_spec(gpu_model="GB200", gpus=4)))
    assert resolve(stack, _hardware("GB200", 4), "debian12")["arch"] == "sbsa"
    assert stack_arch("lab", {"gpunode_stack_arch": "x86_64"}) == "x86_64"
    assert stack_arch("lab", {}) is None
    with pytest.raises(ConfigError, match="gpunode_stack_arch: unknown arch 'arm64'"):
        stack_arch("lab", {"gpunode_stack_arch": "arm64"})


def test_the_inventory_of_a_b200_lab() -> None:
    files = inventory.render(
        spec=build_spec(name="b2", nodes=1, gpu_model="B200", disks=0),
        nodes=[NodeState(index=1, name="b2-node-1", ip="10.213.9.11")],
        key_file=Path("/state/id_ed25519"),
        known_hosts=Path("/state/known_hosts"),
        repo_vars={},
        ca_bundle=None,
        md_available=False,
    )
    stack = yaml.safe_load(files["group_vars/lab/stack.yml"])["stack"]
    assert stack["nvlsm"] == "2025.06.10" and stack["driver"]["version"] == "580.159.03"
    hardware = yaml.safe_load(files["group_vars/lab/hardware.yml"])["hardware"]
    assert hardware["gpu"] == {"model": "B200", "count": 8, "nvswitch": True}
    lab = yaml.safe_load(files["group_vars/all/lab.yml"])
    assert lab["fabric_manager_module_dir"] == kmods.MODULE_DIR
    assert lab["fabric_manager_modprobe"] == kmods.MODPROBE


# --- kernel modules: the lab's modprobe ---


def _modprobe(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUNODE_LAB_ROOT": str(root)}
    return subprocess.run(
        ["sh", str(MODPROBE), *args], env=env, capture_output=True, text=True, check=False
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for path, node_file in kmods.node_files().items():
        if path == kmods.LIST_FILE:
            (tmp_path / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path.lstrip("/")).write_bytes(node_file.content)
    return tmp_path


def test_loading_ib_umad_shows_it_loaded(root: Path) -> None:
    assert _modprobe(root, "ib_umad").returncode == 0
    module = root / kmods.MODULE_DIR.lstrip("/") / "ib_umad"
    assert (module / "initstate").read_text() == "live\n"
    assert _modprobe(root, "ib-umad").returncode == 0  # modprobe reads - as _


def test_a_module_the_node_does_not_have_fails_as_modprobe_does(root: Path) -> None:
    result = _modprobe(root, "nvidia_peermem")
    assert result.returncode == 1
    assert result.stderr.startswith("modprobe: FATAL: Module nvidia_peermem not found")
    assert not (root / kmods.MODULE_DIR.lstrip("/") / "nvidia_peermem").exists()


def test_at_boot_what_modules_load_asks_for_is_loaded(root: Path) -> None:
    conf = root / "etc/modules-load.d"
    conf.mkdir(parents=True)
    (conf / "gpunode-nvlsm.conf").write_text("# NVLSM\nib_umad\nnot_a_module\n")
    assert _modprobe(root, "--modules-load").returncode == 0
    loaded = sorted(p.name for p in (root / kmods.MODULE_DIR.lstrip("/")).iterdir())
    assert loaded == ["ib_umad"]


def test_the_boot_unit_and_the_variables_name_the_stand_in() -> None:
    files = kmods.node_files()
    assert files[kmods.MODPROBE].mode == 0o755
    assert f"ExecStart={kmods.MODPROBE} --modules-load" in files[kmods.UNIT_PATH].content.decode()
    assert "ib_umad" in kmods.MODULES
    assert kmods.inventory_vars() == {
        "fabric_manager_module_dir": kmods.MODULE_DIR,
        "fabric_manager_modprobe": kmods.MODPROBE,
    }
    defaults = yaml.safe_load(Path("roles/fabric_manager/defaults/main.yml").read_text())
    assert defaults["fabric_manager_module_dir"] == "/sys/module"  # the real world's
    assert defaults["fabric_manager_modprobe"] == "modprobe"
