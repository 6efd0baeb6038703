"""The operating system: os-release, the Debian point release, uname, Secure Boot."""

from __future__ import annotations

from toolkit.facts.probe import Fact, Status

# os-release ID -> the distribution name Ansible reports (``ansible_distribution``).
# Source: os-release(5) (freedesktop.org); Ansible's distribution facts use the same names.
DISTRIBUTIONS = {"debian": "Debian", "ubuntu": "Ubuntu"}


def parse_os_release(text: str) -> dict[str, str]:
    """``KEY=value`` pairs of ``/etc/os-release`` (quotes removed), see os-release(5)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            values[key.strip()] = value.strip().strip('"').strip("'")
    return values


def os_facts(os_release: str, debian_version: str, kernel: str, machine: str) -> dict[str, str]:
    """The OS facts gpunode's roles read, named and shaped as Ansible's ``setup`` names them.

    Read by the facts probe instead of a ``setup`` round trip: ``distribution`` (Debian,
    Ubuntu, else the os-release NAME), ``distribution_version`` (Debian's point release from
    ``/etc/debian_version``, e.g. 12.7; Ubuntu's VERSION_ID, e.g. 22.04),
    ``distribution_major_version``, ``kernel`` (``uname -r``) and ``architecture``
    (``uname -m``).
    """
    values = parse_os_release(os_release)
    ident = values.get("ID", "").lower()
    distribution = DISTRIBUTIONS.get(ident) or values.get("NAME") or ident or "unknown"
    version = values.get("VERSION_ID", "")
    point = debian_version.strip()
    if distribution == "Debian" and point[:1].isdigit():
        version = point
    return {
        "distribution": distribution,
        "distribution_version": version,
        "distribution_major_version": version.split(".")[0],
        "kernel": kernel.strip(),
        "architecture": machine.strip(),
    }


def parse_secure_boot(text: str) -> bool | None:
    """Secure Boot state from ``mokutil --sb-state``: True, False, or None when unknown."""
    lowered = text.lower()
    if "secureboot enabled" in lowered:
        return True
    if "secureboot disabled" in lowered or "doesn't support secure boot" in lowered:
        return False
    return None


def _text_if_ok(rc: Status, text: str) -> str:
    return text if rc == 0 else ""


OS_RELEASE = Fact("os_release", ("cat", "/etc/os-release"), _text_if_ok)
DEBIAN_VERSION = Fact("debian_version", ("cat", "/etc/debian_version"), _text_if_ok)
KERNEL = Fact("kernel", ("uname", "-r"), lambda rc, text: text.strip())
MACHINE = Fact("machine", ("uname", "-m"), _text_if_ok)
SECURE_BOOT = Fact(
    "mokutil",
    ("mokutil", "--sb-state"),
    lambda rc, text: parse_secure_boot(text) if rc is not None else None,
)
# The node's first own address (hostname(1) -I: every configured address, space-separated,
# loopback left out); None when there is none or hostname cannot say.
ADDRESS = Fact(
    "address",
    ("hostname", "-I"),
    lambda rc, text: text.split()[0] if rc == 0 and text.split() else None,
)
