"""Images a test built, removed when it is done with them: an environment image is 2-4 GB, and a whole test run
built a dozen (60 GB of a CI machine's disk, which ran out on 2026-11-27). Only the tags a test names: never an image
another test, on another worker, may be building from.

Removing an image does not free its layers: BuildKit keeps them as build-cache records, now shared with no image
(2026-11-27: 14 GB of them in the middle of a run). So the records this test session made that no image shares and
no build uses go too, by ID, never one from before the session (a developer's own build cache stays)."""

from __future__ import annotations

import os
import subprocess
import time

import docker.errors

from provision.runners import docker as runner

# When this test session began: scripts/test.sh exports it for every worker; a lone pytest takes its own start.
SESSION_START = float(os.environ.setdefault("PROVISION_TEST_SESSION_START", str(time.time())))


def remove_images(*tags: str) -> None:
    """`docker image rm` each tag given (empty ones skipped; one still in use, or gone already, is left), then, when
    an image was deleted, the build-cache records this session made that no image shares and no build uses."""
    deleted = False
    for tag in filter(None, tags):
        proc = subprocess.run(["docker", "image", "rm", tag], capture_output=True, text=True, timeout=300)
        # "Untagged:" alone: another tag names the same image (test_image's two DeskMini tags), whose layers stay.
        deleted |= proc.returncode == 0 and "Deleted:" in proc.stdout
    if not deleted:  # nothing freed to the build cache here: skip the listing (on Docker 20.10 it is the whole disk
        return       # usage, 9-20 s); what an earlier build left goes with the next removal of this session
    api = runner.connect()
    records = runner._build_cache(api) or {}
    for record_id, rec in records.items():
        if not rec.get("Shared") and not rec.get("InUse") and runner._created(rec) >= SESSION_START - 5:
            try:
                api.prune_builds(filters={"id": record_id})
            except docker.errors.APIError:  # another prune at once (another worker's): disk only, the next takes it
                continue
