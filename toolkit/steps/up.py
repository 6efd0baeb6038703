"""``gpunode up``: from bare to ready in one command, resumable, node by node.

The stages, for the nodes of the inventory (``--limit``):

1. **check**: the stack checker and the stack locks (exit 2 before any host is touched when
   the stack is incoherent or a lock is missing, stale or no longer in the repositories);
2. **image**: each group's training image is built on this machine unless the image of its
   current recipe is already here (``toolkit.images``; acceptance sends it to the nodes);
3. **survey**: one drift run reads every node's state file, installed/pinned/loaded versions
   and drift (a ready node that drifted turns not-ready there);
4. **disks**: the data-disk layout is applied where the plan allows (a refusal stops that
   node, never the others);
5. **provision**: the pinned stack (a ready node is not ready while it changes);
6. **accept**: the acceptance test, in the image, and the marking (``ready`` only for the
   stack installed).

What a node has already proven is skipped: a node that is ready for the stack id pinned now
and the current training image, has not drifted and whose verdict has not expired skips
everything; a node whose state file
says it was provisioned with this stack id, has not drifted and needs no reboot skips disks
and provision. The proof lives on the node (its state file, ``toolkit.node.nodestate``) and is
re-read each time, so an interrupted ``up`` picks up where the nodes really are. Each ``up``
is recorded as an evidence run (``toolkit.records.runs``): ``up.json`` with every stage per node.

With ``accept_only`` (``--accept-only``, what the scheduled re-validation runs:
``toolkit.schedule``) stages 4 and 5 never run: a node that needs them fails its provision
stage with why and is left as it is, so a run on a timer never formats, installs or reboots.
It re-accepts only the failure classes that can heal (transient, harness, configuration once
provisioned: ``toolkit.acceptance.failure``): a node whose last verdict failed for hardware
fails its accept stage with its reasons and their actions, until the operator repairs it and
runs ``up`` without ``--accept-only``.

SIGINT and SIGTERM stop the run between stages (a running playbook is cancelled through
ansible-runner); a node is never left ``ready`` unless it was accepted for what is installed.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from toolkit import cert
from toolkit.acceptance.failure import HARDWARE
from toolkit.errors import ToolkitError
from toolkit.inventory import Inventory
from toolkit.node import nodestate
from toolkit.progress import HEARTBEAT_S, Display, Heartbeat, Progress
from toolkit.records import runs
from toolkit.steps import disks
from toolkit.steps.accept.options import AcceptOptions
from toolkit.steps.precheck import Precheck, precheck
from toolkit.steps.provision import converge, read_drift

STAGES = ("image", "survey", "disks", "provision", "accept")


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM asked ``up`` to stop (exit 130)."""


@dataclass
class StageResult:
    """How one stage went for one node."""

    status: str  # done | skipped | failed
    detail: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        return {"status": self.status, "detail": self.detail, "seconds": round(self.seconds, 1)}


