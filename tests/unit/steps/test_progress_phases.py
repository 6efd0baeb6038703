"""The phases of ``gpunode up`` that used to run without a heartbeat say where they are in a
log (issue 42): the training image's transfer to the nodes (a first ``up`` on the lab was
silent for 38.5 s there) and the stack-lock check against the repositories.

No Docker and no SSH: a fake engine saves a small archive, fake nodes load it slowly, and the
heartbeat's interval is a tenth of a second.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import Recorder, heartbeat_threads

from toolkit.errors import StackError
from toolkit.images import distribute
from toolkit.inventory import Host
from toolkit.remote import Result
from toolkit.steps import up as up_step
from toolkit.steps.accept import run as accept_step

INTERVAL = 0.1
IMAGE_ID = "sha256:" + "ab" * 32


def _archive() -> bytes:
    """A ``docker save`` archive of one layer, as ``_archive_layers`` reads it."""
    files = {
        "manifest.json": json.dumps([{"Config": "config.json", "Layers": ["l1/layer.tar"]}]),
        "config.json": json.dumps({"rootfs": {"diff_ids": ["sha256:" + "cd" * 32]}}),
        "l1/layer.tar": "x" * 4096,
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return out.getvalue()


class FakeImage:
    id = IMAGE_ID

    def save(self, chunk_size: int, named: bool) -> Iterator[bytes]:
        data = _archive()
        yield from (data[i : i + 1024] for i in range(0, len(data), 1024))


class FakeClient:
    class images:  # docker's client spells it so
        @staticmethod
        def get(_ref: str) -> FakeImage:
            return FakeImage()


class SlowNode:
    """A node without the image whose ``docker load`` takes ``load_s`` seconds."""

    def __init__(self, host: Host, load_s: float) -> None:
        self.host = host
        self.load_s = load_s
        self.loaded = False

    def run(self, command: str, *, timeout: float | None = None, **_kw: Any) -> Result:
        if command.startswith(distribute.INSPECT_ID) and self.loaded:
            return Result(self.host.name, command, 0, IMAGE_ID + "\n", "")
        return Result(self.host.name, command, 1, "", "no such image")

    def run_with_input(
        self, command: str, chunks: Iterable[bytes], *, timeout: float | None = None
    ) -> Result:
        for _chunk in chunks:
            pass
        time.sleep(self.load_s)
        self.loaded = True
        return Result(self.host.name, command, 0, "Loaded image ID: " + IMAGE_ID, "")

    def close(self) -> None:
        pass


def _host(name: str) -> Host:
    return Host(name, "10.0.0.1", 22, "admin", None, None, ("lab",), {})


def test_an_image_push_over_ssh_says_where_it_is_while_the_nodes_load(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    hosts = [_host("node-1"), _host("node-2")]
    monkeypatch.setattr(distribute, "open_node", lambda host: SlowNode(host, INTERVAL * 4))
    said = Recorder()
    started = time.monotonic()
    outcome = distribute.push(
        IMAGE_ID,
        hosts,
        progress=said,
        client=FakeClient(),  # type: ignore[arg-type]
        workdir=tmp_path,
        interval=INTERVAL,
    )
    ended = time.monotonic()
    assert outcome.ok and outcome.transferred == 2, outcome.to_dict()
    beats = [line for line in said.text if line.startswith("image push: ")]
    assert beats, said.text
    # What it does and how far: the bytes streamed into the nodes' loads, nodes done of all.
    assert any(" MB sent (" in line and "/2, " in line for line in beats), beats
    assert all(line.endswith(" s)") for line in beats), beats
    # Never silent for much longer than the interval, and nothing said after the push.
    times = [started, *(at for at, _line in said.lines), ended]
    assert max(later - earlier for earlier, later in pairwise(times)) < INTERVAL * 3
    assert all(at <= ended for at, _line in said.lines)
    assert heartbeat_threads() == []


def test_a_node_that_fails_its_load_still_counts_as_done(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    class Refusing(SlowNode):
        def run_with_input(
            self, command: str, chunks: Iterable[bytes], *, timeout: float | None = None
        ) -> Result:
            time.sleep(self.load_s)
            return Result(self.host.name, command, 1, "", "no space left on device")

    nodes = {"node-1": SlowNode, "node-2": Refusing}
    monkeypatch.setattr(
        distribute, "open_node", lambda host: nodes[host.name](host, INTERVAL * 2.5)
    )
    said = Recorder()
    outcome = distribute.push(
        IMAGE_ID,
        [_host("node-1"), _host("node-2")],
        progress=said,
        client=FakeClient(),  # type: ignore[arg-type]
        workdir=tmp_path,
        interval=INTERVAL,
    )
    assert [n.action for n in outcome.nodes] == ["loaded", "failed"]
    assert "no space left" in (outcome.nodes[1].error or "")
    assert heartbeat_threads() == []


def test_acceptance_hands_its_progress_to_the_image_push(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``up`` and ``accept`` stage the image with the command's progress, so the push's
    heartbeat reaches the log (it used to be called without one: 38.5 s of silence)."""
    seen: dict[str, Any] = {}

    class Recipe:
        tag = "gpunode-training:abc"
        registry = None

    def push(image_id: str, hosts: list[Host], **kw: Any) -> distribute.PushOutcome:
        seen.update(kw)
        nodes = [distribute.NodeTransfer(h.name, "loaded", image_id) for h in hosts]
        return distribute.PushOutcome(image_id, "ssh", None, nodes)

    monkeypatch.setattr(accept_step, "recipe_for", lambda _inv, _group: Recipe())
    monkeypatch.setattr(accept_step, "docker_client", FakeClient)
    monkeypatch.setattr(accept_step, "push", push)
    plan = accept_step.NodePlan(
        host=_host("node-1"),
        group="lab",
        spec=None,  # type: ignore[arg-type]  # not read when the image is staged
        stack=None,
        hardware=None,
    )
    said = Recorder()
    inventory: Any = None  # only handed to recipe_for
    accept_step._stage_images([plan], inventory, {}, said)
    assert seen["progress"] is said
    assert plan.image == IMAGE_ID
    # The image `up`'s image stage chose is staged by its ID, whatever the tag says now.
    accept_step._stage_images([plan], inventory, {"lab": "sha256:" + "c" * 64}, said)
    assert plan.image == "sha256:" + "c" * 64


def test_up_checks_the_stack_locks_under_a_heartbeat(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Checking the locks fetches the repositories' indexes: a slow one is a phase that says
    where it is, and stops saying it once the check ends (here with a refusal)."""

    def slow_precheck(*_a: Any, **_kw: Any) -> Any:
        time.sleep(INTERVAL * 3.5)
        raise StackError("the stack locks do not hold; nothing was changed")

    monkeypatch.setattr(up_step, "precheck", slow_precheck)
    monkeypatch.setattr(up_step, "HEARTBEAT_S", INTERVAL)
    said = Recorder()
    with pytest.raises(StackError):
        up_step.run_up(up_step.UpOptions(inventory=tmp_path, runs_dir=tmp_path), said)
    assert len(said.text) >= 2, said.text
    assert all(
        line.startswith("check: the stack and its locks against the repositories (")
        for line in said.text
    ), said.text
    assert heartbeat_threads() == []
