"""gpunode's passive checks on the node itself, as Slurm's ``HealthCheckProgram`` or from a
systemd timer (sites without Slurm: ``--no-slurm``, role ``slurm_healthcheck`` with
``gpunode_check_timer``).

slurmd runs the program as root on every node each ``HealthCheckInterval`` seconds (and once
when it starts, before it registers), kills it after 60 s, and leaves every action to it
("Any action to be taken must be explicitly performed by the program (e.g. execute
``scontrol update NodeName=foo State=drain Reason=...``)": slurm.conf(5), HealthCheckProgram,
https://slurm.schedmd.com/slurm.conf.html). One run:

1. reads every passive signal with ``probe.main`` (what ``gpunode check`` reads over SSH);
2. judges them with ``rules.judge`` (what ``gpunode check`` judges with on the control
   machine: acceptance's passive rules, AER deltas, RDMA ports, units);
3. writes the node's state through ``nodestate.after_check``: a ready node that fails turns
   not-ready with the reasons, a clean check changes no standing, the counters are kept for
   the next check's deltas (under the state file's lock, ``nodefile.update``, and only when
   no other writer changed it while the check ran);
4. with ``--textfile PATH``, writes node_exporter's textfile (``report.prometheus``, replaced
   whole);
5. unless ``--no-slurm``, marks Slurm as acceptance's hook does (``hooks.SlurmHook``, the
   LBNL NHC rule): a node the check holds not-ready is drained with
   ``Reason="gpunode: <failed checks>"``, unless it is already drained with a reason that is
   not gpunode's (that reason is kept). A clean check resumes nothing: a node comes back only
   through re-acceptance (``gpunode up``), whose hook resumes it when its drain reason is
   gpunode's.

What the node must be (expectations per OS, thresholds, critical XIDs, the GPU catalogue's
names) is computed on the control machine from the inventory and installed beside the
program as :data:`SETTINGS_PATH` (role ``slurm_healthcheck``); :class:`Settings` is its one
schema. Standard library only: the program is this module and the ones it imports, carried
in one Python file (``payload.inline_program``, ``install.program``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from toolkit.acceptance import failure
from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.hooks import (
    CommandRunner,
    HookAction,
    NodeMark,
    SlurmHook,
    local_runner,
)
from toolkit.check import probe, rules
from toolkit.node import nodefile, nodestate
from toolkit.report import prometheus
from toolkit.stack import gpunames

# Where the role installs the program and its settings (roles/slurm_healthcheck/defaults).
PROGRAM_PATH = "/usr/local/sbin/gpunode-healthcheck"
SETTINGS_PATH = "/etc/gpunode/healthcheck.json"
SCHEMA = 1
# The system's command folders, added to whatever PATH slurmd gives the program (nvidia-smi,
# systemctl, journalctl and scontrol are found through it).
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


@dataclass(frozen=True)
class Thresholds:
    """The thresholds the passive rules read (``health_checks.HealthSpec``), as shipped."""

    check_pcie: bool = True
    check_throttle: bool = True
    pcie_gen: int | None = None
    pcie_width: int | None = None
    critical_xids: list[int] | None = None
    xid_window_h: float | None = None


@dataclass(frozen=True)
class XidName:
    """One catalogued XID's name, NVIDIA's action, gpunode's failure class and the action in
    words (``health_checks.XidInfo``). Settings written before the class read as hardware,
    the class never re-accepted on its own."""

    name: str
    action: str
    failure_class: str = "hardware"
    todo: str = "do the action NVIDIA's Xid catalog gives this XID"
    # False: shown, never failing on its own (``thresholds.CriticalXid.fails``).
    fails: bool = True


@dataclass(frozen=True)
class Settings:
    """What the control machine installs beside the program (:data:`SETTINGS_PATH`)."""

    node_name: str  # the node's name in Slurm
    probe: dict[str, Any]  # what probe.main reads (``steps.check`` builds the same)
    expected: dict[str, rules.Expected]  # per OS id
    thresholds: Thresholds
    xids: dict[int, XidName]
    gpu_models: dict[str, str]  # normalised name -> model (``catalog.model_index``)
    compute_nics: list[str] | None = None
    scontrol: str = "scontrol"
    state_file: str = nodestate.PATH

    def to_dict(self) -> dict[str, Any]:
        """As the JSON document installed on the node."""
        return {
            "schema": SCHEMA,
            "node_name": self.node_name,
            "probe": self.probe,
            "expected": {
                system: {"node": asdict(e.node), "units": dict(e.units)}
                for system, e in sorted(self.expected.items())
            },
            "thresholds": asdict(self.thresholds),
            "xids": {str(n): asdict(x) for n, x in sorted(self.xids.items())},
            "gpu_models": dict(sorted(self.gpu_models.items())),
            "compute_nics": self.compute_nics,
            "scontrol": self.scontrol,
            "state_file": self.state_file,
        }

    def model_of(self, name: str) -> str | None:
        """A GPU name's model, by the catalogue's names shipped here."""
        return gpunames.find(self.gpu_models, name)


class SettingsError(Exception):
    """The settings file is missing or malformed (the message names the key)."""


def settings_from(doc: Any, source: str = SETTINGS_PATH) -> Settings:
    """Read the settings document.

    Raises:
        SettingsError: A key is missing or of the wrong shape (named with ``source``).
    """
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise SettingsError(f"{source}: expected a document with schema {SCHEMA}")
    try:
        expected = {
            str(system): rules.Expected(NodeExpectation(**entry["node"]), dict(entry["units"]))
            for system, entry in dict(doc["expected"]).items()
        }
        return Settings(
            node_name=str(doc["node_name"]),
            probe=dict(doc["probe"]),
            expected=expected,
            thresholds=Thresholds(**doc["thresholds"]),
            xids={int(n): XidName(**x) for n, x in dict(doc["xids"]).items()},
            gpu_models={str(k): str(v) for k, v in dict(doc["gpu_models"]).items()},
            compute_nics=list(doc["compute_nics"]) if doc.get("compute_nics") else None,
            scontrol=str(doc.get("scontrol") or "scontrol"),
            state_file=str(doc.get("state_file") or nodestate.PATH),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise SettingsError(f"{source}: malformed settings: {err!r}") from None


@dataclass
class Outcome:
    """One run of the health check."""

    checks: list[Check] = field(default_factory=list)
    state_before: str | None = None
    state: dict[str, Any] = field(default_factory=dict)
    slurm: HookAction | None = None
    written: bool = False  # the state file
    started: float = 0.0  # seconds since the epoch
    duration_s: float = 0.0

    @property
    def failures(self) -> list[str]:
        """The failed checks, a line each."""
        return [f"{c.name}: {c.message}" for c in self.checks if not c.ok]

    def summary(self) -> str:
        """One line for slurmd's log."""
        state = self.state.get("state") or self.state_before or "unknown"
        slurm = f"; slurm: {self.slurm.action} ({self.slurm.detail})" if self.slurm else ""
        failed = "; ".join(self.failures)
        return f"gpunode health check: {state}" + (f": {failed}" if failed else ", clean") + slurm


