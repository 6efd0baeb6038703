"""Loading configuration files: YAML, validated by a schema when it is read.

Errors name the file, the key path and the rule; unknown keys get a "did you mean".
Every YAML file gpunode reads goes through :func:`parse_yaml`: safe (plain data only), bounded
in size, aliases and depth, and strict about duplicate keys.
"""

from __future__ import annotations

import difflib
import errno
import json
import math
import os
import stat
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TypeVar, Union

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from yaml._yaml import CParser

from toolkit.errors import CLIP_CHARS, ConfigError, clip
from toolkit.printable import printable


class StrictModel(BaseModel):
    """Base of every configuration schema: unknown keys are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


M = TypeVar("M", bound=BaseModel)

Loc = tuple[str | int, ...]


# Limits of the one YAML loader: gpunode's files are small and shallow, so anything beyond
# these is a mistake or an attack ("billion laughs", deep nesting), refused before it costs.
MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_YAML_NODES = 100_000  # scalars, lists and mappings, counted with aliases expanded
MAX_YAML_DEPTH = 64
# The longest integer scalar: a byte count of 2**64 has 20 digits. Python refuses to convert
# more than 4,300 decimal digits (sys.int_info.default_max_str_digits) and YAML 1.1's base-60
# integers (`1:2:3`) cost quadratic time in their length, so longer is refused before int().
MAX_YAML_INT_CHARS = 64
MAX_JSON_DEPTH = 64  # gpunode's JSON records nest about ten levels
_MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<:` may repeat keys on purpose

# The most bytes read from each kind of file gpunode opens (the ``what`` of read_regular):
# each is far above the real thing, so a larger file is a mistake or an attack.
FILE_LIMITS: dict[str, int] = {
    "YAML file": MAX_YAML_BYTES,
    # A certificate of an 8-GPU node is about 10 KB (docs/certificates.md).
    "certificate": 1024 * 1024,
    # An OpenSSH key file (private or public) is a few KB even for RSA 16384 bits.
    "SSH key": 64 * 1024,
    "allowed-signers file": 1024 * 1024,
    # An RMA evidence pack (toolkit.report.evidence): nvidia-smi -q of 8 GPUs is about 80 KB,
    # DCGM's JSON at most 4 MB, all of it gzip'd.
    "evidence pack": 64 * 1024 * 1024,
    # An acceptance run's run.json: about 50 KB per node with topology and training sections.
    "run record": 64 * 1024 * 1024,
    # What gpunode reads back from a run folder (toolkit.records.runs): a node's runner result (its
    # NCCL log and DCGM output are cut at 4 MB each), a passive check's record (about 20 KB
    # a node) and the passport's observations of a run.
    "result file": 64 * 1024 * 1024,
    "check record": 64 * 1024 * 1024,
    "observations": 64 * 1024 * 1024,
    # A rollout's record (toolkit.rollout.record): about 1 KB a node.
    "rollout record": 64 * 1024 * 1024,
}


def read_regular(path: str | Path, what: str, *, follow: bool = True) -> bytes:
    """The bytes of a regular file, at most the limit of its kind (:data:`FILE_LIMITS`): the
    one bounded read of every file gpunode reads (configuration, certificates, keys, and
    what it reads back from a run folder).

    FIFOs, devices (``/dev/zero``) and directories are refused before anything is read: they
    block or never end.

    Args:
        path: The file.
        what: Its kind, a key of :data:`FILE_LIMITS`, named in messages.
        follow: Whether a symbolic link is followed (False: refused; for the files gpunode
            wrote itself, in a run folder, where a link is nothing gpunode made).

    Raises:
        ConfigError: The file is missing, not a regular file (a link, when not followed),
            unreadable or larger than its kind's limit; the message names the file.
    """
    limit = FILE_LIMITS[what]
    with open_regular(path, what, follow=follow) as stream:
        try:
            data = stream.read(limit + 1)
        except OSError as err:
            raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    if len(data) > limit:
        raise ConfigError(f"{path}: {what} larger than {limit} bytes; refusing to read it")
    return data


def parse_json(text: str | bytes, source: str | Path) -> Any:
    """Parse one strict JSON document (RFC 8259), bounded in depth.

    ``NaN``, ``Infinity`` and numbers too large for a float (``1e999``) are not JSON
    numbers and are refused, and so is nesting deeper than :data:`MAX_JSON_DEPTH` (a
    document nested 100,000 deep is refused, not a ``RecursionError``). The size is bounded
    by the caller (:func:`read_regular`).

    Raises:
        ConfigError: Not such a document; the message names ``source``.
    """

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number (RFC 8259)")

    try:
        value = json.loads(text, parse_constant=constant)
    except RecursionError:
        raise ConfigError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise ConfigError(f"{source}: not JSON: {clip(str(err), 2 * CLIP_CHARS)}") from None
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ConfigError(f"{source}: a number out of range (not a JSON number, RFC 8259)")
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ConfigError(f"{source}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return value


def load_json(path: str | Path, what: str, *, follow: bool = True) -> Any:
    """Read one JSON file of a kind of :data:`FILE_LIMITS` (:func:`read_regular`,
    :func:`parse_json`).

    Raises:
        ConfigError: The file cannot be read or is not a strict, bounded JSON document.
    """
    return parse_json(read_regular(path, what, follow=follow), path)


def open_regular(path: str | Path, what: str = "file", *, follow: bool = True) -> BinaryIO:
    """Open a regular file for reading (binary), refusing anything else.

    Raises:
        ConfigError: The file is missing, not a regular file (a symbolic link, when
            ``follow`` is False) or unreadable; the message names the file.
    """
    path = Path(path)
    # O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused.
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except OSError as err:
        if not follow and err.errno == errno.ELOOP:
            raise ConfigError(f"{path}: a symbolic link; a {what} must be a regular file") from None
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise ConfigError(f"{path}: {kind}; a {what} must be a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def load_yaml(path: str | Path) -> Any:
    """Read one YAML file through the safe loader (:func:`parse_yaml`).

    Args:
        path: The file to read.

    Returns:
        The parsed document (``None`` for an empty file).

    Raises:
        ConfigError: The file cannot be read, is not a regular file, is too large, is not
            valid YAML or breaks a limit of the loader; the message names the file and, where
            YAML knows it, the line and column.
    """
    data = read_regular(path, "YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: cannot read: not UTF-8 text ({err.reason})") from None
    return parse_yaml(text, path)


def parse_yaml(text: str, source: str | Path) -> Any:
    """Parse YAML text: the one YAML loader of gpunode, for files and packaged data alike.

    Safe (plain data only) and bounded: at most :data:`MAX_YAML_BYTES` of text,
    :data:`MAX_YAML_NODES` nodes with aliases expanded, :data:`MAX_YAML_DEPTH` levels of
    nesting; recursive aliases and duplicate keys are refused.

    Raises:
        ConfigError: Naming ``source`` (and the line), the problem and the limit.
    """
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{source}: YAML larger than {MAX_YAML_BYTES} bytes; refusing it")
    try:
        root = _compose(text)
        if root is None:
            return None
        _check_tree(root, source)
        return _Loader("").construct_document(root)
    except yaml.YAMLError as err:
        where = f"{source}{_yaml_position(err)}"
        raise ConfigError(f"{where}: invalid YAML: {_yaml_problem(err)}") from None


class _Loader(
    yaml.composer.Composer, CParser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver
):
    """The safe loader, bounded while it composes.

    libyaml parses (PyYAML's pure-Python parser costs about 30 us an event, so a 4 MiB list
    took a minute to reach any limit); PyYAML's composer, first in the bases, builds the nodes
    here, so every node is counted (aliases at the size of what they name) and every level of
    nesting checked the moment it is read: a document is refused as soon as it passes
    :data:`MAX_YAML_NODES` or :data:`MAX_YAML_DEPTH`, not after it is whole.
    """

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._depth = 0
        self._nodes = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its size, aliases expanded

    def _count(self, size: int, mark: Any) -> None:
        self._nodes += size
        if self._nodes > MAX_YAML_NODES:
            raise yaml.composer.ComposerError(
                None,
                None,
                f"more than {MAX_YAML_NODES} values with aliases expanded (the loader's limit)",
                mark,
            )

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            # A node still being composed (a recursive alias) counts once; _check_tree
            # refuses it.
            anchored = self.anchors.get(event.anchor)
            self._count(self._sizes.get(id(anchored), 1), event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            raise yaml.composer.ComposerError(
                None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", event.start_mark
            )
        start = self._nodes
        self._count(1, event.start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        self._sizes[id(node)] = self._nodes - start
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # A scalar YAML resolves by its look but Python cannot build (`0x_`, `2024-13-45`).
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as err:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{clip(repr(node.value))} is not a valid {node.tag.rsplit(':', 1)[-1]} "
                f"({clip(str(err))})",
                node.start_mark,
            ) from None

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_YAML_INT_CHARS:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"an integer of {len(node.value)} characters: more than {MAX_YAML_INT_CHARS} "
                "(the loader's limit; quote it if it is text)",
                node.start_mark,
            )
        value: int = super().construct_yaml_int(node)
        return value

    yaml_constructors: typing.ClassVar[dict[Any, Any]] = {
        **yaml.constructor.SafeConstructor.yaml_constructors,
        "tag:yaml.org,2002:int": construct_yaml_int,
    }


def _compose(text: str) -> yaml.Node | None:
    loader = _Loader(text)
    try:
        node: yaml.Node | None = loader.get_single_node()
        return node
    finally:
        loader.dispose()


def _check_tree(root: yaml.Node, source: str | Path) -> None:
    """Refuse duplicate keys, recursive aliases or a tree too deep with aliases expanded.

    Nodes shared through aliases are walked once per depth they first appear at. (The count
    of nodes is bounded while composing, :class:`_Loader`.)
    """
    done: set[int] = set()
    active: set[int] = set()

    def fail(node: yaml.Node, problem: str) -> ConfigError:
        return ConfigError(f"{source}:{node.start_mark.line + 1}: invalid YAML: {problem}")

    def walk(node: yaml.Node, depth: int) -> None:
        key = id(node)
        if key in done:
            return
        if key in active:
            raise fail(node, "an alias refers to a node that contains it (recursive alias)")
        if depth > MAX_YAML_DEPTH:
            raise fail(node, f"nested deeper than {MAX_YAML_DEPTH} levels (aliases expanded)")
        active.add(key)
        if isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item, depth + 1)
        elif isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                    name = (key_node.tag, key_node.value)
                    line = key_node.start_mark.line + 1
                    if name in seen:
                        raise fail(
                            key_node,
                            f"duplicate key {clip(key_node.value)!r} (lines {seen[name]} and "
                            f"{line}); write each key once",
                        )
                    seen[name] = line
                walk(key_node, depth + 1)
                walk(value_node, depth + 1)
        active.discard(key)
        done.add(key)

    walk(root, 1)


def _yaml_position(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is None:
        return ""
    # PyYAML counts from zero; editors count from one.
    return f":{mark.line + 1}:{mark.column + 1}"


def _yaml_problem(err: yaml.YAMLError) -> str:
    problem = getattr(err, "problem", None)
    if problem == "exceeded maximum nesting depth":
        # libyaml's own bound (1,000 levels with libyaml 0.2.5), met as it scans ahead of
        # the composer inside flow collections: past ours too, so it reads as ours.
        return f"nested deeper than {MAX_YAML_DEPTH} levels"
    context = getattr(err, "context", None)
    if problem and context:
        return f"{problem} ({context})"
    return str(problem or context or err).strip()


def format_loc(loc: Sequence[str | int]) -> str:
    """Write a key path the way users read it: ``stack.driver.flavour``, ``disks[0].serial``.

    A key is text from the file: its control characters are shown escaped
    (:func:`toolkit.printable.printable`), so a key path is always one line.
    """
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = printable(clip(part))
            text += f".{name}" if text else name
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
    # Validators may quote the value: the whole message is cut as a backstop.
    message = clip(str(error["msg"]), 10 * CLIP_CHARS)
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    # A whole mapping or list as "got" is noise: the key path already points at it.
    if "input" in error and not isinstance(error["input"], (dict, list)):
        got = clip(repr(error["input"]))
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
    # Long keys are nobody's typo (and difflib is quadratic in them).
    close = (
        difflib.get_close_matches(key, list(allowed), n=3, cutoff=0.6)
        if len(key) <= 2 * CLIP_CHARS
        else []
    )
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
        text = read_regular(source, "YAML file").decode("utf-8")
        root = _compose(text)
    except (ConfigError, UnicodeDecodeError, yaml.YAMLError, ValueError):
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
