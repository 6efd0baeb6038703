"""The training image's recipe and its rendering: pins checked, inputs digested."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.errors import ConfigError, ImageError
from toolkit.images.recipe import LABEL_INPUT_DIGEST, Recipe, make_recipe
from toolkit.images.render import render
from toolkit.stack.aptindex import dearmor
from toolkit.stack.resolve import resolve
from unit.stack.support import make

# A real public repository key and its fingerprint (NVIDIA's container toolkit key,
# tests/data/real/SOURCES.md, libnvidia-container): the image's key is checked against the pin.
KEY = REPO / "tests" / "data" / "real" / "libnvidia-container" / "gpgkey"
KEY_BYTES = KEY.read_bytes()
KEY_FINGERPRINT = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"

BASE_ID = "sha256:" + "a" * 64
LOCK = [
    "torch==2.13.0+cpu --hash=sha256:" + "1" * 64,
    "nvidia-nccl-cu12==2.21.5 --hash=sha256:" + "2" * 64,
]
# Debian 12's python3 and python3-pip (packages.debian.org/bookworm/python3, .../python3-pip).
PYTHON_PINS = {"python3": "3.11.2-1+b1", "python3-pip": "23.0.1+dfsg-1"}
PRE_R580 = {"driver": {"version": "550.127.05", "flavour": "open"}, "cuda": "12.4.1",
            "nccl": "2.21.5-1+cuda12.4"}  # fmt: skip


def values(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "gpunode_image_base": BASE_ID,
        "gpunode_acceptance_requirements": LOCK,
        "gpunode_pip_find_links": "http://10.0.0.2/wheels/",
        "gpunode_nvidia_repo_url": "http://10.0.0.2/compute/cuda/repos/{os}/{arch}/",
        "gpunode_nvidia_repo_key_url": "http://10.0.0.2/key.asc",
        "gpunode_nvidia_repo_key_fingerprint": KEY_FINGERPRINT,
        "gpunode_image_source_date_epoch": 1700000000,
        "gpunode_image_python_packages": PYTHON_PINS,
    }
    if over.get("gpunode_image_base_kind") == "framework":
        base.pop("gpunode_image_python_packages")  # a framework base brings its own Python
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def recipe(**over: Any) -> Recipe:
    resolved = resolve(*make(PRE_R580), "debian12", repo_vars=values(**over))
    return make_recipe("lab", resolved, values(**over), "inv")


def test_recipe_pins_the_stacks_nccl_and_names_the_image_by_stack_id() -> None:
    r = recipe()
    assert r.apt_packages == {"libnccl2": "2.21.5-1+cuda12.4"}
    assert r.nccl == "2.21.5" and r.cuda == "12.4" and r.nccl_wheel == "nvidia-nccl-cu12"
    assert r.tag == f"gpunode-training:{r.stack_id}"
    assert r.apt is not None and r.apt.uri == "http://10.0.0.2/compute/cuda/repos/debian12/x86_64/"
    assert r.source_date_epoch == 1700000000
    assert r.warnings == ()


@pytest.mark.parametrize(
    "base",
    [
        "sha256:" + "b" * 64,
        "nvcr.io/nvidia/cuda@sha256:" + "c" * 64,
        "reg:5000/x/y@sha256:" + "d" * 64,
    ],
)
def test_base_pinned_by_digest_or_id_is_accepted(base: str) -> None:
    assert recipe(gpunode_image_base=base).base == base


@pytest.mark.parametrize("base", ["nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04", "debian:12"])
def test_tag_only_base_is_refused_unless_allowed(base: str) -> None:
    with pytest.raises(ConfigError, match=r"gpunode_image_base .* not pinned by digest"):
        recipe(gpunode_image_base=base)
    assert recipe(gpunode_image_base=base, gpunode_image_allow_tag_base=True).base == base


def test_missing_base_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="gpunode_image_base is not set"):
        recipe(gpunode_image_base=None)


@pytest.mark.parametrize(
    "lock",
    [["torch==2.13.0"], ["torch>=2 --hash=sha256:" + "1" * 64], "torch==2 --hash=sha256:x"],
)
def test_lock_lines_need_an_exact_pin_and_a_hash(lock: Any) -> None:
    with pytest.raises(ConfigError, match="gpunode_acceptance_requirements"):
        recipe(gpunode_acceptance_requirements=lock)


def test_lock_without_a_source_is_refused() -> None:
    with pytest.raises(ConfigError, match="gpunode_pip_find_links"):
        recipe(gpunode_pip_find_links=None)


def test_bad_source_date_is_refused() -> None:
    with pytest.raises(ConfigError, match="gpunode_image_source_date_epoch"):
        recipe(gpunode_image_source_date_epoch="yesterday")


def test_a_framework_nccl_other_than_the_stacks_is_warned_about() -> None:
    lock = [LOCK[0], "nvidia-nccl-cu12==2.26.2 --hash=sha256:" + "3" * 64]
    r = recipe(gpunode_acceptance_requirements=lock)
    assert any("nvidia-nccl-cu12==2.26.2" in w and "2.21.5" in w for w in r.warnings)
    unpinned = recipe(gpunode_acceptance_requirements=LOCK[:1])
    assert any("does not pin nvidia-nccl-cu12" in w for w in unpinned.warnings)


def test_render_is_deterministic_and_pins_everything() -> None:
    a, b = render(recipe(), key=KEY_BYTES), render(recipe(), key=KEY_BYTES)
    assert a.digest == b.digest and a.tar(0) == b.tar(0)
    text = a.dockerfile
    assert f"FROM {BASE_ID}" in text
    assert "libnccl2=2.21.5-1+cuda12.4" in text
    assert "--require-hashes" in text and "--no-compile" in text
    assert "signed-by=/usr/share/keyrings/gpunode-nvidia.asc" in text
    assert "trusted=yes" not in text
    assert f'{LABEL_INPUT_DIGEST}="{a.digest}"' in text
    assert "rm -rf /var/lib/apt/lists/*" in text and "/var/log/*" in text
    assert a.files["requirements.txt"][0].decode().splitlines() == LOCK


@pytest.mark.parametrize(
    "change",
    [
        {
            "gpunode_acceptance_requirements": [
                LOCK[0],
                "nvidia-nccl-cu12==2.26.2 --hash=sha256:" + "3" * 64,
            ]
        },
        {"gpunode_image_base": "sha256:" + "e" * 64},
        {"gpunode_image_source_date_epoch": 1700000001},
    ],
)
def test_changing_one_input_changes_the_digest(change: dict[str, Any]) -> None:
    key = KEY_BYTES
    assert render(recipe(**change), key=key).digest != render(recipe(), key=key).digest


def test_the_repository_key_is_an_input() -> None:
    # The same key armored and binary: the same fingerprint, other bytes.
    binary = dearmor(KEY_BYTES)
    assert render(recipe(), key=KEY_BYTES).digest != render(recipe(), key=binary).digest


# --- issue 27: inventory values never become Dockerfile or shell syntax --------------------------


@pytest.mark.parametrize(
    ("allow", "accepted"),
    [("false", False), ("no", False), ("0", False), (False, False), ("yes", True), (True, True)],
)
def test_allow_tag_base_is_read_as_a_boolean(allow: Any, accepted: bool) -> None:
    tag = "nvcr.io/nvidia/cuda:12.4.1-runtime-ubuntu22.04"
    if accepted:
        assert recipe(gpunode_image_base=tag, gpunode_image_allow_tag_base=allow).base == tag
    else:
        with pytest.raises(ConfigError, match="not pinned by digest"):
            recipe(gpunode_image_base=tag, gpunode_image_allow_tag_base=allow)


@pytest.mark.parametrize(
    "base",
    [
        "debian:12\nRUN touch /tmp/pwned",
        "debian:12 AS x",
        "debian:$TAG",
        "sha256:" + "a" * 64 + "\n",
        "x@sha256:" + "a" * 64 + "\nRUN touch /tmp/pwned",
    ],
)
def test_a_base_that_is_not_one_reference_is_refused_even_with_tags_allowed(base: str) -> None:
    with pytest.raises(ConfigError, match=r"gpunode_image_base .* is not an image reference"):
        recipe(gpunode_image_base=base, gpunode_image_allow_tag_base=True)


def test_render_refuses_a_recipe_value_a_dockerfile_would_read() -> None:
    good = recipe()
    for change in ({"base": "debian:12\nRUN id"}, {"nccl": "2.21.5 $HOME"}):
        with pytest.raises(ImageError, match=next(iter(change))):
            render(Recipe(**{**good.__dict__, **change}), key=KEY_BYTES)


# Hostile but valid: every character the URL rule lets through that a shell would still read
# (`?`, `~`, `=`, `,`, `+`, `%`, `:`) where it could.
HOSTILE_REPO = "http://mirror.example:8080/cuda~1/{os}/{arch}/?a=b,c+d%20"
HOSTILE_LINKS = "https://mirror.example/wheels~x/?k=v,w+x%2F"


def test_a_rendered_dockerfile_quotes_every_inventory_value_in_its_run_lines() -> None:
    r = recipe(gpunode_nvidia_repo_url=HOSTILE_REPO, gpunode_pip_find_links=HOSTILE_LINKS)
    assert r.apt is not None
    text = render(r, key=dearmor(KEY_BYTES)).dockerfile
    runs = [line for line in text.replace("\\\n", " ").splitlines() if line.startswith("RUN ")]
    assert len(runs) == 4  # the base probe, Python, NCCL, the Python lock
    values = [r.apt.uri, HOSTILE_LINKS, *(f"{n}={v}" for n, v in r.apt_packages.items())]
    found = 0
    for run in runs:
        for value in values:
            start = run.find(value)
            while start != -1:
                found += 1
                # Inside single quotes, or made only of characters no shell reads.
                inside = run[:start].count("'") % 2 == 1
                assert inside or re.fullmatch(r"[\w@%+=:,./-]+", value), (value, run)
                start = run.find(value, start + 1)
    assert found == len(values) + 1  # the repository URL twice: the source line, the message
    assert f"'deb [signed-by=/usr/share/keyrings/gpunode-nvidia.gpg] {r.apt.uri} /'" in text
    assert "kind=cuda-runtime;" in text


# --- issue 22: the base's kind, its held NCCL, the key's fingerprint ------------------------------


def test_the_base_kind_defaults_to_cuda_runtime_and_is_validated() -> None:
    assert recipe().base_kind == "cuda-runtime"
    assert recipe(gpunode_image_base_kind="framework").base_kind == "framework"
    with pytest.raises(ConfigError, match=r"gpunode_image_base_kind 'pytorch' is not one of"):
        recipe(gpunode_image_base_kind="pytorch")


def _runs(text: str) -> list[str]:
    return [line[4:] for line in text.replace("\\\n", "").splitlines() if line.startswith("RUN ")]


def test_a_cuda_runtime_base_gets_python_and_a_framework_base_does_not() -> None:
    runtime = render(recipe(), key=KEY_BYTES).dockerfile
    framework = render(recipe(gpunode_image_base_kind="framework"), key=KEY_BYTES).dockerfile
    (installs,) = [" ".join(run.split()) for run in _runs(runtime) if "python3-pip" in run]
    python = "--no-install-recommends python3=3.11.2-1+b1 python3-pip=23.0.1+dfsg-1 &&"
    assert python in installs
    assert not [run for run in _runs(framework) if "python3-pip" in run]
    assert "kind=cuda-runtime;" in runtime and "kind=framework;" in framework
    assert len(_runs(runtime)) == len(_runs(framework)) + 1


def test_python_on_a_cuda_runtime_base_is_pinned_and_only_there() -> None:
    assert recipe().python_apt == PYTHON_PINS
    assert recipe(gpunode_image_base_kind="framework").python_apt == {}
    with pytest.raises(ConfigError, match=r"gpunode_image_python_packages is not set; a cuda-r"):
        recipe(gpunode_image_python_packages=None)
    with pytest.raises(ConfigError, match=r"does not pin python3-pip: a cuda-runtime base"):
        recipe(gpunode_image_python_packages={"python3": "3.11.2-1+b1"})
    with pytest.raises(ConfigError, match=r"python3-pip: '23\.\*' is not an exact Debian ver"):
        recipe(gpunode_image_python_packages={**PYTHON_PINS, "python3-pip": "23.*"})
    with pytest.raises(ConfigError, match=r"'Python3' is not a Debian package name"):
        recipe(gpunode_image_python_packages={**PYTHON_PINS, "Python3": "3"})
    with pytest.raises(ConfigError, match=r"set but gpunode_image_base_kind is framework"):
        recipe(gpunode_image_base_kind="framework", gpunode_image_python_packages=PYTHON_PINS)
    # The pins decide the image's bytes: they are in the recipe's digest.
    other = {**PYTHON_PINS, "python3": "3.11.2-1+b2"}
    digest = render(recipe(), key=KEY_BYTES).digest
    assert render(recipe(gpunode_image_python_packages=other), key=KEY_BYTES).digest != digest


def test_only_the_stacks_nccl_is_unheld_changed_and_held_again() -> None:
    (nccl,) = [
        run for run in _runs(render(recipe(), key=KEY_BYTES).dockerfile) if "libnccl2=" in run
    ]
    # apt's global switch would let any held package change: never used.
    assert "--allow-change-held-packages" not in nccl
    assert "pins=libnccl2=2.21.5-1+cuda12.4;" in nccl and "--allow-downgrades" in nccl
    assert (
        nccl.index("apt-mark unhold $names")
        < nccl.index("apt-get install")
        < nccl.index("apt-mark hold $names")
    )
    assert "apt-mark showhold | grep -vx -e libnccl2 -e libnccl-dev" in nccl


def _probe(tmp_path: Path, kind: str, tools: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run the rendered base probe with only ``tools`` (name -> shell body) on its PATH."""
    (probe,) = [
        run
        for run in _runs(render(recipe(gpunode_image_base_kind=kind), key=KEY_BYTES).dockerfile)
        if run.startswith("kind=")
    ]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return subprocess.run(
        ["/bin/sh", "-c", probe], env={"PATH": str(bin_dir)}, capture_output=True, text=True
    )


