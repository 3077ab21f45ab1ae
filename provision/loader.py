"""Read a profile: YAML text → `Profile`, with every problem reported as file:line:column: field: what, what to do.

The YAML is composed into nodes (not constructed) so that each value keeps its position, duplicate keys are caught,
and anchors/aliases are refused outright: a profile never needs them, and refusing them makes alias bombs harmless.
All problems found are reported together, one per line.
"""

from __future__ import annotations

import difflib
import errno
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import ValidationError
from yaml.events import (
    AliasEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceEndEvent,
    StreamEndEvent,
)
from yaml.nodes import ScalarNode
from yaml.resolver import Resolver

from provision import plan_rules
from provision.compat import CompatDB
from provision.errors import Problem, ProfileError, show
from provision.models import GPUSpec, IndexURL, Plan, Profile
from provision.plan_rules import dotted

MAX_BYTES = 1024 * 1024  # a profile is a page of YAML; anything near this is not one
MAX_NODES = 5000
MAX_DEPTH = 32

Pos = tuple[int, int]  # 1-based line, column
Path_ = tuple[str | int, ...]


class _Doc:
    """Plain data built from YAML events, plus the position of every key and value and the text of every scalar."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.positions: dict[Path_, Pos] = {}
        self.keys: dict[Path_, Pos] = {}  # path -> where its key is written (an unknown key is pointed at there)
        self.sources: dict[Path_, tuple[str, str]] = {}  # path -> (the scalar as written, its quoting style)
        self.problems: list[Problem] = []
        self.nodes = 0

    def problem(self, message: str, pos: Pos | None, field: str | None = None, hint: str | None = None) -> None:
        line, col = pos if pos else (None, None)
        self.problems.append(Problem(message, file=self.file, line=line, column=col, field=field, hint=hint))

    def source(self, path: Path_) -> str | None:
        """The scalar at `path` as the file spells it (`no`, `12.10`), when it was written unquoted."""
        found = self.sources.get(tuple(path))
        return found[0] if found and found[1] in ("", None) else None


class _Abort(Exception):
    def __init__(self, message: str, pos: Pos | None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.pos = pos
        self.hint = hint


_CORE = "tag:yaml.org,2002:"
# Explicit tags a profile may carry: the core schema's own, and `!` (plain text). Anything else (!!python/name:,
# !!binary, !!timestamp, !custom) is refused with its name rather than dropped.
_TAGS_ALLOWED = {"!", *(_CORE + t for t in ("str", "int", "float", "bool", "null", "seq", "map"))}


def _short_tag(tag: str) -> str:
    return "!!" + tag[len(_CORE):] if tag.startswith(_CORE) else tag


def _mark(event: Any) -> Pos:
    return (event.start_mark.line + 1, event.start_mark.column + 1)


def _check_node_event(event: Any, doc: _Doc, depth: int) -> None:
    doc.nodes += 1
    pos = _mark(event)
    if doc.nodes > MAX_NODES:
        raise _Abort(f"the document has over {MAX_NODES} values; a profile is a page of YAML", pos)
    if depth > MAX_DEPTH:
        raise _Abort(f"the document nests deeper than {MAX_DEPTH} levels; a profile needs a handful", pos)
    if isinstance(event, AliasEvent) or event.anchor is not None:
        raise _Abort("anchors and aliases (&name / *name) are not allowed in profiles: write the value out", pos)
    tag = event.tag
    if tag is not None and tag not in _TAGS_ALLOWED:
        raise _Abort(f"the YAML tag {show(_short_tag(tag), 80)} is not allowed in a profile",
                     pos, "remove the tag: a profile holds plain text, numbers, true/false, lists and mappings")


def _scalar_value(event: Any, resolver: Any) -> Any:
    value, tag = event.value, event.tag
    if tag in (None, "!") and event.style not in ("", None):
        return value  # quoted or a block scalar: always text
    if tag == "!":
        return value
    if tag is None:
        tag = resolver.resolve(ScalarNode, value, event.implicit)
    kind = tag[len(_CORE):] if tag.startswith(_CORE) else "str"
    if kind == "null":
        return None
    if kind == "bool":
        return value.lower() in ("true", "yes", "on", "y")
    if kind == "int":
        try:
            return int(value.replace("_", ""), 0)
        except ValueError:
            return value
    if kind == "float":
        try:
            return float(value.replace("_", ""))
        except ValueError:
            return value
    return value


def _compose(loader: Any, doc: _Doc) -> Any:
    """Plain data from the parser's events, with an explicit stack: the nesting depth and the number of values are
    checked as each event arrives, before anything deeper is read (100,000 `[` stop at the 33rd), and no recursion
    in a parser or composer can overflow a C stack. Returns the document's root value (None: no document)."""
    resolver = Resolver()
    root: Any = None
    documents = 0
    # Each frame: [container, path, pending key (mappings), key position, skip (a duplicate key's value)]
    stack: list[list[Any]] = []

    def place(value: Any, pos: Pos, scalar: bool) -> tuple[Path_, bool]:
        """Where a new value goes; returns its path and whether it is a duplicate key's value (dropped)."""
        nonlocal root
        if not stack:
            doc.positions.setdefault((), pos)
            root = value
            return (), False
        frame = stack[-1]
        container, path = frame[0], frame[1]
        if isinstance(container, list):
            item_path = (*path, len(container))
            container.append(value)
            doc.positions.setdefault(item_path, pos)
            return item_path, False
        key, skip = frame[2], frame[4]
        frame[2], frame[4] = None, False
        item_path = (*path, key)
        if not skip:
            container[key] = value
            if scalar:  # point at the value itself: that is what is wrong
                doc.positions[item_path] = pos
        return item_path, skip

    while True:
        event = loader.get_event()
        if isinstance(event, StreamEndEvent):
            break
        if isinstance(event, DocumentStartEvent):
            documents += 1
            if documents > 1:
                raise _Abort("a profile is one YAML document; this file has more (a second `---`)", _mark(event),
                             "keep one document per file")
            continue
        if isinstance(event, (SequenceEndEvent, MappingEndEvent)):
            stack.pop()
            continue
        if not isinstance(event, NodeEvent):
            continue
        _check_node_event(event, doc, len(stack))
        pos = _mark(event)
        frame = stack[-1] if stack else None
        if frame is not None and isinstance(frame[0], dict) and frame[2] is None:  # a mapping key
            if not isinstance(event, ScalarEvent):
                raise _Abort("mapping keys must be plain names", pos)
            key = str(event.value)
            if key in frame[0] or key in frame[5]:
                first = doc.positions.get((*frame[1], key))
                where = f" (first at line {first[0]})" if first else ""
                doc.problem(f"duplicate key '{show(key, 80)}'{where}", pos, dotted((*frame[1], key)), "keep one of them")
                frame[4] = True
            else:
                doc.positions[(*frame[1], key)] = pos
                doc.keys[(*frame[1], key)] = pos
            frame[5].add(key)
            frame[2] = key
            continue
        if isinstance(event, ScalarEvent):
            value = _scalar_value(event, resolver)
            path, skip = place(value, pos, True)
            if not skip:
                doc.sources[path] = (event.value, event.style or "")
        elif isinstance(event, CollectionStartEvent):
            container: Any = {} if isinstance(event, MappingStartEvent) else []
            path, skip = place(container, pos, False)
            stack.append([container, path, None, pos, False, set()])
    return root


