"""How a step tells people what it is doing, without knowing how it is shown.

Core functions take these callables and never print (docs/style.md: only ``toolkit/cli``
renders); the CLI passes its terminal display, tests pass a list's ``append``.

A long phase (a debootstrap, an image build, a playbook, an acceptance run) may say nothing
for minutes; in a log (output to a file, as in CI or ``ssh host cmd > log``) there is no live
display to show that it still runs. :class:`Heartbeat` is the one owner of that: while a phase
runs and nothing else was said for ``interval`` seconds, it says one plain line, what the
phase is doing now and how far, with the time it has taken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

# One line for people: "image: building ...", "gpunode-node-1: checks done in 12.3s".
Progress = Callable[[str], None]
# A playbook's live display: called with (playbook, check mode), it returns the context in
# which the runner's event handler shows progress (toolkit.ansible.runner); None shows nothing.
Display = Callable[[str, bool], AbstractContextManager[Any]]

# Seconds of silence after which a running phase says where it is (issue 42: a log must never
# go quiet for longer while something runs).
HEARTBEAT_S = 15.0


class Heartbeat:
    """A phase's plain progress lines: ``<phase>: <what now> (<done>/<total>, <elapsed> s)``.

    Use it as a context manager around the phase. Inside, :meth:`update` says what the phase
    does now and how far it is (it prints nothing); :meth:`say` prints a line of the phase's
    own (and counts as a sign of life). A thread prints the current state whenever nothing
    was said for ``interval`` seconds. Leaving the context stops and joins the thread: no
    line comes after the phase ends, and no thread is left behind.

    Args:
        say: Where lines go (the CLI's stderr; never stdout, which is data).
        phase: The phase's name, the start of every line (``node image``).
        what: What the phase does at first.
        total: How many units the phase has (steps, hosts, nodes), when known.
        interval: Seconds of silence before a line (a parameter so that tests run fast).
        clock: Seconds on a monotonic clock (a parameter so that tests can fake time).
    """

    def __init__(
        self,
        say: Progress,
        phase: str,
        *,
        what: str = "starting",
        total: int | None = None,
        interval: float = HEARTBEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"a heartbeat interval must be positive, not {interval}")
        self._say = say
        self.phase = phase
        self.interval = interval
        self._clock = clock
        self._what = what
        self._done = 0
        self._total = total
        self._started = clock()
        self._last = self._started
        self._lock = threading.RLock()  # ``say`` may call back into update()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False

    # --- what the phase reports -------------------------------------------------------------

    def update(
        self, what: str | None = None, *, done: int | None = None, total: int | None = None
    ) -> None:
        """What the phase does now and how far it is (printed at the next beat)."""
        with self._lock:
            if what is not None:
                self._what = what
            if done is not None:
                self._done = done
            if total is not None:
                self._total = total

    def uncounted(self, what: str) -> None:
        """The phase goes on with a part whose size is not known: no count in its lines."""
        with self._lock:
            self._what, self._done, self._total = what, 0, None

    def advance(self, what: str | None = None) -> None:
        """One more unit is done (thread-safe: parallel workers call it)."""
        with self._lock:
            self._done += 1
            if what is not None:
                self._what = what

    def say(self, message: str) -> None:
        """Print one of the phase's own lines; the silence counts from here."""
        with self._lock:
            self._last = self._clock()
            self._say(message)

    def line(self) -> str:
        """The phase's state as one line."""
        with self._lock:
            return self._line_locked()

    def _line_locked(self) -> str:
        elapsed = self._clock() - self._started
        count = f"{self._done}/{self._total}, " if self._total is not None else ""
        return f"{self.phase}: {self._what} ({count}{elapsed:.0f} s)"

    # --- the beat ---------------------------------------------------------------------------

    def beat(self) -> bool:
        """Print the state line if the phase runs and was silent for ``interval`` seconds.

        The thread calls this; a test with a fake clock calls it directly.

        Returns:
            Whether a line was printed.
        """
        with self._lock:
            if not self._running or self._clock() - self._last < self.interval:
                return False
            self._last = self._clock()
            self._say(self._line_locked())
            return True

    def _wait(self) -> float:
        """Seconds until the next beat is due."""
        with self._lock:
            return max(0.0, self.interval - (self._clock() - self._last))

    def _run(self) -> None:
        # Event.wait returns True once the phase ended: no beat after that.
        while not self._stop.wait(self._wait()):
            self.beat()

    def __enter__(self) -> Heartbeat:
        with self._lock:
            self._started = self._last = self._clock()
            self._running = True
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat {self.phase}", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._lock:
            self._running = False  # a beat waiting for the lock now prints nothing
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def elapsed(self) -> float:
        """Seconds since the phase started."""
        return self._clock() - self._started
