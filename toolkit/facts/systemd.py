"""systemd units gpunode adjusts: the packaged ``nvidia-persistenced.service``."""

from __future__ import annotations

import shlex

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
