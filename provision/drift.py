"""`provision plan PROFILE --diff-against HOST`: what the profile would decide now, against what HOST last got.

The record of HOST (provision.state, written by `provision apply`) holds the Plan applied and the versions the
host reported after the run. Two kinds of difference come out, one line each:

    plan   cuda.version: applied 12.4, now 12.6            (the database, the profile or provision changed)
    host   numpy: installed 2.2.6, the plan now pins 2.3.1  (what is on the host no longer matches the plan)
"""

from __future__ import annotations

from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from provision.models import Plan

_IGNORED = {"profile_path", "reasons", "warnings"}


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, inner in value.items():
            if not prefix and key in _IGNORED:
                continue
            out.update(_flatten(inner, f"{prefix}.{key}" if prefix else key))
        return out
    if isinstance(value, list | tuple) and value and all(isinstance(v, dict) for v in value):
        out = {}
        for i, inner in enumerate(value):
            name = inner.get("name", str(i))
            out.update(_flatten(inner, f"{prefix}[{name}]"))
        return out
    if isinstance(value, list | tuple):
        return {prefix: ", ".join(str(v) for v in value)}
    return {prefix: value}


def plan_differences(now: Plan, applied: dict[str, Any]) -> list[str]:
    """Decisions that differ between the Plan now and the Plan recorded at apply time."""
    a = _flatten(applied)
    b = _flatten(now.model_dump(mode="json"))
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            lines.append(f"plan  {key}: applied {a.get(key, '(absent)')!s}, now {b.get(key, '(absent)')!s}")
    return lines


def pinned_wheels(plan: Plan, *, frameworks: bool = True) -> dict[str, str]:
    """name -> version for every exact pip requirement the Plan installs into its environment."""
    pins: dict[str, str] = {}
    for text in plan.pip_requirements(frameworks=frameworks):
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


def host_differences(now: Plan, record: dict[str, Any]) -> list[str]:
    """Versions the host reported at its last apply that the Plan now would not accept."""
    installed = record.get("installed") or {}
    wheels: dict[str, Any] = {canonicalize_name(k): v for k, v in (installed.get("wheels") or {}).items()}
    lines = []
    for name, version in sorted(pinned_wheels(now, frameworks=not record.get("frameworks_skipped")).items()):
        have = wheels.get(name)
        if have is None:
            lines.append(f"host  {name}: not installed, the plan now pins {version}")
        elif have != version:
            lines.append(f"host  {name}: installed {have}, the plan now pins {version}")
    packages = installed.get("packages") or {}
    if now.driver.install and now.driver.version:
        for name in now.driver.userspace_packages:
            have = packages.get(name)
            if have and not have.startswith(now.driver.version):
                lines.append(f"host  {name}: installed {have}, the plan now wants {now.driver.version}")
    return lines
