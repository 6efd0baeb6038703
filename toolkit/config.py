"""Loading configuration files: YAML, validated by a schema when it is read.

Errors name the file, the key path and the rule; unknown keys get a "did you mean".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Base of every configuration schema: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
