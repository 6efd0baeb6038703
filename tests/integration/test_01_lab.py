"""The lab itself (issue 3, "Done when"): nodes reachable through the inventory with host key
checking on, data disks by id, the signed stand-in repository, faults, restarts, and a
``down`` that leaves nothing behind.

Runs first among the integration modules and leaves the shared nodes clean: no driver, no
faults, no extra disks (those are exercised on a throwaway lab of their own).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml
from shared_fixtures import REPO, lab_driver_packages

from toolkit.lab import disks as lab_disks
from toolkit.lab import image as lab_image
from toolkit.lab import lab as lab_core
from toolkit.lab import nodes as lab_nodes
from toolkit.lab import paths
from toolkit.lab.spec import SLOW_DATA_READ_BPS, build_spec

if TYPE_CHECKING:
    from conftest import Lab  # the session fixture's type (tests/integration/conftest.py)

pytestmark = pytest.mark.lab
LAB_NAME = os.environ.get("GPUNODE_TEST_LAB", "gpunode-test")

VENV_BIN = Path(os.environ.get("VIRTUAL_ENV", REPO / ".venv")) / "bin"
LAB_KEYRING = "/usr/share/keyrings/gpunode-test-lab.gpg"
LAB_LIST = "/etc/apt/sources.list.d/gpunode-test-lab.list"
# An exact old driver needs every package of it pinned, as on NVIDIA's debian12 repository
# (its Debian-style names carry no branch, and it also carries newer 550 and 580 drivers).
DRIVER = " ".join(f"{package}=550.127.05-1" for package in lab_driver_packages())
# Every driver package the stand-in repository can have put on a node.
PURGE = "'nvidia-*' 'libnvidia-*' 'libgl1-nvidia-*' libcuda1 firmware-nvidia-gsp"


def _ansible(inventory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    ansible = shutil.which("ansible", path=str(VENV_BIN)) or shutil.which("ansible")
    assert ansible, "ansible is not installed"
    # No SSH connection sharing: each run checks host keys afresh and leaves no master
    # process behind.
    env = {
        **os.environ,
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_SSH_ARGS": "-o ControlMaster=no",
    }
    return subprocess.run(
        [ansible, "-i", str(inventory), *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )


def _repos(lab: Lab) -> dict[str, str]:
    data = yaml.safe_load((lab.inventory / "group_vars/all/repos.yml").read_text())
    assert isinstance(data, dict)
    return data


def _apt_update_only(list_file: str) -> str:
    # Only the list under test: the outcome must not depend on Debian's mirrors.
    return (
        f"apt-get update -o Dir::Etc::sourcelist={list_file} -o Dir::Etc::sourceparts=- "
        "-o APT::Get::List-Cleanup=0"
    )


# --- reaching the nodes ---------------------------------------------------------------------


def test_ansible_ping_through_the_inventory_with_host_key_checking(lab: Lab) -> None:
    result = _ansible(lab.inventory, "lab", "-m", "ansible.builtin.ping")
    assert result.returncode == 0, result.stdout + result.stderr
    for node in lab.nodes:
        assert f"{node.name} | SUCCESS" in result.stdout
    ssh_vars = yaml.safe_load((lab.inventory / "group_vars/all/ssh.yml").read_text())
    assert "StrictHostKeyChecking=yes" in ssh_vars["ansible_ssh_common_args"]


def test_a_wrong_known_hosts_file_is_refused(lab: Lab, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory"
    shutil.copytree(lab.inventory, inventory)
    wrong = tmp_path / "known_hosts"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")],
        check=True,
    )
    other = (tmp_path / "other.pub").read_text().split()
    wrong.write_text("".join(f"{n.ip},{n.name} {other[0]} {other[1]}\n" for n in lab.nodes))
    ssh_file = inventory / "group_vars/all/ssh.yml"
    ssh_vars = yaml.safe_load(ssh_file.read_text())
    known = str(paths.lab_dir(lab.name) / "known_hosts")
    assert known in ssh_vars["ansible_ssh_common_args"]
    ssh_vars["ansible_ssh_common_args"] = ssh_vars["ansible_ssh_common_args"].replace(
        known, str(wrong)
    )
    ssh_file.write_text(yaml.safe_dump(ssh_vars))
    result = _ansible(inventory, "lab", "-m", "ansible.builtin.ping")
    assert result.returncode != 0
    assert "SUCCESS" not in result.stdout
    assert "Host key verification failed" in result.stdout + result.stderr


def test_nodes_boot_clean_under_systemd(lab: Lab) -> None:
    for node in lab.nodes:
        assert lab.ssh(node.index, "systemctl is-system-running").stdout.strip() == "running"
        assert lab.ssh(node.index, "hostname").stdout.strip() == node.name
        # Identities are per node, never baked into the image.
        machine_id = lab.ssh(node.index, "cat /etc/machine-id").stdout.strip()
        assert len(machine_id) == 32
    ids = {lab.ssh(n.index, "cat /etc/machine-id").stdout for n in lab.nodes}
    assert len(ids) == len(lab.nodes) == lab.state.spec.nodes


def test_host_ca_bundle_is_trusted_on_nodes(lab: Lab) -> None:
    bundle = lab_nodes.host_ca_bundle()
    if bundle is None:
        pytest.skip("this host has no CA bundle at /etc/ssl/certs/ca-certificates.crt")
    result = lab.ssh(
        1, f"test -s {lab_nodes.CA_FILE} && grep -c 'BEGIN CERTIFICATE' {lab_nodes.CA_FILE}"
    )
    assert int(result.stdout) == bundle.read_text().count("BEGIN CERTIFICATE")
    repos = _repos(lab)
    assert repos["gpunode_ca_bundle"] == str(bundle)


# --- data disks -----------------------------------------------------------------------------


def test_data_disks_are_block_devices_by_id(lab: Lab) -> None:
    for node in lab.nodes:
        assert len(node.disks) == lab.state.spec.disks
        for disk in node.disks:
            path = f"/dev/disk/by-id/{disk.by_id}"
            size = lab.ssh(node.index, f"test -b {path} && blockdev --getsize64 {path}").stdout
            assert int(size) == lab.state.spec.disk_size
            target = lab.ssh(node.index, f"readlink -f {path}").stdout.strip()
            assert target == f"/dev/{disk.kernel_name}"
    hardware = yaml.safe_load(
        (lab.inventory / "host_vars" / lab.nodes[0].name / "hardware.yml").read_text()
    )
    listed = [d["serial"] for d in hardware["hardware"]["data_disks"]["disks"]]
    assert listed == [d.serial for d in lab.nodes[0].disks]


def test_udev_stand_in_links_filesystems_by_uuid(lab: Lab) -> None:
    disk = lab.nodes[1].disks[0]
    by_id = f"/dev/disk/by-id/{disk.by_id}"
    try:
        uuid = lab.ssh(
            2, f"mkfs.ext4 -q -F {by_id} && gpunode-lab-udev && blkid -p -s UUID -o value {by_id}"
        ).stdout.strip()
        assert uuid
        target = lab.ssh(2, f"readlink -f /dev/disk/by-uuid/{uuid}").stdout.strip()
        assert target == f"/dev/{disk.kernel_name}"
    finally:
        lab.ssh(2, f"wipefs -q -a {by_id} && gpunode-lab-udev")
    assert lab.ssh(2, "ls /dev/disk/by-uuid | wc -l").stdout.strip() == "0"


# --- the signed repository and the GPU emulation ---------------------------------------------


def test_no_nvidia_smi_before_a_driver(lab: Lab) -> None:
    for node in lab.nodes:
        assert lab.ssh(node.index, "command -v nvidia-smi", check=False).returncode != 0
        assert lab.ssh(node.index, "test -e /proc/driver/nvidia/version", check=False).returncode


@pytest.fixture
def lab_repo_on_node_1(lab: Lab) -> Iterator[dict[str, str]]:
    """The lab repository configured on node 1 the way a site configures NVIDIA's."""
    repos = _repos(lab)
    lab.ssh(
        1,
        f"curl -fsS {repos['gpunode_nvidia_repo_key_url']} | gpg --dearmor > {LAB_KEYRING} && "
        f"echo 'deb [signed-by={LAB_KEYRING}] {repos['gpunode_nvidia_repo_url']} /' > {LAB_LIST}",
    )
    try:
        yield repos
    finally:
        lab.ssh(
            1,
            f"apt-get purge -y -q {PURGE} >/dev/null 2>&1; "
            "apt-get autoremove --purge -y -q >/dev/null; "
            f"rm -f {LAB_LIST} {LAB_KEYRING}; "
            "rm -f /var/lib/apt/lists/*compute_cuda_repos* "
            "/var/lib/gpunode-lab/loaded-driver-version "
            "/proc/driver/nvidia/version "
            "/var/lib/gpunode-lab/persistence-mode.json",
        )


