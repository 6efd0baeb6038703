"""How a GPU's name is read: folding the spellings nvidia-smi prints, and finding a name in an
index of names. Standard library only: the catalogue (``catalog``) reads its names through it,
and the node-side health check ships it with an index the control machine made from the
catalogue, so both tell a GPU's model by the same rule."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")
_PREFIXES = ("nvidia ", "tesla ")


def normalise(name: str) -> str:
    """Fold case and spacing, and drop the vendor prefix nvidia-smi may print."""
    text = re.sub(r"\s+", " ", name.strip().casefold())
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


def find(index: Mapping[str, T], name: str) -> T | None:
    """The entry of ``index`` (keyed by normalised names) for ``name``; unlisted variants of a
    known model are found by their first word (``A100-SXM4-40GB`` style names split at ``-``
    too). None when the name is unknown."""
    key = normalise(name)
    if not key:
        return None
    if key in index:
        return index[key]
    first = re.split(r"[\s\-]", key, maxsplit=1)[0]
    return index.get(first)
