"""``gpunode accept``: ship the runner, run it everywhere, judge, record, mark.

Fabric does the time-coordinated work (design.md, "Ansible converges, Fabric orchestrates"):
the runner is copied to every node and run there at once; with ``--multi-node`` the ranks of
a ring, of pairs and of re-pairings are launched on all their nodes together. Verdicts are
given here, written to each node's ``/etc/gpunode/state.json`` (``ready`` only for the stack
id installed now) with a Prometheus textfile, and the run is recorded under
``.gpunode/runs/<run-id>/``. Hooks (Slurm, Kubernetes) run last. What a node is given before
its runner runs is ``toolkit.acceptance.staging``; what its result says for the reports,
``toolkit.acceptance.summary``; the multi-node plans, ``toolkit.acceptance.multinode``.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import docker.errors

from toolkit import cert, nodestate, passport, runs
from toolkit.acceptance import executors, payload, topology
from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.expectation import expected_node
from toolkit.acceptance.hooks import CommandRunner, NodeMark, local_runner, run_hooks
from toolkit.acceptance.multinode import MultiNodeReport, run_multi_node
from toolkit.acceptance.node_runner.fabric import fabric_options
from toolkit.acceptance.node_runner.node import container_argv
from toolkit.acceptance.perf_checks import normalise_allreduce
from toolkit.acceptance.staging import (
    REMOTE_DIR,
    container_check,
    container_options,
    data_path,
    ensure_torch,
    rendezvous_address,
    runner_spec,
)
from toolkit.acceptance.summary import (
    digest,
    fabric_summary,
    largest_row,
    training_summary,
    transport_summary,
)
from toolkit.acceptance.thresholds import effective, sweep_sizes
from toolkit.acceptance.verdict import Verdict, judge, not_tested_verdict
from toolkit.errors import AcceptanceError, ConfigError, RemoteError
from toolkit.facts import probe, system
from toolkit.floors import AcceptanceSpec
from toolkit.images.build import recipe_for
from toolkit.images.distribute import push
from toolkit.images.engine import docker_client
from toolkit.inventory import Host, Inventory, load_inventory
from toolkit.inventory.values import multi_node_vars
from toolkit.names import name_path
from toolkit.progress import Heartbeat, Progress
from toolkit.remote import Node, open_node, parallel
from toolkit.report import write_reports
from toolkit.report.prometheus import TEXTFILE_PATH, render_textfile
from toolkit.stack.check import security_report
from toolkit.stack.lock import LOCK_FILE, lock_from_vars, lock_path, lock_state
from toolkit.stack.models import Stack
from toolkit.stack.systems import os_id_of_release

ENGINES = ("image", "host")
DEFAULT_PORT_BASE = 29500


@dataclass
class AcceptOptions:
    """What ``gpunode accept`` was asked to do."""

    inventory: Path
    limit: str | None = None
    multi_node: bool = False
    hooks: Sequence[str] = ()
    runs_dir: Path = field(default_factory=runs.runs_dir)
    hook_runner: CommandRunner = local_runner
    runner_timeout_s: float = 1800.0
    # "image": the ranks run in the group's training image through the node's Docker (the
    # default); "host": in a venv on the node itself (the fallback for nodes without it).
    engine: str = "image"
    # The provider's key that signs each ready node's certificate (None: the inventory's
    # `gpunode_sign_key`, else no certificates).
    sign_key: Path | None = None
    # How each node's runner starts: "ssh" or "slurm" (None: the inventory's
    # `gpunode_accept_executor`, else ssh). toolkit/acceptance/executors.
    executor: str | None = None


@dataclass
class NodePlan:
    """One node: where it is, what it must be, the thresholds in force."""

    host: Host
    group: str
    spec: AcceptanceSpec
    stack: Any
    hardware: Any
    expect: NodeExpectation | None = None
    node: Node | None = None
    python: str = "python3"
    image: str | None = None
    address: str | None = None
    os_id: str | None = None
    result: dict[str, Any] | None = None
    error: str | None = None
    verdict: Verdict | None = None
    extra: list[Check] = field(default_factory=list)
    written: dict[str, bool] = field(default_factory=dict)
    state: dict[str, Any] | None = None  # the node state written after the verdict
    certificate: Path | None = None
    certificate_note: str | None = None  # why there is none
    domain: str | None = None  # gpunode_accept_domain: its rack or NVLink clique
    max_sets: int | None = None  # gpunode_accept_max_sets: multi-node sets run at once
    not_tested: str | None = None  # why the executor could not test the node (no verdict on it)
    job: dict[str, Any] | None = None  # the scheduler's record of the node's job


@dataclass
class AcceptanceRun:
    """A finished run."""

    run_id: str
    run_dir: Path
    inventory: Path
    started: str
    finished: str
    multi_node: bool
    plans: list[NodePlan]
    multinode: dict[str, Any] | None
    hook_actions: list[dict[str, Any]]
    sign_key: cert.SignKey | None = None

    @property
    def all_ready(self) -> bool:
        """Every node came out ready."""
        return all(p.verdict is not None and p.verdict.ready for p in self.plans)

    def summary(self) -> dict[str, Any]:
        """The run as JSON-ready data (the input of every report)."""
        nodes = [_node_summary(p) for p in self.plans]
        return {
            "run_id": self.run_id,
            "inventory": str(self.inventory),
            "started": self.started,
            "finished": self.finished,
            "multi_node": self.multi_node,
            "all_ready": self.all_ready,
            "nodes": nodes,
            # Every check of every node by outcome: passed, failed, not measured.
            "outcomes": {
                o: sum(int(n["outcomes"][o]) for n in nodes)
                for o in ("passed", "failed", "not_measured")
            },
            "multinode": self.multinode,
            "hooks": self.hook_actions,
            "run_dir": str(self.run_dir),
            "signed_by": self.sign_key.fingerprint if self.sign_key else None,
        }


def _node_summary(plan: NodePlan) -> dict[str, Any]:
    verdict = plan.verdict
    assert verdict is not None
    section = normalise_allreduce((plan.result or {}).get("allreduce"))
    rows = section.get("rows") or []
    largest = largest_row(rows)
    state = (plan.result or {}).get("state") or {}
    return {
        "host": plan.host.name,
        "group": plan.group,
        "address": plan.host.address,
        "verdict": verdict.verdict,
        "stack_id": plan.expect.stack_id if plan.expect else None,
        "installed_stack_id": state.get("stack_id"),
        # The security floors the pinned stack is below (toolkit/stack/security.yml), accepted
        # or not: informational, the verdict does not use them.
        "security": _security(plan),
        "checks": [c.to_dict() for c in verdict.checks],
        "failed_checks": verdict.to_dict()["failed_checks"],
        "failure_class": verdict.failure_class,
        # The host-to-container contract: what the host has, what the ranks saw.
        "fabric": fabric_summary(plan.result),
        # passed, failed and not measured (never counted as passed), and why each was not.
        "outcomes": verdict.counts(),
        "not_measured_checks": verdict.to_dict()["not_measured_checks"],
        "engine": section.get("engine"),
        "allreduce_rows": [
            {k: r.get(k) for k in ("size_bytes", "time_us", "algbw_gbps", "busbw_gbps", "wrong")}
            for r in rows
        ],
        "busbw_at_largest_gbps": largest["busbw_gbps"] if largest else None,
        "floors": [
            {"size_bytes": f.size_bytes, "min_busbw_gbps": f.min_busbw_gbps}
            for f in plan.spec.allreduce
        ],
        "training": training_summary(plan.result),
        # The topology matrix and the pairs that broke a rule (None: no topology section).
        "topology": topology.report((plan.result or {}).get("topology"), plan.spec.topology),
        # What the all-reduce's NCCL log says it ran over (None: no log, as gloo on the CPU).
        "transport": transport_summary(plan.result),
        "results_digest": digest(plan.result) if plan.result else None,
        "duration_s": (plan.result or {}).get("duration_s"),
        "error": plan.error,
        "written": plan.written,
        "state": plan.state,
        "certificate": str(plan.certificate) if plan.certificate else None,
        "certificate_note": plan.certificate_note,
        "not_tested": plan.not_tested,
        "job": plan.job,
    }


def _security(plan: NodePlan) -> list[dict[str, str]] | None:
    return security_report(plan.stack, plan.host.vars) if isinstance(plan.stack, Stack) else None


def run_acceptance(opts: AcceptOptions, progress: Progress = lambda _m: None) -> AcceptanceRun:
    """Run the acceptance test on the inventory's nodes and give a verdict per node.

    Raises:
        ConfigError: The inventory, a stack or a hardware profile is malformed, or the limit
            matches no host.
    """
    started = datetime.now(timezone.utc)
    inventory = load_inventory(opts.inventory)
    hosts = inventory.hosts_for(opts.limit)
    if not hosts:
        raise ConfigError(f"{opts.inventory}: no hosts match {opts.limit or 'all'!r}")
    plans = [_plan(inventory, host) for host in hosts]
    group_all = inventory.groups.get("all")
    sign_key = cert.sign_key_from(
        opts.sign_key, group_all.vars if group_all else {}, opts.inventory
    )
    executor = executors.select(
        opts.executor,
        group_all.vars if group_all else {},
        {h.name: h for h in inventory.hosts_for(None)},
    )
    run_dir = runs.start_run("accept", opts.runs_dir, started)
    run_id = run_dir.name
    (run_dir / "nodes").mkdir(parents=True, exist_ok=True)
    progress(f"run {run_id}: {len(plans)} node(s)")
    if opts.engine not in ENGINES:
        raise ConfigError(f"unknown acceptance engine {opts.engine!r}; one of {list(ENGINES)}")
    if opts.engine == "image":
        _stage_images(plans, opts, progress)
    try:
        # The checks say nothing for minutes: a heartbeat says how far they are (issue 42).
        with Heartbeat(progress, "acceptance", what="single-node checks", total=len(plans)) as beat:

            def stage(host: Host) -> None:
                _stage_node(_by_host(plans, host), opts, beat.say, executor)
                beat.advance()

            parallel([p.host for p in plans], stage)
            multinode: MultiNodeReport | None = None
            if opts.multi_node:
                beat.uncounted("multi-node tests")
                multinode = _stage_multi_node(plans, opts, run_id, beat.say)
                for plan in plans:
                    if multinode is not None:
                        name = plan.host.name
                        blamed = multinode.blame.get(name) or multinode.passed.get(name, [])
                        plan.extra.extend(blamed)
        for plan in plans:
            plan.verdict = _judge(plan)
        finished = datetime.now(timezone.utc)
        parallel(
            [p.host for p in plans if p.node is not None and p.not_tested is None],
            lambda h: _write_node_state(_by_host(plans, h), run_id, finished),
        )
    finally:
        executor.close()
        for plan in plans:
            if plan.node is not None:
                plan.node.close()
    actions = []
    if opts.hooks:
        marks = [
            NodeMark(
                host=p.host.name,
                scheduler_name=p.host.scheduler_name,
                ready=bool(p.verdict and p.verdict.ready),
                reasons=tuple(p.verdict.reasons() if p.verdict else ()),
                failure_class=p.verdict.failure_class if p.verdict else None,
            )
            for p in plans
            if p.not_tested is None  # an untested node keeps its mark
        ]
        every = {h.name: h for h in inventory.hosts_for(None)}
        variables = group_all.vars if group_all else {}
        with executors.slurm_commands(variables, every, opts.hook_runner) as slurm:
            done = run_hooks(opts.hooks, marks, opts.hook_runner, {"slurm": slurm})
        actions = [a.to_dict() for a in done]
    run = AcceptanceRun(
        run_id=run_id,
        run_dir=run_dir,
        inventory=opts.inventory,
        started=started.isoformat(),
        finished=datetime.now(timezone.utc).isoformat(),
        multi_node=opts.multi_node,
        plans=plans,
        multinode=multinode.to_dict() if opts.multi_node and multinode else None,
        hook_actions=actions,
        sign_key=sign_key,
    )
    _record(run, progress)
    return run


def _judge(plan: NodePlan) -> Verdict:
    """One node's verdict, inside the node's own guard as its staging is (:func:`_stage_node`):
    a result.json that surprises the verdict (it comes from the node) fails that node with
    the reason, never the other nodes' verdicts or the run."""
    assert plan.expect is not None
    if plan.not_tested is not None:
        return not_tested_verdict(plan.host.name, plan.not_tested)
    try:
        return judge(plan.result, plan.expect, plan.spec, runner_error=plan.error, extra=plan.extra)
    except Exception as err:  # one node's surprise must not cost the other nodes their verdict
        why = f"internal error judging this node's result: {err!r} (rerun with --debug for details)"
        return judge(None, plan.expect, plan.spec, runner_error=why, extra=plan.extra)


