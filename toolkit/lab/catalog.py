"""The stand-in packages of the lab repository: NVIDIA's names, versions and dependency shapes.

The releases are data (``DRIVERS``, ``CUDA_TOOLKITS``, ``NCCL_BUILDS``,
``CONTAINER_TOOLKITS``) with their sources; :func:`packages` turns them into package
specifications with the dependency shapes of NVIDIA's packages (exact ``(= V-1)`` pins
between the parts of one driver, ``Conflicts``/``Replaces`` between branches so that a
550 -> 580 swap is a plain ``apt-get install``). The package contents (the emulating
``nvidia-smi``, daemons, unit files) are rendered from ``toolkit/lab/standins/``.

See docs/architecture.md, "Package names", for the names the roles install.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import jinja2

from toolkit.stack.catalog import catalog as gpu_catalog

STANDINS = Path(__file__).with_name("standins")

# Every package's maintainer field: the stand-ins are not NVIDIA's packages.
MAINTAINER = "gpunode lab <lab@gpunode.invalid>"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
# Packages outside this repository that stand-ins may depend on (the node image has them).
EXTERNAL_DEPENDS = frozenset({"python3"})


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


@dataclass(frozen=True)
class CudaRelease:
    """One CUDA toolkit release (``cuda-toolkit-X-Y`` at ``X.Y.Z-1``)."""

    version: str  # X.Y.Z
    cudart: str  # cuda_cudart component version (version.json)
    nvcc: str  # cuda_nvcc component version (`nvcc --version` "V..." line)
    nvcc_built: str  # `nvcc --version` "Built on" line
    nvcc_build: str  # `nvcc --version` "Build" line
    copyright_year: str

    @property
    def major_minor(self) -> str:
        return ".".join(self.version.split(".")[:2])

    @property
    def package(self) -> str:
        return "cuda-toolkit-" + self.major_minor.replace(".", "-")

    @property
    def apt_version(self) -> str:
        return f"{self.version}-1"


# Source: /usr/local/cuda-X.Y/version.json and `nvcc --version` of the CUDA 12.4 Update 1
# and 12.8 Update 1 runfile/deb installers (CUDA release notes, component versions table).
CUDA_TOOLKITS: tuple[CudaRelease, ...] = (
    CudaRelease(
        "12.4.1",
        "12.4.127",
        "12.4.131",
        "Thu_Mar_28_02:18:24_PDT_2024",
        "cuda_12.4.r12.4/compiler.34097967_0",
        "2024",
    ),
    CudaRelease(
        "12.8.1",
        "12.8.90",
        "12.8.93",
        "Fri_Feb_21_20:23:50_PST_2025",
        "cuda_12.8.r12.8/compiler.35583870_0",
        "2025",
    ),
)


@dataclass(frozen=True)
class NcclBuild:
    """One NCCL build for one CUDA minor (``libnccl2`` at ``2.A.B-1+cudaX.Y``)."""

    version: str
    cuda: str

    @property
    def apt_version(self) -> str:
        return f"{self.version}-1+cuda{self.cuda}"


# Source: NVIDIA CUDA apt repository (debian12/x86_64) package index: libnccl2 builds.
NCCL_BUILDS: tuple[NcclBuild, ...] = (NcclBuild("2.21.5", "12.4"), NcclBuild("2.26.2", "12.8"))


@dataclass(frozen=True)
class ContainerToolkitRelease:
    """One NVIDIA container toolkit release (four packages at ``T-1``)."""

    version: str
    commit: str


# Source: https://github.com/NVIDIA/nvidia-container-toolkit/releases (v1.16.2, v1.17.8,
# v1.19.1: NVIDIA/nvidia-container-toolkit PR #1843 "Final updates to CHANGELOG for v1.19.1
# release"; its commit as a public `nvidia-ctk --version` capture prints it). 1.19.1 is the
# version inventories/sample pins (CVE-2026-24260, toolkit/stack/security.yml).
CONTAINER_TOOLKITS: tuple[ContainerToolkitRelease, ...] = (
    ContainerToolkitRelease("1.16.2", "a5a5833c14a15fd9c86bcece85d5ec6621b65652"),
    ContainerToolkitRelease("1.17.8", "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d"),
    ContainerToolkitRelease("1.19.1", "b18fc6ded64aae8d69a10e1fe49d4e0e8571fc9b"),
)


# NVLink Subnet Manager releases (package `nvlsm`, one name on every branch, date versions).
# Source: nvlsm_2025.06.10-1_amd64.deb in NVIDIA's compute/cuda/repos/ubuntu2404/x86_64, as public
# install notes download it (naming.yml `nvlsm`). Its daemon is /opt/nvidia/nvlsm/sbin/nvlsm:
# Fabric Manager aborts on a fourth-generation NVSwitch system with "/opt/nvidia/nvlsm/sbin/nvlsm
# does not exist ... install nvlsm package" (quoted in public install notes).
NVLSM_RELEASES: tuple[str, ...] = ("2025.06.10",)
NVLSM_DAEMON = "/opt/nvidia/nvlsm/sbin/nvlsm"


@dataclass(frozen=True)
class FileSpec:
    """One file (or symlink) in a package."""

    path: str
    content: bytes = b""
    mode: int = 0o644
    link: str | None = None  # a symlink to this target instead of a file
    conffile: bool = False


@dataclass(frozen=True)
class PackageSpec:
    """One stand-in package: control fields, files and maintainer scripts."""

    name: str
    version: str
    description: str
    section: str = "multiverse/libs"
    architecture: str = "amd64"
    source: str = ""
    depends: tuple[str, ...] = ()
    recommends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    replaces: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    files: tuple[FileSpec, ...] = ()
    scripts: tuple[tuple[str, str], ...] = ()  # (postinst|prerm|postrm|preinst, text)
    repository: str = "cuda"  # "cuda" or "container-toolkit": which flat repo carries it

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.architecture}.deb"

    def control(self) -> str:
        """The ``DEBIAN/control`` text."""
        size_kib = max(1, sum(len(f.content) for f in self.files) // 1024)
        fields = [
            ("Package", self.name),
            ("Source", self.source or self.name),
            ("Version", self.version),
            ("Architecture", self.architecture),
            ("Maintainer", MAINTAINER),
            ("Installed-Size", str(size_kib)),
            ("Depends", ", ".join(self.depends)),
            ("Recommends", ", ".join(self.recommends)),
            ("Conflicts", ", ".join(self.conflicts)),
            ("Replaces", ", ".join(self.replaces)),
            ("Provides", ", ".join(self.provides)),
            ("Section", self.section),
            ("Priority", "optional"),
        ]
        lines = [f"{key}: {value}" for key, value in fields if value]
        summary, _, body = self.description.partition("\n")
        lines.append(f"Description: {summary}")
        lines.extend(f" {line.strip()}" if line.strip() else " ." for line in body.splitlines())
        lines.append(" This is a gpunode lab stand-in: it emulates the package without hardware.")
        return "\n".join(lines) + "\n"


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(STANDINS)),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)


def render(name: str, **values: str) -> str:
    """Render one stand-in source.

    ``*.j2`` files are Jinja templates; ``*.py`` scripts carry ``@KEY@`` markers (so that they
    stay valid Python for the linters) that are replaced by the upper-cased keys of
    ``values``. Every marker must be filled.

    Raises:
        ValueError: A marker was left unfilled.
    """
    if name.endswith(".j2"):
        return _ENV.get_template(name).render(**values)
    text = (STANDINS / name).read_text()
    for key, value in values.items():
        text = text.replace(f"@{key.upper()}@", value)
    leftover = sorted(set(re.findall(r"@[A-Z][A-Z_]*@", text)))
    if leftover:
        raise ValueError(f"stand-in {name}: markers left unfilled: {', '.join(leftover)}")
    return text


def source_files() -> list[Path]:
    """Every stand-in source, for the repository's cache key."""
    return sorted(p for p in STANDINS.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _script(text: str) -> bytes:
    return text.encode()


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


def _driver_packages(release: DriverRelease, families: dict[str, list[str]]) -> list[PackageSpec]:
    names = _driver_names(release)
    v, av, b = release.version, release.apt_version, release.branch
    pin = f"(= {av})"
    # The relations follow Debian's own packaging of these packages, which NVIDIA's debian12
    # repository carries under the same names but one: the open module is
    # nvidia-kernel-open-dkms there (Debian: nvidia-open-kernel-dkms). Sources: the Packages
    # index of deb.debian.org/debian bookworm non-free and non-free-firmware (amd64), source
    # package nvidia-graphics-drivers 535.261.03-1, and apt's report on NVIDIA's debian12
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
    at_least = f"(>= {v})"
    branch_or_later = f"(>= {b})"
    alternative = f"nvidia-alternative {pin}"
    any_module = f"nvidia-kernel-dkms {pin} | nvidia-kernel-{v} | nvidia-kernel-open-dkms {pin}"
    source = "nvidia-graphics-drivers"
    nvml_major_minor = ".".join(v.split(".")[:2])
    lib_marker = (
        f"gpunode lab stand-in for {{lib}} {v}: not a real library; "
        "the emulated GPUs are read by /usr/bin/nvidia-smi.\n"
    )
    out: list[PackageSpec] = []

    def ex(role: str, name: str) -> tuple[str, ...]:
        return _exclusive(families[role], name)

    def lib(
        name: str,
        summary: str,
        depends: tuple[str, ...] = (),
        provides: tuple[str, ...] = (),
        files: tuple[FileSpec, ...] = (),
    ) -> PackageSpec:
        """One of the build's libraries (Debian's non-free/libs), described as of driver v."""
        return PackageSpec(
            name=name,
            version=av,
            source=source,
            section="non-free/libs",
            description=f"{summary}\n Driver {v}.",
            depends=depends,
            provides=provides,
            files=files,
        )

    out.append(
        PackageSpec(
            name="firmware-nvidia-gsp",
            version=av,
            source=source,
            section="non-free-firmware/kernel",
            description=f"NVIDIA GSP firmware\n The GPU System Processor firmware of driver {v}.",
            provides=(f"firmware-nvidia-gsp (= {v})", f"firmware-nvidia-gsp-{v}"),
            files=(
                FileSpec(
                    f"/lib/firmware/nvidia/{v}/gsp_ga10x.bin",
                    lib_marker.format(lib="gsp_ga10x.bin").encode(),
                ),
            ),
        )
    )
    out.append(
        lib(
            "nvidia-alternative",
            "allows the selection of NVIDIA as GLX provider",
            provides=(
                "nvidia-alternative--kmod-alias",
                f"nvidia-alternative-{v}",
                "nvidia-alternative-any",
            ),
        )
    )
    for name, summary in (
        ("libgl1-nvidia-glvnd-glx", "NVIDIA binary OpenGL/GLX library (GLVND variant)"),
        ("nvidia-egl-icd", "NVIDIA EGL installable client driver (ICD)"),
    ):
        out.append(lib(name, summary, depends=(alternative,)))
    out.append(
        PackageSpec(
            name="nvidia-kernel-support",
            version=av,
            source=source,
            section="non-free/kernel",
            description=f"NVIDIA binary kernel module support files\n Driver {v}.",
            depends=(alternative, "nvidia-alternative--kmod-alias"),
            provides=("nvidia-kernel-support--v1", "nvidia-kernel-support-any"),
            files=(
                FileSpec(
                    "/usr/lib/modprobe.d/blacklist-nvidia-nouveau.conf",
                    render("blacklist-nvidia-nouveau.conf.j2").encode(),
                ),
                FileSpec(
                    "/usr/lib/modprobe.d/nvidia-kms.conf",
                    render("nvidia-kms.conf.j2").encode(),
                ),
            ),
        )
    )
    out.append(
        lib(
            "libnvidia-ml1",
            "NVIDIA Management Library (NVML) runtime library",
            depends=(alternative,),
            provides=(f"libnvidia-ml.so.1 (= {v})",),
            files=(
                FileSpec(
                    f"{LIBDIR}/libnvidia-ml.so.{v}",
                    lib_marker.format(lib="libnvidia-ml").encode(),
                ),
                FileSpec(f"{LIBDIR}/libnvidia-ml.so.1", link=f"libnvidia-ml.so.{v}"),
            ),
        )
    )
    out.append(
        PackageSpec(
            name="libcuda1",
            version=av,
            source=source,
            section="non-free/libs",
            description=f"NVIDIA CUDA Driver Library\n libcuda of driver {v}.",
            depends=(alternative,),
            recommends=(any_module, "nvidia-smi", f"nvidia-persistenced {branch_or_later}"),
            provides=(f"libcuda.so.1 (= {v})", "libcuda1-any"),
            files=(
                FileSpec(f"{LIBDIR}/libcuda.so.{v}", lib_marker.format(lib="libcuda").encode()),
                FileSpec(f"{LIBDIR}/libcuda.so.1", link=f"libcuda.so.{v}"),
                FileSpec(f"{LIBDIR}/libcuda.so", link="libcuda.so.1"),
            ),
        )
    )
    smi = render(
        "nvidia_smi.py", version=v, cuda_version=release.cuda, nvml_version=nvml_major_minor
    )
    out.append(
        PackageSpec(
            name="nvidia-smi",
            version=av,
            source=source,
            section="non-free/utils",
            description=f"NVIDIA System Management Interface\n nvidia-smi of driver {v}.",
            # python3: the lab's nvidia-smi is a Python stand-in.
            depends=(alternative, f"libnvidia-ml1 {pin}", "python3"),
            recommends=(any_module,),
            files=(FileSpec("/usr/bin/nvidia-smi", _script(smi), 0o755),),
        )
    )
    for flavour, dkms in (
        ("open", "nvidia-kernel-open-dkms"),
        ("proprietary", "nvidia-kernel-dkms"),
    ):
        module_kind = "Open Kernel Module" if flavour == "open" else "Kernel Module"
        # The first words of /proc/driver/nvidia/version differ between the two flavours.
        nvrm = (
            "NVIDIA UNIX Open Kernel Module for x86_64"
            if flavour == "open"
            else "NVIDIA UNIX x86_64 Kernel Module"
        )
        values = {
            "version": v,
            "flavour": flavour,
            "nvrm": nvrm,
            "build_date": release.build_date,
        }
        other = "nvidia-kernel-dkms" if flavour == "open" else "nvidia-kernel-open-dkms"
        # The proprietary module also provides nvidia-kernel-V (Debian's packaging); the
        # open one is reached by its own name (see any_module).
        kernel_provides = (f"nvidia-kernel-{v}",) if flavour == "proprietary" else ()
        needs = (
            f"firmware-nvidia-gsp (= {v}) | firmware-nvidia-gsp-{v}",
            "nvidia-kernel-support--v1",
        )
        out.append(
            PackageSpec(
                name=dkms,
                version=av,
                source=source,
                section="non-free/kernel",
                description=(
                    f"NVIDIA binary kernel module DKMS source ({flavour})\n"
                    f" The {module_kind.lower()} of driver {v}; the lab emulates loading it."
                ),
                depends=needs,
                recommends=(f"nvidia-driver {at_least} | libcuda1 {at_least}",),
                conflicts=(other,),
                replaces=(other,),
                provides=(*kernel_provides, f"{dkms}-any (= {v})"),
                files=(
                    FileSpec(
                        "/usr/lib/gpunode-lab/nvidia-module-load",
                        render("nvidia-module-load.sh.j2", **values).encode(),
                        0o755,
                    ),
                    FileSpec(
                        "/lib/systemd/system/gpunode-lab-nvidia-module.service",
                        render("gpunode-lab-nvidia-module.service.j2", **values).encode(),
                    ),
                    FileSpec(
                        f"/usr/src/nvidia-{v}/dkms.conf",
                        render("dkms.conf.j2", **values).encode(),
                    ),
                ),
                scripts=(("postinst", render("dkms.postinst.j2", **values)),),
            )
        )
    out.append(
        PackageSpec(
            name="nvidia-driver-libs",
            version=av,
            source=source,
            section="non-free/libs",
            description=f"NVIDIA metapackage (libraries)\n The user-space libraries of {v}.",
            depends=(f"libgl1-nvidia-glvnd-glx {pin}", f"nvidia-egl-icd {pin}"),
        )
    )
    out.append(
        lib(
            "nvidia-driver-cuda",
            "NVIDIA driver CUDA integration components",
            depends=(
                f"libcuda1 {pin}",
                f"nvidia-smi {pin}",
                f"nvidia-persistenced {branch_or_later}",
            ),
        )
    )
    out.append(
        PackageSpec(
            name="nvidia-driver",
            version=av,
            source=source,
            section="non-free/metapackages",
            description=f"NVIDIA metapackage\n Driver {v} with either kernel module flavour.",
            depends=(f"nvidia-driver-libs {pin}", alternative, any_module),
            recommends=(f"nvidia-persistenced {branch_or_later}",),
        )
    )
    out.append(
        PackageSpec(
            name="nvidia-persistenced",
            version=av,
            source="nvidia-persistenced",
            section="non-free/utils",
            description="NVIDIA Persistence Daemon\n Keeps the GPUs initialised while idle.",
            depends=(f"libnvidia-ml1 {at_least}",),
            files=(
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
            scripts=(("postinst", render("persistenced.postinst.j2")),),
        )
    )
    cuda_drivers = names["cuda_drivers"]
    out.append(
        PackageSpec(
            name=cuda_drivers,
            version=av,
            source="cuda-drivers",
            section="non-free/metapackages",
            description=f"CUDA Driver meta-package, branch-specific\n Driver {v} (proprietary).",
            depends=(f"nvidia-driver {pin}", f"nvidia-kernel-dkms {pin}"),
        )
    )
    if int(b) >= 580:
        out.append(
            PackageSpec(
                name="nvidia-open",
                version=av,
                source="nvidia-open",
                section="non-free/metapackages",
                description=f"NVIDIA open kernel module driver meta-package\n Driver {v}.",
                depends=(f"nvidia-driver {pin}", f"nvidia-kernel-open-dkms {pin}"),
            )
        )
        pinned = sorted({*DEBIAN_DRIVER_NAMES, *names.values(), "cuda-drivers"})
        out.append(
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
                        render(
                            "pinning.pref.j2", packages=" ".join(pinned), apt_version=av
                        ).encode(),
                        conffile=True,
                    ),
                ),
            )
        )
    fm = names["fabricmanager"]
    fm_script = render(
        "nv_fabricmanager.py",
        version=v,
        nvlsm_gpus="|".join(_nvlsm_gpu_names()),
        nvlsm=NVLSM_DAEMON,
    )
    out.append(
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
            conflicts=ex("fabricmanager", fm),
            replaces=ex("fabricmanager", fm),
            files=(
                FileSpec("/usr/bin/nv-fabricmanager", _script(fm_script), 0o755),
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
        )
    )
    nscq = names["nscq"]
    out.append(
        PackageSpec(
            name=nscq,
            version=av,
            source=f"libnvidia-nscq-{b}",
            description=f"NVSwitch Configuration and Query library\n Version {v}.",
            conflicts=ex("nscq", nscq),
            replaces=ex("nscq", nscq),
            files=(
                FileSpec(
                    f"{LIBDIR}/libnvidia-nscq.so.{v}",
                    lib_marker.format(lib="libnvidia-nscq").encode(),
                ),
                FileSpec(f"{LIBDIR}/libnvidia-nscq.so.2", link=f"libnvidia-nscq.so.{v}"),
            ),
        )
    )
    return out


