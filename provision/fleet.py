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

import getpass
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from provision import procs, sandbox, state
from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_INPUT, EXIT_OK, ProvisionError, RunnerError, UsageError
from provision.installer import fetch as fetch_installer
from provision.interpreters import fetch as fetch_interpreter
from provision.loader import PYTHON_MIRROR, parse_python_mirror
from provision.models import Plan
from provision.pipeline import display_path, plan_for
from provision.render.ansible import check_ansible_path, plan_digest, render_fleet, roles_version
from provision.resources import share_dir
from provision.runners.ansible import accept_new_host_keys, run_playbook, write_host_key_vars
from provision.runners.testinfra import run_check
from provision.state import StateError, write_record

PROFILE_VAR = "provision_profile"
OS_VAR = "provision_os"
PYTHON_MIRROR_VAR = "provision_python_mirror"
MAX_FORKS = 64
# How roles/preflight's refusals begin: a host failed with one is "refused" (nothing was changed on it).
PREFLIGHT_REFUSAL = "preflight: "


@dataclass
class Group:
    """Hosts that get the same Plan."""

    plan: Plan
    profile: str  # as the user wrote it (inventory variable or command line)
    os: str | None
    hosts: list[str]
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)  # as the inventory gives them
    frameworks_skipped: bool = False  # recorded by the apply these hosts are checked against (check_groups)


@dataclass
class HostResult:
    host: str
    profile: str
    result: str  # ok | failed | refused (by the preflight, nothing changed) | unreachable | interrupted | not run
    changed: int = 0
    step: str = ""  # the task that failed
    message: str = ""
    verify: dict[str, Any] | None = None
    installed: dict[str, Any] | None = None
    unpredicted: list[str] = field(default_factory=list)  # --check: what the roles could not predict
    path: str = ""  # "fast (fingerprint matches)" or "full (why)", as the preflight said; "" when it did not run
    notes: list[str] = field(default_factory=list)  # what the apply found and finished on its way (host_record)

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
        if results == {"refused"}:  # the preflight refused the run before the first change on any host
            return EXIT_INPUT
        if results - {"ok"}:
            return EXIT_FAILED
        return EXIT_OK

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def inventory_hostvars(inventory: Path | dict[str, Any], limit: str | None = None, *,
                       vault_password_file: Path | None = None) -> dict[str, dict[str, Any]]:
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
    check_ansible_path(inventory, "--inventory")
    cmd = [_bin("ansible-inventory"), "-i", str(inventory), "--list"]
    if vault_password_file:
        cmd += ["--vault-password-file", str(vault_password_file)]
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


def profile_label(value: str, path: Path) -> str:
    """A provision_profile value as the summary shows it: a shipped profile by the name the user wrote (`deskmini`,
    not the path inside the installed package), any other file as pipeline.display_path gives it."""
    if "/" not in value and path.resolve().parent == share_dir("profiles").resolve():
        return value
    return display_path(path)


def assign(hostvars: dict[str, dict[str, Any]], profile: Path | None, os_override: str | None,
           inventory: Path | None, *, indexes: dict[str, Any] | None = None,
           require_password: bool = True) -> list[Group]:
    """Group the hosts by (profile, OS) and resolve each group's Plan. Any refusal stops here, before any host is
    touched, and names the hosts it concerns. require_password: a plan whose Jupyter logs in with a password needs
    it from the inventory (False: it is given otherwise, --ask-jupyter-pass, or not needed, check and destroy)."""
    if not hostvars:
        raise UsageError(f"{inventory or 'the inventory'}: no hosts to apply to (check the inventory and --limit)")
    keyed: dict[tuple[str, str | None, str | None], list[str]] = {}
    paths: dict[str, Path] = {}
    shown: dict[str, str] = {}  # what the summary and the records call the profile
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
        mirror = hv.get(PYTHON_MIRROR_VAR)
        if mirror is not None and not isinstance(mirror, str):
            raise UsageError(f"{inventory}: host {host}: {PYTHON_MIRROR_VAR} must be a directory or an http(s) URL")
        if mirror and not (indexes or {}).get(PYTHON_MIRROR):  # --python-mirror on the command line wins
            try:
                mirror = parse_python_mirror(mirror, base=inventory.parent if inventory else None,
                                             what=PYTHON_MIRROR_VAR)
            except ProvisionError as exc:
                raise UsageError(f"{inventory}: host {host}: {'; '.join(exc.lines())}") from None
        else:
            mirror = None
        label = display_path(path)
        paths[label] = path
        shown.setdefault(label, profile_label(value, path) if value else label)
        keyed.setdefault((label, host_os, mirror), []).append(host)
    if missing:
        raise UsageError(f"no profile for host(s) {', '.join(missing)}: give PROFILE on the command line or set "
                         f"{PROFILE_VAR} for them in {inventory or 'the inventory'}")
    groups = []
    for (label, host_os, mirror), hosts in keyed.items():
        overrides = {**(indexes or {}), **({PYTHON_MIRROR: mirror} if mirror else {})} or None
        try:
            # overrides: --index and --python-mirror, else the hosts' provision_python_mirror
            plan = plan_for(paths[label], os_override=host_os, indexes=overrides)
        except ProvisionError as exc:
            if hasattr(exc, "where") and len(keyed) > 1:  # IncompatibleError: say which hosts it concerns
                exc.where = f"{exc.where or label} (hosts {', '.join(hosts)})"
            raise
        groups.append(Group(plan=plan, profile=shown[label], os=host_os, hosts=hosts,
                            hostvars={h: hostvars[h] for h in hosts}))
    if require_password:
        _require_secrets(groups, inventory)
    return groups