def _by_host(plans: list[NodePlan], host: Host) -> NodePlan:
    return next(p for p in plans if p.host.name == host.name)


def _plan(inventory: Inventory, host: Host) -> NodePlan:
    stack, hardware = inventory.host_config(host)
    group = inventory.stack_group_of(host.name)
    domain, max_sets = multi_node_vars(host)
    return NodePlan(
        host=host,
        group=group,
        spec=effective(hardware.acceptance),
        stack=stack,
        hardware=hardware,
        domain=None if domain is None else str(domain),
        max_sets=max_sets,
    )


def _stage_images(plans: list[NodePlan], opts: AcceptOptions, progress: Progress) -> None:
    """Each group's training image, on every node of the group that lacks it.

    The image is the one ``gpunode image build`` tagged for the group's stack on this
    machine; it goes to the nodes the way ``gpunode image push`` sends it (the inventory's
    registry, else SSH), skipping nodes that hold its ID. A node it cannot reach fails the
    ``container.start`` check.

    Raises:
        ConfigError: A group has no image settings (gpunode_image_base); --engine host runs
            without an image.
    """
    groups: dict[str, list[NodePlan]] = {}
    for plan in plans:
        groups.setdefault(plan.group, []).append(plan)
    for group, members in groups.items():
        try:
            recipe = recipe_for(opts.inventory, group)
        except ConfigError as err:
            raise ConfigError(f"{err.message} (or accept with --engine host)") from err
        try:
            image_id = str(docker_client().images.get(recipe.tag).id)
        except docker.errors.ImageNotFound:
            for plan in members:
                plan.extra.append(
                    Check(
                        "container.start",
                        False,
                        f"no training image {recipe.tag} on this machine: run "
                        "`gpunode image build` (or accept with --engine host)",
                    )
                )
            continue
        progress(f"group {group}: image {image_id[:19]} ({recipe.tag}) to its nodes")
        # Its progress too: a transfer of hundreds of MB says where it is (issue 42).
        outcome = push(
            image_id,
            [p.host for p in members],
            registry=recipe.registry,
            tag=recipe.tag,
            progress=progress,
        )
        for plan, transfer in zip(members, outcome.nodes, strict=True):
            if transfer.action == "failed":
                plan.extra.append(
                    Check("container.start", False, f"image not on the node: {transfer.error}")
                )
            else:
                plan.image = image_id


