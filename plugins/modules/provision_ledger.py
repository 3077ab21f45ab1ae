#!/usr/bin/python
"""The ledger: what provision installed or wrote on this host, and nothing it found there before.

Kept in /var/lib/provision/ledger.json beside applied.json. An apply opens it (`state: begin`: reads what is on the
host now, says what the ledger holds that the new plan no longer wants, and notes the host as it was), removes that
(`state: prune`, and `state: prune_wheels` run as the environment's account), runs the roles, and closes it
(`state: commit`: what is on the host now and was not there when the apply began is provision's). `provision destroy`
is a prune against an empty plan.
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_ledger
short_description: Keep the record of what provision installed on a host, and remove what a new plan no longer wants
description:
  - The ledger (O(path), JSON) lists what provision owns on the host, that is what was absent when an apply began and
    present when it ended - Debian packages (with their versions), the environment's distributions, files, units,
    accounts and environments - plus the planned packages it found already installed (never removed).
  - C(begin) reads the host (dpkg's installed packages, the planned paths, units and accounts) and returns what to
    remove (RV(removals)); outside check mode it notes the host as it was under C(pending) in the ledger.
  - C(prune) removes the packages (purged with apt-get, only those the ledger owns, and never when apt would take
    a package the ledger does not own with them), stops and disables the units, deletes the files and directories,
    and deletes the accounts (their homes only with O(purge_home)).
  - C(prune_wheels) runs as the environment's account - it reads the environment's metadata as that account and
    uninstalls, with the environment's own pip, the owned distributions that nothing kept still requires.
  - C(commit) records what the apply left on the host.
options:
  state:
    description: The step.
    type: str
    choices: [begin, prune, prune_wheels, commit, restart_engines]
    required: true
  path:
    description: The ledger on the host.
    type: path
    default: /var/lib/provision/ledger.json
  planned:
    description:
      - What the plan wants, keys C(packages) (Debian packages it names), C(wheels) (distributions it names),
        C(paths) (files and directories it writes), C(units), C(accounts), C(venv) (its environment's path) and
        C(python) (the planned Python's major.minor; an environment made by another is made again).
      - Empty with O(destroy) true - everything the ledger lists goes.
    type: dict
    default: {}
  destroy:
    description: Remove everything the ledger lists (the ledger itself last).
    type: bool
    default: false
  purge_home:
    description: With O(destroy), also delete the homes of the accounts provision created.
    type: bool
    default: false
  wheels:
    description: The environment's distributions now (normalized name to version, as provision_facts reads them).
    type: dict
    default: {}
  removals:
    description: What C(begin) returned under RV(removals) (C(prune), C(prune_wheels)).
    type: dict
    default: {}
  venv:
    description: The environment to prune (C(prune_wheels)).
    type: path
    default: ""
  venv_owner:
    description:
      - The account that owns the planned environment now (C(begin)); when the plan names another account, the
        environment provision made goes, to be made again for the new one.
    type: str
    default: ""
  records:
    description:
      - Files whose presence C(begin) reports under RV(records_present) - provision's records of its changes to the
        engines' configurations, which tell the role whether an engine may be due a restart.
    type: list
    elements: path
    default: []
  engine_data:
    description:
      - C(prune) - the engines' packages whose purge deletes their data, each a C(package), the C(dir) that holds the
        images, containers and volumes the engine's users made, and the maintainer scripts' C(hook) that does the
        deleting (Debian's and Ubuntu's docker.io - its prerm saves nuke-graph-directory.sh into /var/lib/docker, its
        postrm runs it on purge). Before such a package is purged the hook is made non-executable, so the purge
        deletes none of the users' data; after it, the directory is removed only where it holds no image, container
        or volume (the engine's own empty state), and is otherwise kept and said in one warning.
    type: list
    elements: dict
    default: []
  engines:
    description:
      - C(restart_engines) - the engines, each a systemd C(unit) with the C(record) provision writes whenever it
        changes that engine's configuration. One that is active and started before its record was last written is
        restarted (it still runs on what it read then); one that is not installed, or not running, reads its
        configuration when it starts and is left.
    type: list
    elements: dict
    default: []
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Open the ledger
  provision_ledger:
    state: begin
    planned: {packages: [nvidia-cuda-toolkit], wheels: [numpy], paths: [/etc/profile.d/provision-cuda.sh],
              units: [], accounts: [ml], venv: /opt/provision/venv}
    wheels: "{{ facts.venv.distributions }}"
  register: ledger_open
"""