def _require_secrets(groups: list[Group], inventory: Path | None) -> None:
    """A plan whose Jupyter logs in with a password needs that password from the inventory (vaulted or not; the role
    stores only its hash) or from `apply --ask-jupyter-pass`: refused here, before any host is touched, not by the
    role's assert halfway through."""
    missing = [h for g in groups if g.plan.jupyter.enabled and g.plan.jupyter.auth == "password"
               for h in g.hosts if not g.hostvars.get(h, {}).get("jupyter_password")]
    if missing:
        where = ("add it to the inventory (encrypted: ansible-vault encrypt_string --stdin-name jupyter_password), "
                 "give it with --ask-jupyter-pass") if inventory else "give it with --ask-jupyter-pass"
        raise UsageError(f"{inventory or 'the sandbox'}: host(s) {', '.join(missing)}: jupyter.auth is 'password' "
                         f"and no jupyter_password is set for them: {where}, or use auth: token")


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
    on_path: Callable[[str, str], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    keep_dir: Path | None = None,
    sandboxes: list[str] | None = None,
    become_password: str | None = None,
    vault_password_file: Path | None = None,
    destroy: bool = False,
    purge_home: bool = False,
    full: bool = False,
    jupyter_password: str | None = None,
) -> FleetResult:
    """Render one playbook for every group and run it once. Records what each host got on the controller.
    destroy: the playbook only removes what each host's ledger lists (`provision destroy`), and the host's records
    go. full: no host takes the fast path (each host's fingerprint decides otherwise; docs/hosts.md); on_path(host,
    path) is called as each host's preflight says which path it takes. jupyter_password (apply --ask-jupyter-pass):
    the password of every host whose plan's Jupyter logs in with one, handed to Ansible as become_password is; it
    takes the full path (the fingerprint cannot say whether the password changed)."""
    targets = {h: g for g in groups for h in g.hosts}
    fleet = FleetResult(groups=groups)
    record_failed: StateError | None = None
    # One apply at a time per inventory and per host on this controller: a second one is refused, naming the first
    # (procs.exclusive), instead of racing it on the same hosts. The kernel drops the locks if this process dies.
    where = f"sandbox {inventory_key[8:]}" if inventory_key.startswith("sandbox:") else inventory_key
    locks = {f"inventory-{state.run_key(inventory_key)}.lock": where}
    locks |= {f"host-{state.run_key(h)}.lock": f"host {h}" for h in targets}
    # A lock a provision killed with -9 left is taken over, and on_note says whose it was.
    with procs.exclusive(locks, directory=state.state_dir() / "locks", on_stale=on_note):
        if sandboxes and not destroy:  # sandbox hosts share the controller's wheelhouse: fill it once for every plan
            for group in groups:
                if set(group.hosts) & set(sandboxes):
                    sandbox.fill_wheelhouse(group.plan, skip_frameworks=skip_frameworks, log=on_start)
        # A managed interpreter's archive, fetched once into the controller's cache and checked against the sha256s
        # provision trusts before any host is touched (provision.interpreters); the hosts get it from here.
        interpreters: dict[str, tuple[str, str]] = {}
        for group in [] if destroy else groups:
            if group.plan.python.managed is not None:
                path, sha = fetch_interpreter(group.plan.python.managed, log=on_start)
                interpreters[group.plan.python.managed.archive] = (str(path), sha)
            if group.plan.python.installer is not None:  # uv's wheel, through the wheelhouse (provision.installer)
                path, sha = fetch_installer(group.plan.python.installer, index_url=group.plan.pip_index_url,
                                            log=on_start)
                interpreters[group.plan.python.installer.wheel] = (str(path), sha)
        single = len(groups) == 1
        with tempfile.TemporaryDirectory(prefix="provision-apply-") as tmp:
            work = keep_dir or Path(tmp)
            files = render_fleet([(g.plan, None if single else g.hosts) for g in groups], work, inventory=inventory,
                                 skip_frameworks=skip_frameworks, destroy=destroy, purge_home=purge_home,
                                 full=("--full asked for it" if full else "--tags applies part of the plan" if tags
                                       else "--ask-jupyter-pass gave a password" if jupyter_password else ""),
                                 partial=bool(tags), interpreters=interpreters, lock=lock_holder())
            write_host_key_vars(work, {h: g.hostvars.get(h, {}) for g in groups for h in g.hosts})
            # StrictHostKeyChecking=accept-new in the inventory, which Mitogen's ssh would shadow
            accept_new_host_keys({h: g.hostvars.get(h, {}) for h, g in targets.items()})
            started = time.monotonic()
            try:
                # A file inventory is used where it is: its group_vars/, host_vars/ and plugin name (aws_ec2.yml)
                # only mean something there.
                inv_path = inventory if isinstance(inventory, Path) else files["inventory"]
                run = run_playbook(work, inv_path, limit=",".join(sorted(targets)), check=check, diff=diff,
                                   tags=tags, forks=forks_for(len(targets)), on_task=on_task, on_start=on_start,
                                   on_path=on_path,
                                   become_password=become_password, vault_password_file=vault_password_file,
                                   jupyter_password=jupyter_password)
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
                elif (stats.failed or step) and msg.startswith(PREFLIGHT_REFUSAL) and not stats.changed:
                    result = "refused"
                elif stats.failed or step:
                    result = "failed"
                else:
                    result = "ok"
                hr = HostResult(host, group.profile, result, changed=stats.changed if stats else 0, step=step, message=msg,
                                unpredicted=run.unpredicted.get(host, []), path=run.paths.get(host, ""))
                verify_file, record_file = reports / host / "verify.json", reports / host / "applied.json"
                if verify_file.is_file():
                    hr.verify = _read_json(verify_file)
                if record_file.is_file():
                    hr.installed = _read_json(record_file)
                hr.notes = _read_notes(reports / host / "notes.json")
                fleet.hosts[host] = hr
                if result == "ok" and not check and destroy:
                    state.forget_host(host)
                elif result == "ok" and not check:
                    record_failed = record_failed or _write_record(host, {
                        "profile": group.profile,
                        "os": group.os,
                        "digest": plan_digest(group.plan),
                        "applied_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "tags": tags,
                        "frameworks_skipped": skip_frameworks,
                        "plan": group.plan.model_dump(mode="json"),
                        "roles": roles_version(),  # what the hosts ran (render.ansible.roles_version)
                        "path": hr.path,
                        "installed": {k: (hr.installed or {}).get(k, {}) for k in ("packages", "wheels")},
                        "verify": hr.verify,
                    })
                ledger = _read_json(reports / host / "ledger.json")
                if ledger is not None and not check and not destroy and stats is not None and not stats.unreachable:
                    try:
                        state.write_ledger(host, ledger)
                    except StateError as exc:
                        record_failed = record_failed or exc
            if not check:
                # The run's results are written even when a host's record could not be (a full disk): `--failed`
                # needs them. Then the first record that failed is reported (exit 3).
                state.write_run(inventory_key, {h: r.to_state() for h, r in fleet.hosts.items()})
                if record_failed:
                    raise record_failed
    return fleet


