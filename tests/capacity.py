"""What a command costs the control machine, and how many nodes that machine serves per hour:
the meter of the capacity benchmark (tests/bench/test_bench_capacity.py), unit-tested in
tests/unit/core/test_capacity.py.

:func:`metered` runs a command under a meter process of its own (``python capacity.py``),
which makes itself the subreaper of everything the command starts, so that the SSH
connection masters Ansible leaves behind (``ControlPersist``) come back to it rather than to
init. While the command runs, the meter samples ``/proc`` every ``interval`` seconds: the
summed RSS of every live process under it (an upper bound: pages a fork shares with its
parent count in both) and their summed PSS (``smaps_rollup``: each shared page split between
the processes that share it). When the command exits, the meter ends what is left under it
(those masters) with SIGTERM, reaps everything, and reads ``RUSAGE_CHILDREN``: the user and
system CPU-seconds of the command and of all its descendants, each counted once it was
reaped (Ansible reaps its forks and their ``ssh``; the meter reaps the rest). Processes that
are not descendants (the Docker engine, the lab's containers, children of containerd) are
not counted.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
PAGE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
GIB = 1024 * MIB


@dataclass(frozen=True)
class Usage:
    """One metered command: its exit status, wall time, the CPU-seconds of its process tree,
    the peaks of the tree's summed RSS and PSS, and the most CPU one process of it used (the
    part that more cores would not spread)."""

    returncode: int
    wall_s: float
    cpu_s: float
    peak_rss: int
    peak_pss: int
    busiest_cpu_s: float
    samples: int


def metered(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    stdout: Path,
    stderr: Path,
    timeout: float = 1800,
    interval: float = 0.1,
) -> Usage:
    """Run ``argv`` under a fresh meter process; its output goes to ``stdout`` and ``stderr``."""
    report = stdout.with_name(stdout.name + ".usage.json")
    subprocess.run(
        [sys.executable, __file__, str(report), str(stdout), str(stderr), str(interval), *argv],
        env=None if env is None else dict(env),
        cwd=cwd,
        check=True,
        timeout=timeout,
    )
    return Usage(**json.loads(report.read_text()))


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as handle:
                found += [int(c) for c in handle.read().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (through ``/proc/<pid>/task/<tid>/children``)."""
    found: list[int] = []
    todo = _children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += _children(child)
    return found


def _stat(pid: int) -> tuple[float, int] | None:
    """CPU-seconds so far and resident bytes of one process (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    # After the ")" of comm: state is field 3, utime 14, stime 15, rss 24 (proc(5)).
    return (int(fields[11]) + int(fields[12])) / ticks, int(fields[21]) * PAGE


def _pss(pid: int) -> int:
    """Proportional set size of one process in bytes (``/proc/<pid>/smaps_rollup``), 0 when
    it is gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _meter(report: Path, out: Path, err: Path, interval: float, argv: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    me = os.getpid()
    peak = peak_pss = samples = 0
    busiest: dict[int, float] = {}
    returncode: int | None = None

    def reap() -> None:
        nonlocal returncode
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == proc.pid:
                returncode = os.waitstatus_to_exitcode(status)

    start = time.monotonic()
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr)
    while returncode is None:
        total = pss = 0
        for pid in descendants(me):
            stat = _stat(pid)
            if stat is not None:
                busiest[pid] = max(busiest.get(pid, 0.0), stat[0])
                total += stat[1]
                pss += _pss(pid)
        peak, peak_pss = max(peak, total), max(peak_pss, pss)
        samples += 1
        time.sleep(interval)
        reap()
    wall = time.monotonic() - start
    # What the command left behind (SSH masters kept for ControlPersist) came back to the
    # meter: end it, so its CPU is counted with the command that started it.
    deadline = time.monotonic() + 10
    while (left := descendants(me)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM if time.monotonic() < deadline - 5 else signal.SIGKILL)
        time.sleep(0.05)
        reap()
    reap()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report.write_text(
        json.dumps(
            {
                "returncode": returncode,
                "wall_s": wall,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "peak_rss": peak,
                "peak_pss": peak_pss,
                "busiest_cpu_s": max(busiest.values(), default=0.0),
                "samples": samples,
            }
        )
    )


