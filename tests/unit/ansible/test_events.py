"""The runner's event handling, fed with event dicts shaped like ansible-runner's."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from toolkit.ansible.events import EventCollector, RunResult, failure_message, summaries_from_stats
from toolkit.cli.display import LiveProgress, summary_table


def ev(kind: str, **data: Any) -> dict[str, Any]:
    return {"event": kind, "uuid": "u", "counter": 1, "stdout": "", "event_data": data}


# A recorded run in miniature: two plays, a changed task, a skipped one, a failed one with
# ignore_errors, a real failure, an unreachable host, facts set by a task, and the stats.
EVENTS = [
    ev("playbook_on_start", playbook="provision.yml"),
    ev("playbook_on_play_start", play="Check the stack and the nodes", name="Check the stack"),
    ev("playbook_on_task_start", task="Gather GPUs", role="preflight", name="Gather GPUs"),
    ev(
        "runner_on_ok",
        host="n1",
        task="Gather GPUs",
        role="preflight",
        res={"changed": False, "ansible_facts": {"gpunode_node": {"gpu_count": 8}}},
    ),
    ev("runner_on_ok", host="n2", task="Gather GPUs", res={"changed": False}),
    ev("playbook_on_play_start", play="Install the pinned NVIDIA stack"),
    ev("playbook_on_task_start", task="Install the exact packages: driver", role="nvidia_driver"),
    ev("runner_on_ok", host="n1", task="Install the exact packages: driver", res={"changed": True}),
    ev("runner_on_skipped", host="n1", task="Remove the packages of the previous pin"),
    ev(
        "runner_on_failed",
        host="n1",
        task="Probe",
        ignore_errors=True,
        res={"msg": "ignored", "failed": True},
    ),
    ev(
        "runner_on_failed",
        host="n2",
        task="Fail before anything is removed when the repositories lack a pinned version: driver",
        role="nvidia_driver",
        resolved_action="ansible.builtin.assert",
        ignore_errors=None,
        res={"failed": True, "msg": "the configured repositories do not carry x=1"},
    ),
    ev(
        "runner_on_unreachable",
        host="n3",
        task="Gather",
        res={"msg": "ssh: no route", "unreachable": True},
    ),
    ev(
        "playbook_on_stats",
        changed={"n1": 1},
        dark={"n3": 1},
        failures={"n2": 1},
        ignored={"n1": 1},
        ok={"n1": 3, "n2": 1},
        processed={"n1": 1, "n2": 1, "n3": 1},
        rescued={},
        skipped={"n1": 1},
        artifact_data={"gpunode": {"k": "v"}},
    ),
]


def collect(events: list[dict[str, Any]]) -> EventCollector:
    collector = EventCollector()
    for event in events:
        assert collector.handle(event) is True  # False would make the runner drop events
    return collector


def test_collector_counts_failures_and_facts() -> None:
    collector = collect(EVENTS)
    progress = collector.state
    assert progress.play == "Install the pinned NVIDIA stack"
    assert progress.task == "Install the exact packages: driver"
    assert progress.role == "nvidia_driver"
    assert progress.counts == {"ok": 3, "changed": 1, "failed": 1, "unreachable": 1, "skipped": 1}
    assert progress.hosts == {"n1", "n2", "n3"}
    assert [(f.host, f.unreachable) for f in collector.failures] == [("n2", False), ("n3", True)]
    failure = collector.failures[0]
    assert failure.role == "nvidia_driver"
    assert failure.action == "ansible.builtin.assert"
    assert "do not carry x=1" in failure.message
    assert collector.facts == {"n1": {"gpunode_node": {"gpu_count": 8}}}
    assert collector.stats_data == {"gpunode": {"k": "v"}}
    assert collector.changes == [
        {"host": "n1", "task": "Install the exact packages: driver", "role": "", "msg": ""}
    ]


def test_summaries_from_stats() -> None:
    collector = collect(EVENTS)
    hosts = summaries_from_stats(collector.stats)
    assert hosts["n1"].changed == 1 and hosts["n1"].ok == 3 and hosts["n1"].succeeded
    assert hosts["n2"].failed == 1 and not hosts["n2"].succeeded
    assert hosts["n3"].unreachable == 1 and hosts["n3"].ok == 0
    assert summaries_from_stats(None) == {}


def test_run_result_ok_and_dict() -> None:
    collector = collect(EVENTS)
    result = RunResult(
        run_id="r1",
        playbook="provision",
        rc=2,
        status="failed",
        artifact_dir="/tmp/x",
        hosts=summaries_from_stats(collector.stats),
        failures=collector.failures,
        facts=collector.facts,
    )
    assert not result.ok
    assert result.changed == 1
    assert result.host_facts("n1", "gpunode_node") == {"gpu_count": 8}
    assert result.host_facts("n9", "gpunode_node") is None
    data = result.to_dict()
    assert data["hosts"]["n2"]["failed"] == 1
    assert data["failures"][1]["unreachable"] is True
    clean = RunResult(
        "r2",
        "provision",
        0,
        "successful",
        "/tmp/y",
        hosts=summaries_from_stats({"ok": {"n1": 5}, "processed": {"n1": 1}}),
    )
    assert clean.ok and clean.changed == 0


@pytest.mark.parametrize(
    ("res", "expected"),
    [
        ({"msg": "boom"}, "boom"),
        (
            {"msg": "non-zero return code", "stderr": "E: Unable to locate package x", "rc": 100},
            "non-zero return code\nE: Unable to locate package x",
        ),
        (
            {
                "results": [
                    {"item": "a", "failed": True, "msg": "bad a"},
                    {"item": "b", "failed": False},
                ]
            },
            "[a] bad a",
        ),
        ({"stdout": "only stdout"}, "only stdout"),
        ({"rc": 3}, "exit status 3"),
        ({}, "failed without a message"),
    ],
)
def test_failure_message(res: dict[str, Any], expected: str) -> None:
    assert failure_message(res) == expected


def test_failure_message_is_cut() -> None:
    assert failure_message({"msg": "x" * 5000}).endswith(" ...")
    assert len(failure_message({"msg": "x" * 5000})) < 2100


def test_live_progress_prints_failures_and_summary() -> None:
    console = Console(record=True, width=200, force_terminal=False)
    collector = EventCollector()
    with LiveProgress(console, "provision", check=True) as live:
        collector.add_listener(live)
        for event in EVENTS:
            collector.handle(event)
    text = console.export_text()
    assert "failed: n2 | Fail before anything is removed" in text
    assert "unreachable: n3 | Gather: ssh: no route" in text
    assert "(check mode)" in text
    result = RunResult(
        "r1", "provision", 2, "failed", "/tmp", hosts=summaries_from_stats(collector.stats)
    )
    console = Console(record=True, width=200)
    console.print(summary_table(result))
    table = console.export_text()
    assert "n3" in table and "unreachable" in table and "failed" in table