def test_stand_in_driver_installs_from_the_signed_repository(
    lab: Lab, lab_repo_on_node_1: dict[str, str]
) -> None:
    update = lab.ssh(1, _apt_update_only(LAB_LIST) + " 2>&1")
    assert "NO_PUBKEY" not in update.stdout and "not signed" not in update.stdout
    lab.ssh(1, f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {DRIVER}")
    listing = lab.ssh(1, "nvidia-smi -L").stdout.strip().splitlines()
    assert len(listing) == 8
    assert all("NVIDIA H100 80GB HBM3" in line and "(UUID: GPU-" in line for line in listing)
    query = lab.ssh(
        1, "nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader"
    ).stdout.splitlines()
    assert [row.split(", ")[0] for row in query] == [str(i) for i in range(8)]
    assert {row.split(", ")[2] for row in query} == {"550.127.05"}
    # Removing it again leaves the node as it was (later modules provision it for real).
    lab.ssh(1, f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -q {PURGE}")
    assert lab.ssh(1, "command -v nvidia-smi", check=False).returncode != 0


@pytest.fixture
def local_http_on_node_2(lab: Lab) -> Iterator[str]:
    """An HTTP server inside node 2 serving /srv/gpunode-test-repo (for hostile repositories)."""
    lab.ssh(
        2,
        "mkdir -p /srv/gpunode-test-repo && systemd-run --unit gpunode-test-http "
        "python3 -m http.server 8089 --bind 127.0.0.1 --directory /srv/gpunode-test-repo "
        "&& for i in $(seq 50); do curl -fs -o /dev/null http://127.0.0.1:8089/ && break; "
        "sleep 0.1; done",
    )
    try:
        yield "http://127.0.0.1:8089/"
    finally:
        lab.ssh(
            2,
            "systemctl stop gpunode-test-http; rm -rf /srv/gpunode-test-repo "
            f"{LAB_LIST} {LAB_KEYRING} /usr/share/keyrings/gpunode-test-other.gpg "
            "/var/lib/apt/lists/*127.0.0.1* /var/lib/apt/lists/*compute_cuda_repos* /root/.gnupg",
        )


def test_apt_refuses_unsigned_wrongly_signed_and_tampered_repositories(
    lab: Lab, local_http_on_node_2: str
) -> None:
    repos = _repos(lab)
    suite = repos["gpunode_nvidia_repo_url"]
    local = local_http_on_node_2
    lab.ssh(
        2,
        f"curl -fsS {repos['gpunode_nvidia_repo_key_url']} | gpg --dearmor > {LAB_KEYRING} && "
        f"cd /srv/gpunode-test-repo && curl -fsS -O {suite}Packages -O {suite}Release "
        f"-O {suite}InRelease",
    )
    # Fresh lists for every case: apt remembers that a repository was signed before.
    update = "rm -f /var/lib/apt/lists/*127.0.0.1* && " + _apt_update_only(LAB_LIST) + " 2>&1"

    # The genuine repository through the same path is accepted: the refusals below are
    # about signatures, not about the setup.
    lab.ssh(2, f"echo 'deb [signed-by={LAB_KEYRING}] {local} /' > {LAB_LIST}")
    assert lab.ssh(2, update, check=False).returncode == 0

    # Unsigned: a Release without InRelease or Release.gpg.
    lab.ssh(2, "mv /srv/gpunode-test-repo/InRelease /srv/gpunode-test-repo/InRelease.real")
    result = lab.ssh(2, update, check=False)
    assert result.returncode != 0
    assert "is not signed" in result.stdout

    # Tampered: a correctly signed InRelease over a Packages file that was changed.
    lab.ssh(
        2,
        "cd /srv/gpunode-test-repo && mv InRelease.real InRelease && rm -f Release && "
        "printf '\\nPackage: evil\\nVersion: 1\\nArchitecture: all\\n' >> Packages",
    )
    result = lab.ssh(2, update, check=False)
    assert result.returncode != 0
    assert "mismatch" in result.stdout.lower() or "unexpected size" in result.stdout.lower()

    # Wrongly signed: the real repository, trusted only for another key.
    lab.ssh(
        2,
        "gpg --batch -q --passphrase '' --quick-gen-key 'other <other@invalid>' ed25519 sign 1d "
        "&& gpg --batch --export other@invalid > /usr/share/keyrings/gpunode-test-other.gpg && "
        f"echo 'deb [signed-by=/usr/share/keyrings/gpunode-test-other.gpg] {suite} /' "
        f"> {LAB_LIST}",
    )
    result = lab.ssh(2, update, check=False)
    assert result.returncode != 0
    assert "NO_PUBKEY" in result.stdout or "not signed" in result.stdout


# --- faults ----------------------------------------------------------------------------------


def _hardware(lab: Lab, node: int) -> dict[str, Any]:
    data = json.loads(lab.ssh(node, f"cat {paths.HARDWARE_FILE}").stdout)
    assert isinstance(data, dict)
    return data


def _send_rate_mbit(lab: Lab, sender: int, receiver: int, megabytes: int = 24) -> float:
    """Real throughput from one node to another over the lab network (TCP, Mbit/s)."""
    target = lab.nodes[receiver - 1].ip
    lab.ssh(
        receiver,
        'systemd-run --unit gpunode-test-sink python3 -c "import socket\n'
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('0.0.0.0', 5099)); s.listen()\n"
        'while True:\n c,_=s.accept()\n while c.recv(1<<20): pass\n c.close()"',
    )
    try:
        script = (
            "import socket,time\n"
            "for i in range(50):\n"
            "  try:\n"
            f"    s=socket.create_connection(('{target}',5099)); break\n"
            "  except OSError: time.sleep(0.1)\n"
            f"b=bytes(1<<20); t=time.monotonic()\n"
            f"for i in range({megabytes}): s.sendall(b)\n"
            "s.shutdown(socket.SHUT_WR); s.recv(1); print(time.monotonic()-t)\n"
        )
        seconds = float(lab.ssh(sender, f'python3 -c "{script}"').stdout.strip())
    finally:
        lab.ssh(receiver, "systemctl stop gpunode-test-sink", check=False)
    return megabytes * 8 * 1.048576 / seconds


def test_faults_show_up_and_clear(lab: Lab) -> None:
    kernel_log = yaml.safe_load((lab.inventory / "group_vars/all/lab.yml").read_text())[
        "gpunode_kernel_log_command"
    ]
    assert "NVRM: Xid" not in lab.ssh(2, kernel_log).stdout
    faults = ["missing-gpu", "ecc", "pcie", "pcie-idle", "xid", "old-xid", "slow-net", "topo"]
    lab_core.set_faults(lab.name, 2, faults)
    try:
        hardware = _hardware(lab, 2)
        assert set(faults) - {"slow-net"} <= set(hardware["faults"])
        gpus = hardware["gpus"]
        assert isinstance(gpus, list) and len(gpus) == 7
        assert any(g["ecc_uncorrected_volatile"] > 0 for g in gpus)
        assert any(g["pcie_gen_max"] < g["pcie_gen_gpu_max"] for g in gpus)
        assert all(g["pcie_gen_idle"] == 1 for g in gpus)  # every link lowered while idle
        a, b = hardware["topo_sys_pair"]  # two GPUs of one NUMA node, for `topo -m` to show
        assert a != b and gpus[a]["numa_node"] == gpus[b]["numa_node"]
        assert hardware["nics"] and all(g["pcie_switch"] >= 0 for g in gpus)
        assert lab.ssh(2, kernel_log).stdout.count("NVRM: Xid") == 2  # xid and old-xid
        assert "tbf" in lab.ssh(2, "tc qdisc show dev eth0").stdout
        shaped = _send_rate_mbit(lab, sender=2, receiver=1)
        assert shaped < 130, f"slow-net: node 2 still sends at {shaped:.0f} Mbit/s"
        assert len(_hardware(lab, 1)["gpus"]) == 8
    finally:
        lab_core.set_faults(lab.name, 2, [])
    assert _hardware(lab, 2)["faults"] == []
    assert "tbf" not in lab.ssh(2, "tc qdisc show dev eth0").stdout
    unshaped = _send_rate_mbit(lab, sender=2, receiver=1)
    assert unshaped > 300, f"without slow-net node 2 sends at only {unshaped:.0f} Mbit/s"
    assert lab.refresh().state.nodes[1].faults == []


def _direct_read_mbps(lab: Lab, node: int, device: str, mib: int) -> float:
    """MB/s of an uncached (O_DIRECT) read of ``mib`` MiB from a data disk of a node."""
    out = lab.ssh(node, f"dd if={device} of=/dev/null bs=1M count={mib} iflag=direct 2>&1")
    found = re.search(r"copied, ([0-9.]+) s", out.stdout)
    assert found, out.stdout
    return mib * 2**20 / float(found.group(1)) / 1e6


def test_slow_data_throttles_uncached_reads_and_clears(lab: Lab) -> None:
    """`slow-data` is a real blkio read limit on the node's data disks (only its own)."""
    device = f"/dev/{lab.nodes[1].disks[0].kernel_name}"
    healthy = _direct_read_mbps(lab, 2, device, 32)
    lab_core.set_faults(lab.name, 2, ["slow-data"])
    try:
        slow = _direct_read_mbps(lab, 2, device, 16)
        other = _direct_read_mbps(lab, 1, f"/dev/{lab.nodes[0].disks[0].kernel_name}", 32)
    finally:
        lab_core.set_faults(lab.name, 2, [])
    cleared = _direct_read_mbps(lab, 2, device, 32)
    limit = SLOW_DATA_READ_BPS / 1e6
    assert slow < limit * 1.2, f"slow-data: node 2 still reads at {slow:.0f} MB/s"
    assert healthy > 10 * limit and cleared > 10 * limit, (healthy, cleared)
    # Node 1 under node 2's throttle would read at the limit (slow < 1.2 x limit above); its
    # own uncached read is the host disk's speed shared with whatever else runs (74 MB/s seen
    # in a CI run, 10x the limit in others), so 3x the limit tells the two apart.
    assert other > 3 * limit, f"node 1 was slowed too ({other:.0f} MB/s)"


def test_restart_is_a_reboot(lab: Lab) -> None:
    command = yaml.safe_load((lab.inventory / "group_vars/all/lab.yml").read_text())[
        "gpunode_reboot_boot_time_command"
    ]
    before = lab.ssh(2, command).stdout.strip()
    lab_core.set_faults(lab.name, 2, ["xid", "slow-net"])
    try:
        lab_core.restart_node(lab.name, 2)
        after = lab.ssh(2, command).stdout.strip()
        assert after and after != before
        # The fault is still there after the boot, like a broken GPU; disks are back by id.
        assert "NVRM: Xid" in lab.ssh(2, "journalctl -b -t kernel --no-pager").stdout
        assert "tbf" in lab.ssh(2, "tc qdisc show dev eth0").stdout
        for disk in lab.nodes[1].disks:
            lab.ssh(2, f"test -b /dev/disk/by-id/{disk.by_id}")
    finally:
        lab_core.set_faults(lab.name, 2, [])
    # A reboot from inside (systemd) brings the node back through the restart policy.
    lab.ssh(2, "systemctl reboot", check=False)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        result = lab.ssh(2, f"{command}; systemctl is-system-running --wait", check=False)
        if result.returncode == 0 and result.stdout.split()[0] != after:
            break
        time.sleep(1)
    else:
        pytest.fail("node 2 did not come back from `systemctl reboot`")
    # The kernel log starts empty at a boot, as on a real node.
    assert "NVRM: Xid" not in lab.ssh(2, "journalctl -b -t kernel --no-pager").stdout


# --- a throwaway lab: disks that move, Docker inside a node, and `down` ------------------------


def test_throwaway_lab_disks_docker_inside_and_down_leaves_nothing(tmp_path: Path) -> None:
    name = f"{LAB_NAME}-tmp"[:24]
    client = lab_image.docker_client()
    if lab_core.lab_state.load(name) is not None:
        lab_core.down(name)
    inventory_dir = tmp_path / "inventory"
    state = lab_core.up(
        build_spec(name=name, nodes=1, disks=1, disk_size=1024**3, ca_bundle=None),
        inventory_dir=inventory_dir,
    )
    home = paths.lab_dir(name)

    def on_node(command: str, timeout: float = 300) -> str:
        return lab_core.ssh_run(name, 1, command, timeout=timeout).stdout

    try:
        # Hot-add a disk, then swap kernel names: by-id links follow the serials.
        first = state.nodes[0].disks[0]
        added = lab_core.add_disk(name, 1)
        assert added.kernel_name == "nvme1n1"
        on_node(f"test -b /dev/disk/by-id/{added.by_id}")
        on_node(f"mkfs.xfs -q /dev/disk/by-id/{added.by_id} && gpunode-lab-udev")
        lab_core.swap_kernel_names(name, 1, first.serial, added.serial)
        assert on_node(f"readlink -f /dev/disk/by-id/{added.by_id}").strip() == "/dev/nvme0n1"
        assert on_node("blkid -p -s TYPE -o value /dev/nvme0n1").strip() == "xfs"
        assert on_node("blkid -p -s TYPE -o value /dev/nvme1n1 || true").strip() == ""

        # Docker runs inside a node with its data-root on an XFS data disk, and the mount
        # comes back after a reboot (systemd skips fstab block devices in containers).
        on_node(
            f'mkdir -p /data && echo "UUID=$(blkid -p -s UUID -o value '
            f'/dev/disk/by-id/{added.by_id}) /data xfs noatime,nofail 0 2" >> /etc/fstab && '
            "mount /data && mkdir -p /etc/docker && "
            'echo \'{"data-root": "/data/docker"}\' > /etc/docker/daemon.json && '
            "export DEBIAN_FRONTEND=noninteractive && apt-get update -q >/dev/null && "
            "apt-get install -y -q --no-install-recommends docker.io >/dev/null",
            timeout=900,
        )
        info = on_node("docker info --format '{{.DockerRootDir}} {{.Driver}}'").split()
        assert info == ["/data/docker", "overlay2"]
        on_node(
            "tar -h -C / -c usr/bin/echo lib/x86_64-linux-gnu/libc.so.6 "
            "lib64/ld-linux-x86-64.so.2 | docker import - gpunode-test-tiny:1 >/dev/null"
        )
        assert on_node("docker run --rm gpunode-test-tiny:1 /usr/bin/echo inside").strip() == (
            "inside"
        )
        lab_core.restart_node(name, 1)
        assert on_node("findmnt -n -o FSTYPE /data").strip() == "xfs"
        assert "gpunode-test-tiny" in on_node("docker images")
    finally:
        loops = {loop for loop, back in lab_disks.attached_loops().items() if str(home) in back}
        removed = lab_core.down(name)

    assert sorted(removed["loop_devices"]) == sorted(loops) and len(loops) == 2
    assert not client.containers.list(all=True, filters={"label": f"{paths.LABEL}={name}"})
    assert not client.networks.list(filters={"label": f"{paths.LABEL}={name}"})
    assert not [b for b in lab_disks.attached_loops().values() if str(home) in b]
    assert not home.exists()
    assert not inventory_dir.exists()
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    assert not [p for p in processes.stdout.splitlines() if name in p or str(home) in p]
    assert lab_core.lab_state.load(name) is None
