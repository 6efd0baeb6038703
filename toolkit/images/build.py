"""``gpunode image build`` and ``verify``: render, build on the local engine, normalise.

The classic builder is the one the Python docker SDK drives and the one Debian's docker.io
ships without buildx, so it is the path used: gpunode normalises its result (``normalise``).
Builds run with the host's network (``network_mode=host``): the repository and wheel server
the inventory names must be reachable from this machine, as they are from the lab's host.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import docker
import docker.errors

from toolkit.errors import ConfigError, ImageError
from toolkit.images.buildlog import RUN_KIND, BuildLog, parse_step, step_line, terminal_width
from toolkit.images.engine import build_lock, docker_client, find_image
from toolkit.images.normalise import Normalised, iter_diff, normalise, read_image
from toolkit.images.recipe import (
    DEFAULT_OS,
    LABEL_SOURCE_DATE,
    LABEL_VERSION,
    Recipe,
    make_recipe,
)
from toolkit.images.render import Context, render
from toolkit.inventory import Inventory, load_inventory
from toolkit.progress import HEARTBEAT_S, Heartbeat, Progress
from toolkit.records import runs
from toolkit.stack.lock import LOCK_KEY, lock_from_vars, stack_arch
from toolkit.stack.resolve import resolve

BUILDER = "classic"  # the engine's legacy builder, normalised afterwards
# The builder's own (unnormalised) results are the layer cache of the next build, each tagged
# with the ID of the image normalisation made of it (so one per normalised image, and only the
# most recent few): the pair tells what each builder layer became, and a later build whose
# builder layers are the same (cache hits) is not rewritten there (``normalise``'s reuse).
CACHE_REPOSITORY = "gpunode-training-cache"
KEEP_CACHES = 3
# The normalised result of a recipe is found again by its input key (the base's image ID and
# the recipe's input digest: rendered Dockerfile, context files, source date): an unchanged
# recipe is answered from here without building or normalising, as a cached `docker build` is
# answered from its layer cache. The same number of recent recipes is kept.
BUILT_REPOSITORY = "gpunode-training-built"
MAX_DIFFERENCES = 200
# The template's own failure lines (the base probe, the held NCCL): "gpunode: ..." on stderr,
# which the engine streams with colour escapes around it.
_SAID_RE = re.compile(r"^gpunode: .*", re.MULTILINE)
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_IMAGE_HEX_RE = re.compile(r"[0-9a-f]{64}")


@dataclass
class BuildOutcome:
    """One build."""

    recipe: Recipe
    image_id: str
    digest: str
    tag: str
    builder: str
    build_seconds: float
    normalise_seconds: float
    size: int
    cached: bool
    volatile: list[str] = field(default_factory=list)
    reused: bool = False  # the recipe's normalised image was found by its input key
    rewritten_bytes: int = 0  # the layers normalisation rewrote, as tars
    layers_rewritten: int = 0
    layers_reused: int = 0  # builder layers normalised before, not rewritten
    read_seconds: float = 0.0  # of normalise_seconds: finding the layers (``Normalised``)
    layers_from: str = ""  # where normalisation read the layers: "layer store" or "save"
    normalised: Normalised | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "group": self.recipe.group,
            "stack_id": self.recipe.stack_id,
            "image_id": self.image_id,
            "tag": self.tag,
            "recipe_digest": self.digest,
            "builder": self.builder,
            "build_seconds": round(self.build_seconds, 2),
            "normalise_seconds": round(self.normalise_seconds, 2),
            "size_bytes": self.size,
            "no_cache": not self.cached,
            "reused": self.reused,
            "rewritten_bytes": self.rewritten_bytes,
            "layers_rewritten": self.layers_rewritten,
            "layers_reused": self.layers_reused,
            "volatile_files": self.volatile,
            "warnings": list(self.recipe.warnings),
        }


@dataclass
class VerifyOutcome:
    """A rebuild from scratch compared with the image the recipe's tag names."""

    expected: str
    rebuilt: BuildOutcome
    differences: list[str]

    @property
    def same(self) -> bool:
        """The rebuild gave the same image ID."""
        return self.expected == self.rebuilt.image_id

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "same": self.same,
            "expected_id": self.expected,
            "rebuilt_id": self.rebuilt.image_id,
            "differences": self.differences,
            "build": self.rebuilt.to_dict(),
        }


