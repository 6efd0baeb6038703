"""Turning ansible-runner events into results: pure functions over recorded event dicts.

ansible-runner hands every event (a dict with ``event`` and ``event_data``) to a handler;
:class:`EventCollector` keeps what gpunode needs from them: the play and task in progress,
running counts, failure details (task, message) and the facts that tasks set with
``ansible.builtin.set_fact`` (how commands such as ``drift`` get data back from a play).
The per-host summary comes from the final ``playbook_on_stats`` event (the same data as the
runner's ``stats``), never from scraping stdout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

# ansible-runner event names (ansible_runner/display_callback/callback/awx_display.py).
PLAY_START = "playbook_on_play_start"
TASK_START = "playbook_on_task_start"
HANDLER_START = "playbook_on_handler_task_start"
RUNNER_START = "runner_on_start"  # a host starts the current task
OK = "runner_on_ok"
FAILED = "runner_on_failed"
SKIPPED = "runner_on_skipped"
UNREACHABLE = "runner_on_unreachable"
STATS = "playbook_on_stats"

# Keys of the stats dict (r.stats / playbook_on_stats) -> HostSummary fields.
STATS_KEYS = {
    "ok": "ok",
    "changed": "changed",
    "failures": "failed",
    "dark": "unreachable",
    "skipped": "skipped",
    "rescued": "rescued",
    "ignored": "ignored",
}

MESSAGE_LIMIT = 2000


@dataclass
class HostSummary:
    """Task counts of one host over a run (``ok`` includes ``changed``, as in Ansible)."""

    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0

    @property
    def succeeded(self) -> bool:
        """True when the host had neither a failed task nor was unreachable."""
        return self.failed == 0 and self.unreachable == 0


@dataclass(frozen=True)
class Failure:
    """One failed (not ignored) task on one host, or one unreachable host."""

    host: str
    task: str
    message: str
    role: str = ""
    action: str = ""
    unreachable: bool = False


@dataclass
class RunResult:
    """What a playbook run gave back: per-host counts, failures and reported data."""

    run_id: str
    playbook: str
    rc: int
    status: str
    artifact_dir: str
    check: bool = False
    hosts: dict[str, HostSummary] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    stats_data: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    changes: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the run finished with rc 0 and no host failed or was unreachable."""
        return (
            self.rc == 0
            and not self.failures
            and all(summary.succeeded for summary in self.hosts.values())
        )

    @property
    def changed(self) -> int:
        """The number of changed tasks over all hosts."""
        return sum(summary.changed for summary in self.hosts.values())

    def host_facts(self, host: str, name: str) -> Any:
        """The last value a task set for fact ``name`` on ``host`` (None when never set)."""
        return self.facts.get(host, {}).get(name)

    def to_dict(self) -> dict[str, Any]:
        """The result as plain data (for ``--json``)."""
        return {
            "run_id": self.run_id,
            "playbook": self.playbook,
            "rc": self.rc,
            "status": self.status,
            "check": self.check,
            "ok": self.ok,
            "artifact_dir": self.artifact_dir,
            "hosts": {host: asdict(summary) for host, summary in sorted(self.hosts.items())},
            "failures": [asdict(failure) for failure in self.failures],
            "changes": list(self.changes),
        }


def failure_message(res: Mapping[str, Any]) -> str:
    """The human part of a failed task's result: ``msg`` plus stderr or loop item messages.

    Args:
        res: The ``event_data.res`` of a ``runner_on_failed`` or ``runner_on_unreachable``.

    Returns:
        A one- or few-line message, cut to a readable length.
    """
    parts: list[str] = []
    msg = res.get("msg")
    if msg:
        parts.append(str(msg).strip())
    for item in res.get("results") or []:
        if isinstance(item, Mapping) and item.get("failed"):
            label = item.get("item")
            item_msg = str(item.get("msg") or item.get("stderr") or "failed").strip()
            parts.append(f"[{label}] {item_msg}" if label is not None else item_msg)
    stderr = str(res.get("stderr") or "").strip()
    if stderr and stderr not in parts:
        parts.append(stderr)
    if not parts:
        stdout = str(res.get("stdout") or "").strip()
        if stdout:
            parts.append(stdout)
    if not parts and "rc" in res:
        parts.append(f"exit status {res['rc']}")
    text = "\n".join(parts) or "failed without a message"
    if len(text) > MESSAGE_LIMIT:
        text = text[:MESSAGE_LIMIT] + " ..."
    return text