def _stage_node(
    plan: NodePlan, opts: AcceptOptions, progress: Progress, executor: executors.Executor
) -> None:
    """Connect, prepare Python and torch, run the runner through the executor, fetch its
    result."""
    name = plan.host.name
    try:
        plan.node = open_node(plan.host)
        node = plan.node
        facts = probe.by_name(
            node.run(
                probe.script([system.OS_RELEASE, system.ADDRESS]), check=True, timeout=60
            ).stdout
        )
        plan.os_id = os_id_of_release(system.OS_RELEASE.read(facts))
        plan.address = rendezvous_address(plan.host, system.ADDRESS.read(facts))
        plan.expect, _resolved = expected_node(
            plan.host, plan.stack, plan.hardware, plan.os_id or "debian12"
        )
        node.run(f"mkdir -p {REMOTE_DIR} /etc/gpunode", check=True, timeout=60)
        node.put_text(payload.runner_zipapp(), f"{REMOTE_DIR}/{payload.ARCHIVE}", 0o755)
        if opts.engine == "host":
            plan.python = ensure_torch(node, plan.host, progress)
        spec = runner_spec(plan.host, plan.spec, plan.hardware.data_disks, plan.expect, plan.image)
        node.put_text(json.dumps(spec, indent=1), f"{REMOTE_DIR}/spec.json")
        progress(f"{name}: running checks")
        runner = shlex.quote(f"{REMOTE_DIR}/{payload.ARCHIVE}")
        res = executor.launch(
            plan.host,
            node,
            f"{plan.python} {runner} run --spec {REMOTE_DIR}/spec.json "
            f"--out {REMOTE_DIR}/result.json",
            REMOTE_DIR,
            opts.runner_timeout_s,
            gpus=plan.hardware.gpu.count,
        )
        plan.job = res.job
        if not res.ok:
            raise RemoteError(f"{name}: runner exited {res.returncode}: {res.output[-800:]}")
        plan.result = json.loads(node.get_text(f"{REMOTE_DIR}/result.json"))
        if plan.image is not None:
            plan.extra.append(container_check(plan.result.get("container"), plan.image))
        progress(f"{name}: checks done in {plan.result.get('duration_s', 0):.1f}s")
    except executors.NotTested as err:
        plan.not_tested, plan.job = err.reason, err.job
        progress(f"{name}: not tested: {err.reason}")
    except (RemoteError, AcceptanceError, ConfigError) as err:
        plan.error = err.message
        progress(f"{name}: {err.message}")
    except ValueError as err:
        plan.error = f"unreadable runner result: {err}"
    except Exception as err:  # one node's surprise must not cost the other nodes their verdict
        plan.error = f"internal error on this node: {err!r} (rerun with --debug for details)"
    if plan.expect is None:
        plan.expect = NodeExpectation(host=name, stack_id=None)


