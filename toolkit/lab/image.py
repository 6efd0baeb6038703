"""The lab's node image: a Debian 12 systemd root filesystem, imported into Docker.

No container registry is reachable, so the image is made from packages: ``debootstrap``
builds a minimal bookworm root filesystem from the Debian archive, a few files make it a
good container citizen (units that cannot work in a container are masked, the lab's udev
stand-in is installed), and ``docker import`` turns it into an image. The image is tagged
by a hash of its recipe and rebuilt only when the recipe changes.

Secrets and identities are never baked in: the image has no machine-id and no SSH host
keys; the lab creates both per node when it creates the node.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import docker
import docker.errors

from toolkit.errors import LabError
from toolkit.images.engine import build_lock, docker_client, image_exists, import_rootfs
from toolkit.lab import paths
from toolkit.lab.proc import run, run_lines
from toolkit.progress import HEARTBEAT_S, Heartbeat, Progress

__all__ = ["docker_client", "ensure_image", "image_exists", "image_tag", "recipe_hash"]

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
SECURITY_MIRROR = "http://deb.debian.org/debian-security"
IMAGE_REPOSITORY = "gpunode-lab-node"

SLURM_PACKAGES: tuple[str, ...] = (
    "munge",
    "slurm-client",
    "slurmctld",
    "slurmd",
    # The accounting database a site runs beside slurmctld: slurmdbd (it pulls in its MySQL
    # plugin) and MariaDB under it. Only the head node starts them.
    "slurmdbd",
    "mariadb-server",
)
# Units the Slurm packages enable on install; a lab without --slurm has no key or config for
# them, and a lab with it starts them after writing both.
SLURM_UNITS: tuple[str, ...] = (
    "munge.service",
    "mariadb.service",
    "slurmdbd.service",
    "slurmctld.service",
    "slurmd.service",
)

# What a lab node needs beyond minbase: systemd as PID 1, sshd and Python for Ansible,
# python3-apt for ansible.builtin.apt, and the tools the disk and driver roles call.
PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "sudo",
    "iproute2",
    "gnupg",
    "ca-certificates",
    "curl",
    "procps",
    "kmod",
    "util-linux",
    "xfsprogs",
    "btrfs-progs",
    "e2fsprogs",
    "lsb-release",
    "less",
    # Slurm from Debian's archive, for `gpunode lab up --slurm` (toolkit/lab/slurm.py): the
    # controller, the node daemon, the client commands, the accounting daemon with its
    # database and MUNGE, their authentication. The image leaves them disabled and keyless
    # (no slurmdbd.conf, no database user); only a Slurm lab configures and starts them.
    *SLURM_PACKAGES,
    # The lab's shared Debian package cache runs from this image (toolkit/lab/apt_cache.py);
    # on a node it stays masked (MASKED_UNITS) and never runs.
    "apt-cacher-ng",
)

# Units that fail or make no sense in a container (no consoles, no kernel debug
# filesystems, no audit, read-only /sys) and timers that would change a node behind the
# tests' back (apt's daily upgrade: drift is provoked on purpose, never by chance).
MASKED_UNITS: tuple[str, ...] = (
    "getty.target",
    "console-getty.service",
    "getty@tty1.service",
    "systemd-remount-fs.service",
    "systemd-firstboot.service",
    "systemd-journald-audit.socket",
    "sys-kernel-config.mount",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-fs-fuse-connections.mount",
    "dev-hugepages.mount",
    "proc-sys-fs-binfmt_misc.automount",
    "systemd-binfmt.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "apt-cacher-ng.service",
)

# Files written into the root filesystem (path -> content). Scripts come from node_files/.
UDEV_UNIT = """\
[Unit]
Description=gpunode lab: data-disk device nodes and /dev/disk links (stand-in for udev)
DefaultDependencies=no
Before=local-fs-pre.target
Wants=local-fs-pre.target
After=systemd-tmpfiles-setup-dev.service

