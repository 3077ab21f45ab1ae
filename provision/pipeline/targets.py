"""Stage `targets`: which hosts a command runs on, grouped by the Plan they get.

    inventory ──ansible-inventory──▶ hosts and their variables (after --limit; --failed: only the hosts the last
      apply on this inventory did not finish)                   |   --sandbox NAME: that one container
    ──▶ groups by provision_profile / provision_os / provision_python_mirror per host or group (else the command
        line's PROFILE / --os / --python-mirror), each with its Plan resolved (stage `plan`) before any host is touched
    ──▶ Targets: the groups, the inventory as Ansible gets it, and the run's key in provision.state; each host as a
        frozen record (Host: its name, Plan, variables as the run reaches it and, from stage preflight on, its SSH
        host-key policy), which every later stage reads instead of joining dicts by host name

`provision check` without PROFILE groups the hosts by what their last apply recorded (check_groups). Nothing here
refuses what the preflight refuses (stage `preflight`) or starts anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from provision import sandbox, state
from provision.errors import ProvisionError, RunnerError, UsageError
from provision.loader import PYTHON_MIRROR, parse_python_mirror
from provision.models import Plan
from provision.pipeline.plan import display_path, plan_for, profile_label
from provision.render.ansible import check_ansible_path
from provision.resources import share_dir
from provision.runners.testinfra import PASSWORD_VARS
from provision.ssh import HostKeys

PROFILE_VAR = "provision_profile"
OS_VAR = "provision_os"
PYTHON_MIRROR_VAR = "provision_python_mirror"
# The inventory variables that hold a secret: a password testinfra's own connections cannot use (PASSWORD_VARS), and
# the Jupyter password the jupyter role hashes.
SECRET_VARS = PASSWORD_VARS | {"jupyter_password"}


@dataclass(frozen=True)
class Group:
    """Hosts that get the same Plan."""

    plan: Plan
    profile: str  # as the user wrote it (inventory variable or command line)
    os: str | None
    hosts: list[str]
    hostvars: dict[str, dict[str, Any]] = field(default_factory=dict)  # as the inventory gives them
    frameworks_skipped: bool = False  # recorded by the apply these hosts are checked against (check_groups)


@dataclass(frozen=True)
class Host:
    """One host of a run, as every stage after `targets` reads it: its name, its group (the Plan it gets, the profile
    and OS as given), its variables as the run reaches it (a file inventory's as ansible-inventory gave them; a
    sandbox's from its inventory, with its SSH port once it runs), its SSH host-key policy once stage preflight has
    computed it (provision.ssh; None before), and whether it is one of provision's sandboxes. Its secrets are here
    by reference only (`secrets`: the names of the variables that hold them); the run's own come with the request
    (provision.request.Secrets)."""

    name: str
    group: Group
    vars: dict[str, Any]
    keys: HostKeys | None = None
    sandbox: bool = False

    @property
    def plan(self) -> Plan:
        return self.group.plan

    @property
    def secrets(self) -> frozenset[str]:
        """References to the secrets the host's variables hold: the names of those set (an SSH, become or Jupyter
        password, vaulted or not), never their values."""
        return frozenset(name for name in SECRET_VARS if self.vars.get(name))


@dataclass(frozen=True)
class Targets:
    """What an apply, a destroy or a check runs on: every group's Plan resolved, nothing touched yet. Frozen: a stage
    that learns more (a sandbox's address once it runs: `reached`; the hosts' SSH host-key policy: `with_keys`)
    returns new Targets, and each stage sees the ones it was given. `records` gives each host as one Host."""

    groups: list[Group]
    inventory: Path | dict[str, Any]  # as Ansible gets it: a file where it is, or a sandbox's dict
    key: str  # the run's key in provision.state: the inventory's path, or sandbox:NAME
    sandbox: str | None = None
    keys: dict[str, HostKeys] = field(default_factory=dict)  # stage preflight's, for this inventory (with_keys)

    @property
    def hosts(self) -> list[str]:
        return [h for g in self.groups for h in g.hosts]

    @property
    def records(self) -> list[Host]:
        """Every host as one record, in the groups' order."""
        hostvars, sandboxes = self.hostvars(), set(self.in_sandbox())
        return [Host(h, g, hostvars.get(h, {}), self.keys.get(h), h in sandboxes) for g in self.groups for h in g.hosts]

    def record(self, name: str) -> Host:
        """One host's record (KeyError for a host not in these targets)."""
        for host in self.records:
            if host.name == name:
                return host
        raise KeyError(name)

    def with_keys(self, keys: dict[str, HostKeys]) -> Targets:
        """These targets with each host's SSH host-key policy (stage preflight computes it from `hostvars()`)."""
        return replace(self, keys=dict(keys))

    def where(self, given: Path | None) -> str:
        """The hosts as the confirmation question names them (`given`: the inventory as the user wrote it)."""
        if self.sandbox:
            return f"sandbox container {self.sandbox}"
        return f"{len(self.hosts)} host(s) in {given}: {', '.join(self.hosts)}"

    def hostvars(self) -> dict[str, dict[str, Any]]:
        """Every host's variables as the run reaches it: a sandbox's from its inventory (its SSH port, once it runs),
        a file inventory's as ansible-inventory gave them."""
        if isinstance(self.inventory, dict):
            given = inventory_hostvars(self.inventory)
            return {h: dict(given.get(h) or {}) for h in self.hosts}
        return {h: g.hostvars.get(h, {}) for g in self.groups for h in g.hosts}

    def reached(self) -> Targets:
        """These targets with a running sandbox's inventory (its SSH port, known once the container runs); the same
        targets where there is no sandbox or it does not run yet."""
        if not self.sandbox or not sandbox.is_running(self.sandbox):
            return self
        return self.at(sandbox.inventory([self.sandbox]))

    def at(self, inventory: Path | dict[str, Any]) -> Targets:
        """These targets reached through another inventory (a sandbox's once it runs). The host-key policy read
        from the old one is dropped with it: stage preflight's `keyed` computes it again."""
        if inventory == self.inventory:
            return self
        return replace(self, inventory=inventory, keys={})

    def in_sandbox(self) -> list[str]:
        """The hosts that are provision's sandboxes (they share the controller's wheelhouse)."""
        if self.sandbox:
            return [self.sandbox]
        return [h for g in self.groups for h in g.hosts if g.hostvars.get(h, {}).get("provision_sandbox")]


