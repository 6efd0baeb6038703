"""Progress in any log (issue 42): a long phase says where it is at least every interval while
it runs, with plain lines when the output is not a terminal; a terminal keeps the live panel.

Timing tests run a real heartbeat thread with a short interval; the exact rules are checked
with a fake clock.
"""

from __future__ import annotations

import io
import os
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from shared_fixtures import Recorder, heartbeat_threads

from toolkit.ansible.events import EventCollector
from toolkit.cli.display import LiveProgress, PlainProgress, live_display
from toolkit.errors import LabError
from toolkit.lab import image as lab_image
from toolkit.lab.image import debootstrap_stage
from toolkit.lab.proc import run_lines
from toolkit.progress import Heartbeat

INTERVAL = 0.1


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_silent_phase_says_where_it_is_every_interval_and_not_more_often() -> None:
    said = Recorder()
    with Heartbeat(said, "node image", what="debootstrap", total=3, interval=INTERVAL) as beat:
        entered = time.monotonic()
        time.sleep(INTERVAL * 3.5)
        beat.update("debootstrap: Extracting zlib1g", done=1)
        time.sleep(INTERVAL * 2.5)
    left = time.monotonic()
    times = [entered, *(at for at, _line in said.lines)]
    gaps = [later - earlier for earlier, later in pairwise(times)]
    assert len(said.lines) >= 3, said.text
    # Never more often than the interval (a little under: the thread waits on a monotonic clock).
    assert all(gap >= INTERVAL * 0.9 for gap in gaps), gaps
    assert all(at <= left for at, _line in said.lines)
    assert said.text[0].startswith("node image: debootstrap (0/3, ")
    assert said.text[-1].startswith("node image: debootstrap: Extracting zlib1g (1/3, ")
    assert all(line.endswith(" s)") for line in said.text)


def test_the_beat_counts_silence_from_the_last_line_said() -> None:
    clock, said = FakeClock(), Recorder()
    beat = Heartbeat(said, "image build", total=9, interval=15, clock=clock)
    beat._running = True  # as inside the context, without the thread: the test is the clock
    clock.now += 14.9
    assert not beat.beat()
    clock.now += 0.1
    beat.update("Step 3/9 : RUN apt-get install", done=2)
    assert beat.beat()
    assert said.text == ["image build: Step 3/9 : RUN apt-get install (2/9, 15 s)"]
    clock.now += 10
    beat.say("Step 4/9 : COPY runner /opt")  # a line of the phase's own: silence starts again
    clock.now += 10
    assert not beat.beat()
    clock.now += 5
    assert beat.beat()
    beat.uncounted("normalising")
    clock.now += 15
    assert beat.beat()
    assert said.text[-1] == "image build: normalising (55 s)"


def test_no_line_after_the_phase_ends_and_no_thread_is_left() -> None:
    said = Recorder()
    with Heartbeat(said, "acceptance", total=2, interval=INTERVAL):
        time.sleep(INTERVAL * 1.5)
    ended = time.monotonic()
    count = len(said.lines)
    time.sleep(INTERVAL * 3)
    assert len(said.lines) == count
    assert all(at <= ended for at, _line in said.lines)
    assert heartbeat_threads() == []


def test_a_failing_phase_stops_its_heartbeat_too() -> None:
    said = Recorder()
    with pytest.raises(LabError), Heartbeat(said, "node image", interval=INTERVAL):
        raise LabError("debootstrap failed")
    assert heartbeat_threads() == []


def test_the_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        Heartbeat(lambda _m: None, "x", interval=0)


# --- playbooks ---------------------------------------------------------------------------------


def ev(kind: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "event_data": data}


def _play(display: Any, pause: float) -> None:
    """A provision run in miniature: one task done on one host of two, then a long task."""
    collector = EventCollector()
    with display as live:
        collector.add_listener(live)
        collector.handle(ev("playbook_on_play_start", play="Install the pinned NVIDIA stack"))
        collector.handle(ev("playbook_on_task_start", task="Install the driver", role="driver"))
        collector.handle(ev("runner_on_start", host="n1"))
        collector.handle(ev("runner_on_start", host="n2"))
        collector.handle(ev("runner_on_ok", host="n1", res={"changed": True}))
        time.sleep(pause)
        collector.handle(ev("runner_on_ok", host="n2", res={"changed": True}))


