"""`provision apply` and `provision check`: which hosts, then plan → render → ansible-runner → testinfra.

The CLI parses arguments, asks and prints; this module decides: which hosts and plans (`targets`,
`check_run_targets`), whether the sandbox starts, whether the checks run after the playbook, what the block after an
apply says (`ready_blocks`), and the exit code (provision.errors' EXIT_* constants).
"""

from __future__ import annotations

import shlex
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from provision import sandbox, state
from provision import tunnel as tunnels_mod
from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK, ProvisionError, RunFailed, UsageError
from provision.fleet import (
    FleetResult,
    Group,
    apply_groups,
    assign,
    check_hosts,
    check_targets,
    hosts_file,
    inventory_hostvars,
    one_source,
    verify_line,
)
from provision.models import Plan
from provision.runners.ansible import ssh_command  # the tunnel's and the token read's ssh


def sandbox_release(plan: Plan) -> str:
    if plan.target.distribution != "debian" or plan.target.release not in sandbox.DEBIAN_CODENAMES:
        runnable = ", ".join(f"debian-{r}" for r in sorted(sandbox.DEBIAN_CODENAMES))
        raise UsageError(
            f"the sandbox runs {runnable} only, and this plan targets {plan.target.os_id}; "
            f"add --os debian-{max(sandbox.DEBIAN_CODENAMES)} to try the profile in a sandbox"
        )
    if plan.target.arch != "x86_64":
        raise UsageError(f"the sandbox runs x86_64 only, and this plan targets {plan.target.arch}")
    return plan.target.release


def ensure_sandbox(plan: Plan, name: str, *, start: bool, log=None, progress=None) -> None:
    """Start the sandbox container `name` for this plan (apply), or require that it runs (check). Which hosts an
    inventory holds is decided in provision.fleet; this only looks after the container."""
    release = sandbox_release(plan)
    if sandbox.is_running(name):
        return
    if not start:
        raise UsageError(f"sandbox {name} is not running; run `provision apply ... --sandbox {name}` first")
    sandbox.start(name, release, log=log, progress=progress)


# --- which hosts, with which plans ------------------------------------------------------------------------------


@dataclass
class Targets:
    """What an apply or a check runs on: every group's Plan resolved, nothing touched yet."""

    groups: list[Group]
    inventory: Path | dict[str, Any]  # as Ansible gets it: a file where it is, or a sandbox's dict
    key: str  # the run's key in provision.state: the inventory's path, or sandbox:NAME
    sandbox: str | None = None

    @property
    def hosts(self) -> list[str]:
        return [h for g in self.groups for h in g.hosts]

    def where(self, given: Path | None) -> str:
        """The hosts as the confirmation question names them (`given`: the inventory as the user wrote it)."""
        if self.sandbox:
            return f"sandbox container {self.sandbox}"
        return f"{len(self.hosts)} host(s) in {given}: {', '.join(self.hosts)}"


def targets(profile: Path | None, inventory: Path | None, sandbox_name: str | None, os_override: str | None,
            limit: str | None, failed: bool, *, vault_password_file: Path | None = None,
            indexes: dict[str, str | bool] | None = None, require_password: bool = True) -> Targets:
    """The hosts of `provision apply` (and of `provision check PROFILE`) with their Plans; every Plan resolved,
    nothing touched. failed: only the hosts that did not succeed in the last apply on the inventory (no groups when
    every one did). require_password: a plan's Jupyter password must come from the inventory (fleet.assign)."""
    one_source(inventory, sandbox_name)
    if sandbox_name:
        if profile is None:
            raise UsageError("--sandbox needs a PROFILE")
        groups = assign({sandbox_name: {}}, profile, os_override, None, indexes=indexes,
                        require_password=require_password)
        sandbox_release(groups[0].plan)  # refuse an OS the sandbox cannot run before asking anything
        # Reached over SSH like any host; the port is known once the container runs (apply starts it after asking).
        inv = (sandbox.inventory([sandbox_name]) if sandbox.is_running(sandbox_name)
               else {"all": {"hosts": {sandbox_name: {}}}})
        return Targets(groups, inv, f"sandbox:{sandbox_name}", sandbox_name)
    path = hosts_file(inventory)
    key = str(path)
    hostvars = inventory_hostvars(path, limit, vault_password_file=vault_password_file)
    if failed:
        retry = state.failed_hosts(key)
        if retry is None:
            raise UsageError(f"--failed: no earlier apply on {inventory} is remembered (in {state.state_dir()})")
        hostvars = {h: v for h, v in hostvars.items() if h in retry}
        if not hostvars:
            return Targets([], path, key)
    return Targets(assign(hostvars, profile, os_override, path, indexes=indexes, require_password=require_password),
                   path, key)


