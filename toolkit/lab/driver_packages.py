"""The lab repository's driver packages: the releases (``DRIVERS``, with sources), the parts
of one build as data (``DRIVER_PARTS``, ``KERNEL_MODULES``) and the phases that turn a release
into packages with NVIDIA's debian12 names and dependency shapes (exact ``(= V-1)`` pins between
the parts of one build, ``Conflicts``/``Replaces`` between branches so that a 550 -> 580 swap is
a plain ``apt-get install``); with them what is built per driver branch: Fabric Manager, NSCQ,
NVLSM and IMEX.

See docs/architecture.md, "Package names", for the names the roles install.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from toolkit.lab import paths
from toolkit.lab.package_spec import (
    LIBDIR,
    FileSpec,
    PackageSpec,
    nvidia_smi_files,
    render,
    script,
)
from toolkit.stack.catalog import catalog as gpu_catalog


@dataclass(frozen=True)
class DriverRelease:
    """One data-centre driver release.

    Attributes:
        version: The driver version (apt version is ``version-1``).
        branch: The branch (major version).
        cuda: The highest CUDA version this driver supports (what ``nvidia-smi`` prints).
        upgrade: An "unattended upgrade" release, offered so that drift can be provoked.
        build_date: The date the kernel module reports in ``/proc/driver/nvidia/version``.
    """

    version: str
    branch: str
    cuda: str
    upgrade: bool
    build_date: str

    @property
    def apt_version(self) -> str:
        return f"{self.version}-1"


# Source: NVIDIA data-centre driver release notes
# (https://docs.nvidia.com/datacenter/tesla/index.html): 550.127.05 (Oct 2024) and 550.144.03
# (Jan 2025) on R550; 580.95.05 (Oct 2025, CUDA 13.0 U2) and 580.105.08 (Nov 2025) on R580.
# Max CUDA: R550 -> 12.4, R580 -> 13.0 (CUDA release notes, table 3).
# 580.159.03 is the R580 release of NVIDIA's May 2026 driver security bulletin, the one
# inventories/sample pins (toolkit/stack/security.yml); its build date is the one public
# /proc/driver/nvidia/version captures print ("NVIDIA UNIX Open Kernel Module for x86_64
# 580.159.03  Release Build  (dvs-builder@U22-I3-AM27-29-6)  Fri Apr 24 06:03:03 UTC 2026").
DRIVERS: tuple[DriverRelease, ...] = (
    DriverRelease("550.127.05", "550", "12.4", False, "Tue Sep 24 12:43:38 UTC 2024"),
    DriverRelease("550.144.03", "550", "12.4", True, "Mon Dec 30 17:10:10 UTC 2024"),
    DriverRelease("580.95.05", "580", "13.0", False, "Fri Sep 26 02:03:39 UTC 2025"),
    DriverRelease("580.105.08", "580", "13.0", True, "Tue Nov  4 04:22:31 UTC 2025"),
    DriverRelease("580.159.03", "580", "13.0", False, "Fri Apr 24 06:03:03 UTC 2026"),
)


# NVLink Subnet Manager releases (package `nvlsm`, one name on every branch, date versions).
# Source: nvlsm_2025.06.10-1_amd64.deb in NVIDIA's compute/cuda/repos/ubuntu2404/x86_64, as public
# install notes download it (naming.yml `nvlsm`). Its daemon is /opt/nvidia/nvlsm/sbin/nvlsm:
# Fabric Manager aborts on a fourth-generation NVSwitch system with "/opt/nvidia/nvlsm/sbin/nvlsm
# does not exist ... install nvlsm package" (quoted in public install notes).
NVLSM_RELEASES: tuple[str, ...] = ("2025.06.10",)
NVLSM_DAEMON = "/opt/nvidia/nvlsm/sbin/nvlsm"

# The major number the emulated module registers its IMEX channels under in the node's
# /proc/devices (`nvidia-caps-imex-channels`; the module stand-in, nvidia-module-load.sh.j2).
# A real one is dynamic; this one is from the kernel's extended dynamic range (fs/char_dev.c,
# CHRDEV_MAJOR_DYN_EXT_START 511 down to CHRDEV_MAJOR_DYN_EXT_END 384).
IMEX_CHANNELS_MAJOR = 510


def _exclusive(family: list[str], name: str) -> tuple[str, ...]:
    """The other members of a family of packages that cannot be installed together."""
    return tuple(sorted(other for other in family if other != name))


def _driver_names(release: DriverRelease) -> dict[str, str]:
    """The names of one driver's packages in NVIDIA's debian12 repository (Debian style).

    Source: NVIDIA's debian12 CUDA repository as public install scripts use it
    (``nvidia-driver``, ``nvidia-kernel-dkms``, ``nvidia-kernel-support``,
    ``firmware-nvidia-gsp``, ``libnvidia-ml1``, ``libcuda1``, ``nvidia-driver-cuda``,
    ``nvidia-driver-libs``, ``nvidia-smi``, all at ``V-1``, after ``nvidia-driver-pinning-*``),
    the open module as ``nvidia-kernel-open-dkms`` (NVIDIA's name; Debian's archive says
    ``nvidia-open-kernel-dkms``), and Fabric Manager as in the Ubuntu repositories
    (branch-suffixed before R580). The same rules, with their sources, are data in
    ``toolkit/stack/naming.yml``.
    """
    b = release.branch
    return {
        "fabricmanager": f"nvidia-fabricmanager-{b}" if int(b) < 580 else "nvidia-fabricmanager",
        "nscq": f"libnvidia-nscq-{b}" if int(b) < 580 else "libnvidia-nscq",
        "cuda_drivers": f"cuda-drivers-{b}" if int(b) <= 580 else "cuda-drivers",
    }


def _families() -> dict[str, list[str]]:
    """Branch-suffixed names per role across every branch: they conflict with each other."""
    families: dict[str, set[str]] = {}
    for release in DRIVERS:
        for role, name in _driver_names(release).items():
            families.setdefault(role, set()).add(name)
    return {key: sorted(names) for key, names in families.items()}


# Every driver package name of the debian12 shape (the version-lock package pins them all).
DEBIAN_DRIVER_NAMES = (
    "nvidia-alternative",
    "libgl1-nvidia-glvnd-glx",
    "nvidia-egl-icd",
    "nvidia-driver",
    "nvidia-kernel-dkms",
    "nvidia-kernel-open-dkms",
    "nvidia-kernel-support",
    "firmware-nvidia-gsp",
    "nvidia-smi",
    "libnvidia-ml1",
    "libcuda1",
    "nvidia-driver-cuda",
    "nvidia-driver-libs",
    "nvidia-persistenced",
    "nvidia-open",
)


@dataclass(frozen=True)
class _DriverBuild:
    """The values one driver release fills into its packages' fields."""

    release: DriverRelease
    names: dict[str, str]  # role -> this branch's name (``_driver_names``)
    families: dict[str, list[str]]  # role -> every branch's name (``_families``)

    @property
    def values(self) -> dict[str, str]:
        """The ``{key}`` values of the relation templates (``DRIVER_PARTS``)."""
        v, av, b = self.release.version, self.release.apt_version, self.release.branch
        pin = f"(= {av})"
        return {
            "v": v,
            "b": b,
            "pin": pin,
            "at_least": f"(>= {v})",
            "branch_or_later": f"(>= {b})",
            "alternative": f"nvidia-alternative {pin}",
            "any_module": f"nvidia-kernel-dkms {pin} | nvidia-kernel-{v} | "
            f"nvidia-kernel-open-dkms {pin}",
            "cuda_drivers": self.names["cuda_drivers"],
        }

    def marker(self, lib: str) -> bytes:
        """The content of a stand-in library file."""
        return (
            f"gpunode lab stand-in for {lib} {self.release.version}: not a real library; "
            "the emulated GPUs are read by /usr/bin/nvidia-smi.\n"
        ).encode()

    def exclusive(self, role: str, name: str) -> tuple[str, ...]:
        """The other branches' packages of one role, which this one conflicts with."""
        return _exclusive(self.families[role], name)


