"""``gpunode image push``: the training image onto the nodes, by registry or over SSH.

With ``gpunode_image_registry`` set, the image is pushed there and every node pulls it by
digest (``<registry>/gpunode-training@sha256:...``); without it, the image is saved once and
streamed over SSH into ``docker load`` on every node at once. Either way a node that already
holds the image's ID is skipped, and each node's image ID is checked after the transfer:
the ID is the SHA-256 of the image's config, so equal IDs are equal images.

Over SSH a node is sent only the layers it lacks, as a registry pull would: it reports the
layer stacks (``RootFS.Layers``, diff IDs bottom first) of the images it holds, and the saved
archive goes to it without the ``layer.tar`` of each layer whose whole stack up to it the node
already has. ``docker load`` looks a layer up by its chain ID (the digest of that stack) and
reads the layer's file only when the chain is missing (moby ``image/tarexport/load.go``:
``lss.Get(ChainID)`` before ``loadLayer``); test_05 loads such a subset on a lab node. A node
whose engine refuses the subset (a layer went between the look and the load) gets the whole
archive, and says so.

The transfer says nothing of its own for as long as a ``docker save`` and a ``docker load``
of hundreds of MB take (a first ``up`` on the lab was silent for 38.5 s here, issue 42): a
heartbeat (:class:`~toolkit.progress.Heartbeat`, phase ``image push``) says what it does and
how many nodes are done whenever nothing else was said for ``interval`` seconds.
"""

from __future__ import annotations

import json
import os
import shlex
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from toolkit.errors import ConfigError, ImageError, RemoteError
from toolkit.images.engine import docker_client
from toolkit.images.normalise import chain_prefixes
from toolkit.images.recipe import REPOSITORY
from toolkit.inventory import Host
from toolkit.progress import HEARTBEAT_S, Heartbeat, Progress
from toolkit.remote import Node, open_node, parallel

CHUNK = 1 << 20
INSPECT_ID = "docker image inspect --format '{{.Id}}' "
# Every image's layer stack on a node, one JSON list of diff IDs per line.
HELD_LAYERS = (
    "docker image ls -aq --no-trunc | sort -u | "
    "xargs -r docker image inspect --format '{{json .RootFS.Layers}}'"
)


@dataclass
class NodeTransfer:
    """What happened on one node."""

    host: str
    action: str  # "present", "loaded", "pulled" or "failed"
    image_id: str | None = None
    bytes_sent: int = 0
    layers_sent: int = 0  # over SSH: the layers the node lacked (of layers_total)
    layers_total: int = 0
    note: str | None = None
    seconds: float = 0.0
    error: str | None = None


