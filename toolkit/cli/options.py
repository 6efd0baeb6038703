"""Options shared by several commands, declared once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

inventory_option = click.option(
    "-i",
    "--inventory",
    "inventory",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="Inventory directory (for example inventories/lab).",
)
limit_option = click.option(
    "-l", "--limit", "limit", default=None, help="Only these hosts or groups (Ansible pattern)."
)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout."
)
yes_option = click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")


def compose(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """Apply several option decorators in the order given."""

    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply
