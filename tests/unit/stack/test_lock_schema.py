"""The one schema of ``stack.lock.yml`` (issue 27, class F): every reader refuses a broken lock.

A lock is written by gpunode and read back by ``stack show``, ``stack check``, provision's
precheck, the ``gpunode_stack`` action plugin, acceptance and the image build. Each goes
through ``toolkit.stack.lock`` (``parse_lock``, ``lock_from_vars``, ``read_lock``): exact
types, a closed set of keys, Debian versions and package names matched by patterns ending in
``\\Z``, SHA-256 as 64 hex digits, ``needed_by`` resolvable and acyclic. A broken lock exits 2
naming the file and the key, never an internal error, and nothing of it reaches the terminal
raw.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from toolkit.errors import ConfigError
from toolkit.images.build import recipe_for
from toolkit.inventory.targets import load_targets
from toolkit.profile.hardware import HardwareProfile
from toolkit.stack.debversion import DEB_VERSION_RE, PACKAGE_NAME_RE
from toolkit.stack.lock import (
    LOCK_KEY,
    dump_lock,
    lock_document,
    lock_from_vars,
    parse_lock,
    read_lock,
)
from toolkit.stack.models import Stack
from unit.cli.test_stack import ACCEPT_ALL
from unit.core.test_printable import assert_clean, run
from unit.core.test_properties import configured
from unit.stack.support import BASE, lock_for

STACK = Stack.model_validate(BASE["stack"])
HARDWARE = HardwareProfile.model_validate(BASE["hardware"])
PACKAGE = "libnccl2"  # a package every lock of BASE carries


def valid_lock() -> dict[str, Any]:
    """The ``stack_lock`` value of the test group, as the test support builds it."""
    return lock_for(STACK, HARDWARE)


def make_inventory(root: Path) -> Path:
    """A group ``g`` with BASE's stack (coherent: the security floors' risks accepted), one
    host, and an image base (for the image recipe)."""
    (root / "group_vars" / "g").mkdir(parents=True)
    (root / "hosts.yml").write_text("all:\n  children:\n    g:\n      hosts:\n        n1:\n")
    (root / "group_vars" / "g" / "stack.yml").write_text(
        yaml.safe_dump({"stack": BASE["stack"], "gpunode_stack_os": ["debian12"]}) + ACCEPT_ALL
    )
    (root / "group_vars" / "g" / "hardware.yml").write_text(
        yaml.safe_dump({"hardware": BASE["hardware"]})
    )
    (root / "group_vars" / "g" / "image.yml").write_text(
        f"gpunode_image_base: 'nvidia/cuda@sha256:{'a' * 64}'\n"
    )
    return root


def lock_file(inventory: Path) -> Path:
    return inventory / "group_vars" / "g" / "stack.lock.yml"


def write_raw(inventory: Path, lock: Any) -> Path:
    """Write a lock as it is, valid or not (a hand edit, a tampered commit)."""
    path = lock_file(inventory)
    path.write_text(yaml.safe_dump({LOCK_KEY: lock}, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    return make_inventory(tmp_path / "inv")


def _package(lock: dict[str, Any], name: str = PACKAGE) -> dict[str, Any]:
    entry: dict[str, Any] = lock["systems"]["debian12"]["packages"][name]
    return entry


def _set(field: str, value: Any) -> Any:
    def change(lock: dict[str, Any]) -> None:
        _package(lock)[field] = value

    return change


def _cycle(lock: dict[str, Any]) -> None:
    packages = lock["systems"]["debian12"]["packages"]
    packages["nvidia-alternative"] = {**packages[PACKAGE], "needed_by": "nvidia-egl-icd"}
    packages["nvidia-egl-icd"] = {**packages[PACKAGE], "needed_by": "nvidia-alternative"}


def _rename(lock: dict[str, Any]) -> None:
    packages = lock["systems"]["debian12"]["packages"]
    packages["Evil\x1b[2JName"] = packages.pop(PACKAGE)


INJECTION = "1.0\nPackage: *\nPin: origin evil.example\nPin-Priority: 1002"
PATH = f"stack_lock.systems.debian12.packages.{PACKAGE}"

# (what is broken, the change, the key path the message names, a phrase of the rule)
BROKEN = [
    ("a version read as a number", _set("version", 1.0), f"{PATH}.version", "string"),
    ("a version with newlines", _set("version", INJECTION), f"{PATH}.version", "Debian version"),
    ("a version with ESC", _set("version", "1.0\x1b[2J"), f"{PATH}.version", "Debian version"),
    ("a version as a list", _set("version", ["1.0"]), f"{PATH}.version", "string"),
    ("sha256: not-a-sha", _set("sha256", "not-a-sha"), f"{PATH}.sha256", "SHA-256"),
    ("a short sha256", _set("sha256", "0" * 63), f"{PATH}.sha256", "SHA-256"),
    ("an unknown field", _set("signed", "yes"), f"{PATH}.signed", "unknown key"),
    ("a needed_by cycle", _cycle, "stack_lock.systems.debian12", "cycle"),
    (
        "a needed_by nobody locks",
        _set("needed_by", "nvidia-ghost"),
        "stack_lock.systems.debian12",
        "nvidia-ghost is not a locked package",
    ),
    (
        "a repository the system lacks",
        _set("repository", "elsewhere"),
        "stack_lock.systems.debian12",
        "elsewhere is not one of the repositories",
    ),
    ("a package name against policy", _rename, "stack_lock.systems.debian12.packages", "policy"),
    ("a filename with ..", _set("filename", "../../etc/x.deb"), f"{PATH}.filename", "path"),
    (
        "an unknown top-level field",
        lambda lock: lock.update(extra=1),
        "stack_lock.extra",
        "unknown key",
    ),
    ("a stack id as a number", lambda lock: lock.update(stack_id=123), "stack_lock.stack_id", ""),
    (
        "systems as a list",
        lambda lock: lock.update(systems=["debian12"]),
        "stack_lock.systems",
        "mapping",
    ),
    (
        "an unsupported OS",
        lambda lock: lock["systems"].update(centos9=lock["systems"]["debian12"]),
        "stack_lock.systems",
        "unknown OS",
    ),
]


@pytest.mark.parametrize(
    ("change", "key", "rule"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN]
)
def test_every_reader_refuses_a_broken_lock_naming_file_and_key(
    inventory: Path, tmp_path: Path, change: Any, key: str, rule: str
) -> None:
    lock = valid_lock()
    change(lock)
    path = write_raw(inventory, lock)
    env = {"GPUNODE_STATE_DIR": str(tmp_path / "state")}
    for args in (
        ("stack", "show", str(inventory)),
        ("stack", "check", str(inventory)),
        ("provision", "-i", str(inventory)),
    ):
        code, out, err = run(*args, env=env)
        assert_clean(code, out, err)
        text = err.decode()
        assert code == 2, (args, text)
        assert str(path) in text and key in text and rule in text, (args, text)
        # Nothing of the lock was printed as data, and the injection never became lines.
        assert "Pin: origin" not in out.decode() and "\nPin: origin" not in text
    assert not (tmp_path / "state" / "runs").exists()  # provision refused before any run
    # The image build and the plugin's reader (the lock as Ansible hands it) refuse it too.
    with pytest.raises(ConfigError) as refused:
        recipe_for(inventory)
    assert key in refused.value.message and str(path) in refused.value.message
    with pytest.raises(ConfigError) as plugin:
        lock_from_vars({LOCK_KEY: lock}, "stack.lock.yml of host n1")
    assert key in plugin.value.message and "stack.lock.yml of host n1" in plugin.value.message


def test_the_injected_version_never_reaches_a_line_of_its_own(inventory: Path) -> None:
    lock = valid_lock()
    _package(lock)["version"] = INJECTION
    write_raw(inventory, lock)
    code, out, err = run("stack", "show", str(inventory))
    assert code == 2 and out == b""
    lines = err.decode().splitlines()
    assert not any(line.startswith(("Pin:", "Package:", "Pin-Priority:")) for line in lines)
    assert "\\nPin: origin evil.example" in err.decode()  # shown escaped, on the key's line


def test_a_valid_lock_shows_its_versions_and_checks_clean(inventory: Path) -> None:
    lock = parse_lock(valid_lock(), "test")
    lock_file(inventory).write_text(dump_lock(lock))
    code, out, err = run("stack", "show", str(inventory), "--os", "debian12")
    assert code == 0, err
    assert f"{PACKAGE}={_package(valid_lock())['version']}" in out.decode()
    assert "not locked" not in out.decode()
    code, out, err = run("stack", "check", str(inventory))
    assert code == 0 and "coherent" in out.decode(), err
    # The target's lock is the file's, validated.
    _is_inventory, (target,) = load_targets(inventory)
    assert target.lock == lock == read_lock(lock_file(inventory))


def test_the_lock_file_holds_stack_lock_and_nothing_else(inventory: Path) -> None:
    path = lock_file(inventory)
    path.write_text(yaml.safe_dump({LOCK_KEY: valid_lock(), "stack_lok": {}}))
    with pytest.raises(ConfigError) as refused:
        read_lock(path)
    assert f"{path}:" in refused.value.message and "stack_lok: unknown key" in refused.value.message


def test_lock_for_builds_a_valid_lock() -> None:
    lock = parse_lock(valid_lock(), "test support")
    assert lock.systems["debian12"].packages[PACKAGE].repository == "cuda"


# --- properties ----------------------------------------------------------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        out = [path] if path else []
        for key, child in value.items():
            out += _leaves(child, (*path, key))
        return out
    return [path]


LEAVES = _leaves(valid_lock())
hostile_values = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=40),
    st.sampled_from(["\x1b]0;owned\x07", "1.0\x1b[2J", INJECTION, "\u202e1.0", "1.0\x85"]),
    st.integers(),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=5), st.integers(), max_size=2),
)


@pytest.fixture(scope="module")
def shared_inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_inventory(tmp_path_factory.mktemp("lock-property") / "inv")


@configured
@given(
    st.lists(st.tuples(st.sampled_from(LEAVES), hostile_values), min_size=1, max_size=3),
    st.one_of(st.none(), st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)),
)
def test_a_mutated_lock_is_refused_with_exit_2_or_shown_clean(
    shared_inventory: Path, changes: list[tuple[tuple[Any, ...], Any]], new_key: str | None
) -> None:
    lock = valid_lock()
    for path, value in changes:
        node = lock
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node[path[-1]] = copy.deepcopy(value)
    if new_key is not None:
        lock[f"x{new_key}"] = "x"  # an unknown field, whatever else it holds
    write_raw(shared_inventory, lock)
    for args in (
        ("stack", "show", str(shared_inventory), "--os", "debian12"),
        ("stack", "check", str(shared_inventory)),
    ):
        code, out, err = run(*args)
        assert_clean(code, out, err)
        assert code in (0, 2), err
        if new_key is not None:
            assert code == 2 and b"unknown key" in err, err


versions = st.from_regex(DEB_VERSION_RE, fullmatch=True).filter(lambda v: len(v) <= 256)
names = st.from_regex(PACKAGE_NAME_RE, fullmatch=True).filter(lambda v: len(v) <= 256)


@configured
@given(st.dictionaries(names, versions, min_size=1, max_size=5))
def test_a_lock_the_writer_writes_reads_back_the_same(
    shared_inventory: Path, packages: dict[str, str]
) -> None:
    data = valid_lock()
    locked = data["systems"]["debian12"]["packages"]
    template = locked[PACKAGE]
    for name, version in packages.items():
        locked[name] = {**template, "version": version}
    lock = parse_lock(data, "generated")
    path = lock_file(shared_inventory)
    path.write_text(dump_lock(lock), encoding="utf-8")
    again = read_lock(path)
    assert again == lock
    assert lock_document(again) == {LOCK_KEY: data}