@dataclass
class NodeUp:
    """One node's way through ``up``."""

    host: str
    stack_id: str
    stages: dict[str, StageResult] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    image_id: str | None = None  # the training image of its group (None: --engine host)
    now: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    revalidate_days: float | None = None  # nodestate.REVALIDATE_VAR, when the site sets it

    @property
    def shown(self) -> dict[str, Any]:
        """The state as what it proves (``nodestate``'s rule, the one ``gpunode status``
        shows): ready only for the stack pinned now and the current image, before its verdict
        expires or is due for re-validation."""
        return nodestate.proven_state(
            self.state, self.stack_id, self.now, self.image_id, self.revalidate_days
        )

    @property
    def failed_stage(self) -> str | None:
        """The stage that stopped this node, if any."""
        return next((n for n, r in self.stages.items() if r.status == "failed"), None)

    @property
    def ready(self) -> bool:
        """The node ends proven ready for the stack pinned now."""
        return self.shown.get("state") == "ready"

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data."""
        shown = self.shown
        return {
            "host": self.host,
            "stack_id": self.stack_id,
            "ready": self.ready,
            "state": shown.get("state"),
            "reason": list(shown.get("reason") or []),
            "failed_stage": self.failed_stage,
            "stages": {n: r.to_dict() for n, r in self.stages.items()},
        }


@dataclass
class UpOutcome:
    """A finished ``up``."""

    run_id: str
    run_dir: Path
    inventory: Path
    started: str
    finished: str
    elapsed_s: float
    nodes: dict[str, NodeUp]
    accept_run_id: str | None = None
    report: str | None = None

    @property
    def all_ready(self) -> bool:
        """Every node ends ready."""
        return bool(self.nodes) and all(n.ready for n in self.nodes.values())

    def to_dict(self) -> dict[str, Any]:
        """As JSON-ready data (``up.json`` and ``gpunode up --json``)."""
        return {
            "run_id": self.run_id,
            "run_dir": str(self.run_dir),
            "inventory": str(self.inventory),
            "started": self.started,
            "finished": self.finished,
            "elapsed_s": round(self.elapsed_s, 1),
            "all_ready": self.all_ready,
            "accept_run_id": self.accept_run_id,
            "report": self.report,
            "nodes": {h: n.to_dict() for h, n in sorted(self.nodes.items())},
        }


@dataclass
class UpOptions(AcceptOptions):
    """What ``gpunode up`` was asked to do: what its acceptance stage is asked (the options
    of ``gpunode accept``), and the stages before it."""

    # Asked with the disk plan when a node's disks would change (None: no question).
    confirm_disks: Callable[[disks.DisksOutcome], bool] | None = None
    display: Display | None = None
    relock: bool = False  # resolve missing or stale stack locks instead of refusing them
    # Change no node: those that need disks or provisioning are reported, not converged.
    accept_only: bool = False


class _Stop:
    """SIGINT/SIGTERM: cancel the playbook in flight, stop before the next stage."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.in_playbook = False

    def requested(self) -> bool:
        return self.event.is_set()

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        self.event.set()
        if not self.in_playbook:  # a playbook is cancelled by ansible-runner polling us
            raise Interrupted(f"stopped by signal {signum}")

    def check(self) -> None:
        if self.event.is_set():
            raise Interrupted("stopped by a signal")

    @contextmanager
    def playbook(self) -> Iterator[None]:
        self.in_playbook = True
        try:
            yield
        finally:
            self.in_playbook = False
        self.check()


@contextmanager
def _signals(stop: _Stop) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, stop.handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _check_sign_key(opts: UpOptions, inventory: Inventory) -> None:
    """A signing key that cannot sign is refused before any node is touched (exit 2)."""
    group_all = inventory.groups.get("all")
    cert.sign_key_from(opts.sign_key, group_all.vars if group_all else {}, opts.inventory)


def run_up(opts: UpOptions, progress: Progress = lambda _m: None) -> UpOutcome:
    """Take the inventory's nodes to ready, skipping what each node has proven.

    Raises:
        ConfigError, StackError: Bad inventory or incoherent stack (nothing touched).
        Interrupted: SIGINT or SIGTERM (nodes keep the state they really have).
    """
    started = datetime.now(timezone.utc)
    clock = time.monotonic()
    # The locks are checked against the repositories' indexes (fetched, and with --relock
    # resolved): on a slow link that is a phase of its own (issue 42).
    with Heartbeat(
        progress,
        "check",
        what="the stack and its locks against the repositories",
        interval=HEARTBEAT_S,
    ):
        found, written = precheck(opts.inventory, opts.limit, locks=True, relock=opts.relock)
    _check_sign_key(opts, found.inventory)
    run_dir = runs.start_run("up", opts.runs_dir, started)
    for lock in written:
        progress(f"group {lock.group}: stack lock written to {lock.path}")
    nodes = {
        h: NodeUp(h, found.stack_ids[h], revalidate_days=found.revalidate_days.get(h))
        for h in found.hosts
    }
    progress(f"up {run_dir.name}: {len(nodes)} node(s), stack {_ids(found)}")
    stop = _Stop()
    outcome = UpOutcome(
        run_id=run_dir.name,
        run_dir=run_dir,
        inventory=opts.inventory,
        started=started.isoformat(),
        finished="",
        elapsed_s=0.0,
        nodes=nodes,
    )
    try:
        with _signals(stop):
            _stages(opts, found, nodes, outcome, stop, progress)
    finally:
        outcome.finished = datetime.now(timezone.utc).isoformat()
        outcome.elapsed_s = time.monotonic() - clock
        (run_dir / "up.json").write_text(json.dumps(outcome.to_dict(), indent=1) + "\n")
    return outcome