def check_run_targets(profile: Path | None, inventory: Path | None, sandbox_name: str | None,
                      os_override: str | None, limit: str | None, *,
                      vault_password_file: Path | None = None) -> Targets:
    """The hosts of `provision check`: against PROFILE's Plan, or without it against what each host's last apply
    recorded (fleet.check_groups). A sandbox must be running already."""
    if profile is None:
        groups, inv = check_targets(inventory, sandbox_name, limit=limit, os_override=os_override,
                                    vault_password_file=vault_password_file)
        found = Targets(groups, inv, "", sandbox_name)
    else:
        found = targets(profile, inventory, sandbox_name, os_override, limit, False,
                        vault_password_file=vault_password_file, require_password=False)
    if sandbox_name:
        ensure_sandbox(found.groups[0].plan, sandbox_name, start=False)
        found.inventory = sandbox.inventory([sandbox_name])
    return found


def checks_exit_code(codes: dict[str, int]) -> int:
    """One exit code for `provision check` on many hosts: 3 when any could not be checked, else 1 when any is red."""
    if EXIT_EXTERNAL in codes.values():
        return EXIT_EXTERNAL
    return EXIT_FAILED if any(code != EXIT_OK for code in codes.values()) else EXIT_OK


# --- the apply ----------------------------------------------------------------------------------------------------


class Activity(Protocol):
    """What the CLI shows while a phase runs: `update` the step now, `log` a line that stays."""

    def update(self, text: str) -> None: ...

    def log(self, line: str) -> None: ...


class ApplyDisplay(Protocol):
    """How run_apply reports as it goes; the CLI implements it with rich (provision.cli)."""

    def phase(self, text: str) -> AbstractContextManager[Activity]: ...

    def task(self, host: str, task: str, state: str, msg: str) -> None: ...

    def playbook_done(self, fleet: FleetResult) -> None: ...

    def check_line(self, line: str) -> None: ...


@dataclass
class ApplyOutcome:
    """What an apply did and what it means for the exit code."""

    fleet: FleetResult
    inventory: Path | dict[str, Any]  # as the run used it (a sandbox's, with its SSH port, once it runs)
    took: dict[str, float] = field(default_factory=dict)  # "started": monotonic clock; else seconds per phase
    codes: dict[str, int] | None = None  # provision check per host; {}: not run (the playbook failed); None: skipped
    check_skipped: str = ""  # why provision check did not run after a playbook that succeeded, when not asked
    exit_code: int = EXIT_OK
    error: ProvisionError | None = None  # to report as the last line (a red check)
    # Jupyter tokens read beside a fast-path playbook (host -> token), for ready_blocks; in memory only, never written.
    tokens: dict[str, str] = field(default_factory=dict, repr=False)


