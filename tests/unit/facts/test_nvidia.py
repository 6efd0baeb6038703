"""The NVIDIA facts' parsers (``toolkit.facts.nvidia``): ``--query-gpu``'s CSV and ``nvidia-smi
-q``'s memory-error counters, read from real captures (tests/data/real/SOURCES.md)."""

from __future__ import annotations

from typing import Any

import pytest
from shared_fixtures import REPO

from toolkit.facts.nvidia import (
    SMI_COMPUTE_APPS,
    SMI_PERSISTENCE,
    memory_health,
    parse_smi_csv,
    parse_smi_q,
    smi_int,
    smi_value,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("0", "0"), (" [N/A]", None), ("[Not Supported]", None), ("N/A", None), ("Yes", "Yes")],
)
def test_smi_value(text: str, value: str | None) -> None:
    assert smi_value(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("0x0000000000000040", 0x40), ("16", 16), ("5.0", 5), (None, None), ("x", None)],
)
def test_smi_int(text: str | None, value: int | None) -> None:
    assert smi_int(text) == value


def test_parse_smi_csv_skips_malformed_lines() -> None:
    text = "0, NVIDIA H100 80GB HBM3, 5\n\n1, NVIDIA H100 80GB HBM3\n2, [N/A], 4\n"
    rows = parse_smi_csv(text, ("index", "name", "gen"))
    assert rows == [
        {"index": "0", "name": "NVIDIA H100 80GB HBM3", "gen": "5"},
        {"index": "2", "name": None, "gen": "4"},
    ]


REAL = REPO / "tests" / "data" / "real"


def _capture(name: str) -> dict[str, dict[str, Any]]:
    return parse_smi_q((REAL / name).read_text())


def test_smi_q_h100_565_reads_every_counter() -> None:
    """A real 8x H100 SXM `nvidia-smi -q` (driver 565.57.01, Hopper's SRAM parity and SEC-DED
    counters, the recovery action line): every counter read, all clean."""
    gpus = _capture("nvidia-smi-q.h100-sxm-8.565.57.01.txt")
    assert len(gpus) == 8 and "00000000:18:00.0" in gpus and "00000000:DB:00.0" in gpus
    for tree in gpus.values():
        assert tree["Product Name"] == "NVIDIA H100 80GB HBM3"
        assert memory_health(tree) == {
            "ecc_uncorrected_volatile": 0,
            "ecc_uncorrected_aggregate": 0,
            "retired_pages_pending": None,  # Hopper retires no pages: N/A
            "remapped_rows": {
                "correctable": 0,
                "uncorrectable": 0,
                "pending": False,
                "failure": False,
            },
            "recovery_action": "None",
        }


def test_smi_q_h100_535_has_no_recovery_action() -> None:
    """Driver 535.161.08 prints no "GPU Recovery Action" line: not reported, not a failure."""
    gpus = _capture("nvidia-smi-q.h100-sxm-8.535.161.08.txt")
    assert len(gpus) == 8
    health = [memory_health(tree) for tree in gpus.values()]
    assert all(h["recovery_action"] is None for h in health)
    assert all(h["ecc_uncorrected_volatile"] == 0 for h in health)
    assert all(h["remapped_rows"] and h["remapped_rows"]["pending"] is False for h in health)


def test_smi_q_a10_with_a_pending_remap() -> None:
    """A real A10 with 4 rows remapped for uncorrectable errors, pending a reset (leptonai/gpud
    test data): the volatile count is 0, the pending remap is what needs the reset."""
    (tree,) = _capture("nvidia-smi-q.a10.535.129.03.txt").values()
    health = memory_health(tree)
    assert health["ecc_uncorrected_volatile"] == 0
    assert health["remapped_rows"] == {
        "correctable": 0,
        "uncorrectable": 4,
        "pending": True,
        "failure": False,
    }


def test_smi_q_titan_v_old_layout_is_not_reported() -> None:
    """A real TITAN V (Volta: "Single Bit"/"Double Bit" counters, all N/A; "Remapped Rows :
    N/A"): nothing reported, nothing made up."""
    (tree,) = _capture("nvidia-smi-q.titan-v.560.35.03.txt").values()
    assert memory_health(tree) == {
        "ecc_uncorrected_volatile": None,
        "ecc_uncorrected_aggregate": None,
        "retired_pages_pending": None,
        "remapped_rows": None,
        "recovery_action": None,
    }


def test_smi_q_volta_double_bit_totals_are_read() -> None:
    """The Volta layout with numbers: the TITAN V capture's N/A edited to counts."""
    text = (REAL / "nvidia-smi-q.titan-v.560.35.03.txt").read_text()
    text = text.replace("Total                     : N/A", "Total                     : 3")
    text = text.replace(
        "Pending Page Blacklist            : N/A", "Pending Page Blacklist            : Yes"
    )
    (tree,) = parse_smi_q(text).values()
    health = memory_health(tree)
    assert (health["ecc_uncorrected_volatile"], health["ecc_uncorrected_aggregate"]) == (3, 3)
    assert health["retired_pages_pending"] is True


def test_the_persistence_words_are_the_real_reports() -> None:
    """The driver role asks every GPU for "Enabled": the word real reports print."""
    for name in ("nvidia-smi-q.h100-sxm-8.565.57.01.txt", "nvidia-smi-q.a10.535.129.03.txt"):
        modes = {tree["Persistence Mode"] for tree in _capture(name).values()}
        assert modes == {"Enabled"}, (name, modes)


def test_on_demand_queries_read_their_lines_or_nothing() -> None:
    """The roles' on-demand queries: one line per GPU (``persistence_mode``) or per process
    (``pid, process_name``, nvidia-smi's CSV without header); a query that could not run
    (nvidia-smi missing: no status; failed: its status) is None, never an empty answer."""
    assert SMI_PERSISTENCE.read({"smi_persistence": (0, "Enabled\nDisabled\n")}) == [
        "Enabled",
        "Disabled",
    ]
    work = "2417, /usr/bin/python3\n2418, /opt/app/train\n"
    assert SMI_COMPUTE_APPS.read({"smi_compute_apps": (0, work)}) == [
        "2417, /usr/bin/python3",
        "2418, /opt/app/train",
    ]
    assert SMI_COMPUTE_APPS.read({"smi_compute_apps": (0, "")}) == []
    assert SMI_COMPUTE_APPS.read({"smi_compute_apps": (None, "")}) is None
    assert SMI_PERSISTENCE.read({"smi_persistence": (9, "NVIDIA-SMI has failed")}) is None
    assert SMI_PERSISTENCE.read({}) is None
