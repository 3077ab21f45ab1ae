"""Images a test built, removed when it is done with them: an environment image is 2-4 GB, and a whole test run
built a dozen (60 GB of a CI machine's disk, which ran out on 2026-11-27). Only the tags a test names: never an image
another test, on another worker, may be building from.

Removing an image does not free its layers: BuildKit keeps them as build-cache records, now shared with no image
(2026-11-27: 14 GB of them in the middle of a run). So the records this test session made that no image shares and
no build uses go too, by ID, never one from before the session (a developer's own build cache stays).

One kind is kept from one session to the next, as the wheels and the base images are: the environment images
test_image.py and test_image_managed_python.py build (keep_environment). `provision build` names an environment image
by what goes into it (the venv stage's text, the base image's ID, the wheel files: provision/runners/docker/context.py)
and builds it only when no image has that name. A kept image is recorded with the digest of the code that built it
(BUILD_CODE), and drop_stale_environments removes it before a build as soon as that code differs in the checkout, so a
kept image stands only for what this checkout's provision would build from the same inputs."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import docker.errors

from provision.runners import docker as runner
from provision.state import cache_lock, cache_root

ROOT = Path(__file__).resolve().parents[2]
# What builds an environment image besides its named inputs: the runner (the context, the build's stream), the
# Dockerfile's rendering and its template.
BUILD_CODE = ("provision/runners/docker", "provision/runners/buildkit.py", "provision/render/docker.py",
              "templates/Dockerfile.j2")
KEPT = "test-environments.json"  # in the controller's cache: tag -> {"code": BUILD_CODE digest, "slot": whose}

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


def build_code_digest() -> str:
    """sha256 over BUILD_CODE's files (their paths and bytes), in a fixed order."""
    digest = hashlib.sha256()
    for part in BUILD_CODE:
        path = ROOT / part
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(ROOT)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def _kept() -> dict[str, dict[str, str]]:
    """The record: each kept tag with the BUILD_CODE digest it was built with and its slot (whose it is: one tag per
    slot). A record of the first form (tag -> digest) reads with the tag's repository as its slot."""
    try:
        record = json.loads((cache_root() / KEPT).read_text())
    except (OSError, ValueError):
        return {}
    return {tag: entry if isinstance(entry, dict) else {"code": entry, "slot": tag.rsplit(":", 1)[0]}
            for tag, entry in record.items()}


def _write_kept(kept: dict[str, dict[str, str]]) -> None:
    path = cache_root() / KEPT
    path.with_suffix(".tmp").write_text(json.dumps(kept, indent=1, sort_keys=True) + "\n")
    path.with_suffix(".tmp").replace(path)


def kept_by_this_code(tag: str) -> bool:
    """Whether TAG is an environment image kept for this checkout's BUILD_CODE (not one left by a session of other
    code, or by a session stopped before its end)."""
    with cache_lock("test-environments"):
        return _kept().get(tag, {}).get("code") == build_code_digest()


def drop_stale_environments() -> list[str]:
    """Before test_image.py or test_image_managed_python.py builds: the kept environment images built by other code
    than this checkout's go, so that the build makes them anew. Returns the tags removed."""
    code = build_code_digest()
    with cache_lock("test-environments"):
        kept = _kept()
        stale = sorted(tag for tag, entry in kept.items() if entry["code"] != code)
        remove_images(*stale)
        _write_kept({tag: entry for tag, entry in kept.items() if tag not in stale})
    return stale


def keep_environment(tag: str, slot: str = "") -> None:
    """After the module that built it: the environment image TAG stays for the next session, recorded with this
    checkout's BUILD_CODE digest. One per slot (by default the tag's repository, i.e. the profile): an older one kept
    in the same slot (the same profile, other inputs) goes. test_image_managed_python.py's image has the DeskMini's
    repository too, so it has a slot of its own, and neither module's image pushes out the other's."""
    if not tag:
        return
    slot = slot or tag.rsplit(":", 1)[0]
    with cache_lock("test-environments"):
        kept = _kept()
        older = sorted(t for t, entry in kept.items() if t != tag and entry["slot"] == slot)
        remove_images(*older)
        _write_kept({**{t: e for t, e in kept.items() if t not in older}, tag: {"code": build_code_digest(),
                                                                              "slot": slot}})
