"""Training images on the shared lab: reproducible on the real engine, a changed pin changes
the ID and its second NCCL is reported, distribution over SSH and through a real registry,
and acceptance inside the image on nodes whose container runtime works or does not.

Runs after 03 (provision: Docker on the nodes) and 04 (accept); the image is built once per
session (conftest ``training_image``). Distribution over SSH to two nodes, and a second push
that sends nothing, is run and asserted by tests/bench/test_bench_image.py, which times it
(one push to two nodes costs about a minute here: it is not run twice).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolkit.images.build import KEEP_CACHES, _prune, recipe_for
from toolkit.images.distribute import push
from toolkit.images.engine import docker_client
from toolkit.images.normalise import is_volatile, normalise, read_image
from toolkit.images.recipe import LABEL_INPUT_DIGEST, LABEL_SOURCE_DATE, LABEL_STACK_ID
from toolkit.inventory import load_inventory
from toolkit.lab import nccl_wheel, paths
from toolkit.steps.accept.options import AcceptOptions
from toolkit.steps.accept.run import run_acceptance

GPUNODE = [str(Path(sys.executable).parent / "gpunode")]


def _gpunode(*args: str, env: dict[str, str] | None = None, prefix: list[str] | None = None) -> Any:
    return subprocess.run(
        [*(prefix or []), *GPUNODE, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=1800,
        check=False,
    )


def _hosts(lab: Any) -> list[Any]:
    return load_inventory(lab.inventory).hosts_for(None)[:2]


def _drop_image(lab: Any, node: int, image_id: str) -> None:
    lab.ssh(node, f"docker image rm -f {image_id} >/dev/null 2>&1 || true")


def _node_ids(lab: Any, node: int) -> str:
    return lab.ssh(node, "docker images --no-trunc --format '{{.ID}}'").stdout


def _inventory_copy(lab: Any, tmp: Path, **group_vars: Any) -> Path:
    target = tmp / "inventory"
    shutil.copytree(lab.inventory, target)
    repos = target / "group_vars" / "all" / "repos.yml"
    data = yaml.safe_load(repos.read_text())
    data.update(group_vars)
    repos.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


@pytest.mark.lab
def test_build_is_labelled_and_carries_no_volatile_file(training_image: Any) -> None:
    image = docker_client().images.get(training_image.image_id)
    labels = image.attrs["Config"]["Labels"]
    assert labels[LABEL_STACK_ID] == training_image.recipe.stack_id
    assert labels[LABEL_INPUT_DIGEST] == training_image.digest
    assert labels[LABEL_SOURCE_DATE] == str(training_image.recipe.source_date_epoch)
    assert training_image.volatile == []
    added = [name for layer in training_image.normalised.layers for name in layer]
    assert "usr/lib/x86_64-linux-gnu/libnccl.so.2.21.5" in added
    assert not [name for name in added if is_volatile(name)]
    assert image.attrs["Created"].startswith("1970-01-01T00:00:00")


@pytest.mark.lab
def test_rebuild_without_cache_elsewhere_gives_the_same_id(lab: Any, training_image: Any) -> None:
    # Another hostname (its own UTS namespace), umask and time zone, minutes after the first.
    result = _gpunode(
        "image",
        "verify",
        "-i",
        str(lab.inventory),
        "--json",
        env={"TZ": "Pacific/Kiritimati"},
        prefix=[
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname other-builder; umask 077; exec "$@"',
            "-",
        ],
    )
    assert result.returncode == 0, result.stderr[-2000:] + result.stdout[-2000:]
    outcome = json.loads(result.stdout)
    assert outcome["same"] is True and outcome["differences"] == []
    assert outcome["rebuilt_id"] == training_image.image_id
    assert outcome["build"]["no_cache"] is True


@pytest.mark.lab
def test_unchanged_recipe_is_reused_not_built_again(lab: Any, training_image: Any) -> None:
    # The session's build (without cache) recorded its result under the recipe's input key;
    # `image verify` above rebuilt from scratch without recording. The same recipe again is
    # answered with that image: no build, no normalisation (tests/bench times it).
    result = _gpunode("image", "build", "-i", str(lab.inventory), "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    outcome = json.loads(result.stdout)
    assert outcome["reused"] is True
    assert outcome["image_id"] == training_image.image_id
    assert outcome["recipe_digest"] == training_image.digest
    assert outcome["normalise_seconds"] == 0
    text = _gpunode("image", "build", "-i", str(lab.inventory))
    assert text.returncode == 0 and "reused" in text.stdout, text.stdout + text.stderr


def _tiny_image(client: Any, content: bytes) -> str:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as archive:
        member = tarfile.TarInfo("content")
        member.size = len(content)
        archive.addfile(member, io.BytesIO(content))
    answer = json.loads(client.api.import_image_from_data(data.getvalue()).splitlines()[-1])
    return str(answer["status"])


@pytest.mark.lab
def test_the_recipe_recorded_last_is_kept_though_its_image_is_dated_oldest() -> None:
    # A normalised image is dated at its recipe's source date, so the one just recorded can be
    # the oldest by creation date; keeping the newest by that date dropped it at once (CI: the
    # image benchmark's unchanged recipe was not found). Recency is when it was last named.
    client = docker_client()
    repository = "gpunode-test-prune"
    oldest = _tiny_image(client, b"dated first, named last")
    others = [_tiny_image(client, f"dated later {n}".encode()) for n in range(KEEP_CACHES)]
    try:
        for n, image in enumerate([*others, oldest]):
            client.images.get(image).tag(repository, f"recipe-{n}")
            _prune(client, repository)
        held = {image.id for image in client.images.list(name=repository)}
        assert oldest in held and others[0] not in held, (oldest, others, held)
        assert len(held) == KEEP_CACHES
    finally:
        for image in [*others, oldest]:
            with contextlib.suppress(Exception):
                client.images.remove(image, force=True)


@pytest.mark.lab
def test_changed_nccl_pin_changes_the_id_and_inspect_reports_two_nccls(
    lab: Any, training_image: Any, tmp_path: Path
) -> None:
    wheel = paths.cache_dir() / "wheels" / nccl_wheel.wheel_name("2.26.2", 12)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    lock = [
        line
        for line in load_inventory(lab.inventory)
        .host_vars(_hosts(lab)[0].name)
        .values["gpunode_acceptance_requirements"]
        if not line.startswith("nvidia_nccl_cu12==")
    ]
    lock.append(f"nvidia_nccl_cu12==2.26.2 --hash=sha256:{digest}")
    changed = _inventory_copy(lab, tmp_path, gpunode_acceptance_requirements=lock)
    built = _gpunode("image", "build", "-i", str(changed), "--json")
    assert built.returncode == 0, built.stderr[-2000:]
    other = json.loads(built.stdout)
    try:
        assert other["image_id"] != training_image.image_id and other["reused"] is False
        assert any("2.26.2" in w for w in other["warnings"])
        inspected = _gpunode("image", "inspect", other["image_id"], "-i", str(lab.inventory))
        assert inspected.returncode == 1, inspected.stdout + inspected.stderr
        text = " ".join(inspected.stdout.split())
        assert "NCCL mismatch" in text and "2.26.2" in text and "2.21.5" in text
        assert "/nvidia/nccl/lib/libnccl.so.2" in text and "nvidia-nccl-cu12" in text
        ok = _gpunode("image", "inspect", training_image.image_id, "-i", str(lab.inventory))
        assert ok.returncode == 0, ok.stdout + ok.stderr
        # Over SSH a node that holds the session's image is sent only the layers it lacks,
        # those from the changed pin on; docker load takes the subset; the ID is checked.
        node = _hosts(lab)[:1]
        assert push(training_image.image_id, node).ok
        delta = push(other["image_id"], node)
        assert delta.ok, [n.error for n in delta.nodes]
        (sent,) = delta.nodes
        assert sent.action == "loaded" and sent.image_id == other["image_id"], sent
        assert sent.note is None, sent.note
        assert 0 < sent.layers_sent < sent.layers_total, sent
        # The changed pin rewrote the pip layer (torch with it) and the runner's: the base's
        # layers and the apt layer stayed on the node.
        base = docker_client().images.get(training_image.recipe.base).attrs["Size"]
        assert sent.bytes_sent < other["size_bytes"] - base, (sent, other["size_bytes"], base)
    finally:
        # The changed recipe has the same stack id, so it took the tag: give it back.
        client = docker_client()
        client.images.remove(other["image_id"], force=True)
        client.images.get(training_image.image_id).tag(training_image.tag)
        _drop_image(lab, 1, other["image_id"])


@pytest.fixture
def registry(lab: Any, tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry with TLS on the lab network's gateway (nodes and this
    machine's Docker both reach it there); its CA trusted per address in certs.d."""
    gateway = lab.state.gateway
    with socket.socket() as probe:
        probe.bind((gateway, 0))
        port = probe.getsockname()[1]
    address = f"{gateway}:{port}"
    cert, key = tmp_path / "registry.crt", tmp_path / "registry.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=gpunode-test-registry", "-addext", f"subjectAltName=IP:{gateway}",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    config = tmp_path / "config.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "data")}},
                "http": {"addr": address, "tls": {"certificate": str(cert), "key": str(key)}},
            }
        )
    )
    certs_d = Path("/etc/docker/certs.d") / address
    certs_d.mkdir(parents=True, exist_ok=True)
    shutil.copy(cert, certs_d / "ca.crt")
    lab.ssh(1, f"mkdir -p /etc/docker/certs.d/{address}")
    lab.ssh(1, f"cat > /etc/docker/certs.d/{address}/ca.crt <<'EOF'\n{cert.read_text()}EOF")
    server = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "registry.log").open("w"),
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((gateway, port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "registry.log").read_text()
                time.sleep(0.2)
        yield address
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(certs_d, ignore_errors=True)
        lab.ssh(1, f"rm -rf /etc/docker/certs.d/{address}", check=False)


@pytest.mark.lab
def test_registry_push_and_pull_by_digest(
    lab: Any, training_image: Any, registry: str, tmp_path: Path
) -> None:
    image_id = training_image.image_id
    _drop_image(lab, 1, image_id)
    inventory = _inventory_copy(lab, tmp_path, gpunode_image_registry=registry)
    recipe = recipe_for(inventory)
    assert recipe.registry == registry
    try:
        outcome = push(image_id, _hosts(lab)[:1], registry=recipe.registry, tag=recipe.tag)
        assert outcome.method == "registry" and outcome.ok, [n.error for n in outcome.nodes]
        assert outcome.reference is not None
        assert outcome.reference.startswith(f"{registry}/gpunode-training@sha256:")
        assert [n.action for n in outcome.nodes] == ["pulled"]
        pulled = lab.ssh(1, f"docker image inspect --format '{{{{.Id}}}}' {outcome.reference}")
        assert pulled.stdout.strip() == image_id  # the same config, so the same image
    finally:
        with contextlib.suppress(Exception):
            docker_client().images.remove(f"{registry}/gpunode-training:{recipe.stack_id}")


@pytest.mark.lab
def test_accept_in_the_image_and_a_broken_runtime_is_not_ready(
    lab: Any, training_image: Any, tmp_path: Path
) -> None:
    inventory = _inventory_copy(lab, tmp_path)
    names = [h.name for h in _hosts(lab)]
    lab.ssh(2, "systemctl stop docker.socket docker.service")
    try:
        run = run_acceptance(
            AcceptOptions(inventory=inventory, limit=",".join(names), runs_dir=tmp_path / "runs")
        )
    finally:
        lab.ssh(2, "systemctl start docker.socket docker.service")
    nodes = {n["host"]: n for n in run.summary()["nodes"]}
    good, broken = nodes[names[0]], nodes[names[1]]
    assert good["verdict"] == "ready", good["failed_checks"]
    started = next(c for c in good["checks"] if c["name"] == "container.start")
    assert started["ok"] and started["measured"] == training_image.image_id
    assert broken["verdict"] == "not-ready"
    failed = [c for c in broken["checks"] if c["name"] == "container.start" and not c["ok"]]
    assert failed and "docker" in failed[0]["message"].lower()
    assert "container.start" in [c["check"] for c in broken["failed_checks"]]


# Layers whose tars carry what overlay2 stores otherwise than a plain file: a whiteout (a 0:0
# character device in the layer's folder), an opaque directory (an extended attribute), hard
# links (one made in the second layer to a file of the first, copied up), a fifo, a symbolic
# link, a set-user-ID file of an owner this machine has no name for, a name past 100 characters.
STORE_DOCKERFILE = """\
FROM {base}
RUN rm /etc/issue.net && rm -rf /usr/share/doc && mkdir -p /usr/share/doc/gpunode \\
 && echo doc > /usr/share/doc/gpunode/README && mkdir -p /opt/t/{long} \\
 && echo data > /opt/t/a && ln /opt/t/a /opt/t/b && ln -s a /opt/t/c && mkfifo /opt/t/fifo \\
 && chown 1234:5678 /opt/t/a && chmod 4755 /opt/t/a && echo x > /opt/t/{long}/{long}
RUN rm /opt/t/b && ln /opt/t/a /opt/t/0-first && rm -rf /usr/share/doc/gpunode
"""


@pytest.mark.lab
def test_layers_read_from_the_store_and_through_the_save_normalise_alike(
    training_image: Any,
) -> None:
    client = docker_client()
    base, epoch = training_image.recipe.base, training_image.recipe.source_date_epoch
    dockerfile = STORE_DOCKERFILE.format(base=base, long="l" * 120)
    built, _log = client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), rm=True, network_mode="none", pull=False
    )
    loaded = None
    try:
        stored = read_image(client, str(built.id), base, epoch)
        saved = read_image(client, str(built.id), base, epoch, store=False)
        assert (stored.source, saved.source) == ("layer store", "save")
        assert stored.id == saved.id
        assert stored.layers == saved.layers and stored.config == saved.config
        first, second = stored.layers
        assert first["etc/.wh.issue.net"].kind == "file"
        assert "usr/share/doc/.wh..wh..opq" in first
        assert (first["opt/t/a"].kind, first["opt/t/b"].link) == ("file", "opt/t/a")
        assert (first["opt/t/a"].uid, first["opt/t/a"].mode) == (1234, 0o4755)
        assert (first["opt/t/fifo"].kind, first["opt/t/c"].kind) == ("fifo", "symlink")
        assert first[f"opt/t/{'l' * 120}/{'l' * 120}"].sha256 == hashlib.sha256(b"x\n").hexdigest()
        assert "opt/t/.wh.b" in second and "usr/share/doc/.wh.gpunode" in second
        assert (second["opt/t/0-first"].kind, second["opt/t/a"].link) == ("file", "opt/t/0-first")
        # Normalised and loaded from the store: the image the save gives.
        loaded = normalise(client, str(built.id), base, epoch).id
        assert loaded == saved.id
        layers = client.images.get(loaded).attrs["RootFS"]["Layers"]
        assert layers == saved.config["rootfs"]["diff_ids"]
    finally:
        for image in (loaded, str(built.id)):
            if image is not None:
                with contextlib.suppress(Exception):
                    client.images.remove(image, force=True)


