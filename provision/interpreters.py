"""Managed interpreters on the controller: python-build-standalone's archive a plan names (plan.python.managed),
fetched once into the controller's cache (an artifact store, provision.artifacts) and checked before any host is
touched.

Where it comes from: the plan's mirror (`--python-mirror DIR|URL`, an inventory's provision_python_mirror), else the
release itself. What it must be: the database's sha256 (data/python.yaml, from the release's SHA256SUMS), or the one
the named mirror's own SHA256SUMS lists for that file name. Anything else is refused (exit 2) before the playbook
starts, and the file is deleted. The roles check the same hashes again on the host before they unpack it.
"""

from __future__ import annotations

import os
import re
import shutil
import urllib.error
import urllib.request
from pathlib import Path

from provision.artifacts import Store
from provision.errors import RefusedError, RunnerError
from provision.hashes import HASHES_FILE, sha256_file
from provision.models import ManagedPython
from provision.state import cache_root

SUMS = HASHES_FILE
TIMEOUT_S = 60
_SUM_LINE = re.compile(r"([0-9a-f]{64})\s+\*?(\S+)")


def _is_url(mirror: str) -> bool:
    return mirror.startswith(("http://", "https://"))


def mirror_sums(mirror: str) -> dict[str, str]:
    """The mirror's SHA256SUMS as {file name: sha256} (lines `<sha256>  <name>`, as the releases write it); {} when
    the mirror has none."""
    try:
        if _is_url(mirror):
            with urllib.request.urlopen(f"{mirror}/{SUMS}", timeout=TIMEOUT_S) as response:  # noqa: S310 - http(s) only
                text = response.read(1 << 20).decode("utf-8", "replace")
        else:
            text = (Path(mirror) / SUMS).read_text(encoding="utf-8", errors="replace")
    except (OSError, urllib.error.URLError):
        return {}
    out = {}
    for line in text.splitlines():
        match = _SUM_LINE.fullmatch(line.strip())
        if match:
            out[Path(match.group(2)).name] = match.group(1)
    return out


def accepted(managed: ManagedPython) -> list[str]:
    """The sha256s the archive may have: the database's, and the named mirror's SHA256SUMS entry for its name."""
    hashes = [managed.sha256]
    if managed.mirror:
        theirs = mirror_sums(managed.mirror).get(managed.archive)
        if theirs and theirs not in hashes:
            hashes.append(theirs)
    return hashes


def source(managed: ManagedPython) -> str:
    """Where the archive is read: the mirror's file of that name, else the release's URL."""
    if managed.mirror:
        return f"{managed.mirror.rstrip('/')}/{managed.archive}"
    return managed.url


def store() -> Store:
    """The managed interpreters' archives, an artifact store (provision.artifacts)."""
    return Store(cache_root() / "python", "python")


def fetch(managed: ManagedPython, *, log=None, hold: Path | None = None) -> tuple[Path, str]:
    """The archive in the controller's cache, checked: (path, its sha256). Downloaded (or copied from a mirror
    directory) to a partial file that is admitted into the store (renamed and recorded) only once whole and matching,
    so a cut download is never used. Raises RefusedError when its hash is neither the database's nor the mirror's,
    RunnerError when it cannot be read.

    hold: a directory of the caller's, on the cache's file system, where the archive is linked under the store's
    lock; the path returned is that link. Another provision that then removes the store's file (a run naming
    another mirror, whose build of the same name the store then replaces) cannot take it from under a build that
    is still putting it in its context."""
    hashes = accepted(managed)
    cache = store()
    have = cache.ready(managed.archive, hashes) if hold is None else None
    if have:
        return have
    cache.root.mkdir(parents=True, exist_ok=True)
    with cache.lock():
        # One of ours, as recorded or adopted; another mirror's build of the same name, or damaged: read again.
        have = cache.get(managed.archive, hashes)
        if not have:
            partial, digest = _download(managed, hashes, cache.root, log)
            have = cache.admit(partial, digest, name=managed.archive), digest
        if hold is None:
            return have
        held = hold / managed.archive
        held.unlink(missing_ok=True)
        try:
            os.link(have[0], held)
        except OSError:  # another file system: a copy of its own
            shutil.copyfile(have[0], held)
        return held, have[1]


def _download(managed: ManagedPython, hashes: list[str], into: Path, log) -> tuple[Path, str]:
    """The archive read from its mirror or release into a partial file of `into`, and its sha256, once one of
    `hashes`; the partial file is removed and the reason raised otherwise."""
    where = source(managed)
    partial = into / f".{managed.archive}.{os.getpid()}.partial"
    if log:
        log(f"python: fetching {managed.archive} from {where}")
    try:
        if _is_url(where):
            with urllib.request.urlopen(where, timeout=TIMEOUT_S) as response, partial.open("wb") as out:  # noqa: S310
                shutil.copyfileobj(response, out, 1 << 20)
        else:
            shutil.copyfile(where, partial)
    except (OSError, urllib.error.URLError) as exc:
        partial.unlink(missing_ok=True)
        raise RunnerError(f"python: cannot read {where}: {getattr(exc, 'reason', None) or exc} (name a mirror that has "
                          "it: --python-mirror DIR|URL, or provision_python_mirror in the inventory)") from None
    have = sha256_file(partial)
    if have not in hashes:
        partial.unlink()
        named = " nor the mirror's SHA256SUMS" if managed.mirror else ""
        raise RefusedError(f"python: {where} has sha256 {have}, which is neither the database's ({managed.sha256})"
                           f"{named}: refused, nothing was installed (a damaged or foreign archive; fix the mirror or "
                           "its SHA256SUMS)")
    return partial, have
