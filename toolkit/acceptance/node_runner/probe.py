"""``nccl-probe``: which libnccl the framework in this Python really loads (file, version, pip
wheel or system package); ``gpunode image inspect``, the ranks and the framework checks use it."""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from .common import sh

# The NCCL a framework loads is a shared library file; its version is what that file says, not
# what torch was built against: torch.cuda.nccl.version() reports the latter
# (pytorch/pytorch#116977). A CUDA build of torch preloads `libnccl.so.*` from the
# `nvidia-nccl-cu*` wheel (`<sys.path entry>/nvidia/nccl/lib/`, torch/__init__.py
# `_preload_cuda_deps("nccl", "libnccl.so.*")`) before the loader's own search path, where a
# system `libnccl2` lives (`/usr/lib/<triplet>/libnccl.so.2`).
NCCL_SONAME = "libnccl.so.2"


NCCL_WHEEL_DIR = ("nvidia", "nccl", "lib")


NCCL_FILE_VERSION_RE = re.compile(r"libnccl\.so\.(?P<v>\d+\.\d+\.\d+)$")


def decode_nccl_version(code: int) -> str:
    """ncclGetVersion's integer: ``major*10000 + minor*100 + patch`` from 2.9 (nccl.h's
    NCCL_VERSION_CODE), ``major*1000 + minor*100 + patch`` before."""
    if code >= 10000:
        return f"{code // 10000}.{(code % 10000) // 100}.{code % 100}"
    return f"{code // 1000}.{(code % 1000) // 100}.{code % 100}"


def mapped_nccl(maps_text: str) -> list[str]:
    """Paths of libnccl files mapped into a process (the text of /proc/<pid>/maps)."""
    found: list[str] = []
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        is_nccl = len(parts) == 6 and os.path.basename(parts[5]).startswith("libnccl.so")
        if is_nccl and parts[5] not in found:
            found.append(parts[5])
    return found


def nccl_candidates(search_path: list[str], ldconfig_text: str) -> list[str]:
    """Every libnccl the framework could load, in the order it looks: the wheel's (in
    sys.path order), then the loader's cache (the text of ``ldconfig -p``)."""
    found: list[str] = []
    for entry in search_path:
        lib_dir = os.path.join(entry or ".", *NCCL_WHEEL_DIR)
        try:
            names = sorted(n for n in os.listdir(lib_dir) if n.startswith("libnccl.so"))
        except OSError:
            continue
        if names:
            found.append(os.path.join(lib_dir, names[0]))
    for line in ldconfig_text.splitlines():
        name, _, target = line.strip().partition(" => ")
        if name.split(" ", 1)[0] == NCCL_SONAME and target:
            found.append(target.strip())
    # The loader's default directories, searched after its cache (ld.so(8)).
    triplet = f"{os.uname().machine}-linux-gnu"
    for lib_dir in (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib64", "/usr/lib64"):
        path = os.path.join(lib_dir, NCCL_SONAME)
        if os.path.lexists(path) and os.path.realpath(path) not in map(os.path.realpath, found):
            found.append(path)
    return found


def nccl_source(path: str) -> dict[str, Any]:
    """Where a libnccl file comes from: a pip wheel (its distribution and version) or a
    system package (dpkg's owner and version), else unknown."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    if len(parts) > 4 and tuple(parts[-4:-1]) == NCCL_WHEEL_DIR:
        site = os.sep.join(parts[:-4])
        for name in sorted(os.listdir(site)):
            if name.startswith("nvidia_nccl_cu") and name.endswith(".dist-info"):
                dist, version = name[: -len(".dist-info")].rsplit("-", 1)
                return {
                    "kind": "pip-wheel",
                    "package": dist.replace("_", "-"),
                    "package_version": version,
                }
        return {"kind": "pip-wheel", "package": None, "package_version": None}
    for candidate in (path, real):
        rc, stdout, _ = sh(["dpkg-query", "-S", candidate])
        if rc == 0 and ":" in stdout:
            package = stdout.split(":", 1)[0].strip()
            rc, version, _ = sh(["dpkg-query", "-W", "-f=${Version}", package])
            return {
                "kind": "system-package",
                "package": package,
                "package_version": version.strip() if rc == 0 else None,
            }
    return {"kind": "unknown", "package": None, "package_version": None}


def nccl_file_version(path: str) -> str | None:
    """The version of a libnccl file: ncclGetVersion() when the library loads, else the
    ``libnccl.so.X.Y.Z`` name the symlink chain ends in."""
    import ctypes

    try:
        lib = ctypes.CDLL(path)
        code = ctypes.c_int(0)
        if lib.ncclGetVersion(ctypes.byref(code)) == 0 and code.value > 0:
            return decode_nccl_version(code.value)
    except (OSError, AttributeError):
        pass
    m = NCCL_FILE_VERSION_RE.search(os.path.realpath(path))
    return m.group("v") if m else None


def nccl_probe(torch: Any = None) -> dict[str, Any]:
    """The NCCL the framework in this Python really loads: which file, its version, where
    it comes from, and whether it was mapped into this process or found the way the framework
    would find it (a CPU build of torch maps none)."""
    out: dict[str, Any] = {
        "version": None,
        "path": None,
        "how": None,
        "source": None,
        "framework": getattr(torch, "__version__", None),
        "framework_built_with": None,
    }
    if torch is not None:
        # What the framework was compiled against: shown, never judged (pytorch#116977).
        try:
            v = torch.cuda.nccl.version()
            out["framework_built_with"] = (
                ".".join(str(x) for x in v) if isinstance(v, tuple) else decode_nccl_version(int(v))
            )
        except Exception:
            pass
    try:
        with open("/proc/self/maps", encoding="utf-8") as handle:
            mapped = mapped_nccl(handle.read())
    except OSError:
        mapped = []
    _rc, ldconfig, _ = sh(["ldconfig", "-p"])
    candidates = nccl_candidates(list(sys.path), ldconfig)
    if mapped:
        out.update(path=mapped[0], how="mapped")
    elif candidates:
        out.update(path=candidates[0], how="resolved")
    else:
        return out
    out["version"] = nccl_file_version(out["path"])
    out["source"] = nccl_source(out["path"])
    # The other NCCLs in this environment (a system libnccl2 beside the wheel's): shown, so
    # "two NCCLs in one image" is visible; their version is read from names, never loaded.
    out["others"] = []
    for path in candidates:
        if os.path.realpath(path) != os.path.realpath(out["path"]):
            source = nccl_source(path)
            m = NCCL_FILE_VERSION_RE.search(os.path.realpath(path))
            version = m.group("v") if m else source.get("package_version")
            out["others"].append({"path": path, "version": version, "source": source})
    return out
