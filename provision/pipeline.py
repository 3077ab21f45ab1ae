"""The pipeline's first two steps in one call: profile file → Profile → Plan."""

from __future__ import annotations

from pathlib import Path

from provision.compat import CompatDB, load_db
from provision.loader import load_profile
from provision.models import Plan, Profile
from provision.resolver import resolve


def display_path(path: str | Path) -> str:
    """The path as the user should read it: relative to the working directory when inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def load(path: str | Path, *, os_override: str | None = None, db: CompatDB | None = None) -> Profile:
    return load_profile(path, os_override=os_override, db=db or load_db())


def plan_for(path: str | Path, *, os_override: str | None = None, db: CompatDB | None = None) -> Plan:
    """Load, validate and resolve a profile file. Raises ProfileError or IncompatibleError."""
    db = db or load_db()
    profile = load_profile(path, os_override=os_override, db=db)
    return resolve(profile, db, profile_path=display_path(path))