# --- issue 22: a CUDA-runtime-shaped base, a framework base, and what fails naming which ---------

# A site package built against the base's NCCL and held with it (an NCCL network plugin, say):
# changing libnccl2 would break it, so the build must stop and name it.
HELD_PLUGIN = "site-nccl-plugin"
HELD_DOCKERFILE = """\
FROM {base}
RUN mkdir -p /tmp/p/DEBIAN \\
 && printf '%s\\n' 'Package: {name}' 'Version: 1.0' 'Architecture: amd64' \\
      'Maintainer: lab <lab@example.org>' 'Depends: libnccl2 (= {nccl})' \\
      'Description: built against the NCCL of the base' > /tmp/p/DEBIAN/control \\
 && dpkg-deb --build /tmp/p /tmp/p.deb >/dev/null && dpkg -i /tmp/p.deb \\
 && apt-mark hold {name} && rm -rf /tmp/p /tmp/p.deb
"""


def _remove_with_children(client: Any, image_id: str) -> None:
    """Remove an image and the images built on it, children first: a failed classic build
    keeps the images of its finished steps (its cache), and the engine refuses to remove a
    parent while they exist, forced or not."""
    parents = {str(i.id): str(i.attrs.get("Parent") or "") for i in client.images.list(all=True)}

    def depth(image: str) -> int:
        steps = 0
        while image and image != image_id:
            image, steps = parents.get(image, ""), steps + 1
        return steps if image == image_id else -1

    for child in sorted((i for i in parents if depth(i) > 0), key=depth, reverse=True):
        client.images.remove(child, noprune=True)
    client.images.remove(image_id, force=True)


