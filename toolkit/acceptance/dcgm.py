"""DCGM diagnostics as an acceptance check: ``dcgmi diag -r <level> -j`` read and judged.

The one owner of the concept: the parser of the command's JSON and the judgement of the
profile's rule (its schema, :class:`toolkit.floors.DcgmDiagSpec`, is the ``dcgm_diag`` key of
``hardware.acceptance``). The node runner ships the command's output raw; the controller
parses it here, as it does ``nvidia-smi topo -m`` (``topology.py``).

The document's shape (DCGM @ 72fa3fe, ``nvvs/include/NvvsJsonStrings.h`` and
``dcgmi/Diag.cpp``; a public DCGM 4 capture in ``tests/data/real/dcgm/``):

- one top key, ``DCGM GPU Diagnostic`` (DCGM 3.x) or ``DCGM Diagnostic`` (4.x), holding
  ``test_categories`` (a list of ``{"category", "tests"}``), ``version`` and, when the run could
  not start, ``runtime_error``;
- each test ``{"name", "results", "test_summary"?}``; each result names its GPU by
  ``gpu_id`` (3.x ``dcgmi``), ``gpu_ids`` (nvvs) or ``entity_group``/``entity_id`` (4.x) and
  carries ``status`` (``Pass``, ``Fail``, ``Warn``, ``Skip``, ``Not Run``:
  ``Diag::HelperDisplayDiagResult``), ``warnings`` (``{"warning", "error_id", ...}`` objects,
  plain strings in older releases) and ``info``.

Anything else that does not fit is an error naming the key; a status word not in that list is
an error, never read as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkit.config import parse_json
from toolkit.errors import AcceptanceError, ConfigError, clip
from toolkit.floors import DcgmDiagSpec

# The document's top key: DCGM 3.x, then 4.x (NvvsJsonStrings.h NVVS_NAME).
ROOT_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
# dcgmi's status words (dcgmi/Diag.cpp, Diag::HelperDisplayDiagResult), read case-blind: nvvs
# itself writes them upper case (PASS, FAIL).
STATUSES = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}
# Bound on the text read: a level 4 run of 8 GPUs prints a few hundred KiB at most.
MAX_OUTPUT_BYTES = 4 << 20
# How long each level may run on the node (dcgmi-diag(1): level 1 seconds, 2 about two
# minutes, 3 about 15 minutes, 4 longer), with room for a slow node.
LEVEL_TIMEOUT_S = {1: 300, 2: 900, 3: 3600, 4: 10800}
NOT_FOUND = "dcgmi not found"


class DcgmUnreadable(AcceptanceError):
    """The text is not a ``dcgmi diag -j`` document (the message names the key)."""


@dataclass(frozen=True)
class PluginResult:
    """One plugin's result on one GPU (or on the GPUs it names together)."""

    category: str
    plugin: str
    gpu: str
    status: str  # a value of STATUSES
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class Diagnostic:
    """One ``dcgmi diag -j`` document."""

    version: str | None
    results: tuple[PluginResult, ...]
    runtime_error: str | None = None


