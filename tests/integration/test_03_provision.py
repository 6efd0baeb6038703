"""The pinned stack on the lab: provision, idempotence, check mode, drift, pin moves.

Runs after 01 (lab) and 02 (disks) against the shared lab of conftest.py
(``$GPUNODE_TEST_LAB``), through the real CLI (``python -m toolkit``), real SSH and real
Ansible, on a copy of the lab inventory (the tests change its stack). /data is mounted (02),
so Docker's and containerd's storage go there. The module leaves every node on the lab's
default stack, provisioned, which 04 expects.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_fixtures import REPO, lab_driver_packages

from toolkit.inventory import load_inventory
from toolkit.lab import apt_cache, runfile
from toolkit.lab import lab as lab_core
from toolkit.stack.lock import LOCK_KEY, apply_lock, dump_lock, lock_from_vars, parse_lock
from toolkit.stack.resolve import resolve

pytestmark = pytest.mark.lab

DEFAULT_DRIVER = "550.127.05"
UPGRADE_DRIVER = "550.144.03"
# The driver packages debian12 gets (Debian-style names: the branch is only in the version).
DRIVER_550 = lab_driver_packages()
STACK_580 = {
    "driver": {"version": "580.95.05", "flavour": "open"},
    "cuda": "12.8.1",
    "nccl": "2.26.2-1+cuda12.8",
    "fabric_manager": "auto",
    "container_toolkit": "1.16.2",
}


@pytest.fixture(scope="module")
def inv(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the lab inventory, whose stack the tests change."""
    target = tmp_path_factory.mktemp("provision") / "inv"
    shutil.copytree(lab.inventory, target)
    return target


@pytest.fixture(scope="module")
def default_stack(inv: Path) -> dict[str, Any]:
    return yaml.safe_load((inv / "group_vars/lab/stack.yml").read_text())


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("state")


