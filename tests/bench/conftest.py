"""Benchmarks print their figures: never capture their output, whatever pytest's flags. The
converged fleet that the capacity and converge benchmarks share (bench_fleet.py), taken down
once its last user is done: the lab's nodes never idle through the other benchmarks."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import ExitStack

import pytest
from bench_fleet import Fleet, converged_fleet

from toolkit.lab import image as lab_image


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    # Innermost (trylast), inside the capture plugin's own wrapper, which would resume capturing.
    capture = item.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        yield


# What the fleet holds (its lab), released after the last test that uses it.
_FLEET = ExitStack()


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The fleet's lab nodes, each first-converged once under the meter
    (bench_fleet.converged_fleet)."""
    try:
        lab_image.docker_client()
    except Exception as err:  # like every lab test: fail, never skip, without Docker
        pytest.fail(f"the benchmarks' fleet needs the Docker engine: {err}", pytrace=False)
    with _FLEET:
        yield _FLEET.enter_context(converged_fleet(tmp_path_factory.mktemp("fleet")))


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if "fleet" not in getattr(item, "fixturenames", ()):
        return
    later = item.session.items[item.session.items.index(item) + 1 :]
    if not any("fleet" in getattr(i, "fixturenames", ()) for i in later):
        _FLEET.close()
