"""Property-based tests (hypothesis) of what reads hostile input: the nccl-tests parser, the
stack loader, the YAML loader's limits, the inventory reader, the topology parser and the
layer store's tar-split records.

Properties: only gpunode's own errors escape (never a Python exception), ``--json`` output is
strict JSON (RFC 8259: no NaN or Infinity), and a capture containing a corrupt row is never ok.

Profiles (environment variable ``GPUNODE_HYPOTHESIS_PROFILE``):

- ``gpunode-ci`` (the default): a modest number of examples, so the unit tier stays fast;
- ``gpunode-5000``: 5,000 examples per test, the issue 15 bar; run it with
  ``GPUNODE_HYPOTHESIS_PROFILE=gpunode-5000 pytest tests/unit/core/test_properties.py``.

Neither profile keeps an example database: runs leave nothing behind in the checkout.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from toolkit import cli
from toolkit.acceptance.nccltests import NotNcclTestsOutput, parse
from toolkit.acceptance.topology import MAX_NUMA_NODES, TopologyUnreadable, parse_topo
from toolkit.acceptance.verdict import judge
from toolkit.config import MAX_YAML_INT_CHARS, MAX_YAML_NODES, load_yaml
from toolkit.errors import ImageError, ToolkitError
from toolkit.images.layerstore import LayerRecordError, StoredTar
from toolkit.inventory import MAX_INVENTORY_HOSTS, load_inventory
from toolkit.names import NAME_RE
from toolkit.profile.hardware import load_stack_file
from unit.acceptance.test_verdict import EXPECT, healthy
from unit.core.test_hostile_input import ROWS
from unit.core.test_limits import _gpu0, _topology_spec
from unit.stack.support import BASE

_COMMON = {"deadline": None, "database": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("gpunode-ci", max_examples=60, **_COMMON)
settings.register_profile("gpunode-5000", max_examples=5000, **_COMMON)
PROFILE = os.environ.get("GPUNODE_HYPOTHESIS_PROFILE", "gpunode-ci")
configured = settings(settings.get_profile(PROFILE))

HEADER = """\
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 16(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#  Rank  0 Group  0 Pid  10204 on     node-a device  0 [0000:1b:00] NVIDIA H200
#  Rank  1 Group  0 Pid  10205 on     node-a device  1 [0000:43:00] NVIDIA H200
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""  # noqa: E501
FOOTER = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 118.26\n"
# Columns after the fixed five: time algbw busbw #wrong, twice.
NUMERIC_COLUMNS = (0, 1, 5, 6, 7, 8, 9, 10, 11, 12)
PREFIXES = ("", "[1,0]<stdout>:", " 0: ", "12: ")
NOISE = st.sampled_from(
    [
        "node-a:10204:10204 [0] NCCL INFO Channel 00/32 : 0 1",
        "10-0-0-1:77:77 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",
        "Warning: Permanently added 'node-b' (ED25519) to the list of known hosts.",
        "...",
        "",
        "#",
        "# Using devices",
    ]
)


def capture(rows: list[str], prefix: str = "", footer: str = FOOTER) -> str:
    lines = [*HEADER.splitlines(), *rows, *footer.splitlines()]
    return "".join(f"{prefix}{line}\n" for line in lines)


def strict_json(document: Any) -> str:
    """The document as ``--json`` writes it; raises on NaN or Infinity."""
    return json.dumps(document, allow_nan=False, sort_keys=True)


def parse_or_refuse(text: str, **options: Any) -> Any:
    """Parse, allowing only gpunode's own error (and checking its exit code)."""
    try:
        result = parse(text, **options)
    except NotNcclTestsOutput as err:
        assert err.exit_code == 2
        return None
    strict_json(result.to_dict())
    return result


# Text that can never be a number of a row: it holds a character outside the number alphabet,
# or is one of the non-finite or signed spellings.
bad_number = st.one_of(
    st.sampled_from(["nan", "-nan", "inf", "-inf", "Infinity", "-1", "0x1", "1e999", "٣", "１"]),
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc")),
        min_size=1,
        max_size=12,
    ).filter(lambda t: re.search(r"[^0-9.eE+\-]", t) is not None and t.upper() != "N/A"),
)


