"""NVLSM's companions from the OS archive (roles/fabric_manager): per-OS pins as data with their
sources, chosen exactly on the node by the rule the distribution's Docker follows
(roles/container_runtime), held, and recorded in the converge stamp."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2.nativetypes import NativeEnvironment
from shared_fixtures import REPO

from toolkit.plugins.filter.gpunode import (
    gpunode_missing_pins,
    gpunode_os_id,
    gpunode_pick_versions,
)
from toolkit.stack.systems import SUPPORTED_OS

ROLES = REPO / "roles"
FM = ROLES / "fabric_manager"
OS_FILES = sorted(p.stem for p in (FM / "vars").glob("*.yml") if p.stem != "main")
# Where a cited version may come from: the archives' own package pages.
ARCHIVE_PAGES = re.compile(r"packages\.(debian\.org|ubuntu\.com)/\S+")


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def render(expression: str, **variables: Any) -> Any:
    """An expression of the role's YAML as Ansible renders it (native types, `combine`)."""
    env = NativeEnvironment()
    env.filters["combine"] = lambda a, *more: {k: v for d in (a, *more) for k, v in d.items()}
    env.filters["gpunode_os_id"] = gpunode_os_id
    return env.from_string(expression.strip()).render(**variables)


def test_every_supported_os_has_pins_as_the_docker_pins_do() -> None:
    # Preflight refuses any other OS (toolkit.stack.systems.os_id), so a node never reaches
    # the role without its OS's file; a new OS needs its pins, with their source, first.
    docker = {p.stem for p in (ROLES / "container_runtime/vars").glob("*.yml")} - {"main"}
    assert OS_FILES == sorted(SUPPORTED_OS) == sorted(docker)
    platforms = load(FM / "meta/main.yml")["galaxy_info"]["platforms"]
    assert {p["name"]: p["versions"] for p in platforms} == {
        "Ubuntu": ["jammy", "noble"],
        "Debian": ["bookworm"],
    }


def test_the_os_is_named_as_the_docker_pins_name_it() -> None:
    mine = load(FM / "vars/main.yml")["fabric_manager_os_id"]
    assert mine == load(ROLES / "container_runtime/vars/main.yml")["container_runtime_os_id"]
    assert mine == load(ROLES / "nvidia_driver/vars/main.yml")["nvidia_driver_os_id"]
    facts = [("Debian", "12", "12.8"), ("Ubuntu", "22", "22.04"), ("Ubuntu", "24", "24.04")]
    names = [
        render(
            mine,
            ansible_distribution=d,
            ansible_distribution_major_version=m,
            ansible_distribution_version=v,
        )
        for d, m, v in facts
    ]
    assert names == OS_FILES


@pytest.mark.parametrize("os_id", OS_FILES)
def test_each_pin_is_an_upstream_version_of_a_cited_build(os_id: str) -> None:
    path = FM / f"vars/{os_id}.yml"
    pins = load(path)["fabric_manager_os_nvlsm_packages"]
    assert set(pins) == {"infiniband-diags"}
    comment = " ".join(line for line in path.read_text().splitlines() if line.startswith("#"))
    assert ARCHIVE_PAGES.search(comment), f"{os_id}: no source for its pins"
    for name, requirement in pins.items():
        # The rule (vars/main.yml): the archive keeps rdma-core's upstream version within a
        # release and replaces its revision, so the pin names the upstream version only.
        assert re.fullmatch(r"\d+(\.\d+)+-\*", requirement), f"{os_id}: {name} {requirement}"
        cited = re.findall(rf"\b{re.escape(requirement[:-1])}[0-9A-Za-z.~+]+", comment)
        assert cited, f"{os_id}: {name} {requirement} names no build its sources cite"


# `apt-cache madison infiniband-diags` as apt prints it on each OS (the versions of the sources
# cited in vars/<os>.yml; noble with its release and -updates pockets).
MADISON = {
    "debian12": (
        " infiniband-diags |     44.0-2 | http://deb.debian.org/debian bookworm/main"
        " amd64 Packages\n"
    ),
    "ubuntu2204": (
        " infiniband-diags |     39.0-1 | http://archive.ubuntu.com/ubuntu jammy/universe"
        " amd64 Packages\n"
    ),
    "ubuntu2404": (
        " infiniband-diags | 50.0-2ubuntu0.2 | http://archive.ubuntu.com/ubuntu"
        " noble-updates/universe amd64 Packages\n"
        " infiniband-diags | 50.0-2build2 | http://archive.ubuntu.com/ubuntu noble/universe"
        " amd64 Packages\n"
    ),
}
PICKED = {"debian12": "44.0-2", "ubuntu2204": "39.0-1", "ubuntu2404": "50.0-2ubuntu0.2"}


@pytest.mark.parametrize("os_id", OS_FILES)
def test_the_node_pins_the_archives_build_exactly(os_id: str) -> None:
    pins = load(FM / f"vars/{os_id}.yml")["fabric_manager_os_nvlsm_packages"]
    picked = gpunode_pick_versions(pins, MADISON[os_id])
    # The newest build of that upstream version: the one apt takes for libibnetdisc, which
    # infiniband-diags needs at exactly its own version.
    assert picked == {"infiniband-diags": PICKED[os_id]}
    assert gpunode_missing_pins(picked, MADISON[os_id]) == []


