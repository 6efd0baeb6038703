"""Values that cross from Ansible into the toolkit's schemas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def plain(value: Any) -> Any:
    """Ansible's templated str/dict/list subclasses as plain Python values.

    The schemas (pydantic, strict) and JSON want the built-in types, not Ansible's own
    subclasses of them.
    """
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value
