"""Loading configuration files: YAML, validated by a schema when it is read.

Errors name the file, the key path and the rule; unknown keys get a "did you mean".
Only ``yaml.safe_load`` is used: configuration never constructs arbitrary objects.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, Union

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from toolkit.errors import ConfigError


class StrictModel(BaseModel):
    """Base of every configuration schema: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


M = TypeVar("M", bound=BaseModel)

Loc = tuple[str | int, ...]


def load_yaml(path: str | Path) -> Any:
    """Read one YAML file with ``yaml.safe_load``.

    Args:
        path: The file to read.

    Returns:
        The parsed document (``None`` for an empty file).

    Raises:
        ConfigError: The file cannot be read or is not valid YAML; the message names the file
            and, where YAML knows it, the line and column.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: cannot read: {err}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        where = f"{path}{_yaml_position(err)}"
        raise ConfigError(f"{where}: invalid YAML: {_yaml_problem(err)}") from None


def _yaml_position(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is None:
        return ""
    # PyYAML counts from zero; editors count from one.
    return f":{mark.line + 1}:{mark.column + 1}"


def _yaml_problem(err: yaml.YAMLError) -> str:
    problem = getattr(err, "problem", None)
    context = getattr(err, "context", None)
    if problem and context:
        return f"{problem} ({context})"
    return str(problem or context or err).strip()


def format_loc(loc: Sequence[str | int]) -> str:
    """Write a key path the way users read it: ``stack.driver.flavour``, ``disks[0].serial``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "(top level)"


def validate(
    model_cls: type[M],
    data: Any,
    source: str | Path,
    *,
    prefix: Sequence[str | int] = (),
) -> M:
    """Validate parsed YAML against a schema, turning every problem into one ConfigError.

    Args:
        model_cls: The pydantic model the data must satisfy.
        data: The parsed YAML (usually a mapping).
        source: The file the data came from, named in every message.
        prefix: Key path of ``data`` inside ``source`` (``("stack",)`` when validating the
            value of the ``stack:`` key), so messages show the full path.

    Returns:
        The validated model.

    Raises:
        ConfigError: Listing every problem: the file (and line where it can be found), the
            dotted key path, the rule, and for unknown keys the closest allowed names.
    """
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        lines = _key_lines(source)
        problems = []
        for error in err.errors(include_url=False):
            loc = (*prefix, *_clean_loc(error["loc"]))
            where = f"{source}"
            line = _line_for(lines, loc)
            if line is not None:
                where += f":{line}"
            problems.append(f"{where}: {format_loc(loc)}: {_describe(model_cls, error)}")
        count = len(problems)
        head = (
            problems[0]
            if count == 1
            else f"{source}: {count} problems:\n  " + "\n  ".join(problems)
        )
        raise ConfigError(head) from None


def _clean_loc(loc: Sequence[str | int]) -> Loc:
    # Pydantic adds tags for validators, union members and dict keys ("function-after[...]",
    # "literal[...]", "[key]"); the user's key path has no such parts.
    return tuple(p for p in loc if not (isinstance(p, str) and "[" in p))


def _describe(model_cls: type[BaseModel], error: Any) -> str:
    kind = error["type"]
    loc = _clean_loc(error["loc"])
    if kind == "extra_forbidden":
        allowed = allowed_keys(model_cls, loc[:-1])
        key = str(loc[-1]) if loc else ""
        return "unknown key" + did_you_mean(key, allowed)
    if kind == "missing":
        return "required key is missing"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping, got {_kind_of(error.get('input'))}"
    if kind == "list_type":
        return f"expected a list, got {_kind_of(error.get('input'))}"
    message = str(error["msg"])
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if "input" in error:
        got = repr(error["input"])
        if got not in message:
            message += f" (got {got})"
    return message


def _kind_of(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    names = {str: "a string", int: "a number", float: "a number", bool: "a boolean"}
    names.update({list: "a list", dict: "a mapping"})
    return names.get(type(value), type(value).__name__)


def did_you_mean(key: str, allowed: Sequence[str]) -> str:
    """The tail of an "unknown name" message: the closest allowed names, or all of them."""
    if not allowed:
        return ""
    close = difflib.get_close_matches(key, list(allowed), n=3, cutoff=0.6)
    if close:
        return "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    return "; allowed: " + ", ".join(sorted(allowed))


def allowed_keys(model_cls: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The field names of the model found at ``loc`` inside ``model_cls`` (empty if none)."""
    current: Any = model_cls
    for part in loc:
        model = _model_in(current)
        if model is None:
            # A list index or a dict key: step into the item type.
            current = _item_type(current)
            continue
        if isinstance(part, int) or part not in model.model_fields:
            current = _item_type(model)
            continue
        current = model.model_fields[part].annotation
    model = _model_in(current)
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None


def _item_type(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (Union, types.UnionType, typing.Annotated):
        for arg in args:
            item = _item_type(arg)
            if item is not None:
                return item
        return None
    if origin in (list, tuple, set, frozenset, Sequence) and args:
        return args[0]
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    return None


def _key_lines(source: str | Path) -> dict[Loc, int]:
    """Line (1-based) of every key and list item of a YAML file; empty when unreadable."""
    try:
        text = Path(source).read_text(encoding="utf-8")
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError):
        return {}
    lines: dict[Loc, int] = {}

    def walk(node: yaml.Node, loc: Loc) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    child = (*loc, key_node.value)
                    lines.setdefault(child, key_node.start_mark.line + 1)
                    walk(value_node, child)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                child = (*loc, index)
                lines.setdefault(child, item.start_mark.line + 1)
                walk(item, child)

    if root is not None:
        walk(root, ())
    return lines


def _line_for(lines: Mapping[Loc, int], loc: Loc) -> int | None:
    # The deepest part of the path that exists in the file: a missing key is reported at its
    # parent, a bad value at its own key.
    for end in range(len(loc), 0, -1):
        line = lines.get(tuple(loc[:end]))
        if line is not None:
            return line
    return None