def targets(profile: Path | None, inventory: Path | None, sandbox_name: str | None, os_override: str | None,
            limit: str | None, failed: bool, *, vault_password_file: Path | None = None,
            indexes: dict[str, str | bool] | None = None) -> Targets:
    """The hosts of `provision apply` (and of `provision check PROFILE`, `provision destroy`) with their Plans; every
    Plan resolved, nothing touched. failed: only the hosts that did not succeed in the last apply on the inventory
    (no groups when every one did)."""
    one_source(inventory, sandbox_name)
    if sandbox_name:
        if profile is None:
            raise UsageError("--sandbox needs a PROFILE")
        groups = assign({sandbox_name: {}}, profile, os_override, None, indexes=indexes)
        # Reached over SSH like any host; its address is known once the container runs (stage preflight reads it
        # when it does; apply starts it after asking).
        return Targets(groups, {"all": {"hosts": {sandbox_name: {}}}}, f"sandbox:{sandbox_name}", sandbox_name)
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
    return Targets(assign(hostvars, profile, os_override, path, indexes=indexes), path, key)


def check_run_targets(profile: Path | None, inventory: Path | None, sandbox_name: str | None,
                      os_override: str | None, limit: str | None, *,
                      vault_password_file: Path | None = None) -> Targets:
    """The hosts of `provision check`: against PROFILE's Plan, or without it against what each host's last apply
    recorded (check_groups). A sandbox must be running already."""
    if profile is None:
        groups, inv = check_targets(inventory, sandbox_name, limit=limit, os_override=os_override,
                                    vault_password_file=vault_password_file)
        return Targets(groups, inv, "", sandbox_name)
    found = targets(profile, inventory, sandbox_name, os_override, limit, False,
                    vault_password_file=vault_password_file)
    if sandbox_name:
        _require_running(sandbox_name)
        return found.reached()
    return found


def _require_running(name: str) -> None:
    if not sandbox.is_running(name):
        raise UsageError(f"sandbox {name} is not running; run `provision apply ... --sandbox {name}` first")


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


def assign(hostvars: dict[str, dict[str, Any]], profile: Path | None, os_override: str | None,
           inventory: Path | None, *, indexes: dict[str, Any] | None = None) -> list[Group]:
    """Group the hosts by (profile, OS, interpreter mirror) and resolve each group's Plan (stage `plan`). Any
    refusal stops here, before any host is touched, and names the hosts it concerns."""
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
    return groups


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
        groups += assign(unrecorded, None, os_override, inventory)
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
        _require_running(sandbox_name)
        return groups, sandbox.inventory([sandbox_name])
    path = hosts_file(inventory)
    hostvars = inventory_hostvars(path, limit, vault_password_file=vault_password_file)
    return check_groups(hostvars, path, os_override=os_override), path
