"""After a build: the engine's build-cache records of the context it was sent, which no build can use again,
removed by their IDs (`drop_context_cache()`); every layer and every other record stays."""

from __future__ import annotations

import re
import time
from typing import Any

from provision.runners.docker.engine import Progress

# What BuildKit keeps of a build context sent as a tar to `POST /build`: the tar itself, fetched from a URL made up
# for that one request (`http url http://build-context-<random>`), and the files copied out of it (`fileop target`,
# the trace's "copy /context /"). Neither can serve another build (the next request gets another URL), and no image
# shares them, but they stay in the engine's build cache: 1-2.5 GB for an environment's wheels, each build (13.3 GB
# after one test run, 2026-11-27).
CONTEXT_TAR = "http url http://build-context-"


CONTEXT_COPY = "fileop target"


# Below this a context's copy is not worth the listing (on Docker 20.10, API 1.41, the engine answers a build-cache
# listing with its whole disk usage: 9-20 s here, one at a time): the runtime stage's few kB, a Dockerfile alone.
CONTEXT_DROP_BYTES = 64 << 20


def _build_cache(api: Any) -> dict[str, dict[str, Any]] | None:
    """The engine's build-cache records by ID, or None where it cannot say (another disk-usage query kept it busy for
    a minute, or an engine without the query)."""
    import docker.errors

    for attempt in range(20):  # about a minute of tries: the engine runs one disk-usage query at a time
        try:
            data = api._result(api._get(api._url("/system/df"), params={"type": "build-cache"}), json=True)
            return {str(b["ID"]): b for b in data.get("BuildCache") or []}
        except docker.errors.APIError as exc:  # "a disk usage operation is already running": another build's
            if "already running" not in str(exc):
                return None
            time.sleep(min(0.5 * (attempt + 1), 4.0))
    return None


def _created(record: dict[str, Any]) -> float:
    """A record's CreatedAt (RFC 3339, nanoseconds) as seconds since the epoch; 0 where it cannot be read."""
    import datetime

    stamp = re.sub(r"(\.\d{6})\d*", r"\1", str(record.get("CreatedAt") or "")).replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def drop_context_cache(api: Any, since: float, progress: Progress) -> int:
    """After a build: remove the build-cache records of contexts sent as tars since `since` (CONTEXT_TAR: no build
    can use one again) and the unshared copies made out of them (CONTEXT_COPY), none in use, made since this build
    began (`since`: time.time() then, less a few seconds), by their IDs alone; the layers, every other record and
    whatever was there before this build stay.
    Returns the bytes freed. A failure here costs disk only, never the build: it is said and left."""
    import docker.errors

    records = _build_cache(api)
    if records is None:
        progress("the build context's copy stays in the engine's build cache (the engine was too busy to list it)")
        return 0
    ids = [i for i, rec in records.items() if not rec.get("Shared") and not rec.get("InUse")
           and _created(rec) >= since and (str(rec.get("Description") or "").startswith(CONTEXT_TAR)
                                           or rec.get("Description") == CONTEXT_COPY)]
    freed, failed = 0, ""
    for record in ids:  # one at a time: the engine takes one value per filter, and one prune at once
        for attempt in range(12):  # about 30 s of tries while another prune (another build's) runs
            try:
                freed += int((api.prune_builds(filters={"id": record}) or {}).get("SpaceReclaimed") or 0)
                break
            except docker.errors.APIError as exc:
                failed = str(exc.explanation or exc)[:160]
                time.sleep(min(0.5 * (attempt + 1), 4.0))
        else:
            progress(f"the build context's copy stays in the engine's build cache ({failed})")
            return freed
    progress(f"removed the build context's copy from the engine's build cache ({freed / 1e6:.0f} MB)")
    return freed