[Service]
Type=oneshot
RemainAfterExit=yes
# A kernel module does not survive a reboot: forget the emulated "loaded" driver before the
# stand-in module unit (After=local-fs.target) loads whatever driver is installed now.
ExecStartPre=/bin/rm -f /var/lib/gpunode-lab/loaded-driver-version \
  /proc/driver/nvidia/version
ExecStart=/usr/local/sbin/gpunode-lab-udev

[Install]
WantedBy=sysinit.target
"""

# systemd's fstab generator skips block-device entries in a container ("Running in a
# container, ignoring fstab device entry"), so a lab node would come back from a reboot
# without its /data. This unit mounts them at the point a real boot would.
MOUNTS_UNIT = """\
[Unit]
Description=gpunode lab: mount block-device entries of /etc/fstab (systemd skips them here)
DefaultDependencies=no
After=gpunode-lab-udev.service local-fs-pre.target
Before=local-fs.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/mount --all --test-opts no_netdev

[Install]
WantedBy=local-fs.target
"""

BOOT_UNIT = """\
[Unit]
Description=gpunode lab: boot id, link speed fault and kernel events of this node
After=systemd-journald.service
Before=ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/gpunode-lab-boot boot

[Install]
WantedBy=multi-user.target
"""

# The login a site gets on a cloud image: cloud-init's default user for Debian ("debian", in
# the groups below, `sudo: ["ALL=(ALL) NOPASSWD:ALL"]`, password locked: canonical/cloud-init
# config/cloud.cfg.tmpl, system_info.default_user), whose sudo rule cloud-init writes to
# /etc/sudoers.d/90-cloud-init-users. Not in the docker group: gpunode escalates with sudo.
# Root keeps a key login for the lab's own tools (`gpunode lab ssh`, the tests' inspection).
LOGIN_USER = "debian"
LOGIN_GROUPS = ("adm", "audio", "cdrom", "dialout", "dip", "floppy", "netdev", "plugdev", "sudo",
                "video")  # fmt: skip
SUDOERS_FILE = "/etc/sudoers.d/90-cloud-init-users"

SSHD_CONFIG = """\
# gpunode lab: key-only logins (the cloud image's sudo user, and root for the lab's own tools)
# with the per-node host key the lab installs.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

# A real kernel log starts empty at every boot; a volatile journal under /run (a tmpfs in
# the node) gives the lab's stand-in kernel log the same property.
JOURNALD_CONFIG = """\
[Journal]
Storage=volatile
RuntimeMaxUse=32M
"""

DPKG_EXCLUDES = """\
# gpunode lab: lean nodes, no documentation.
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
"""

SOURCES_LIST = f"""\
deb {MIRROR} {SUITE} main
deb {MIRROR} {SUITE}-updates main
deb {SECURITY_MIRROR} {SUITE}-security main
"""

# `docker import` changes (the stop signal is set per container: import cannot set it).
IMPORT_CHANGES: tuple[str, ...] = (
    'CMD ["/sbin/init"]',
    "ENV container=docker",
    f"LABEL org.opencontainers.image.title=gpunode-lab-node-{SUITE}",
    'LABEL org.opencontainers.image.description="gpunode lab node: Debian 12 with systemd"',
)

