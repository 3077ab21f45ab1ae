"""Stage `plan`: a profile file → Profile → the resolved, frozen Plan (or a saved plan read back). Pure of hosts:
nothing here touches one; `targets` resolves one Plan per group of hosts with it."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from provision.compat import CompatDB, load_db
from provision.errors import ProvisionError, UsageError
from provision.loader import load_plan, load_profile
from provision.models import Plan, Profile
from provision.resolver import resolve
from provision.resources import share_dir


def display_path(path: str | Path) -> str:
    """The path as the user should read it: relative to the working directory when inside it."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def profile_label(value: str, path: Path) -> str:
    """A provision_profile value as the summary shows it: a shipped profile by the name the user wrote (`deskmini`,
    not the path inside the installed package), any other file as display_path gives it."""
    if "/" not in value and path.resolve().parent == share_dir("profiles").resolve():
        return value
    return display_path(path)


def load(path: str | Path, *, os_override: str | None = None, db: CompatDB | None = None) -> Profile:
    return load_profile(path, os_override=os_override, db=db or load_db())


def plan_for(path: str | Path, *, os_override: str | None = None, db: CompatDB | None = None,
             indexes: dict[str, str | bool] | None = None) -> Plan:
    """Load, validate and resolve a profile file. Raises ProfileError or IncompatibleError.
    indexes: `--index` overrides of the profile's software.indexes ({name: URL or False})."""
    db = db or load_db()
    profile = load_profile(path, os_override=os_override, db=db, indexes=indexes)
    try:
        return resolve(profile, db, profile_path=display_path(path))
    except ValidationError as exc:  # a Plan that breaks its own rules: a bug in provision or its data, not the user's
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        raise ProvisionError(f"{display_path(path)}: the resolved plan breaks a rule at {where}: {first.get('msg')} "
                             "(a bug in provision or its database: please report it with this line)") from None


def plan_from(path: Path, os_override: str | None = None, indexes: dict[str, str | bool] | None = None) -> Plan:
    """The plan to build: resolved from a profile (YAML), or read from a saved plan (`provision plan --json`)."""
    if not path.exists():
        raise UsageError(f"{path}: no such file (give a profile such as profiles/deskmini.yaml, or a plan .json)")
    if path.suffix == ".json":
        # As strictly as a profile: every field within what a plan may carry, one line per problem (exit 2).
        return load_plan(path)
    return plan_for(str(path), os_override=os_override, indexes=indexes)