RETURN = r"""
removals:
  description: What the ledger owns that the plan does not want - C(packages), C(wheels) (owned distributions the
    plan no longer names), C(keep_wheels) (what the environment keeps), C(owned_wheels), C(paths), C(units),
    C(accounts), C(venvs).
  returned: always
  type: dict
removed:
  description: What was removed (C(prune), C(prune_wheels)) - C(packages), C(wheels), C(paths), C(units),
    C(accounts); C(kept) names packages left because apt would have taken a package the ledger does not own;
    C(kept_data) the engines' data directories kept after their purge (O(engine_data)).
  returned: always
  type: dict
ledger:
  description: The ledger as written (C(commit)) or read.
  returned: always
  type: dict
records_present:
  description: Those of O(records) that exist on the host (C(begin)).
  returned: success
  type: list
  elements: str
restarted:
  description: The units restarted (C(restart_engines); in check mode, those that would be).
  returned: success
  type: list
  elements: str
"""

import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import apt, dpkg  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.ledger import (  # noqa: E402
    KINDS,
    LedgerError,
    begin,
    commit,
    has_work,
    load,
    planned_of,
    pruned_pending,
    read_requires,
    removals,
    unneeded_wheels,
    venv_runs,
    write,
)

TIMEOUT_S = 1800
# The rules (what the ledger owns, what a plan removes, the file itself) are plugins/module_utils/ledger.py, which
# the controller imports too (provision/ledger.py); here is what acts on the host.


# ---------------------------------------------------------------------------------------------------------------
# The host


def read_dpkg() -> dict[str, str]:
    """Every package dpkg has installed (ii), name to version."""
    return dpkg.installed(None, 300)


def unit_path(name: str) -> str:
    return f"/etc/systemd/system/{name if '.' in name else name + '.service'}"


def read_present(planned: dict, ledger: dict) -> dict[str, bool]:
    """kind:item -> whether it is on the host, for every path, unit, account and environment planned or owned."""
    want = planned_of(planned)
    found = {}
    for kind in KINDS:
        for item in set(want[kind]) | set(ledger.get(kind) or []):
            if kind == "accounts":
                try:
                    pwd.getpwnam(item)
                    there = True
                except KeyError:
                    there = False
            elif kind == "units":
                there = os.path.lexists(unit_path(item))
            else:
                there = os.path.lexists(item)
            found[f"{kind}:{item}"] = there
    return found


def parse_simulation(text: str) -> set[str]:
    """The packages `apt-get -s purge` would remove ("Purg name [version]" / "Remv name ...")."""
    return {m.group(1).split(":")[0] for m in re.finditer(r"^(?:Purg|Remv) (\S+)", text, re.M)}


APT_LOCK_WAIT_S = 300  # how long each apt-get call may wait, in all, for apt's and dpkg's locks


def apt_get(args: list[str]) -> subprocess.CompletedProcess:
    """apt-get, waiting for the locks (module_utils/apt.py)."""
    return apt.apt_get(args, APT_LOCK_WAIT_S, timeout_s=TIMEOUT_S)


