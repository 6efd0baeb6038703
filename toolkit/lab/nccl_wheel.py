"""Stand-in ``nvidia-nccl-cu12`` wheels for the lab's wheel server, built here.

The real wheel (PyPI ``nvidia-nccl-cu12``, NVIDIA's NCCL for pip) ships the library as
``nvidia/nccl/lib/libnccl.so.2`` under the ``nvidia`` namespace package, which is where a CUDA
build of torch preloads it from (torch/__init__.py, ``_preload_cuda_deps("nccl",
"libnccl.so.*")``). The lab's stand-in has that name, version and layout, and its library is a
real shared object (compiled here with the host's C compiler) exporting NCCL's
``ncclGetVersion`` with the version's code, so that the probe that reads which NCCL a framework
loads (``node_runner.probe.nccl_probe``) runs unchanged against it. It performs no collective: it is
a stand-in and says so in its metadata and in the library's ``gpunode_lab_standin`` symbol.

The wheel is byte-for-byte reproducible (fixed zip times, sorted entries, no build paths in the
library), so the hashes in the lab's Python lock do not change from one build to the next.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tempfile
import zipfile
from pathlib import Path

from toolkit.lab.catalog import NCCL_BUILDS
from toolkit.lab.proc import run

DISTRIBUTION = "nvidia-nccl-cu{major}"
LIBRARY = "nvidia/nccl/lib/libnccl.so.2"
ZIP_TIME = (1980, 1, 1, 0, 0, 0)
SOURCE = """\
/* gpunode lab stand-in for libnccl {version}: no collectives, only the version query. */
const char gpunode_lab_standin[] = "gpunode lab stand-in for NCCL {version}";
/* nccl.h: ncclResult_t ncclGetVersion(int *version); ncclSuccess == 0;
   NCCL_VERSION_CODE = major * 10000 + minor * 100 + patch (NCCL >= 2.9). */
int ncclGetVersion(int *version) {{ *version = {code}; return 0; }}
"""


def version_code(version: str) -> int:
    """NCCL's version code of ``2.A.B``."""
    major, minor, patch = (int(x) for x in version.split("."))
    return major * 10000 + minor * 100 + patch


def wheel_name(version: str, cuda_major: int) -> str:
    """The file name the real wheel has (PEP 427), for one NCCL version and CUDA major."""
    dist = DISTRIBUTION.format(major=cuda_major).replace("-", "_")
    return f"{dist}-{version}-py3-none-manylinux2014_x86_64.whl"


def _library(version: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="gpunode-nccl-") as tmp:
        src = Path(tmp) / "nccl.c"
        out = Path(tmp) / "libnccl.so.2"
        src.write_text(SOURCE.format(version=version, code=version_code(version)))
        run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-O2",
                "-g0",
                f"-ffile-prefix-map={tmp}=.",
                "-Wl,-soname,libnccl.so.2",
                "-o",
                str(out),
                str(src),
            ],
            timeout=120,
        )
        return out.read_bytes()


def build_wheel(version: str, cuda_major: int) -> bytes:
    """The stand-in wheel's bytes."""
    dist = DISTRIBUTION.format(major=cuda_major)
    info = f"{dist.replace('-', '_')}-{version}.dist-info"
    files: dict[str, tuple[bytes, int]] = {
        "nvidia/__init__.py": (b"", 0o644),
        "nvidia/nccl/__init__.py": (b"", 0o644),
        "nvidia/nccl/lib/__init__.py": (b"", 0o644),
        LIBRARY: (_library(version), 0o755),
        f"{info}/METADATA": (
            (
                "Metadata-Version: 2.1\n"
                f"Name: {dist}\n"
                f"Version: {version}\n"
                "Summary: gpunode lab stand-in for NVIDIA's NCCL wheel (no collectives)\n"
            ).encode(),
            0o644,
        ),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: gpunode-lab\nRoot-Is-Purelib: true\n"
            b"Tag: py3-none-manylinux2014_x86_64\n",
            0o644,
        ),
        f"{info}/top_level.txt": (b"nvidia\n", 0o644),
    }
    record = []
    for name, (data, _mode) in sorted(files.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = (("\n".join(record) + "\n").encode(), 0o644)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, (data, mode) in sorted(files.items()):
            entry = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            entry.external_attr = (0o100000 | mode) << 16
            entry.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(entry, data)
    return buffer.getvalue()


def ensure_wheels(dest: Path) -> list[Path]:
    """A stand-in wheel for every NCCL build the lab repository carries, in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for build in NCCL_BUILDS:
        major = int(build.cuda.split(".")[0])
        path = dest / wheel_name(build.version, major)
        if not path.is_file():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(build_wheel(build.version, major))
            tmp.replace(path)
        written.append(path)
    return written
