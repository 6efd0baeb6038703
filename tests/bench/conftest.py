"""Benchmarks print their figures: never capture their output, whatever pytest's flags."""

from __future__ import annotations

from collections.abc import Generator

import pytest


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # Innermost (trylast), inside the capture plugin's own wrapper, which would resume capturing.
    capture = item.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        yield
