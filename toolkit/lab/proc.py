"""Running host commands for the lab, with failures turned into ``LabError``."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence

from toolkit.errors import LabError


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
    if shutil.which(argv[0]) is None:
        raise LabError(f"`{argv[0]}` is not installed on this machine (run scripts/setup-host)")
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
