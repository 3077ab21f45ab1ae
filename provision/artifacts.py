"""The controller's artifact store: everything provision downloads on the controller, in one place, with one manifest,
one lock and one integrity check (issue 54, part 3).

What goes in (each a `Store`, a directory under provision.state.cache_root()):
- the wheelhouse the sandboxes mount read-only, and uv's wheel beside them (`cache_root()/wheels`: sandbox.wheelhouse,
  provision.installer);
- the managed interpreters' archives (`cache_root()/python`: provision.interpreters);
- the image's wheel groups, one directory each (`cache_root()/wheels/<target>/<group>-<digest>`:
  runners/docker/wheels.py).

How a file comes in: downloaded into a temporary folder beside the store, checked there by whoever fetched it (pip
against the index's or the plan's sha256, the interpreter against the database's), then `admit`: renamed into the
store in whole (a reader never sees half a file) and recorded in the store's MANIFEST with its sha256, size and
modification time.

How a file is checked (`state`), the same for every store: as recorded when its size and time are (a stat, no
hashing); re-hashed when only its time moved; not whole when its size or content differ, or (a wheel) when its zip
directory cannot be read. `sweep` checks a whole store and removes what is not whole, so it is fetched again and never
installed. A file an earlier provision left without a record is adopted when its caller can vouch for it (a hash it
already expects, a wheel whose directory reads), else removed.

Writers take the store's lock (provision.state.cache_lock: one per store, fcntl, released by the kernel if the process
dies); readers that find everything as recorded need no lock.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.hashes import sha256_file
from provision.state import cache_lock

MANIFEST = ".manifest.json"
# The wheelhouse's record before the store (provision <= 2026-11-28): read while there is no MANIFEST, then written
# as MANIFEST; the old file is left as it was, for an older provision that shares the controller's cache.
LEGACY_MANIFESTS = (".wheels.json",)

OK, CHANGED, BAD, UNKNOWN, MISSING = "ok", "changed", "bad", "unknown", "missing"


def readable_zip(path: Path) -> bool:
    """A wheel cut short (a download or copy that stopped, a full disk) has no zip directory at its end."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def entry(path: Path, sha256: str) -> dict[str, Any]:
    """What the manifest records of one file."""
    st = path.stat()
    return {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def file_state(path: Path, recorded: dict[str, Any] | None) -> str:
    """OK (as recorded: same size and time, or the same sha256), CHANGED (its time only: re-hashed, whole), BAD
    (another size or content than recorded), UNKNOWN (never recorded), MISSING (no such file)."""
    try:
        st = path.stat()
    except OSError:
        return MISSING
    if recorded is None:
        return UNKNOWN
    if st.st_size != recorded.get("size"):
        return BAD
    if st.st_mtime_ns == recorded.get("mtime_ns"):
        return OK
    return CHANGED if sha256_file(path) == recorded.get("sha256") else BAD


@dataclass(frozen=True)
class Store:
    """One directory of downloaded artifacts with its manifest (MANIFEST: {file name: entry}) and its lock."""

    root: Path
    lock_name: str

    @contextmanager
    def lock(self) -> Iterator[None]:
        """The store's writers one at a time (readers of a store that checks whole need none)."""
        with cache_lock(self.lock_name):
            yield

    def path(self, name: str) -> Path:
        return self.root / name

    def manifest(self) -> dict[str, dict[str, Any]]:
        for name in (MANIFEST, *LEGACY_MANIFESTS):
            try:
                data = json.loads((self.root / name).read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
        return {}

    def write_manifest(self, manifest: dict[str, dict[str, Any]]) -> None:
        """Written whole (a temporary file renamed), under the store's lock."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f"{MANIFEST}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
        os.replace(tmp, self.root / MANIFEST)

    def state(self, name: str, manifest: dict[str, dict[str, Any]] | None = None) -> str:
        """The one integrity check (file_state) of one file against the manifest."""
        return file_state(self.path(name), (self.manifest() if manifest is None else manifest).get(name))

    def ready(self, name: str, accepted: list[str]) -> tuple[Path, str] | None:
        """(path, sha256) when the file is as recorded (a stat: no lock, no hashing) with an accepted sha256; None
        otherwise (then `get` under the lock decides)."""
        recorded = self.manifest().get(name)
        if recorded and recorded.get("sha256") in accepted and file_state(self.path(name), recorded) == OK:
            return self.path(name), str(recorded["sha256"])
        return None

    def get(self, name: str, accepted: list[str]) -> tuple[Path, str] | None:
        """(path, sha256) of a whole file whose recorded sha256 is one of `accepted`; a file not recorded is hashed
        and adopted when its sha256 is accepted. None when the store has no such file; a file of that name that is
        not whole, or not one of `accepted` (another mirror's build, say), is removed so that it is fetched again.
        Under the store's lock."""
        manifest = self.manifest()
        path, recorded = self.path(name), manifest.get(name)
        found = file_state(path, recorded)
        if found == MISSING:
            return None
        if found in (OK, CHANGED) and recorded and recorded.get("sha256") in accepted:
            if found == CHANGED:
                manifest[name] = entry(path, str(recorded["sha256"]))
                self.write_manifest(manifest)
            return path, str(recorded["sha256"])
        digest = sha256_file(path) if found == UNKNOWN else ""
        if digest and digest in accepted:
            manifest[name] = entry(path, digest)
            self.write_manifest(manifest)
            return path, digest
        path.unlink()
        manifest.pop(name, None)
        self.write_manifest(manifest)
        return None

    def whole(self, pattern: str = "*") -> bool:
        """Whether every file matching `pattern` is as recorded by size and time (a read of the directory: no lock,
        no hashing); the fast test before `sweep`."""
        manifest = self.manifest()
        for path in self.root.glob(pattern):
            if path.name.startswith(".") or not path.is_file():
                continue
            recorded = manifest.get(path.name)
            try:
                st = path.stat()
            except OSError:
                return False
            if recorded is None or st.st_size != recorded.get("size") or st.st_mtime_ns != recorded.get("mtime_ns"):
                return False
        return True

    def sweep(self, pattern: str, *, vouch: Callable[[Path], str | None],
              log: Callable[[str], None] | None = None) -> list[str]:
        """Check every file matching `pattern` (file_state): one that is not whole is removed (and said in `log`);
        one never recorded is adopted with the sha256 `vouch` gives for it (None: removed). Entries of files that are
        gone are dropped. Returns the names removed. Under the store's lock."""
        manifest = self.manifest()
        before = dict(manifest)
        removed: list[str] = []
        for path in sorted(self.root.glob(pattern)):
            if path.name.startswith(".") or not path.is_file():
                continue
            recorded = manifest.get(path.name)
            found = file_state(path, recorded)
            digest = vouch(path) if found == UNKNOWN else None
            if digest:
                manifest[path.name] = entry(path, digest)
            elif found == CHANGED and recorded:
                manifest[path.name] = entry(path, str(recorded.get("sha256")))
            elif found in (BAD, UNKNOWN):
                size = path.stat().st_size
                path.unlink()
                manifest.pop(path.name, None)
                removed.append(path.name)
                if log:
                    expected = f" of {recorded['size']}" if recorded and recorded.get("size") else ""
                    log(f"{self.lock_name}: {path.name} is not whole ({size} bytes{expected}): removed, to be "
                        "fetched again")
        for name in [n for n in manifest if not self.path(n).is_file()]:
            manifest.pop(name)
        if removed or manifest != before or not (self.root / MANIFEST).is_file():
            self.write_manifest(manifest)
        return removed

    def admit(self, src: Path, sha256: str, manifest: dict[str, dict[str, Any]] | None = None,
              name: str | None = None) -> Path:
        """Rename `src` (checked whole by its caller, on the store's file system) into the store and record it.
        manifest: the caller's copy to update and write later (many files at once); None: written now."""
        final = self.path(name or src.name)
        os.replace(src, final)
        own = self.manifest() if manifest is None else manifest
        own[final.name] = entry(final, sha256)
        if manifest is None:
            self.write_manifest(own)
        return final
