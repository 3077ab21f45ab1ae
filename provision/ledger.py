"""The ledger on the controller: what a Plan would install, replace and remove on a host, read from the host's ledger.

Each host keeps, in /var/lib/provision/ledger.json, what provision installed or wrote there and was not there before
(plugins/modules/provision_ledger.py writes it; `provision apply` fetches it to provision.state). Against a new Plan:

    install  package nvidia-cuda-toolkit            the plan names it; the ledger does not list it
    replace  wheel torch 2.7.1 -> 2.8.0             provision installed it at another version than the plan pins
    remove   wheel nvidia-cuda-runtime-cu12 12.6.77 provision installed it for the last plan; this one names it not

The rule for what goes is the hosts' own (`removals` in plugins/module_utils/ledger.py, which provision_ledger
imports there), imported from the same file, so the controller's list and the host's prune cannot disagree.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import Any

from packaging.utils import canonicalize_name

from provision.drift import pinned_wheels
from provision.hostfacts import ledger_planned
from provision.models import Plan
from provision.resources import collection_module


@cache
def ledger_module() -> ModuleType:
    """plugins/module_utils/ledger.py, the ledger's rules as the hosts run them."""
    return collection_module("plugins.module_utils.ledger")


def changes(plan: Plan | None, ledger: dict[str, Any], *, skip_frameworks: bool = False) -> list[tuple[str, str, str]]:
    """(action, kind, text) for each item: install, replace or remove. plan None: destroy (everything goes)."""
    mod = ledger_module()
    planned = ledger_planned(plan, skip_frameworks=skip_frameworks) if plan is not None else {}
    gone = mod.removals(ledger, planned, destroy=plan is None)
    owned_packages: dict[str, Any] = ledger.get("packages") or {}
    found: dict[str, Any] = ledger.get("found") or {}
    owned_wheels: dict[str, str] = {str(canonicalize_name(k)): str(v) for k, v in (ledger.get("wheels") or {}).items()}
    out: list[tuple[str, str, str]] = []
    if plan is not None:
        for name in planned["packages"]:
            if name not in owned_packages and name not in found:
                out.append(("install", "package", name))
        for name, version in sorted(pinned_wheels(plan, frameworks=not skip_frameworks).items()):
            have = owned_wheels.get(name)
            if have is None:
                out.append(("install", "wheel", f"{name} {version}"))
            elif have.split("+")[0] != version.split("+")[0]:
                out.append(("replace", "wheel", f"{name} {have} -> {version}"))
        for kind, key in (("unit", "units"), ("account", "accounts")):
            for name in planned[key]:
                if name not in (ledger.get(key) or []):
                    out.append(("install", kind, name))
    for name in gone["packages"]:
        version = (owned_packages.get(name) or {}).get("version", "")
        out.append(("remove", "package", f"{name} {version}".strip()))
    if gone["packages"]:
        out.append(("remove", "package", "and the packages only those pulled in (apt's autoremove, owned ones only)"))
    for name in gone["wheels"]:
        out.append(("remove", "wheel", f"{name} {owned_wheels.get(name, '')}".strip()))
    if gone["wheels"]:
        out.append(("remove", "wheel", "and the wheels only those required"))
    for kind, key in (("unit", "units"), ("path", "paths"), ("environment", "venvs"), ("account", "accounts")):
        for name in gone[key]:
            out.append(("remove", kind, name))
    return out


def change_lines(items: list[tuple[str, str, str]]) -> list[str]:
    return [f"{action:<8} {kind:<8} {text}" for action, kind, text in items]