def _sh(image: str, script: str) -> str:
    """The script's stdout in a throwaway container of ``image``.

    The output always ends with a newline: the engine's log copier can still hold an
    unterminated last line when the container has exited and its logs are read, and that line
    is then missing (measured: ``dpkg-query -W -f '${Version}'`` as the last command lost its
    line in 7 of 15 runs on the same image, and none with the newline)."""
    wrapped = f'{script}\nrc=$?; echo; exit "$rc"'
    out = docker_client().containers.run(
        image, ["sh", "-c", wrapped], entrypoint=[], network_mode="none", remove=True
    )
    return bytes(out).decode()


@pytest.mark.lab
def test_the_lab_base_is_cuda_runtime_shaped_and_the_image_carries_the_stacks_nccl(
    lab: Any, training_image: Any
) -> None:
    recipe = training_image.recipe
    assert recipe.base_kind == "cuda-runtime"
    base = _sh(recipe.base, "command -v python3 || echo no-python; apt-mark showhold; "
               "dpkg-query -W -f '${Version}' libnccl2; echo; echo $NCCL_VERSION")  # fmt: skip
    assert base.split() == ["no-python", "libnccl2", "2.26.2-1+cuda12.8", "2.26.2-1"]
    image = _sh(
        training_image.image_id, "apt-mark showhold; dpkg-query -W -f '${Version}' libnccl2"
    )
    assert image.split() == ["libnccl2", "2.21.5-1+cuda12.4"]  # changed, and held again
    # Python and pip from the base OS, at the versions the inventory pins.
    python = _sh(training_image.image_id, "dpkg-query -W python3 python3-pip")
    assert dict(line.split("\t") for line in python.splitlines() if line) == recipe.python_apt
    inspected = _gpunode("image", "inspect", training_image.image_id, "-i", str(lab.inventory),
                         "--json")  # fmt: skip
    assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    loaded = json.loads(inspected.stdout)["nccl_loaded"]
    assert loaded["version"] == "2.21.5"
    assert [o["version"] for o in loaded["others"]] == ["2.21.5"]  # the system NCCL too
    assert loaded["others"][0]["source"]["package_version"] == "2.21.5-1+cuda12.4"


