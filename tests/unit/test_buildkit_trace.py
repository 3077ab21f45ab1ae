"""provision.runners.buildkit against progress streams recorded from a real engine (Docker 20.10.24, this VM,
`POST /v1.41/build?version=2` with a tar body): one build with a cached step and a step that runs, one whose
RUN step exits 3 after writing to stdout and stderr."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from provision.runners.buildkit import TRACE_ID, Trace, fields

DATA = Path(__file__).parent / "data"


def replay(name: str) -> tuple[Trace, list[str], list[dict]]:
    trace, lines, other = Trace(), [], []
    for raw in (DATA / name).read_text().splitlines():
        chunk = json.loads(raw)
        if chunk.get("id") == TRACE_ID:
            lines += trace.add(chunk["aux"])
        else:
            other.append(chunk)
    return trace, lines, other


def test_steps_cached_and_run_are_told_apart() -> None:
    trace, lines, other = replay("buildkit-cached-and-run.jsonl")
    steps = [(v.name, v.cached) for v in trace.steps]
    assert steps == [("[1/3] FROM docker.io/provision/debian:13", False), ("[2/3] RUN echo hi > /x", True),
                     ("[3/3] RUN echo built", False)]
    assert "CACHED [2/3] RUN echo hi > /x" in lines
    # The step that ran: its start, its output (indented), then DONE with its time.
    at = lines.index("[3/3] RUN echo built")
    assert lines[at + 1] == "  built" and lines[at + 2].startswith("DONE [3/3] RUN echo built ")
    assert trace.failed is None
    assert other[-1] == {"stream": "Successfully tagged bk:4\n"}


def test_a_failed_step_names_itself_and_keeps_its_output() -> None:
    trace, lines, other = replay("buildkit-step-fails.jsonl")
    failed = trace.failed
    assert failed is not None and failed.describe() == "step 2/2 (RUN echo some output; echo err >&2; exit 3)"
    assert "exit code: 3" in failed.error
    assert trace.last_output(failed) == ["some output", "err"]
    assert any(ln.startswith("ERROR [2/2] RUN") for ln in lines)
    assert "exit code: 3" in other[-1]["errorDetail"]["message"]


def test_every_vertex_update_keeps_the_latest_state() -> None:
    trace, _, _ = replay("buildkit-cached-and-run.jsonl")
    # Each vertex is reported several times (queued, started, completed); one entry each remains, completed.
    assert len({v.digest for v in trace.vertices.values()}) == len(trace.vertices)
    assert all(v.completed for v in trace.vertices.values())


def test_wire_format_varints_and_nested_messages() -> None:
    # field 3 (string "ab"), field 4 (varint 300), field 5 (message: field 1 varint 1)
    message = bytes([0x1A, 2]) + b"ab" + bytes([0x20, 0xAC, 0x02]) + bytes([0x2A, 2, 0x08, 1])
    assert list(fields(message)) == [(3, b"ab"), (4, 300), (5, b"\x08\x01")]
    with pytest.raises(ValueError, match="wire type 3"):
        list(fields(bytes([0x0B])))


def test_an_engine_without_buildkit_is_refused_in_one_line(tmp_path: Path) -> None:
    """An engine older than API 1.39 has no BuildKit behind /build: one line saying so, before any request.
    (No such engine runs here; the check reads only the negotiated version, which is what this stands in for.)"""
    from provision.errors import RunnerError
    from provision.runners.docker import stream_build

    class OldEngine:
        api_version = "1.38"

    with pytest.raises(RunnerError, match=r"speaks API 1\.38; .* needs API 1\.39 \(Docker Engine 18\.09\)"):
        stream_build(OldEngine(), tmp_path, "x:1", no_cache=False, platform=None, progress=lambda _: None, log=[])


def test_an_unreadable_progress_message_adds_nothing() -> None:
    """Not base64, a truncated message, an unknown wire type: no exception out of the build's progress."""
    trace = Trace()
    recorded = json.loads((DATA / "buildkit-cached-and-run.jsonl").read_text().splitlines()[0])["aux"]
    truncated = base64.b64encode(base64.b64decode(recorded)[:-5]).decode()
    for aux in ("not base64!", truncated, base64.b64encode(bytes([0x0B])).decode()):
        assert trace.add(aux) == []
    assert trace.add(recorded) == ["[internal] load remote build context"]


@pytest.mark.parametrize(("name", "described"), [
    ("[2/7] RUN echo a", "step 2/7 (RUN echo a)"),
    # From ten steps on, BuildKit pads the number to the total's width: a Dockerfile of ten steps failed as
    # "[ 2/10] RUN apt-get ..." instead of "step 2/10 (...)" when the Jupyter settings step made it ten.
    ("[ 2/10] RUN apt-get update", "step 2/10 (RUN apt-get update)"),
    ("[venv  2/10] RUN apt-get update", "step 2/10 (RUN apt-get update)"),
    ("[runtime 10/10] COPY a b", "step 10/10 (COPY a b)"),
    ("[internal] load build definition from Dockerfile", "[internal] load build definition from Dockerfile"),
])
def test_a_step_is_named_however_buildkit_pads_its_number(name: str, described: str) -> None:
    from provision.runners.buildkit import Vertex
    from provision.runners.docker import is_step_line

    assert Vertex(digest="sha256:0", name=name).describe() == described
    assert is_step_line(name) == (described != name)