def purge(candidates: list[str], owned: set[str]) -> tuple[list[str], list[str]]:
    """Purge the candidates and the owned packages apt's autoremove then finds unneeded. A candidate whose purge
    would take a package the ledger does not own (a user's package that depends on it) is kept. Returns (purged,
    kept)."""
    todo, kept = list(candidates), []
    while todo:
        sim = apt_get(["-s", "--auto-remove", "purge", *todo])
        if sim.returncode != 0:
            raise LedgerError(f"apt-get -s purge failed: {sim.stderr.strip()[-400:]}")
        taken = parse_simulation(sim.stdout)
        foreign = taken - owned
        if not foreign:
            # The autoremovable packages apt would take along that the ledger does not own are not taken: only
            # owned ones are named, and the purge runs without --auto-remove.
            names = sorted(taken & owned)
            proc = apt_get(["purge", *names])
            if proc.returncode != 0:
                raise LedgerError(f"apt-get purge {' '.join(names)} failed: {proc.stderr.strip()[-600:]}")
            return names, kept
        # Without auto-remove: which candidate drags a foreign package?
        for name in list(todo):
            alone = parse_simulation(apt_get(["-s", "purge", name]).stdout)
            if alone - owned:
                todo.remove(name)
                kept.append(name)
        if not todo:
            break
        # Autoremovable foreign packages are not ours to take: purge the candidates and only owned followers.
        sim = apt_get(["-s", "--auto-remove", "purge", *todo])
        taken = parse_simulation(sim.stdout) & owned
        proc = apt_get(["purge", *sorted(taken | set(todo))])
        if proc.returncode != 0:
            raise LedgerError(f"apt-get purge failed: {proc.stderr.strip()[-600:]}")
        return sorted(taken | set(todo)), kept
    return [], kept


def holds_users_data(path: str) -> bool:
    """Whether an engine's data directory holds anything its users made: a container, a named or anonymous volume,
    or an image (Docker's layout: containers/, volumes/ beside its metadata.db, image/<driver>/imagedb/content/).
    A directory of another layout that is not empty counts as the users' too: only an engine's own empty state goes."""
    def entries(*parts: str, ignore: tuple[str, ...] = ()) -> list[str]:
        try:
            return [n for n in os.listdir(os.path.join(path, *parts)) if n not in ignore]
        except OSError:
            return []

    if not os.path.isdir(path) or os.path.islink(path):
        return False
    if not os.path.isdir(os.path.join(path, "image")):
        return bool(entries())  # not Docker's layout (or not yet written): kept unless empty
    if entries("containers") or entries("volumes", ignore=("metadata.db", "backingFsBlockDev")):
        return True
    return any(entries("image", driver, "imagedb", "content", "sha256") for driver in entries("image"))


def disarm_data_hooks(engine_data: list[dict], packages: set[str]) -> None:
    """Before the purge of an engine package that deletes its data (O(engine_data)): its maintainer scripts' hook
    made non-executable (the prerm copies it only when it is), and a copy an earlier removal saved into the data
    directory deleted (the postrm runs that copy). Cut anywhere, the next prune does the same again."""
    for entry in engine_data:
        if entry.get("package") not in packages or not entry.get("hook"):
            continue
        hook, data = str(entry["hook"]), str(entry.get("dir") or "")
        if os.path.isfile(hook) and not os.path.islink(hook):
            os.chmod(hook, os.stat(hook).st_mode & ~0o111)
        saved = os.path.join(data, os.path.basename(hook)) if data else ""
        if saved and os.path.lexists(saved):
            os.unlink(saved)


def settle_engine_data(engine_data: list[dict], purged: set[str]) -> list[str]:
    """After the purge: each purged engine's data directory removed where it holds no users' data (the engine's own
    empty state), kept otherwise. Returns the directories kept."""
    kept = []
    for entry in engine_data:
        data = str(entry.get("dir") or "")
        if entry.get("package") not in purged or not data or not os.path.lexists(data):
            continue
        if holds_users_data(data):
            kept.append(data)
        else:
            remove_path(data)
    return kept


def systemctl(*args: str) -> None:
    if shutil.which("systemctl") and os.path.isdir("/run/systemd/system"):
        subprocess.run(["systemctl", *args], capture_output=True, text=True, check=False, timeout=300)


def started_at(unit: str) -> float | None:
    """When an active unit last became active, in the clock of files' times; None when it is not active (or there is
    no systemd). From ActiveEnterTimestampMonotonic, which every systemd prints (the wall-clock ActiveEnterTimestamp
    has whole seconds only before systemd 247), turned into wall-clock time through this moment's two clocks."""
    if not (shutil.which("systemctl") and os.path.isdir("/run/systemd/system")):
        return None
    proc = subprocess.run(["systemctl", "show", "-p", "ActiveState", "-p", "ActiveEnterTimestampMonotonic", unit],
                          capture_output=True, text=True, check=False, timeout=60)
    shown = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
    if proc.returncode != 0 or shown.get("ActiveState") != "active":
        return None
    try:
        since_boot = int(shown.get("ActiveEnterTimestampMonotonic") or 0) / 1e6
    except ValueError:  # not a number: a systemd that prints it otherwise; say "started now", so nothing restarts
        return time.time()
    return time.time() - (time.clock_gettime(time.CLOCK_MONOTONIC) - since_boot)