def lock_holder() -> dict[str, Any]:
    """Who takes each host's apply lock (roles/preflight's gate, plugins/modules/provision_lock.py): this run's token
    (its processes carry it), this controller's name and machine-id, the account, pid, start and command; and the
    runs still going on this controller, by which the host tells a lock of ours left by a run that is gone."""
    try:
        machine_id = Path("/etc/machine-id").read_text().strip()
    except OSError:
        machine_id = ""
    holder = {"token": procs.run_token(), "controller": socket.gethostname(), "machine_id": machine_id,
              "user": getpass.getuser(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "command": shlex.join(["provision", *sys.argv[1:]])[:300]}
    return {"holder": holder, "live_tokens": sorted(procs.live_tokens() | {holder["token"]})}


def _write_record(host: str, record: dict[str, Any]) -> StateError | None:
    try:
        write_record(host, record)
    except StateError as exc:
        return exc
    return None


def _read_notes(path: Path) -> list[str]:
    """The notes host_record handed over (notes.json: a list of lines); none when there is no such file."""
    try:
        notes = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [str(n) for n in notes] if isinstance(notes, list) else []


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


def verify_verdict(report: dict[str, Any] | None) -> str:
    """The verifier's verdict in a few words, for the summary table (verify_line, under the table, has the figures)."""
    if not report:
        return "no verify report"
    return f"verify {report.get('status', '?')}" + (" (compile-only)" if report.get("mode") == "compile-only" else "")


def path_word(r: HostResult) -> str:
    """The path a host took, one word for the summary table: fast, full, or "" when the preflight did not say."""
    return r.path.split(" ", 1)[0] if r.path else ""


def summary_rows(fleet: FleetResult, *, check: bool = False) -> list[tuple[str, str, str, str, str]]:
    """The apply summary's table, short cells only: host, profile, result (with the path a host that succeeded took:
    "ok (fast)", "ok (full)"), changed, the failed step or the verdict. The long texts (a failure's cause, the
    verifier's figures, why a host took the full path) are summary_lines', printed under the table."""
    rows = []
    for host, r in sorted(fleet.hosts.items()):
        short = (r.step or r.result) if r.result != "ok" else ("" if check else verify_verdict(r.verify))
        result = f"ok ({path_word(r)})" if r.result == "ok" and path_word(r) else r.result
        rows.append((host, r.profile, result, str(r.changed), short))
    return rows


def path_detail(host: str, r: HostResult, *, check: bool = False) -> str | None:
    """Which path a host took and why, one line: on the fast path a dry run says there is nothing to change."""
    if not r.path:
        return None
    if r.path.startswith("fast"):
        return f"{host}: no change (fingerprint matches)" if check else f"{host}: fast path: fingerprint matches " \
            "its last converged apply; only the verifier and the record ran"
    return f"{host}: full path: {r.path.removeprefix('full').strip().removeprefix('(').removesuffix(')')}"


def summary_lines(fleet: FleetResult, *, check: bool = False) -> tuple[list[str], list[str]]:
    """(details, failures) to print under the summary table, one line per host each: the verifier's verdict with its
    figures and the path it took (and why) for a host that succeeded, and `failed: HOST: STEP: CAUSE` for one that
    did not."""
    details = [f"{host}: {verify_line(r.verify)}" for host, r in sorted(fleet.hosts.items())
               if r.result == "ok" and not check]
    details += [line for host, r in sorted(fleet.hosts.items()) if r.result == "ok"
                for line in [path_detail(host, r, check=check)] if line]
    details += [f"{host}: {note}" for host, r in sorted(fleet.hosts.items()) for note in r.notes]
    failures = [f"refused: {host}: {r.message}" if r.result == "refused" else
                f"failed: {host}: {r.step or r.result}: {r.message}" for host, r in sorted(fleet.hosts.items())
                if r.result != "ok"]
    if check:  # a dry run says what it could not predict, host by host, step by step
        details += [f"{host}: --check cannot predict: {what}" for host, r in sorted(fleet.hosts.items())
                    for what in r.unpredicted]
    return details, failures


def check_groups(hostvars: dict[str, dict[str, Any]], inventory: Path | None, *,
                 os_override: str | None = None) -> list[Group]:
    """`provision check` without PROFILE: each host against the Plan and options (--os, --skip-frameworks) its last
    `provision apply` recorded on this controller (provision.state). A host with no record is checked against its
    inventory's provision_profile (with --os, as apply would plan it); a host with neither is refused by name before
    anything is touched."""
    where = inventory or "the inventory"
    if not hostvars:
        raise UsageError(f"{where}: no hosts to check (check the inventory and --limit)")
    keyed: dict[tuple[str, str | None, str, bool], Group] = {}
    unrecorded: dict[str, dict[str, Any]] = {}
    for host, hv in sorted(hostvars.items()):
        record = state.read_record(host)
        if record is None:
            unrecorded[host] = hv
            continue
        try:
            plan = Plan.model_validate(record.get("plan"))
        except ValidationError:
            raise UsageError(f"host {host}: the record of its last apply ({state.record_path(host)}) does not hold a "
                             "plan this provision can read: run `provision apply` on it again, or give PROFILE") from None
        if os_override and os_override != plan.target.os_id:
            raise UsageError(f"host {host}: its last apply planned {plan.target.os_id}, not --os {os_override}: "
                             "leave --os out to check what was applied, or give PROFILE to check a new plan")
        skipped = bool(record.get("frameworks_skipped"))
        profile = str(record.get("profile") or plan.profile)
        key = (profile, record.get("os"), json.dumps(record.get("plan"), sort_keys=True), skipped)
        group = keyed.setdefault(key, Group(plan=plan, profile=profile, os=record.get("os"), hosts=[],
                                            frameworks_skipped=skipped))
        group.hosts.append(host)
        group.hostvars[host] = hv
    without = sorted(h for h, hv in unrecorded.items() if not hv.get(PROFILE_VAR))
    if without:
        raise UsageError(f"no record of an apply on host(s) {', '.join(without)} in {state.state_dir()} and no "
                         f"PROFILE: run `provision apply` on them first, or give PROFILE (or set {PROFILE_VAR} for "
                         f"them in {where})")
    groups = list(keyed.values())
    if unrecorded:
        groups += assign(unrecorded, None, os_override, inventory, require_password=False)
    return groups


def one_source(inventory: Path | None, sandbox_name: str | None) -> None:
    """The hosts come from an inventory or a sandbox, never both (apply and check)."""
    if inventory and sandbox_name:
        raise UsageError("give either --inventory or --sandbox, not both")


def hosts_file(inventory: Path | None) -> Path:
    """The inventory file given (-i), resolved; one line when there is none or it is not a file (apply and check)."""
    if inventory is None:
        raise UsageError(f"no hosts: give -i INVENTORY (examples in {share_dir('inventory')}) or --sandbox NAME")
    if not inventory.is_file():
        raise UsageError(f"{inventory}: inventory file not found")
    return inventory.resolve()


def check_targets(inventory: Path | None, sandbox_name: str | None, *, limit: str | None = None,
                  os_override: str | None = None,
                  vault_password_file: Path | None = None) -> tuple[list[Group], Path | dict[str, Any]]:
    """(groups, inventory) for `provision check -i INVENTORY` or `--sandbox NAME` given no PROFILE (check_groups)."""
    one_source(inventory, sandbox_name)
    if sandbox_name:
        groups = check_groups({sandbox_name: {}}, None, os_override=os_override)
        if not sandbox.is_running(sandbox_name):
            raise UsageError(f"sandbox {sandbox_name} is not running; run `provision apply ... --sandbox "
                             f"{sandbox_name}` first")
        return groups, sandbox.inventory([sandbox_name])
    path = hosts_file(inventory)
    hostvars = inventory_hostvars(path, limit, vault_password_file=vault_password_file)
    return check_groups(hostvars, path, os_override=os_override), path


def check_hosts(groups: list[Group], inventory: Path | dict[str, Any], hosts: list[str], *,
                skip_frameworks: bool = False, echo: Callable[[str], None] | None = None,
                become_password: str | None = None, vault_password_file: Path | None = None) -> dict[str, int]:
    """`provision check` on each host (testinfra, one process per host, a few at a time). Returns host -> exit code.
    A host's framework checks are left out with --skip-frameworks or when its group says the apply skipped them."""
    by_host = {h: g for g in groups for h in g.hosts if h in hosts}
    lines: dict[str, list[str]] = {h: [] for h in by_host}
    # A dict inventory (a sandbox's) is read here; a file's variables came with the groups (ansible-inventory).
    dict_vars = inventory_hostvars(inventory) if isinstance(inventory, dict) else {}

    def one(host: str) -> int:
        group = by_host[host]
        hostvars = dict_vars.get(host) if isinstance(inventory, dict) else group.hostvars.get(host)
        if hostvars is None:  # a host the groups did not read the variables of: as the inventory gives them
            hostvars = inventory_hostvars(inventory, vault_password_file=vault_password_file).get(host, {})
        return run_check(group.plan, inventory, host, hostvars=hostvars,
                         skip_frameworks=skip_frameworks or group.frameworks_skipped, echo=lines[host].append,
                         become_password=become_password, vault_password_file=vault_password_file)

    with ThreadPoolExecutor(max_workers=max(1, min(4, len(by_host)))) as pool:
        codes = dict(zip(by_host, pool.map(one, by_host), strict=True))
    if echo:
        for host in sorted(by_host):
            for line in lines[host]:
                echo(f"{host}: {line}" if len(by_host) > 1 else line)
    return codes
