"""One BuildKit build through the Engine API (`stream_build()`): the context sent as a GNU tar, the progress read
by provision.runners.buildkit, a failed step turned into one line; and what counts as a step line (`is_step_line()`)."""

from __future__ import annotations

import json
import re
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from provision.errors import RunFailed, RunnerError
from provision.runners.buildkit import TRACE_ID, Trace
from provision.runners.docker.cache import CONTEXT_DROP_BYTES, drop_context_cache
from provision.runners.docker.engine import Progress, _docker_host

# BuildKit pads the step number to the width of the total (`[ 2/10]`, `[venv  2/10]`).
_STEP_LINE = re.compile(r"^(?:CACHED |DONE )?\[[^\]]*?\d+/\d+\] ")


def is_step_line(line: str) -> bool:
    """A progress line about a Dockerfile step (`[2/7] RUN ...`, `CACHED [2/7] ...`, `DONE [2/7] ... 3.1s`)."""
    return bool(_STEP_LINE.match(line))


@contextmanager
def _context_tar(ctx: Path) -> Iterator[IO[bytes]]:
    """The build context as the tar BuildKit takes in a request body: the Dockerfile first, GNU format.

    Not `docker.utils.build.tar`: it writes POSIX (pax) tars, and Python adds a pax header to any member whose
    mtime has a fraction of a second, which is most files. The engine tells a tar body from a bare Dockerfile
    by its first bytes; behind a pax header it takes the whole body for a Dockerfile and fails on line 1
    (`unknown instruction: ././@PaxHeader`, Docker 20.10). GNU format, whole-second mtimes, no owners.
    """
    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = int(info.mtime), 0, 0, "", ""
        return info

    names = [p for p in sorted(ctx.rglob("*")) if "__pycache__" not in p.parts and p.name != "Dockerfile"]
    with tempfile.TemporaryFile(dir=ctx.parent) as body:
        with tarfile.open(fileobj=body, mode="w", format=tarfile.GNU_FORMAT) as archive:
            for path in [ctx / "Dockerfile", *names]:
                archive.add(path, arcname=str(path.relative_to(ctx)), recursive=False, filter=normalise)
        body.seek(0)
        yield body


# The Engine API version that has BuildKit behind `POST /build?version=2` (Docker Engine 18.09).
BUILDKIT_API = (1, 39)


def _context_bytes(ctx: Path) -> int:
    return sum(f.stat().st_size for f in ctx.rglob("*") if f.is_file() and not f.is_symlink())


def stream_build(api: Any, ctx: Path, tag: str, *, no_cache: bool, platform: str | None, progress: Progress,
            log: list[str], labels: dict[str, str] | None = None) -> tuple[int, int]:
    """One BuildKit build of the context directory `ctx`, streamed; returns (steps cached, steps run).

    BuildKit, not the classic builder: the classic builder commits a container for every instruction, ENV and
    EXPOSE included (10-30 s each on a fuse-overlayfs engine), where BuildKit writes settings into the image
    config without running anything. The SDK's `build()` has no parameter for the builder version, so the
    request is made through the SDK's own client (`_post`, `_stream_helper`, which `APIClient.build` itself
    uses). A failed step is RunFailed, with its last output.
    """
    import docker.errors

    version = tuple(int(p) for p in str(api.api_version).split(".")[:2])
    if version < BUILDKIT_API:
        raise RunnerError(f"the Docker engine at {_docker_host()} speaks API {api.api_version}; provision builds "
                          "with BuildKit, which needs API 1.39 (Docker Engine 18.09) or newer: upgrade the engine")
    trace = Trace()
    params = {"t": tag, "version": "2", "rm": "1", "forcerm": "1", "nocache": "1" if no_cache else "0", "pull": "0"}
    if platform:
        params["platform"] = platform
    if labels:  # set on the image as LABEL lines would be (BuildKit's label:<key> frontend options)
        params["labels"] = json.dumps(labels)
    progress(f"building {tag}")
    since = time.time() - 5  # the engine's clock may lag this one's a little; a remote engine's more (see drop_...)
    try:
        with _context_tar(ctx) as context:
            response = api._post(api._url("/build"), params=params, data=context, stream=True, timeout=None,
                                 headers={"Content-Type": "application/tar"})
            api._raise_for_status(response)
            for chunk in api._stream_helper(response, decode=True):
                if chunk.get("id") == TRACE_ID and isinstance(chunk.get("aux"), str):
                    lines = trace.add(chunk["aux"])
                elif "error" in chunk:
                    detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                    failed = trace.failed
                    tail = " | ".join(trace.last_output(failed)) if failed else ""
                    raise RunFailed(
                        f"building {tag}: {failed.describe() if failed else 'a step'} failed: {detail.strip()[:300]}"
                        + (f"; last output: {tail[-500:]}" if tail else "")
                        + "; fix the plan or profile it comes from, then run `provision build` again"
                    )
                else:
                    lines = [ln for ln in str(chunk.get("stream", "")).splitlines() if ln.strip()]
                for line in lines:
                    log.append(line)
                    progress(line)
    except docker.errors.APIError as exc:
        raise RunnerError(f"building {tag}: the Docker engine refused the build: {exc.explanation or exc}") from None
    finally:
        if _context_bytes(ctx) >= CONTEXT_DROP_BYTES:
            drop_context_cache(api, since, progress)
    steps = [v for v in trace.steps if not v.name.split("] ", 1)[-1].startswith("FROM ")]
    cached = sum(1 for v in steps if v.cached)
    return cached, len(steps) - cached
