"""``gpunode status``: component versions, mounts, and the fleet table within 80 columns."""

from __future__ import annotations

from io import StringIO

import pytest
from rich.console import Console

from toolkit.cli.status import fleet_table
from toolkit.facts.mounts import parse_findmnt
from toolkit.steps.status import NodeStatus, component_versions

VERSIONS = {
    "driver": {
        "nvidia-driver-550-open": {"pinned": "550.127.05-1", "installed": "550.127.05-1"},
        "libnvidia-compute-550": {"pinned": "550.127.05-1", "installed": "550.127.05-1"},
    },
    "cuda": {"cuda-toolkit-12-4": {"pinned": "12.4.1-1", "installed": "12.4.1-1"}},
    "nccl": {
        "libnccl2": {"pinned": "2.21.5-1+cuda12.4", "installed": "2.26.2-1+cuda12.8"},
        "libnccl-dev": {"pinned": "2.21.5-1+cuda12.4", "installed": "2.21.5-1+cuda12.4"},
    },
    "loaded_driver": {"pinned": "550.127.05", "loaded": "550.127.05"},
}


def test_component_versions() -> None:
    found = component_versions(VERSIONS)
    assert found["driver"] == {
        "pinned": "550.127.05-1",
        "installed": "550.127.05-1",
        "ok": True,
        "loaded": "550.127.05",
    }
    assert found["cuda"]["ok"] is True
    assert found["nccl"]["ok"] is False  # one of its packages moved
    stale = component_versions(
        {**VERSIONS, "loaded_driver": {"pinned": "550.127.05", "loaded": "550.90.07"}}
    )
    assert stale["driver"]["ok"] is False


@pytest.mark.parametrize(
    ("text", "mounts"),
    [
        ("/ overlay overlay\n/data /dev/nvme0n1 xfs\n", {"/data": ("/dev/nvme0n1", "xfs")}),
        ("/mnt/a\\x20b /dev/sdb ext4\n", {"/mnt/a b": ("/dev/sdb", "ext4")}),
        ("not a mount line\n\n/x only-two\n", {}),
    ],
)
def test_parse_findmnt(text: str, mounts: dict[str, tuple[str, str]]) -> None:
    parsed = parse_findmnt(text)
    for target, (source, fstype) in mounts.items():
        assert parsed[target] == {"source": source, "fstype": fstype}
    assert "/x" not in parsed


def _node(host: str, state: str, **extra: object) -> dict[str, object]:
    node = NodeStatus(
        host=host,
        state={
            "state": state,
            "reason": [] if state == "ready" else ["health.ecc: 3 errors"],
            "busbw_at_largest_gbps": 0.9213,
            "valid_until": "2099-01-01T00:00:00+00:00",
        },
        gpus_seen=8,
        gpus_expected=8,
        gpu_model="H100",
        versions=component_versions(VERSIONS),
        data_mount="/data",
        data_fstype="btrfs",
    )
    for key, value in extra.items():
        setattr(node, key, value)
    return node.to_dict()


def test_fleet_table_fits_80_columns_and_marks_what_is_wrong() -> None:
    nodes = [
        _node("gpunode-node-1", "ready"),
        _node("gpunode-node-2", "not-ready", gpus_seen=7, data_fstype=None),
    ]
    buffer = StringIO()
    Console(file=buffer, width=80).print(fleet_table(nodes))
    text = buffer.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines())
    row = next(line for line in text.splitlines() if "gpunode-node-2" in line)
    assert "7/8" in row and "NONE" in row and "2.26.2" in row and "550.127.05" in row
    assert "0.921" in row
    assert nodes[1]["ready"] is False and nodes[0]["ready"] is True


def test_status_and_up_share_the_readiness_rule() -> None:
    """A state file that says ready shows not-ready, with why, once its verdict expired or
    another stack is pinned: the rule `gpunode up` uses to skip a node (toolkit.node.nodestate)."""
    from datetime import datetime, timezone

    from toolkit.steps.status import NodeStatus

    now = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
    state = {"state": "ready", "reason": [], "stack_id": "s1"}
    fresh = NodeStatus("n1", {**state, "valid_until": "2026-12-03T00:00:00+00:00"}, stack_id="s1")
    fresh.now = now
    assert fresh.ready and fresh.to_dict()["state"] == "ready"
    expired = NodeStatus("n1", {**state, "valid_until": "2026-12-02T11:00:00+00:00"}, now=now)
    expired.stack_id = "s1"
    assert not expired.ready
    shown = expired.to_dict()
    assert shown["state"] == "not-ready"
    assert shown["reason"] == ["the verdict expired at 2026-12-02T11:00:00+00:00"]
    moved = NodeStatus("n1", {**state, "valid_until": "2026-12-03T00:00:00+00:00"}, stack_id="s2")
    moved.now = now
    assert moved.to_dict()["reason"] == ["accepted for stack s1, pinned now s2"]
