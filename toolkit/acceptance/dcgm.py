"""DCGM diagnostics as an acceptance check: ``dcgmi diag -r <level> -j`` read and judged.

The one owner of the concept: the parser of the command's JSON and the judgement of the
profile's rule (its schema, :class:`toolkit.profile.floors.DcgmDiagSpec`, is the
``dcgm_diag`` key of ``hardware.acceptance``). The node runner ships the command's output
raw; the controller parses it here, as it does ``nvidia-smi topo -m`` (``topology.py``);
``gpunode accept parse`` reads a captured document with :func:`read_capture`.

The document as DCGM prints it (DCGM @ 72fa3fe ``nvvs/include/NvvsJsonStrings.h`` and
``dcgmi/Diag.cpp``, and v3.3.9's; real DCGM 4.2.3 and 4.5.2 captures in
``tests/data/real/dcgm/``):

- one root key, ``DCGM GPU Diagnostic`` (3.x) or ``DCGM Diagnostic`` (4.x), holding
  ``test_categories`` (a list of ``{"category", "tests"}``); when the run could not start it
  holds ``version`` and ``runtime_error`` instead (``Diag::HelperDisplayFailureMessage``);
- the DCGM version and the driver beside the root: in 4.x in a ``metadata`` object
  (``version``, ``Driver Version Detected``: ``Diag::HelperJsonAddMetadata``), in 3.x as
  top-level keys of those names (``Diag::HelperJsonBuildOutput``);
- each test ``{"name", "results", "test_summary"?}``; each result names its GPU by
  ``gpu_id`` (3.x ``dcgmi``), ``gpu_ids`` (nvvs) or ``entity_group``/``entity_id`` (4.x) and
  carries ``status`` (``Pass``, ``Fail``, ``Warn``, ``Skip``, ``Not Run``:
  ``Diag::HelperDisplayDiagResult``), ``warnings`` and ``info``. A 3.x Deployment result names
  no GPU unless it has a warning (``Diag::HelperJsonAddBasicTests``): it stands for every GPU;
- each warning ``{"warning", "error_id", "error_severity", "error_category"}`` (3.x Deployment
  results put the text under ``warnings``), plain strings in older releases. The numbers are
  DCGM's ``dcgm_errors.h`` enums, named by ``dcgm_errors.yml`` next to this module.

Anything else that does not fit is an error naming the key; a status word not in that list is
an error, never read as a pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from toolkit.acceptance import failure
from toolkit.config import StrictModel, open_regular, parse_json, parse_yaml, validate
from toolkit.errors import EXIT_USAGE, AcceptanceError, ConfigError, clip
from toolkit.profile.floors import DcgmDiagSpec

# The document's root key: DCGM 3.x, then 4.x (NvvsJsonStrings.h NVVS_NAME).
ROOT_KEYS = ("DCGM GPU Diagnostic", "DCGM Diagnostic")
METADATA = "metadata"  # 4.x: NVVS_METADATA, a sibling of the root
DRIVER_KEY = "Driver Version Detected"  # NVVS_DRIVER_VERSION
DEPLOYMENT = "Deployment"  # the category of the software checks, one result for every GPU
ALL_GPUS = "all"
# dcgmi's status words (dcgmi/Diag.cpp, Diag::HelperDisplayDiagResult), read case-blind: nvvs
# itself writes them upper case (PASS, FAIL).
STATUSES = {"pass": "Pass", "fail": "Fail", "warn": "Warn", "skip": "Skip", "not run": "Not Run"}
# A finding's three outcomes: a plugin that ran on no GPU measured nothing and never passes.
PASSED, FAILED, NOT_MEASURED = "passed", "failed", "not measured"
# Bound on the text read: a level 4 run of 8 GPUs prints a few hundred KiB at most.
MAX_OUTPUT_BYTES = 4 << 20
# How long each level may run on the node (dcgmi-diag(1): level 1 seconds, 2 about two
# minutes, 3 about 15 minutes, 4 longer), with room for a slow node.
LEVEL_TIMEOUT_S = {1: 300, 2: 900, 3: 3600, 4: 10800}
NOT_FOUND = "dcgmi not found"
# Warnings of one result shown in a message (each clipped); the rest are counted.
MAX_WARNINGS_SHOWN = 3
# What `accept parse` holds a capture to: the profile rule's defaults (Warn and a Skip on some
# GPUs are shown, not failed); the level is not the capture's business.
CAPTURE_RULE = DcgmDiagSpec(level=1)


class DcgmUnreadable(AcceptanceError):
    """The text is not a ``dcgmi diag -j`` document (the message names the key)."""


# --- DCGM's error codes (dcgm_errors.yml) ------------------------------------------------------


class _Codes(StrictModel):
    prefixes: dict[str, str]
    severities: dict[int, str]
    categories: dict[int, str]
    errors: dict[int, str]


@lru_cache(maxsize=1)
def _codes() -> _Codes:
    source = "toolkit/acceptance/dcgm_errors.yml"
    text = resources.files("toolkit.acceptance").joinpath("dcgm_errors.yml").read_text("utf-8")
    return validate(_Codes, parse_yaml(text, source), source)


def severity_name(number: int | None) -> str | None:
    """DCGM's name of an ``error_severity`` (``CONFIG`` for 5), None when not in the table."""
    return None if number is None else _codes().severities.get(number)


