"""YAML text to plain data that remembers where each value was written (`parse_yaml()`, `_Doc`): composed from
events, so positions survive, duplicate keys are caught, anchors, aliases and unknown tags are refused, and the
number of nodes and the depth are bounded."""

from __future__ import annotations

from typing import Any

import yaml
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

from provision.errors import Problem, ProfileError, show
from provision.plan_rules import dotted

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
