"""How a step tells people what it is doing, without knowing how it is shown.

Core functions take these callables and never print (docs/style.md: only ``toolkit/cli``
renders); the CLI passes its terminal display, tests pass a list's ``append``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

# One line for people: "image: building ...", "gpunode-node-1: checks done in 12.3s".
Progress = Callable[[str], None]
# A playbook's live display: called with (playbook, check mode), it returns the context in
# which the runner's event handler shows progress (toolkit.ansible.runner); None shows nothing.
Display = Callable[[str, bool], AbstractContextManager[Any]]
