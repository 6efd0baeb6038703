"""Loading YAML and validating it: errors name the file, line, key path and rule."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import Field

from toolkit.config import StrictModel, allowed_keys, did_you_mean, format_loc, load_yaml, validate
from toolkit.errors import ConfigError


class Inner(StrictModel):
    flavour: Literal["open", "proprietary"]
    version: str


class Item(StrictModel):
    serial: str = Field(min_length=1)


class Outer(StrictModel):
    driver: Inner
    count: int = Field(ge=1)
    items: list[Item] = Field(default_factory=list)
    by_os: dict[str, Inner] = Field(default_factory=dict)


def write(tmp_path: Path, text: str, name: str = "c.yml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_yaml_reads_a_mapping(tmp_path: Path) -> None:
    path = write(tmp_path, "a: 1\nb: [x, y]\n")
    assert load_yaml(path) == {"a": 1, "b": ["x", "y"]}


def test_load_yaml_empty_file_is_none(tmp_path: Path) -> None:
    assert load_yaml(write(tmp_path, "")) is None


def test_load_yaml_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "a: 1\nb: [x, y\nc: 3\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    message = info.value.message
    assert str(path) in message
    assert "invalid YAML" in message
    # The unclosed flow sequence is reported where the parser gave up (line 3).
    assert f"{path}:3:" in message
    assert info.value.exit_code == 2


def test_load_yaml_refuses_python_objects(tmp_path: Path) -> None:
    path = write(tmp_path, "a: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_yaml(path)


def test_load_yaml_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_yaml(tmp_path / "nope.yml")


@pytest.mark.parametrize(
    ("loc", "text"),
    [
        (("stack", "driver", "flavour"), "stack.driver.flavour"),
        (("disks", 0, "serial"), "disks[0].serial"),
        ((), "(top level)"),
    ],
)
def test_format_loc(loc: tuple[str | int, ...], text: str) -> None:
    assert format_loc(loc) == text


def test_validate_returns_the_model(tmp_path: Path) -> None:
    data = {"driver": {"flavour": "open", "version": "1"}, "count": 2}
    model = validate(Outer, data, tmp_path / "x.yml")
    assert model.driver.flavour == "open"
    assert model.count == 2


def test_unknown_key_suggests_the_closest_name(tmp_path: Path) -> None:
    path = write(tmp_path, "driver:\n  flavor: open\n  version: '1'\ncount: 1\n")
    with pytest.raises(ConfigError) as info:
        validate(Outer, load_yaml(path), path)
    message = info.value.message
    assert f"{path}:2: driver.flavor: unknown key; did you mean 'flavour'?" in message
    assert "driver.flavour: required key is missing" in message


def test_unknown_key_without_close_match_lists_allowed(tmp_path: Path) -> None:
    data = {"driver": {"flavour": "open", "version": "1"}, "count": 1, "zzz": 1}
    with pytest.raises(ConfigError) as info:
        validate(Outer, data, "f.yml")
    assert "zzz: unknown key; allowed: by_os, count, driver, items" in info.value.message


def test_unknown_key_inside_list_and_dict_items(tmp_path: Path) -> None:
    data = {
        "driver": {"flavour": "open", "version": "1"},
        "count": 1,
        "items": [{"serial": "a"}, {"serail": "b"}],
        "by_os": {"debian12": {"flavour": "open", "versoin": "1"}},
    }
    with pytest.raises(ConfigError) as info:
        validate(Outer, data, "f.yml")
    message = info.value.message
    assert "items[1].serail: unknown key; did you mean 'serial'?" in message
    assert "by_os.debian12.versoin: unknown key; did you mean 'version'?" in message


def test_wrong_type_and_rule_are_named(tmp_path: Path) -> None:
    path = write(tmp_path, "driver:\n  flavour: opn\n  version: '1'\ncount: 0\n")
    with pytest.raises(ConfigError) as info:
        validate(Outer, load_yaml(path), path)
    message = info.value.message
    assert "2 problems" in message
    assert f"{path}:2: driver.flavour: Input should be 'open' or 'proprietary' (got 'opn')" in (
        message
    )
    assert f"{path}:4: count: Input should be greater than or equal to 1 (got 0)" in message


def test_prefix_is_part_of_the_key_path(tmp_path: Path) -> None:
    path = write(tmp_path, "stack:\n  driver:\n    flavour: x\n    version: '1'\n  count: 1\n")
    data = load_yaml(path)["stack"]
    with pytest.raises(ConfigError) as info:
        validate(Outer, data, path, prefix=("stack",))
    assert f"{path}:3: stack.driver.flavour:" in info.value.message


def test_allowed_keys_walks_nested_models() -> None:
    assert allowed_keys(Outer, ()) == ["driver", "count", "items", "by_os"]
    assert allowed_keys(Outer, ("driver",)) == ["flavour", "version"]
    assert allowed_keys(Outer, ("items", 3)) == ["serial"]
    assert allowed_keys(Outer, ("by_os", "debian12")) == ["flavour", "version"]
    assert allowed_keys(Outer, ("count",)) == []


@pytest.mark.parametrize(
    ("key", "allowed", "tail"),
    [
        ("flavor", ["flavour", "version"], "; did you mean 'flavour'?"),
        ("qqq", ["b", "a"], "; allowed: a, b"),
        ("x", [], ""),
    ],
)
def test_did_you_mean(key: str, allowed: list[str], tail: str) -> None:
    assert did_you_mean(key, allowed) == tail


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"driver": "open", "count": 1}, "driver: expected a mapping, got a string"),
        ({"driver": None, "count": 1}, "driver: expected a mapping, got nothing (null)"),
        (
            {"driver": {"flavour": "open", "version": "1"}, "count": 1, "items": {"a": 1}},
            "items: expected a list, got a mapping",
        ),
    ],
)
def test_wrong_container_types_are_named(data: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(Outer, data, "f.yml")
    assert expected in info.value.message
