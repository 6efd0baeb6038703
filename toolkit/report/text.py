"""A check's measured value and floor as text a person reads (reports, JUnit).

Checks record what they measured as JSON values: a number, a list of GPU indices, a mapping of
GPU to figure, or one record per GPU (``{"gpu": 0, "max": [5, 16], "idle": [1, 16]}``). Python's
``str()`` of those is a repr (``[{'gpu': 0, ...``): unreadable, and one unbroken word that pushes
a page wider than its window. Here each becomes short lines: one per record, ``key: value`` pairs
within it (``gpu: 0, max: 5/16``), numbers without float noise.
"""

from __future__ import annotations

import math
from typing import Any


def value_lines(value: Any) -> list[str]:
    """``value`` as lines of text: one per record of a list of records, else one line."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        return [_mapping(v) for v in value]
    return [_one(value)]


def value_text(value: Any, separator: str = "; ") -> str:
    """``value`` as one string (its lines joined by ``separator``)."""
    return separator.join(value_lines(value))


def _one(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, dict):
        return _mapping(value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        return ", ".join(_one(v) for v in value)
    return str(value)


def _number(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return str(round(value, 4)) if value == 0 or abs(value) >= 1e-3 else f"{value:.4g}"


def _mapping(value: dict[Any, Any]) -> str:
    parts = []
    for key, item in value.items():
        if isinstance(item, (list, tuple)) and item and all(not isinstance(i, dict) for i in item):
            text = "/".join(_one(i) for i in item)  # a pair like [gen, width]: 5/16
        else:
            text = _one(item)
        parts.append(f"{str(key).replace('_', ' ')}: {text}")
    return ", ".join(parts) if parts else "none"


# --- a check's outcome ---------------------------------------------------------------------------

# Every check is passed, failed or not measured (toolkit.acceptance.check); the words each
# output shows for them. Not measured is never shown as passed.
OUTCOME_WORDS = {"passed": "passed", "failed": "failed", "not_measured": "not measured"}


def outcome_of(check: dict[str, Any]) -> str:
    """A recorded check's outcome: ``passed``, ``failed`` or ``not_measured``. A record from
    before the three outcomes has only ``ok`` (its not-measured checks cannot be told)."""
    outcome = check.get("outcome")
    if outcome in OUTCOME_WORDS:
        return str(outcome)
    return "passed" if check.get("ok") else "failed"


def outcome_counts(checks: list[dict[str, Any]]) -> dict[str, int]:
    """How many of ``checks`` passed, failed and were not measured."""
    return {o: sum(outcome_of(c) == o for c in checks) for o in OUTCOME_WORDS}


def counts_text(counts: dict[str, int]) -> str:
    """``12 passed, 1 failed, 2 not measured``."""
    return ", ".join(f"{counts.get(o, 0)} {word}" for o, word in OUTCOME_WORDS.items())
