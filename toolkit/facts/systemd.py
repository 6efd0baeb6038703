"""systemd units gpunode adjusts: the packaged ``nvidia-persistenced.service``; and the units
gpunode installs itself, as the facts probe lists them."""

from __future__ import annotations

import shlex

from toolkit.facts.probe import Fact, Status

# Where an administrator's (and a role's) units go: systemd.unit(5), "Unit File Load Path",
# /etc/systemd/system ("System units created by the administrator").
UNIT_DIR = "/etc/systemd/system"
# gpunode's own units there are named gpunode-* (role slurm_healthcheck's timer and service).
OWN_UNIT_PREFIX = "gpunode-"


def parse_own_units(rc: Status, text: str) -> list[str] | None:
    """The names of gpunode's unit files in :data:`UNIT_DIR`, sorted; None when unknown (find
    missing or failed), so a role looks for itself."""
    if rc != 0:
        return None
    return sorted(line for line in text.splitlines() if line.startswith(OWN_UNIT_PREFIX))


OWN_UNITS = Fact(
    "own_units",
    ("find", UNIT_DIR, "-maxdepth", "1", "-name", f"{OWN_UNIT_PREFIX}*", "-printf", "%f\\n"),
    parse_own_units,
)

PERSISTENCED = "/usr/bin/nvidia-persistenced"
# systemd's ExecStart= prefixes before the command (systemd.service(5), "Command lines").
_EXEC_PREFIXES = "-@:+!"


def persistence_exec_start(unit: str) -> str:
    """The ``ExecStart=`` of a drop-in that turns persistence mode on in a packaged unit.

    ``unit`` is the text of the installed ``nvidia-persistenced.service``. Its command line is
    kept, the user it names included (Debian's unit runs the daemon as ``nvpd``, Ubuntu's as
    ``nvidia-persistenced``: tests/data/real/SOURCES.md); ``--no-persistence-mode`` becomes
    ``--persistence-mode``. A unit without ``--user``, or no unit (not installed yet, in check
    mode), runs the daemon as root, as NVIDIA's own role does
    (NVIDIA/ansible-role-nvidia-driver, files/nvidia-persistenced-override.conf).
    """
    command: list[str] = []
    section = ""
    for raw in unit.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
        elif section == "[Service]" and line.startswith("ExecStart="):
            # An empty assignment resets the list; the last command line is the one that runs.
            command = shlex.split(line.removeprefix("ExecStart=").lstrip(_EXEC_PREFIXES))
    if not command:
        command = [PERSISTENCED]
    args = [a for a in command[1:] if a not in ("--no-persistence-mode", "--persistence-mode")]
    if not any(a in ("--user", "-u") or a.startswith("--user=") for a in args):
        args = ["--user", "root", *args]
    return shlex.join([command[0], *args, "--persistence-mode"])
