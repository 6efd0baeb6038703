"""Shared test fixtures, and the rule that CI skips nothing it could run."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Generator
from pathlib import Path

import pytest
from shared_fixtures import REPO

from toolkit.acceptance import payload

# In CI (`CI=true`, set by the CI runner) every prerequisite is installed by scripts/setup-host,
# so a skip means a broken set-up, not a missing optional tool. Only these reasons, which a
# machine cannot fix by installing something, may skip there.
CI_ALLOWED_SKIPS = (
    "kernel has no md",  # software RAID needs a kernel with md
)


@pytest.fixture
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def runner_pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node-side runner's zipapp as shipped (toolkit.acceptance.payload), in a temporary
    folder: ``python3 <it> <subcommand> ...`` runs the runner as a node does."""
    path = tmp_path_factory.mktemp("runner") / payload.ARCHIVE
    path.write_bytes(payload.runner_zipapp())
    return path


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes") or not report.skipped:
        return
    reason = str(report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr)
    if not any(allowed in reason for allowed in CI_ALLOWED_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where nothing may be missing: {reason}"


# Wall time per test file (setup, call and teardown; a session fixture counts where it is first
# set up): what a suite of 60 minutes spends where, printed at the end of every run.
_FILE_SECONDS: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _FILE_SECONDS[report.nodeid.split("::", 1)[0]] += report.duration


# Seconds since the session began, when each lab tier's file starts (and when the unit tier
# does): a run that CI stops at its time limit, which never reaches the summary above, still
# shows where its time went.
_STARTED = time.monotonic()
_LAST_FILE: list[str] = []


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    path = nodeid.split("::", 1)[0]
    last = _LAST_FILE[0] if _LAST_FILE else ""
    _LAST_FILE[:] = [path]
    unit = path.startswith("tests/unit/")
    if path == last or (unit and last.startswith("tests/unit/")) or not _REPORTER:
        return
    _REPORTER[0].ensure_newline()
    _REPORTER[0].write_line(
        f"[{time.monotonic() - _STARTED:6.0f} s] {'tests/unit' if unit else path}"
    )


_REPORTER: list[pytest.TerminalReporter] = []


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is not None:
        _REPORTER.append(reporter)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _FILE_SECONDS:
        return
    total = sum(_FILE_SECONDS.values())
    terminalreporter.write_sep("=", f"seconds per test file ({total:.0f} s in all)")
    ranked = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])
    for path, seconds in ranked[:40]:
        terminalreporter.write_line(f"{seconds:8.1f}s {path}")
    rest = ranked[40:]
    if rest:
        terminalreporter.write_line(
            f"{sum(s for _, s in rest):8.1f}s in the other {len(rest)} files"
        )


@pytest.fixture(scope="session", autouse=True)
def _own_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Generator[None, None, None]:
    """Tests never write into the checkout's state (``.gpunode/``): every run they record,
    through the CLI or the Python API, goes to a state directory of the session's own (a
    test may still point ``GPUNODE_STATE_DIR`` elsewhere)."""
    before = os.environ.get("GPUNODE_STATE_DIR")
    os.environ["GPUNODE_STATE_DIR"] = str(tmp_path_factory.mktemp("gpunode-state"))
    yield
    if before is None:
        os.environ.pop("GPUNODE_STATE_DIR", None)
    else:
        os.environ["GPUNODE_STATE_DIR"] = before
