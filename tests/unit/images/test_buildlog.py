"""An image build shows one line per step, cut to the terminal, and keeps the builder's whole
output in its run folder (issue 42, item 2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toolkit.errors import ImageError
from toolkit.images import build
from toolkit.images.buildlog import BuildLog, Step, parse_step, step_line, terminal_width
from toolkit.progress import Heartbeat

LONG_RUN = (
    "RUN set -eux; apt-get update; apt-get install -y --no-install-recommends "
    + " ".join(f"package-number-{i}=1.2.3-1" for i in range(30))
    + "; rm -rf /var/lib/apt/lists/*"
)


@pytest.mark.parametrize(
    ("text", "step"),
    [
        ("Step 1/9 : FROM sha256:abc", Step(1, 9, "FROM sha256:abc")),
        ("Step 12/14 : RUN a &&     b \\\n    c\n", Step(12, 14, "RUN a && b \\ c")),
        (" ---> Running in 0123456789ab\n", None),
        ("Successfully built 0123\n", None),
    ],
)
def test_builder_steps_are_read_from_its_stream(text: str, step: Step | None) -> None:
    assert parse_step(text) == step


@pytest.mark.parametrize("width", [40, 80, 200])
def test_a_step_line_fits_the_width_and_keeps_its_number(width: int) -> None:
    line = step_line(Step(3, 9, LONG_RUN), width)
    assert len(line) <= width
    assert line.startswith("Step 3/9 : RUN set -eux;")
    assert line.endswith("…") == (len(f"Step 3/9 : {LONG_RUN}") > width)
    assert step_line(Step(1, 9, "FROM x"), width) == "Step 1/9 : FROM x"


def test_without_a_terminal_the_width_is_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    # pytest's output is captured: stdout is no terminal here.
    assert terminal_width() == 80


class _Api:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events

    def build(self, **_kwargs: Any) -> Iterator[dict[str, Any]]:
        return iter(self.events)


class _Client:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.api = _Api(events)


class _Context:
    def tar(self, _epoch: int) -> bytes:
        return b""


class _Recipe:
    source_date_epoch = 0


STREAM = [
    {"stream": "Step 1/3 : FROM sha256:" + "a" * 64},
    {"stream": "\n"},
    {"stream": " ---> " + "a" * 12 + "\n"},
    {"stream": f"Step 2/3 : {LONG_RUN}"},
    {"stream": "\n"},
    {"stream": "Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\n" * 50},
    {"stream": "Step 3/3 : LABEL gpunode.stack=s1"},
    {"stream": "\n"},
    {"aux": {"ID": "sha256:" + "b" * 64}},
    {"stream": "Successfully built " + "b" * 12 + "\n"},
]


def _engine_build(events: list[dict[str, Any]], tmp_path: Path) -> tuple[list[str], Path, str]:
    said: list[str] = []
    with BuildLog(tmp_path) as log, Heartbeat(said.append, "image build", interval=60) as beat:
        try:
            image_id = build._engine_build(
                _Client(events),  # type: ignore[arg-type]
                _Context(),  # type: ignore[arg-type]
                _Recipe(),  # type: ignore[arg-type]
                False,
                beat,
                log,
                80,
            )
        except ImageError as err:
            image_id = err.message
    return said, log.path, image_id


def test_the_build_shows_one_line_per_step_and_logs_everything(tmp_path: Path) -> None:
    said, path, image_id = _engine_build(STREAM, tmp_path)
    assert image_id == "sha256:" + "b" * 64
    assert len(said) == 3
    assert [line.split(" : ")[0] for line in said] == ["Step 1/3", "Step 2/3", "Step 3/3"]
    assert all(len(line) <= 80 for line in said)
    log = path.read_text()
    assert path == tmp_path / "build.log"
    assert LONG_RUN in log and log.count("Get:1 http") == 50 and "Successfully built" in log


def test_a_failed_build_names_its_full_log(tmp_path: Path) -> None:
    events = [*STREAM[:6], {"error": "The command '/bin/sh -c set -eux' returned a code: 100"}]
    said, path, message = _engine_build(events, tmp_path)
    assert message.startswith("the image build failed: The command")
    assert message.endswith(f"(full log: {path})")
    assert "returned a code: 100" in path.read_text()
    assert len(said) == 2