@dataclass(frozen=True)
class DriverPart:
    """One package of a driver build, its fields as templates of the build's values
    (``{v}``, ``{pin}``, ``{alternative}``, ...); the files of those that carry any are added
    by the builder's phases."""

    name: str
    description: str
    section: str = "non-free/libs"
    source: str = "nvidia-graphics-drivers"
    depends: tuple[str, ...] = ()
    recommends: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    min_branch: int = 0  # built for branches from this one on

    def spec(self, build: _DriverBuild, files: tuple[FileSpec, ...] = ()) -> PackageSpec:
        """The package of this part for one build."""
        values = build.values

        def fill(items: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(item.format(**values) for item in items)

        return PackageSpec(
            name=self.name.format(**values),
            version=build.release.apt_version,
            source=self.source,
            section=self.section,
            description=self.description.format(**values),
            depends=fill(self.depends),
            recommends=fill(self.recommends),
            provides=fill(self.provides),
            conflicts=fill(self.conflicts),
            files=files,
        )


# The parts of one driver build and their relations. They follow Debian's own packaging of
# these packages, which NVIDIA's debian12 repository carries under the same names but one: the
# open module is nvidia-kernel-open-dkms there (Debian: nvidia-open-kernel-dkms). Sources: the
# Packages index of deb.debian.org/debian bookworm non-free and non-free-firmware (amd64),
# source package nvidia-graphics-drivers 535.261.03-1, and apt's report on NVIDIA's debian12
# repository (tests/data/real/nvidia-debian12-apt-driver-depends.txt, SOURCES.md):
# - the parts of one build pin each other exactly through `nvidia-alternative (= V-1)`;
# - the kernel module is reached through alternatives: `nvidia-kernel-dkms (= V-1) |
#   nvidia-kernel-V | nvidia-kernel-open-dkms (= V-1)` (NVIDIA's repository; Debian's
#   third alternative is the virtual nvidia-open-kernel-V), and needs
#   `firmware-nvidia-gsp (= V) | firmware-nvidia-gsp-V` (the firmware provides itself at
#   the upstream version) and `nvidia-kernel-support--v1`;
# - what only needs "this branch or later" uses ranges: `nvidia-persistenced (>= 535)`;
# - Recommends (installed by default) reach the module, nvidia-smi and persistenced.
# Left out, because the lab's repository carries NVIDIA's packages only: relations on
# Debian's own packages (libc6, dkms, glx-alternative-nvidia, nvidia-kernel-common,
# nvidia-modprobe, nvidia-support) and the X/Vulkan/VDPAU parts of nvidia-driver.
# NVIDIA-only packages (nvidia-driver-cuda, the meta-packages) are modelled on these.
DRIVER_PARTS: tuple[DriverPart, ...] = (
    DriverPart(
        "firmware-nvidia-gsp",
        "NVIDIA GSP firmware\n The GPU System Processor firmware of driver {v}.",
        section="non-free-firmware/kernel",
        provides=("firmware-nvidia-gsp (= {v})", "firmware-nvidia-gsp-{v}"),
    ),
    DriverPart(
        "nvidia-alternative",
        "allows the selection of NVIDIA as GLX provider\n Driver {v}.",
        provides=(
            "nvidia-alternative--kmod-alias",
            "nvidia-alternative-{v}",
            "nvidia-alternative-any",
        ),
    ),
    DriverPart(
        "libgl1-nvidia-glvnd-glx",
        "NVIDIA binary OpenGL/GLX library (GLVND variant)\n Driver {v}.",
        depends=("{alternative}",),
    ),
    DriverPart(
        "nvidia-egl-icd",
        "NVIDIA EGL installable client driver (ICD)\n Driver {v}.",
        depends=("{alternative}",),
    ),
    DriverPart(
        "nvidia-kernel-support",
        "NVIDIA binary kernel module support files\n Driver {v}.",
        section="non-free/kernel",
        depends=("{alternative}", "nvidia-alternative--kmod-alias"),
        provides=("nvidia-kernel-support--v1", "nvidia-kernel-support-any"),
    ),
    DriverPart(
        "libnvidia-ml1",
        "NVIDIA Management Library (NVML) runtime library\n Driver {v}.",
        depends=("{alternative}",),
        provides=("libnvidia-ml.so.1 (= {v})",),
    ),
    DriverPart(
        "libcuda1",
        "NVIDIA CUDA Driver Library\n libcuda of driver {v}.",
        depends=("{alternative}",),
        recommends=("{any_module}", "nvidia-smi", "nvidia-persistenced {branch_or_later}"),
        provides=("libcuda.so.1 (= {v})", "libcuda1-any"),
    ),
    DriverPart(
        "nvidia-smi",
        "NVIDIA System Management Interface\n nvidia-smi of driver {v}.",
        section="non-free/utils",
        # python3: the lab's nvidia-smi is a Python stand-in.
        depends=("{alternative}", "libnvidia-ml1 {pin}", "python3"),
        recommends=("{any_module}",),
    ),
    DriverPart(
        "nvidia-driver-libs",
        "NVIDIA metapackage (libraries)\n The user-space libraries of {v}.",
        depends=("libgl1-nvidia-glvnd-glx {pin}", "nvidia-egl-icd {pin}"),
    ),
    DriverPart(
        "nvidia-driver-cuda",
        "NVIDIA driver CUDA integration components\n Driver {v}.",
        depends=("libcuda1 {pin}", "nvidia-smi {pin}", "nvidia-persistenced {branch_or_later}"),
    ),
    DriverPart(
        "nvidia-driver",
        "NVIDIA metapackage\n Driver {v} with either kernel module flavour.",
        section="non-free/metapackages",
        depends=("nvidia-driver-libs {pin}", "{alternative}", "{any_module}"),
        recommends=("nvidia-persistenced {branch_or_later}",),
    ),
    DriverPart(
        "nvidia-persistenced",
        "NVIDIA Persistence Daemon\n Keeps the GPUs initialised while idle.",
        section="non-free/utils",
        source="nvidia-persistenced",
        depends=("libnvidia-ml1 {at_least}",),
    ),
    DriverPart(
        "{cuda_drivers}",
        "CUDA Driver meta-package, branch-specific\n Driver {v} (proprietary).",
        section="non-free/metapackages",
        source="cuda-drivers",
        depends=("nvidia-driver {pin}", "nvidia-kernel-dkms {pin}"),
    ),
    DriverPart(
        "nvidia-open",
        "NVIDIA open kernel module driver meta-package\n Driver {v}.",
        section="non-free/metapackages",
        source="nvidia-open",
        depends=("nvidia-driver {pin}", "nvidia-kernel-open-dkms {pin}"),
        min_branch=580,
    ),
)

# The kernel module packages, one per flavour: (flavour, package, the other flavour's package,
# the first words of /proc/driver/nvidia/version, which differ between the two).
KERNEL_MODULES: tuple[tuple[str, str, str, str], ...] = (
    (
        "open",
        "nvidia-kernel-open-dkms",
        "nvidia-kernel-dkms",
        "NVIDIA UNIX Open Kernel Module for x86_64",
    ),
    (
        "proprietary",
        "nvidia-kernel-dkms",
        "nvidia-kernel-open-dkms",
        "NVIDIA UNIX x86_64 Kernel Module",
    ),
)


def _driver_files(build: _DriverBuild) -> dict[str, tuple[FileSpec, ...]]:
    """The files of the parts that carry any: libraries, nvidia-smi, module support files and
    the persistence daemon."""
    release = build.release
    v = release.version
    nvml_major_minor = ".".join(v.split(".")[:2])
    return {
        "firmware-nvidia-gsp": (
            FileSpec(f"/lib/firmware/nvidia/{v}/gsp_ga10x.bin", build.marker("gsp_ga10x.bin")),
        ),
        "nvidia-kernel-support": (
            FileSpec(
                "/usr/lib/modprobe.d/blacklist-nvidia-nouveau.conf",
                render("blacklist-nvidia-nouveau.conf.j2").encode(),
            ),
            FileSpec("/usr/lib/modprobe.d/nvidia-kms.conf", render("nvidia-kms.conf.j2").encode()),
        ),
        "libnvidia-ml1": (
            FileSpec(f"{LIBDIR}/libnvidia-ml.so.{v}", build.marker("libnvidia-ml")),
            FileSpec(f"{LIBDIR}/libnvidia-ml.so.1", link=f"libnvidia-ml.so.{v}"),
        ),
        "libcuda1": (
            FileSpec(f"{LIBDIR}/libcuda.so.{v}", build.marker("libcuda")),
            FileSpec(f"{LIBDIR}/libcuda.so.1", link=f"libcuda.so.{v}"),
            FileSpec(f"{LIBDIR}/libcuda.so", link="libcuda.so.1"),
        ),
        "nvidia-smi": nvidia_smi_files(v, release.cuda, nvml_major_minor),
        "nvidia-persistenced": (
            FileSpec(
                "/usr/bin/nvidia-persistenced",
                render("nvidia-persistenced.sh.j2", version=v).encode(),
                0o755,
            ),
            FileSpec(
                "/lib/systemd/system/nvidia-persistenced.service",
                render("nvidia-persistenced.service.j2").encode(),
            ),
        ),
    }


def _driver_parts(build: _DriverBuild) -> list[PackageSpec]:
    """Phase 1: the parts of ``DRIVER_PARTS`` this branch has, with their files."""
    files = _driver_files(build)
    out = []
    for part in DRIVER_PARTS:
        if int(build.release.branch) < part.min_branch:
            continue
        spec = part.spec(build, files.get(part.name, ()))
        if part.name == "nvidia-persistenced":
            spec = replace(spec, scripts=(("postinst", render("persistenced.postinst.j2")),))
        out.append(spec)
    return out


def _kernel_modules(build: _DriverBuild) -> list[PackageSpec]:
    """Phase 2: the kernel module in both flavours; the lab emulates loading it."""
    release = build.release
    v, values = release.version, build.values
    out = []
    for flavour, dkms, other, nvrm in KERNEL_MODULES:
        module_kind = "Open Kernel Module" if flavour == "open" else "Kernel Module"
        rendered = {
            "version": v,
            "flavour": flavour,
            "nvrm": nvrm,
            "build_date": release.build_date,
            "imex_major": str(IMEX_CHANNELS_MAJOR),
        }
        # The proprietary module also provides nvidia-kernel-V (Debian's packaging); the
        # open one is reached by its own name (see any_module).
        kernel_provides = (f"nvidia-kernel-{v}",) if flavour == "proprietary" else ()
        out.append(
            PackageSpec(
                name=dkms,
                version=release.apt_version,
                source="nvidia-graphics-drivers",
                section="non-free/kernel",
                description=(
                    f"NVIDIA binary kernel module DKMS source ({flavour})\n"
                    f" The {module_kind.lower()} of driver {v}; the lab emulates loading it."
                ),
                depends=(
                    f"firmware-nvidia-gsp (= {v}) | firmware-nvidia-gsp-{v}",
                    "nvidia-kernel-support--v1",
                ),
                recommends=(f"nvidia-driver {values['at_least']} | libcuda1 {values['at_least']}",),
                conflicts=(other,),
                replaces=(other,),
                provides=(*kernel_provides, f"{dkms}-any (= {v})"),
                files=(
                    FileSpec(
                        "/usr/lib/gpunode-lab/nvidia-module-load",
                        render("nvidia-module-load.sh.j2", **rendered).encode(),
                        0o755,
                    ),
                    FileSpec(
                        "/lib/systemd/system/gpunode-lab-nvidia-module.service",
                        render("gpunode-lab-nvidia-module.service.j2", **rendered).encode(),
                    ),
                    FileSpec(
                        f"/usr/src/nvidia-{v}/dkms.conf",
                        render("dkms.conf.j2", **rendered).encode(),
                    ),
                ),
                scripts=(("postinst", render("dkms.postinst.j2", **rendered)),),
            )
        )
    return out


def _driver_pinning(build: _DriverBuild) -> list[PackageSpec]:
    """Phase 3: from R580, the package whose apt preferences pin every driver package."""
    release = build.release
    v, av = release.version, release.apt_version
    if int(release.branch) < 580:
        return []
    pinned = sorted({*DEBIAN_DRIVER_NAMES, *build.names.values(), "cuda-drivers"})
    preferences = render("pinning.pref.j2", packages=" ".join(pinned), apt_version=av)
    return [
        PackageSpec(
            name=f"nvidia-driver-pinning-{v}",
            version=av,
            source="nvidia-driver-pinning",
            section="non-free/admin",
            architecture="all",
            description=(
                f"Pins the NVIDIA driver packages to {v}\n"
                " An apt preferences file; install it before the driver."
            ),
            conflicts=("nvidia-driver-pinning",),
            provides=("nvidia-driver-pinning",),
            files=(
                FileSpec(
                    f"/etc/apt/preferences.d/nvidia-driver-pinning-{v}",
                    preferences.encode(),
                    conffile=True,
                ),
            ),
        )
    ]


def _fabric_packages(build: _DriverBuild) -> list[PackageSpec]:
    """Phase 4: Fabric Manager and NSCQ at the driver's version, branch-suffixed before R580
    (and then exclusive of the other branches')."""
    v, av, b = build.release.version, build.release.apt_version, build.release.branch
    fm, nscq = build.names["fabricmanager"], build.names["nscq"]
    fm_script = render(
        "nv_fabricmanager.py",
        version=v,
        nvlsm_gpus="|".join(_nvlsm_gpu_names()),
        nvlsm=NVLSM_DAEMON,
        module_dir=paths.MODULE_DIR,
    )
    return [
        PackageSpec(
            name=fm,
            version=av,
            source=f"fabricmanager-{b}",
            section="multiverse/utils",
            description=(
                "Fabric Manager for NVSwitch based systems\n"
                f" Version {v}; it must equal the loaded driver's version."
            ),
            depends=("python3",),
            conflicts=build.exclusive("fabricmanager", fm),
            replaces=build.exclusive("fabricmanager", fm),
            files=(
                FileSpec("/usr/bin/nv-fabricmanager", script(fm_script), 0o755),
                FileSpec(
                    "/usr/share/nvidia/nvswitch/fabricmanager.cfg",
                    render("fabricmanager.cfg.j2").encode(),
                    conffile=False,
                ),
                FileSpec(
                    "/lib/systemd/system/nvidia-fabricmanager.service",
                    render("nvidia-fabricmanager.service.j2").encode(),
                ),
            ),
        ),
        PackageSpec(
            name=nscq,
            version=av,
            source=f"libnvidia-nscq-{b}",
            description=f"NVSwitch Configuration and Query library\n Version {v}.",
            conflicts=build.exclusive("nscq", nscq),
            replaces=build.exclusive("nscq", nscq),
            files=(
                FileSpec(f"{LIBDIR}/libnvidia-nscq.so.{v}", build.marker("libnvidia-nscq")),
                FileSpec(f"{LIBDIR}/libnvidia-nscq.so.2", link=f"libnvidia-nscq.so.{v}"),
            ),
        ),
    ]


_DRIVER_PHASES = (_driver_parts, _kernel_modules, _driver_pinning, _fabric_packages)


def _driver_packages(release: DriverRelease, families: dict[str, list[str]]) -> list[PackageSpec]:
    """Every package of one driver release: its parts, kernel modules, pinning and fabric."""
    build = _DriverBuild(release, _driver_names(release), families)
    return [spec for phase in _DRIVER_PHASES for spec in phase(build)]


def _imex_name(branch: str) -> str:
    """NVIDIA's driver container's name: nvidia-imex-<branch> for R550-R579, nvidia-imex from
    R580 (naming.yml ``imex``)."""
    return f"nvidia-imex-{branch}" if int(branch) < 580 else "nvidia-imex"


def _imex_package(release: DriverRelease) -> PackageSpec:
    """The IMEX daemon built with one driver (the driver's version): its daemon and the
    systemd unit nvidia-imex (NVIDIA IMEX guide, "Getting Started")."""
    daemon = render("nvidia_imex.py", version=release.version)
    name = _imex_name(release.branch)
    others = sorted({_imex_name(d.branch) for d in DRIVERS if int(d.branch) >= 550} - {name})
    return PackageSpec(
        name=name,
        version=release.apt_version,
        source=name,
        # The branches' daemons are one file: one at a time, as with Fabric Manager.
        conflicts=tuple(others),
        replaces=tuple(others),
        section="multiverse/utils",
        description=(
            "NVIDIA IMEX service\n"
            f" Version {release.version}: GPU memory export and import across the nodes of an"
            " NVLink domain."
        ),
        depends=("python3",),
        files=(
            FileSpec("/usr/bin/nvidia-imex", script(daemon), 0o755),
            FileSpec(
                "/lib/systemd/system/nvidia-imex.service",
                render("nvidia-imex.service.j2").encode(),
            ),
        ),
    )


def _nvsdm_package(release: DriverRelease) -> PackageSpec:
    """libnvsdm, the NVSwitch device monitoring library installed beside NVLSM at the driver's
    version (libnvsdm from R580, libnvsdm-<branch> for R570-R579; naming.yml ``nvsdm``)."""
    b, v = release.branch, release.version
    name = f"libnvsdm-{b}" if int(b) < 580 else "libnvsdm"
    return PackageSpec(
        name=name,
        version=release.apt_version,
        source=name,
        description=f"NVSwitch Device Monitoring library\n Version {v}.",
        files=(
            FileSpec(f"{LIBDIR}/libnvsdm.so.{v}", f"gpunode lab stand-in libnvsdm {v}\n".encode()),
            FileSpec(f"{LIBDIR}/libnvsdm.so.1", link=f"libnvsdm.so.{v}"),
        ),
    )


def _nvlsm_gpu_names() -> list[str]:
    """The names nvidia-smi prints for the GPUs whose NVSwitch generation needs NVLSM."""
    return sorted(name for gpu in gpu_catalog() if gpu.nvlsm for name in gpu.names)


def _nvlsm_package(version: str) -> PackageSpec:
    """NVLSM: its daemon, which Fabric Manager's start-up looks for (it starts it itself)."""
    daemon = render("nvlsm.py", version=version)
    return PackageSpec(
        name="nvlsm",
        version=f"{version}-1",
        section="multiverse/utils",
        description=(
            "NVLink Subnet Manager\n"
            " Programs NVSwitches and NVLinks of fourth-generation NVSwitch systems; Fabric"
            " Manager starts it."
        ),
        depends=("python3",),
        files=(FileSpec(NVLSM_DAEMON, script(daemon), 0o755),),
    )


def packages() -> list[PackageSpec]:
    """Every package built per driver release: each build's, NVLSM's and IMEX's."""
    families = _families()
    out = [spec for driver in DRIVERS for spec in _driver_packages(driver, families)]
    out.extend(_nvlsm_package(version) for version in NVLSM_RELEASES)
    # IMEX packages exist for the branches naming.yml names (from 550), libnvsdm from 570.
    out.extend(_imex_package(d) for d in DRIVERS if int(d.branch) >= 550)
    out.extend(_nvsdm_package(d) for d in DRIVERS if int(d.branch) >= 570)
    return out