@pytest.mark.lab
def test_a_framework_base_builds_and_a_wrongly_declared_kind_fails_naming_it(
    lab: Any, training_image: Any, tmp_path: Path
) -> None:
    # The training image is itself NGC-shaped: Python, torch and NCCL (held) in the image.
    framework = training_image.image_id
    runtime = training_image.recipe.base
    lab_python = training_image.recipe.python_apt
    wrong = [
        (framework, "cuda-runtime", "is cuda-runtime but the base carries Python"),
        (runtime, "framework", "is framework but the base has no python3"),
    ]
    client = docker_client()
    try:
        for base, kind, message in wrong:
            # A framework base brings its own Python: its inventory pins none.
            python = None if kind == "framework" else lab_python
            inventory = _inventory_copy(
                lab,
                tmp_path / kind,
                gpunode_image_base=base,
                gpunode_image_base_kind=kind,
                gpunode_image_python_packages=python,
            )
            built = _gpunode("image", "build", "-i", str(inventory))
            assert built.returncode != 0, built.stdout
            first = " ".join(built.stderr.split())
            assert f"the image build failed: gpunode: gpunode_image_base_kind {message}" in first
        inventory = _inventory_copy(
            lab,
            tmp_path / "ok",
            gpunode_image_base=framework,
            gpunode_image_base_kind="framework",
            gpunode_image_python_packages=None,
        )
        built = _gpunode("image", "build", "-i", str(inventory), "--json")
        assert built.returncode == 0, built.stderr[-3000:]
        other = json.loads(built.stdout)["image_id"]
        assert _sh(other, "command -v python3; apt-mark showhold").split() == [
            "/usr/bin/python3",
            "libnccl2",
        ]
        inspected = _gpunode("image", "inspect", other, "-i", str(inventory))
        assert inspected.returncode == 0, inspected.stdout + inspected.stderr
    finally:
        # Every build here has the session's stack id: whichever took the tag gives it back.
        tagged = str(client.images.get(training_image.tag).id)
        if tagged != training_image.image_id:
            client.images.remove(tagged, force=True)
            client.images.get(training_image.image_id).tag(training_image.tag)


