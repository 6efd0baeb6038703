"""Hostile run folders (issue 41, class 5) and the units of ``gpunode schedule`` (class 7).

Every file gpunode reads back from a run folder (``run.json``, ``nodes/<host>.result.json``,
``check.json``, ``observations.json``) is read through one bounded read (a regular file, no
link, at most its kind's size: ``toolkit.config.read_regular``) and checked by its schema
(``toolkit.records.runs``; the passport's own ``observations.json`` in
``toolkit.records.passport``). A file that does not match is a problem naming the run, the
node, the file and the key path:
``gpunode report`` and ``gpunode node history`` still finish, show it and exit 2, and never
hang on a FIFO. The property tests run under the profiles of ``core/test_properties.py``
(``GPUNODE_HYPOTHESIS_PROFILE``).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from toolkit.cli import cli, main
from toolkit.config import FILE_LIMITS
from toolkit.errors import ConfigError, ToolkitError
from toolkit.records import passport
from toolkit.records.passport import OBSERVATIONS, passports
from toolkit.report.fleet import fleet_history
from toolkit.schedule import render, write
from unit.core.test_properties import configured, strict_json
from unit.core.test_schedule import SAMPLE, _gpunode
from unit.records.test_passport import HW, SWAPPED, History

DEADLINE_S = 2.0

INVENTORY = "all:\n  children:\n    gpu:\n      hosts:\n        n1: {ansible_host: 10.0.0.1}\n"


def _inventory(root: Path) -> Path:
    inventory = root / "inv"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(INVENTORY)
    return inventory


def _history(state: Path) -> tuple[Path, Path]:
    """An acceptance run and a passive check of n1: (the acceptance's folder, the check's)."""
    h = History(state / "runs")
    accept = h.accept({"n1": {"hw": HW}})
    check = h.check("n1", SWAPPED, failed=("GPU 0: ecc",))
    return state / "runs" / accept, state / "runs" / check


def _release(paths: list[Path]) -> None:
    """Give every FIFO among ``paths`` a writer and a reader that close at once: a reader
    blocked on one reads its end, a writer its broken pipe, so a hung command ends (and the
    test fails instead of hanging)."""
    for path in paths:
        for flags in (os.O_WRONLY, os.O_RDONLY):  # a blocked reader, a blocked writer
            with contextlib.suppress(OSError):
                os.close(os.open(path, flags | os.O_NONBLOCK))


def _within(seconds: float, run: Callable[[], Any], fifos: list[Path]) -> Any:
    """``run()``'s value if it returns within ``seconds``; fails the test otherwise."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = run()
        except BaseException as err:  # re-raised in the test's thread
            box["error"] = err

    started = time.monotonic()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    took = time.monotonic() - started
    if thread.is_alive():
        for _ in range(100):
            _release(fifos)
            thread.join(0.1)
            if not thread.is_alive():
                break
        pytest.fail(f"still running after {seconds} s (blocked on a FIFO)")
    if "error" in box:
        raise box["error"]
    assert took < seconds, took
    return box["value"]


@dataclass(frozen=True)
class Ran:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def _invoke(state: Path, *args: str, fifos: tuple[Path, ...] = ()) -> Ran:
    """``gpunode ARGS`` through its error boundary (``toolkit.cli.main``) in CliRunner's
    isolation, within the deadline."""

    def run() -> Ran:
        with CliRunner().isolation(env={"GPUNODE_STATE_DIR": str(state)}) as (out, err, _):
            try:
                main(list(args))
                code: Any = 0
            except SystemExit as done:
                code = done.code
            return Ran(
                code if isinstance(code, int) else 1,
                out.getvalue().decode(),
                err.getvalue().decode(),
            )

    ran: Ran = _within(DEADLINE_S, run, list(fifos))
    return ran


def _both(tmp_path: Path, fifos: tuple[Path, ...] = ()) -> tuple[Ran, Ran]:
    """``node history n1 --json`` and ``report --json``, each within the deadline."""
    state, inventory = tmp_path / "state", tmp_path / "inv"
    history = _invoke(state, "node", "history", "n1", "-i", str(inventory), "--json", fifos=fifos)
    report = _invoke(state, "report", "-i", str(inventory), "--json", fifos=fifos)
    return history, report


def _problems(result: Ran) -> list[dict[str, Any]]:
    """The problems of a command's one JSON document (it must have finished with exit 2)."""
    assert result.exit_code == 2 and "internal error" not in result.output, result.output
    problems: list[dict[str, Any]] = json.loads(result.stdout)["problems"]
    return problems


# --- a FIFO, a link, a folder or a huge file where a run file belongs ---------------------------