def test_a_playbook_in_a_log_prints_plain_lines_with_task_and_hosts_done() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=80, force_terminal=False)
    display = live_display(False, console=console, interval=INTERVAL)
    assert display is not None
    progress = display("provision", False)
    assert isinstance(progress, PlainProgress)
    _play(progress, INTERVAL * 3.5)
    lines = buffer.getvalue().splitlines()
    assert lines[0] == "provision: play Install the pinned NVIDIA stack"
    beats = [line for line in lines[1:-1] if "task 1: driver : Install the driver" in line]
    assert len(beats) >= 2, lines
    assert all("(1/2, " in line for line in beats)
    assert lines[-1].startswith("provision: ended, 2 host(s), ok 0  changed 2  failed 0")
    assert "\x1b" not in buffer.getvalue()  # plain text: no cursor movement, no colour


def test_a_playbook_gap_between_lines_is_never_shorter_than_the_interval() -> None:
    said = Recorder()
    progress = PlainProgress(said, "provision", interval=INTERVAL)
    _play(progress, INTERVAL * 4.5)
    times = [at for at, line in said.lines if "(1/2, " in line]
    gaps = [later - earlier for earlier, later in pairwise(times)]
    assert len(times) >= 3, said.text
    assert all(gap >= INTERVAL * 0.9 for gap in gaps), gaps
    assert heartbeat_threads() == []


def test_a_terminal_keeps_the_live_display() -> None:
    console = Console(file=io.StringIO(), width=80, force_terminal=True)
    display = live_display(False, console=console, interval=INTERVAL)
    assert display is not None
    assert isinstance(display("provision", False), LiveProgress)


def test_json_has_no_display_at_all() -> None:
    assert live_display(True) is None


# --- debootstrap -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "stage"),
    [
        ("I: Retrieving InRelease ", "Retrieving InRelease"),
        ("I: Extracting zlib1g...", "Extracting zlib1g"),
        ("I: Configuring the base system...", "Configuring the base system"),
        ("W: Cannot check Release signature", None),
        ("Get:1 http://deb.debian.org/debian bookworm InRelease", None),
        ("I: ", None),
    ],
)
def test_debootstrap_stages_come_from_its_info_lines(line: str, stage: str | None) -> None:
    assert debootstrap_stage(line) == stage


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="debootstrap builds need root")
def test_debootstrap_reports_its_stages_while_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "debootstrap"  # replaced at the process boundary, as in test_cold_start
    stub.write_text(
        "#!/bin/sh\necho 'I: Retrieving InRelease'\necho 'Get: noise'\n"
        "echo 'I: Extracting zlib1g...' >&2\necho 'E: out of space' >&2\nexit 1\n"
    )
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("GPUNODE_LAB_HOME", str(tmp_path / "lab"))
    stages: list[str] = []
    with pytest.raises(LabError, match=r"exit code 1: .*E: out of space"):
        lab_image.debootstrap(tmp_path / "rootfs", ("sudo",), stages.append)
    assert stages == ["Retrieving InRelease", "Extracting zlib1g"]


def test_a_long_command_hands_over_its_lines_as_they_come() -> None:
    seen: list[tuple[float, str]] = []
    script = "echo 'I: Retrieving'; sleep 0.3; echo 'I: Extracting' >&2"
    started = time.monotonic()
    run_lines(["sh", "-c", script], lambda line: seen.append((time.monotonic(), line)))
    assert [line for _at, line in seen] == ["I: Retrieving", "I: Extracting"]
    assert seen[0][0] - started < 0.3 <= seen[1][0] - started  # streamed, not at the end


def test_a_long_command_that_fails_or_hangs_is_a_lab_error() -> None:
    with pytest.raises(LabError, match="exit code 3: out of space"):
        run_lines(["sh", "-c", "echo 'out of space'; exit 3"], lambda _line: None)
    with pytest.raises(LabError, match="did not finish within 0s"):
        run_lines([sys.executable, "-c", "import time; time.sleep(5)"], print, timeout=0.2)