def gpunode(
    state_dir: Path, *args: str, check: bool = False, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUNODE_STATE_DIR": str(state_dir), "COLUMNS": "200"}
    proc = subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        pytest.fail(f"gpunode {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")
    return proc


def provision(state_dir: Path, inv: Path, *extra: str, expect: int = 0) -> dict[str, Any]:
    proc = gpunode(state_dir, "provision", "-i", str(inv), "--json", *extra)
    assert proc.returncode == expect, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def set_stack(inv: Path, stack: dict[str, Any]) -> None:
    (inv / "group_vars/lab/stack.yml").write_text(yaml.safe_dump({"stack": stack}))


def expected_pins(inv: Path) -> dict[str, dict[str, str]]:
    """Per host: every package of the resolved stack -> its locked version (Debian 12)."""
    inventory = load_inventory(inv)
    pins = {}
    for host in inventory.hosts_for(None):
        stack, hardware = inventory.host_config(host)
        lock = lock_from_vars(inventory.host_vars(host.name).values, host.name)
        resolved = apply_lock(resolve(stack, hardware, "debian12"), lock)
        merged: dict[str, str] = {}
        for part in ("driver", "cuda", "nccl", "fabric_manager", "container_toolkit"):
            section = resolved[part]
            if part == "fabric_manager" and not section["enabled"]:
                continue
            merged.update(section["packages"])
            merged.update(section.get("pinning_packages") or {})
        pins[host.name] = merged
    return pins


def installed(lab: Any, node: str) -> dict[str, str]:
    out = lab.ssh(node, "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'").stdout
    return {
        line.split()[0]: line.split()[1]
        for line in out.splitlines()
        if len(line.split()) >= 3 and line.split()[2][1] == "i"
    }


def holds(lab: Any, node: str) -> set[str]:
    return set(lab.ssh(node, "apt-mark showhold").stdout.split())


def loaded_driver(lab: Any, node: str) -> str:
    proc = lab.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader", check=False)
    return proc.stdout.strip().splitlines()[0] if proc.returncode == 0 else proc.stdout


def assert_converged(lab: Any, inv: Path, only: str | None = None) -> None:
    for host, pins in expected_pins(inv).items():
        if only is not None and host != only:
            continue
        have = installed(lab, host)
        for package, version in pins.items():
            assert have.get(package) == version, (
                f"{host}: {package} {have.get(package)} != {version}"
            )
        assert set(pins) <= holds(lab, host), f"{host}: not all pins are held"
        prefs = lab.ssh(host, "cat /etc/apt/preferences.d/gpunode-*.pref").stdout
        for package, version in pins.items():
            assert f"Package: {package}\nPin: version {version}\nPin-Priority: 1001" in prefs
        driver = pins["nvidia-driver"]
        assert loaded_driver(lab, host) == driver.rsplit("-", 1)[0]


def node_state(lab: Any, node: str) -> dict[str, Any]:
    return json.loads(lab.ssh(node, "cat /etc/gpunode/state.json").stdout)


@pytest.fixture(scope="module", autouse=True)
def restore_default_stack(
    lab: Any, inv: Path, default_stack: dict[str, Any], state_dir: Path
) -> Iterator[None]:
    """Whatever happens, leave the nodes on the lab's default stack for later modules."""
    yield
    set_stack(inv, default_stack["stack"])
    proc = gpunode(state_dir, "provision", "-i", str(inv), "--json", "--relock")
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_check_on_fresh_nodes_predicts_the_installs(lab: Any, inv: Path, state_dir: Path) -> None:
    for node in lab.nodes:
        assert "nvidia-driver" not in installed(lab, node.name)
    result = provision(state_dir, inv, "--check")
    assert result["check"] is True
    for host, counts in result["hosts"].items():
        assert counts["changed"] > 0 and counts["failed"] == 0, host
        predictions = " ".join(c["msg"] for c in result["changes"] if c["host"] == host)
        assert f"nvidia-driver={DEFAULT_DRIVER}-1" in predictions
        assert "cuda-toolkit-12-4=12.4.1-1" in predictions
        assert "libnccl2=2.21.5-1+cuda12.4" in predictions
    for node in lab.nodes:  # check mode changed nothing
        assert "nvidia-driver" not in installed(lab, node.name)
        assert lab.ssh(node.name, "test -e /etc/gpunode/state.json", check=False).returncode != 0


def test_incoherent_stack_exits_2_before_any_host_is_touched(
    inv: Path, default_stack: dict[str, Any], tmp_path: Path
) -> None:
    broken = tmp_path / "inv"
    shutil.copytree(inv, broken)
    set_stack(broken, {**default_stack["stack"], "cuda": "12.8.1"})
    proc = gpunode(tmp_path / "state", "provision", "-i", str(broken))
    assert proc.returncode == 2, proc.stderr
    assert "550.127.05" in proc.stderr and "12.8" in proc.stderr
    assert not (tmp_path / "state" / "runs").exists()  # no playbook ran


def test_a_runfile_driver_is_refused_before_anything_changes(
    lab: Any, inv: Path, tmp_path: Path
) -> None:
    # The last node comes with a driver from NVIDIA's .run installer (files, no package): the
    # provision refuses it in preflight, naming the files and the way out, and installs nothing.
    node = lab.nodes[-1]
    lab_core.set_faults(lab.name, node.index, ["runfile-driver"])
    try:
        proc = gpunode(tmp_path / "state", "provision", "-i", str(inv), "--limit", node.name)
        assert proc.returncode == 1, proc.stderr[-4000:]
        assert (
            f"{node.name}: NVIDIA driver {runfile.VERSION} was installed by NVIDIA's .run "
            "installer" in proc.stderr
        ), proc.stderr[-4000:]
        assert runfile.UNINSTALLER in proc.stderr and "/kernel/drivers/video/nvidia.ko" in (
            proc.stderr
        )
        way_out = "sudo nvidia-uninstall --silent"
        assert f"`{way_out}`" in proc.stderr
        assert "nvidia-driver" not in installed(lab, node.name)
        assert lab.ssh(node.name, "test -e /etc/gpunode/state.json", check=False).returncode != 0
        nothing = "ls /etc/apt/preferences.d/gpunode-* /etc/apt/sources.list.d/gpunode-*"
        assert lab.ssh(node.name, nothing, check=False).returncode != 0
        # The way out, as the message says it (the stand-in uninstaller removes the footprint).
        lab.ssh(node.name, way_out)
        left = lab.ssh(node.name, f"ls {runfile.UNINSTALLER} {runfile.LOG}", check=False)
        assert left.returncode != 0, left.stdout
    finally:
        lab_core.set_faults(lab.name, node.index, [])
    # The next test provisions every node, this one included.


def test_first_provision_installs_exact_versions(lab: Any, inv: Path, state_dir: Path) -> None:
    # Node 2 comes with NVIDIA's repository configured the way cuda-keyring does it: a second
    # source with another signed-by would break every `apt update` (the `keyring` fault).
    keyring_node = lab.nodes[1].name
    lab_core.set_faults(lab.name, 2, ["keyring"])
    try:
        assert (
            "signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg"
            in lab.ssh(keyring_node, f"cat {lab_core.CUDA_KEYRING_LIST}").stdout
        )
        held = apt_cache.cached_packages()
        log_start = apt_cache.log_size()
        result = provision(state_dir, inv)
    finally:
        lab_core.set_faults(lab.name, 2, [])
    # Debian's packages came through the lab's shared cache, and none it held was fetched
    # again (CI's demo lab filled it: there this run fetches nothing from outside).
    moved = [t for t in apt_cache.transfers(log_start) if t.package]
    fetched = {t.path for t in moved if t.fetched}
    served = {t.client for t in moved if not t.fetched}
    print(f"apt cache: {len(moved) - len(fetched)} served, {len(fetched)} fetched from outside")
    assert served == {n.ip for n in lab.nodes}, moved
    assert not fetched & held, sorted(fetched & held)
    update = lab.ssh(keyring_node, "apt-get update 2>&1", check=False)
    assert update.returncode == 0 and "Conflicting values" not in update.stdout, update.stdout
    cuda_keyring = lab.ssh(keyring_node, f"cat {lab_core.CUDA_KEYRING_LIST}").stdout
    assert cuda_keyring.startswith("# deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg]")
    assert "disabled by gpunode" in cuda_keyring
    # NVIDIA's own toolkit list names its URI with $(ARCH): matched as apt reads it.
    toolkit_list = lab.ssh(keyring_node, f"cat {lab_core.CONTAINER_TOOLKIT_LIST}").stdout
    first, experimental = toolkit_list.splitlines()[:2]
    assert first.startswith("# deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit")
    assert "/stable/deb/$(ARCH) /" in first and "disabled by gpunode" in first, toolkit_list
    assert experimental.startswith("#deb ") and "disabled by gpunode" not in experimental
    assert result["ok"] and set(result["hosts"]) == {n.name for n in lab.nodes}
    assert_converged(lab, inv)
    for node in lab.nodes:
        state = node_state(lab, node.name)
        assert state["state"] == "provisioned" and len(state["stack_id"]) == 12
        assert state["run_id"] == result["run_id"]
        assert state["provisioned_at"] == state["time"]  # opens acceptance's XID window
        # The role's drop-in keeps the packaged unit's user (Debian's nvpd; the stand-in daemon
        # refuses a user the node lacks, as the real one does) and says --persistence-mode.
        mode = lab.ssh(node.name, "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")
        assert set(mode.stdout.split()) == {"Enabled"}, mode.stdout
        unit = lab.ssh(node.name, "systemctl show -p ExecStart --value nvidia-persistenced").stdout
        assert "argv[]=/usr/bin/nvidia-persistenced --user nvpd --persistence-mode ;" in unit, unit
        daemon = json.loads(lab.ssh(node.name, "cat /etc/docker/daemon.json").stdout)
        assert "nvidia" in daemon["runtimes"]
        # Container storage on the data disk, and both services ordered after its mount.
        root = lab.ssh(node.name, "docker info --format '{{.DockerRootDir}}'").stdout.strip()
        assert root == "/data/containers/docker"
        # Docker bind-mounts its root onto itself, so compare filesystems, not mount points.
        uuid = "findmnt -n -o UUID -T"
        data_fs = lab.ssh(node.name, f"{uuid} /data").stdout.strip()
        assert data_fs and lab.ssh(node.name, f"{uuid} {root}").stdout.strip() == data_fs
        containerd = lab.ssh(node.name, "containerd config dump").stdout
        assert 'root = "/data/containers/containerd"' in containerd
        for service in ("docker", "containerd"):
            after = lab.ssh(node.name, f"systemctl show -p After --value {service}").stdout
            assert "data.mount" in after.split(), f"{node.name}: {service} After={after}"
        assert (
            "nouveau"
            in lab.ssh(node.name, "cat /etc/modprobe.d/gpunode-blacklist-nouveau.conf").stdout
        )
        sources = lab.ssh(node.name, "cat /etc/apt/sources.list.d/gpunode-*.list").stdout
        assert "signed-by=/etc/apt/keyrings/gpunode-" in sources and "trusted" not in sources


COMPONENTS = ("driver", "cuda", "nccl", "fabric_manager", "imex", "container_runtime")
UP_TO_DATE = {"run": False, "reason": "up to date"}


def test_second_run_and_check_change_nothing(lab: Any, inv: Path, state_dir: Path) -> None:
    lost, kept = lab.nodes[0].name, lab.nodes[1].name
    before = node_state(lab, kept)
    # A node with nothing to converge still has its state recorded (the play ends for it
    # right after): one whose state file is gone is provisioned again, without any role.
    lab.ssh(lost, "rm /etc/gpunode/state.json")
    again = provision(state_dir, inv)
    assert {h: c["changed"] for h, c in again["hosts"].items()} == {lost: 1, kept: 0}
    # Every role is skipped whole: the facts read first show each component intact.
    everything_up_to_date = {n.name: {c: UP_TO_DATE for c in COMPONENTS} for n in lab.nodes}
    assert again["plan"] == everything_up_to_date
    assert node_state(lab, kept) == before  # nothing changed: the state file is not written
    recorded = node_state(lab, lost)
    assert recorded["state"] == "provisioned" and recorded["run_id"] == again["run_id"]
    assert recorded["stack_id"] == before["stack_id"]
    check = provision(state_dir, inv, "--check")
    assert {h: c["changed"] for h, c in check["hosts"].items()} == {n.name: 0 for n in lab.nodes}
    assert check["plan"] == everything_up_to_date


def test_each_kind_of_changed_fact_runs_its_component_and_is_restored(
    lab: Any, inv: Path, state_dir: Path
) -> None:
    node, other = lab.nodes[0].name, lab.nodes[1].name
    pref = "/etc/apt/preferences.d/gpunode-nccl.pref"
    pref_before = lab.ssh(node, f"cat {pref}").stdout
    lab.ssh(node, f"echo '# a local edit' >> {pref}")  # a managed file's content
    lab.ssh(node, "apt-mark unhold cuda-toolkit-12-4")  # a hold removed
    lab.ssh(node, "systemctl disable --now docker.socket docker")  # a service disabled
    # A fact that cannot be read never takes the fast path.
    lab.ssh(node, "echo '{not json' > /var/lib/gpunode/converged/fabric_manager.json")
    # A package-list refresh cut short after the sources were written (an interrupted up): the
    # lists folder is newer than an hour and the repositories' lists are gone. The families
    # that run look again after a refresh instead of failing "the repositories do not carry".
    lab.ssh(node, "find /var/lib/apt/lists -maxdepth 1 -type f ! -name lock -delete")
    lab.ssh(node, "touch /var/lib/apt/lists && ! apt-cache madison cuda-toolkit-12-4 | grep -q .")

    result = provision(state_dir, inv)
    plan = result["plan"]
    assert plan[other] == {c: UP_TO_DATE for c in COMPONENTS}
    assert plan[node]["driver"] == UP_TO_DATE
    assert plan[node]["nccl"] == {"run": True, "reason": f"{pref} changed"}
    assert plan[node]["cuda"] == {"run": True, "reason": "cuda-toolkit-12-4 is not held"}
    assert plan[node]["container_runtime"] == {
        "run": True,
        "reason": "service docker is disabled, inactive",
    }
    assert plan[node]["fabric_manager"]["run"]
    assert plan[node]["fabric_manager"]["reason"].startswith("facts unreadable: ")
    assert result["hosts"][other]["changed"] == 0
    assert lab.ssh(node, f"cat {pref}").stdout == pref_before
    assert "cuda-toolkit-12-4" in holds(lab, node)
    for query in ("is-enabled", "is-active"):
        assert lab.ssh(node, f"systemctl {query} docker").stdout.strip() in ("enabled", "active")
    assert_converged(lab, inv)
    again = provision(state_dir, inv)
    assert again["plan"] == {n.name: {c: UP_TO_DATE for c in COMPONENTS} for n in lab.nodes}


def test_cdi_mode_generates_the_spec_and_configures_containerd(
    lab: Any, inv: Path, state_dir: Path
) -> None:
    """Opt-in CDI mode on one node (a Kubernetes node): the GPUs' CDI specification, containerd
    with the nvidia runtime and CDI enabled and restarted, Docker still running; the other
    node is left alone, and a second run changes nothing."""
    node, other = lab.nodes[1].name, lab.nodes[0].name
    # The lab keeps each node's variables in a host_vars/<node>/ folder (Ansible reads no
    # <node>.yml beside it).
    host_vars = inv / "host_vars" / node / "cdi.yml"
    host_vars.parent.mkdir(parents=True, exist_ok=True)
    host_vars.write_text("gpunode_container_cdi: true\n")
    result = provision(state_dir, inv)
    assert result["plan"][node]["container_runtime"]["run"]
    assert result["plan"][other] == {c: UP_TO_DATE for c in COMPONENTS}
    spec = json.loads(lab.ssh(node, "cat /etc/cdi/nvidia.yaml").stdout)
    assert spec["kind"] == "nvidia.com/gpu"
    listed = lab.ssh(node, "nvidia-ctk cdi list").stdout.splitlines()
    assert "nvidia.com/gpu=all" in listed and "nvidia.com/gpu=0" in listed
    config = lab.ssh(node, "cat /etc/containerd/config.toml").stdout
    assert "enable_cdi = true" in config and "nvidia-container-runtime" in config
    for service in ("containerd", "docker"):
        assert lab.ssh(node, f"systemctl is-active {service}").stdout.strip() == "active"
    assert lab.ssh(node, "docker info --format '{{.ServerVersion}}'").stdout.strip()
    assert lab.ssh(other, "test -e /etc/cdi/nvidia.yaml", check=False).returncode != 0
    again = provision(state_dir, inv)
    assert again["hosts"][node]["changed"] == 0
    assert again["plan"][node] == {c: UP_TO_DATE for c in COMPONENTS}


def test_unattended_upgrade_is_drift_and_provision_restores_it(
    lab: Any, inv: Path, state_dir: Path
) -> None:
    upgraded, other = lab.nodes[0].name, lab.nodes[1].name
    # Both nodes were accepted for this stack; only the upgraded one must lose it.
    for node in (upgraded, other):
        state = node_state(lab, node)
        # as an acceptance leaves it: ready, with the verdict's expiry (toolkit.node.nodestate)
        ready = {
            **state,
            "state": "ready",
            "reason": [],
            "valid_until": "2099-01-01T00:00:00+00:00",
        }
        lab.ssh(node, f"echo '{json.dumps(ready)}' > /etc/gpunode/state.json")
    versions = " ".join(f"{p}={UPGRADE_DRIVER}-1" for p in DRIVER_550)
    lab.ssh(
        upgraded,
        f"apt-mark unhold {' '.join(DRIVER_550)} && DEBIAN_FRONTEND=noninteractive "
        f"apt-get install -y -q {versions}",
    )
    proc = gpunode(state_dir, "drift", "-i", str(inv))
    assert proc.returncode == 1
    expected = f"{upgraded}: nvidia-driver pinned {DEFAULT_DRIVER}-1, "
    assert expected + f"installed {UPGRADE_DRIVER}-1" in proc.stderr
    assert other not in proc.stderr.split("drift on", 1)[1]
    report = json.loads(gpunode(state_dir, "drift", "-i", str(inv), "--json").stdout)
    assert report["drifted"] == [upgraded]
    kinds = {(d["package"], d["kind"]) for d in report["nodes"][upgraded]["drift"]}
    assert ("nvidia-driver", "version") in kinds
    assert ("kernel module", "loaded") in kinds  # user space moved, the module did not
    assert node_state(lab, upgraded)["state"] == "not-ready"
    assert any(UPGRADE_DRIVER in r for r in node_state(lab, upgraded)["reason"])
    assert node_state(lab, other)["state"] == "ready"

    restored = provision(state_dir, inv)
    # An upgraded package is a fact the plan reads: only the driver runs, on that node only.
    driver_plan = restored["plan"][upgraded]["driver"]
    assert driver_plan["run"] and f"installed {UPGRADE_DRIVER}-1, pinned" in driver_plan["reason"]
    assert restored["plan"][upgraded]["cuda"] == UP_TO_DATE
    assert restored["plan"][other]["driver"] == UP_TO_DATE
    assert gpunode(state_dir, "drift", "-i", str(inv)).returncode == 0
    assert_converged(lab, inv)
    status = json.loads(gpunode(state_dir, "status", "-i", str(inv), "--json").stdout)
    assert status["nodes"][other]["state"] == "ready"
    assert status["nodes"][upgraded]["state"] == "provisioned"  # acceptance must run again


def _lock_file(inv: Path) -> Path:
    return inv / "group_vars/lab/stack.lock.yml"


def test_a_stale_lock_is_refused_and_a_missing_pin_fails_before_any_node_changes(
    lab: Any, inv: Path, state_dir: Path, default_stack: dict[str, Any], tmp_path: Path
) -> None:
    before = {n.name: installed(lab, n.name) for n in lab.nodes}
    lock_text = _lock_file(inv).read_text()
    set_stack(
        inv, {**default_stack["stack"], "driver": {"version": "550.163.01", "flavour": "open"}}
    )
    try:
        stale = gpunode(tmp_path / "stale", "provision", "-i", str(inv))
        missing = gpunode(tmp_path / "missing", "provision", "-i", str(inv), "--relock")
    finally:
        set_stack(inv, default_stack["stack"])
    assert stale.returncode == 2 and "the stack lock is stale" in stale.stderr
    assert missing.returncode == 2
    assert "nvidia-driver 550.163.01-*: not in the repositories" in missing.stderr
    assert _lock_file(inv).read_text() == lock_text  # nothing was written
    for state in ("stale", "missing"):
        assert not (tmp_path / state / "runs").exists()  # no playbook ran
    for node in lab.nodes:
        after = installed(lab, node.name)
        assert {p: after.get(p) for p in DRIVER_550} == {
            p: before[node.name][p] for p in DRIVER_550
        }
        assert set(DRIVER_550) <= holds(lab, node.name)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("version", "12.4.1-7", "cuda-toolkit-12-4=12.4.1-7 is no longer in repository cuda"),
        ("sha256", "0" * 64, "cuda-toolkit-12-4=12.4.1-1 was republished by repository cuda"),
    ],
)
def test_a_lock_the_repository_no_longer_holds_fails_naming_the_package(
    inv: Path, tmp_path: Path, field: str, value: str, expected: str
) -> None:
    broken = tmp_path / "inv"
    shutil.copytree(inv, broken)
    document = yaml.safe_load(_lock_file(broken).read_text())
    document[LOCK_KEY]["systems"]["debian12"]["packages"]["cuda-toolkit-12-4"][field] = value
    _lock_file(broken).write_text(dump_lock(parse_lock(document[LOCK_KEY], "the test's lock")))
    proc = gpunode(tmp_path / "state", "provision", "-i", str(broken))
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "nothing was changed" in proc.stderr
    assert not (tmp_path / "state" / "runs").exists()  # no playbook ran


def test_moving_branch_and_cuda_converges_and_verifies(
    lab: Any, inv: Path, state_dir: Path
) -> None:
    # One node moves (the other keeps 550 and shows as drift): the move is per node, and the
    # module's teardown then moves one node back instead of two (CI time).
    moved, kept = lab.nodes[0].name, lab.nodes[1].name
    before = node_state(lab, moved)
    set_stack(inv, STACK_580)
    result = provision(state_dir, inv, "--relock", "--limit", moved)
    assert result["ok"]
    assert_converged(lab, inv, only=moved)
    have = installed(lab, moved)
    assert not [p for p, v in have.items() if v.startswith("550.")], f"{moved} keeps 550"
    assert "cuda-toolkit-12-4" not in have
    state = node_state(lab, moved)
    assert state["stack_id"] != before["stack_id"]
    if before["state"] == "ready":  # accepted for the old stack only
        assert state["state"] == "not-ready"
        assert any("stack changed" in r for r in state["reason"])
    else:
        assert state["state"] == "provisioned"
    assert gpunode(state_dir, "drift", "-i", str(inv), "--limit", moved).returncode == 0
    assert gpunode(state_dir, "drift", "-i", str(inv), "--limit", kept).returncode == 1
