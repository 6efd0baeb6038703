"""``gpunode accept``: ship the runner, run it everywhere, judge, record, mark.

Fabric does the time-coordinated work (design.md, "Ansible converges, Fabric orchestrates"):
the runner is copied to every node and run there at once; with ``--multi-node`` the ranks of
a ring, of pairs and of re-pairings are launched on all their nodes together. Verdicts are
given here, written to each node's ``/etc/gpunode/state.json`` (``ready`` only for the stack
id installed now) with a Prometheus textfile, and the run is recorded under
``.gpunode/runs/<run-id>/``. Hooks (Slurm, Kubernetes) run last.

The flow reads plan, stage, launch, judge, record: each node's plan is
``toolkit.acceptance.plan``; what a node is given before its runner runs,
``toolkit.acceptance.staging``; how the ranks of a multi-node set start,
``toolkit.acceptance.launch`` (the sets themselves, ``toolkit.acceptance.multinode``); what a
result says for the reports, ``toolkit.acceptance.summary``; what the run writes (node state,
textfile, certificates, the run's folder), ``record.py`` beside this file.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from datetime import datetime, timezone

import docker.errors

from toolkit import cert
from toolkit.acceptance import executors, payload
from toolkit.acceptance.check import Check, NodeExpectation
from toolkit.acceptance.expectation import expected_node
from toolkit.acceptance.hooks import NodeMark, run_hooks
from toolkit.acceptance.launch import container_lacks_fabric, set_runner
from toolkit.acceptance.multinode import MultiNodeReport, run_multi_node
from toolkit.acceptance.plan import NodePlan, by_host, plan_node
from toolkit.acceptance.staging import (
    REMOTE_DIR,
    container_check,
    ensure_torch,
    rendezvous_address,
    runner_spec,
)
from toolkit.acceptance.verdict import Verdict, judge, not_tested_verdict
from toolkit.errors import AcceptanceError, ConfigError, RemoteError
from toolkit.facts import probe, system
from toolkit.images.build import recipe_for
from toolkit.images.distribute import push
from toolkit.images.engine import docker_client
from toolkit.inventory import Host, Inventory, load_inventory
from toolkit.progress import Heartbeat, Progress
from toolkit.records import runs
from toolkit.remote import open_node, parallel
from toolkit.stack.systems import os_id_of_release
from toolkit.steps.accept.options import ENGINES, AcceptOptions
from toolkit.steps.accept.record import AcceptanceRun, record_run, write_node_state


def run_acceptance(
    opts: AcceptOptions,
    progress: Progress = lambda _m: None,
    *,
    inventory: Inventory | None = None,
    images: Mapping[str, str] | None = None,
) -> AcceptanceRun:
    """Run the acceptance test on the inventory's nodes and give a verdict per node.

    What a caller has already: ``inventory``, ``opts.inventory`` as loaded (else it is read
    here); ``images``, the training image ID of a group (else its tag is looked up here).

    Raises:
        ConfigError: The inventory, a stack or a hardware profile is malformed, or the limit
            matches no host.
    """
    started = datetime.now(timezone.utc)
    inventory = inventory or load_inventory(opts.inventory)
    hosts = inventory.hosts_for(opts.limit)
    if not hosts:
        raise ConfigError(f"{opts.inventory}: no hosts match {opts.limit or 'all'!r}")
    plans = [plan_node(inventory, host) for host in hosts]
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
        _stage_images(plans, inventory, images or {}, progress)
    try:
        # The checks say nothing for minutes: a heartbeat says how far they are (issue 42).
        with Heartbeat(progress, "acceptance", what="single-node checks", total=len(plans)) as beat:

            def stage(host: Host) -> None:
                _stage_node(by_host(plans, host), opts, beat.say, executor)
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
            lambda h: write_node_state(by_host(plans, h), run_id, finished),
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
    record_run(run, progress)
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


def _stage_images(
    plans: list[NodePlan], inventory: Inventory, images: Mapping[str, str], progress: Progress
) -> None:
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
            recipe = recipe_for(inventory, group)
        except ConfigError as err:
            raise ConfigError(f"{err.message} (or accept with --engine host)") from err
        try:
            image_id = images.get(group) or str(docker_client().images.get(recipe.tag).id)
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
        blind = [p for p in usable if container_lacks_fabric(p)]
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
        run_set = set_runner({p.host.name: p for p in usable}, usable[0].spec, run_id, progress)
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