def run_apply(found: Targets, display: ApplyDisplay, *, check: bool = False, diff: bool = False,
              tags: str | None = None, skip_frameworks: bool = False, no_check: bool = False,
              become_password: str | None = None, vault_password_file: Path | None = None,
              full: bool = False, jupyter_password: str | None = None) -> ApplyOutcome:
    """Start the sandbox (if it is one), run the playbook on every host, then `provision check` on them unless
    --skip-check, --dry-run or --tags say otherwise. full: every role on every host (no fast path). Exit: the
    playbook's (0 ok, 1 a host failed, 3 unreachable), then the checks' (1 red, 3 could not run)."""
    took: dict[str, float] = {"started": time.monotonic()}
    inventory = found.inventory
    if found.sandbox:
        with display.phase(f"starting sandbox {found.sandbox}") as activity:
            ensure_sandbox(found.groups[0].plan, found.sandbox, start=True, log=activity.log,
                           progress=activity.update)
        took["sandbox start"] = time.monotonic() - took["started"]
        inventory = sandbox.inventory([found.sandbox])
    sandboxes = [found.sandbox] if found.sandbox else [
        h for g in found.groups for h in g.hosts if g.hostvars.get(h, {}).get("provision_sandbox")]
    checking = not (no_check or check or tags)
    # On the fast path nothing changes on a host after the preflight's read: its checks need not wait for the verifier
    # and the record. When every host of the run has said it takes the fast path, they start beside the playbook.
    early: dict[str, Any] = {}
    said: dict[str, str] = {}
    tokens: dict[str, str] = {}

    def run_checks() -> None:
        started = time.monotonic()
        try:
            early["codes"] = check_hosts(found.groups, inventory, found.hosts, skip_frameworks=skip_frameworks,
                                         echo=early.setdefault("lines", []).append, become_password=become_password,
                                         vault_password_file=vault_password_file)
        except BaseException as exc:  # reported after the playbook, as a check that runs after it would be
            early["error"] = exc
        early["seconds"] = time.monotonic() - started

    def read_tokens() -> None:
        # The Jupyter tokens the block after the apply shows (read over SSH by the account, as jupyter_access
        # would), kept in memory only.
        for group in found.groups:
            j = group.plan.jupyter
            if not (j.enabled and j.auth == "token" and j.bind.startswith("127.")):  # as jupyter_access reads it
                continue
            reach = inventory["all"]["hosts"] if isinstance(inventory, dict) else group.hostvars
            for host in group.hosts:
                ssh = ssh_command(host, reach.get(host, {}))
                token = tunnels_mod.read_token(ssh, group.plan.user) if ssh else None
                if token:
                    tokens[host] = token

    def on_path(host: str, path: str) -> None:
        said[host] = path
        if checking and "thread" not in early and set(said) >= set(found.hosts) and all(
                p.startswith("fast") for p in said.values()):
            early["thread"] = threading.Thread(target=run_checks, name="provision-early-checks", daemon=True)
            early["thread"].start()
            early["tokens"] = threading.Thread(target=read_tokens, name="provision-early-tokens", daemon=True)
            early["tokens"].start()

    with display.phase("starting ansible-playbook") as activity:

        def on_start(task: str) -> None:
            if task.startswith("wheelhouse:"):  # the controller downloads the plan's wheels once (minutes, first time)
                took.setdefault("wheels from", time.monotonic())
                activity.log(task)
                activity.update("downloading wheels into the wheelhouse")
                return
            if "wheels from" in took and "wheel downloads" not in took:
                took["wheel downloads"] = time.monotonic() - took["wheels from"]
            activity.update(f"running: {task}")

        fleet = apply_groups(found.groups, inventory, found.key, check=check, diff=diff, tags=tags,
                             skip_frameworks=skip_frameworks, on_task=display.task, on_start=on_start,
                             on_path=on_path, on_note=activity.log, sandboxes=sandboxes, become_password=become_password,
                             vault_password_file=vault_password_file, full=full, jupyter_password=jupyter_password)
    took["Ansible"] = fleet.seconds
    display.playbook_done(fleet)
    if "tokens" in early:
        early["tokens"].join()
    outcome = ApplyOutcome(fleet, inventory, took, tokens=tokens)
    if fleet.exit_code != EXIT_OK:
        if "thread" in early:  # the checks started beside it end before this does (nothing of theirs outlives it)
            early["thread"].join()
        outcome.codes, outcome.exit_code = {}, fleet.exit_code
        return outcome
    if not checking:
        if tags and not (no_check or check):
            outcome.check_skipped = "--tags applied part of the plan"
        return outcome
    started = time.monotonic()
    with display.phase(f"provision check on {len(found.hosts)} host(s)"):
        if "thread" in early:
            early["thread"].join()
            if "error" in early:
                raise early["error"]
            for line in early.get("lines", []):
                display.check_line(line)
            codes = early["codes"]
        else:
            codes = check_hosts(found.groups, inventory, found.hosts, skip_frameworks=skip_frameworks,
                                echo=display.check_line, become_password=become_password,
                                vault_password_file=vault_password_file)
    took["checks"] = time.monotonic() - started
    if "seconds" in early:
        took["checks (beside the playbook)"] = early["seconds"]
    outcome.codes, outcome.exit_code = codes, checks_exit_code(codes)
    if outcome.exit_code == EXIT_FAILED:
        bad = ", ".join(h for h, c in sorted(codes.items()) if c)
        outcome.error = RunFailed(f"provision check failed after apply on {bad} (see the failed checks above)")
    return outcome