@st.composite
def corrupt_capture(draw: st.DrawFn) -> str:
    """A healthy capture with exactly one row made corrupt."""
    rows = [*ROWS]
    index = draw(st.integers(0, len(rows) - 1))
    tokens = rows[index].split()
    how = draw(st.sampled_from(["token", "cut", "split"]))
    if how == "token":
        column = draw(st.sampled_from(NUMERIC_COLUMNS))
        tokens[column] = draw(bad_number)
        rows[index] = "  ".join(tokens)
    elif how == "cut":
        row = rows[index]
        start = len(row) - len(row.lstrip()) + 1
        end = row.rstrip().rfind(" ")  # keep the row short of its last column
        rows[index] = row[: draw(st.integers(start, end))]
    else:
        row = rows[index]
        start = len(row) - len(row.lstrip()) + 1
        at = draw(st.integers(start, len(row) - 2))
        rows[index : index + 1] = [row[:at], row[at:]]
    noisy = []
    for row in rows:
        noisy.extend(draw(st.lists(NOISE, max_size=2)))
        noisy.append(row)
    return capture(noisy, draw(st.sampled_from(PREFIXES)))


@configured
@given(corrupt_capture(), st.booleans())
def test_a_capture_with_a_corrupt_row_is_never_ok(text: str, allow_truncated: bool) -> None:
    result = parse_or_refuse(text, allow_truncated=allow_truncated)
    assert result is not None
    assert not result.ok
    assert any("unparsed row" in p for p in result.problems)


# Issue 41, class 6: lines that are no row but fit between the rows (NCCL's own log lines).
LOG_NOISE = st.sampled_from(
    [
        "node-a:10204:10204 [0] NCCL INFO Channel 00/32 : 0 1",
        "10-0-0-1:77:77 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB",
        "",
    ]
)
_FOOTER_LIKE = re.compile(r"#\s*(?:Out of bounds values|Avg bus bandwidth)\s*:", re.IGNORECASE)


@st.composite
def validated_capture_with_na(draw: st.DrawFn) -> str:
    """A healthy validated capture where some rows print N/A in `#wrong` (one placement or
    both), with NCCL log lines between the rows."""
    rows = []
    marked = draw(st.sets(st.integers(0, len(ROWS) - 1), min_size=1))
    for index, row in enumerate(ROWS):
        tokens = row.split()
        if index in marked:
            for column in draw(st.sampled_from([(8,), (12,), (8, 12)])):
                tokens[column] = "N/A"
        rows.extend(draw(st.lists(LOG_NOISE, max_size=2)))
        rows.append("  ".join(tokens))
    return capture(rows, draw(st.sampled_from(PREFIXES)))


@configured
@given(validated_capture_with_na(), st.booleans())
def test_a_validated_capture_with_an_na_wrong_is_never_ok(text: str, allow_truncated: bool) -> None:
    result = parse_or_refuse(text, allow_truncated=allow_truncated)
    assert result is not None and not result.ok
    assert any(p.startswith("unvalidated row at line ") for p in result.problems)


@st.composite
def capture_with_a_hash_line_in_its_table(draw: st.DrawFn) -> str:
    """A healthy capture with a `#`-led line put inside its table (after the units line,
    before the footer): a row whose size became `#` and anything, or any `#` line."""
    rows = [*ROWS]
    after = draw(st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=60))
    if draw(st.booleans()):
        index = draw(st.integers(0, len(rows) - 1))
        line = "#" + after + rows[index].lstrip().split(None, 1)[1]
        rows[index] = line
    else:
        line = "#" + after
        rows.insert(draw(st.integers(0, len(rows))), line)
    assume(not _FOOTER_LIKE.match(line.strip()))  # the footer itself ends the table
    noisy = []
    for row in rows:
        noisy.extend(draw(st.lists(LOG_NOISE, max_size=2)))
        noisy.append(row)
    return capture(noisy, draw(st.sampled_from(PREFIXES)))


@configured
@given(capture_with_a_hash_line_in_its_table(), st.booleans())
def test_a_hash_line_inside_the_table_is_never_ok(text: str, allow_truncated: bool) -> None:
    result = parse_or_refuse(text, allow_truncated=allow_truncated)
    assert result is not None and not result.ok


@configured
@given(st.integers(0, 10_000), st.sampled_from(PREFIXES))
def test_a_capture_cut_before_its_footer_is_never_ok(cut: int, prefix: str) -> None:
    text = capture(ROWS, prefix)
    end = text.index("Avg bus bandwidth")
    result = parse_or_refuse(text[: cut % end])
    assert result is None or not result.ok


@configured
@given(
    st.lists(
        st.one_of(
            NOISE,
            st.sampled_from(ROWS),
            st.text(max_size=200),
            st.sampled_from(FOOTER.splitlines() + HEADER.splitlines()),
        ),
        max_size=30,
    ),
    st.sampled_from(PREFIXES),
)
def test_any_mix_of_lines_gives_a_result_or_gpunodes_error(lines: list[str], prefix: str) -> None:
    text = "".join(f"{prefix}{line}\n" for line in lines)
    parse_or_refuse(text)
    parse_or_refuse(text, allow_truncated=True)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
