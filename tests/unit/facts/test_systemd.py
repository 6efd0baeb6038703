"""The persistence-mode drop-in keeps the packaged nvidia-persistenced command line and user.

The real Debian unit and the other shapes' sources: tests/data/real/SOURCES.md.
"""

from __future__ import annotations

import pytest
from shared_fixtures import REPO

from toolkit.facts.systemd import persistence_exec_start
from toolkit.plugins.filter.gpunode import FilterModule

REAL = REPO / "tests" / "data/real"

# Ubuntu's packaged unit, as `systemctl status nvidia-persistenced` prints its ExecStart on
# Ubuntu 22.04 (public captures; tests/data/real/SOURCES.md).
UBUNTU = """\
[Unit]
Description=NVIDIA Persistence Daemon
Wants=syslog.target

[Service]
Type=forking
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose
ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced
"""


def test_debians_unit_keeps_nvpd() -> None:
    unit = (REAL / "debian-nvidia-persistenced.service").read_text()
    assert (
        persistence_exec_start(unit)
        == "/usr/bin/nvidia-persistenced --user nvpd --persistence-mode"
    )


def test_ubuntus_unit_keeps_its_user_and_drops_no_persistence_mode() -> None:
    assert persistence_exec_start(UBUNTU) == (
        "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose --persistence-mode"
    )


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        # No --user: root, as NVIDIA's role runs it.
        ("[Service]\nExecStart=/usr/bin/nvidia-persistenced --verbose\n",
         "/usr/bin/nvidia-persistenced --user root --verbose --persistence-mode"),
        # Not installed yet (check mode on a fresh node): nothing to read.
        ("", "/usr/bin/nvidia-persistenced --user root --persistence-mode"),
        # The other spellings of the user option; a group is kept.
        ("[Service]\nExecStart=/usr/bin/nvidia-persistenced --user=nvpd --group video\n",
         "/usr/bin/nvidia-persistenced --user=nvpd --group video --persistence-mode"),
        ("[Service]\nExecStart=-/usr/bin/nvidia-persistenced -u nvpd --persistence-mode\n",
         "/usr/bin/nvidia-persistenced -u nvpd --persistence-mode"),
        # A reset and a later assignment: the last command line is the one that runs;
        # ExecStart outside [Service] is not one.
        ("[Unit]\nExecStart=/bin/false\n[Service]\nExecStart=/usr/bin/nvidia-persistenced "
         "--user a\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user b\n",
         "/usr/bin/nvidia-persistenced --user b --persistence-mode"),
    ],
)  # fmt: skip
def test_persistence_exec_start(unit: str, expected: str) -> None:
    assert persistence_exec_start(unit) == expected


def test_the_role_reaches_it_as_a_filter() -> None:
    flt = FilterModule().filters()["gpunode_persistence_exec_start"]
    assert flt(UBUNTU) == persistence_exec_start(UBUNTU)