def _version(found: dict[str, Any], names: list[str]) -> str | None:
    """The installed version of the first of `names` (package or wheel names, a trailing * matches a prefix)."""
    for name in names:
        for key, version in found.items():
            if version and (key == name or (name.endswith("*") and key.startswith(name[:-1]))):
                return str(version)
    return None


def installed_line(plan: Plan, installed: dict[str, Any] | None, *, skip_frameworks: bool = False) -> str:
    """What the host has now, as its apply read it back (host_record): the stack's components with their versions."""
    packages = (installed or {}).get("packages") or {}
    wheels = {k.lower().replace("_", "-"): v for k, v in ((installed or {}).get("wheels") or {}).items()}
    parts = []
    if plan.driver.install or packages:
        driver = _version(packages, [*plan.driver.userspace_packages, *plan.driver.packages])
        if driver:
            parts.append(f"NVIDIA driver {driver}" + (" (user space)" if set(packages) and not _version(
                packages, [p for p in plan.driver.packages if p not in plan.driver.userspace_packages]) else ""))
    cuda = _version(wheels, ["nvidia-cuda-runtime*"]) if plan.cuda.source == "pypi" else _version(
        packages, [p.split("=")[0] for p in plan.cuda.packages])
    parts.append(f"CUDA {cuda or plan.cuda.version}" + (f" ({plan.cuda.source})" if plan.cuda.source else ""))
    if plan.cudnn.version:
        cudnn = _version(wheels, ["nvidia-cudnn*"]) or _version(packages, [p.split("=")[0] for p in plan.cudnn.packages])
        parts.append(f"cuDNN {cudnn or plan.cudnn.version}")
    parts.append(f"Python {plan.python.version}")
    for label, name in (("NumPy", "numpy"), ("JupyterLab", "jupyterlab")):
        version = wheels.get(name)
        if version:
            parts.append(f"{label} {version}")
    for fw in plan.frameworks:
        if skip_frameworks:
            parts.append(f"{fw.package} skipped (--skip-frameworks)")
        else:
            parts.append(f"{fw.package} {wheels.get(fw.package.lower()) or 'not found'}")
    return ", ".join(parts)


@dataclass
class JupyterAccess:
    """How to reach one host's JupyterLab from this machine. url carries the token (print it once, to the user)."""

    host: str
    url: str | None = None  # http://127.0.0.1:<local port>/lab?token=...: opens JupyterLab in a browser here
    where: str = ""  # the URL without the token, or where the server answers when no tunnel could be made
    token_hint: str = ""  # how to read the token when it is not in url
    tunnel: Any = None  # provision.tunnel.Tunnel
    problem: str = ""  # why no tunnel was made