APT = {"dpkg": "exit 0", "apt-get": "exit 0"}


@pytest.mark.parametrize(
    ("kind", "python", "ok", "message"),
    [
        ("cuda-runtime", None, True, ""),
        ("cuda-runtime", "exit 0", False, "the base carries Python"),
        ("framework", "exit 0", True, ""),
        ("framework", None, False, "the base has no python3"),
        ("framework", "exit 1", False, "the base cannot import torch"),
    ],
)
def test_the_base_probe_fails_when_the_base_is_not_its_declared_kind(
    tmp_path: Path, kind: str, python: str | None, ok: bool, message: str
) -> None:
    tools = {**APT, **({"python3": python} if python else {})}
    result = _probe(tmp_path, kind, tools)
    assert (result.returncode == 0) is ok, result.stderr
    if not ok:
        assert f"gpunode_image_base_kind is {kind} but {message}" in result.stderr
        assert "gpunode_image_base_kind: " in result.stderr  # names the kind that fits


def test_a_base_without_apt_is_refused_by_the_probe(tmp_path: Path) -> None:
    result = _probe(tmp_path, "cuda-runtime", {"dpkg": "exit 0"})
    assert result.returncode == 1 and "has no dpkg/apt-get" in result.stderr


def test_a_key_whose_fingerprint_is_not_the_pinned_one_is_refused() -> None:
    other = "0123456789ABCDEF0123456789ABCDEF01234567"
    with pytest.raises(ImageError) as err:
        render(recipe(gpunode_nvidia_repo_key_fingerprint=other), key=KEY_BYTES)
    assert KEY_FINGERPRINT in err.value.message and other in err.value.message
    assert "gpunode_nvidia_repo_key_fingerprint" in err.value.message
    with pytest.raises(ImageError, match="not an OpenPGP key"):
        render(recipe(), key=b"-----BEGIN PGP PUBLIC KEY BLOCK-----\nabc\n")