def _stage_multi_node(
    plans: list[NodePlan], opts: AcceptOptions, run_id: str, progress: Progress
) -> MultiNodeReport | None:
    """Ring, pairs and re-pairs per group, over the nodes whose runner worked."""
    reports: list[MultiNodeReport] = []
    groups: dict[str, list[NodePlan]] = {}
    for plan in plans:
        groups.setdefault(plan.group, []).append(plan)
    for group, members in groups.items():
        usable = [p for p in members if p.result is not None and p.node is not None and p.address]
        for p in members:
            if p not in usable:
                p.extra.append(
                    Check("multinode.run", False, "left out: its single-node run failed")
                )
        # A node whose ranks did not see its fabric in the container would fail its sets for
        # the harness's sake (NCCL falls back to sockets): it is left out, and nobody blamed.
        blind = [p for p in usable if _container_lacks_fabric(p)]
        for p in blind:
            usable.remove(p)
            p.extra.append(
                Check(
                    "multinode.run",
                    False,
                    "left out: its ranks' container lacks the host's devices (container.fabric)",
                )
            )
        if len(usable) < 2:
            progress(f"group {group}: fewer than 2 usable nodes; no multi-node test")
            continue
        run_set = _set_runner({p.host.name: p for p in usable}, usable[0].spec, run_id, progress)
        spec = usable[0].spec
        reports.append(
            run_multi_node(
                [p.host.name for p in usable],
                spec.multi_node_allreduce,
                run_set,
                spec.min_multi_node_scaling_efficiency,
                spec.transport,
                domains={p.host.name: p.domain for p in usable if p.domain is not None},
                max_concurrent=min((p.max_sets for p in usable if p.max_sets), default=None),
            )
        )
    return MultiNodeReport.merged(reports) if reports else None


