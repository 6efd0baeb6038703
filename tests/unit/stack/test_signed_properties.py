"""Property-based tests (hypothesis) of the signed index reader (issue 41, class 2): Debian
versions against the real ``dpkg``, and clearsigned files with data outside the armor against
the real ``gpgv``.

The profiles are core/test_properties.py's (``gpunode-ci`` by default, ``gpunode-5000`` through
``GPUNODE_HYPOTHESIS_PROFILE``). Each dpkg example runs ``dpkg --compare-versions`` (a few
milliseconds); each accepted clearsigned example runs gpgv once, each refused one none.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from toolkit.errors import StackError
from toolkit.stack import aptindex
from toolkit.stack.debversion import (
    DEB_VERSION_RE,
    compare_versions,
    split_version,
    version_problem,
)
from unit.core.test_properties import configured
from unit.stack.test_lock import Key, _gpg, _make_key

pytestmark = pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")


def _dpkg(a: str, relation: str, b: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["dpkg", "--compare-versions", "--", a, relation, b],
        capture_output=True, text=True, check=False,
    )  # fmt: skip


def _dpkg_order(a: str, b: str) -> int:
    if _dpkg(a, "eq", b).returncode == 0:
        return 0
    return -1 if _dpkg(a, "lt", b).returncode == 0 else 1


# --- Debian versions (Debian Policy 5.6.12, deb-version(7)) -----------------------------------

# Pieces that make versions collide and differ where dpkg's order is subtle: tildes (before
# everything, even the end), letters (before other symbols), digit runs with leading zeros.
_PIECES = ("0", "00", "1", "9", "10", "a", "Z", "z", "~", "~~", "+", ".")


@st.composite
def legal_versions(draw: st.DrawFn) -> str:
    epoch = draw(st.sampled_from(("", "", "0:", "1:", "01:", "2:")))
    revision = draw(st.sampled_from(("", "-")))
    inner = _PIECES + (":",) * bool(epoch) + ("-",) * bool(revision)
    upstream = draw(st.sampled_from("0159")) + "".join(
        draw(st.lists(st.sampled_from(inner), max_size=5))
    )
    if revision:
        revision += "".join(draw(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4)))
    return epoch + upstream + revision


@configured
@given(legal_versions(), legal_versions())
def test_legal_versions_parse_and_order_as_dpkg_orders_them(a: str, b: str) -> None:
    assert version_problem(a) is None and DEB_VERSION_RE.match(a)
    epoch, upstream, revision = split_version(a)
    head, colon, _rest = a.partition(":")  # dpkg: the epoch ends at the first colon
    assert epoch == (int(head) if colon else 0)
    assert a == (f"{head}:" if colon else "") + upstream + (f"-{revision}" if revision else "")
    assert compare_versions(a, b) == _dpkg_order(a, b) == -compare_versions(b, a)


@configured
@given(st.one_of(legal_versions(), st.from_regex(DEB_VERSION_RE, fullmatch=True)))
def test_every_version_the_schema_pattern_allows_is_one_dpkg_reads_silently(v: str) -> None:
    assume(len(v) <= 60)
    done = _dpkg(v, "eq", v)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


@configured
@given(st.text(alphabet="019aZ.+~-:_ /\té", min_size=1, max_size=10))
def test_a_version_is_refused_by_name_exactly_when_dpkg_finds_bad_syntax(text: str) -> None:
    # dpkg trims whitespace around a version silently (a Packages field never has any), and
    # reads the epoch with strtol, so it takes ``+1:0`` and ``-0:0`` silently: Policy's epoch
    # is an unsigned integer, digits only, and gpunode holds to that.
    assume(text == text.strip())
    assume(not (":" in text and text[0] in "+-"))
    done = _dpkg(text, "eq", text)
    dpkg_accepts = done.returncode == 0 and not done.stderr
    problem = version_problem(text)
    assert (problem is None) == dpkg_accepts, (problem, done.stderr)
    if problem is not None:
        with pytest.raises(ValueError, match=r"^not a Debian version \("):
            split_version(text)


# --- clearsigned files: nothing outside the armor is read -------------------------------------


@pytest.fixture(scope="module")
def signed() -> Iterator[tuple[Key, bytes, bytes]]:
    """(key, a clearsigned Release, the text gpgv says it covers)."""
    key: Key
    for key in _make_key("armor"):
        release = b"Origin: test\nSHA256:\n " + b"ab" * 32 + b" 10 Packages\n"
        data = _gpg(key.home, "--clearsign", data=release)
        yield key, data, aptindex.gpgv(key.armored, data)


_WHITESPACE_LINES = st.lists(st.sampled_from(("", " ", "\t", " \t ", "\r")), max_size=3).map(
    lambda lines: "".join(line + "\n" for line in lines).encode()
)
_JUNK = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=40).map(str.encode),
    st.sampled_from(
        (
            b"Origin: attacker\n",
            b"SHA256:\n " + b"ee" * 32 + b" 10 Packages\n\n",
            b"-----BEGIN PGP SIGNED MESSAGE-----\n",
            b"-----END PGP SIGNATURE-----\n",
            b"- escaped\n",
        )
    ),
)


@configured
@given(before=_JUNK, after=_JUNK, twice=st.booleans(), pad=_WHITESPACE_LINES)
def test_data_outside_the_armor_is_always_refused(
    signed: tuple[Key, bytes, bytes], before: bytes, after: bytes, twice: bool, pad: bytes
) -> None:
    key, data, _covered = signed
    outside = before + (data if twice else b"") + after
    assume(outside.strip(b" \t\r\n"))
    with pytest.raises(StackError) as err:
        aptindex.gpgv(key.armored, pad + before + data + pad + (data if twice else b"") + after)
    assert err.value.message.startswith("refused: the clearsigned file: ")
    assert err.value.exit_code == 2


@configured
@given(before=_WHITESPACE_LINES, after=_WHITESPACE_LINES, crlf=st.booleans())
def test_whitespace_around_the_armor_and_crlf_read_the_same_signed_text(
    signed: tuple[Key, bytes, bytes], before: bytes, after: bytes, crlf: bool
) -> None:
    key, data, covered = signed
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    got = aptindex.gpgv(key.armored, before + data + after)
    assert aptindex.signed_text(got, "x") == aptindex.signed_text(covered, "x")