def jupyter_access(plan: Plan, hosts: list[str], hostvars: dict[str, dict], *, tunnels: bool = True,
                   tokens: dict[str, str] | None = None) -> list[JupyterAccess]:
    """For each host: a tunnel from a free local port (a distinct one per host) to its Jupyter, and the URL that
    opens JupyterLab here with the token read over SSH (provision.tunnel). A host Ansible does not reach over SSH,
    or whose Jupyter does not bind the loopback, gets where its server answers and how to read the token."""
    found: list[JupyterAccess] = []
    if not plan.jupyter.enabled:
        return found
    j = plan.jupyter
    scheme = "https" if j.tls else "http"
    token_file = tunnels_mod.TOKEN_FILE
    taken: set[int] = set()
    for host in sorted(hosts):
        ssh = ssh_command(host, hostvars.get(host, {}))
        access = JupyterAccess(host)
        if not j.bind.startswith("127."):
            access.where = f"{scheme}://{host}:{j.port}/lab"
            access.token_hint = f"{j.auth} in /var/lib/provision/jupyter/, readable by {plan.user} only"
        elif ssh is None:
            access.where = f"{scheme}://127.0.0.1:{j.port}/lab on the host itself"
            access.token_hint = f"token in {token_file} (readable by {plan.user} and root)"
        else:
            access.token_hint = shlex.join([*ssh, "sudo", "-u", plan.user, "cat", token_file])
            manual = shlex.join([ssh[0], "-N", "-L", f"{j.port}:127.0.0.1:{j.port}", *ssh[1:]])
            access.where = f"{scheme}://127.0.0.1:{j.port}/lab after `{manual}`"
            if tunnels:
                try:
                    t = tunnels_mod.open_tunnel(host, ssh, j.port, taken=taken)
                except ProvisionError as exc:
                    access.problem = exc.lines()[0]
                else:
                    taken.add(t.local_port)
                    access.tunnel = t
                    access.where = f"{scheme}://127.0.0.1:{t.local_port}/lab"
                    token = ((tokens or {}).get(host) or tunnels_mod.read_token(ssh, plan.user)) \
                        if j.auth == "token" else None
                    if token:
                        access.url = f"{access.where}?token={token}"
        found.append(access)
    return found


def host_summaries(plan: Plan, hosts: list[str], hostvars: dict[str, dict]) -> list[str]:
    """One line per host on how to reach its Jupyter, without starting anything (a dry run's or a failed run's
    hint): the exact tunnel command and how to read the token; never the token itself."""
    lines = []
    for a in jupyter_access(plan, hosts, hostvars, tunnels=False):
        lines.append(f"{a.host}: jupyter: {a.where}, token: {a.token_hint}")
    return lines


def ready_blocks(groups: list[Group], fleet: FleetResult, inventory: Path | dict[str, Any],
                 codes: dict[str, int] | None, *, skip_frameworks: bool,
                 tokens: dict[str, str] | None = None) -> tuple[list[list[str]], bool]:
    """(blocks, whether a token is shown) of what a person reads after an apply: per host that succeeded, what it
    has (versions), the verifier's and the checks' verdicts, and the URL that opens its JupyterLab in a browser on
    this machine (through an SSH tunnel started here and recorded; provision.tunnel), with how to stop that tunnel.
    codes: provision check per host ({}: not run; None: no `checked` line)."""
    blocks: list[list[str]] = []
    shown_token = False
    for group in groups:
        ok = [h for h in group.hosts if fleet.hosts[h].result == "ok"]
        reach = inventory["all"]["hosts"] if isinstance(inventory, dict) else group.hostvars
        access = {a.host: a for a in jupyter_access(group.plan, ok, reach, tokens=tokens)}
        for host in ok:
            record = state.read_record(host) or {}
            lines = [f"{host}: ready ({group.profile}, {group.plan.target.os_id})",
                     f"  installed   {installed_line(group.plan, record.get('installed'), skip_frameworks=skip_frameworks)}",
                     f"  verified    {verify_line(fleet.hosts[host].verify)}"]
            if codes is not None:
                code = codes.get(host)
                lines.append("  checked     " + ("provision check passed (lines above)" if code == EXIT_OK else
                                                 "provision check FAILED (lines above)" if code == EXIT_FAILED else
                                                 "provision check could not run (line above)" if code else "not run"))
            a = access.get(host)
            if a is not None and a.url:
                shown_token = True
                lines.append(f"  JupyterLab  {a.url}")
            elif a is not None:
                lines.append(f"  JupyterLab  {a.where}" + (f" (no tunnel: {a.problem})" if a.problem else ""))
                lines.append(f"  token       {a.token_hint}")
            if a is not None and a.tunnel is not None:
                t = a.tunnel
                in_sandbox = bool(reach.get(host, {}).get("provision_sandbox"))
                lines.append(f"  tunnel      ssh (pid {t.pid}) forwards 127.0.0.1:{t.local_port} here to its Jupyter; "
                             f"stop it with `{shlex.join(['provision', 'tunnel', 'stop', host])}`"
                             + (f" (`{shlex.join(['provision', 'sandbox', 'down', host])}` removes the host and its tunnel)"
                                if in_sandbox else ""))
            blocks.append(lines)
    return blocks, shown_token
