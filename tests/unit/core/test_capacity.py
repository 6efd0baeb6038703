"""The capacity benchmark's meter and arithmetic (tests/capacity.py), on real processes."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from capacity import GIB, MIB, Point, Usage, capacity, largest, machine, metered

# Burns 0.4 CPU-seconds holding 150 MiB; "orphan" first leaves a child behind that outlives
# it (as ssh's ControlPersist master outlives Ansible), burning the same.
WORKER = textwrap.dedent(
    """
    import os, sys, time
    if sys.argv[1:] == ["orphan"] and os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            held = bytearray(150 * 1024 * 1024)
            start = time.process_time()
            while time.process_time() - start < 0.4:
                pass
            time.sleep(60)
        os._exit(0)
    held = bytearray(150 * 1024 * 1024)
    start = time.process_time()
    while time.process_time() - start < 0.4:
        pass
    time.sleep(0.3)
    sys.exit(3)
    """
)


def test_the_meter_counts_the_whole_tree_and_what_it_leaves_behind(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    usage = metered(
        [sys.executable, str(script), "orphan"],
        stdout=tmp_path / "out",
        stderr=tmp_path / "err",
        timeout=30,
    )
    assert usage.returncode == 3
    # Both burners counted: the command's own and its orphan's, ended and reaped by the meter.
    assert usage.cpu_s >= 0.8, usage
    assert usage.busiest_cpu_s < usage.cpu_s
    assert usage.peak_rss >= 300 * MIB and usage.peak_pss >= 300 * MIB, usage
    assert usage.wall_s < 20 and usage.samples >= 3


def test_pss_counts_the_pages_a_fork_shares_once_and_rss_twice(tmp_path: Path) -> None:
    # 200 MiB written, then a fork that never touches them: both map the same pages.
    script = "import os, time; held = bytearray(200 << 20); os.fork(); time.sleep(1.5)"
    usage = metered(
        [sys.executable, "-c", script], stdout=tmp_path / "o", stderr=tmp_path / "e", timeout=30
    )
    assert usage.returncode == 0
    assert usage.peak_rss >= 400 * MIB, usage
    # PSS splits the shared 200 MiB (about 200 + 2 interpreters); RSS counts them twice. One
    # sample is not atomic across processes: one that reads the parent just before the fork and
    # the child just after it sees 200 + 100 MiB (324 MiB seen once under load); never 400.
    assert 200 * MIB <= usage.peak_pss <= usage.peak_rss - 100 * MIB, usage


def test_the_meter_passes_the_output_through(tmp_path: Path) -> None:
    usage = metered(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
        stdout=tmp_path / "o",
        stderr=tmp_path / "e",
    )
    assert usage.returncode == 0
    assert (tmp_path / "o").read_text() == "out\n" and (tmp_path / "e").read_text() == "err\n"


def _usage(wall: float, cpu: float, rss_mib: float, busiest: float | None = None) -> Usage:
    rss = int(rss_mib * MIB)
    return Usage(0, wall, cpu, rss, rss // 2, cpu if busiest is None else busiest, 10)


def test_each_phase_is_costed_by_its_largest_run() -> None:
    points = [
        Point("converge", 1, _usage(40, 12, 200)),
        Point("converge", 4, _usage(90, 40, 400)),
        Point("accept", 2, _usage(10, 1, 80, busiest=0.8)),
    ]
    assert largest(points, "converge").nodes == 4
    cap = capacity(points, ("converge", "accept"), cores=2, memory=24 * GIB)
    assert cap.cpu_s == pytest.approx(40 / 4 + 1 / 2)
    assert cap.memory_s == pytest.approx((400 / 4 * 90 + 80 / 2 * 10) * MIB)
    assert cap.wall_s == pytest.approx(90 / 4 + 10 / 2)
    assert cap.cpu_nodes_h == pytest.approx(2 * 3600 / 10.5)
    assert cap.wall_nodes_h == pytest.approx(3600 / 27.5)
    # One run at a time, 27.5 s a node: 131 nodes/hour, under the 686 the cores allow.
    assert cap.binding == "wall time (one run at a time)" and cap.nodes_h == cap.wall_nodes_h
    assert cap.machine_binding == "CPU" and cap.machine_nodes_h == cap.cpu_nodes_h
    assert cap.one_run_nodes_h == pytest.approx(3600 / (10 + 0.4))
    bigger = cap.scaled(16, 64 * GIB)
    assert bigger.machine_nodes_h == pytest.approx(8 * cap.machine_nodes_h)
    assert bigger.wall_nodes_h == cap.wall_nodes_h
    with pytest.raises(ValueError, match="no measured run of 'push'"):
        capacity(points, ("push",), cores=2, memory=GIB)


def test_memory_binds_when_a_node_holds_more_than_the_machine_turns_over() -> None:
    points = [Point("converge", 2, _usage(3600, 1, 2048))]
    cap = capacity(points, ("converge",), cores=2, memory=4 * GIB)
    # 1 GiB per node for an hour, 4 GiB: 4 nodes an hour; the CPU would allow 14,400, one run
    # at a time (2 nodes an hour) fewer still.
    assert cap.memory_nodes_h == pytest.approx(4) and cap.cpu_nodes_h == pytest.approx(14400)
    assert cap.machine_binding == "memory" and cap.machine_nodes_h == pytest.approx(4)
    assert cap.limits() == {
        "CPU": pytest.approx(14400),
        "memory": pytest.approx(4),
        "wall time (one run at a time)": pytest.approx(2),
    }
    assert cap.binding == "wall time (one run at a time)" and cap.nodes_h == pytest.approx(2)


def test_this_machine_is_read_from_the_kernel() -> None:
    cores, memory = machine()
    assert cores >= 1 and memory > 256 * MIB