def _container_lacks_fabric(plan: NodePlan) -> bool:
    """Whether the node's own run found its container short of the host's devices."""
    compared = ((plan.result or {}).get("fabric") or {}).get("check")
    return isinstance(compared, dict) and compared.get("ok") is False


_port_lock = threading.Lock()
_port_counter = iter(range(1, 1_000_000))


def _set_runner(
    by_name: dict[str, NodePlan], spec: AcceptanceSpec, run_id: str, progress: Progress
) -> Callable[[Sequence[str], bool], dict[str, Any]]:
    sizes = sweep_sizes(spec, multi_node=True)

    def run_set(names: Sequence[str], p2p: bool) -> dict[str, Any]:
        with _port_lock:
            tag = next(_port_counter)
        progress(f"multi-node test {tag}: {' + '.join(names)}")
        members = [by_name[n] for n in names]
        # A fresh port per set: a previous set's listener may linger in TIME_WAIT.
        port = DEFAULT_PORT_BASE + tag % 1000
        return _launch_set(members, sizes, spec, p2p, port, run_id, tag)

    return run_set


def _launch_set(
    members: list[NodePlan],
    sizes: list[int],
    spec: AcceptanceSpec,
    p2p: bool,
    port: int,
    run_id: str,
    tag: int,
) -> dict[str, Any]:
    """Start the ranks of one all-reduce on every member at once; rank 0's section back."""
    master = members[0].address
    out = f"{REMOTE_DIR}/multinode-{tag}.json"
    results: dict[int, Any] = {}
    # The training loop across the nodes, each reading its own data path: only where every
    # member could write its data set in its own run (a member without one would leave the
    # others waiting in the loop's collectives).
    no_data = [p.host.name for p in members if not _wrote_data_set(p)]
    train = "" if no_data else f" --train-from {REMOTE_DIR}/spec.json"

    def launch(index: int) -> None:
        plan = members[index]
        assert plan.node is not None and plan.result is not None
        # No GPU seen by the node's own run: one CPU rank, named so that the launcher does
        # not import torch to count GPUs; with GPUs, one rank per GPU (the launcher counts).
        gpus = int(plan.result.get("cuda_device_count") or 0)
        ranks = "--nproc 0" if gpus else "--nproc 1 --device cpu"
        ifname = plan.host.vars.get("gpunode_accept_socket_ifname")
        env = (
            {"GLOO_SOCKET_IFNAME": str(ifname), "NCCL_SOCKET_IFNAME": str(ifname)} if ifname else {}
        )
        host_fabric = (plan.result.get("fabric") or {}).get("host") or {}
        if plan.image:
            # The site's options, then the node's RDMA devices and IPC_LOCK as its run found
            # them on the host (the contract its own run checked inside the container).
            options = container_options(plan.host) + fabric_options(
                host_fabric.get("rdma_files") or []
            )
            # The node's own IMEX channels, as its run found them on the host.
            channels = [str(c) for c in plan.result.get("imex_channels") or []]
            argv = container_argv(
                plan.image,
                REMOTE_DIR,
                data_path(plan.spec, plan.hardware.data_disks),
                env,
                options,
                channels,
            )
            start = shlex.join(argv)
        else:
            prefix = (
                "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) if env else ""
            )
            start = f"{prefix} {plan.python} {REMOTE_DIR}/{payload.ARCHIVE}".strip()
        check_fabric = ""
        if plan.image and host_fabric:
            # The ranks compare what they see with the host before the all-reduce.
            try:
                plan.node.put_text(json.dumps(host_fabric), f"{REMOTE_DIR}/host-fabric.json")
                check_fabric = f" --host-fabric {REMOTE_DIR}/host-fabric.json"
            except RemoteError as err:
                results[index] = {"error": f"{plan.host.name}: {err}"}
                return
        command = (
            f"{start} allreduce --nnodes {len(members)} "
            f"--node-rank {index} {ranks} --master-addr {shlex.quote(str(master))} "
            f"--master-port {port} --iters {spec.iters} --warmup {spec.warmup_iters} "
            f"--timeout 120 --out {out} --sizes {' '.join(str(s) for s in sizes)}"
            + (" --p2p" if p2p else "")
            + train
            + check_fabric
        )
        try:
            res = plan.node.run(command, timeout=300)
            if not res.ok:
                results[index] = {
                    "error": f"{plan.host.name}: exit {res.returncode}: "
                    f"{(res.stderr or res.stdout)[-400:]}"
                }
                return
            results[index] = json.loads(plan.node.get_text(out))
        except (RemoteError, ValueError) as err:
            results[index] = {"error": f"{plan.host.name}: {err}"}

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(len(members))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [str(r.get("error")) for r in results.values() if r.get("error")]
    section = dict(results.get(0) or {})
    if errors:
        section.update(rows=[], error="; ".join(errors))
    if no_data and not section.get("train"):
        section["train"] = {
            "error": f"no loop across nodes: no data set on {', '.join(no_data)} "
            "(see its storage check)"
        }
    section["run_id"] = run_id
    return section


