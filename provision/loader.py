"""Read a profile: YAML text → `Profile`, with every problem reported as file:line:column: field: what, what to do.

The YAML is composed into nodes (not constructed) so that each value keeps its position, duplicate keys are caught,
and anchors/aliases are refused outright: a profile never needs them, and refusing them makes alias bombs harmless.
All problems found are reported together, one per line.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from provision.compat import CompatDB
from provision.errors import Problem, ProfileError
from provision.models import Profile

MAX_BYTES = 256 * 1024  # a profile is a page of YAML; anything near this is not one
MAX_NODES = 5000
MAX_DEPTH = 32

Pos = tuple[int, int]  # 1-based line, column
Path_ = tuple[str | int, ...]


class _Doc:
    """Plain data built from YAML nodes, plus the position of every key and value."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.positions: dict[Path_, Pos] = {}
        self.problems: list[Problem] = []
        self.nodes = 0

    def problem(self, message: str, pos: Pos | None, field: str | None = None, hint: str | None = None) -> None:
        line, col = pos if pos else (None, None)
        self.problems.append(Problem(message, file=self.file, line=line, column=col, field=field, hint=hint))

    def build(self, node: Any, path: Path_, depth: int, seen: set[int]) -> Any:
        from yaml.nodes import MappingNode, ScalarNode, SequenceNode

        self.nodes += 1
        pos = (node.start_mark.line + 1, node.start_mark.column + 1)
        self.positions.setdefault(path, pos)
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise _Abort(
                f"the document is too large or too deeply nested (over {MAX_NODES} values or {MAX_DEPTH} levels)", pos
            )
        if id(node) in seen:
            raise _Abort("anchors and aliases (&name / *name) are not allowed in profiles: write the value out", pos)
        seen.add(id(node))
        if isinstance(node, MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, ScalarNode):
                    raise _Abort(
                        "mapping keys must be plain names",
                        (key_node.start_mark.line + 1, key_node.start_mark.column + 1),
                    )
                key = str(key_node.value)
                kpos = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
                if key in result:
                    first = self.positions.get((*path, key))
                    where = f" (first at line {first[0]})" if first else ""
                    self.problem(f"duplicate key '{key}'{where}", kpos, _dotted((*path, key)), "keep one of them")
                    continue
                self.positions[(*path, key)] = kpos
                result[key] = self.build(value_node, (*path, key), depth + 1, seen)
                if isinstance(value_node, ScalarNode):  # point at the value itself: that is what is wrong
                    self.positions[(*path, key)] = (value_node.start_mark.line + 1, value_node.start_mark.column + 1)
            return result
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i), depth + 1, seen) for i, item in enumerate(node.value)]
        return _scalar(node)


class _Abort(Exception):
    def __init__(self, message: str, pos: Pos | None) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos


def _scalar(node: Any) -> Any:
    tag = str(node.tag or "")
    value = node.value
    if node.style:  # quoted: always a string
        return value
    if tag.endswith(":null"):
        return None
    if tag.endswith(":bool"):
        return value.lower() in ("true", "yes", "on")
    if tag.endswith(":int"):
        try:
            return int(value.replace("_", ""), 0)
        except ValueError:
            return value
    if tag.endswith(":float"):
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return value
    return value


