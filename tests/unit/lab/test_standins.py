"""The stand-in packages' contents, unpacked from the built .debs and run against a temp root.

Each test unpacks packages with `dpkg-deb -x` into a directory that plays a node's / and
runs the programs there with GPUNODE_LAB_ROOT pointing at it, so what is tested is exactly
what a node installs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from shared_fixtures import REPO

from toolkit.lab import kmods
from toolkit.lab.driver_packages import IMEX_CHANNELS_MAJOR
from toolkit.lab.hardware import NodeHardware
from toolkit.lab.repo import RepoInfo, build_repository


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> RepoInfo:
    return build_repository(tmp_path_factory.mktemp("labrepo"))


class Root:
    """A directory playing a node's /, into which packages are unpacked."""

    def __init__(self, path: Path, info: RepoInfo) -> None:
        self.path = path
        self.info = info
        self.state = path / "var/lib/gpunode-lab"
        self.state.mkdir(parents=True, exist_ok=True)

    def deb(self, name: str, version: str) -> Path:
        for suite in (self.info.suite_path, self.info.container_toolkit_suite_path):
            found = list((self.info.path / suite).glob(f"{name}_{version}_*.deb"))
            if found:
                return found[0]
        raise AssertionError(f"{name} {version} is not in the repository")

    def unpack(self, name: str, version: str) -> None:
        subprocess.run(["dpkg-deb", "-x", str(self.deb(name, version)), str(self.path)], check=True)

    def control(self, name: str, version: str, member: str) -> str:
        out = self.path.parent / f"control-{name}"
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-e", str(self.deb(name, version)), str(out)], check=True)
        return (out / member).read_text()

    def env(self) -> dict[str, str]:
        path = f"{self.path}/usr/bin:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return {**os.environ, "GPUNODE_LAB_ROOT": str(self.path), "PATH": path}

    def run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.path / program.lstrip("/")), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            check=False,
            timeout=30,
        )

    def hardware(self, **kwargs: object) -> None:
        hw = NodeHardware.for_node(**{"model": "H100", "count": 8, "nvswitch": True, **kwargs})  # type: ignore[arg-type]
        (self.state / "hardware.json").write_text(hw.to_json())


@pytest.fixture
def root(tmp_path: Path, built: RepoInfo) -> Root:
    return Root(tmp_path / "node", built)


def _loaded(root: Root) -> str:
    return (root.state / "loaded-driver-version").read_text().strip()


def test_installed_nvidia_smi_runs_from_the_package(root: Root) -> None:
    root.unpack("nvidia-smi", "550.127.05-1")
    smi = root.path / "usr/bin/nvidia-smi"
    assert smi.read_text().startswith("#!/usr/bin/python3\n")
    assert os.access(smi, os.X_OK)
    root.hardware()
    (root.state / "loaded-driver-version").write_text("550.127.05\n")
    done = root.run("/usr/bin/nvidia-smi", "--query-gpu=count,driver_version", "--format=csv")
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[:2] == ["count, driver_version", "8, 550.127.05"]


def test_module_load_emulates_install_upgrade_and_boot(root: Root) -> None:
    root.unpack("nvidia-kernel-open-dkms", "550.127.05-1")
    loader = "/usr/lib/gpunode-lab/nvidia-module-load"
    assert root.run(loader, "install").returncode == 0
    assert _loaded(root) == "550.127.05"
    proc = (root.path / "proc/driver/nvidia/version").read_text()
    assert proc.startswith(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.127.05  Release Build"
    )
    root.unpack("nvidia-kernel-open-dkms", "550.144.03-1")  # the upgrade
    assert root.run(loader, "install").returncode == 0
    assert _loaded(root) == "550.127.05"  # the old module stays loaded
    (root.state / "persistence-mode.json").write_text("{}")
    assert root.run(loader, "boot").returncode == 0
    assert _loaded(root) == "550.144.03"
    assert not (root.state / "persistence-mode.json").exists()
    assert root.run(loader, "sideways").returncode == 2
    # The loaded module registers the IMEX channels' major, which roles/imex reads.
    devices = (root.path / "proc/devices").read_text().splitlines()
    assert f"{IMEX_CHANNELS_MAJOR} nvidia-caps-imex-channels" in devices