placement = st.fixed_dictionaries(
    {},
    optional={
        "time": json_values,
        "alg_bw": json_values,
        "bus_bw": json_values,
        "nwrong": json_values,
    },
)
json_row = st.fixed_dictionaries(
    {},
    optional={
        "size": json_values | st.integers(0, 2**34),
        "count": json_values | st.integers(0, 2**32),
        "type": json_values | st.just("float"),
        "redop": json_values | st.just("sum"),
        "root": json_values | st.just("    -1"),
        "out_of_place": json_values | placement,
        "in_place": json_values | placement,
    },
)
json_document = st.fixed_dictionaries(
    {"results": st.lists(json_values | json_row, max_size=4)},
    optional={
        "config": json_values,
        "out_of_bounds": json_values,
        "average_bus_bandwidth": json_values,
        "errors": json_values,
        "nccl_version": json_values,
    },
)


@configured
@given(json_document)
def test_any_json_document_gives_a_result_or_gpunodes_error(document: dict[str, Any]) -> None:
    result = parse_or_refuse(json.dumps(document))
    if result is not None and result.ok:
        assert not result.problems and not result.errors


# --- the stack loader -------------------------------------------------------------------------

VALID_STACK: dict[str, Any] = BASE
STACK_FIELDS = [
    ("stack", "driver", "version"),
    ("stack", "driver", "flavour"),
    ("stack", "cuda"),
    ("stack", "nccl"),
    ("stack", "fabric_manager"),
    ("stack", "container_toolkit"),
    ("hardware", "gpu", "model"),
    ("hardware", "gpu", "count"),
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.text(alphabet="0123456789.٠١٢٣٤٥٦٧٨٩０１２\n-+cuda", max_size=24),
)


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(list(args))
        except SystemExit as exit_:
            code = exit_.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()


def check_cli(*args: str) -> int:
    """Run a command with --json: a documented exit code, one strict JSON document, no crash."""
    code, out, err = run_cli(*args, "--json")
    assert code in (0, 1, 2), err
    assert "internal error" not in err and "Traceback" not in err, err

    def refuse(constant: str) -> Any:
        raise AssertionError(f"not strict JSON: {constant}")

    json.loads(out, parse_constant=refuse)  # exactly one document
    return code


@configured
@given(st.lists(st.tuples(st.sampled_from(STACK_FIELDS), scalars), max_size=3))
def test_stack_files_with_any_values_exit_cleanly(
    tmp_path_factory: Any, changes: list[tuple[tuple[str, ...], Any]]
) -> None:
    data = json.loads(json.dumps(VALID_STACK))
    for path, value in changes:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    file = tmp_path_factory.mktemp("stack") / "stack.yml"
    file.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    try:
        loaded = load_stack_file(file)
    except ToolkitError as err:
        assert err.exit_code == 2 and str(file) in err.message
    else:
        versions = [loaded.stack.driver.version, loaded.stack.cuda, loaded.stack.nccl]
        assert all(re.fullmatch(r"[0-9][0-9.\-+a-z]*", v, re.ASCII) for v in versions)
    check_cli("stack", "check", str(file))


@configured
@given(st.text(max_size=400))
def test_any_text_as_a_stack_file_exits_cleanly(tmp_path_factory: Any, text: str) -> None:
    file = tmp_path_factory.mktemp("stack") / "stack.yml"
    file.write_text(text, encoding="utf-8")
    try:
        load_stack_file(file)
    except ToolkitError as err:
        assert err.exit_code == 2 and str(file) in err.message
    check_cli("stack", "show", str(file))


# --- the inventory reader ------------------------------------------------------------------------

names = st.one_of(
    st.sampled_from(["node01", "gpu-a", "h100_sxm", "../x", "a/b", ".hidden", "n[1:3]", "all"]),
    st.from_regex(r"[a-z]{1,5}\[[0-9]{1,3}:[0-9]{1,9}\]", fullmatch=True),
    st.text(max_size=20),
)
host_vars = st.one_of(
    st.none(),
    st.dictionaries(
        st.sampled_from(
            ["ansible_host", "ansible_port", "ansible_user", "ansible_ssh_common_args", "x"]
        ),
        scalars
        | st.sampled_from(
            ["-o StrictHostKeyChecking=accept-new", "-o StrictHostKeyChecking=yes", "'", "{{ x }}"]
        ),
        max_size=3,
    ),
)
groups = st.recursive(
    st.fixed_dictionaries({}, optional={"hosts": st.dictionaries(names, host_vars, max_size=3)}),
    lambda children: st.fixed_dictionaries(
        {}, optional={"children": st.dictionaries(names, children, max_size=3), "vars": host_vars}
    ),
    max_leaves=6,
)


