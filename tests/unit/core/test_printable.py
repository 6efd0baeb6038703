"""One way to print untrusted text (issue 27): what came from a node, a file or a certificate
reaches the terminal with its control characters escaped and is never read as Rich markup.

The property: random Unicode (control characters, C1, bidi overrides and markup included) fed
to every printing command of ``cert``, ``runs``, ``stack show`` and ``accept parse`` leaves no
byte below 0x20 but newline and tab, no ESC, no DEL, no C1 control and no bidi override in
stdout or stderr. Commands run in-process through the CLI's one error boundary, with Click's
CliRunner isolating the byte streams.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from toolkit import cert, cli
from toolkit.cli.output import shown
from toolkit.printable import printable
from toolkit.profile.floors import AcceptanceSpec
from toolkit.records import passport, runs
from unit.core.test_hostile_input import FOOTER, HEADER, ROWS
from unit.core.test_properties import configured
from unit.stack.support import BASE

# The characters that must never reach a terminal raw (besides C0: checked byte-wise).
FORBIDDEN = {0x7F, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
HOSTILE = [
    "\x1b]0;owned\x07",  # retitles the terminal
    "\x1b[2J",  # clears it
    "\x00",
    "\u202e",  # right-to-left override
    "\x9b31m",  # C1 CSI
    "[/]",  # closes a Rich markup tag that was never opened
    "[link=https://example.com]x[/link]",
    "[bold]",
    "\r",
    "\x7f",
]
# Random Unicode, control characters included, with the known hostile strings mixed in.
untrusted = st.one_of(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=30),
    st.lists(st.sampled_from(HOSTILE), min_size=1, max_size=3).map("".join),
)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    """Run gpunode in-process through its error boundary: (exit code, stdout, stderr)."""
    with CliRunner().isolation(env=env) as (out, err, _mixed):
        try:
            cli.main(list(args))
        except SystemExit as exit_:
            code = exit_.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


def assert_clean(code: int, out: bytes, err: bytes) -> None:
    """Nothing that acts on a terminal, and never an internal error."""
    assert code in (0, 1, 2), err
    for name, data in (("stdout", out), ("stderr", err)):
        bad = sorted({b for b in data if b < 0x20 and b not in (0x09, 0x0A)})
        assert not bad, f"{name} holds control bytes {bad}: {data!r}"
        text = data.decode("utf-8")
        assert not [c for c in text if ord(c) in FORBIDDEN], f"{name}: {text!r}"
    assert b"internal error" not in err, err


# --- the one function --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "printed"),
    [
        ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),
        ("\x1b[2J", "\\x1b[2J"),
        ("a\x00b", "a\\x00b"),
        ("abc\u202edef", "abc\\u202edef"),
        ("\u2066x\u2069", "\\u2066x\\u2069"),
        ("\x85\x9b\x7f", "\\x85\\x9b\\x7f"),
        ("line\nnext\tcol\r", "line\\nnext\\tcol\\r"),
        ("caf\udcc3", "caf\\udcc3"),  # a file name that is not UTF-8 (surrogateescape)
        ("H100 80GB HBM3 — ü 日本 [bold]", "H100 80GB HBM3 — ü 日本 [bold]"),
    ],
)
def test_printable_escapes_exactly_the_controls(raw: str, printed: str) -> None:
    assert printable(raw) == printed


def test_messages_keep_their_lines() -> None:
    assert printable("a\nb\tc\x1b", lines=True) == "a\nb\tc\\x1b"


def test_shown_is_never_markup() -> None:
    text = shown("[/] [link=https://example.com]x[/link] [bold]y", "bold")
    assert text.plain == "[/] [link=https://example.com]x[/link] [bold]y"
    assert not text.spans and text.style == "bold"


# --- cert ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sign_key(tmp_path_factory: pytest.TempPathFactory) -> cert.SignKey:
    folder = tmp_path_factory.mktemp("untrusted-keys")
    path = folder / "provider"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "t", "-f", str(path)], check=True
    )
    key = cert.sign_key_from(path, {}, folder)
    assert key is not None
    return key


def hostile_document(hostname: str, serial: str, product: str, bus: str) -> dict[str, Any]:
    """A certificate document whose signed fields hold the given text."""
    result = {
        "host": "node-1",
        "gpus": {
            "list": [
                {
                    "index": 0,
                    "name": product,
                    "serial": serial,
                    "uuid": "GPU-1",
                    "bus_id": bus,
                    "vbios_version": "96.00",
                }
            ]
        },
        "versions": {"driver_loaded": "550.127.05", "packages": {"libnccl2": serial}},
        "identity": {
            "hostname": hostname,
            "dmi": {"product_name": product, "product_serial": serial},
            "lsblk": {"blockdevices": [{"maj:min": "259:0", "type": "disk", "serial": serial}]},
            "by_id": [{"name": "nvme-x", "maj_min": "259:0", "target": "nvme0n1"}],
            "nics": [{"name": hostname, "mac": serial, "physical": True}],
        },
    }
    spec = AcceptanceSpec.model_validate({"allreduce": []})
    check = {"name": "gpu.count", "ok": True, "message": product, "measured": 1, "floor": None}
    run_id = "20260101T120000Z-accept-abc123"
    # The passport holds the same text: the board's serial and UUID among the boards seen.
    seen = passport.with_run({}, run_id, None, [({"host": "node-1", "verdict": "ready"}, result)])
    return cert.build(
        host="node-1",
        group="gpu",
        result=result,
        checks=[check],
        spec=spec,
        data_serials=[serial],
        stack_id="0123456789ab",
        lock_digest=None,
        image_id=None,
        run_id=run_id,
        started="2026-01-01T12:00:00+00:00",
        finished="2026-01-01T12:05:00+00:00",
        valid_until=None,
        result_file="nodes/node-1.result.json",
        result_sha256="sha256:" + "ab" * 32,
        passport=passport.summary(passport.passport("node-1", seen)),
    )


@configured
@given(untrusted, untrusted, untrusted, untrusted, untrusted)
def test_cert_commands_print_no_control_characters(
    tmp_path_factory: pytest.TempPathFactory,
    sign_key: cert.SignKey,
    hostname: str,
    serial: str,
    product: str,
    other: str,
    junk: str,
) -> None:
    folder = tmp_path_factory.mktemp("cert")
    (folder / "a").mkdir()
    (folder / "b").mkdir()
    document = hostile_document(hostname, serial, product, junk)
    a = cert.write(folder / "a", "node-1", document, sign_key)
    b = cert.write(folder / "b", "node-1", hostile_document(other, junk, serial, other), sign_key)
    broken = folder / "broken.cert"
    broken.write_text(junk + "\n-----BEGIN SSH SIGNATURE-----\n" + product, encoding="utf-8")
    pub = f"{sign_key.path}.pub"
    for args in (
        ("show", str(a)),
        ("verify", str(a), "--key", pub),
        ("compare", str(a), str(b)),
        ("show", str(broken)),
        ("verify", str(broken), "--key", pub),
        ("compare", str(a), str(broken)),
    ):
        assert_clean(*run("cert", *args))


# --- runs --------------------------------------------------------------------------------------


def file_name(text: str) -> str:
    """``text`` made a valid file name (no ``/`` or NUL, not ``.`` or ``..``, 255 bytes)."""
    name = text.replace("/", "_").replace("\x00", "\\0")
    name = name.encode("utf-8")[:200].decode("utf-8", errors="ignore")
    return name if name.strip(".") else f"x{name}"


@configured
@given(st.lists(untrusted, min_size=1, max_size=3), untrusted)
def test_runs_commands_print_no_control_characters(
    tmp_path_factory: pytest.TempPathFactory, names: list[str], kind: str
) -> None:
    state = tmp_path_factory.mktemp("state") / file_name(kind)
    (state / "runs").mkdir(parents=True)
    runs.start_run("accept", state / "runs")
    for name in names:
        (state / "runs" / file_name(name)).mkdir(exist_ok=True)
    env = {"GPUNODE_STATE_DIR": str(state)}
    assert_clean(*run("runs", "list", env=env))
    assert_clean(*run("runs", "list", "--kind", kind, env=env))
    assert_clean(*run("runs", "prune", "--kind", kind, "--yes", env=env))


# --- stack show --------------------------------------------------------------------------------


@configured
@given(untrusted, untrusted, st.sampled_from(["name", "driver", "model", "file"]))
def test_stack_show_prints_no_control_characters(
    tmp_path_factory: pytest.TempPathFactory, name: str, value: str, where: str
) -> None:
    data = json.loads(json.dumps(BASE))
    if where == "driver":
        data["stack"]["driver"]["version"] = value
    elif where == "model":
        data["hardware"]["gpu"]["model"] = value
    path = tmp_path_factory.mktemp("stack") / f"{file_name(name)}.yml"
    if where == "file":
        path.write_text(value, encoding="utf-8")
    else:
        path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    assert_clean(*run("stack", "show", str(path), "--os", "debian12"))


# --- accept parse ------------------------------------------------------------------------------


@configured
@given(untrusted, untrusted, st.integers(0, len(HEADER.splitlines()) + len(ROWS)))
def test_accept_parse_prints_no_control_characters(
    tmp_path_factory: pytest.TempPathFactory, name: str, text: str, at: int
) -> None:
    lines = [*HEADER.splitlines(), *ROWS]
    lines.insert(at, text)
    lines[1] = lines[1].replace("node-a", text.replace("\n", " ") or "x")
    path = tmp_path_factory.mktemp("capture") / file_name(name)
    path.write_text("\n".join(lines) + "\n" + FOOTER.replace("118.26", text), encoding="utf-8")
    assert_clean(*run("accept", "parse", str(path)))


# --- each example of the issue, on its own -----------------------------------------------------


@pytest.mark.parametrize("name", ["\x1b]0;owned\x07", "\x1b[2J", "[bold]x", "[red]", "a\u202eb"])
def test_runs_list_shows_a_hostile_folder_name_escaped(tmp_path: Path, name: str) -> None:
    (tmp_path / "runs" / name).mkdir(parents=True)
    code, out, err = run("runs", "list", env={"GPUNODE_STATE_DIR": str(tmp_path), "COLUMNS": "200"})
    assert_clean(code, out, err)
    assert code == 0 and printable(name).encode() in out


@pytest.mark.parametrize("hostname", ["\x1b]0;owned\x07", "\x1b[2J", "[/]", "[link=x]y[/link]"])
def test_cert_show_escapes_signed_fields(
    tmp_path: Path, sign_key: cert.SignKey, hostname: str
) -> None:
    path = cert.write(
        tmp_path, "node-1", hostile_document(hostname, "S\x00N", "H100\u202e", "0:1"), sign_key
    )
    code, out, err = run("cert", "show", str(path), env={"COLUMNS": "200"})
    assert_clean(code, out, err)
    assert code == 0, err
    assert printable(hostname).encode() in out and b"S\\x00N" in out and b"H100\\u202e" in out


def test_error_messages_are_escaped_too(tmp_path: Path) -> None:
    missing = tmp_path / "no\x1b[2Jsuch.cert"
    code, out, err = run("cert", "show", str(missing))
    assert_clean(code, out, err)
    assert code == 2 and b"no\\x1b[2Jsuch.cert" in err
    assert os.path.lexists(missing) is False


def test_runs_list_shows_a_folder_name_that_is_not_utf8(tmp_path: Path) -> None:
    os.makedirs(os.fsencode(tmp_path / "runs") + b"/caf\xc3x\xff")
    code, out, err = run("runs", "list", env={"GPUNODE_STATE_DIR": str(tmp_path), "COLUMNS": "200"})
    assert_clean(code, out, err)
    assert code == 0 and b"caf\\udcc3x\\udcff" in out