def test_proprietary_module_says_so(root: Root) -> None:
    root.unpack("nvidia-kernel-dkms", "580.95.05-1")
    assert root.run("/usr/lib/gpunode-lab/nvidia-module-load", "boot").returncode == 0
    proc = (root.path / "proc/driver/nvidia/version").read_text()
    assert proc.startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  ")


def test_kernel_module_package_scripts_and_files(root: Root) -> None:
    postinst = root.control("nvidia-kernel-open-dkms", "550.127.05-1", "postinst")
    assert "/usr/lib/gpunode-lab/nvidia-module-load install" in postinst
    assert "deb-systemd-helper enable gpunode-lab-nvidia-module.service" in postinst
    root.unpack("nvidia-kernel-open-dkms", "550.127.05-1")
    unit = (root.path / "lib/systemd/system/gpunode-lab-nvidia-module.service").read_text()
    assert "ExecStart=/usr/lib/gpunode-lab/nvidia-module-load boot" in unit
    root.unpack("nvidia-kernel-support", "550.127.05-1")
    assert (
        "blacklist nouveau"
        in (root.path / "usr/lib/modprobe.d/blacklist-nvidia-nouveau.conf").read_text()
    )
    assert (
        'PACKAGE_VERSION="550.127.05"'
        in (root.path / "usr/src/nvidia-550.127.05/dkms.conf").read_text()
    )


def test_compute_libraries_are_versioned_with_soname_links(root: Root) -> None:
    root.unpack("libnvidia-ml1", "550.127.05-1")
    root.unpack("libcuda1", "550.127.05-1")
    lib = root.path / "usr/lib/x86_64-linux-gnu"
    assert os.readlink(lib / "libnvidia-ml.so.1") == "libnvidia-ml.so.550.127.05"
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.550.127.05"
    assert (lib / "libnvidia-ml.so.550.127.05").is_file()


@pytest.mark.parametrize(
    ("package", "version", "release", "nvcc"),
    [
        ("cuda-toolkit-12-4", "12.4.1-1", "12.4", "12.4.131"),
        ("cuda-toolkit-12-8", "12.8.1-1", "12.8", "12.8.93"),
    ],
)
def test_cuda_toolkit(root: Root, package: str, version: str, release: str, nvcc: str) -> None:
    root.unpack(package, version)
    prefix = f"/usr/local/cuda-{release}"
    done = root.run(f"{prefix}/bin/nvcc", "--version")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0] == "nvcc: NVIDIA (R) Cuda compiler driver"
    assert lines[3] == f"Cuda compilation tools, release {release}, V{nvcc}"
    assert lines[4].startswith(f"Build cuda_{release}.r{release}/compiler.")
    failed = root.run(f"{prefix}/bin/nvcc")
    assert failed.returncode == 1
    assert "nvcc fatal   : No input files specified" in failed.stderr
    meta = json.loads((root.path / prefix.lstrip("/") / "version.json").read_text())
    assert meta["cuda"]["version"] == version.split("-")[0]
    assert (root.path / prefix.lstrip("/") / "lib64").is_symlink()
    postinst = root.control(package, version, "postinst")
    assert f"update-alternatives --install /usr/local/cuda cuda {prefix} " in postinst
    prerm = root.control(package, version, "prerm")
    assert f"update-alternatives --remove cuda {prefix}" in prerm


def test_nccl_runtime_and_header(root: Root) -> None:
    root.unpack("libnccl2", "2.26.2-1+cuda12.8")
    root.unpack("libnccl-dev", "2.26.2-1+cuda12.8")
    lib = root.path / "usr/lib/x86_64-linux-gnu"
    assert os.readlink(lib / "libnccl.so.2") == "libnccl.so.2.26.2"
    assert os.readlink(lib / "libnccl.so") == "libnccl.so.2"
    header = (root.path / "usr/include/nccl.h").read_text()
    assert "#define NCCL_MAJOR 2\n" in header
    assert "#define NCCL_MINOR 26\n" in header
    assert "#define NCCL_PATCH 2\n" in header
    assert "#define NCCL_VERSION_CODE 22602\n" in header


def test_pinning_file_lands_in_preferences_d(root: Root) -> None:
    root.unpack("nvidia-driver-pinning-580.95.05", "580.95.05-1")
    pref = root.path / "etc/apt/preferences.d/nvidia-driver-pinning-580.95.05"
    assert "Pin: version 580.95.05-1" in pref.read_text()
    conffiles = root.control("nvidia-driver-pinning-580.95.05", "580.95.05-1", "conffiles")
    assert conffiles.strip() == "/etc/apt/preferences.d/nvidia-driver-pinning-580.95.05"


