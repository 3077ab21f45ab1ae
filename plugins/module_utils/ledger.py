"""The ledger's rules: what provision owns on a host (what was absent when an apply began and present when it
ended), what a new plan removes, and the file that holds it (/var/lib/provision/ledger.json, schema SCHEMA).

provision_ledger keeps the ledger with them on the host; provision_preflight and the fingerprint read it; the
controller (provision/ledger.py) imports this same file to list what an apply would install, replace and remove, so
the controller's list and the host's prune cannot disagree. Only the standard library: the controller imports it
without Ansible's module machinery.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.provision.gpu.plugins.module_utils import distributions
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError
from ansible_collections.provision.gpu.plugins.module_utils.files import root_json, write_json

SCHEMA = "provision.ledger/1"
PATH = "/var/lib/provision/ledger.json"
# The environment's own tools, made with it: never pruned one by one (the environment goes as a whole).
VENV_BASE = frozenset({"pip", "setuptools", "wheel"})
KINDS = ("paths", "units", "accounts", "venvs")
# What the ledger says provision owns (or found and must keep): the fingerprint's ledger part.
OWNED = ("packages", "found", "wheels", *KINDS)
normalize = distributions.normalize


class LedgerError(ModuleError):
    """The message is for people."""


def empty_ledger() -> dict:
    return {"schema": SCHEMA, "packages": {}, "found": {}, "wheels": {}, "paths": [], "units": [], "accounts": [],
            "venvs": [], "planned": {}, "pending": None}


def load(path: str) -> dict:
    """The ledger at `path` (provision_ledger's own read, as root: an empty one where there is none). Raises
    LedgerError for a file that is not a ledger."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return empty_ledger()
    except ValueError:
        raise LedgerError(f"{path} is not JSON: move it away (provision then owns nothing it lists) and apply again") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise LedgerError(f"{path} is not a provision ledger ({SCHEMA})")
    ledger = empty_ledger()
    ledger.update(data)
    return ledger


def write(path: str, ledger: dict) -> None:
    write_json(path, ledger)


def read_trusted(path: str) -> dict:
    """The ledger as the other modules read it: only from a root-owned file no one else can write; {} otherwise."""
    return root_json(path) or {}


def pending_of(path: str) -> dict | None:
    """The pending note of the host's ledger (an apply of provision's began and did not finish); None when none."""
    pending = read_trusted(path).get("pending")
    return pending if isinstance(pending, dict) else None


def packages_of(path: str) -> list[str]:
    """The Debian packages the host's ledger says provision installed: an earlier plan's driver branch is
    provision's to replace, not a foreign stack."""
    packages = read_trusted(path).get("packages")
    return sorted(str(name) for name in packages) if isinstance(packages, dict) else []


# ---------------------------------------------------------------------------------------------------------------
# What the ledger says to remove (pure: unit-tested in tests/unit/test_ledger.py)


def planned_of(planned: dict) -> dict:
    out = {key: sorted(set(planned.get(key) or [])) for key in ("packages", "paths", "units", "accounts")}
    out["wheels"] = sorted({normalize(w) for w in planned.get("wheels") or []})
    out["venvs"] = [planned["venv"]] if planned.get("venv") else []
    return out


def owned(ledger: dict, kind: str) -> set[str]:
    """What the ledger owns of a kind, with what an apply that did not finish made (its note lists it as absent when
    that apply began)."""
    prefix = kind + ":"
    absent = (ledger.get("pending") or {}).get("absent") or []
    return set(ledger.get(kind) or []) | {key[len(prefix):] for key in absent if key.startswith(prefix)}


def removals(ledger: dict, planned: dict, destroy: bool = False, venv_owner: str = "",
             broken: frozenset[str] = frozenset(), stale: frozenset[str] = frozenset()) -> dict:
    """What the ledger owns that `planned` does not want. Packages: the owned ones the last plan named and this one
    does not (their dependencies follow through apt's autoremove, limited to owned ones); everything owned on
    destroy. Wheels: the owned distributions the last plan named and this one does not (prune_wheels takes their
    dependencies that nothing kept requires)."""
    want = planned_of({} if destroy else planned)
    last = planned_of(ledger.get("planned") or {})
    owned_packages = set(ledger.get("packages") or {})
    if destroy:
        packages = sorted(owned_packages)
    else:
        packages = sorted((set(last["packages"]) - set(want["packages"])) & owned_packages)
    owned_wheels = {normalize(n) for n in ledger.get("wheels") or {}}
    wheels = sorted(((set(last["wheels"]) - set(want["wheels"])) & owned_wheels) - VENV_BASE)
    out: dict = {"packages": packages, "wheels": [] if destroy else wheels, "keep_wheels": want["wheels"],
                 "owned_wheels": sorted(owned_wheels - VENV_BASE)}
    for kind in KINDS:
        out[kind] = sorted(owned(ledger, kind) - set(want[kind]))
    if not destroy:
        # An account provision made stays when a plan names another (renamed): its home, and what the person did as
        # it, are theirs; destroy takes it.
        out["accounts"] = []
    owned_venvs = owned(ledger, "venvs") & set(want["venvs"])
    if owned_venvs & broken:
        # Its interpreter is gone (the system's Python moved, as a dist-upgrade from Debian 12 to 13 moves 3.11 to
        # 3.13): the environment provision made cannot be repaired in place, so it is made again.
        out["venvs"] = sorted(set(out["venvs"]) | (owned_venvs & broken))
        out["wheels"] = []
    if venv_owner and want["accounts"] and venv_owner not in want["accounts"]:
        # The plan's account changed (renamed): the environment provision made for the old one is made again for the
        # new one (its files are the old account's), not pruned wheel by wheel.
        out["venvs"] = sorted(set(out["venvs"]) | owned_venvs)
        out["wheels"] = []
        # And the directories provision made for the old account (the verifier's reports, Jupyter's state): made
        # again for the new one.
        out["paths"] = sorted(set(out["paths"]) | (stale & owned(ledger, "paths")))
    return out


def venv_runs(venv: str, python: str, interpreter: str = "") -> bool:
    """Whether the environment's interpreter is there and is the planned Python (major.minor; "" takes any). After a
    Debian 12 -> 13 dist-upgrade the environment's bin/python still runs (through /usr/bin/python3, now 3.13) but
    does not see its packages (lib/python3.11): made again. Read from the names of its links only (bin/python3.13,
    which venv makes for the interpreter it was made with): root reads nothing in a directory the account owns."""
    if not os.path.exists(os.path.join(venv, "bin", "python")):
        return False
    if interpreter and os.path.realpath(os.path.join(venv, "bin", "python")) != os.path.realpath(interpreter):
        # Made with another interpreter than the plan's: the distribution's python3 where the plan now takes a
        # managed one (or back), or a managed build the plan no longer names. Only links are read.
        return False
    return not python or os.path.lexists(os.path.join(venv, "bin", f"python{python}"))


def has_work(found: dict) -> bool:
    return any(found.get(k) for k in ("packages", "wheels", *KINDS))


def begin(ledger: dict, installed: dict[str, str], wheels: dict[str, str], present: dict[str, bool]) -> dict:
    """The host as the apply found it, noted under `pending`. A pending note left by an apply that did not finish
    is kept: what that apply installed is still not the user's."""
    if ledger.get("pending"):
        return ledger["pending"]
    return {"packages": dict(sorted(installed.items())),
            "wheels": {normalize(k): v for k, v in sorted(wheels.items())},
            "absent": sorted(name for name, there in present.items() if not there)}


def commit(ledger: dict, installed: dict[str, str], wheels: dict[str, str], present: dict[str, bool],
           planned: dict) -> dict:
    """The ledger after an apply: owned is what it owned and is still there, plus what is there now and was not
    when the apply began. A planned package that was there before is `found` (with the version found), never
    owned."""
    pending = ledger.get("pending")
    if not pending:
        # No note of how the apply found the host (the ledger role did not run: --tags): nothing new is claimed, what
        # is owned keeps its place while it is there.
        pending = {"packages": installed, "wheels": wheels, "absent": []}
    before, before_wheels = pending.get("packages") or {}, pending.get("wheels") or {}
    owned = {name: entry for name, entry in (ledger.get("packages") or {}).items() if name in installed}
    for name, version in installed.items():
        if name in owned:
            owned[name] = {**owned[name], "version": version}
        elif name not in before:
            owned[name] = {"version": version}
    want = planned_of(planned)
    for name in owned:
        owned[name]["planned"] = name in want["packages"]
    found = {name: version for name, version in (ledger.get("found") or {}).items() if name not in owned}
    for name in want["packages"]:
        if name in before and name not in owned and name not in found:
            found[name] = before[name]
    wheels = {normalize(k): v for k, v in wheels.items()}
    owned_wheels = {n: v for n, v in wheels.items() if n in (ledger.get("wheels") or {}) or n not in before_wheels}
    absent = set(pending.get("absent") or [])
    new = empty_ledger()
    new.update(packages=dict(sorted(owned.items())), found=dict(sorted(found.items())),
               wheels=dict(sorted(owned_wheels.items())), planned=want, pending=None)
    for kind in KINDS:
        prefix = kind + ":"
        kept = {item for item in ledger.get(kind) or [] if present.get(prefix + item, False)}
        made = {key[len(prefix):] for key, there in present.items()
                if key.startswith(prefix) and there and key in absent}
        new[kind] = sorted(kept | made)
    return new


def pruned_pending(pending: dict | None, removed: dict) -> dict | None:
    """The note of how the apply found the host, after the prune: what it removed counts as absent when the apply
    began, so what the roles then make again (an environment for a renamed account, or one whose interpreter was
    gone) is provision's again."""
    if not pending:
        return pending
    out = dict(pending)
    out["absent"] = sorted(set(pending.get("absent") or [])
                           | {f"{kind}:{item}" for kind in KINDS for item in removed.get(kind) or []})
    out["packages"] = {n: v for n, v in (pending.get("packages") or {}).items() if n not in set(removed.get("packages") or [])}
    if removed.get("venvs"):
        out["wheels"] = {}
    return out


def unneeded_wheels(owned: set[str], keep: set[str], requires: dict[str, set[str]], installed: set[str]) -> list[str]:
    """Owned distributions that no kept root needs: the roots are what the plan names and every distribution the
    ledger does not own (the account's own); their requirements are followed whatever their markers (a marker can
    only make fewer needed, so this keeps too much rather than too little)."""
    roots = {n for n in installed if n not in owned} | (keep & installed) | (VENV_BASE & installed)
    needed, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        todo.extend(requires.get(name, set()) - needed)
    return sorted((owned & installed) - needed)


REQ_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def read_requires(venv: str) -> tuple[set[str], dict[str, set[str]]]:
    """The environment's distributions and what each requires, from its METADATA (read as the account that runs
    this step)."""
    installed: set[str] = set()
    requires: dict[str, set[str]] = {}
    lib = os.path.join(venv, "lib")
    sites = [os.path.join(lib, pyver, "site-packages") for pyver in (sorted(os.listdir(lib)) if os.path.isdir(lib) else [])]
    for _meta, fields in distributions.scan(sites, ("Name", "Requires-Dist"), repeated=("Requires-Dist",),
                                            dist_info_only=True, strict=True):
        name = normalize(fields["Name"]) if fields.get("Name") else None
        deps = set()
        for value in fields.get("Requires-Dist", []):
            match = REQ_NAME.match(value)
            if match:
                deps.add(normalize(match.group(1)))
        if name:
            installed.add(name)
            requires.setdefault(name, set()).update(deps)
    return installed, requires