def _ids(found: Precheck) -> str:
    return ", ".join(sorted(set(found.stack_ids.values())))


def _limit(hosts: Sequence[str]) -> str:
    return ",".join(sorted(hosts))


def _stages(
    opts: UpOptions,
    found: Precheck,
    nodes: dict[str, NodeUp],
    outcome: UpOutcome,
    stop: _Stop,
    progress: Progress,
) -> None:
    # The image stage runs beside the survey (it only reads the inventory and this machine's
    # Docker engine; the survey only reads the nodes): a no-op `up` pays for the slower one.
    images = _ImageStage(found.inventory, nodes, progress) if opts.engine == "image" else None
    if images is not None:
        images.start()
    todo_provision, todo_accept = _survey(opts, found, nodes, images, stop, progress)
    if todo_provision and opts.accept_only:
        for host in todo_provision:
            nodes[host].stages["provision"] = StageResult(
                "failed", "needs disks or provisioning: --accept-only changes no node"
            )
        todo_provision = []
    if opts.accept_only:
        todo_accept = [h for h in todo_accept if not _held_for_hardware(nodes[h])]
    if todo_provision:
        provisionable = _disks(opts, nodes, todo_provision, stop, progress)
        if provisionable:
            todo_accept += _provision(opts, found, nodes, provisionable, stop, progress)
    stop.check()
    if todo_accept:
        _accept(opts, found.inventory, nodes, sorted(todo_accept), outcome, progress)


def _held_for_hardware(node: NodeUp) -> bool:
    """A node whose last verdict failed for hardware is not re-accepted by ``--accept-only``
    (its stage says why and what to do): a re-acceptance cannot heal a part that needs a
    reset, a reboot or the vendor. There is no option to force it here: the operator repairs
    the node and runs ``gpunode up`` without ``--accept-only``, which re-accepts it."""
    if node.state.get("state") != "not-ready" or node.state.get("failure_class") != HARDWARE:
        return False
    reasons = "; ".join(node.state.get("reason") or []) or "no reason recorded"
    node.stages["accept"] = StageResult(
        "failed",
        f"not re-accepted: its last verdict failed for hardware ({reasons}); --accept-only "
        "re-accepts only what can heal: repair it, then run gpunode up without --accept-only",
    )
    return True