def summaries_from_stats(stats: Mapping[str, Any] | None) -> dict[str, HostSummary]:
    """Per-host summaries from a stats dict (``r.stats`` or ``playbook_on_stats`` data)."""
    hosts: dict[str, HostSummary] = {}
    if not stats:
        return hosts
    for key, attr in STATS_KEYS.items():
        for host, count in (stats.get(key) or {}).items():
            summary = hosts.setdefault(host, HostSummary())
            setattr(summary, attr, int(count))
    for host in stats.get("processed") or {}:
        hosts.setdefault(host, HostSummary())
    return hosts


@dataclass
class RunState:
    """Where a running playbook is and its counts so far (what a live display shows)."""

    play: str = ""
    task: str = ""
    role: str = ""
    tasks_started: int = 0
    hosts: set[str] = field(default_factory=set)
    # Hosts that finished the current task (how far it is: len(task_done) of len(hosts)).
    task_done: set[str] = field(default_factory=set)
    counts: dict[str, int] = field(
        default_factory=lambda: {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0, "skipped": 0}
    )


class EventCollector:
    """Collects the parts of an event stream gpunode uses.

    Call :meth:`handle` with every event (it is the runner's ``event_handler`` and returns
    True so that ansible-runner keeps the event). Optional ``listeners`` are called with the
    collector after each event (the live display).
    """

    def __init__(self, listeners: list[Any] | None = None) -> None:
        self.state = RunState()
        self.failures: list[Failure] = []
        self.facts: dict[str, dict[str, Any]] = {}
        self.stats: dict[str, Any] | None = None
        self.stats_data: dict[str, Any] = {}
        # The last successful result of each host (ad-hoc module runs read data from it).
        self.results: dict[str, dict[str, Any]] = {}
        # Every changed task (in check mode: every predicted change), in order.
        self.changes: list[dict[str, str]] = []
        self.last_failure: Failure | None = None
        self._listeners = listeners or []

    def add_listener(self, listener: Any) -> None:
        """Call ``listener(collector)`` after every further event."""
        self._listeners.append(listener)

    def handle(self, event: Mapping[str, Any]) -> bool:
        """Take one event; always returns True (False would make the runner drop it)."""
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        state = self.state
        if kind == PLAY_START:
            state.play = str(data.get("play") or data.get("name") or "")
            state.task = ""
            state.task_done = set()
        elif kind in (TASK_START, HANDLER_START):
            state.task = str(data.get("task") or data.get("name") or "")
            state.role = str(data.get("role") or "")
            state.tasks_started += 1
            state.task_done = set()
        elif kind == RUNNER_START:
            if data.get("host"):
                state.hosts.add(str(data["host"]))
        elif kind in (OK, FAILED, SKIPPED, UNREACHABLE):
            self._host_result(kind, data)
        elif kind == STATS:
            self.stats = {key: data.get(key) or {} for key in (*STATS_KEYS, "processed")}
            self.stats_data = dict(data.get("artifact_data") or {})
        for listener in self._listeners:
            listener(self)
        return True

    def _host_result(self, kind: str, data: Mapping[str, Any]) -> None:
        host = str(data.get("host") or "")
        res = data.get("res") or {}
        if not isinstance(res, Mapping):
            res = {}
        state = self.state
        if host:
            state.hosts.add(host)
            state.task_done.add(host)
        self.last_failure = None
        if kind == OK:
            state.counts["changed" if res.get("changed") else "ok"] += 1
            if res.get("changed"):
                self.changes.append(
                    {
                        "host": host,
                        "task": str(data.get("task") or ""),
                        "role": str(data.get("role") or ""),
                        "msg": str(res.get("msg") or "")[:MESSAGE_LIMIT],
                    }
                )
            if host:
                self.results[host] = dict(res)
            facts = res.get("ansible_facts")
            if host and isinstance(facts, Mapping):
                self.facts.setdefault(host, {}).update(facts)
        elif kind == SKIPPED:
            state.counts["skipped"] += 1
        elif kind == FAILED:
            if data.get("ignore_errors"):
                state.counts["ok"] += 1
                return
            state.counts["failed"] += 1
            self._add_failure(host, data, res, unreachable=False)
        elif kind == UNREACHABLE:
            state.counts["unreachable"] += 1
            self._add_failure(host, data, res, unreachable=True)

    def _add_failure(
        self, host: str, data: Mapping[str, Any], res: Mapping[str, Any], *, unreachable: bool
    ) -> None:
        failure = Failure(
            host=host,
            task=str(data.get("task") or ""),
            role=str(data.get("role") or ""),
            action=str(data.get("resolved_action") or data.get("task_action") or ""),
            message=failure_message(res),
            unreachable=unreachable,
        )
        self.failures.append(failure)
        self.last_failure = failure