def pick_group(inventory: Inventory, group: str | None) -> str:
    """The group whose image is meant: the one named, or the only stack group.

    Raises:
        ConfigError: None named and several (or no) groups have a stack.
    """
    groups = inventory.stack_groups()
    if group is not None:
        if group not in groups:
            raise ConfigError(
                f"{inventory.path}: group {group!r} has no stack; groups with one: {groups}"
            )
        return group
    if len(groups) != 1:
        raise ConfigError(
            f"{inventory.path}: {len(groups)} groups have a stack ({', '.join(groups)}); "
            "name one with --group"
        )
    return groups[0]


def recipe_for(source: Path | Inventory, group: str | None = None) -> Recipe:
    """The recipe of a group's image, from the inventory (its folder, or as loaded already).

    Raises:
        ConfigError: The inventory, the stack or an image variable is malformed.
    """
    inventory = source if isinstance(source, Inventory) else load_inventory(source)
    name = pick_group(inventory, group)
    hosts = inventory.group_hosts(name)
    merged = inventory.host_vars(hosts[0]) if hosts else None
    values = dict(merged.values) if merged else dict(inventory.groups[name].vars)
    sources = merged.sources if merged else inventory.groups[name].sources
    # The group's lock is read through its schema: a broken lock stops the build, as it
    # stops `stack show`, `stack check` and provision.
    lock_from_vars(values, sources.get(LOCK_KEY, f"group {name}"))
    stack, hardware = inventory.group_config(name)
    os_id = str(values.get("gpunode_image_os") or DEFAULT_OS)
    repo_vars = {k: v for k, v in values.items() if k.startswith("gpunode_")}
    arch = stack_arch(name, values)
    resolved = resolve(stack, hardware, os_id, arch=arch, repo_vars=repo_vars)
    return make_recipe(name, resolved, values, f"{inventory.path} (group {name})")


def build_recipe(
    recipe: Recipe,
    *,
    no_cache: bool = False,
    tag: bool = True,
    record: bool = True,
    progress: Progress = lambda _m: None,
    client: docker.DockerClient | None = None,
    workdir: Path | None = None,
    runner: bytes | None = None,
    width: int | None = None,
    interval: float = HEARTBEAT_S,
) -> BuildOutcome:
    """Render, build and normalise one recipe; tag the result with the stack id.

    An unchanged recipe (same base image, same input digest) is answered with the image its
    last build normalised, unless ``no_cache``. ``record=False`` leaves the result out of
    that lookup (a rebuild made only to be compared). ``runner`` is the acceptance runner the
    image carries (default: this gpunode's, ``render``).

    A build says one line per builder step, cut to ``width`` columns (default: the
    terminal's, 80 without one), and where it is at least every ``interval`` seconds; the
    builder's whole output goes to ``build.log`` in a run folder of its own, whose path it
    says first.

    Raises:
        ImageError: The base is missing, the build failed, or normalisation failed.
    """
    client = client or docker_client()
    started = time.perf_counter()
    context = render(recipe, runner=runner)
    key = _input_key(_require_base(client, recipe.base), context.digest)
    if not no_cache and (found := _built(client, key)) is not None:
        if tag:
            found.tag(*recipe.tag.rsplit(":", 1))
        progress(f"image {found.id} (unchanged recipe: reused, not rebuilt)")
        return BuildOutcome(
            recipe=recipe,
            image_id=str(found.id),
            digest=context.digest,
            tag=recipe.tag,
            builder=BUILDER,
            build_seconds=time.perf_counter() - started,
            normalise_seconds=0.0,
            size=int(found.attrs.get("Size") or 0),
            cached=True,
            reused=True,
        )
    log = BuildLog(runs.start_run(RUN_KIND))
    progress(f"build log: {log.path}")
    with (
        build_lock(),
        log,
        Heartbeat(
            progress, "image build", what="waiting for the engine", interval=interval
        ) as beat,
    ):
        started = time.perf_counter()
        raw = _engine_build(client, context, recipe, no_cache, beat, log, width or terminal_width())
        built = time.perf_counter() - started
        beat.say(f"normalising {raw[:19]}")
        beat.update(f"normalising {raw[:19]}")
        tags = (recipe.tag,) if tag else ()
        epoch = recipe.source_date_epoch
        reuse = normalised_layers(client, recipe)
        result = normalise(client, raw, recipe.base, epoch, tags, workdir, reuse)
        _keep_as_cache(client, raw, result.id)
        if record:
            _record_built(client, result.id, key)
    progress(f"image {result.id} ({recipe.tag if tag else 'untagged'})")
    return BuildOutcome(
        recipe=recipe,
        image_id=result.id,
        digest=context.digest,
        tag=recipe.tag,
        builder=BUILDER,
        build_seconds=built + result.seconds,
        normalise_seconds=result.seconds,
        size=result.size,
        cached=not no_cache,
        volatile=result.volatile,
        rewritten_bytes=result.rewritten_bytes,
        layers_rewritten=len(result.layers) - result.reused_layers,
        layers_reused=result.reused_layers,
        read_seconds=result.read_seconds,
        layers_from=result.source,
        normalised=result,
    )


