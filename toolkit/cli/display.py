"""The terminal's view of a playbook run: the live panel (stderr), fed by
:class:`~toolkit.ansible.events.EventCollector`, and the per-host summary table.

:func:`live_display` is the :data:`toolkit.progress.Display` the commands hand to the steps:
on a terminal the live panel, in a log (stderr not a terminal) :class:`PlainProgress`, plain
lines at least every :data:`~toolkit.progress.HEARTBEAT_S` seconds.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from toolkit.ansible.events import EventCollector, HostSummary, RunResult, RunState
from toolkit.cli.output import err_console, shown
from toolkit.progress import HEARTBEAT_S, Display, Heartbeat, Progress


class LiveProgress:
    """A live panel: playbook, play, task, hosts and ok/changed/failed/unreachable counts.

    Failures are printed above the panel as they happen so that they stay on screen. On a
    console that is not a terminal the panel is not redrawn; only failures and the final
    state are printed.
    """

    def __init__(self, console: Console, playbook: str, check: bool = False) -> None:
        self.console = console
        self.playbook = playbook
        self.check = check
        self.started = time.monotonic()
        self._live = Live(
            self._render(None), console=console, refresh_per_second=8, transient=False
        )

    def __enter__(self) -> LiveProgress:
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._live.__exit__(exc_type, exc, tb)
        if not self.console.is_terminal:
            # Without a terminal the final panel is printed once, without a line end.
            self.console.print()

    def __call__(self, collector: EventCollector) -> None:
        """Redraw from the collector's state (an EventCollector listener)."""
        failure = collector.last_failure
        if failure is not None:
            what = "unreachable" if failure.unreachable else "failed"
            self.console.print(
                Text.assemble(
                    (f"{what}: ", "bold red"),
                    (failure.host, "bold"),
                    f" | {failure.task}: ",
                    failure.message.splitlines()[0] if failure.message else "",
                )
            )
            collector.last_failure = None
        self._live.update(self._render(collector))

    def _render(self, collector: EventCollector | None) -> Group:
        elapsed = time.monotonic() - self.started
        mode = " (check mode)" if self.check else ""
        head = Text.assemble(("gpunode ", "bold"), f"{self.playbook}{mode}  {elapsed:5.0f}s")
        if collector is None:
            return Group(head)
        state = collector.state
        counts = state.counts
        task = f"{state.role} : {state.task}" if state.role else state.task
        lines = [
            head,
            Text(f"play: {state.play}"),
            Text(f"task {state.tasks_started}: {task}"),
            Text.assemble(
                f"hosts {len(state.hosts)}  ",
                ("ok ", "green"),
                str(counts["ok"]),
                ("  changed ", "yellow"),
                str(counts["changed"]),
                ("  failed ", "red"),
                str(counts["failed"]),
                ("  unreachable ", "red"),
                str(counts["unreachable"]),
                ("  skipped ", "cyan"),
                str(counts["skipped"]),
            ),
        ]
        return Group(*lines)


class PlainProgress:
    """A playbook's progress as plain lines, for a log: the play when it starts, failures as
    they happen, and while nothing else is said, every ``interval`` seconds the task being run
    and how many hosts finished it (:class:`~toolkit.progress.Heartbeat`); a last line with the
    counts when the playbook ends.

    ``provision: play Install the driver, task 12: driver : Install nvidia-driver (1/2, 45 s)``
    """

    def __init__(
        self, say: Progress, playbook: str, check: bool = False, interval: float = HEARTBEAT_S
    ) -> None:
        self.playbook = playbook + (" (check mode)" if check else "")
        self.beat = Heartbeat(say, self.playbook, what="starting", interval=interval)
        self._play = ""
        self._state: RunState | None = None

    def __enter__(self) -> PlainProgress:
        self.beat.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.beat.__exit__(exc_type, exc, tb)  # the heartbeat stops before the last line
        if self._state is not None:
            counts = self._state.counts
            tally = "  ".join(f"{name} {count}" for name, count in counts.items())
            self.beat.say(
                f"{self.playbook}: ended, {len(self._state.hosts)} host(s), {tally} "
                f"({self.beat.elapsed:.0f} s)"
            )

    def __call__(self, collector: EventCollector) -> None:
        """Take the collector's state (an EventCollector listener)."""
        state = collector.state
        self._state = state
        failure = collector.last_failure
        if failure is not None:
            what = "unreachable" if failure.unreachable else "failed"
            first = failure.message.splitlines()[0] if failure.message else ""
            self.beat.say(f"{what}: {failure.host} | {failure.task}: {first}")
            collector.last_failure = None
        if state.play != self._play:
            self._play = state.play
            self.beat.say(f"{self.playbook}: play {state.play}")
        task = f"{state.role} : {state.task}" if state.role else state.task
        where = f"play {state.play}" if state.play else "starting"
        self.beat.update(
            f"{where}, task {state.tasks_started}: {task}" if task else where,
            done=len(state.task_done),
            total=len(state.hosts),
        )


def live_display(
    as_json: bool, console: Console | None = None, interval: float = HEARTBEAT_S
) -> Display | None:
    """The playbook progress display for the runner, on stderr (None with --json: stdout stays
    one JSON document and stderr quiet): the live panel on a terminal, plain lines in a log."""
    if as_json:
        return None
    console = console or err_console

    def say(message: str) -> None:
        console.print(shown(message), soft_wrap=True)

    def display(playbook: str, check: bool) -> LiveProgress | PlainProgress:
        if console.is_terminal:
            return LiveProgress(console, playbook, check)
        return PlainProgress(say, playbook, check, interval)

    return display


def summary_table(result: RunResult) -> Table:
    """The per-host summary of a run (from its stats) as a table for people."""
    title = f"{result.playbook}: run {result.run_id}" + (" (check mode)" if result.check else "")
    table = Table(title=title, title_justify="left")
    table.add_column("host")
    for name in ("ok", "changed", "failed", "unreachable", "skipped"):
        table.add_column(name, justify="right")
    table.add_column("result")
    for host, summary in sorted(result.hosts.items()):
        table.add_row(host, *_cells(summary), _verdict(summary))
    return table


def _cells(summary: HostSummary) -> list[str]:
    return [
        str(summary.ok),
        str(summary.changed),
        str(summary.failed),
        str(summary.unreachable),
        str(summary.skipped),
    ]


def _verdict(summary: HostSummary) -> Text:
    if summary.unreachable:
        return Text("unreachable", style="bold red")
    if summary.failed:
        return Text("failed", style="bold red")
    if summary.changed:
        return Text("changed", style="yellow")
    return Text("ok", style="green")
