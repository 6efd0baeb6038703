"""The one way gpunode runs a playbook: ansible-runner with an event handler.

Each run gets its own id and directory under the state directory
(``.gpunode/runs/<run-id>/``, git-ignored; ``toolkit.records.runs`` owns their names and rotation).
Ansible is pointed at the project's roles, action plugins and modules through environment
variables, with host key checking on. Progress comes from events, the per-host summary from
the stats, failure details from failed events.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from toolkit.ansible.content import Content, find_content
from toolkit.ansible.events import EventCollector, RunResult, summaries_from_stats
from toolkit.errors import ConfigError, PlaybookError
from toolkit.progress import Display
from toolkit.records import runs

# Extra variables are written to the run's artifacts (env/extravars), so secrets must never
# travel that way: names that look like one are refused.
SECRET_NAME = re.compile(r"(pass(word|wd)?|secret|token|api_?key|private_key$|credential)", re.I)

Listener = Callable[[EventCollector], None]


def check_extravars(extravars: Mapping[str, Any]) -> None:
    """Refuse extra variables whose names look like secrets (they are written to disk).

    Raises:
        ConfigError: Naming the variable and the rule.
    """
    for name in extravars:
        if SECRET_NAME.search(str(name)):
            raise ConfigError(
                f"extra variable {name!r} looks like a secret; extra variables are written to "
                "the run's artifacts, so pass secrets through Ansible Vault or the inventory"
            )


def ansible_env(content: Content) -> dict[str, str]:
    """Environment variables pointing Ansible at the project's content, host keys checked."""
    env = {
        "PATH": _search_path(),
        "ANSIBLE_ROLES_PATH": str(content.roles),
        "ANSIBLE_ACTION_PLUGINS": str(content.action_plugins),
        "ANSIBLE_LIBRARY": str(content.modules),
        "ANSIBLE_FILTER_PLUGINS": str(content.filter_plugins),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_NOCOLOR": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        # The action plugins import toolkit; make it importable whatever the working directory.
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")) if p
        ),
    }
    if content.config is not None:
        env["ANSIBLE_CONFIG"] = str(content.config)
    return env


def _search_path() -> str:
    # Run the ansible-playbook of this interpreter's environment (the one that has toolkit
    # installed), not whichever one is first on PATH. (ansible-runner's `binary` argument
    # would switch it to raw mode, dropping the playbook and options.)
    bin_dir = str(Path(sys.executable).parent)
    return os.pathsep.join([bin_dir, os.environ.get("PATH", "/usr/bin:/bin")])


def run_playbook(
    playbook: str,
    inventory: Path,
    *,
    limit: str | None = None,
    tags: Sequence[str] | None = None,
    check: bool = False,
    diff: bool = False,
    extravars: Mapping[str, Any] | None = None,
    forks: int | None = None,
    verbosity: int = 0,
    listeners: Sequence[Listener] = (),
    display: Display | None = None,
    raise_on_failure: bool = False,
    content: Content | None = None,
    cancel: Callable[[], bool] | None = None,
) -> RunResult:
    """Run one of gpunode's playbooks against an inventory through ansible-runner.

    Args:
        playbook: The playbook's file name or stem (``provision``).
        inventory: The inventory directory or file.
        limit: An Ansible host pattern (``--limit``).
        tags: Only tasks with these tags (``--tags``).
        check: Predict changes without making them (``--check``).
        diff: Show file differences (``--diff``).
        extravars: Extra variables (``-e``); no secrets (they are written to disk).
        forks: Parallel hosts (Ansible's default when None).
        verbosity: Ansible's verbosity (0-4), for the run's stdout artifact.
        listeners: Called with the collector after every event (live progress).
        display: A factory ``(playbook, check) -> context manager`` yielding a listener, for
            a live display that must be opened and closed around the run.
        raise_on_failure: Raise PlaybookError when any host failed or was unreachable.
        content: Where the playbooks and roles are (found automatically when None).
        cancel: Polled during the run; True stops the playbook. When None, SIGINT and
            SIGTERM stop it (handlers installed for the run only, then the previous ones
            restored: ansible-runner's own would stay installed after the run).

    Returns:
        The run's result: per-host counts, failures, facts set by tasks, stats data.

    Raises:
        ConfigError: Unknown playbook, missing inventory, or secret-looking extra variables.
        PlaybookError: ansible-runner could not start, or (``raise_on_failure``) the run failed.
        KeyboardInterrupt: The run was cancelled (a signal, or ``cancel`` said so).
    """
    import ansible_runner  # slow import: only when a playbook actually runs

    content = content or find_content()
    playbook_path = content.playbook(playbook)
    inventory = Path(inventory).resolve()
    if not inventory.exists():
        raise ConfigError(f"inventory {inventory} does not exist")
    extravars = dict(extravars or {})
    check_extravars(extravars)
    run_id, run_dir = _new_run_dir(playbook_path.name)
    # Roles stamp the node state with the run that wrote it.
    extravars.setdefault("gpunode_run_id", run_id)

    cmdline = [arg for flag, arg in ((check, "--check"), (diff, "--diff")) if flag]
    collector = EventCollector(listeners=list(listeners))
    cm: AbstractContextManager[Any] = (
        display(playbook_path.stem, check) if display is not None else nullcontext(None)
    )
    try:
        with cm as live, cancellation(cancel) as cancelled:
            if live is not None:
                collector.add_listener(live)
            runner = ansible_runner.run(
                private_data_dir=str(run_dir),
                ident=run_id,
                playbook=str(playbook_path),
                inventory=str(inventory),
                limit=limit,
                tags=",".join(tags) if tags else None,
                cmdline=" ".join(cmdline) or None,
                extravars=extravars,
                envvars=ansible_env(content),
                forks=forks,
                verbosity=verbosity or None,
                event_handler=collector.handle,
                cancel_callback=cancelled,
                quiet=True,
            )
    except Exception as err:  # ansible-runner raises plain exceptions when it cannot start
        if isinstance(err, (ConfigError, PlaybookError)):
            raise
        raise PlaybookError(f"could not run playbook {playbook_path.name}: {err}") from err
    if runner.status == "canceled":
        raise KeyboardInterrupt(f"playbook {playbook_path.stem} cancelled ({run_dir})")

    stats = runner.stats or collector.stats
    result = RunResult(
        run_id=run_id,
        playbook=playbook_path.stem,
        rc=int(runner.rc if runner.rc is not None else -1),
        status=str(runner.status),
        artifact_dir=str(run_dir / "artifacts" / run_id),
        check=check,
        hosts=summaries_from_stats(stats),
        failures=list(collector.failures),
        stats_data=dict(collector.stats_data),
        facts=collector.facts,
        results=collector.results,
        changes=collector.changes,
    )
    if raise_on_failure and not result.ok:
        raise PlaybookError(describe_failure(result))
    return result