def _dotted(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (("." if text else "") + part)
    return text


def parse_yaml(text: str, file: str) -> tuple[Any, _Doc]:
    """Compose YAML text into plain data with positions. Raises ProfileError for syntax and structure problems.

    libyaml's composer (PyYAML's C loader) keeps each node's line and column at a fraction of the
    start-up cost of a pure-Python parser; an alias composes to the node it names, which `_Doc.build` refuses on sight.
    """
    import yaml

    doc = _Doc(file)
    if not text.strip():
        raise ProfileError([Problem("the file is empty", file=file, hint="start from one of the shipped profiles/*.yaml")])
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        node = yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = (mark.line + 1, mark.column + 1) if mark else None
        doc.problem(f"not valid YAML: {exc.problem or exc.context}", pos)
        raise ProfileError(doc.problems) from None
    except yaml.YAMLError as exc:
        doc.problem(f"not valid YAML: {str(exc).splitlines()[0]}", None)
        raise ProfileError(doc.problems) from None
    if node is None:
        raise ProfileError([Problem("the file has no content", file=file, hint="start from one of the shipped profiles/*.yaml")])
    try:
        data = doc.build(node, (), 0, set())
    except _Abort as exc:
        doc.problem(exc.message, exc.pos)
        raise ProfileError(doc.problems) from None
    if doc.problems:
        raise ProfileError(doc.problems)
    return data, doc


def _pos_for(doc: _Doc, loc: tuple[Any, ...]) -> Pos | None:
    path: Path_ = tuple(loc)
    while True:
        if path in doc.positions:
            return doc.positions[path]
        if not path:
            return None
        path = path[:-1]


def _message(err: dict[str, Any]) -> tuple[str, str | None]:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key", "remove it, or run `provision schema` for the keys a profile may have"
    if kind == "missing":
        return "required but missing", None
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "string_pattern_mismatch":
        return f"'{err.get('input')}' has characters that are not allowed here", "use letters, digits, '.', '-' and '_'"
    if kind == "literal_error":
        return f"'{err.get('input')}' is not one of the allowed values: {msg.split('Input should be ')[-1]}", None
    if "input" in err and kind not in ("model_type", "dict_type"):
        return f"{msg} (got {err['input']!r})", None
    return msg, None


def _apply_os_override(data: Any, os_override: str | None, file: str) -> None:
    if not os_override or not isinstance(data, dict):
        return
    try:
        distribution, release = os_override.split("-", 1)
    except ValueError:
        raise ProfileError(
            [
                Problem(
                    f"--os '{os_override}' is not of the form <distribution>-<release>",
                    hint="e.g. debian-13, ubuntu-24.04",
                )
            ]
        ) from None
    target = data.get("target")
    if isinstance(target, dict):
        target["os"] = {"distribution": distribution, "release": release}


def validate_data(data: Any, doc: _Doc, db: CompatDB | None) -> Profile:
    """Validate plain data against the Profile model, then against the database (GPU, OS, instance type)."""
    file = doc.file
    if not isinstance(data, dict):
        raise ProfileError(
            [Problem("a profile is a mapping of keys (name, hardware, target, ...)", file=file, line=1, column=1)]
        )
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            message, hint = _message(err)
            line, col = _pos_for(doc, loc) or (None, None)
            problems.append(Problem(message, file=file, line=line, column=col, field=_dotted(loc) or None, hint=hint))
        raise ProfileError(problems) from None
    if db is not None:
        _check_against_db(profile, doc, db)
    return profile


def _check_against_db(profile: Profile, doc: _Doc, db: CompatDB) -> None:
    problems: list[Problem] = []

    def add(path: Path_, message: str, hint: str | None = None) -> None:
        line, col = _pos_for(doc, path) or (None, None)
        problems.append(Problem(message, file=doc.file, line=line, column=col, field=_dotted(path), hint=hint))

    gpu_name = profile.hardware.gpu.model
    if db.gpu(gpu_name) is None:
        close = difflib.get_close_matches(gpu_name, db.gpu_names(), n=1, cutoff=0.5)
        add(
            ("hardware", "gpu", "model"),
            f"unknown GPU '{gpu_name}'",
            f"did you mean '{close[0]}'?" if close else "`provision gpus` lists the known GPUs",
        )
    os_id = f"{profile.target.os.distribution}-{profile.target.os.release}"
    if profile.target.kind not in ("colab", "jetson") and db.system(os_id) is None:
        known = ", ".join(s.os_id for s in db.systems)
        add(("target", "os"), f"no data for {os_id}", f"supported: {known}")
    if profile.target.instance_type and db.instance(profile.target.instance_type) is None:
        names = [i.instance_type for i in db.aws]
        close = difflib.get_close_matches(profile.target.instance_type, names, n=1, cutoff=0.5)
        add(
            ("target", "instance_type"),
            f"unknown instance type '{profile.target.instance_type}'",
            f"did you mean '{close[0]}'?" if close else "known: " + ", ".join(names),
        )
    if profile.target.jetpack and db.jetpack_release(profile.target.jetpack) is None:
        known = ", ".join(j.jetpack for j in db.jetpack)
        add(("target", "jetpack"), f"unknown JetPack release '{profile.target.jetpack}'", f"known: {known}")
    if problems:
        raise ProfileError(problems)


def load_profile(path: str | Path, *, os_override: str | None = None, db: CompatDB | None = None) -> Profile:
    """Read, parse and validate a profile file. Raises ProfileError with one Problem per thing wrong."""
    path = Path(path)
    file = str(path)
    try:
        if path.is_dir():
            raise ProfileError([Problem("is a directory, not a profile file", file=file, hint="name a .yaml file")])
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise ProfileError(
                [
                    Problem(
                        f"the file is {size} bytes; a profile is at most {MAX_BYTES}",
                        file=file,
                        hint="is this really a profile?",
                    )
                ]
            )
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ProfileError(
            [Problem("no such file", file=file, hint="`ls profiles/` shows the shipped profiles")]
        ) from None
    except PermissionError:
        raise ProfileError([Problem("cannot read the file (permission denied)", file=file)]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError([Problem(f"not UTF-8 text (byte {exc.start})", file=file)]) from None
    data, doc = parse_yaml(text, file)
    _apply_os_override(data, os_override, file)
    return validate_data(data, doc, db)
