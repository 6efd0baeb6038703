"""What an acceptance run leaves behind (``AcceptanceRun``, its typed outcome): each node's
state file and Prometheus textfile (:func:`write_node_state`), then the run's folder
(:func:`record_run`): every node's raw result, the signed certificates of the nodes marked
ready, ``run.json`` and the reports. The run folder is evidence, never rotated away by routine
runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from toolkit import cert
from toolkit.acceptance.perf_checks import normalise_allreduce
from toolkit.acceptance.plan import NodePlan
from toolkit.acceptance.summary import digest, largest_row, node_summary
from toolkit.errors import ConfigError, RemoteError
from toolkit.names import name_path
from toolkit.node import nodestate
from toolkit.progress import Progress
from toolkit.records import passport
from toolkit.report import write_reports
from toolkit.report.prometheus import TEXTFILE_PATH, render_textfile
from toolkit.stack.lock import LOCK_FILE, lock_from_vars, lock_path, lock_state


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
        nodes = [node_summary(p) for p in self.plans]
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


def write_node_state(plan: NodePlan, run_id: str, when: datetime) -> None:
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
    summary = node_summary(plan)
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


def record_run(run: AcceptanceRun, progress: Progress = lambda _m: None) -> None:
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
            [(node_summary(p), p.result) for p in run.plans],
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