# Run inside the root filesystem (chroot) after the files are in place.
CUSTOMIZE_SCRIPT = f"""\
set -eu
systemctl mask {" ".join(MASKED_UNITS)} >/dev/null 2>&1
systemctl enable gpunode-lab-udev.service gpunode-lab-mounts.service \\
  gpunode-lab-boot.service ssh.service >/dev/null 2>&1
systemctl set-default multi-user.target >/dev/null 2>&1
systemctl disable {" ".join(SLURM_UNITS)} >/dev/null 2>&1
rm -f /etc/ssh/ssh_host_* /etc/munge/munge.key
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /var/log/apt/* /tmp/* \\
  /usr/share/doc/*/changelog* /usr/share/man/* /root/.bash_history
mkdir -p {paths.NODE_STATE_DIR} /root/.ssh
chmod 0700 /root/.ssh
groups=""
for group in {" ".join(LOGIN_GROUPS)}; do
  if getent group "$group" >/dev/null; then groups="$groups${{groups:+,}}$group"; fi
done
useradd --create-home --shell /bin/bash --comment Debian --groups "$groups" {LOGIN_USER}
passwd --lock {LOGIN_USER} >/dev/null
printf '# User rules for {LOGIN_USER}\\n{LOGIN_USER} ALL=(ALL) NOPASSWD:ALL\\n' > {SUDOERS_FILE}
chmod 0440 {SUDOERS_FILE}
visudo -cq
install -d -m 0700 -o {LOGIN_USER} -g {LOGIN_USER} /home/{LOGIN_USER}/.ssh
"""


@dataclass(frozen=True)
class NodeImage:
    """A built node image."""

    tag: str
    recipe_hash: str
    built: bool  # True when this call built it, False when it was already there


def _node_file(name: str) -> str:
    return resources.files("toolkit.lab").joinpath("node_files").joinpath(name).read_text()


def recipe_files() -> dict[str, str]:
    """Every file the recipe writes into the root filesystem: path -> content."""
    return {
        "/etc/apt/sources.list": SOURCES_LIST,
        "/etc/dpkg/dpkg.cfg.d/gpunode-lab-excludes": DPKG_EXCLUDES,
        "/etc/ssh/sshd_config.d/gpunode-lab.conf": SSHD_CONFIG,
        "/etc/systemd/journald.conf.d/gpunode-lab.conf": JOURNALD_CONFIG,
        "/etc/systemd/system/gpunode-lab-udev.service": UDEV_UNIT,
        "/etc/systemd/system/gpunode-lab-mounts.service": MOUNTS_UNIT,
        "/etc/systemd/system/gpunode-lab-boot.service": BOOT_UNIT,
        "/usr/local/sbin/gpunode-lab-udev": _node_file("gpunode-lab-udev.sh"),
        "/usr/local/sbin/gpunode-lab-boot": _node_file("gpunode-lab-boot.sh"),
    }


def recipe() -> dict[str, object]:
    """The full recipe of the node image; its hash is the image tag."""
    return {
        "suite": SUITE,
        "mirror": MIRROR,
        "variant": "minbase",
        "packages": sorted(PACKAGES),
        "masked": sorted(MASKED_UNITS),
        "files": recipe_files(),
        "customize": CUSTOMIZE_SCRIPT,
        "import": IMPORT_CHANGES,
    }