# --- Fabric Manager ---------------------------------------------------------------------------


FM = "/usr/bin/nv-fabricmanager"


def _fm_root(root: Root, loaded: str, nvswitch: bool = True, daemonize: bool = True) -> None:
    root.unpack("nvidia-fabricmanager-550", "550.127.05-1")
    root.hardware(nvswitch=nvswitch, model="H100" if nvswitch else "L40S")
    (root.state / "loaded-driver-version").write_text(loaded + "\n")
    cfg = root.path / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    if not daemonize:
        cfg.write_text(cfg.read_text().replace("DAEMONIZE=1", "DAEMONIZE=0"))


def test_fabric_manager_version(root: Root) -> None:
    _fm_root(root, "550.127.05")
    done = root.run(FM, "--version")
    assert (done.returncode, done.stdout) == (0, "Fabric Manager version is : 550.127.05\n")


def test_fabric_manager_refuses_a_different_driver(root: Root) -> None:
    _fm_root(root, "550.144.03")
    done = root.run(FM, "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert done.returncode == 1
    assert (
        "fabric manager NVIDIA GPU driver interface version 550.127.05 don't match with driver "
        "version 550.144.03" in done.stderr
    )
    assert "don't match" in (root.path / "var/log/fabricmanager.log").read_text()


def test_fabric_manager_refuses_a_node_without_nvswitch(root: Root) -> None:
    _fm_root(root, "550.127.05", nvswitch=False)
    done = root.run(FM, "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert done.returncode == 1
    assert "NVSwitch based system is not detected" in done.stderr


def test_fabric_manager_stays_resident_and_stops_on_sigterm(root: Root) -> None:
    _fm_root(root, "550.127.05", daemonize=False)
    code, out = _fm_starts(root)
    assert code == 0
    assert "Starting Fabric Manager" in out


def _as_b200(root: Root) -> None:
    """The node's GPUs named as nvidia-smi names a B200 (fourth-generation NVSwitch)."""
    path = root.state / "hardware.json"
    hardware = json.loads(path.read_text())
    for gpu in hardware["gpus"]:
        gpu["name"] = "NVIDIA B200"
    path.write_text(json.dumps(hardware))


def test_fabric_manager_on_b200_needs_nvlsm_installed(root: Root) -> None:
    """Like the real daemon: no NVLSM daemon, no start; the nvlsm package provides it."""
    _fm_root(root, "550.127.05")
    _as_b200(root)
    done = root.run(FM, "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert done.returncode == 1
    assert "/opt/nvidia/nvlsm/sbin/nvlsm does not exist" in done.stderr
    assert "install nvlsm package" in (root.path / "var/log/fabricmanager.log").read_text()
    root.unpack("nvlsm", "2025.06.10-1")
    assert root.run("/opt/nvidia/nvlsm/sbin/nvlsm", "--version").stdout == "nvlsm 2025.06.10\n"
    # NVLSM reaches the switches through ib_umad: not loaded, no start.
    done = root.run(FM, "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
    assert done.returncode == 1 and "ib_umad is not loaded" in done.stderr
    (root.path / kmods.MODULE_DIR.lstrip("/") / "ib_umad").mkdir(parents=True)
    _fm_starts(root)


def test_fabric_manager_on_h100_does_not_look_for_nvlsm(root: Root) -> None:
    _fm_root(root, "550.127.05", daemonize=False)
    assert not (root.path / "opt/nvidia/nvlsm").exists()
    _fm_starts(root)


def _fm_starts(root: Root) -> tuple[int, str]:
    """Fabric Manager passes its start-up checks and stays resident until SIGTERM: its exit
    code and output once stopped."""
    cfg = root.path / "usr/share/nvidia/nvswitch/fabricmanager.cfg"
    cfg.write_text(cfg.read_text().replace("DAEMONIZE=1", "DAEMONIZE=0"))
    proc = subprocess.Popen(
        [str(root.path / FM.lstrip("/")), "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg"],
        env=root.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = root.path / "var/log/fabricmanager.log"
        deadline = time.monotonic() + 10
        while "Successfully configured" not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "Fabric Manager did not start"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    return proc.returncode, out


IMEX = "/usr/bin/nvidia-imex"


def test_imex_checks_the_loaded_driver_and_its_node_list(root: Root) -> None:
    """The daemon starts only beside its own driver and with a node list to read."""
    root.unpack("nvidia-imex", "580.95.05-1")
    unit = (root.path / "lib/systemd/system/nvidia-imex.service").read_text()
    assert "ExecStart=/usr/bin/nvidia-imex -c /etc/nvidia-imex/config.cfg" in unit
    config = root.path / "etc/nvidia-imex/config.cfg"
    config.parent.mkdir(parents=True)
    config.write_text("DAEMONIZE=0\nIMEX_NODE_CONFIG_FILE=/etc/nvidia-imex/nodes_config.cfg\n")
    (root.state / "loaded-driver-version").write_text("580.105.08\n")
    done = root.run(IMEX, "-c", "/etc/nvidia-imex/config.cfg")
    assert done.returncode == 1 and "not compatible with the loaded driver" in done.stderr
    (root.state / "loaded-driver-version").write_text("580.95.05\n")
    done = root.run(IMEX, "-c", "/etc/nvidia-imex/config.cfg")
    assert done.returncode == 1 and "nodes_config.cfg" in done.stderr
    (config.parent / "nodes_config.cfg").write_text("10.0.0.1\n10.0.0.2\n")
    proc = subprocess.Popen(
        [str(root.path / IMEX.lstrip("/")), "-c", "/etc/nvidia-imex/config.cfg"],
        env=root.env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1)
        assert proc.poll() is None, proc.communicate()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    assert root.run(IMEX, "--version").stdout == "IMEX version is: 580.95.05\n"


# --- persistenced ----------------------------------------------------------------------------


REAL = REPO / "tests" / "data/real"


def _sections(unit: str) -> dict[str, list[str]]:
    """The unit's assignments per section, comments left out."""
    sections: dict[str, list[str]] = {}
    current = ""
    for line in unit.splitlines():
        if line.startswith("["):
            current = line
        elif line and not line.startswith("#"):
            sections.setdefault(current, []).append(line)
    return sections


def test_persistenced_unit_is_debians(root: Root) -> None:
    root.unpack("nvidia-persistenced", "550.127.05-1")
    unit = (root.path / "lib/systemd/system/nvidia-persistenced.service").read_text()
    real = _sections((REAL / "debian-nvidia-persistenced.service").read_text())
    lab = _sections(unit)
    # Debian's unit exactly, plus the lab's ordering after its emulated module load.
    assert lab["[Unit]"] == [*real["[Unit]"], "After=gpunode-lab-nvidia-module.service"]
    assert lab["[Service]"] == real["[Service]"]
    assert lab["[Install]"] == real["[Install]"]
    postinst = root.control("nvidia-persistenced", "550.127.05-1", "postinst")
    assert "getent passwd nvpd" in postinst and "useradd --system" in postinst


def test_persistenced_refuses_an_unknown_user(root: Root) -> None:
    root.unpack("nvidia-persistenced", "550.127.05-1")
    (root.state / "loaded-driver-version").write_text("550.127.05\n")
    (root.path / "etc").mkdir()
    (root.path / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    refused = root.run("/usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced")
    assert refused.returncode == 1
    assert "Failed to find user ID of user 'nvidia-persistenced'" in refused.stderr
    assert not (root.path / "run/nvidia-persistenced/nvidia-persistenced.pid").exists()


@pytest.mark.parametrize(
    ("flag", "mode"), [("--no-persistence-mode", "Disabled"), ("--persistence-mode", "Enabled")]
)
def test_persistenced_sets_the_mode_it_was_started_with(root: Root, flag: str, mode: str) -> None:
    root.unpack("nvidia-persistenced", "550.127.05-1")
    root.unpack("nvidia-smi", "550.127.05-1")
    root.hardware(count=2)
    version = root.run("/usr/bin/nvidia-persistenced", "--version")
    assert "nvidia-persistenced:  version 550.127.05" in version.stdout
    refused = root.run("/usr/bin/nvidia-persistenced")
    assert refused.returncode == 1  # no driver loaded yet
    (root.state / "loaded-driver-version").write_text("550.127.05\n")
    (root.path / "etc").mkdir()
    (root.path / "etc/passwd").write_text("nvpd:x:101:101::/var/run/nvpd/:/usr/sbin/nologin\n")
    pidfile = root.path / "run/nvidia-persistenced/nvidia-persistenced.pid"
    # It forks (Type=forking): the command returns once the daemon wrote its PID file.
    started = root.run("/usr/bin/nvidia-persistenced", "--user", "nvpd", flag)
    assert started.returncode == 0, started.stderr
    pid = int(pidfile.read_text().strip())
    try:
        query = root.run("/usr/bin/nvidia-smi", "--query-gpu=persistence_mode", "--format=csv")
        assert query.stdout.splitlines() == ["persistence_mode", mode, mode]
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert not pidfile.exists()
    query = root.run("/usr/bin/nvidia-smi", "--query-gpu=persistence_mode", "--format=csv")
    assert query.stdout.splitlines() == ["persistence_mode", "Disabled", "Disabled"]


# --- container toolkit -----------------------------------------------------------------------


def _ctk(root: Root) -> None:
    for name in (
        "libnvidia-container1",
        "libnvidia-container-tools",
        "nvidia-container-toolkit-base",
        "nvidia-container-toolkit",
    ):
        root.unpack(name, "1.16.2-1")


def test_ctk_configures_docker_keeping_other_keys(root: Root) -> None:
    _ctk(root)
    daemon = root.path / "etc/docker/daemon.json"
    daemon.parent.mkdir(parents=True)
    daemon.write_text(json.dumps({"data-root": "/data/docker", "log-driver": "json-file"}))
    done = root.run(
        "/usr/bin/nvidia-ctk", "runtime", "configure", "--runtime=docker", f"--config={daemon}"
    )
    assert done.returncode == 0, done.stderr
    assert f"Wrote updated config to {daemon}" in done.stderr
    config = json.loads(daemon.read_text())
    assert config == {
        "data-root": "/data/docker",
        "log-driver": "json-file",
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }
    assert daemon.read_text().startswith('{\n    "data-root"')  # four-space indent
    first = daemon.read_text()
    again = root.run(
        "/usr/bin/nvidia-ctk",
        "runtime",
        "configure",
        "--runtime",
        "docker",
        "--config",
        str(daemon),
    )
    assert again.returncode == 0
    assert daemon.read_text() == first  # idempotent
    root.run(
        "/usr/bin/nvidia-ctk",
        "runtime",
        "configure",
        "--runtime=docker",
        f"--config={daemon}",
        "--set-as-default",
    )
    assert json.loads(daemon.read_text())["default-runtime"] == "nvidia"


def test_ctk_configures_containerd_with_cdi_keeping_its_root(root: Root) -> None:
    """containerd's version 2 file: the nvidia runtime of the CRI plugin (runc v2, BinaryName),
    CDI enabled, and the data-disk root the role put first kept first; a second run the same."""
    import tomllib

    _ctk(root)
    config = root.path / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('root = "/data/containers/containerd"\n')
    argv = ("runtime", "configure", "--runtime=containerd", "--cdi.enabled", f"--config={config}")
    done = root.run("/usr/bin/nvidia-ctk", *argv)
    assert done.returncode == 0, done.stderr
    assert 'Using CRI runtime plugin name "io.containerd.grpc.v1.cri"' in done.stderr
    first = config.read_text()
    parsed = tomllib.loads(first)
    assert parsed["version"] == 2 and parsed["root"] == "/data/containers/containerd"
    cri = parsed["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == "io.containerd.runc.v2"
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert root.run("/usr/bin/nvidia-ctk", *argv).returncode == 0
    assert config.read_text() == first


def test_ctk_generates_and_lists_cdi_devices_of_the_emulated_gpus(root: Root) -> None:
    _ctk(root)
    root.hardware()
    done = root.run("/usr/bin/nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/nvidia.yaml")
    assert done.returncode == 0, done.stderr
    spec = json.loads((root.path / "etc/cdi/nvidia.yaml").read_text())
    assert spec["kind"] == "nvidia.com/gpu"
    hardware = json.loads((root.state / "hardware.json").read_text())
    names = {d["name"] for d in spec["devices"]}
    assert names == {"all"} | {str(g["index"]) for g in hardware["gpus"]} | {
        g["uuid"] for g in hardware["gpus"]
    }
    listed = root.run("/usr/bin/nvidia-ctk", "cdi", "list")
    assert f"Found {len(names)} CDI devices" in listed.stderr
    assert "nvidia.com/gpu=all" in listed.stdout.splitlines()
    (root.state / "hardware.json").unlink()
    failed = root.run("/usr/bin/nvidia-ctk", "cdi", "generate", "--output=/etc/cdi/x.yaml")
    assert failed.returncode == 1 and "no GPUs found" in failed.stderr


def test_ctk_creates_a_missing_config_and_supports_dry_run(root: Root) -> None:
    _ctk(root)
    daemon = root.path / "etc/docker/daemon.json"
    dry = root.run(
        "/usr/bin/nvidia-ctk",
        "runtime",
        "configure",
        "--runtime=docker",
        f"--config={daemon}",
        "--dry-run",
    )
    assert dry.returncode == 0
    assert json.loads(dry.stdout)["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert not daemon.exists()
    done = root.run(
        "/usr/bin/nvidia-ctk", "runtime", "configure", "--runtime=docker", f"--config={daemon}"
    )
    assert done.returncode == 0
    assert "Config file does not exist; using empty config" in done.stderr
    assert daemon.exists()


@pytest.mark.parametrize(
    ("args", "content", "message"),
    [
        (["--runtime=crio"], None, "unrecognized runtime 'crio'"),
        (["--runtime=docker", "--frobnicate"], None, "flag provided but not defined: -frobnicate"),
        (["--runtime=docker"], "{not json", "invalid JSON"),
        (["--runtime=docker"], "[1, 2]", "does not hold a JSON object"),
    ],
)
def test_ctk_errors(root: Root, args: list[str], content: str | None, message: str) -> None:
    _ctk(root)
    daemon = root.path / "etc/docker/daemon.json"
    if content is not None:
        daemon.parent.mkdir(parents=True)
        daemon.write_text(content)
    done = root.run("/usr/bin/nvidia-ctk", "runtime", "configure", *args, f"--config={daemon}")
    assert done.returncode == 1
    assert message in done.stderr
    if content is not None:
        assert daemon.read_text() == content  # a bad file is left as it was


def test_ctk_and_friends_report_their_versions(root: Root) -> None:
    _ctk(root)
    ctk = root.run("/usr/bin/nvidia-ctk", "--version")
    assert ctk.stdout.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.16.2"
    cli = root.run("/usr/bin/nvidia-container-cli", "--version")
    assert cli.stdout.splitlines()[:2] == ["cli-version: 1.16.2", "lib-version: 1.16.2"]
    hook = root.run("/usr/bin/nvidia-container-runtime-hook", "--version")
    assert hook.stdout.startswith("NVIDIA Container Runtime Hook version 1.16.2\n")
    runtime = root.run("/usr/bin/nvidia-container-runtime", "--version")
    assert runtime.stdout.startswith("NVIDIA Container Runtime version 1.16.2\n")
    if shutil.which("runc") or Path("/usr/sbin/runc").exists():
        assert "runc version" in runtime.stdout  # it hands over to runc, like the real one


def test_container_runtime_execs_runc(root: Root) -> None:
    _ctk(root)
    runc = shutil.which("runc") or "/usr/sbin/runc"
    if not Path(runc).exists():
        pytest.skip("runc is not installed on this machine")
    done = root.run("/usr/bin/nvidia-container-runtime", "--help")
    direct = subprocess.run([runc, "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == direct.returncode
    assert done.stdout == direct.stdout


def test_container_cli_info_reads_the_emulated_gpus(root: Root) -> None:
    _ctk(root)
    root.unpack("nvidia-smi", "550.127.05-1")
    root.hardware(count=2)
    failed = root.run("/usr/bin/nvidia-container-cli", "info")
    assert failed.returncode == 1
    assert "initialization error: nvml error: driver not loaded" in failed.stderr
    (root.state / "loaded-driver-version").write_text("550.127.05\n")
    done = root.run("/usr/bin/nvidia-container-cli", "info")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("NVRM version:   550.127.05\nCUDA version:   12.4\n")
    assert done.stdout.count("Model:          NVIDIA H100 80GB HBM3") == 2
    (root.state / "loaded-driver-version").write_text("550.144.03\n")
    mismatch = root.run("/usr/bin/nvidia-container-cli", "info")
    assert "driver/library version mismatch" in mismatch.stderr