@configured
@given(st.dictionaries(names, groups | scalars, min_size=1, max_size=3), names)
def test_any_inventory_reads_or_fails_cleanly(
    tmp_path_factory: Any, hosts: dict[str, Any], limit: str
) -> None:
    root = tmp_path_factory.mktemp("inv")
    (root / "hosts.yml").write_text(yaml.safe_dump(hosts, allow_unicode=True), encoding="utf-8")
    try:
        inventory = load_inventory(root)
    except ToolkitError as err:
        assert err.exit_code == 2
        return
    for host in inventory.hosts:
        assert NAME_RE.match(host), host
    for files in inventory._host_vars_files.values():
        assert all(Path(f).resolve().is_relative_to(root.resolve()) for f in files)
    try:
        inventory.hosts_for(limit)
    except ToolkitError as err:
        assert err.exit_code == 2
    assume(len(inventory.hosts) < 50)
    check_cli("stack", "check", str(root))


# --- limits (issue 27): numbers, sizes and ranges past what the readers allow ---------------------

# Integer-looking scalars of YAML 1.1 (decimal, signed, `_`-grouped, octal, hex, base 60) of any
# length up to past Python's 4,300-digit int() limit, and digits that are not ASCII.
int_like = st.builds(
    lambda prefix, digits: prefix + digits,
    st.sampled_from(["", "-", "+", "0", "0x", "0b"]),
    st.text(alphabet="0123456789_:", min_size=1, max_size=3)
    | st.integers(1, 6000).map(lambda n: "9" * n)
    | st.integers(1, 3000).map(lambda n: "1:" * n + "1"),
) | st.sampled_from(["²", "١٢", "２２", "0-1-2"])


def values_in(node: Any) -> int:
    """The values of a loaded document, aliases expanded (as the loader counts them)."""
    if isinstance(node, dict):
        return 1 + sum(values_in(k) + values_in(v) for k, v in node.items())
    if isinstance(node, list):
        return 1 + sum(values_in(item) for item in node)
    return 1


@configured
@given(
    st.integers(1, 3000),
    st.integers(0, 120),
    st.lists(int_like, max_size=4),
)
def test_yaml_past_the_limits_reads_or_fails_cleanly(
    tmp_path_factory: Any, items: int, uses: int, numbers: list[str]
) -> None:
    # `items` values named `uses` times through aliases, and numbers of any length.
    text = "a: &a [" + ", ".join(["1"] * items) + "]\n"
    text += "b: [" + ", ".join(["*a"] * uses) + "]\n"
    text += "".join(f"n{i}: {number}\n" for i, number in enumerate(numbers))
    file = tmp_path_factory.mktemp("yaml") / "values.yml"
    file.write_text(text, encoding="utf-8")
    try:
        loaded = load_yaml(file)
    except ToolkitError as err:
        assert err.exit_code == 2 and str(file) in err.message
    else:
        assert values_in(loaded) <= MAX_YAML_NODES
        ints = [v for v in loaded.values() if isinstance(v, int) and not isinstance(v, bool)]
        assert all(v.bit_length() <= 4 * MAX_YAML_INT_CHARS for v in ints)


range_end = st.sampled_from([0, 3, 99, 5000, 9999, 10**8])


@configured
@given(
    st.lists(st.tuples(range_end, range_end), min_size=1, max_size=3),
    int_like | st.sampled_from(["10", "1"]),
    int_like | st.sampled_from(["22", "2222"]),
)
def test_inventories_past_the_limits_read_or_fail_cleanly(
    tmp_path_factory: Any, ranges: list[tuple[int, int]], priority: str, port: str
) -> None:
    root = tmp_path_factory.mktemp("inv")
    lines = "".join(f'        "p{i}-[{a}:{b}]": {{}}\n' for i, (a, b) in enumerate(ranges))
    (root / "hosts.yml").write_text(
        "all:\n  children:\n    gpus:\n"
        f"      vars: {{ansible_group_priority: {priority}}}\n"
        f"      hosts:\n        n-port: {{ansible_port: {port}}}\n{lines}",
        encoding="utf-8",
    )
    try:
        inventory = load_inventory(root)
    except ToolkitError as err:
        assert err.exit_code == 2 and str(root / "hosts.yml") in err.message
    else:
        assert len(inventory.hosts) <= MAX_INVENTORY_HOSTS
        assert 0 < inventory.hosts["n-port"].port < 65536