class _ImageStage(threading.Thread):
    """Build each group's training image unless its current recipe's image is here already,
    in a thread of its own beside the survey.

    :meth:`finish` waits for it and marks each node's image stage (a group whose image
    failed marks its nodes failed). A daemon: an interrupted ``up`` does not wait for a build.
    """

    def __init__(self, inventory: Inventory, nodes: dict[str, NodeUp], progress: Progress):
        super().__init__(name="up-image-stage", daemon=True)
        self.groups: dict[str, list[str]] = {}
        for host in nodes:
            self.groups.setdefault(inventory.stack_group_of(host), []).append(host)
        self.inventory = inventory
        self.progress = progress
        self.results: dict[str, tuple[StageResult, str | None]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for group in sorted(self.groups):
                self.results[group] = self._group(group)
        except BaseException as err:  # raised again in the caller's thread by finish()
            self.error = err

    def _group(self, group: str) -> tuple[StageResult, str | None]:
        # Imported here, in this thread, while the survey's playbook runs: Docker's client (with
        # requests and paramiko) alone took about 0.25 s of a no-op up's imports.
        from toolkit.images import build, engine, recipe, render

        t0 = time.monotonic()
        try:
            wanted = build.recipe_for(self.inventory, group)
            digest = render.render(wanted).digest
            client = engine.docker_client()
            have = engine.find_image(client, wanted.tag)
            labels = (have.labels or {}) if have is not None else {}
            if have is not None and labels.get(recipe.LABEL_INPUT_DIGEST) == digest:
                image_id, detail = str(have.id), f"{wanted.tag} is current"
            else:
                self.progress(f"image: building {wanted.tag} for group {group}")
                built = build.build_recipe(wanted, progress=self.progress, client=client)
                image_id, detail = built.image_id, f"built {wanted.tag}"
        except ToolkitError as err:
            return StageResult("failed", err.message, time.monotonic() - t0), None
        return StageResult("done", f"{detail} ({image_id[:19]})", time.monotonic() - t0), image_id

    def finish(self, nodes: dict[str, NodeUp]) -> None:
        """Wait for the stage; mark each node's image stage and image."""
        self.join()
        if self.error is not None:
            raise self.error
        for group, hosts in self.groups.items():
            result, image_id = self.results[group]
            for host in hosts:
                nodes[host].stages["image"] = result
                nodes[host].image_id = image_id


def _survey(
    opts: UpOptions,
    found: Precheck,
    nodes: dict[str, NodeUp],
    images: _ImageStage | None,
    stop: _Stop,
    progress: Progress,
) -> tuple[list[str], list[str]]:
    """Read every node's state and drift; say which need provisioning, which acceptance
    (once the image stage beside it has ended: a node whose image failed goes no further)."""
    now = datetime.now(timezone.utc)
    progress("survey: node state and drift")
    t0 = time.monotonic()
    with stop.playbook():
        survey = read_drift(
            opts.inventory,
            _limit(list(nodes)),
            display=opts.display,
            cancel=stop.requested,
            precheck=found,
        )
    spent = time.monotonic() - t0
    if images is not None:
        images.finish(nodes)
    stop.check()
    unreadable = survey.report["errors"]
    todo_provision: list[str] = []
    todo_accept: list[str] = []
    for host, node in nodes.items():
        if node.failed_stage:  # its image could not be built
            continue
        if host in unreadable:
            node.stages["survey"] = StageResult("failed", unreadable[host], spent)
            node.state = {"state": "unknown", "reason": [unreadable[host]]}
            continue
        node.state = survey.state(host) or nodestate.new()
        node.now = now
        drift = survey.drift(host)
        node.stages["survey"] = StageResult(
            "done", f"{node.state.get('state')}; drift: {len(drift)}", spent
        )
        if nodestate.proven_ready(
            node.state, node.stack_id, drift, now, node.image_id, node.revalidate_days
        ):
            for stage in ("disks", "provision", "accept"):
                node.stages[stage] = StageResult(
                    "skipped", f"ready for {node.stack_id} until {node.state.get('valid_until')}"
                )
        elif nodestate.proven_provisioned(node.state, node.stack_id, drift):
            for stage in ("disks", "provision"):
                node.stages[stage] = StageResult("skipped", f"provisioned with {node.stack_id}")
            todo_accept.append(host)
        else:
            todo_provision.append(host)
    return todo_provision, todo_accept


def _disks(
    opts: UpOptions, nodes: dict[str, NodeUp], hosts: list[str], stop: _Stop, progress: Progress
) -> list[str]:
    """Apply the data disks; the nodes that may go on to provisioning."""
    progress(f"disks: {_limit(hosts)}")
    t0 = time.monotonic()
    with stop.playbook():
        applied = disks.apply(
            opts.inventory,
            _limit(hosts),
            confirm=opts.confirm_disks,
            display=opts.display,
            cancel=stop.requested,
        )
    spent = time.monotonic() - t0
    passed = []
    for host in hosts:
        entry = applied.nodes.get(host)
        if applied.declined:
            result = StageResult("failed", "declined: nothing was changed", spent)
        elif entry is None:
            result = StageResult("failed", "no result for this node", spent)
        elif entry.refused:
            why = entry.errors or (entry.plan or {}).get("reasons") or ["refused"]
            result = StageResult("failed", "; ".join(why), spent)
        else:
            detail = "no data disks in the profile" if entry.plan is None else "in place"
            result = StageResult("done", detail, spent)
            passed.append(host)
        nodes[host].stages["disks"] = result
    return passed


def _provision(
    opts: UpOptions,
    found: Precheck,
    nodes: dict[str, NodeUp],
    hosts: list[str],
    stop: _Stop,
    progress: Progress,
) -> list[str]:
    """Converge the stack; the nodes that may go on to acceptance."""
    progress(f"provision: {_limit(hosts)}")
    t0 = time.monotonic()
    with stop.playbook():
        converged = converge(
            opts.inventory,
            _limit(hosts),
            display=opts.display,
            cancel=stop.requested,
            precheck=found,
        )
    spent = time.monotonic() - t0
    failed = converged.failed()
    passed = []
    for host in hosts:
        if host in failed or host not in converged.result.hosts:
            result = StageResult("failed", failed.get(host, "no result for this node"), spent)
        elif host in converged.reboots:
            why = "; ".join(converged.reboots[host]) or "needs a reboot"
            result = StageResult("failed", why, spent)
        else:
            changed = converged.result.hosts[host].changed
            result = StageResult("done", f"changed {changed}", spent)
            passed.append(host)
        nodes[host].stages["provision"] = result
    return passed


def _accept(
    opts: UpOptions,
    inventory: Inventory,
    nodes: dict[str, NodeUp],
    hosts: list[str],
    outcome: UpOutcome,
    progress: Progress,
) -> None:
    # Imported only when a node needs accepting: the acceptance flow (Docker's client, Fabric,
    # the verdicts) is most of `up`'s imports, and a no-op `up` needs none of it.
    from toolkit.steps.accept.run import run_acceptance

    progress(f"accept: {_limit(hosts)}")
    t0 = time.monotonic()
    # The images the image stage found or built, by ID: the group's tag may have moved since
    # (another build on this machine), and the nodes are judged against these.
    images: dict[str, str] = {}
    for host in hosts:
        image_id = nodes[host].image_id
        if image_id:
            images[inventory.stack_group_of(host)] = image_id
    run = run_acceptance(
        replace(opts, limit=_limit(hosts)),
        progress=progress,
        inventory=inventory,
        images=images,
    )
    spent = time.monotonic() - t0
    outcome.accept_run_id = run.run_id
    report = run.run_dir / "report.html"
    outcome.report = str(report) if report.exists() else None
    for plan in run.plans:  # the run's own records, read by attribute
        node = nodes.get(plan.host.name)
        if node is None:
            continue
        if plan.not_tested:  # the executor could not test it: its state stands
            node.stages["accept"] = StageResult("skipped", f"not tested: {plan.not_tested}", spent)
            continue
        written = plan.state if plan.written.get("state") else None
        node.state = dict(written or {"state": "unknown", "reason": [plan.error]})
        if node.ready:
            busbw = node.state.get("busbw_at_largest_gbps")  # the verdict's, as recorded
            shown = f"{busbw:.3f}" if isinstance(busbw, (int, float)) else "unknown"
            detail = f"busbw {shown} GB/s at the largest size"
        else:
            failed = plan.verdict.reasons() if plan.verdict else []
            detail = "; ".join(failed) or str(
                plan.error or (plan.verdict.verdict if plan.verdict else "no verdict")
            )
        # What the scheduler was told (resumed, drained, or left: drained by someone else).
        for action in run.hook_actions:
            if action["node"] == plan.host.name:
                detail += f"; {action['hook']}: {action['action']} ({action['detail']})"
        node.stages["accept"] = StageResult("done" if node.ready else "failed", detail, spent)
