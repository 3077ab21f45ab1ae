"""Stage `run`: the rendered folder run once by ansible-playbook on every host of the run (forks = hosts, up to
MAX_FORKS), through the ansible-runner adapter (provision.runners.ansible); each raw event goes to stage `events` as
it comes. Before the play, a host whose inventory says StrictHostKeyChecking=accept-new gets one ssh connection of
its own (provision.ssh.accept_new_host_keys), which Mitogen's connections would shadow. A sandbox is started here,
after the confirmation prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from provision import sandbox
from provision.models import Plan
from provision.pipeline.preflight import sandbox_release
from provision.pipeline.targets import Targets
from provision.request import ApplyRequest
from provision.runners.ansible import RunResult, run_playbook
from provision.ssh import accept_new_host_keys, configured_host_key_checking

MAX_FORKS = 64


def forks_for(hosts: int) -> int:
    """Every host at once, up to MAX_FORKS: the work on a host is mostly waiting for apt, pip and the network."""
    return max(1, min(hosts, MAX_FORKS))


def start_sandbox(plan: Plan, name: str, *, log: Callable[[str], None] | None = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Start the sandbox container `name` for this plan unless it runs; returns its inventory (its SSH port)."""
    release = sandbox_release(plan)
    if not sandbox.is_running(name):
        sandbox.start(name, release, log=log, progress=progress)
    return sandbox.inventory([name])


def run(work: Path, inventory: Path, found: Targets, request: ApplyRequest, *,
        on_event: Callable[[dict[str, Any]], None], hosts: list[str] | None = None) -> RunResult:
    """Run work/site.yml on the targets' hosts (hosts: only these of them; the others the fast re-apply's round trip
    finished) through `inventory` (a file inventory where it is: its group_vars/, host_vars/ and plugin name only
    mean something there; a sandbox's as render wrote it), as the request asks (--dry-run is Ansible's check mode)."""
    hosts = found.hosts if hosts is None else hosts
    accept_new_host_keys({h.name: h.keys for h in found.records if h.keys is not None and h.name in hosts})
    return run_playbook(work, inventory, request, limit=",".join(sorted(hosts)), forks=forks_for(len(hosts)),
                        on_event=on_event, host_key_checking=configured_host_key_checking()[0])