def _imex_package(release: DriverRelease) -> PackageSpec:
    """The IMEX daemon built with one driver (nvidia-imex-<branch>, the driver's version): its
    daemon and the systemd unit nvidia-imex (NVIDIA IMEX guide, "Getting Started")."""
    daemon = render("nvidia_imex.py", version=release.version)
    return PackageSpec(
        name=f"nvidia-imex-{release.branch}",
        version=release.apt_version,
        source=f"nvidia-imex-{release.branch}",
        section="multiverse/utils",
        description=(
            "NVIDIA IMEX service\n"
            f" Version {release.version}: GPU memory export and import across the nodes of an"
            " NVLink domain."
        ),
        depends=("python3",),
        files=(
            FileSpec("/usr/bin/nvidia-imex", _script(daemon), 0o755),
            FileSpec(
                "/lib/systemd/system/nvidia-imex.service",
                render("nvidia-imex.service.j2").encode(),
            ),
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
        files=(FileSpec(NVLSM_DAEMON, _script(daemon), 0o755),),
    )


def _cuda_package(release: CudaRelease) -> PackageSpec:
    mm = release.major_minor
    major = mm.split(".")[0]
    prefix = f"/usr/local/cuda-{mm}"
    version_json = {
        "cuda": {"name": "CUDA SDK", "version": release.version},
        "cuda_cudart": {
            "name": "CUDA Runtime (cudart)",
            "version": release.cudart,
        },
        "cuda_nvcc": {"name": "CUDA NVCC", "version": release.nvcc},
    }
    values = {
        "prefix": prefix,
        "major": major,
        "major_minor": mm,
        "priority": mm.replace(".", ""),
        "nvcc": release.nvcc,
        "nvcc_built": release.nvcc_built,
        "nvcc_build": release.nvcc_build,
        "copyright_year": release.copyright_year,
    }
    cudart_major = release.cudart.split(".")[0]
    cudart_code = int(major) * 1000 + int(mm.split(".")[1]) * 10
    marker = f"gpunode lab stand-in for libcudart {release.cudart}: not a real library.\n"
    return PackageSpec(
        name=release.package,
        version=release.apt_version,
        source=release.package,
        section="multiverse/devel",
        description=f"CUDA Toolkit {mm} meta-package\n CUDA {release.version} under {prefix}.",
        files=(
            FileSpec(
                f"{prefix}/version.json", (json.dumps(version_json, indent=3) + "\n").encode()
            ),
            FileSpec(f"{prefix}/bin/nvcc", render("nvcc.sh.j2", **values).encode(), 0o755),
            FileSpec(
                f"{prefix}/targets/x86_64-linux/lib/libcudart.so.{release.cudart}", marker.encode()
            ),
            FileSpec(
                f"{prefix}/targets/x86_64-linux/lib/libcudart.so.{cudart_major}",
                link=f"libcudart.so.{release.cudart}",
            ),
            FileSpec(
                f"{prefix}/targets/x86_64-linux/include/cuda_runtime_api.h",
                f"#define CUDART_VERSION {cudart_code}\n".encode(),
            ),
            FileSpec(f"{prefix}/lib64", link="targets/x86_64-linux/lib"),
            FileSpec(f"{prefix}/include", link="targets/x86_64-linux/include"),
        ),
        scripts=(
            ("postinst", render("cuda.postinst.j2", **values)),
            ("prerm", render("cuda.prerm.j2", **values)),
        ),
    )


def _nccl_packages(build: NcclBuild) -> list[PackageSpec]:
    major, minor, patch = build.version.split(".")
    av = build.apt_version
    header = render(
        "nccl.h.j2",
        major=major,
        minor=minor,
        patch=patch,
        code=str(int(major) * 10000 + int(minor) * 100 + int(patch)),
    )
    marker = f"gpunode lab stand-in for libnccl {build.version}+cuda{build.cuda}.\n"
    return [
        PackageSpec(
            name="libnccl2",
            version=av,
            source="nccl",
            description="NVIDIA Collective Communication Library (NCCL) Runtime\n"
            f" NCCL {build.version} built for CUDA {build.cuda}.",
            files=(
                FileSpec(f"{LIBDIR}/libnccl.so.{build.version}", marker.encode()),
                FileSpec(f"{LIBDIR}/libnccl.so.2", link=f"libnccl.so.{build.version}"),
            ),
        ),
        PackageSpec(
            name="libnccl-dev",
            version=av,
            source="nccl",
            section="multiverse/libdevel",
            description="NVIDIA Collective Communication Library (NCCL) Development Files\n"
            f" NCCL {build.version} headers for CUDA {build.cuda}.",
            depends=(f"libnccl2 (= {av})",),
            files=(
                FileSpec("/usr/include/nccl.h", header.encode()),
                FileSpec(f"{LIBDIR}/libnccl.so", link="libnccl.so.2"),
            ),
        ),
    ]


def _container_toolkit_packages(release: ContainerToolkitRelease) -> list[PackageSpec]:
    t = release.version
    av = f"{t}-1"
    values = {"version": t, "commit": release.commit}
    marker = f"gpunode lab stand-in for libnvidia-container {t}.\n"
    source, repository = "nvidia-container-toolkit", "container-toolkit"
    return [
        PackageSpec(
            name="libnvidia-container1",
            version=av,
            description="NVIDIA container runtime library",
            files=(
                FileSpec(f"{LIBDIR}/libnvidia-container.so.{t}", marker.encode()),
                FileSpec(f"{LIBDIR}/libnvidia-container.so.1", link=f"libnvidia-container.so.{t}"),
            ),
            source=source,
            repository=repository,
        ),
        PackageSpec(
            name="libnvidia-container-tools",
            version=av,
            section="utils",
            description="NVIDIA container runtime library (command-line tools)",
            depends=("python3", f"libnvidia-container1 (>= {av})"),
            files=(
                FileSpec(
                    "/usr/bin/nvidia-container-cli",
                    _script(render("nvidia_container_cli.py", **values)),
                    0o755,
                ),
            ),
            source=source,
            repository=repository,
        ),
        PackageSpec(
            name="nvidia-container-toolkit-base",
            version=av,
            section="utils",
            description="NVIDIA Container Toolkit Base\n nvidia-ctk and nvidia-container-runtime.",
            depends=("python3",),
            conflicts=("nvidia-container-runtime (<< 3.14.0-1)",),
            files=(
                FileSpec("/usr/bin/nvidia-ctk", _script(render("nvidia_ctk.py", **values)), 0o755),
                FileSpec(
                    "/usr/bin/nvidia-container-runtime",
                    _script(render("nvidia_container_runtime.py", **values)),
                    0o755,
                ),
                FileSpec(
                    "/etc/nvidia-container-runtime/config.toml",
                    render("container-runtime-config.toml.j2").encode(),
                    conffile=True,
                ),
            ),
            source=source,
            repository=repository,
        ),
        PackageSpec(
            name="nvidia-container-toolkit",
            version=av,
            section="utils",
            description="NVIDIA Container toolkit\n The runtime hook and its configuration.",
            depends=(
                f"nvidia-container-toolkit-base (= {av})",
                f"libnvidia-container-tools (>= {av})",
                "libnvidia-container-tools (<< 2.0.0)",
            ),
            files=(
                FileSpec(
                    "/usr/bin/nvidia-container-runtime-hook",
                    render("nvidia-container-runtime-hook.sh.j2", **values).encode(),
                    0o755,
                ),
            ),
            source=source,
            repository=repository,
        ),
    ]


@cache
def packages() -> tuple[PackageSpec, ...]:
    """Every stand-in package of the lab repository, sorted by name and version."""
    families = _families()
    out: list[PackageSpec] = []
    for driver in DRIVERS:
        out.extend(_driver_packages(driver, families))
    out.extend(_cuda_package(cuda) for cuda in CUDA_TOOLKITS)
    for nccl in NCCL_BUILDS:
        out.extend(_nccl_packages(nccl))
    for toolkit in CONTAINER_TOOLKITS:
        out.extend(_container_toolkit_packages(toolkit))
    out.extend(_nvlsm_package(version) for version in NVLSM_RELEASES)
    # IMEX packages exist for the branches naming.yml names (570 to 589).
    out.extend(_imex_package(d) for d in DRIVERS if 570 <= int(d.branch) <= 589)
    return tuple(sorted(out, key=lambda p: (p.repository, p.name, p.version)))