@contextmanager
def cancellation(cancel: Callable[[], bool] | None) -> Iterator[Callable[[], bool]]:
    """The cancel callback for ansible-runner: ``cancel``, or one set by SIGINT/SIGTERM.

    ansible-runner installs its own handlers when given no callback and never restores the
    previous ones, which silently swallows every later Ctrl-C of the process; these are
    installed for the run only (main thread only: signals are delivered there).
    """
    if cancel is not None or threading.current_thread() is not threading.main_thread():
        yield cancel or (lambda: False)
        return
    event = threading.Event()
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda _signum, _frame: event.set())
    try:
        yield event.is_set
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _new_run_dir(label: str) -> tuple[str, Path]:
    run_dir = runs.start_run(runs.kind_name(label))
    return run_dir.name, run_dir


def run_module(
    module: str,
    inventory: Path,
    *,
    module_args: str = "",
    limit: str | None = None,
    forks: int | None = None,
    content: Content | None = None,
) -> RunResult:
    """Run one module ad hoc (``ansible HOSTS -m MODULE``) through ansible-runner.

    Each host's result is in ``RunResult.results``; used to read node state and to time
    ``ansible -m setup``.

    Raises:
        ConfigError: Missing inventory.
        PlaybookError: ansible-runner could not start.
    """
    import ansible_runner

    content = content or find_content()
    inventory = Path(inventory).resolve()
    if not inventory.exists():
        raise ConfigError(f"inventory {inventory} does not exist")
    run_id, run_dir = _new_run_dir(module.rsplit(".", 1)[-1])
    collector = EventCollector()
    try:
        with cancellation(None) as cancelled:
            runner = ansible_runner.run(
                private_data_dir=str(run_dir),
                ident=run_id,
                module=module,
                module_args=module_args or None,
                host_pattern=limit or "all",
                inventory=str(inventory),
                envvars=ansible_env(content),
                forks=forks,
                event_handler=collector.handle,
                cancel_callback=cancelled,
                quiet=True,
            )
    except Exception as err:
        raise PlaybookError(f"could not run module {module}: {err}") from err
    if runner.status == "canceled":
        raise KeyboardInterrupt(f"module {module} cancelled ({run_dir})")
    return RunResult(
        run_id=run_id,
        playbook=module,
        rc=int(runner.rc if runner.rc is not None else -1),
        status=str(runner.status),
        artifact_dir=str(run_dir / "artifacts" / run_id),
        hosts=summaries_from_stats(runner.stats or collector.stats),
        failures=list(collector.failures),
        facts=collector.facts,
        results=collector.results,
    )


def describe_failure(result: RunResult) -> str:
    """One message for a failed run: every failure with host, task and message."""
    if not result.failures:
        return (
            f"playbook {result.playbook} failed (status {result.status}, rc {result.rc}); "
            f"see {result.artifact_dir}/stdout"
        )
    lines = [
        f"playbook {result.playbook} failed on {len({f.host for f in result.failures})} host(s):"
    ]
    for failure in result.failures:
        what = "unreachable" if failure.unreachable else f"task '{failure.task}'"
        lines.append(f"  {failure.host}: {what}: {failure.message}")
    return "\n".join(lines)