@dataclass(frozen=True)
class Point:
    """One measured run: a phase (first converge, acceptance...) on ``nodes`` nodes."""

    phase: str
    nodes: int
    usage: Usage


@dataclass(frozen=True)
class Capacity:
    """Nodes per hour a control machine serves through ``phases``, one after the other per
    node, each phase costed per node by its largest measured run (its fixed cost spread over
    that run's nodes: an upper bound on what one more node costs).

    A node holds ``cpu_s`` CPU-seconds, ``memory_s`` byte-seconds (each phase's peak RSS per
    node for that phase's wall time) and ``wall_s`` seconds of one run (each phase's wall time
    per node). The machine has ``cores`` x 3,600 CPU-seconds and ``memory`` x 3,600
    byte-seconds an hour; one run at a time turns over 3,600 / ``wall_s`` nodes an hour (a run
    works on at most Ansible's ``forks`` nodes at once). Whichever allows fewest binds."""

    phases: tuple[str, ...]
    cores: int
    memory: int
    cpu_s: float
    memory_s: float
    wall_s: float
    busiest_s: float

    @property
    def cpu_nodes_h(self) -> float:
        return self.cores * 3600 / self.cpu_s

    @property
    def memory_nodes_h(self) -> float:
        return self.memory * 3600 / self.memory_s

    @property
    def wall_nodes_h(self) -> float:
        """One run at a time, back to back: what several runs at once (inventory slices) lift,
        until the cores or the memory run out."""
        return 3600 / self.wall_s

    @property
    def one_run_nodes_h(self) -> float:
        """The ceiling of one run whatever the cores: its busiest process (Ansible's main
        process, gpunode's own) runs on one core."""
        return 3600 / self.busiest_s

    def limits(self) -> dict[str, float]:
        """Nodes per hour each resource allows, the machine's (CPU, memory) then one run's."""
        return {
            "CPU": self.cpu_nodes_h,
            "memory": self.memory_nodes_h,
            "wall time (one run at a time)": self.wall_nodes_h,
        }

    @property
    def machine_binding(self) -> str:
        """What runs out first on the machine, runs at once as many as it takes."""
        return "CPU" if self.cpu_nodes_h <= self.memory_nodes_h else "memory"

    @property
    def machine_nodes_h(self) -> float:
        return min(self.cpu_nodes_h, self.memory_nodes_h)

    @property
    def binding(self) -> str:
        """What runs out first, one run at a time included."""
        limits = self.limits()
        return min(limits, key=lambda k: limits[k])

    @property
    def nodes_h(self) -> float:
        return min(self.limits().values())

    def scaled(self, cores: int, memory: int) -> Capacity:
        """The same per-node costs on another machine (an extrapolation, not a measurement)."""
        return replace(self, cores=cores, memory=memory)


def largest(points: Sequence[Point], phase: str) -> Point:
    """The phase's run on the most nodes (the first of them when several)."""
    runs = [p for p in points if p.phase == phase]
    if not runs:
        raise ValueError(f"no measured run of {phase!r}")
    return max(runs, key=lambda p: p.nodes)


def capacity(points: Sequence[Point], phases: Sequence[str], cores: int, memory: int) -> Capacity:
    """What one node costs through ``phases`` (each by its largest run), and what that makes
    of a machine with ``cores`` and ``memory`` bytes."""
    runs = [largest(points, phase) for phase in phases]
    return Capacity(
        phases=tuple(phases),
        cores=cores,
        memory=memory,
        cpu_s=sum(r.usage.cpu_s / r.nodes for r in runs),
        memory_s=sum(r.usage.peak_rss / r.nodes * r.usage.wall_s for r in runs),
        wall_s=sum(r.usage.wall_s / r.nodes for r in runs),
        busiest_s=sum(r.usage.busiest_cpu_s / r.nodes for r in runs),
    )


def machine() -> tuple[int, int]:
    """This machine's cores (those this process may run on) and memory (MemTotal), in bytes."""
    with open("/proc/meminfo") as handle:
        total = next(line for line in handle if line.startswith("MemTotal:"))
    return len(os.sched_getaffinity(0)), int(total.split()[1]) * 1024


if __name__ == "__main__":
    _meter(
        Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), float(sys.argv[4]), sys.argv[5:]
    )