def category_name(number: int | None) -> str | None:
    """DCGM's name of an ``error_category`` (``SOFTWARE_OTHER`` for 8), None when unknown."""
    return None if number is None else _codes().categories.get(number)


def error_name(number: int | None) -> str | None:
    """DCGM's name of an ``error_id`` (``DCGM_FR_PERSISTENCE_MODE`` for 29), None when unknown."""
    codes = _codes()
    name = None if number is None else codes.errors.get(number)
    return None if name is None else codes.prefixes["errors"] + name


# --- the document ------------------------------------------------------------------------------


@dataclass(frozen=True)
class DcgmWarning:
    """One warning of a result, with DCGM's numbers for it (None where the release gave none)."""

    text: str
    error_id: int | None = None
    severity: int | None = None
    category: int | None = None

    def codes(self) -> str:
        """DCGM's numbers by name: ``DCGM error 29 DCGM_FR_PERSISTENCE_MODE, severity CONFIG
        (5), category SOFTWARE_OTHER (8)``; empty without numbers."""
        parts = []
        if self.error_id is not None:
            parts.append(f"DCGM error {self.error_id} {error_name(self.error_id) or '(unknown)'}")
        for word, number, name in (
            ("severity", self.severity, severity_name(self.severity)),
            ("category", self.category, category_name(self.category)),
        ):
            if number is not None:
                parts.append(f"{word} {name or 'unknown'} ({number})")
        return ", ".join(parts)

    def describe(self) -> str:
        """The text (cut to a sane length), then DCGM's numbers by name in brackets."""
        codes = self.codes()
        return f"{clip(self.text)} [{codes}]" if codes else clip(self.text)

    def to_dict(self) -> dict[str, Any]:
        """The warning as JSON-ready data, numbers and names."""
        return {
            "warning": self.text,
            "error_id": self.error_id,
            "error_name": error_name(self.error_id),
            "severity": self.severity,
            "severity_name": severity_name(self.severity),
            "category": self.category,
            "category_name": category_name(self.category),
        }


@dataclass(frozen=True)
class PluginResult:
    """One plugin's result on one GPU (or on the GPUs it names together; ``all``: every GPU)."""

    category: str
    plugin: str
    gpu: str
    status: str  # a value of STATUSES
    warnings: tuple[DcgmWarning, ...] = ()
    info: tuple[str, ...] = ()


@dataclass(frozen=True)
class Diagnostic:
    """One ``dcgmi diag -j`` document."""

    version: str | None
    results: tuple[PluginResult, ...]
    runtime_error: str | None = None
    driver: str | None = None
    # Every test the document lists, (category, plugin) in its order, GPU results or not.
    plugins: tuple[tuple[str, str], ...] = ()
    root: str = ROOT_KEYS[1]


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