@pytest.mark.parametrize("name", ["observations", "result", "check"])
def test_a_fifo_in_a_run_folder_hangs_neither_report_nor_history(tmp_path: Path, name: str) -> None:
    _inventory(tmp_path)
    accept, check = _history(tmp_path / "state")
    path = {
        "observations": accept / OBSERVATIONS,
        "result": accept / "nodes" / "n1.result.json",
        "check": check / "check.json",
    }[name]
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    history, report = _both(tmp_path, (path,))
    if name == "observations":  # the passport's own file: read again from the run, replaced
        assert history.exit_code == 0 and report.exit_code == 0, history.output + report.output
        assert path.is_file() and json.loads(path.read_text())["observations"]["n1"]
        return
    for result in (history, report):
        [problem] = _problems(result)
        # A node's result is its node's problem; a check's whole record is its run's.
        assert problem["host"] == ("n1" if name == "result" else None)
        assert problem["run_id"] in str(path)
        assert problem["message"] == f"{path}: not a regular file; a {name} " + (
            "file must be a regular file" if name == "result" else "record must be a regular file"
        )
    assert f"problem: run {path.parent.name if name == 'check' else accept.name}" in report.stderr


def test_a_fifo_where_the_report_goes_is_replaced_not_written_through(tmp_path: Path) -> None:
    _inventory(tmp_path)
    _history(tmp_path / "state")
    page = tmp_path / "state" / "runs" / "fleet-report.html"
    os.mkfifo(page)
    report = _invoke(tmp_path / "state", "report", "-i", str(tmp_path / "inv"), fifos=(page,))
    assert report.exit_code == 0, report.output
    assert page.is_file() and "gpunode fleet report" in page.read_text()


@pytest.mark.parametrize("kind", ["link-to-dev-zero", "directory", "huge", "not-json"])
def test_a_result_file_that_is_no_result_is_a_problem_of_its_node(
    tmp_path: Path, kind: str
) -> None:
    _inventory(tmp_path)
    accept, _check = _history(tmp_path / "state")
    path = accept / "nodes" / "n1.result.json"
    path.unlink()
    if kind == "link-to-dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "huge":
        path.write_bytes(b" " * 2048)
    else:
        path.write_bytes(b"\xff\x00{")
    why = {
        "link-to-dev-zero": "a symbolic link",
        "directory": "a directory",
        "huge": "result file larger than 1024 bytes",
        "not-json": "not JSON",
    }[kind]
    with mock.patch.dict(FILE_LIMITS, {"result file": 1024}):
        history, report = _both(tmp_path)
    for result in (history, report):
        [problem] = _problems(result)
        assert problem["message"].startswith(f"{path}: ") and why in problem["message"]
    # The node's record still tells its verdict; its identity is not invented.
    [accepted, checked] = json.loads(history.stdout)["observations"]
    assert accepted["ok"] is True and accepted["gpus"] == [] and checked["gpus"]


# --- a value of the wrong type at a key the passport reads --------------------------------------
# The keys found by fuzzing each key's type on main (each an internal error there).

RESULT_KEYS = [
    ("identity",),
    ("identity", "dmi"),
    ("identity", "nics"),
    ("identity", "nics", 0),
    ("identity", "lsblk"),
    ("identity", "lsblk", "blockdevices"),
    ("identity", "lsblk", "blockdevices", 0),
    ("gpus",),
    ("gpus", "list"),
    ("gpus", "list", 0),
    ("gpus", "list", 0, "remapped_rows"),
    ("gpu_perf",),
    ("gpu_perf", "gemm"),
    ("gpu_perf", "gemm", 0, "tflops"),
]
CHECK_KEYS = [
    ("nodes", "n1", "checks"),
    ("nodes", "n1", "checks", 0),
    ("nodes", "n1", "facts"),
    ("nodes", "n1", "facts", "gpus"),
    ("nodes", "n1", "facts", "gpus", 0),
    ("nodes", "n1", "facts", "gpus", 0, "remapped_rows"),
    ("nodes", "n1", "facts", "identity"),
    ("nodes", "n1", "facts", "identity", "dmi"),
    ("nodes", "n1", "facts", "identity", "nics"),
    ("nodes", "n1", "facts", "identity", "lsblk", "blockdevices"),
]
RECORD_KEYS = [("nodes", 0, "training"), ("nodes", 0, "training", "reads")]


def _dotted(key: tuple[str | int, ...]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in key).lstrip(".")


def _set(document: Any, key: tuple[str | int, ...], value: Any) -> Any:
    if not key:
        return value
    inner = document
    for part in key[:-1]:
        inner = inner[part]
    inner[key[-1]] = value
    return document


def _put(path: Path, key: tuple[str | int, ...], value: Any) -> None:
    path.write_text(json.dumps(_set(json.loads(path.read_text()), key, value)))


