"""Run a rendered playbook with ansible-runner: one line per task result while it runs, a per-host summary after.

Exit codes (provision.errors): 0 every host ok, 1 a host failed, 3 a host was unreachable or Ansible could not run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK, RunnerError
from provision.resources import share_dir

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass
class RunResult:
    status: str  # ansible-runner's: successful | failed | timeout | canceled
    rc: int
    seconds: float
    hosts: dict[str, HostStats] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # "host: task: msg", one per failed task
    host_failures: dict[str, tuple[str, str]] = field(default_factory=dict)  # host -> (first failed task, msg)
    # Seconds each task took, summed over hosts (from the events' durations): where a run's time goes (bench/).
    task_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if any(h.unreachable for h in self.hosts.values()) or not self.hosts:
            return EXIT_EXTERNAL
        if any(h.failed for h in self.hosts.values()) or self.rc != 0:
            return EXIT_FAILED
        return EXIT_OK

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())[:300]


# What a failed task's output means, for the one line a person reads first. Order: most specific first.
_CAUSES = (
    ("No space left on device", "the disk is full on the host"),
    ("Read-only file system", "a file system is read-only on the host"),
    ("Temporary failure in name resolution", "the host cannot resolve a package source's name"),
    ("Failed to establish a new connection", "a package source is unreachable from the host"),
    ("Connection refused", "a package source refused the connection"),
    ("Could not resolve", "the host cannot resolve a package source's name"),
    ("Failed to fetch", "a package source is unreachable from the host"),
    ("Failed to update apt cache", "apt could not read its package sources"),
    ("(from versions: none)", "the package index the host uses listed no versions at all (unreachable, or a wrong "
                              "index URL)"),
    ("No matching distribution found", "a planned version is not on the package index the host uses"),
    ("Could not get lock", "another process holds the apt/dpkg lock"),
)


def failure_message(res: dict[str, Any]) -> str:
    """One line for a failed task: the cause when the output shows a known one, then the module's own words."""
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items:  # a loop: the first failed item says what went wrong
        return failure_message(items[0])
    text = " ".join(str(res.get(k) or "") for k in ("msg", "stderr", "stdout", "module_stderr", "reason"))
    own = _one_line(res.get("msg") or res.get("stderr") or res.get("module_stderr") or res.get("reason") or "")
    for needle, cause in _CAUSES:
        if needle in text:
            # The module's message often starts with pages of progress; keep the part that names the error.
            at = own.find(needle)
            detail = own[max(0, at - 120):at + 180] if at > 120 else own[:300]
            return f"{cause}: {detail}"
    return own


