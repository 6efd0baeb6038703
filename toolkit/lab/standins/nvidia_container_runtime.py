#!/usr/bin/python3
"""nvidia-container-runtime of the gpunode lab: a runc wrapper, as the real one is.

The real runtime adds the NVIDIA hook or CDI devices to the OCI spec and then execs runc.
Lab nodes have no GPU devices to add, so this execs runc with the arguments unchanged, which
is enough for `docker run --runtime nvidia` to work. Stdlib only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

VERSION = "@VERSION@"
COMMIT = "@COMMIT@"
RUNC_CANDIDATES = ("runc", "docker-runc", "/usr/sbin/runc", "/usr/bin/runc", "/usr/local/bin/runc")


def find_runc() -> str | None:
    for candidate in RUNC_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


def main(argv: list[str]) -> int:
    runc = find_runc()
    if argv[:1] in (["--version"], ["-v"]):
        print(f"NVIDIA Container Runtime version {VERSION}\ncommit: {COMMIT}\nspec: 1.2.0\n")
        sys.stdout.flush()
        if runc:
            return subprocess.run([runc, "--version"], check=False).returncode
        return 0
    if runc is None:
        sys.stderr.write(
            "nvidia-container-runtime: error locating runtime: no runc found in PATH\n"
        )
        return 1
    os.execv(runc, [runc, *argv])
    return 1  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
