"""Security floors of the stack, read from ``security.yml`` (a source on every advisory)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from toolkit.config import StrictModel, parse_yaml, validate
from toolkit.errors import ConfigError
from toolkit.stack.matrix import Source

DATA_FILE = "toolkit/stack/security.yml"

Component = Literal["container_toolkit", "driver"]
Severity = Literal["low", "medium", "high", "critical"]
# pydantic matches with Rust regex, where `$` is the end of the text (no trailing newline).
Cve = Annotated[str, StringConstraints(pattern=r"^CVE-[0-9]{4}-[0-9]{4,7}$")]
Version = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,6}(\.[0-9]{1,6}){1,3}$")]


class _Source(StrictModel):
    title: str = Field(min_length=1)
    url: Annotated[str, StringConstraints(pattern=r"^https://\S+$")]


class _Fix(StrictModel):
    branch: int | None = Field(default=None, ge=1)
    version: Version
    severity: Severity
    cves: list[Cve] = Field(min_length=1)


class _Advisory(StrictModel):
    component: Component
    source: str = Field(min_length=1)
    fixed: list[_Fix] = Field(min_length=1)


class _SecurityData(StrictModel):
    sources: dict[str, _Source]
    advisories: list[_Advisory]


@dataclass(frozen=True)
class Floor:
    """The version of a component (on one driver branch) that fixes some CVEs."""

    component: Component
    branch: int | None  # the driver branch; None: every version of the component
    version: str
    severity: Severity
    cves: tuple[str, ...]
    source: Source


@lru_cache(maxsize=1)
def floors() -> tuple[Floor, ...]:
    """The security floors shipped with the package."""
    text = resources.files("toolkit.stack").joinpath("security.yml").read_text(encoding="utf-8")
    return build(parse_yaml(text, DATA_FILE))


def build(data: Any, source: str = DATA_FILE) -> tuple[Floor, ...]:
    """Validate the parsed data file and flatten it to floors.

    Raises:
        ConfigError: A missing or unknown key, a malformed CVE id or version, an advisory
            without a source, or a source key that ``sources`` does not define.
    """
    parsed = validate(_SecurityData, data, source)
    sources = {key: Source(key, s.title, s.url) for key, s in parsed.sources.items()}
    found = []
    for index, advisory in enumerate(parsed.advisories):
        if advisory.source not in sources:
            raise ConfigError(
                f"{source}: advisories[{index}].source: {advisory.source!r} is not a key of "
                f"`sources` ({', '.join(sorted(sources))}); every advisory names its bulletin"
            )
        for row, fix in enumerate(advisory.fixed):
            if (advisory.component == "driver") != (fix.branch is not None):
                raise ConfigError(
                    f"{source}: advisories[{index}].fixed[{row}].branch: a driver fix names its "
                    "branch; a container toolkit fix has none"
                )
            found.append(
                Floor(
                    component=advisory.component,
                    branch=fix.branch,
                    version=fix.version,
                    severity=fix.severity,
                    cves=tuple(fix.cves),
                    source=sources[advisory.source],
                )
            )
    return tuple(found)