def test_a_pin_the_archive_no_longer_meets_is_named_before_anything_changes() -> None:
    pins = load(FM / "vars/debian12.yml")["fabric_manager_os_nvlsm_packages"]
    other_release = " infiniband-diags | 56.1-1 | http://deb.debian.org/debian trixie/main amd64\n"
    picked = gpunode_pick_versions(pins, other_release)
    assert picked == {"infiniband-diags": "44.0-*"}
    assert gpunode_missing_pins(picked, other_release) == ["infiniband-diags=44.0-*"]


def test_a_site_pin_replaces_the_oses() -> None:
    expression = load(FM / "vars/main.yml")["fabric_manager_nvlsm_os_requirements"]
    os_pins = {"infiniband-diags": "44.0-*"}
    assert load(FM / "defaults/main.yml")["fabric_manager_nvlsm_os_packages"] == {}
    assert render(expression, fabric_manager_nvlsm_os_packages={},
                  fabric_manager_os_nvlsm_packages=os_pins) == os_pins  # fmt: skip
    site = {"infiniband-diags": "44.0-2"}
    assert render(expression, fabric_manager_nvlsm_os_packages=site,
                  fabric_manager_os_nvlsm_packages=os_pins) == site  # fmt: skip


def _task(tasks: list[dict[str, Any]], name: str) -> tuple[int, dict[str, Any]]:
    (found,) = [(i, t) for i, t in enumerate(tasks) if t.get("name") == name]
    return found


def test_the_companions_are_pinned_and_held_by_apt_pins_after_fabric_manager() -> None:
    tasks = load(FM / "tasks/install.yml")
    fm_at, fm = _task(tasks, "Install Fabric Manager at the driver's version and hold it")
    kept_at, kept = _task(tasks, "Record whether Fabric Manager's packages changed")
    os_at, companions = _task(
        tasks, "Install NVLSM's companions from the OS archive at the pinned versions and hold them"
    )
    assert fm["ansible.builtin.include_role"]["name"] == "apt_pins"
    assert companions["ansible.builtin.include_role"]["name"] == "apt_pins"
    assert companions["when"] == "fabric_manager_nvlsm"
    assert companions["vars"]["apt_pins_packages"] == "{{ fabric_manager_nvlsm_os_pins }}"
    # apt_pins_changed is the last family's: the start's check-mode guard reads Fabric
    # Manager's, kept before the companions' family overwrites it.
    assert fm_at < kept_at < os_at
    kept_fact = kept["ansible.builtin.set_fact"]
    assert kept_fact == {"fabric_manager_pins_changed": "{{ apt_pins_changed }}"}
    _, start = _task(tasks, "Enable and start Fabric Manager (never restarted here)")
    guard = start["when"]
    assert "fabric_manager_pins_changed" in guard
    assert "apt_pins_changed" not in guard.replace("fabric_manager_pins_changed", "")


FM_NVLSM = {"nvidia-fabricmanager": "580.159.03-1", "nvlsm": "2025.06.10-1"}


@pytest.mark.parametrize(
    ("enabled", "nvlsm", "packages", "files"),
    [
        (True, True, {**FM_NVLSM, "infiniband-diags": "44.0-2"}, 3),
        (True, False, {"nvidia-fabricmanager": "580.159.03-1"}, 1),
        (False, False, {}, 0),
    ],
)
def test_the_stamp_records_the_companions_so_the_plan_sees_them_move(
    enabled: bool, nvlsm: bool, packages: dict[str, str], files: int
) -> None:
    (stamp,) = [
        t["gpunode_converge_stamp"]
        for t in load(FM / "tasks/main.yml")
        if t.get("name") == "Record what this converge left, for the next run's plan"
    ]
    variables: dict[str, Any] = {
        "fabric_manager_enabled": enabled,
        "fabric_manager_nvlsm": nvlsm,
        "fabric_manager_packages": {"nvidia-fabricmanager": "580.159.03-1"}
        | ({"nvlsm": "2025.06.10-1"} if nvlsm else {}),
        "fabric_manager_preferences": "/etc/apt/preferences.d/gpunode-fabric-manager.pref",
        "fabric_manager_modules_load_file": "/etc/modules-load.d/gpunode-nvlsm.conf",
        "fabric_manager_nvlsm_os_preferences": "/etc/apt/preferences.d/gpunode-nvlsm-os.pref",
        "fabric_manager_service": "nvidia-fabricmanager",
    }
    if nvlsm:  # set only where the companions were chosen
        variables["fabric_manager_nvlsm_os_pins"] = {"infiniband-diags": "44.0-2"}
    assert render(stamp["packages"], **variables) == packages
    recorded = render(stamp["files"], **variables)
    assert len(recorded) == files
    assert ("/etc/apt/preferences.d/gpunode-nvlsm-os.pref" in recorded) is nvlsm


def test_an_os_gpunode_does_not_support_fails_naming_the_supported_ones() -> None:
    # The old expression named it `rocky9` and failed later, on a vars file that is not there.
    with pytest.raises(ValueError, match=r"unsupported OS Rocky 9\.4; supported: .*Debian 12"):
        render(
            load(FM / "vars/main.yml")["fabric_manager_os_id"],
            ansible_distribution="Rocky",
            ansible_distribution_version="9.4",
        )