def _input_key(base_id: str, digest: str) -> str:
    """The lookup key of a recipe's normalised image: its base's ID and its input digest."""
    return hashlib.sha256(f"{base_id}\n{digest}".encode()).hexdigest()


def _built(client: docker.DockerClient, key: str) -> Any:
    """The normalised image recorded under ``key``, named again so that it counts as recent."""
    try:
        found = client.images.get(f"{BUILT_REPOSITORY}:{key}")
    except docker.errors.ImageNotFound:
        return None
    found.tag(BUILT_REPOSITORY, key)
    return found


def _record_built(client: docker.DockerClient, image_id: str, key: str) -> None:
    """Name the normalised image by its input key; keep the most recent few recipes."""
    client.images.get(image_id).tag(BUILT_REPOSITORY, key)
    _prune(client, BUILT_REPOSITORY)


def verify_recipe(
    recipe: Recipe,
    *,
    progress: Progress = lambda _m: None,
    client: docker.DockerClient | None = None,
    workdir: Path | None = None,
) -> VerifyOutcome:
    """Rebuild without cache and compare with the image tagged for the recipe.

    Raises:
        ImageError: No image is tagged for the recipe yet, or a build failed.
    """
    client = client or docker_client()
    try:
        expected = str(client.images.get(recipe.tag).id)
    except docker.errors.ImageNotFound as err:
        raise ImageError(
            f"no image {recipe.tag} to verify: run `gpunode image build` first"
        ) from err
    rebuilt = build_recipe(
        recipe,
        no_cache=True,
        tag=False,
        record=False,
        progress=progress,
        client=client,
        workdir=workdir,
    )
    differences: list[str] = []
    if rebuilt.image_id != expected:
        epoch = recipe.source_date_epoch
        reference = read_image(client, expected, recipe.base, epoch, workdir)
        again = read_image(client, rebuilt.image_id, recipe.base, epoch, workdir)
        differences = list(iter_diff(reference, again))
        _remove(client, rebuilt.image_id)  # untagged: only its differences matter
        if len(differences) > MAX_DIFFERENCES:
            more = len(differences) - MAX_DIFFERENCES
            differences = [*differences[:MAX_DIFFERENCES], f"... and {more} more"]
    return VerifyOutcome(expected=expected, rebuilt=rebuilt, differences=differences)


def _remove(client: docker.DockerClient, image_id: str) -> None:
    # An image still used (by a container, by a tag) stays.
    with contextlib.suppress(docker.errors.APIError):
        client.images.remove(image_id, noprune=False)


def normalised_layers(client: docker.DockerClient, recipe: Recipe) -> dict[str, str]:
    """What normalisation made of each builder layer kept in the cache (builder diff ID ->
    normalised diff ID), from the pairs of a builder result and its normalised image that are
    both still here, made by this gpunode version at the recipe's source date (a layer's
    rewrite depends only on its bytes, the date and the rewriting code)."""
    known: dict[str, str] = {}
    wanted = {
        LABEL_SOURCE_DATE: str(recipe.source_date_epoch),
        LABEL_VERSION: recipe.gpunode_version,
    }
    for raw in client.images.list(name=CACHE_REPOSITORY):
        for name in raw.tags:
            repository, _, tag = name.rpartition(":")
            if repository != CACHE_REPOSITORY or not _IMAGE_HEX_RE.fullmatch(tag):
                continue
            normalised = find_image(client, f"sha256:{tag}")
            if normalised is None:
                continue
            labels = normalised.attrs["Config"].get("Labels") or {}
            pairs = (raw.attrs["RootFS"]["Layers"], normalised.attrs["RootFS"]["Layers"])
            if all(labels.get(k) == v for k, v in wanted.items()) and len(pairs[0]) == len(
                pairs[1]
            ):
                known.update(zip(*pairs, strict=True))
    return known