def _optional_text(obj: dict[str, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    return None if value is None else _text(value, f"{where}.{key}")


def _number(obj: dict[str, Any], key: str, where: str) -> int | None:
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise DcgmUnreadable(f"{where}.{key}: a number expected, found {clip(repr(value))}")
    return value


def _gpu(result: dict[str, Any], category: str, where: str) -> str:
    for key in ("gpu_id", "gpu_ids", "entity_id"):
        if key in result:
            value = result[key]
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise DcgmUnreadable(f"{where}.{key}: a GPU id expected, found {clip(repr(value))}")
            return str(value)
    if category == DEPLOYMENT:
        return ALL_GPUS
    raise DcgmUnreadable(f"{where}: no gpu_id, gpu_ids or entity_id")


def _info(result: dict[str, Any], where: str) -> tuple[str, ...]:
    raw = result.get("info")
    if raw is None:
        return ()
    if isinstance(raw, str):  # nvvs joins info lines into one string in older releases
        return (raw,)
    return tuple(_text(item, f"{where}.info[{i}]") for i, item in enumerate(_list(raw, where)))


def _warnings(result: dict[str, Any], where: str) -> tuple[DcgmWarning, ...]:
    raw = result.get("warnings")
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (DcgmWarning(raw),)
    out = []
    for i, item in enumerate(_list(raw, f"{where}.warnings")):
        iwhere = f"{where}.warnings[{i}]"
        if not isinstance(item, dict):
            out.append(DcgmWarning(_text(item, iwhere)))
            continue
        # 3.x Deployment results write the text under "warnings" (HelperJsonAddBasicTests).
        key = "warning" if "warning" in item or "warnings" not in item else "warnings"
        out.append(
            DcgmWarning(
                _text(item.get(key), f"{iwhere}.{key}"),
                error_id=_number(item, "error_id", iwhere),
                severity=_number(item, "error_severity", iwhere),
                category=_number(item, "error_category", iwhere),
            )
        )
    return tuple(out)


def _status(value: Any, where: str) -> str:
    word = _text(value, where)
    status = STATUSES.get(word.strip().lower())
    if status is None:
        raise DcgmUnreadable(
            f"{where}: unknown status {clip(repr(word))} (known: {', '.join(STATUSES.values())})"
        )
    return status


def _find_root(document: Any) -> str:
    document = _obj(document, "document")
    roots = [key for key in ROOT_KEYS if key in document]
    if len(roots) != 1:
        raise DcgmUnreadable(
            f"document: one of {' or '.join(repr(k) for k in ROOT_KEYS)} expected, found keys "
            f"{clip(', '.join(sorted(map(str, document))) or 'none')}"
        )
    return roots[0]


def _load(text: str) -> Any:
    if len(text.encode("utf-8", "surrogatepass")) > MAX_OUTPUT_BYTES:
        raise DcgmUnreadable(f"output larger than {MAX_OUTPUT_BYTES} bytes; refusing it")
    try:
        return parse_json(text, "dcgmi diag -j")
    except ConfigError as err:
        raise DcgmUnreadable(err.message) from None


def parse_diag(text: str) -> Diagnostic:
    """Parse ``dcgmi diag -j`` output.

    Raises:
        DcgmUnreadable: Not such a document; the message names the key and the rule.
    """
    return parse_document(_load(text))


def parse_document(document: Any) -> Diagnostic:
    """Read a ``dcgmi diag -j`` document already loaded from its JSON.

    Raises:
        DcgmUnreadable: Not such a document; the message names the key and the rule.
    """
    name = _find_root(document)
    root = _obj(document[name], name)
    metadata = _obj(document.get(METADATA, {}), METADATA)
    # 4.x: metadata; 3.x: beside the root; a run that could not start: inside the root.
    version = (
        _optional_text(metadata, "version", METADATA)
        or _optional_text(document, "version", "document")
        or _optional_text(root, "version", name)
    )
    driver = _optional_text(metadata, DRIVER_KEY, METADATA) or _optional_text(
        document, DRIVER_KEY, "document"
    )
    error = _optional_text(root, "runtime_error", name)
    results: list[PluginResult] = []
    plugins: list[tuple[str, str]] = []
    categories = _list(root.get("test_categories", []), f"{name}.test_categories")
    for c, raw_category in enumerate(categories):
        where = f"test_categories[{c}]"
        category = _obj(raw_category, where)
        cname = _text(category.get("category"), f"{where}.category")
        for t, raw_test in enumerate(_list(category.get("tests"), f"{where}.tests")):
            twhere = f"{where}.tests[{t}]"
            test = _obj(raw_test, twhere)
            plugin = _text(test.get("name"), f"{twhere}.name")
            if (cname, plugin) not in plugins:
                plugins.append((cname, plugin))
            for r, raw in enumerate(_list(test.get("results"), f"{twhere}.results")):
                rwhere = f"{twhere}.results[{r}]"
                result = _obj(raw, rwhere)
                group = result.get("entity_group", "GPU")
                if group != "GPU":  # 4.x also reports CPUs, NvSwitches ...: not this check's
                    continue
                results.append(
                    PluginResult(
                        category=cname,
                        plugin=plugin,
                        gpu=_gpu(result, cname, rwhere),
                        status=_status(result.get("status"), f"{rwhere}.status"),
                        warnings=_warnings(result, rwhere),
                        info=_info(result, rwhere),
                    )
                )
    if error is None and not results and not plugins:
        raise DcgmUnreadable(f"{name}: no GPU result in test_categories")
    return Diagnostic(
        version=version,
        results=tuple(results),
        runtime_error=error,
        driver=driver,
        plugins=tuple(plugins),
        root=name,
    )


# --- the rule ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """The rule held against one plugin (or the run as a whole: ``plugin`` ``run``).

    ``ok`` is True (passed), False (failed) or None: not measured (the plugin ran on no GPU),
    the reason in ``message``; never a pass."""

    plugin: str
    ok: bool | None
    message: str
    measured: Any = None
    floor: Any = None
    category: str | None = None
    # DCGM's warnings on the GPUs that failed the plugin, or were shown in it.
    warnings: tuple[DcgmWarning, ...] = ()

    @property
    def outcome(self) -> str:
        """``passed``, ``failed`` or ``not measured``."""
        return NOT_MEASURED if self.ok is None else PASSED if self.ok else FAILED

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data, DCGM's numbers with their names."""
        return {
            "plugin": self.plugin,
            "category": self.category,
            "outcome": self.outcome,
            "message": self.message,
            "failed_gpus": self.measured,
            "warnings": [w.to_dict() for w in self.warnings],
        }


@dataclass
class _Plugin:
    failed: list[str] = field(default_factory=list)
    noted: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)
    warnings: list[DcgmWarning] = field(default_factory=list)
    count: int = 0
    skipped: int = 0


def _describe(result: PluginResult) -> str:
    why = "; ".join(w.describe() for w in result.warnings[:MAX_WARNINGS_SHOWN])
    if len(result.warnings) > MAX_WARNINGS_SHOWN:
        why += f" (+{len(result.warnings) - MAX_WARNINGS_SHOWN} more)"
    who = "all GPUs" if result.gpu == ALL_GPUS else f"GPU {result.gpu}"
    return f"{who} {result.status}: {why or 'no warning given'}"


def judge(diag: Diagnostic, spec: DcgmDiagSpec) -> list[Finding]:
    """One finding per plugin, in the document's order: Fail (and Not Run) on any GPU fails it;
    Warn and Skip are shown and fail it only where the profile says so; a plugin that ran on
    no GPU (Skip on every GPU, or no GPU result) is not measured, unless the profile fails
    Skip."""
    if diag.runtime_error:
        return [Finding("run", False, f"dcgmi diag could not run: {clip(diag.runtime_error)}")]
    failing = {"Fail", "Not Run"}
    if spec.fail_on_warn:
        failing.add("Warn")
    if spec.fail_on_skip:
        failing.add("Skip")
    categories = dict((plugin, category) for category, plugin in reversed(diag.plugins))
    plugins: dict[str, _Plugin] = {plugin: _Plugin() for _, plugin in diag.plugins}
    for result in diag.results:
        entry = plugins.setdefault(result.plugin, _Plugin())
        categories.setdefault(result.plugin, result.category)
        entry.count += 1
        entry.skipped += result.status == "Skip"
        if result.status in failing:
            entry.failed.append(_describe(result))
            entry.bad.append(result.gpu)
        elif result.status != "Pass":
            entry.noted.append(_describe(result))
        if result.status != "Pass":
            entry.warnings.extend(w for w in result.warnings if w not in entry.warnings)
    findings = []
    for plugin, entry in plugins.items():
        ok: bool | None = not entry.failed
        if entry.failed:
            message = f"{plugin}: " + " | ".join(entry.failed + entry.noted)
        elif not entry.count:
            ok, message = None, f"{plugin}: not measured: no GPU result"
        elif entry.skipped == entry.count:
            ok = None
            message = f"{plugin}: not measured: skipped on every GPU (" + (
                " | ".join(entry.noted) + ")"
            )
        elif entry.noted:
            message = f"{plugin}: passed, with " + " | ".join(entry.noted)
        else:
            message = f"{plugin}: Pass on {entry.count} GPU result(s)"
        findings.append(
            Finding(
                plugin,
                ok,
                message,
                measured=entry.bad,
                floor=sorted(failing),
                category=categories.get(plugin),
                warnings=tuple(entry.warnings),
            )
        )
    return findings


def advice(finding: Finding) -> failure.Advice | None:
    """A failed plugin's class and next action, by DCGM's own severity of its warnings (the
    most consequential class among them: ``failure.DCGM_SEVERITY``), else by its test category
    (a Deployment test checks the software); not measured is the harness's; None for ``run``
    (the check's name decides) and for a plugin that passed."""
    if finding.plugin == "run" or finding.ok is True:
        return None
    if finding.ok is None:
        return failure.DCGM_NOT_MEASURED
    by_severity = [
        failure.DCGM_SEVERITY[name]
        for name in (severity_name(w.severity) for w in finding.warnings)
        if name in failure.DCGM_SEVERITY
    ]
    chosen = failure.worst(by_severity)
    if chosen is not None:
        return chosen
    return failure.DCGM_CATEGORY.get(finding.category or "", failure.DCGM_DEFAULT)


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
        return None, Finding("run", None, f"not judged ({NOT_FOUND})")
    raw = str(section.get("raw_output") or "")
    try:
        return parse_diag(raw), None
    except DcgmUnreadable as err:
        why = section.get("error") or err.message
        return None, Finding("run", False, f"dcgmi diag -j output unreadable: {clip(str(why))}")


# --- a captured document (`gpunode accept parse`) ------------------------------------------------


@dataclass(frozen=True)
class CaptureReport:
    """A captured ``dcgmi diag -j`` document judged by :data:`CAPTURE_RULE`."""

    file: str
    diag: Diagnostic
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        """No plugin failed (a plugin not measured is shown, and does not fail a capture)."""
        return all(f.ok is not False for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """The report as one JSON-ready document."""
        return {
            "kind": "dcgmi diag",
            "file": self.file,
            "root": self.diag.root,
            "version": self.diag.version,
            "driver": self.diag.driver,
            "runtime_error": self.diag.runtime_error,
            "ok": self.ok,
            "plugins": [f.to_dict() for f in self.findings],
        }


def read_capture(path: Path) -> CaptureReport | None:
    """A captured ``dcgmi diag -j`` document judged, or None when the file is not one (JSON
    whose object holds a DCGM root key); the file is read once, bounded.

    Raises:
        DcgmUnreadable: A DCGM document that does not read (exit 2); the message names the
            file and the key.
        ConfigError: Not a regular file, or unreadable.
    """
    with open_regular(path, "capture") as stream:
        try:
            data = stream.read(MAX_OUTPUT_BYTES + 1)
        except OSError as err:
            raise AcceptanceError(f"{path}: cannot read: {err.strerror or err}") from None
    if data.lstrip()[:1] != b"{" or len(data) > MAX_OUTPUT_BYTES:
        return None
    try:
        document = parse_json(data.decode("utf-8", "replace"), str(path))
    except ConfigError:
        return None
    if not isinstance(document, dict) or not any(key in document for key in ROOT_KEYS):
        return None
    try:
        diag = parse_document(document)
    except DcgmUnreadable as err:
        raise DcgmUnreadable(f"{path}: {err.message}", EXIT_USAGE) from None
    return CaptureReport(str(path), diag, tuple(judge(diag, CAPTURE_RULE)))