@pytest.mark.lab
def test_a_held_package_that_needs_the_base_nccl_fails_the_build_naming_it(
    lab: Any, training_image: Any, tmp_path: Path
) -> None:
    client = docker_client()
    dockerfile = HELD_DOCKERFILE.format(
        base=training_image.recipe.base, name=HELD_PLUGIN, nccl="2.26.2-1+cuda12.8"
    )
    held, _log = client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), rm=True, network_mode="none", pull=False
    )
    try:
        inventory = _inventory_copy(lab, tmp_path, gpunode_image_base=str(held.id))
        built = _gpunode("image", "build", "-i", str(inventory))
        assert built.returncode != 0, built.stdout
        text = " ".join(built.stderr.split())
        assert (
            "the held NCCL of the base (libnccl2 2.26.2-1+cuda12.8) cannot be changed to "
            f"libnccl2=2.21.5-1+cuda12.4: held package(s) of the base {HELD_PLUGIN} depend on it"
        ) in text
    finally:
        _remove_with_children(client, str(held.id))


@pytest.mark.lab
def test_a_key_whose_fingerprint_differs_fails_the_build_naming_both(
    lab: Any, tmp_path: Path
) -> None:
    pinned = recipe_for(lab.inventory).apt
    assert pinned is not None
    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    inventory = _inventory_copy(lab, tmp_path, gpunode_nvidia_repo_key_fingerprint=other)
    built = _gpunode("image", "build", "-i", str(inventory))
    assert built.returncode != 0, built.stdout
    text = " ".join(built.stderr.split())
    assert pinned.fingerprint in text and other in text and "fingerprint" in text