@pytest.mark.parametrize(
    ("file", "key"),
    [("result", k) for k in RESULT_KEYS]
    + [("check", k) for k in CHECK_KEYS]
    + [("record", k) for k in RECORD_KEYS],
    ids=lambda v: v if isinstance(v, str) else _dotted(v),
)
def test_a_string_where_an_object_belongs_is_a_named_problem(
    tmp_path: Path, file: str, key: tuple[str | int, ...]
) -> None:
    _inventory(tmp_path)
    accept, check = _history(tmp_path / "state")
    path = {
        "result": accept / "nodes" / "n1.result.json",
        "check": check / "check.json",
        "record": accept / "run.json",
    }[file]
    _put(path, key, "a string")
    history = _invoke(tmp_path / "state", "node", "history", "n1", "-i", str(tmp_path / "inv"))
    assert history.exit_code == 2 and "internal error" not in history.output, history.output
    assert f"{path}" in history.stderr and _dotted(key) in history.stderr, history.stderr
    history, report = _both(tmp_path)
    [problem] = _problems(history)
    assert problem["message"].startswith(f"{path}") and _dotted(key) in problem["message"]
    if file == "record":  # the report's own record: refused whole, as issue 27 has it
        assert report.exit_code == 2 and f"{path}" in report.stderr, report.output
        assert _dotted(key) in report.stderr and "internal error" not in report.output
        return
    [problem] = _problems(report)
    assert problem["message"].startswith(f"{path}") and _dotted(key) in problem["message"]
    page = (tmp_path / "state" / "runs" / "fleet-report.html").read_text()
    assert "Run files that could not be read" in page and _dotted(key) in page


def test_a_problem_is_kept_with_the_runs_observations(tmp_path: Path) -> None:
    accept, _check = _history(tmp_path)
    _put(accept / "nodes" / "n1.result.json", ("gpus",), [])
    first = passport.read_fleet(tmp_path / "runs", ["n1"])
    kept = json.loads((accept / OBSERVATIONS).read_text())
    assert [p["message"] for p in kept["problems"]] == [p.message for p in first.problems]
    assert passport.read_fleet(tmp_path / "runs", ["n1"]) == first  # read back from what was kept


@pytest.mark.parametrize(
    "kept",
    [
        '{"key": 1, "observations": {}, "problems": []}',
        '{"key": {}, "observations": {"n1": "x"}, "problems": []}',
        "[]",
        "\xff",
    ],
)
def test_an_observations_file_that_is_not_gpunodes_is_read_again(tmp_path: Path, kept: str) -> None:
    accept, _check = _history(tmp_path)
    before = passport.read_fleet(tmp_path / "runs", ["n1"])
    (accept / OBSERVATIONS).write_text(kept)
    assert passport.read_fleet(tmp_path / "runs", ["n1"]) == before


# --- gpunode schedule ---------------------------------------------------------------------------


@pytest.mark.parametrize("every", ["6h\n", "6h\r", "6h\nExecStartPre=/bin/evil", "\t6h", "6h\x00"])
def test_an_interval_with_a_control_character_exits_2_writing_nothing(
    tmp_path: Path, every: str
) -> None:
    dest = tmp_path / "units"
    dest.mkdir()
    result = CliRunner().invoke(
        cli, ["schedule", "-i", str(SAMPLE), "--every", every, "--dest", str(dest)]
    )
    assert isinstance(result.exception, ConfigError) and result.exception.exit_code == 2
    assert "--every" in result.exception.message and not list(dest.iterdir())


@pytest.mark.parametrize("dest", ["/proc", "/proc/self", "/sys", "/sys/kernel", "/dev", "/dev/shm"])
def test_a_pseudo_filesystem_is_no_unit_folder(dest: str) -> None:
    result = CliRunner().invoke(
        cli, ["schedule", "-i", str(SAMPLE), "--every", "1d", "--dest", dest]
    )
    assert isinstance(result.exception, ConfigError) and result.exception.exit_code == 2
    assert "pseudo filesystem" in result.exception.message


@pytest.mark.parametrize("where", ["missing", "a-file", "unit-is-a-folder"])
def test_a_dest_that_cannot_take_the_units_exits_2_writing_nothing(
    tmp_path: Path, where: str
) -> None:
    dest = tmp_path / "units"
    dest.mkdir()
    target = {"missing": dest / "nowhere", "a-file": dest / "file", "unit-is-a-folder": dest}
    if where == "a-file":
        target[where].write_text("")
    if where == "unit-is-a-folder":
        (dest / "gpunode-revalidate-sample.timer").mkdir()
    units = render(SAMPLE, "1d", gpunode=_gpunode(tmp_path), state_dir=tmp_path / "state")
    before = sorted(p.name for p in dest.iterdir())
    with pytest.raises(ConfigError, match=r"--dest|not a regular file") as err:
        write(units, target[where])
    assert err.value.exit_code == 2
    assert sorted(p.name for p in dest.iterdir()) == before


