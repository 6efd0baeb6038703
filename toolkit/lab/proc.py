"""Running host commands for the lab, with failures turned into ``LabError``."""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Sequence

from toolkit.errors import LabError


def _require(program: str) -> None:
    if shutil.which(program) is None:
        raise LabError(f"`{program}` is not installed on this machine (run scripts/setup-host)")


def run(
    argv: Sequence[str],
    *,
    input_text: str | None = None,
    check: bool = True,
    timeout: float | None = 600,
) -> subprocess.CompletedProcess[str]:
    """Run a command on the control machine and capture its output.

    Args:
        argv: The command and its arguments (never a shell string).
        input_text: Text written to the command's stdin.
        check: Raise ``LabError`` when the command exits non-zero.
        timeout: Seconds before the command is killed and ``LabError`` raised.

    Returns:
        The completed process with text stdout and stderr.

    Raises:
        LabError: The program is missing, timed out, or failed while ``check`` is set.
    """
    _require(argv[0])
    try:
        result = subprocess.run(
            list(argv),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout:.0f}s") from err
    if check and result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-5:]
        raise LabError(
            f"`{' '.join(argv)}` failed with exit code {result.returncode}: " + " / ".join(detail)
        )
    return result


def run_lines(
    argv: Sequence[str], on_line: Callable[[str], None], *, timeout: float | None = 600
) -> None:
    """Run a command, handing each line of its output (stdout and stderr) to ``on_line`` as it
    comes: a long command (debootstrap) says where it is while it runs.

    Raises:
        LabError: The program is missing, timed out, or exited non-zero (its last lines).
    """
    _require(argv[0])
    tail: deque[str] = deque(maxlen=5)
    with subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        expired = threading.Event()

        def kill() -> None:
            expired.set()
            proc.kill()

        timer = threading.Timer(timeout, kill) if timeout is not None else None
        if timer is not None:
            timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip("\n")
                if line.strip():
                    tail.append(line)
                    on_line(line)
            returncode = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
            if proc.poll() is None:  # on_line failed: the command must not outlive the call
                proc.kill()
    if expired.is_set():
        raise LabError(f"`{' '.join(argv)}` did not finish within {timeout:.0f}s")
    if returncode != 0:
        raise LabError(
            f"`{' '.join(argv)}` failed with exit code {returncode}: " + " / ".join(tail)
        )
