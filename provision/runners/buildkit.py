"""Read the progress a Docker engine streams while BuildKit builds an image.

`POST /build?version=2` (the Engine API's BuildKit builder, which the Docker SDK has no parameter for) answers
with JSON lines like the classic builder's, except that the progress comes as
`{"id": "moby.buildkit.trace", "aux": "<base64>"}`: a protobuf `StatusResponse` from BuildKit's control API
(github.com/moby/buildkit, api/services/control/control.proto):

    StatusResponse { repeated Vertex vertexes = 1; repeated VertexStatus statuses = 2; repeated VertexLog logs = 3; }
    Vertex    { string digest = 1; repeated string inputs = 2; string name = 3; bool cached = 4;
                Timestamp started = 5; Timestamp completed = 6; string error = 7; }
    VertexLog { string vertex = 1; Timestamp timestamp = 2; int64 stream = 3; bytes msg = 4; }

Only these fields are read; the wire format (varints and length-prefixed fields) is all it takes, so no protobuf
runtime or generated code is needed. A vertex is reported again each time it changes (started, then completed or
failed), so `Trace` keeps the latest state per digest.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

TRACE_ID = "moby.buildkit.trace"
# "[2/7] RUN apt-get ..." or, in a multi-stage build, "[runtime 2/7] RUN ...": the Dockerfile's own steps.
# BuildKit pads the step number to the width of the total: `[ 2/10]`, `[venv  2/10]`.
_STEP = re.compile(r"^\[\s*(?:(?P<stage>[^\]\s][^\]]*?)\s+)?(?P<n>\d+)/(?P<of>\d+)\] (?P<text>.*)$", re.S)


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one protobuf message: ints for varints, bytes for everything else."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
            yield number, value
        elif wire == 2:
            size, i = _varint(buf, i)
            yield number, buf[i:i + size]
            i += size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            yield number, buf[i:i + width]
            i += width
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {i} is not one BuildKit's progress uses")


def _timestamp(buf: bytes) -> float:
    seconds = nanos = 0
    for number, value in fields(buf):
        if number == 1 and isinstance(value, int):
            seconds = value
        elif number == 2 and isinstance(value, int):
            nanos = value
    return seconds + nanos / 1e9


def _text(value: int | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass
class Vertex:
    """One node of the build graph: a Dockerfile step, or BuildKit's own work (loading the context, exporting)."""

    digest: str
    name: str = ""
    cached: bool = False
    started: float | None = None
    completed: float | None = None
    error: str = ""

    @property
    def step(self) -> re.Match[str] | None:
        return _STEP.match(self.name)

    @property
    def seconds(self) -> float:
        return (self.completed or self.started or 0.0) - (self.started or 0.0)

    def describe(self) -> str:
        """`step 2/7 (RUN apt-get update ...)` for a Dockerfile step, the vertex's name otherwise."""
        step = self.step
        if step is None:
            return self.name
        return f"step {step['n']}/{step['of']} ({' '.join(step['text'].split())[:80]})"


def _vertex(buf: bytes) -> Vertex:
    vertex = Vertex(digest="")
    for number, value in fields(buf):
        if number == 1:
            vertex.digest = _text(value)
        elif number == 3:
            vertex.name = _text(value)
        elif number == 4:
            vertex.cached = bool(value)
        elif number == 5 and isinstance(value, bytes):
            vertex.started = _timestamp(value)
        elif number == 6 and isinstance(value, bytes):
            vertex.completed = _timestamp(value)
        elif number == 7:
            vertex.error = _text(value)
    return vertex


@dataclass
class Trace:
    """The build as BuildKit reported it so far: vertices by digest (first-seen order) and each one's output."""

    vertices: dict[str, Vertex] = field(default_factory=dict)
    output: dict[str, list[str]] = field(default_factory=dict)

    def add(self, aux: str) -> list[str]:
        """Take one `moby.buildkit.trace` message; return the progress lines it adds, in the style of
        `docker build --progress=plain`: a step when it starts, its output, and `CACHED`, `DONE 1.2s` or `ERROR`.

        A message this cannot read (a newer engine's fields in another wire type, a truncated payload) adds
        nothing: progress is for people, and whether the build failed comes from the stream's `error` chunk."""
        try:
            return self._add(base64.b64decode(aux))
        except (ValueError, IndexError):  # binascii.Error is a ValueError
            return []

    def _add(self, message: bytes) -> list[str]:
        lines: list[str] = []
        for number, value in fields(message):
            if not isinstance(value, bytes):
                continue
            if number == 1:
                new = _vertex(value)
                old = self.vertices.get(new.digest)
                self.vertices[new.digest] = new

                def became(attr: str, new: Vertex = new, old: Vertex | None = old) -> bool:
                    return bool(getattr(new, attr)) and not (old is not None and getattr(old, attr))

                if became("cached"):
                    lines.append(f"CACHED {new.name}")
                elif became("error"):
                    lines.append(f"ERROR {new.name}: {new.error}")
                elif became("completed") and not new.cached:
                    lines.append(f"DONE {new.name} {new.seconds:.1f}s")
                elif became("started") and not new.cached:
                    lines.append(new.name)
            elif number == 3:
                digest, text = "", ""
                for n, v in fields(value):
                    if n == 1:
                        digest = _text(v)
                    elif n == 4:
                        text = _text(v)
                for line in text.splitlines():
                    if line.strip():
                        self.output.setdefault(digest, []).append(line)
                        lines.append(f"  {line}")
        return lines

    @property
    def steps(self) -> list[Vertex]:
        """The Dockerfile's steps (FROM, RUN, COPY), in the order BuildKit first reported them."""
        return [v for v in self.vertices.values() if v.step is not None]

    @property
    def failed(self) -> Vertex | None:
        return next((v for v in self.vertices.values() if v.error), None)

    def last_output(self, vertex: Vertex, lines: int = 6) -> list[str]:
        return self.output.get(vertex.digest, [])[-lines:]