def _wrote_data_set(plan: NodePlan) -> bool:
    """Whether the node's own run wrote its data set (its storage check says why not)."""
    storage = (plan.result or {}).get("storage") or {}
    return bool(storage) and not storage.get("error")


def _write_node_state(plan: NodePlan, run_id: str, when: datetime) -> None:
    """state.json and the Prometheus textfile on the node; written last, atomically."""
    assert plan.node is not None and plan.verdict is not None
    node = plan.node
    rows = normalise_allreduce((plan.result or {}).get("allreduce")).get("rows") or []
    largest = largest_row(rows)
    state = nodestate.after_acceptance(
        (plan.result or {}).get("state") or nodestate.new(),
        passed=plan.verdict.ready,
        reasons=plan.verdict.advised_reasons(),
        failure_class=plan.verdict.failure_class,
        accepted_stack_id=plan.expect.stack_id if plan.expect else None,
        run_id=run_id,
        now=when,
        valid_hours=plan.spec.max_result_age_h,
        results_digest=digest(plan.result) if plan.result else None,
        busbw_gbps=(largest or {}).get("busbw_gbps"),
        image_id=plan.image,
    )
    plan.state = state
    try:
        nodestate.write_over(node, state)
        plan.written["state"] = True
    except RemoteError as err:
        plan.written["state"] = False
        plan.error = (plan.error + "; " if plan.error else "") + err.message
    summary = _node_summary(plan)
    text = render_textfile(summary, run_id, when.timestamp())
    directory = str(Path(TEXTFILE_PATH).parent)
    try:
        node.run(f"mkdir -p {directory}", check=True, timeout=60)
        node.put_text(text, f"{TEXTFILE_PATH}.tmp")
        node.run(f"mv -f {TEXTFILE_PATH}.tmp {TEXTFILE_PATH}", check=True, timeout=60)
        plan.written["textfile"] = True
    except RemoteError as err:
        plan.written["textfile"] = False
        plan.error = (plan.error + "; " if plan.error else "") + err.message