def task_line(event: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """(host, task, state, message) for a task-result event, None for any other event."""
    state = _RESULT_EVENTS.get(event.get("event", ""))
    if state is None:
        return None
    data = event.get("event_data", {})
    res = data.get("res") or {}
    if state == "ok" and res.get("changed"):
        state = "changed"
    msg = ""
    if state in ("failed", "unreachable"):
        if data.get("ignore_errors"):
            state = "ignored"
        msg = failure_message(res)
    return data.get("host", "?"), data.get("task", "?"), state, msg


def strategy_env() -> dict[str, str]:
    """Run plays with Mitogen's free strategy when it is installed (a dependency of provision): it keeps one Python
    interpreter per host for the whole play instead of starting one per task, and lets each host go at its own
    pace. On 8 container hosts a converged re-apply took 163 s with it, 181 s with mitogen_linear and 440 s with
    Ansible's linear strategy (docs/fleet.md). PROVISION_ANSIBLE_STRATEGY=linear (or free) turns Mitogen off."""
    wanted = os.environ.get("PROVISION_ANSIBLE_STRATEGY", "mitogen_free")
    if not wanted.startswith("mitogen"):
        return {"ANSIBLE_STRATEGY": wanted}
    try:
        import ansible_mitogen
    except ImportError:
        return {}
    plugins = Path(ansible_mitogen.__file__).resolve().parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": wanted}


def run_playbook(
    project_dir: str | Path,
    inventory: str | Path,
    *,
    limit: str | None = None,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
    forks: int | None = None,
    on_task: Callable[[str, str, str, str], None] | None = None,
    on_start: Callable[[str], None] | None = None,
) -> RunResult:
    """Run project_dir/site.yml against inventory; call on_task(host, task, state, msg) for each task result
    and on_start(task) when a task starts (the CLI shows it while it runs: apt and pip tasks take minutes)."""
    try:
        import ansible_runner
    except ImportError:
        raise RunnerError("ansible-runner is not installed (pip install ansible-runner)") from None
    cmdline = " ".join(x for x in ("--check" if check else "", "--diff" if diff else "") if x)
    failures: list[str] = []
    host_failures: dict[str, tuple[str, str]] = {}

    final: dict[str, Any] = {}
    task_seconds: dict[str, float] = {}

    def handler(event: dict[str, Any]) -> bool:
        if event.get("event") == "playbook_on_stats":
            final.update(event.get("event_data", {}))
        if on_start and event.get("event") == "playbook_on_task_start":
            on_start(event.get("event_data", {}).get("task", "?"))
        line = task_line(event)
        if line is not None:
            host, task, state, msg = line
            duration = event.get("event_data", {}).get("duration")
            if isinstance(duration, (int, float)):
                task_seconds[task] = task_seconds.get(task, 0.0) + duration
            if state in ("failed", "unreachable"):
                failures.append(f"{host}: {task}: {msg}")
                host_failures.setdefault(host, (task, msg))
            if on_task:
                on_task(host, task, state, msg)
        return False  # do not keep the event files: they hold every task's full result

    # Ctrl-C: let ansible-runner stop ansible-playbook (it runs in its own terminal session, which a terminal's
    # SIGINT does not reach), then raise KeyboardInterrupt here, once the run has ended.
    import signal
    import threading

    interrupted = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda *_: interrupted.set())

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="provision-runner-") as private:
        try:
            runner = ansible_runner.run(
                private_data_dir=private,
                project_dir=str(Path(project_dir).resolve()),
                playbook="site.yml",
                inventory=str(Path(inventory).resolve()),
                roles_path=[str(share_dir("roles"))],
                limit=limit,
                tags=tags,
                cmdline=cmdline or None,
                forks=forks,
                envvars={"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
                         # One connection round trip per task instead of four (needs no `requiretty` in sudoers,
                         # which no supported OS sets). Measured with bench/fleet.py (docs/fleet.md).
                         "ANSIBLE_PIPELINING": "1",
                         # ansible-playbook from this interpreter's environment, activated or not.
                         "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                         **strategy_env()},
                event_handler=handler,
                cancel_callback=interrupted.is_set,
                quiet=True,
            )
        except Exception as exc:  # ansible-runner raises plain exceptions for a bad setup
            raise RunnerError(f"ansible-runner could not start the playbook: {_one_line(exc)}") from None
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        if interrupted.is_set():
            raise KeyboardInterrupt
        stats = final or runner.stats or {}
        if not stats and runner.rc != 0:
            tail = [ln for ln in runner.stdout.read().splitlines() if ln.strip()][-3:]
            raise RunnerError(f"ansible-playbook could not run (exit {runner.rc}): " + " | ".join(_one_line(t) for t in tail))
    hosts: dict[str, HostStats] = {}
    for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"), ("dark", "unreachable"),
                      ("skipped", "skipped")):
        for host, count in (stats.get(key) or {}).items():
            setattr(hosts.setdefault(host, HostStats()), attr, count)
    return RunResult(status=runner.status, rc=runner.rc, seconds=time.monotonic() - started, hosts=hosts,
                     failures=failures, host_failures=host_failures, task_seconds=task_seconds)
