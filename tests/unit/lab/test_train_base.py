"""The lab's training-image base has the shape of NVIDIA's CUDA runtime image (the facts in
tests/data/real/cuda-images/): its NCCL environment, libnccl2 installed and held, no Python."""

from __future__ import annotations

from shared_fixtures import REPO

from toolkit.lab import train_base
from toolkit.lab.catalog import NCCL_BUILDS
from toolkit.lab.inventory import DEFAULT_STACK

FACTS = REPO / "tests" / "data" / "real" / "cuda-images" / "runtime-ubuntu2204-12.2.2-facts.txt"


def _facts() -> list[tuple[str, str]]:
    lines = [line for line in FACTS.read_text().splitlines() if line and not line.startswith("#")]
    return [(kind, value.strip()) for kind, value in (line.split(":", 1) for line in lines)]


def test_the_base_sets_the_environment_names_nvidias_runtime_image_sets() -> None:
    nvidia = {v.split("=", 1)[0] for k, v in _facts() if k == "env"}
    changes = [*train_base.IMPORT_CHANGES, *train_base.nccl_changes(train_base.base_nccl())]
    ours = {c.split()[1].split("=", 1)[0] for c in changes if c.startswith("ENV ")}
    assert nvidia <= ours
    # The same values where they are not versions.
    for kind, value in _facts():
        if kind == "env" and value.startswith("NVIDIA_"):
            assert f"ENV {value}" in changes


def test_the_base_installs_and_holds_libnccl2_and_carries_no_python() -> None:
    facts = _facts()
    assert ("holds", train_base.NCCL_PACKAGE) in facts and ("python", "none") in facts
    assert "apt-mark hold libnccl2" in train_base.NCCL_SCRIPT
    assert not [p for p in train_base.PACKAGES if p.startswith("python")]


def test_the_base_nccl_is_another_build_than_the_default_stacks() -> None:
    build = train_base.base_nccl()
    assert build in NCCL_BUILDS and build.apt_version != DEFAULT_STACK["nccl"]
    changes = train_base.nccl_changes(build)
    assert f"ENV NV_LIBNCCL_PACKAGE=libnccl2={build.apt_version}" in changes
    assert f"ENV NCCL_VERSION={build.version}-1" in changes