@dataclass(frozen=True)
class Finding:
    """The rule held against one plugin (or the run as a whole: ``plugin`` ``run``)."""

    plugin: str
    ok: bool
    message: str
    measured: Any = None
    floor: Any = None


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise DcgmUnreadable(f"{where}: an object expected, found {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise DcgmUnreadable(f"{where}: a list expected, found {type(value).__name__}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise DcgmUnreadable(f"{where}: a string expected, found {type(value).__name__}")
    return value


def _gpu(result: dict[str, Any], where: str) -> str:
    for key in ("gpu_id", "gpu_ids", "entity_id"):
        if key in result:
            value = result[key]
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise DcgmUnreadable(f"{where}.{key}: a GPU id expected, found {clip(repr(value))}")
            return str(value)
    raise DcgmUnreadable(f"{where}: no gpu_id, gpu_ids or entity_id")


def _messages(result: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    raw = result.get(key)
    if raw is None:
        return ()
    if isinstance(raw, str):  # nvvs joins info lines into one string in older releases
        return (raw,)
    out = []
    for i, item in enumerate(_list(raw, f"{where}.{key}")):
        if isinstance(item, dict):
            out.append(_text(item.get("warning"), f"{where}.{key}[{i}].warning"))
        else:
            out.append(_text(item, f"{where}.{key}[{i}]"))
    return tuple(out)


def _status(value: Any, where: str) -> str:
    word = _text(value, where)
    status = STATUSES.get(word.strip().lower())
    if status is None:
        raise DcgmUnreadable(
            f"{where}: unknown status {clip(repr(word))} (known: {', '.join(STATUSES.values())})"
        )
    return status


def parse_diag(text: str) -> Diagnostic:
    """Parse ``dcgmi diag -j`` output.

    Raises:
        DcgmUnreadable: Not such a document; the message names the key and the rule.
    """
    if len(text.encode("utf-8", "surrogatepass")) > MAX_OUTPUT_BYTES:
        raise DcgmUnreadable(f"output larger than {MAX_OUTPUT_BYTES} bytes; refusing it")
    try:
        document = parse_json(text, "dcgmi diag -j")
    except ConfigError as err:
        raise DcgmUnreadable(err.message) from None
    document = _obj(document, "document")
    roots = [key for key in ROOT_KEYS if key in document]
    if len(roots) != 1:
        raise DcgmUnreadable(
            f"document: one of {' or '.join(repr(k) for k in ROOT_KEYS)} expected, found keys "
            f"{clip(', '.join(sorted(map(str, document))) or 'none')}"
        )
    root = _obj(document[roots[0]], roots[0])
    version = root.get("version")
    if version is not None:
        version = _text(version, f"{roots[0]}.version")
    error = root.get("runtime_error")
    if error is not None:
        error = _text(error, f"{roots[0]}.runtime_error")
    results: list[PluginResult] = []
    categories = _list(root.get("test_categories", []), f"{roots[0]}.test_categories")
    for c, raw_category in enumerate(categories):
        where = f"test_categories[{c}]"
        category = _obj(raw_category, where)
        name = _text(category.get("category"), f"{where}.category")
        for t, raw_test in enumerate(_list(category.get("tests"), f"{where}.tests")):
            twhere = f"{where}.tests[{t}]"
            test = _obj(raw_test, twhere)
            plugin = _text(test.get("name"), f"{twhere}.name")
            for r, raw in enumerate(_list(test.get("results"), f"{twhere}.results")):
                rwhere = f"{twhere}.results[{r}]"
                result = _obj(raw, rwhere)
                group = result.get("entity_group", "GPU")
                if group != "GPU":  # 4.x also reports CPUs, NvSwitches ...: not this check's
                    continue
                results.append(
                    PluginResult(
                        category=name,
                        plugin=plugin,
                        gpu=_gpu(result, rwhere),
                        status=_status(result.get("status"), f"{rwhere}.status"),
                        warnings=_messages(result, "warnings", rwhere),
                        info=_messages(result, "info", rwhere),
                    )
                )
    if error is None and not results:
        raise DcgmUnreadable(f"{roots[0]}: no GPU result in test_categories")
    return Diagnostic(version=version, results=tuple(results), runtime_error=error)


@dataclass
class _Plugin:
    failed: list[str] = field(default_factory=list)
    noted: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    count: int = 0


def _describe(result: PluginResult) -> str:
    why = "; ".join(result.warnings) or "no warning given"
    return f"GPU {result.gpu} {result.status}: {clip(why)}"


def judge(diag: Diagnostic, spec: DcgmDiagSpec) -> list[Finding]:
    """One finding per plugin, in the document's order: Fail (and Not Run) on any GPU fails it;
    Warn and Skip are shown and fail it only where the profile says so."""
    if diag.runtime_error:
        return [Finding("run", False, f"dcgmi diag could not run: {clip(diag.runtime_error)}")]
    failing = {"Fail", "Not Run"}
    if spec.fail_on_warn:
        failing.add("Warn")
    if spec.fail_on_skip:
        failing.add("Skip")
    plugins: dict[str, _Plugin] = {}
    for result in diag.results:
        entry = plugins.setdefault(result.plugin, _Plugin())
        entry.count += 1
        if result.status in failing:
            entry.failed.append(_describe(result))
            entry.bad.append(result.gpu)
        elif result.status != "Pass":
            entry.noted.append(_describe(result))
    findings = []
    for plugin, entry in plugins.items():
        if entry.failed:
            message = f"{plugin}: " + " | ".join(entry.failed + entry.noted)
        elif entry.noted:
            message = f"{plugin}: passed, with " + " | ".join(entry.noted)
        else:
            message = f"{plugin}: Pass on {entry.count} GPU result(s)"
        findings.append(
            Finding(plugin, not entry.failed, message, measured=entry.bad, floor=sorted(failing))
        )
    return findings


def read_section(
    section: dict[str, Any] | None, spec: DcgmDiagSpec
) -> tuple[Diagnostic | None, Finding | None]:
    """The runner's ``dcgm`` section parsed, or the one finding that stands for it (not run,
    not found, unreadable)."""
    if not section:
        return None, Finding("run", False, "dcgmi diag was not run (the runner did not try)")
    if section.get("error") == NOT_FOUND:
        if spec.required:
            return None, Finding("run", False, f"{NOT_FOUND} (the profile requires it)")
        return None, Finding("run", True, f"not judged ({NOT_FOUND})")
    raw = str(section.get("raw_output") or "")
    try:
        return parse_diag(raw), None
    except DcgmUnreadable as err:
        why = section.get("error") or err.message
        return None, Finding("run", False, f"dcgmi diag -j output unreadable: {clip(str(why))}")