def engines_due(engines: list[dict], started=started_at, mtime=os.path.getmtime) -> list[str]:
    """The units among `engines` that run and started before provision last wrote their record."""
    due = []
    for engine in engines:
        try:
            written = mtime(engine["record"])
        except OSError:  # no record: provision never changed this engine's configuration
            continue
        since = started(engine["unit"])
        if since is not None and written > since:
            due.append(engine["unit"])
    return due


def remove_path(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def refuse_root_in(venv: str) -> None:
    """prune_wheels reads the environment's metadata and runs its pip: as the account that owns it (the role's
    become_user), never as root in an environment another account can write."""
    if os.geteuid() == 0 and os.stat(venv).st_uid != 0:
        raise LedgerError(f"prune_wheels: {venv} belongs to uid {os.stat(venv).st_uid}; its pip runs as that account "
                          "(become_user), never as root")


def run(module: AnsibleModule) -> dict:
    p = module.params
    state, path = p["state"], p["path"]
    if state == "prune_wheels":
        found = p["removals"] or {}
        venv = p["venv"]
        if not found.get("wheels") or not os.path.isdir(venv):
            return {"changed": False, "removed": {"wheels": []}}
        refuse_root_in(venv)
        installed, requires = read_requires(venv)
        owned = set(found.get("owned_wheels") or [])
        gone = unneeded_wheels(owned, set(found.get("keep_wheels") or []), requires, installed)
        if gone and not module.check_mode:
            proc = subprocess.run([os.path.join(venv, "bin", "python"), "-I", "-m", "pip", "uninstall", "-y",
                                   "--disable-pip-version-check", *gone], capture_output=True, text=True, check=False,
                                  timeout=TIMEOUT_S, cwd="/")
            if proc.returncode != 0:
                raise LedgerError(f"pip uninstall failed: {proc.stderr.strip()[-600:]}")
        return {"changed": bool(gone), "removed": {"wheels": gone}}

    if state == "restart_engines":
        due = engines_due(p["engines"])
        if not module.check_mode:
            for unit in due:
                proc = subprocess.run(["systemctl", "restart", unit], capture_output=True, text=True, check=False,
                                      timeout=600)
                if proc.returncode != 0:
                    raise LedgerError(f"systemctl restart {unit} failed: {(proc.stderr or proc.stdout).strip()[-600:]}")
        return {"changed": bool(due), "restarted": due}

    ledger = load(path)
    if state == "begin":
        planned = {} if p["destroy"] else p["planned"]
        broken = frozenset(v for v in planned_of(planned)["venvs"]
                           if os.path.isdir(v) and not venv_runs(v, str(planned.get("python") or ""),
                                                                 str(planned.get("interpreter") or "")))
        stale: frozenset[str] = frozenset()
        want = planned_of(planned)
        if p["venv_owner"] and want["accounts"] and p["venv_owner"] not in want["accounts"]:
            try:
                uid = pwd.getpwnam(p["venv_owner"]).pw_uid
            except KeyError:
                uid = -1
            stale = frozenset(path for path in want["paths"] if os.path.lexists(path) and os.lstat(path).st_uid == uid)
        found = removals(ledger, planned, p["destroy"], p["venv_owner"] or "", broken, stale)
        changed = False
        if not module.check_mode and not p["destroy"]:
            pending = begin(ledger, read_dpkg(), p["wheels"], read_present(planned, ledger))
            if ledger.get("pending") != pending:
                ledger["pending"] = pending
                write(path, ledger)
        return {"changed": changed, "removals": found, "work": has_work(found), "ledger": ledger,
                "records_present": [r for r in p["records"] if os.path.exists(r)]}

    if state == "prune":
        found = p["removals"] or {}
        removed: dict = {"packages": [], "kept": [], "kept_data": [], "paths": [], "units": [], "accounts": [],
                         "venvs": []}
        if not has_work(found):
            return {"changed": False, "removed": removed}
        if module.check_mode:  # what would go: the packages as named, before apt's autoremove adds its followers
            return {"changed": True, "removed": {**removed, **{k: list(found.get(k) or []) for k in removed
                                                               if k not in ("kept", "kept_data")}}}
        for unit in found.get("units") or []:
            systemctl("disable", "--now", unit)
            remove_path(unit_path(unit))
            removed["units"].append(unit)
        if removed["units"]:
            systemctl("daemon-reload")
        for account in found.get("accounts") or []:
            try:
                pwd.getpwnam(account)
            except KeyError:
                continue
            argv = ["userdel", *(["--remove"] if p["purge_home"] else []), account]
            proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
            if proc.returncode not in (0, 12):  # 12: the home could not be removed (none there)
                raise LedgerError(f"userdel {account} failed: {proc.stderr.strip()[:300]}")
            removed["accounts"].append(account)
        # The directory that holds the ledger (and the apply lock beside it, which a destroy holds while it works)
        # goes last, after the packages: until then another apply still finds the lock and is refused.
        home = os.path.dirname(os.path.abspath(path))
        last = [item for item in found.get("paths") or [] if home == item or home.startswith(item.rstrip("/") + "/")]
        for item in [*(found.get("venvs") or []), *(found.get("paths") or [])]:
            if os.path.lexists(item) and item not in last:
                remove_path(item)
                removed["venvs" if item in (found.get("venvs") or []) else "paths"].append(item)
        if found.get("packages"):
            owned = set(ledger.get("packages") or {})
            engine_data = p.get("engine_data") or []
            disarm_data_hooks(engine_data, set(found["packages"]))  # the engines among what this prune purges
            removed["packages"], removed["kept"] = purge(list(found["packages"]), owned)
            removed["kept_data"] = settle_engine_data(engine_data, set(removed["packages"]))
            for data in removed["kept_data"]:
                module.warn(f"{data} kept: it holds images, containers or volumes that the engine's users made, not "
                            f"provision; delete it with `rm -rf {data}` once nobody needs them.")
        for item in sorted(last, key=len, reverse=True):
            if os.path.lexists(item):
                remove_path(item)
                removed["paths"].append(item)
        gone = set(removed["packages"])
        ledger["packages"] = {n: e for n, e in (ledger.get("packages") or {}).items() if n not in gone}
        ledger["pending"] = pruned_pending(ledger.get("pending"), removed)
        for kind in KINDS:
            ledger[kind] = [i for i in ledger.get(kind) or [] if i not in removed[kind]]
        if p["destroy"]:
            if os.path.lexists(path):
                os.unlink(path)
        else:
            write(path, ledger)
        return {"changed": any(removed[k] for k in removed if k not in ("kept", "kept_data")), "removed": removed}

    # commit
    if module.check_mode:
        return {"changed": False, "ledger": ledger}
    new = commit(ledger, read_dpkg(), p["wheels"], read_present(p["planned"], ledger), p["planned"])
    new.pop("pending", None)
    old = dict(ledger)
    old.pop("pending", None)
    changed = new != old
    new["pending"] = None
    if changed or ledger.get("pending") is not None:
        write(path, new)
    return {"changed": changed, "ledger": new}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["begin", "prune", "prune_wheels", "commit", "restart_engines"],
                      "required": True},
            "path": {"type": "path", "default": "/var/lib/provision/ledger.json"},
            "planned": {"type": "dict", "default": {}},
            "engine_data": {"type": "list", "elements": "dict", "default": []},
            "destroy": {"type": "bool", "default": False},
            "purge_home": {"type": "bool", "default": False},
            "wheels": {"type": "dict", "default": {}},
            "removals": {"type": "dict", "default": {}},
            "venv": {"type": "path", "default": ""},
            "venv_owner": {"type": "str", "default": ""},
            "records": {"type": "list", "elements": "path", "default": []},
            "engines": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module)
    except (ModuleError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"provision_ledger: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