def mark(
    settings: Settings,
    checks: Sequence[Check],
    state: Mapping[str, Any],
    runner: CommandRunner,
) -> HookAction | None:
    """What Slurm is told after a check: nothing when the check passed or the node is not held
    not-ready by a check; else acceptance's Slurm hook with a not-ready mark, which drains the
    node with gpunode's reason, led by the failures' heaviest class (``gpunode[hardware]:``),
    unless someone else drained it."""
    failed = [c for c in checks if not c.ok]
    if not failed or not nodestate.held_by_check(state):
        return None
    hook = SlurmHook(runner, settings.scontrol)
    reasons = tuple(f"{c.name}: {c.message}" for c in failed)
    leading = failure.leading([c.failure_class for c in failed])
    return hook.apply(NodeMark(settings.node_name, settings.node_name, False, reasons, leading))


def run(
    settings: Settings, runner: CommandRunner | None = local_runner, textfile: str | None = None
) -> Outcome:
    """One health check of this node: probe, judge, write the state, the textfile (when
    ``textfile`` names one), mark Slurm (unless ``runner`` is None)."""
    outcome = Outcome(started=time.time())
    clock = time.monotonic()
    text = nodefile.read(settings.state_file)
    read = probe.main({**settings.probe, "state_file": settings.state_file})
    current = nodestate.parse(text)
    before = current.get("check") if isinstance(current.get("check"), dict) else None
    outcome.state_before = current.get("state")
    outcome.checks, baseline = rules.judge(
        read,
        settings.expected,
        settings.thresholds,
        before,
        compute_nics=settings.compute_nics,
        xids=settings.xids,
        model_of=settings.model_of,
    )
    outcome.state = nodestate.after_check(current, outcome.failures, baseline)

    # A node gpunode never wrote to keeps no file; a file another writer (a provision, an
    # acceptance) changed while this check ran is theirs: the next interval judges anew.
    def change(now: str | None) -> str | None:
        return nodestate.render(outcome.state) if text is not None and now == text else None

    outcome.written = nodefile.update(settings.state_file, change) is not None
    if outcome.written and runner is not None:
        outcome.slurm = mark(settings, outcome.checks, outcome.state, runner)
    outcome.duration_s = time.monotonic() - clock
    if textfile:
        shown = outcome.state if outcome.written else current
        nodefile.replace(
            textfile,
            prometheus.render_check_textfile(
                str(shown.get("state") or "unknown"),
                [(c.name, c.outcome) for c in outcome.checks],
                outcome.started,
                outcome.duration_s,
            ),
        )
    return outcome


def main(argv: Sequence[str]) -> int:
    """``gpunode-healthcheck [--no-slurm] [--textfile PATH] [SETTINGS]``: one check; 0 when it
    ran (whatever it found: a failure is acted on, not returned, as slurmd only logs the
    status), 1 when the state file or the textfile could not be written, 2 for unusable
    settings or arguments."""
    parser = argparse.ArgumentParser(prog="gpunode-healthcheck")
    parser.add_argument("settings", nargs="?", default=SETTINGS_PATH)
    parser.add_argument("--no-slurm", action="store_true", help="mark nothing in Slurm")
    parser.add_argument("--textfile", help="write node_exporter's textfile here")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exit_:
        return 2 if exit_.code else 0
    path = args.settings
    have = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    os.environ["PATH"] = os.pathsep.join(have + [p for p in SYSTEM_PATH if p not in have])
    try:
        with open(path, encoding="utf-8") as handle:
            settings = settings_from(json.load(handle), path)
    except (OSError, ValueError, SettingsError) as err:
        print(f"gpunode health check: {err}", file=sys.stderr)
        return 2
    try:
        outcome = run(settings, None if args.no_slurm else local_runner, args.textfile)
    except (OSError, TimeoutError) as err:  # the state file, its lock or the textfile
        print(f"gpunode health check: {err}", file=sys.stderr)
        return 1
    print(outcome.summary())
    return 0