@dataclass
class PushOutcome:
    """One push to every node."""

    image_id: str
    method: str  # "ssh" or "registry"
    reference: str | None
    nodes: list[NodeTransfer] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Every node holds the image."""
        return all(n.action != "failed" for n in self.nodes)

    @property
    def transferred(self) -> int:
        """Nodes the image was sent to by this push."""
        return sum(1 for n in self.nodes if n.action in ("loaded", "pulled"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "image_id": self.image_id,
            "method": self.method,
            "reference": self.reference,
            "ok": self.ok,
            "transferred": self.transferred,
            "seconds": round(self.seconds, 2),
            "nodes": [n.__dict__ for n in self.nodes],
        }


def node_image_id(node: Node, ref: str) -> str | None:
    """The ID of an image on a node, or None when the node does not have it."""
    res = node.run(INSPECT_ID + shlex.quote(ref), timeout=60)
    return res.stdout.strip() or None if res.ok else None


def _saved_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        yield from iter(lambda: handle.read(CHUNK), b"")


def push(
    image_id: str,
    hosts: list[Host],
    *,
    registry: str | None = None,
    tag: str | None = None,
    progress: Progress = lambda _m: None,
    client: docker.DockerClient | None = None,
    workdir: Path | None = None,
    interval: float = HEARTBEAT_S,
) -> PushOutcome:
    """Put the image on every host (registry when one is named, else SSH).

    Lines go to ``progress``: one per node as it starts and ends, and the heartbeat's
    (``image push: <what now> (<nodes done>/<nodes>, <elapsed> s)``) after each ``interval``
    seconds of silence.

    Raises:
        ImageError: The image is not on this engine, or the registry refused the push.
        ConfigError: No hosts.
    """
    if not hosts:
        raise ConfigError("no hosts to push the image to")
    client = client or docker_client()
    try:
        image = client.images.get(image_id)
    except docker.errors.ImageNotFound as err:
        raise ImageError(f"image {image_id} is not on this engine: build it first") from err
    image_id = str(image.id)
    started = time.perf_counter()
    with Heartbeat(
        progress,
        "image push",
        what=f"{image_id[:19]} to the nodes",
        total=len(hosts),
        interval=interval,
    ) as beat:
        if registry:
            # The registry repository is <registry>/gpunode-training; the local tag's tag part
            # (the stack id) names the image there.
            remote_tag = (
                tag.rsplit(":", 1)[1] if tag and ":" in tag.rsplit("/", 1)[-1] else "latest"
            )
            beat.update(f"pushing {image_id[:19]} to {registry}")
            reference = registry_push(client, image_id, registry, remote_tag, beat.say)
            beat.update(f"the nodes pull {reference}")
            nodes = _fan_out(hosts, image_id, lambda node: _pull(node, reference, image_id), beat)
            outcome = PushOutcome(image_id, "registry", reference, nodes)
        else:
            outcome = PushOutcome(image_id, "ssh", None, [])
            outcome.nodes = _ssh(client, image_id, hosts, tag, beat, workdir)
    outcome.seconds = time.perf_counter() - started
    return outcome


def registry_push(
    client: docker.DockerClient, image_id: str, registry: str, tag: str, progress: Progress
) -> str:
    """Push to ``registry`` and return the pull-by-digest reference.

    Raises:
        ImageError: The registry refused the push or named no digest.
    """
    repository = f"{registry.rstrip('/')}/{REPOSITORY}"
    client.images.get(image_id).tag(repository, tag)
    digest = None
    try:
        for event in client.api.push(repository, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise ImageError(f"pushing to {repository} failed: {event['error']}")
            digest = (event.get("aux") or {}).get("Digest") or digest
    except docker.errors.APIError as err:
        raise ImageError(f"pushing to {repository} failed: {err}") from err
    if not digest:
        raise ImageError(f"the registry {registry} returned no digest for {repository}:{tag}")
    progress(f"pushed {repository}@{digest}")
    return f"{repository}@{digest}"


def _pull(node: Node, reference: str, image_id: str) -> NodeTransfer:
    res = node.run(f"docker pull --quiet {shlex.quote(reference)}", timeout=1800)
    if not res.ok:
        return NodeTransfer(node.host.name, "failed", error=(res.stderr or res.stdout)[-400:])
    return NodeTransfer(node.host.name, "pulled", node_image_id(node, reference))


def _fan_out(
    hosts: list[Host],
    image_id: str,
    transfer: Callable[[Node], NodeTransfer],
    beat: Heartbeat,
) -> list[NodeTransfer]:
    """``transfer`` on every host that lacks the image, at once; each node done counts one
    in the heartbeat, whatever its outcome."""

    def one(host: Host) -> NodeTransfer:
        try:
            return _one(host)
        finally:
            beat.advance()

    def _one(host: Host) -> NodeTransfer:
        started = time.perf_counter()
        node = open_node(host)
        try:
            if node_image_id(node, image_id) == image_id:
                beat.say(f"{host.name}: already holds {image_id[:19]}")
                return NodeTransfer(host.name, "present", image_id)
            beat.say(f"{host.name}: transferring {image_id[:19]}")
            done = transfer(node)
        finally:
            node.close()
        done.seconds = time.perf_counter() - started
        if done.action != "failed" and done.image_id != image_id:
            done.error = f"the node holds {done.image_id} instead of {image_id}"
            done.action = "failed"
        return done

    results = parallel(hosts, one)
    out = []
    for host in hosts:
        value = results[host.name]
        if isinstance(value, RemoteError):
            out.append(NodeTransfer(host.name, "failed", error=value.message))
        else:
            out.append(value)
    return out


def _ssh(
    client: docker.DockerClient,
    image_id: str,
    hosts: list[Host],
    tag: str | None,
    beat: Heartbeat,
    workdir: Path | None,
) -> list[NodeTransfer]:
    with tempfile.TemporaryDirectory(prefix="gpunode-push-", dir=workdir) as tmp:
        saved = Path(tmp) / "image.tar"
        state: dict[str, Any] = {}
        streamed = _Streamed(beat)

        def load(node: Node) -> NodeTransfer:
            layers = _save_once(client, image_id, saved, state, beat)
            skip = held_files(layers, _held_stacks(node))
            sent = len({name for name, _diff in layers} - skip)
            note = None
            chunks = _subset_chunks(saved, skip) if skip else _saved_chunks(saved)
            counted = _Counted(chunks, tick=streamed.add)
            res = node.run_with_input("docker load --quiet", counted, timeout=1800)
            counted.close()
            if not res.ok and skip:
                note = f"the subset was refused ({(res.stderr or res.stdout).strip()[-200:]}); "
                note += "sent the whole image"
                beat.say(f"{node.host.name}: {note}")
                sent = len({name for name, _diff in layers})
                counted = _Counted(_saved_chunks(saved), counted.bytes, tick=streamed.add)
                res = node.run_with_input("docker load --quiet", counted, timeout=1800)
                counted.close()
            if not res.ok:
                return NodeTransfer(
                    node.host.name, "failed", error=(res.stderr or res.stdout)[-400:]
                )
            if tag:
                node.run(f"docker tag {image_id} {shlex.quote(tag)}", timeout=60)
            return NodeTransfer(
                node.host.name,
                "loaded",
                node_image_id(node, image_id),
                bytes_sent=counted.bytes,
                layers_sent=sent,
                layers_total=len({name for name, _diff in layers}),
                note=note,
            )

        return _fan_out(hosts, image_id, load, beat)


def held_files(layers: list[tuple[str, str]], held: set[tuple[str, ...]]) -> set[str]:
    """The archive's layer files a node need not be sent.

    ``layers`` are (file in the archive, diff ID) bottom first; ``held`` the node's layer
    stacks and all their prefixes. A layer is held when its whole stack up to it is (that is
    its chain ID); a file that stands for the layer at two depths is skipped only if both are.
    """
    needed: set[str] = set()
    skip: set[str] = set()
    for depth, (name, _diff) in enumerate(layers):
        stack = tuple(diff for _name, diff in layers[: depth + 1])
        (skip if stack in held else needed).add(name)
    return skip - needed


def _held_stacks(node: Node) -> set[tuple[str, ...]]:
    """Every layer stack the node's images have, with each of its prefixes."""
    res = node.run(HELD_LAYERS, timeout=120)
    if not res.ok:
        return set()  # nothing known: the whole image is sent
    stacks = []
    for line in res.stdout.splitlines():
        try:
            diffs = json.loads(line)
        except ValueError:
            continue
        if isinstance(diffs, list):
            stacks.append(diffs)
    return chain_prefixes(stacks)


