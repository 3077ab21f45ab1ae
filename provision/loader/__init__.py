"""Read a profile: YAML text → `Profile`, with every problem reported as file:line:column: field: what, what to do.

The YAML is composed into nodes (not constructed) so that each value keeps its position, duplicate keys are caught,
and anchors/aliases are refused outright: a profile never needs them, and refusing them makes alias bombs harmless.
All problems found are reported together, one per line.

Its parts: files.py (the bounded read), yamldoc.py (YAML with positions), messages.py (validation errors as
lines), overrides.py (--os, --index, --python-mirror), checks.py (the model and the database); loading a profile
or a saved plan is here. Every name is importable from provision.loader.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from provision import plan_rules
from provision.compat import CompatDB
from provision.errors import Problem, ProfileError, show
from provision.loader.checks import validate_data
from provision.loader.files import MAX_BYTES, decode_text, read_bounded
from provision.loader.messages import _message
from provision.loader.overrides import (
    INDEX_NAMES,
    PYTHON_MIRROR,
    _apply_index_overrides,
    _apply_os_override,
    parse_index_overrides,
    parse_python_mirror,
)
from provision.loader.yamldoc import MAX_DEPTH, MAX_NODES, Path_, _pos_for, parse_yaml
from provision.models import Plan, Profile
from provision.plan_rules import dotted

__all__ = [
    "INDEX_NAMES", "MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "PLAN_HINT", "PYTHON_MIRROR", "decode_text", "load_plan",
    "load_profile", "parse_index_overrides", "parse_python_mirror", "parse_yaml", "read_bounded", "validate_data",
]


def load_profile(path: str | Path, *, os_override: str | None = None, db: CompatDB | None = None,
                 indexes: dict[str, str | bool] | None = None) -> Profile:
    """Read, parse and validate a profile file. Raises ProfileError with one Problem per thing wrong."""
    file = str(path)
    if show(file, len(file)) != file:
        # The name is written into every file rendered from the profile (headers, plan.json): one with a line break
        # or an escape sequence in it is refused here rather than carried.
        raise ProfileError([Problem("the file name has control characters (a line break, an escape sequence)",
                                    file=show(file, 300), hint="rename the file")])
    data, doc = parse_yaml(decode_text(read_bounded(path), file), file)
    _apply_os_override(data, os_override, file)
    if os_override and db is not None and db.system(os_override) is None:
        # The command line's word, not the file's line: the profile may well name a known OS.
        known = ", ".join(s.os_id for s in db.systems)
        raise ProfileError([Problem(f"--os {show(os_override, 40)}: no data for it", hint=f"supported: {known}")])
    _apply_index_overrides(data, indexes)  # --index NAME=URL|off: as if the profile said so
    return validate_data(data, doc, db)


PLAN_HINT = "a saved plan is what `provision plan --json` writes: write it again rather than editing it"


def load_plan(path: str | Path) -> Plan:
    """Read a saved plan (`provision plan --json > plan.json`) as strictly as a profile: the same bounded read and
    YAML limits (JSON is YAML, and so each field keeps its line), the Plan model, and the allow-list of what a plan
    may carry (provision.plan_rules). Raises ProfileError with one line per problem, naming the field."""
    file = str(path)
    data, doc = parse_yaml(decode_text(read_bounded(path, what="a plan"), file), file)
    prefix: Path_ = ()
    if isinstance(data, dict) and isinstance(data.get("plan"), dict):  # {"plan": {...}} as some tools wrap it
        data, prefix = data["plan"], ("plan",)
    if not isinstance(data, dict):
        raise ProfileError([Problem("a plan is a JSON object (profile, target, gpu, ...)", file=file, line=1, column=1,
                                    hint=PLAN_HINT)])
    problems: list[Problem] = []

    def add(path: Path_, message: str, hint: str | None) -> None:
        line, col = _pos_for(doc, (*prefix, *path)) or (None, None)
        problems.append(Problem(message, file=file, line=line, column=col, field=dotted((*prefix, *path)) or None,
                                hint=hint))

    try:
        plan = Plan.model_validate(data, context={"plan_rules": "report"})
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            message, hint = _message({**err, "loc": (*prefix, *err["loc"])}, doc)
            add(tuple(err["loc"]), message, PLAN_HINT if hint is None or err["type"] == "extra_forbidden" else hint)
        raise ProfileError(problems) from None
    for loc, what in plan_rules.problems(plan.model_dump()):
        add(loc, what, PLAN_HINT)
    if problems:
        raise ProfileError(problems)
    return plan