def _keep_as_cache(client: docker.DockerClient, raw: str, normalised: str) -> None:
    """Keep the builder's result as the cache, named by its normalised image; drop older ones."""
    tag = normalised.split(":", 1)[1]
    try:
        previous = str(client.images.get(f"{CACHE_REPOSITORY}:{tag}").id)
    except docker.errors.ImageNotFound:
        previous = None
    client.images.get(raw).tag(CACHE_REPOSITORY, tag)
    if previous and previous != raw:
        _remove(client, previous)
    _prune(client, CACHE_REPOSITORY)


def _prune(client: docker.DockerClient, repository: str) -> None:
    """Keep the ``KEEP_CACHES`` images of a gpunode repository named most recently; untag the
    rest. Recency is the engine's last tag time, not the image's creation date: a normalised
    image is dated at its recipe's source date, so the one just recorded can be the oldest."""
    kept = sorted(client.images.list(name=repository), key=_last_named, reverse=True)
    for old in kept[KEEP_CACHES:]:
        for name in old.tags:
            if name.startswith(f"{repository}:"):
                with contextlib.suppress(docker.errors.APIError):
                    client.images.remove(name, noprune=True)
        _remove(client, str(old.id))


def _last_named(image: Any) -> datetime:
    """When the engine last gave ``image`` a name (``Metadata.LastTagTime``; Docker Engine API
    ``ImageInspect``), else its creation date; never named nor dated sorts first."""
    metadata = image.attrs.get("Metadata") or {}
    for text in (metadata.get("LastTagTime"), image.attrs.get("Created")):
        with contextlib.suppress(TypeError, ValueError):
            stamp = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
            if stamp.year > 1:  # the engine's zero time: never tagged
                return stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)
    return datetime.min.replace(tzinfo=timezone.utc)


def _require_base(client: docker.DockerClient, base: str) -> str:
    """The base's image ID on this engine."""
    try:
        return str(client.images.get(base).id)
    except docker.errors.ImageNotFound as err:
        raise ImageError(
            f"the base image {base} is not on this engine; pull it by digest first "
            "(gpunode never pulls a base implicitly)"
        ) from err
    except docker.errors.APIError as err:
        raise ImageError(f"cannot inspect the base image {base}: {err}") from err


def _engine_build(
    client: docker.DockerClient,
    context: Context,
    recipe: Recipe,
    no_cache: bool,
    beat: Heartbeat,
    log: BuildLog,
    width: int,
) -> str:
    """Run the classic builder; the raw image's ID. One line per step (``beat.say``), the
    whole stream to ``log``."""
    image_id = None
    tail: list[str] = []
    try:
        stream = client.api.build(
            fileobj=context.tar(recipe.source_date_epoch),
            custom_context=True,
            nocache=no_cache,
            rm=True,
            forcerm=True,
            pull=False,
            network_mode="host",
            decode=True,
        )
        for event in stream:
            if "error" in event:
                # The template's own message names what is wrong; the engine's names the step.
                said = _SAID_RE.findall(_ANSI_RE.sub("", "".join(tail)))
                head = said[-1] if said else str(event["error"]).strip()
                log.write(str(event["error"]))
                raise ImageError(
                    f"the image build failed: {head}\n"
                    + "".join(tail)
                    + f"\n(full log: {log.path})"
                )
            text = str(event.get("stream") or "")
            log.write(text)
            if text.strip():
                tail = [*tail, text][-20:]
                step = parse_step(text)
                if step is not None:
                    beat.say(step_line(step, width))
                    # The beat line adds the count and time: its step is cut shorter.
                    beat.update(
                        step_line(step, max(24, width - 32)),
                        done=step.number - 1,
                        total=step.total,
                    )
            aux = event.get("aux") or {}
            if aux.get("ID"):
                image_id = str(aux["ID"])
    except docker.errors.APIError as err:
        raise ImageError(f"the engine refused the build: {err}") from err
    if image_id is None:
        raise ImageError(
            "the build ended without an image ID:\n" + "".join(tail) + f"\n(full log: {log.path})"
        )
    return image_id