class _Streamed:
    """The bytes sent to every node's ``docker load`` so far, as the heartbeat's "what now"."""

    def __init__(self, beat: Heartbeat) -> None:
        self._beat = beat
        self._bytes = 0
        self._lock = threading.Lock()  # the nodes' loads run in parallel

    def add(self, count: int) -> None:
        with self._lock:
            self._bytes += count
            sent = self._bytes
        self._beat.update(f"docker load on the nodes, {sent / 1e6:.0f} MB sent")


class _Counted:
    """A byte stream that counts what went through it (and tells ``tick`` each chunk's size)."""

    def __init__(
        self,
        chunks: Iterator[bytes],
        already: int = 0,
        tick: Callable[[int], None] = lambda _n: None,
    ) -> None:
        self.chunks = chunks
        self.bytes = already
        self._tick = tick

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.bytes += len(chunk)
            self._tick(len(chunk))
            yield chunk

    def close(self) -> None:
        """Stop the stream where it is (a load that ended early reads no more)."""
        close = getattr(self.chunks, "close", None)
        if close is not None:
            close()


def _subset_chunks(saved: Path, skip: set[str]) -> Iterator[bytes]:
    """The saved archive without the files in ``skip``, streamed (a writer thread and a pipe:
    no copy on disk, a layer never held in memory)."""
    read_fd, write_fd = os.pipe()
    failure: list[BaseException] = []

    def write() -> None:
        try:
            with (
                os.fdopen(write_fd, "wb") as sink,
                tarfile.open(saved) as source,
                tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT) as out,
            ):
                for member in source:
                    if member.name in skip:
                        continue
                    out.addfile(member, source.extractfile(member) if member.isfile() else None)
        except BrokenPipeError:
            pass  # the reader stopped: the load ended early and says why
        except BaseException as err:  # handed to the reader below
            failure.append(err)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    with os.fdopen(read_fd, "rb") as pipe:
        yield from iter(lambda: pipe.read(CHUNK), b"")
    writer.join()
    if failure:
        raise ImageError(f"cannot stream the image's missing layers: {failure[0]}")


_save_lock = threading.Lock()


def _save_once(
    client: docker.DockerClient,
    image_id: str,
    path: Path,
    state: dict[str, Any],
    beat: Heartbeat | None = None,
) -> list[tuple[str, str]]:
    """``docker save`` into ``path`` once, whichever node asks first; the archive's layer
    files with their diff IDs, bottom first."""
    with _save_lock:
        if "layers" in state:
            return list(state["layers"])
        if beat is not None:
            beat.update(f"docker save {image_id[:19]} on this machine")
        try:
            with path.open("wb") as handle:
                for chunk in client.images.get(image_id).save(chunk_size=CHUNK, named=False):
                    handle.write(chunk)
        except docker.errors.APIError as err:
            raise ImageError(f"cannot save image {image_id}: {err}") from err
        state["layers"] = _archive_layers(path)
        return list(state["layers"])


def _archive_layers(path: Path) -> list[tuple[str, str]]:
    """(file in a ``docker save`` archive, diff ID) of each layer, bottom first."""
    with tarfile.open(path) as archive:
        manifest = _json_member(archive, "manifest.json")[0]
        config = _json_member(archive, manifest["Config"])
    files, diffs = manifest["Layers"], config["rootfs"]["diff_ids"]
    if len(files) != len(diffs):
        raise ImageError(f"{path}: {len(files)} layer files for {len(diffs)} diff IDs")
    return list(zip(files, diffs, strict=True))


def _json_member(archive: tarfile.TarFile, name: str) -> Any:
    member = archive.extractfile(name)
    if member is None:
        raise ImageError(f"the saved image has no {name}")
    return json.load(member)