def test_an_oserror_while_writing_is_a_named_error_leaving_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dest = tmp_path / "units"
    dest.mkdir()
    units = render(SAMPLE, "1d", gpunode=_gpunode(tmp_path), state_dir=tmp_path / "state")
    real = os.replace
    calls = []

    def replace(source: Any, target: Any) -> None:
        calls.append(target)
        if len(calls) == 1:
            raise OSError(28, "No space left on device", str(target))
        real(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(ConfigError, match="No space left on device"):
        write(units, dest)
    assert list(dest.iterdir()) == []


@pytest.mark.parametrize("odd", ["a\tb", "a\x1bb", "a\u2028b", "a\u200bb"])
def test_a_path_with_a_control_character_never_reaches_a_unit(tmp_path: Path, odd: str) -> None:
    with pytest.raises(ConfigError, match="state dir path") as err:
        render(SAMPLE, "1d", gpunode=_gpunode(tmp_path), state_dir=tmp_path / odd)
    assert "systemd.syntax(7)" in err.value.message


# --- properties: run files of every shape -------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def _keys(document: Any, prefix: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    yield prefix
    if isinstance(document, dict):
        for name, value in document.items():
            yield from _keys(value, (*prefix, name))
    elif isinstance(document, list):
        for index, value in enumerate(document[:2]):
            yield from _keys(value, (*prefix, index))


@contextlib.contextmanager
def _fleet() -> Iterator[tuple[Path, dict[str, Path]]]:
    with tempfile.TemporaryDirectory() as tmp:
        accept, check = _history(Path(tmp))
        files = {
            "result": accept / "nodes" / "n1.result.json",
            "record": accept / "run.json",
            "check": check / "check.json",
            "observations": accept / OBSERVATIONS,
        }
        passport.read_fleet(Path(tmp) / "runs")  # writes the observations
        yield Path(tmp) / "runs", files


def _read_everything(runs_dir: Path) -> None:
    """What report and node history read: only gpunode's own errors may escape, and the
    passports are strict JSON."""
    cards = passports(["n1"], runs_dir)
    strict_json(cards["n1"].to_dict())
    with contextlib.suppress(ConfigError):  # run.json: the report refuses it whole (issue 27)
        fleet_history(runs_dir, ["n1"])


@configured
@given(data=st.data(), file=st.sampled_from(["result", "record", "check", "observations"]))
def test_a_random_json_value_at_any_key_of_a_run_file_is_read_or_named(
    data: st.DataObject, file: str
) -> None:
    with _fleet() as (runs_dir, files):
        path = files[file]
        document = json.loads(path.read_text())
        key = data.draw(st.sampled_from(list(_keys(document))), label="key")
        value = data.draw(json_values, label="value")
        path.write_text(json.dumps(_set(document, key, value)))
        with contextlib.suppress(ToolkitError):
            _within(10 * DEADLINE_S, lambda: _read_everything(runs_dir), [])


SHAPES = ["fifo", "link-to-dev-zero", "link-dangling", "link-to-file", "directory", "huge", "bytes"]


@configured
@given(
    file=st.sampled_from(["result", "record", "check", "observations"]),
    shape=st.sampled_from(SHAPES),
    raw=st.binary(max_size=64),
)
def test_a_run_file_of_any_shape_never_hangs_and_is_read_or_named(
    file: str, shape: str, raw: bytes
) -> None:
    small = dict.fromkeys(("run record", "result file", "check record", "observations"), 4096)
    with _fleet() as (runs_dir, files), mock.patch.dict(FILE_LIMITS, small):
        path = files[file]
        path.unlink()
        if shape == "fifo":
            os.mkfifo(path)
        elif shape == "link-to-dev-zero":
            path.symlink_to("/dev/zero")
        elif shape == "link-dangling":
            path.symlink_to(path.with_name("nowhere"))
        elif shape == "link-to-file":
            path.symlink_to(files["result" if file != "result" else "record"])
        elif shape == "directory":
            path.mkdir()
        elif shape == "huge":
            path.write_bytes(b"[" + b" " * 8192 + b"]")
        else:
            path.write_bytes(raw)
        with contextlib.suppress(ToolkitError):
            _within(10 * DEADLINE_S, lambda: _read_everything(runs_dir), [path])
        if file != "observations" and shape != "bytes":  # gpunode's own file is read again
            problems = passports(["n1"], runs_dir)["n1"].problems
            assert any(str(path) in p.message for p in problems), problems
