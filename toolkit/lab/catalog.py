"""The stand-in packages of the lab repository: NVIDIA's names, versions and dependency shapes.

The releases are data with their sources: the driver's in ``driver_packages`` (``DRIVERS``,
with Fabric Manager, NSCQ, NVLSM and IMEX), the others here (``CUDA_TOOLKITS``,
``NCCL_BUILDS``, ``CONTAINER_TOOLKITS``); :func:`packages` turns them all into package
specifications (``package_spec``) with the dependency shapes of NVIDIA's packages. The package
contents (the emulating ``nvidia-smi``, daemons, unit files) are rendered from
``toolkit/lab/standins/``.

See docs/architecture.md, "Package names", for the names the roles install.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

from toolkit.lab import driver_packages
from toolkit.lab.package_spec import LIBDIR, FileSpec, PackageSpec, render, script

# Packages outside this repository that stand-ins may depend on (the node image has them).
EXTERNAL_DEPENDS = frozenset({"python3"})


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
                    script(render("nvidia_container_cli.py", **values)),
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
                FileSpec("/usr/bin/nvidia-ctk", script(render("nvidia_ctk.py", **values)), 0o755),
                FileSpec(
                    "/usr/bin/nvidia-container-runtime",
                    script(render("nvidia_container_runtime.py", **values)),
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
    out = list(driver_packages.packages())
    out.extend(_cuda_package(cuda) for cuda in CUDA_TOOLKITS)
    for nccl in NCCL_BUILDS:
        out.extend(_nccl_packages(nccl))
    for toolkit in CONTAINER_TOOLKITS:
        out.extend(_container_toolkit_packages(toolkit))
    return tuple(sorted(out, key=lambda p: (p.repository, p.name, p.version)))
