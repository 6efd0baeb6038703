"""The one exception tree of gpunode.

Core modules raise these; the CLI's single error boundary turns them into a message on
stderr and the documented exit code. Third-party exceptions are wrapped into one of these
where they cross into the core's callers.
"""

from __future__ import annotations

# Documented exit codes (README, "Exit codes").
EXIT_OK = 0
EXIT_FAILED = 1  # an operation failed, or a node is not ready
EXIT_USAGE = 2  # bad usage or configuration
EXIT_INTERRUPTED = 130

# The longest user value a message echoes: enough to recognise it, never a flood.
CLIP_CHARS = 80


def clip(value: object, limit: int = CLIP_CHARS) -> str:
    """A user value cut to a sane length for a message: ``abc...(+N chars)``.

    Args:
        value: Anything; non-strings are shown with ``str``.
        limit: The most characters kept.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(+{len(text) - limit} chars)"


class ToolkitError(Exception):
    """An expected failure, reported to the user without a traceback."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class ConfigError(ToolkitError):
    """A configuration or inventory file is malformed (file, key path, rule)."""

    exit_code = EXIT_USAGE


class StackError(ToolkitError):
    """A stack is incoherent: its pins violate the compatibility matrix."""

    exit_code = EXIT_USAGE


class RemoteError(ToolkitError):
    """A command on a node (over SSH) failed or a node could not be reached."""


class PlaybookError(ToolkitError):
    """An Ansible playbook run failed."""


class ImageError(ToolkitError):
    """A container image build or verification failed."""


class AcceptanceError(ToolkitError):
    """The acceptance test could not run or its output could not be read."""


class LabError(ToolkitError):
    """The simulated lab could not be brought up, inspected or torn down."""


class DiskSafetyError(ToolkitError):
    """A disk request was refused by a safety rule; nothing was changed."""

    exit_code = EXIT_USAGE
