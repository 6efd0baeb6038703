"""The ``gpunode`` command line: a thin layer over the Click-free core.

Command groups are registered once, in ``COMMANDS``, and imported only when used so that
``gpunode --help`` stays fast. ``main`` is the single error boundary: expected errors
become a message on stderr and a documented exit code; a traceback is shown only with
``--debug``.
"""

from __future__ import annotations

import importlib
import io
import sys
import traceback
from typing import Any, NoReturn

import click

from toolkit import __version__
from toolkit.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, ToolkitError, clip
from toolkit.printable import printable

# name -> (module:attribute, one-line summary shown by ``gpunode --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "stack": ("toolkit.cli.stack:stack", "Check and show pinned NVIDIA stacks."),
    "lab": ("toolkit.cli.lab:lab", "Run a fleet of simulated GPU nodes on local Docker."),
    "provision": ("toolkit.cli.provision:provision", "Converge nodes to their pinned stack."),
    "drift": ("toolkit.cli.provision:drift", "Compare pinned, installed and loaded versions."),
    "disks": ("toolkit.cli.disks:disks", "Plan and apply the data-disk layout safely."),
    "image": ("toolkit.cli.image:image", "Build, verify, inspect and distribute training images."),
    "accept": ("toolkit.cli.accept:accept", "Run the acceptance test and mark nodes ready."),
    "status": ("toolkit.cli.status:status", "Show the readiness of every node."),
    "check": ("toolkit.cli.check:check", "Run the cheap passive checks of every node."),
    "node": ("toolkit.cli.node:node", "Show one node's passport across the recorded runs."),
    "up": ("toolkit.cli.up:up", "Take nodes from bare to ready in one resumable command."),
    "rollout": ("toolkit.cli.rollout:rollout", "Plan moving nodes onto a new stack lock in waves."),
    "schedule": ("toolkit.cli.schedule:schedule", "Re-validate nodes on a timer, lowest priority."),
    "report": ("toolkit.cli.report:report", "Write the fleet's HTML report from recorded runs."),
    "runs": ("toolkit.cli.runs:runs", "List and prune the recorded runs."),
    "cert": ("toolkit.cli.cert:cert", "Show, verify and compare handover certificates."),
}

EPILOG = """\b
Exit codes: 0 ok, 1 operation failed or node not ready, 2 bad usage or config,
130 interrupted.

\b
Examples:
  gpunode stack check inventories/sample
  gpunode lab up --nodes 2
  gpunode provision -i inventories/lab
  gpunode image build -i inventories/lab
  gpunode accept -i inventories/lab
"""


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        target, _summary = COMMANDS[cmd_name]
        module_name, attr = target.split(":")
        command = getattr(importlib.import_module(module_name), attr)
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


_debug = False


@click.group(cls=LazyGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpunode")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
def cli(debug: bool) -> None:
    """Take bare GPU servers to nodes proven ready to train."""
    global _debug
    _debug = debug


def main(argv: list[str] | None = None) -> None:
    """Run the CLI: the one error boundary of gpunode.

    Every failure becomes a message on stderr and its documented exit code; with ``--json``
    also one error document on stdout (``ok: false``, the error's kind, message and exit code)
    unless the command already wrote its document.
    """
    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in (args[: args.index("--")] if "--" in args else args)
    # A new process has written no document yet; only a rerun in the same process (tests)
    # must forget the last one. Importing output (rich) here would cost every start ~40 ms.
    output = sys.modules.get("toolkit.cli.output")
    if output is not None:
        output.start_command()
    try:
        # Without standalone mode, Click returns the code a command passed to ctx.exit().
        result = cli.main(args=args, prog_name="gpunode", standalone_mode=False)
    except ToolkitError as err:
        _report(err)
        _fail(as_json, type(err).__name__, err.message, err.exit_code)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except click.ClickException as err:
        # Click's message quotes the user's arguments: shown through the one rule for text
        # from outside, like every other message.
        shown = io.StringIO()
        err.show(file=shown)
        click.echo(printable(shown.getvalue(), lines=True), err=True, nl=False)
        code = EXIT_USAGE if isinstance(err, click.UsageError) else err.exit_code
        _fail(as_json, type(err).__name__, err.format_message(), code)
    except (KeyboardInterrupt, click.Abort):
        click.echo("Interrupted.", err=True)
        _fail(as_json, "Interrupted", "interrupted", EXIT_INTERRUPTED)
    except Exception as err:  # the boundary: anything unexpected
        if _debug:
            traceback.print_exc()
        else:
            click.echo(f"Error: internal error: {clip(repr(err))} (rerun with --debug)", err=True)
        _fail(as_json, "InternalError", f"internal error: {clip(repr(err))}", EXIT_FAILED)
    sys.exit(result if isinstance(result, int) else 0)


def _fail(as_json: bool, kind: str, message: str, exit_code: int) -> NoReturn:
    if as_json:
        # Only when an error is shown as JSON: rich (under cli.output) stays out of `--help`.
        from toolkit.cli.output import emit_error_json

        emit_error_json(kind, message, exit_code)
    sys.exit(exit_code)


def _report(err: ToolkitError) -> None:
    if _debug:
        traceback.print_exc()
    click.echo(f"Error: {printable(err.message, lines=True)}", err=True)


def run_context() -> dict[str, Any]:
    """Global settings for commands (currently only whether ``--debug`` was given)."""
    return {"debug": _debug}
