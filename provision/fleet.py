"""Many hosts in one apply: which profile each host gets, one playbook for all, a result and a record per host.

    inventory ──ansible-inventory──▶ hosts and their variables
      provision_profile / provision_os per host or group (else the command line's PROFILE / --os)
    ──▶ one Plan per (profile, OS), every one resolved before any host is touched
    ──▶ render_fleet: one play per Plan, all in one ansible-playbook run (forks = number of hosts)
    ──▶ per host: result (ok / failed / unreachable / interrupted / not run), the failed step, verify figures
    ──▶ controller state (provision.state): the per-host record, the run's results for `--failed`

The CLI prints; this module decides.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK, ProvisionError, RunnerError, UsageError
from provision.models import Plan

PROFILE_VAR = "provision_profile"
OS_VAR = "provision_os"
MAX_FORKS = 64


@dataclass
class Group:
    """Hosts that get the same Plan."""

    plan: Plan
    profile: str  # as the user wrote it (inventory variable or command line)
    os: str | None
    hosts: list[str]
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)  # as the inventory gives them


@dataclass
class HostResult:
    host: str
    profile: str
    result: str  # ok | failed | unreachable | interrupted | not run
    changed: int = 0
    step: str = ""  # the task that failed
    message: str = ""
    verify: dict[str, Any] | None = None
    installed: dict[str, Any] | None = None

    def to_state(self) -> dict[str, Any]:
        return {"result": self.result, "profile": self.profile, "step": self.step, "message": self.message}


@dataclass
class FleetResult:
    groups: list[Group]
    hosts: dict[str, HostResult] = field(default_factory=dict)
    seconds: float = 0.0
    status: str = ""
    task_seconds: dict[str, float] = field(default_factory=dict)  # per task, summed over hosts

    @property
    def exit_code(self) -> int:
        results = {h.result for h in self.hosts.values()}
        if not self.hosts:
            return EXIT_EXTERNAL
        if results & {"unreachable"}:
            return EXIT_EXTERNAL
        if results - {"ok"}:
            return EXIT_FAILED
        return EXIT_OK

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def inventory_hostvars(inventory: Path | dict[str, Any], limit: str | None = None) -> dict[str, dict[str, Any]]:
    """Every host the inventory (static file, plugin config or a dict) names, with its variables, after --limit."""
    if isinstance(inventory, dict):
        hosts: dict[str, dict[str, Any]] = {}

        def walk(group: dict[str, Any], inherited: dict[str, Any]) -> None:
            here = {**inherited, **(group.get("vars") or {})}
            for name, hv in (group.get("hosts") or {}).items():
                hosts[name] = {**hosts.get(name, {}), **here, **(hv or {})}
            for child in (group.get("children") or {}).values():
                walk(child or {}, here)

        for group in inventory.values():
            walk(group or {}, {})
        if limit:
            wanted = set(limit.replace(":", ",").split(","))
            hosts = {h: v for h, v in hosts.items() if h in wanted}
        return hosts
    cmd = [_bin("ansible-inventory"), "-i", str(inventory), "--list"]
    if limit:
        cmd += ["--limit", limit]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise RunnerError("ansible-inventory is not installed next to provision (pip install ansible-core)") from None
    if proc.returncode != 0:
        tail = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
        raise UsageError(f"{inventory}: ansible-inventory could not read it: {tail}")
    try:
        data = json.loads(proc.stdout or "{}")
    except ValueError:
        raise RunnerError(f"{inventory}: ansible-inventory printed something that is not JSON") from None
    hostvars = data.get("_meta", {}).get("hostvars", {})
    names: set[str] = set()

    def members(group: str, seen: set[str]) -> None:
        if group in seen:
            return
        seen.add(group)
        names.update(data.get(group, {}).get("hosts", []))
        for child in data.get(group, {}).get("children", []):
            members(child, seen)

    members("all", set())
    return {h: hostvars.get(h, {}) for h in sorted(names)}


def find_profile(value: str, inventory: Path | None) -> Path:
    """A provision_profile value: a path (relative to the inventory's folder, then to here) or a shipped name."""
    from provision.resources import share_dir

    candidates = []
    raw = Path(value)
    if raw.is_absolute():
        candidates.append(raw)
    else:
        if inventory is not None:
            candidates.append(inventory.parent / raw)
        candidates.append(Path.cwd() / raw)
        if "/" not in value:
            shipped = share_dir("profiles")
            candidates += [shipped / value, shipped / f"{value}.yaml"]
    for path in candidates:
        if path.is_file():
            return path
    raise UsageError(f"{PROFILE_VAR} '{value}' not found (looked for {', '.join(str(c) for c in candidates)})")


def assign(hostvars: dict[str, dict[str, Any]], profile: Path | None, os_override: str | None,
           inventory: Path | None) -> list[Group]:
    """Group the hosts by (profile, OS) and resolve each group's Plan. Any refusal stops here, before any host is
    touched, and names the hosts it concerns."""
    from provision.pipeline import display_path, plan_for

    if not hostvars:
        raise UsageError(f"{inventory or 'the inventory'}: no hosts to apply to (check the inventory and --limit)")
    keyed: dict[tuple[str, str | None], list[str]] = {}
    paths: dict[str, Path] = {}
    missing = []
    for host, hv in sorted(hostvars.items()):
        value = hv.get(PROFILE_VAR)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"{inventory}: host {host}: {PROFILE_VAR} must be a path or a profile name, "
                             f"not {type(value).__name__}")
        if value:
            try:
                path = find_profile(value, inventory)
            except UsageError as exc:
                raise UsageError(f"{inventory}: host {host}: {exc}") from None
        elif profile is not None:
            path = profile
        else:
            missing.append(host)
            continue
        host_os = os_override or hv.get(OS_VAR) or None
        if host_os is not None and not isinstance(host_os, str):
            raise UsageError(f"{inventory}: host {host}: {OS_VAR} must be a string such as debian-13")
        label = display_path(path)
        paths[label] = path
        keyed.setdefault((label, host_os), []).append(host)
    if missing:
        raise UsageError(f"no profile for host(s) {', '.join(missing)}: give PROFILE on the command line or set "
                         f"{PROFILE_VAR} for them in {inventory or 'the inventory'}")
    groups = []
    for (label, host_os), hosts in keyed.items():
        try:
            plan = plan_for(paths[label], os_override=host_os)
        except ProvisionError as exc:
            if hasattr(exc, "where") and len(keyed) > 1:  # IncompatibleError: say which hosts it concerns
                exc.where = f"{exc.where or label} (hosts {', '.join(hosts)})"
            raise
        groups.append(Group(plan=plan, profile=label, os=host_os, hosts=hosts,
                            hostvars={h: hostvars[h] for h in hosts}))
    return groups


