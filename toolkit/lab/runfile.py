"""The ``runfile-driver`` fault: a driver installed by NVIDIA's ``.run`` installer.

What the installer leaves and gpunode's preflight looks for (sources in
``toolkit.facts.driver``, "a driver that was there before gpunode"): the installer at
/usr/bin/nvidia-installer, its uninstaller /usr/bin/nvidia-uninstall, its log
/var/log/nvidia-installer.log, the kernel module under /lib/modules/<release>/kernel/
drivers/video/ and the libraries in /usr/lib/x86_64-linux-gnu/, none of them known to dpkg.
The lab writes those files (placeholders: the lab never loads them) and no package. The
uninstaller is a stand-in that removes exactly them, so the way out preflight prints
(`sudo nvidia-uninstall --silent`) works on a lab node as on a real one; clearing the fault
runs it too.
"""

from __future__ import annotations

from docker.models.containers import Container

from toolkit.lab import nodes
from toolkit.lab.package_spec import LIBDIR

# A real R535 data-center release (NVIDIA Data Center Driver 535.183.01, June 2024), so the
# footprint names a version that is not the lab's pin.
VERSION = "535.183.01"
UNINSTALLER = "/usr/bin/nvidia-uninstall"
INSTALLER = "/usr/bin/nvidia-installer"
LOG = "/var/log/nvidia-installer.log"
LIBRARIES = (
    f"libnvidia-ml.so.{VERSION}",
    "libnvidia-ml.so.1",
    f"libcuda.so.{VERSION}",
    "libcuda.so.1",
)


def module_path(kernel: str) -> str:
    """Where the installer puts the kernel module for a kernel release."""
    return f"/lib/modules/{kernel}/kernel/drivers/video/nvidia.ko"


def paths(kernel: str) -> list[str]:
    """Every file of the footprint, the uninstallers last."""
    return [
        module_path(kernel),
        *(f"{LIBDIR}/{name}" for name in LIBRARIES),
        LOG,
        INSTALLER,
        UNINSTALLER,
    ]


def uninstaller(kernel: str) -> str:
    """The stand-in of nvidia-installer / nvidia-uninstall: it only uninstalls, as root."""
    files = " ".join(paths(kernel))
    return f"""#!/bin/sh
# gpunode lab stand-in for NVIDIA's nvidia-installer (a .run install of {VERSION}).
case "$(basename "$0") $*" in
  nvidia-uninstall*|*--uninstall*) ;;
  *) echo "nvidia-installer (lab stand-in): only --uninstall is available" >&2; exit 1 ;;
esac
if [ "$(id -u)" != 0 ]; then
  echo "ERROR: nvidia-installer must be run as root" >&2
  exit 1
fi
rm -f {files}
case " $* " in
  *" --silent "*|*" -s "*) ;;
  *) echo "nvidia-uninstall: the NVIDIA driver {VERSION} is uninstalled" ;;
esac
"""


def footprint(kernel: str) -> dict[str, nodes.NodeFile]:
    """The files of the fault, by path."""
    placeholder = b"gpunode lab placeholder of a runfile-installed driver file\n"
    log = (
        f"nvidia-installer log file '{LOG}'\ninstaller version: {VERSION}\n"
        "Installation of the kernel module for the NVIDIA Accelerated Graphics Driver for "
        "Linux-x86_64 (version: " + VERSION + ") is now complete.\n"
    ).encode()
    script = nodes.NodeFile(uninstaller(kernel).encode(), 0o755)
    return {
        module_path(kernel): nodes.NodeFile(placeholder),
        **{f"{LIBDIR}/{name}": nodes.NodeFile(placeholder, 0o755) for name in LIBRARIES},
        LOG: nodes.NodeFile(log),
        INSTALLER: script,
        UNINSTALLER: script,
    }


def install(container: Container) -> None:
    """Leave a runfile install's footprint on a running node."""
    _, out = nodes.exec_in(
        container,
        ["sh", "-c", 'k=$(uname -r); mkdir -p "/lib/modules/$k/kernel/drivers/video"; echo "$k"'],
    )
    nodes.put_files(container, footprint(out.strip().splitlines()[-1]))


def uninstall(container: Container) -> None:
    """Run the stand-in uninstaller, when the node still has it."""
    nodes.exec_in(
        container, ["sh", "-c", f"if [ -x {UNINSTALLER} ]; then {UNINSTALLER} --silent; fi"]
    )