def parse_yaml(text: str, file: str) -> tuple[Any, _Doc]:
    """Parse YAML text into plain data with positions. Raises ProfileError for syntax and structure problems.

    libyaml's parser (PyYAML's C loader) reads events with each one's line and column at a fraction of the cost
    of a pure-Python parser; `_compose` builds the data from them with limits on depth and size, refusing
    anchors, aliases and tags other than the core schema's as they come.
    """
    doc = _Doc(file)
    if not text.strip():
        raise ProfileError([Problem("the file is empty", file=file, hint="start from one of the shipped profiles/*.yaml")])
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    try:
        data = _compose(loader, doc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        pos = (mark.line + 1, mark.column + 1) if mark else None
        problem = exc.problem or exc.context or ""
        if "maximum nesting depth" in problem:
            # libyaml from 0.2.6 (PyYAML 6.0.4's wheels) stops deep flow collections itself, before an event
            # reaches _compose: the same refusal, said the same way whichever libyaml is installed.
            doc.problem(f"the document nests deeper than {MAX_DEPTH} levels; a profile needs a handful", pos)
        else:
            doc.problem(f"not valid YAML: {show(problem)}", pos)
        raise ProfileError(doc.problems) from None
    except yaml.YAMLError as exc:
        doc.problem(f"not valid YAML: {show(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)}", None)
        raise ProfileError(doc.problems) from None
    except _Abort as exc:
        doc.problem(exc.message, exc.pos, hint=exc.hint)
        raise ProfileError(doc.problems) from None
    finally:
        loader.dispose()
    if data is None and not doc.positions:
        raise ProfileError([Problem("the file has no content", file=file, hint="start from one of the shipped profiles/*.yaml")])
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


# The patterns of models.Version and of driver_branch: fields that take one exact version.
_VERSION_PATTERNS = {r"^[0-9]+(\.[0-9]+){0,3}$": "'12.6'", r"^[0-9]{3}$": "'580'",
                     r"^[0-9]+(\.[0-9]+){0,3}(\.post[0-9]+)?$": "'2.7.1'"}


_PCI_ID_PATTERN = r"^0[xX][0-9a-fA-F]{4}$"  # models.PciDeviceId


def _as_written(err: Mapping[str, Any], doc: _Doc | None) -> str:
    """The bad value as the user wrote it (`no`, `12.10`), not as YAML converted it (False, 12.1)."""
    written = doc.source(tuple(err["loc"])) if doc is not None else None
    if written is not None:
        return show(written)
    value = err.get("input")
    return show(value if isinstance(value, str) else repr(value))


def _version_hint(text: str, example: str) -> str:
    lowered = text.strip().lower()
    if lowered in ("latest", "newest", "stable", "any", "*", "auto"):
        why = f"'{show(text, 40)}' is not a version"
    elif any(op in text for op in ("*", "x", "X")) and any(c.isdigit() for c in text):
        why = f"'{show(text, 40)}' is a pattern, not a version"
    elif any(op in text for op in ("<", ">", "=", "~", "!", ",", "^")):
        why = f"'{show(text, 40)}' is a range, not a version"
    else:
        return f"write one version, e.g. {example}"
    return (f"{why}: a pin is one version, e.g. {example}, in quotes; leave the field out and the resolver "
            "picks the newest that fits")


def _message(err: Mapping[str, Any], doc: _Doc | None = None) -> tuple[str, str | None]:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key", "remove it, or run `provision schema` for the keys a profile may have"
    if kind == "missing":
        return "required but missing", None
    msg = str(err["msg"])
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    value = err.get("input")
    written = _as_written(err, doc)
    if kind == "string_type" and isinstance(value, (bool, int, float)):
        what = "true/false" if isinstance(value, bool) else "a number"
        converted = str(value).lower() if isinstance(value, bool) else repr(value)
        return (f"{written} is read by YAML as {what} ({converted}), not as text",
                f"put it in quotes: '{written}'")
    if kind == "string_pattern_mismatch":
        example = _VERSION_PATTERNS.get(str((err.get("ctx") or {}).get("pattern")))
        if example is not None:
            return f"'{written}' is not a version", _version_hint(str(value), example)
        if str((err.get("ctx") or {}).get("pattern")) == _PCI_ID_PATTERN:
            return (f"'{written}' is not a PCI device ID",
                    "write 0x and the four hex digits `lspci -nn -d 10de:` prints after '10de:', in quotes, "
                    "e.g. '0x1DB1'")
        return f"'{written}' has characters that are not allowed here", "use letters, digits, '.', '-' and '_'"
    if kind == "literal_error":
        return f"'{written}' is not one of the allowed values: {msg.split('Input should be ')[-1]}", None
    if "input" in err and kind not in ("model_type", "dict_type"):
        return f"{show(msg)} (got {written})", None
    return show(msg), None


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


INDEX_NAMES = ("pypi", "pytorch")


def parse_index_overrides(values: list[str] | tuple[str, ...] | None) -> dict[str, str | bool]:
    """`--index NAME=URL|off` options -> {name: URL or False}. One Problem per bad option."""
    pattern = next(m.pattern for m in get_args(IndexURL)[1:] if getattr(m, "pattern", None))  # Annotated's metadata
    out: dict[str, str | bool] = {}
    problems = []
    for value in values or ():
        name, sep, url = value.partition("=")
        name, url = name.strip(), url.strip()
        if not sep or name not in INDEX_NAMES:
            problems.append(Problem(f"--index '{show(value, 200)}': expected NAME=URL or NAME=off with NAME one of "
                                    f"{', '.join(INDEX_NAMES)}", hint="e.g. --index pytorch=off, "
                                    "--index pypi=https://devpi.example/root/pypi/+simple"))
        elif url.lower() in ("off", "false", "no"):
            out[name] = False
        elif not re.fullmatch(pattern, url):
            problems.append(Problem(f"--index {name}='{show(url, 200)}' is not an http(s) URL pip can use "
                                    "(no spaces, quotes or shell characters)", hint=f"--index {name}=https://HOST/PATH or --index {name}=off"))
        else:
            out[name] = url
    if problems:
        raise ProfileError(problems)
    return out


# The key of the overrides (`--index`, `--python-mirror`, an inventory's provision_python_mirror) that names where
# managed interpreters come from: it lands in software.python_mirror, the rest in software.indexes.
PYTHON_MIRROR = "python_mirror"


def parse_python_mirror(value: str, *, base: Path | None = None, what: str = "--python-mirror") -> str:
    """A python mirror as given (`--python-mirror DIR|URL`, provision_python_mirror) -> an http(s) URL, or an absolute
    directory (relative ones from base, else the working directory) that exists. One Problem when it is neither."""
    text = value.strip()
    if re.match(r"^[a-z]+://", text):
        if not re.fullmatch(r"https?://[A-Za-z0-9._~:/?@%+=&-]+", text):
            raise ProfileError([Problem(f"{what} '{show(text, 200)}' is not an http(s) URL (no spaces, quotes or shell "
                                        "characters)", hint=f"{what} https://HOST/PATH or a directory")])
        return text.rstrip("/")
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    if not path.is_dir():
        raise ProfileError([Problem(f"{what} {show(text, 200)}: no such directory", hint="a directory holding "
                                    "python-build-standalone's archives under their release names and a SHA256SUMS, "
                                    "or an http(s) URL of one")])
    return str(path.resolve())


def _apply_index_overrides(data: Any, indexes: dict[str, str | bool] | None) -> None:
    if not indexes or not isinstance(data, dict):
        return
    software = data.setdefault("software", {})
    if isinstance(software, dict):
        overrides = dict(indexes)
        mirror = overrides.pop(PYTHON_MIRROR, None)
        if mirror:
            software[PYTHON_MIRROR] = mirror
        if overrides:
            given = software.get("indexes")
            merged = given if isinstance(given, dict) else {}
            software["indexes"] = {**merged, **overrides}


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
            message, hint = _message(err, doc)
            # An unknown key is the key's fault, not its value's: point at the key.
            at = doc.keys.get(loc) if err["type"] == "extra_forbidden" else None
            line, col = at or _pos_for(doc, loc) or (None, None)
            problems.append(Problem(message, file=file, line=line, column=col, field=dotted(loc) or None, hint=hint))
        raise ProfileError(problems) from None
    if db is not None:
        _check_against_db(profile, doc, db)
    return profile


def _check_against_db(profile: Profile, doc: _Doc, db: CompatDB) -> None:
    problems: list[Problem] = []

    def add(path: Path_, message: str, hint: str | None = None) -> None:
        line, col = _pos_for(doc, path) or (None, None)
        problems.append(Problem(message, file=doc.file, line=line, column=col, field=dotted(path), hint=hint))

    specs: list[tuple[Path_, GPUSpec]] = [(("hardware", "gpu"), profile.hardware.gpu)]
    specs += [(("hardware", "extra_gpus", i), s) for i, s in enumerate(profile.hardware.extra_gpus)]
    for at, spec in specs:
        _check_gpu(spec, at, db, add)
    os_id = f"{profile.target.os.distribution}-{profile.target.os.release}"
    if profile.target.kind not in ("colab", "jetson") and db.system(os_id) is None:
        known = ", ".join(s.os_id for s in db.systems)
        add(("target", "os"), f"no data for {os_id}", f"supported: {known}")
    if profile.target.instance_type and db.instance(profile.target.instance_type) is None:
        names = [i.instance_type for i in db.instances]
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


def _check_gpu(spec: GPUSpec, at: Path_, db: CompatDB, add) -> None:
    """A listed GPU is the database's row (a description given beside it must agree); one of NVIDIA's driver list
    that gpus.yaml does not list is planned from the list's chip and compute capability; an unlisted one from its
    compute capability and memory, which the profile must then give."""
    if spec.pci_id is not None:
        dev = db.device(spec.pci_id)
        if dev is None:
            lists = ", ".join(str(lst["driver"]) for lst in db.devices().lists) or "none"
            add((*at, "pci_id"), f"no GPU with PCI device ID {spec.pci_id} in NVIDIA's driver list ({lists})",
                "check it with `lspci -nn -d 10de:`, or give hardware.gpu.model and compute_capability")
            return
        by_name = db.resolve_gpu(spec.model) if spec.model is not None else None
        by_id = db.resolve_gpu(spec.pci_id)
        id_names = {" ".join(d.name.lower().split()) for d in db.devices().by_id.get(int(spec.pci_id, 16), ())}
        if (spec.model is not None and by_name is not None and (by_id is None or by_name.model != by_id.model)
                and " ".join(spec.model.lower().split()) not in id_names):
            add((*at, "model"), f"'{spec.model}' is not the GPU with PCI device ID {spec.pci_id} ({dev.name})",
                "remove one of them, or make them agree")
            return
    name = spec.name
    row = db.resolve_gpu(name)
    if row is None and not spec.described():
        field = "pci_id" if spec.model is None else "model"
        if _legacy_problem(db, name, at, field, add):
            return
        close = difflib.get_close_matches(name, db.gpu_names(), n=1, cutoff=0.5)
        describe = (f"if `provision gpus --all` does not list yours, describe it: {dotted(at)}.compute_capability "
                    "(`nvidia-smi --query-gpu=compute_cap --format=csv,noheader`) and "
                    f"{dotted(at)}.memory_gb")
        add((*at, field), f"unknown GPU '{name}'",
            (f"did you mean '{close[0]}'? " if close else "") + describe)
        return
    if row is None:
        cc = spec.compute_capability
        assert cc is not None  # described() above
        if db.architecture_of(cc) is None:
            known = ", ".join(f"{a.name} {'/'.join(a.cc)}" for a in db.architectures)
            add((*at, "compute_capability"), f"compute capability {cc} is not one of an NVIDIA architecture's",
                f"check it with `nvidia-smi --query-gpu=compute_cap --format=csv,noheader`; known: {known}")
        if spec.memory_gb is None:
            add((*at, "memory_gb"), f"'{name}' is not in the database, so its memory is needed",
                f"set {dotted(at)}.memory_gb: `nvidia-smi --query-gpu=memory.total --format=csv` prints it")
        return
    if row.confidence == "driver-list":  # the list gives no memory or peaks: the profile's figures are the row's
        if spec.compute_capability is not None and spec.compute_capability != row.cc:
            add((*at, "compute_capability"), f"{row.model} ({row.pci_id}, {row.chip}) has compute capability "
                f"{row.cc} ({row.source}), the profile says {spec.compute_capability}",
                f"remove {dotted(at)}.compute_capability")
        return
    given = {"compute_capability": (spec.compute_capability, row.cc), "memory_gb": (spec.memory_gb, row.memory_gb),
             "bandwidth_gbps": (spec.bandwidth_gbps, row.bandwidth_gbps),
             "fp32_tflops": (spec.fp32_tflops, row.fp32_tflops)}
    for key, (mine, theirs) in given.items():
        if mine is not None and mine != theirs:
            add((*at, key), f"{row.model} has {key} {theirs} in the database ({row.source}), the profile says {mine}",
                f"remove {dotted(at)}.{key}: a listed GPU's figures come from the database; or name the model "
                "you have")


def _legacy_problem(db: CompatDB, name: str, at: Path_, field: str, add) -> bool:
    """Say why a GPU NVIDIA's driver list names cannot be planned: it predates CUDA, or NVIDIA reused the name for
    chips of different compute capability. False where the list does not name it."""
    devs = db.devices().chips_named(name) if field == "model" else tuple(d for d in [db.device(name)] if d)
    if not devs:
        return False
    if len({d.cc for d in devs}) > 1:
        chips = "; ".join(sorted({f"{d.chip} (cc {d.cc or 'none'}) {d.pci_id}" for d in devs}))
        add((*at, field), f"NVIDIA's driver list names several chips '{name}': {chips}",
            f"give {dotted(at)}.pci_id: `lspci -nn -d 10de:` prints it after '10de:' (or `provision doctor`)")
        return True
    dev = devs[0]
    if dev.cc_note:  # a CUDA-era chip whose compute capability NVIDIA does not publish: the user can give it
        add((*at, field), f"{dev.name} ({dev.pci_id}, {dev.chip}, {dev.arch}) has no known compute capability: "
            f"{dev.cc_note} ({dev.chip_source})",
            f"describe it: {dotted(at)}.compute_capability (`nvidia-smi --query-gpu=compute_cap --format=csv,noheader`) "
            f"and {dotted(at)}.memory_gb")
        return True
    last = f"its last driver is the {dev.legacy_branch}.xx legacy branch" if dev.legacy_branch else ""
    add((*at, field), f"{dev.name} ({dev.pci_id}, {dev.chip}, {dev.arch or 'unknown architecture'}) predates CUDA"
        + (f"; {last}" if last else ""),
        "provision plans CUDA stacks; no CUDA runs on this GPU")
    return True


_KINDS = (
    (stat.S_ISDIR, "a directory", "name a .yaml file in it"),
    (stat.S_ISFIFO, "a named pipe (FIFO)", "give a profile file; to pass generated YAML, write it to a file first"),
    (stat.S_ISCHR, "a character device", "give a profile file"),
    (stat.S_ISBLK, "a block device", "give a profile file"),
    (stat.S_ISSOCK, "a socket", "give a profile file"),
)


def read_bounded(path: str | Path, *, limit: int = MAX_BYTES, what: str = "a profile") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; anything else is one ProfileError line.

    Checked with stat before opening (opening a device can have effects), opened without blocking (a FIFO with no
    writer would wait for ever) and checked again on the descriptor (the name may have changed in between), then
    read up to `limit` + 1 bytes: /dev/zero, a FIFO or a file that grows cannot make it read more than that.
    """
    file = show(str(path), 300)
    hints = {
        errno.ENOENT: ("no such file", "`ls profiles/` shows the shipped profiles"),
        errno.EACCES: ("cannot read the file (permission denied)", None),
        errno.EPERM: ("cannot read the file (operation not permitted)", None),
        errno.ELOOP: ("too many levels of symbolic links (a symbolic link loop?)", "point the link at a profile file"),
        errno.ENAMETOOLONG: ("the file name is too long", None),
        errno.ENOTDIR: ("a part of the path is not a directory", None),
    }

    def refuse(message: str, hint: str | None = None) -> ProfileError:
        return ProfileError([Problem(message, file=file, hint=hint)])

    def check(st: os.stat_result) -> None:
        for test, kind, hint in _KINDS:
            if test(st.st_mode):
                raise refuse(f"is {kind}, not a file", hint)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("is not a regular file", "give a profile file")
        if st.st_size > limit:
            raise refuse(f"the file is {st.st_size} bytes; {what} is at most {limit}", f"is this really {what}?")

    fd = -1
    try:
        check(os.stat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        check(os.fstat(fd))
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise refuse(f"the file is over {limit} bytes; {what} is at most {limit}", f"is this really {what}?")
        return b"".join(chunks)
    except OSError as exc:
        message, hint = hints.get(exc.errno or 0, (f"cannot read the file ({exc.strerror or type(exc).__name__})", None))
        raise refuse(message, hint) from None
    finally:
        if fd >= 0:
            os.close(fd)


def decode_text(raw: bytes, file: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProfileError([Problem(f"not UTF-8 text (byte {exc.start})", file=show(file, 300),
                                    hint="save the file as UTF-8")]) from None


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