affinity = st.text(alphabet="0123456789-,²١", max_size=24) | st.builds(
    "{}-{}".format, st.integers(0, 10**9), st.integers(0, 10**9)
)


@configured
@given(affinity, affinity, st.sampled_from(["N/A", "0", "²", "99999", "7"]))
def test_any_affinity_parses_bounded_or_fails_its_node(cpus: str, numa: str, numa_id: str) -> None:
    text = _gpu0(f"{cpus or 'N/A'}  {numa or 'N/A'}  {numa_id}")
    try:
        topo = parse_topo(text)
    except TopologyUnreadable as err:
        assert err.message.startswith("line 2: ")
        result = {**healthy(), "topology": {"raw_output": text, "error": None}}
        verdict = judge(result, EXPECT, _topology_spec())
        assert not verdict.ready
        assert any(c.name == "topology.read" for c in verdict.failed)
    else:
        nodes = topo.gpus[0].numa_nodes
        assert len(nodes) <= MAX_NUMA_NODES and all(0 <= n < MAX_NUMA_NODES for n in nodes)


# --- issue 41, class 8: the layer store's tar-split records ---------------------------------------

_RECORD_ENTRIES: list[dict[str, Any]] = [
    {"type": 2, "payload": base64.b64encode(b"h" * 512).decode()},
    {"type": 1, "name": "usr/bin/x", "size": 5, "payload": "AAAAAAAAAAA="},
    {"type": 1, "name_raw": base64.b64encode(b"caf\xe9").decode(), "size": 0},
    {"type": 2, "payload": base64.b64encode(bytes(1024)).decode()},
]
# Caps small enough that a hostile record reaches them in a few lines.
RECORD_CAPS = {"max_bytes": 8192, "max_entry": 2048, "max_entries": 32}
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**64), 2**64),
        st.floats(),
        st.text(max_size=12),
        st.sampled_from(["QUJD", "QUJD RA==", "!!!!", "usr/../../etc", "\ud800"]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@st.composite
def tar_split_record(draw: st.DrawFn) -> bytes:
    """A gzip tar-split record: valid entries with fields set to any JSON, their lines cut,
    spliced, repeated or nested deep, and perhaps the gzip stream itself mutated."""
    entries = [dict(e) for e in _RECORD_ENTRIES]
    for _ in range(draw(st.integers(0, 3))):
        entry = draw(st.sampled_from(entries))
        key = draw(st.sampled_from(["type", "payload", "size", "name", "name_raw", "x"]))
        entry[key] = draw(json_values)
    lines = [json.dumps(e).encode() + b"\n" for e in entries]
    for _ in range(draw(st.integers(0, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        line = lines[index]
        how = draw(st.sampled_from(["splice", "repeat", "deep", "drop"]))
        if how == "splice":
            at = draw(st.integers(0, len(line)))
            end = draw(st.integers(at, len(line)))
            lines[index] = line[:at] + draw(st.binary(max_size=8)) + line[end:]
        elif how == "repeat":
            lines[index] = line * draw(st.integers(2, 300))
        elif how == "deep":
            depth = draw(st.integers(1, 100_000))
            lines[index] = line[:-2] + b', "n": ' + b"[" * depth + b"]" * depth + b"}\n"
        else:
            del lines[index]
            if not lines:
                break
    compressed = gzip.compress(b"".join(lines))
    if draw(st.booleans()):
        at = draw(st.integers(0, len(compressed) - 1))
        compressed = compressed[:at] + draw(st.binary(max_size=4)) + compressed[at + 1 :]
    return compressed


@configured
@given(tar_split_record())
def test_any_tar_split_record_reads_bounded_or_fails_with_the_named_error(
    tmp_path_factory: Any, compressed: bytes
) -> None:
    folder = tmp_path_factory.mktemp("layer")
    record = folder / "tar-split.json.gz"
    record.write_bytes(compressed)
    try:
        stored = StoredTar(record, folder / "diff", layer="sha256:ab", **RECORD_CAPS)
    except LayerRecordError as err:
        assert err.message.startswith(f"layer sha256:ab: the layer store's record {record}")
        return
    raw = [p for p in stored.pieces if isinstance(p, bytes)]
    assert sum(map(len, raw)) <= RECORD_CAPS["max_bytes"]
    assert all(size >= 0 for _name, size in (p for p in stored.pieces if isinstance(p, tuple)))
    with stored:
        try:
            stored.read(RECORD_CAPS["max_bytes"])
        except ImageError as err:  # the files are not there: named, never followed out
            assert "cannot read" in err.message or "outside its layer" in err.message
