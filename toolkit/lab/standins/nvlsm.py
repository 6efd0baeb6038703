#!/usr/bin/python3
"""nvlsm of the gpunode lab: the NVLink Subnet Manager daemon's version and a resident process.

On a fourth-generation NVSwitch system Fabric Manager's start-up launches NVLSM and aborts
when /opt/nvidia/nvlsm/sbin/nvlsm is missing; the lab's Fabric Manager stand-in looks for
this file the same way. Stdlib only.
"""

from __future__ import annotations

import signal
import sys
import time

VERSION = "@VERSION@"


def main(argv: list[str]) -> int:
    if VERSION.startswith("@"):
        sys.stderr.write("nvlsm: this stand-in was not built (version unset)\n")
        return 255
    if argv[:1] in (["-V"], ["--version"]):
        print(f"nvlsm {VERSION}")
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
