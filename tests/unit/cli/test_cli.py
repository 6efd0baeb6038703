"""The CLI skeleton: help, exit codes, the error boundary."""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit import cli
from toolkit.errors import ConfigError, ToolkitError


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args], capture_output=True, text=True, check=False
    )


def test_help_lists_every_group_with_a_summary() -> None:
    result = run("--help")
    assert result.returncode == 0
    for name, (_target, summary) in cli.COMMANDS.items():
        assert name in result.stdout
        assert summary in result.stdout


def test_every_registered_command_imports() -> None:
    for name in cli.COMMANDS:
        assert cli.cli.get_command(None, name) is not None, name  # type: ignore[arg-type]


def test_unknown_command_is_usage_error() -> None:
    result = run("no-such-command")
    assert result.returncode == 2
    assert "No such command" in result.stderr


@pytest.mark.parametrize(
    ("error", "code"), [(ToolkitError("boom"), 1), (ConfigError("bad key"), 2)]
)
def test_error_boundary_maps_errors_to_exit_codes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: Exception, code: int
) -> None:
    def fail(*_args: object, **_kwargs: object) -> None:
        raise error

    monkeypatch.setattr(cli.cli, "main", fail)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(error) in captured.err
    assert "Traceback" not in captured.err


def test_keyboard_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.cli, "main", interrupt)
    with pytest.raises(SystemExit) as exit_info:
        cli.main([])
    assert exit_info.value.code == 130


def test_messages_are_never_broken_or_read_as_markup(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A builder's step line or a URL passes through whole, even on a narrow terminal."""
    from toolkit.cli import output

    monkeypatch.setattr(output.err_console, "_width", 40)
    step = "Step 1/9 : FROM sha256:" + "d146df88ef78" * 5
    output.say(step)
    output.say("see [bold]http://10.0.0.2/compute/cuda/repos/debian12/x86_64/[/bold]")
    err = capsys.readouterr().err
    assert err.splitlines() == [
        step,
        "see [bold]http://10.0.0.2/compute/cuda/repos/debian12/x86_64/[/bold]",
    ]