def recipe_hash() -> str:
    """A short, stable hash of the recipe (12 hex characters)."""
    blob = json.dumps(recipe(), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def image_tag() -> str:
    """The tag of the node image for the current recipe."""
    return f"{IMAGE_REPOSITORY}:{recipe_hash()}"


# The steps of a build, for the progress lines: "node image: debootstrap: ... (1/3, 40 s)".
BUILD_STEPS = ("debootstrap", "customise", "import")


def ensure_image(
    client: docker.DockerClient | None = None,
    progress: Progress | None = None,
    interval: float = HEARTBEAT_S,
) -> NodeImage:
    """Build the node image unless an image for the current recipe exists.

    Args:
        client: The engine (one is made when None).
        progress: Where a build says where it is, at least every ``interval`` seconds
            (:class:`~toolkit.progress.Heartbeat`; phase ``node image``).
        interval: Seconds of silence before a progress line.

    Returns:
        The image tag and whether it was built by this call.

    Raises:
        LabError: debootstrap, the customisation or the import failed.
    """
    client = client or docker_client()
    tag = image_tag()
    digest = recipe_hash()
    if image_exists(client, tag):
        return NodeImage(tag=tag, recipe_hash=digest, built=False)
    with build_lock():
        if image_exists(client, tag):
            return NodeImage(tag=tag, recipe_hash=digest, built=False)
        with Heartbeat(
            progress or _quiet, "node image", total=len(BUILD_STEPS), interval=interval
        ) as beat:
            _build(tag, digest, beat)
        _prune_old_images(client, tag)
    return NodeImage(tag=tag, recipe_hash=digest, built=True)


def _prune_old_images(client: docker.DockerClient, keep: str) -> None:
    """Remove node images of older recipes that no container uses any more."""
    for old in client.images.list(filters={"label": paths.IMAGE_LABEL}):
        if keep in old.tags:
            continue
        try:
            client.images.remove(old.id, noprune=False)
        except docker.errors.APIError:
            continue  # still used by a lab's container: it goes with that lab


def _quiet(_message: str) -> None:
    return None


def debootstrap_stage(line: str) -> str | None:
    """The stage a line of debootstrap's output names (its ``I:`` lines: ``Retrieving
    packages``, ``Extracting zlib1g...``, ``Configuring the base system...``), else None."""
    if not line.startswith("I: "):
        return None
    return line[3:].strip().rstrip(".") or None


def debootstrap(
    rootfs: Path, packages: tuple[str, ...], stage: Callable[[str], None] | None = None
) -> None:
    """A minbase bookworm root filesystem with ``packages``, from the shared .deb cache.

    Args:
        rootfs: Where the root filesystem is made.
        packages: Packages beyond minbase.
        stage: Called with each stage debootstrap reports (:func:`debootstrap_stage`).

    Raises:
        LabError: not root, or debootstrap failed.
    """
    if os.geteuid() != 0:
        raise LabError("building a root filesystem needs root (debootstrap and chroot)")
    debs = paths.cache_dir() / "debootstrap-debs"
    debs.mkdir(parents=True, exist_ok=True)

    def on_line(line: str) -> None:
        found = debootstrap_stage(line)
        if found is not None and stage is not None:
            stage(found)

    run_lines(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            f"--cache-dir={debs}",
            SUITE,
            str(rootfs),
            MIRROR,
        ],
        on_line,
        timeout=1800,
    )


def debootstrap_beat(beat: Heartbeat) -> Callable[[str], None]:
    """A debootstrap ``stage`` callback that tells ``beat`` the stage (step 1 of the build)."""
    return lambda found: beat.update(f"debootstrap: {found}")


def _build(tag: str, digest: str, beat: Heartbeat | None = None) -> None:
    # Not entered, a heartbeat never prints: a caller without one builds quietly.
    beat = beat or Heartbeat(_quiet, "node image")
    cache = paths.cache_dir()
    with tempfile.TemporaryDirectory(prefix="gpunode-lab-image-", dir=cache) as tmp:
        rootfs = Path(tmp) / "rootfs"
        beat.update("debootstrap", done=0)
        debootstrap(rootfs, PACKAGES, debootstrap_beat(beat))
        beat.update("customising the root filesystem", done=1)
        for target, content in recipe_files().items():
            path = rootfs / target.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            path.chmod(0o755 if target.startswith("/usr/local/sbin/") else 0o644)
        run(["chroot", str(rootfs), "/bin/sh", "-c", CUSTOMIZE_SCRIPT], timeout=300)
        beat.update("docker import", done=2)
        import_rootfs(rootfs, tag, [*IMPORT_CHANGES, f"LABEL {paths.IMAGE_LABEL}={digest}"])
        # debootstrap leaves bind-mount points empty, but be sure nothing is still mounted
        # below the root filesystem before the temporary directory is removed.
        _assert_nothing_mounted(rootfs)


def _assert_nothing_mounted(rootfs: Path) -> None:
    mounts = Path("/proc/self/mounts").read_text().split("\n")
    inside = [line.split()[1] for line in mounts if line and str(rootfs) in line.split()[1]]
    if inside:
        raise LabError(f"mounts left below the image root filesystem: {', '.join(inside)}")
