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
        msg = _one_line(res.get("msg") or res.get("stderr") or res.get("reason") or "")
    return data.get("host", "?"), data.get("task", "?"), state, msg


def run_playbook(
    project_dir: str | Path,
    inventory: str | Path,
    *,
    limit: str | None = None,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
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

    final: dict[str, Any] = {}

    def handler(event: dict[str, Any]) -> bool:
        if event.get("event") == "playbook_on_stats":
            final.update(event.get("event_data", {}))
        if on_start and event.get("event") == "playbook_on_task_start":
            on_start(event.get("event_data", {}).get("task", "?"))
        line = task_line(event)
        if line is not None:
            host, task, state, msg = line
            if state in ("failed", "unreachable"):
                failures.append(f"{host}: {task}: {msg}")
            if on_task:
                on_task(host, task, state, msg)
        return False  # do not keep the event files: they hold every task's full result

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
                envvars={"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
                         # ansible-playbook from this interpreter's environment, activated or not.
                         "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])},
                event_handler=handler,
                quiet=True,
            )
        except Exception as exc:  # ansible-runner raises plain exceptions for a bad setup
            raise RunnerError(f"ansible-runner could not start the playbook: {_one_line(exc)}") from None
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
                     failures=failures)