def forks_for(hosts: int) -> int:
    """Every host at once, up to MAX_FORKS: the work on a host is mostly waiting for apt, pip and the network."""
    return max(1, min(hosts, MAX_FORKS))


def apply_groups(
    groups: list[Group],
    inventory: Path | dict[str, Any],
    inventory_key: str,
    *,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
    skip_frameworks: bool = False,
    on_task: Callable[[str, str, str, str], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    keep_dir: Path | None = None,
    sandboxes: list[str] | None = None,
) -> FleetResult:
    """Render one playbook for every group and run it once. Records what each host got on the controller."""
    import tempfile

    from provision import state
    from provision.render.ansible import plan_digest, render_fleet
    from provision.runners.ansible import run_playbook

    targets = {h: g for g in groups for h in g.hosts}
    fleet = FleetResult(groups=groups)
    if sandboxes:  # sandbox hosts share the controller's wheelhouse: fill it once for every plan
        from provision.sandbox import fill_wheelhouse

        for group in groups:
            if set(group.hosts) & set(sandboxes):
                fill_wheelhouse(group.plan, skip_frameworks=skip_frameworks, log=on_start)
    single = len(groups) == 1
    with tempfile.TemporaryDirectory(prefix="provision-apply-") as tmp:
        work = keep_dir or Path(tmp)
        files = render_fleet([(g.plan, None if single else g.hosts) for g in groups], work, inventory=inventory,
                             skip_frameworks=skip_frameworks)
        started = time.monotonic()
        try:
            run = run_playbook(work, files["inventory"], limit=",".join(sorted(targets)), check=check, diff=diff,
                               tags=tags, forks=forks_for(len(targets)), on_task=on_task, on_start=on_start)
        except KeyboardInterrupt:
            if not check:
                state.write_run(inventory_key, {h: HostResult(h, targets[h].profile, "interrupted",
                                                              message="the apply was interrupted").to_state()
                                                for h in targets})
            raise
        fleet.seconds, fleet.status, fleet.task_seconds = time.monotonic() - started, run.status, run.task_seconds
        reports = work / "reports"
        for host, group in targets.items():
            stats = run.hosts.get(host)
            step, msg = run.host_failures.get(host, ("", ""))
            if stats is None:
                result = "not run"
                msg = msg or "Ansible did not reach this host (see the lines above)"
            elif stats.unreachable:
                result = "unreachable"
            elif stats.failed or step:
                result = "failed"
            else:
                result = "ok"
            hr = HostResult(host, group.profile, result, changed=stats.changed if stats else 0, step=step, message=msg)
            verify_file, record_file = reports / host / "verify.json", reports / host / "applied.json"
            if verify_file.is_file():
                hr.verify = _read_json(verify_file)
            if record_file.is_file():
                hr.installed = _read_json(record_file)
            fleet.hosts[host] = hr
            if result == "ok" and not check:
                state.write_record(host, {
                    "profile": group.profile,
                    "os": group.os,
                    "digest": plan_digest(group.plan),
                    "applied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "tags": tags,
                    "frameworks_skipped": skip_frameworks,
                    "plan": group.plan.model_dump(mode="json"),
                    "installed": {k: (hr.installed or {}).get(k, {}) for k in ("packages", "wheels")},
                    "verify": hr.verify,
                })
        if not check:
            state.write_run(inventory_key, {h: r.to_state() for h, r in fleet.hosts.items()})
    return fleet


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def verify_line(report: dict[str, Any] | None) -> str:
    """The verifier's verdict and figures in one line, for the per-host summary."""
    if not report:
        return "no verification report"
    summary = report.get("summary", {})
    mode = "compile-only" if report.get("mode") == "compile-only" else "on the GPU"
    text = (f"verify {report.get('status', '?')} ({mode}): {summary.get('passed', 0)} passed, "
            f"{summary.get('failed', 0)} failed")
    figures = report.get("figures") or {}
    if figures:
        text += "; " + ", ".join(f"{k}={v}" for k, v in figures.items())
    return text


def check_hosts(groups: list[Group], inventory: Path | dict[str, Any], hosts: list[str], *,
                skip_frameworks: bool = False, echo: Callable[[str], None] | None = None) -> dict[str, int]:
    """`provision check` on each host (testinfra, one process per host, a few at a time). Returns host -> exit code."""
    from concurrent.futures import ThreadPoolExecutor

    from provision.apply import Hosts, run_check

    by_host = {h: g for g in groups for h in g.hosts if h in hosts}
    lines: dict[str, list[str]] = {h: [] for h in by_host}

    def one(host: str) -> int:
        return run_check(by_host[host].plan, Hosts(inventory=inventory), only=[host], skip_frameworks=skip_frameworks,
                         echo=lines[host].append)

    with ThreadPoolExecutor(max_workers=max(1, min(4, len(by_host)))) as pool:
        codes = dict(zip(by_host, pool.map(one, by_host), strict=True))
    if echo:
        for host in sorted(by_host):
            for line in lines[host]:
                echo(f"{host}: {line}" if len(by_host) > 1 else line)
    return codes