def _record(run: AcceptanceRun, progress: Progress = lambda _m: None) -> None:
    """Each node's raw result, the certificates, run.json and the reports (evidence: never
    rotated away by routine runs)."""
    for plan in run.plans:
        if plan.result is not None:
            name_path(run.run_dir / "nodes", plan.host.name, ".result.json").write_text(
                json.dumps(plan.result, indent=1, sort_keys=True) + "\n"
            )
    # Each certificate carries its node's passport at issue time, this run included.
    try:
        reading = passport.read_fleet(run.run_dir.parent)
        if reading.problems:  # the passport would leave that run out without saying so
            first, more = reading.problems[0], len(reading.problems) - 1
            raise ConfigError(first.message + (f" (and {more} more)" if more else ""))
        fleet: passport.Fleet | ConfigError = passport.with_run(
            reading.observations,
            run.run_id,
            run.started,
            [(_node_summary(p), p.result) for p in run.plans],
        )
    except ConfigError as err:  # an earlier run's record is unreadable
        fleet = err
    for plan in run.plans:
        _certify(run, plan, progress, fleet)
    write_reports(run.summary(), run.run_dir)


def _certify(
    run: AcceptanceRun, plan: NodePlan, progress: Progress, fleet: passport.Fleet | ConfigError
) -> None:
    """The signed certificate of a node marked ready; a node not ready gets none."""
    if plan.verdict is None or not plan.verdict.ready:
        plan.certificate_note = "not ready: no certificate"
        return
    if not plan.written.get("state"):
        plan.certificate_note = "ready, but its state file was not written: no certificate"
        return
    if run.sign_key is None:
        plan.certificate_note = f"no certificate: no --sign-key or {cert.SIGN_KEY_VAR}"
        return
    if isinstance(fleet, ConfigError):
        plan.certificate_note = f"ready, but no passport ({fleet.message}): no certificate"
        return
    assert plan.result is not None and plan.expect is not None
    assert plan.expect.stack_id is not None
    result_file = f"nodes/{plan.host.name}.result.json"
    try:
        document = cert.build(
            host=plan.host.name,
            group=plan.group,
            result=plan.result,
            checks=[c.to_dict() for c in plan.verdict.checks],
            spec=plan.spec,
            data_serials=(
                [d.serial for d in plan.hardware.data_disks.disks]
                if plan.hardware.data_disks
                else []
            ),
            stack_id=plan.expect.stack_id,
            lock_digest=_lock_digest(plan, run.inventory),
            image_id=plan.image,
            run_id=run.run_id,
            started=run.started,
            finished=run.finished,
            valid_until=(plan.state or {}).get("valid_until"),
            result_file=result_file,
            result_sha256=cert.file_sha256(run.run_dir / result_file),
            passport=passport.summary(passport.passport(plan.host.name, fleet)),
        )
        plan.certificate = cert.write(run.run_dir, plan.host.name, document, run.sign_key)
        progress(f"{plan.host.name}: certificate {plan.certificate}")
    except cert.CertError as err:
        plan.certificate_note = err.message
        plan.error = (plan.error + "; " if plan.error else "") + err.message
        progress(f"{plan.host.name}: {err.message}")


def _lock_digest(plan: NodePlan, inventory: Path) -> str | None:
    """``sha256:`` of the group's stack lock file when it is current for the stack."""
    lock = lock_from_vars(plan.host.vars, f"{LOCK_FILE} of host {plan.host.name}")
    path = lock_path(inventory, plan.group)
    if lock is None or plan.expect is None or plan.expect.stack_id is None:
        return None
    if lock_state(lock, plan.expect.stack_id) != "current" or not path.is_file():
        return None
    return cert.file_sha256(path)
