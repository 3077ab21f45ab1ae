"""The fingerprint: one digest of what provision owns on the host, so that a re-apply on a host that has not changed
since its last converged apply runs only the verifier and the record (docs/hosts.md, "The fast re-apply"). Each part
is read once; a part that cannot be read makes the digest unmatchable, and the roles run.

provision_preflight reads it and compares it with the record of the last converged apply (roles/preflight);
provision_facts reads it for the record to keep (roles/host_record)."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess

from ansible_collections.provision.gpu.plugins.module_utils import dpkg, ledger, system
from ansible_collections.provision.gpu.plugins.module_utils.environment import directory_owner, read_environment
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError
from ansible_collections.provision.gpu.plugins.module_utils.files import root_json

TIMEOUT_S = 120
FINGERPRINT_APT = ("/etc/apt/sources.list", "/etc/apt/sources.list.d", "/etc/apt/preferences",
                   "/etc/apt/preferences.d", "/etc/apt/keyrings", "/etc/apt/trusted.gpg", "/etc/apt/trusted.gpg.d",
                   "/usr/share/keyrings")
FINGERPRINT_SYSTEM = ("/etc/os-release",)
MAX_HASHED_BYTES = 16 * 1024 * 1024
MAX_FINGERPRINT_ENTRIES = 20000


def digest_of(data) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def entry_state(path: str, st: os.stat_result) -> list:
    """What one file system entry counts by: a root-owned regular file by its content; anything else by its type,
    owner and mode (and a file another account owns by its size and modification time too, never read as root)."""
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        # A directory's own time changes whenever an entry is renamed into it (every record written): its entries
        # count instead.
        return ["d", mode, st.st_uid, st.st_gid]
    if stat.S_ISLNK(st.st_mode):
        return ["l", os.readlink(path)]
    if not stat.S_ISREG(st.st_mode):
        return ["o", stat.S_IFMT(st.st_mode), mode, st.st_uid]
    if st.st_uid != 0 or st.st_size > MAX_HASHED_BYTES:
        return ["f", mode, st.st_uid, st.st_gid, st.st_size, st.st_mtime_ns]
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        now = os.fstat(handle.fileno())
        if not stat.S_ISREG(now.st_mode) or now.st_uid != 0:  # replaced since the lstat
            return ["f", mode, now.st_uid, now.st_gid, now.st_size, now.st_mtime_ns]
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return ["f", mode, st.st_uid, st.st_gid, digest.hexdigest()]


def walk_state(paths: list[str], skip: list[str]) -> dict[str, list]:
    """Every entry under `paths` (links listed, never followed), each with entry_state; a directory in `skip` counts
    by its owner and mode only and nothing under it is read, a file in `skip` does not count."""
    skipped = {os.path.normpath(p) for p in skip}
    found: dict[str, list] = {}

    def add(path: str) -> bool:
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            found[path] = ["absent"]
            return False
        if path in skipped:
            # A skipped directory (the environment, the reports) counts by its owner and mode; a skipped file (the
            # record, the ledger: written after the fingerprint is read) not at all, not even by being there.
            if stat.S_ISDIR(st.st_mode):
                found[path] = ["skipped", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid]
            return False
        found[path] = entry_state(path, st)
        if len(found) > MAX_FINGERPRINT_ENTRIES:
            raise ModuleError(f"fingerprint: more than {MAX_FINGERPRINT_ENTRIES} files under {', '.join(paths)}")
        return stat.S_ISDIR(st.st_mode)

    for top in sorted({os.path.normpath(p) for p in paths}):
        if not os.path.isabs(top):
            raise ModuleError(f"fingerprint: {top!r} is not an absolute path")
        if not add(top):
            continue
        for where, dirs, files in os.walk(top, followlinks=False):
            keep = []
            for name in sorted(dirs):
                if add(os.path.join(where, name)):
                    keep.append(name)
            dirs[:] = keep
            for name in sorted(files):
                add(os.path.join(where, name))
    return found


def compare(key: dict, parts: dict[str, str], digest: str | None, error: str | None,
            record: dict | None) -> tuple[bool, list[str]]:
    """(matches, differs): whether this reading matches the fingerprint the record of the last converged apply holds
    (the same key, parts and digest, read without error), and the names of what differs - "record" when there is
    none, "key:<name>" for a key, the parts, and "unreadable" when a part could not be read."""
    recorded = (record or {}).get("fingerprint") if isinstance((record or {}).get("fingerprint"), dict) else None
    if recorded is None:
        return False, ["record"]
    old_key = recorded.get("key") if isinstance(recorded.get("key"), dict) else {}
    differs = [f"key:{name}" for name in sorted(set(key) | set(old_key)) if key.get(name) != old_key.get(name)]
    old_parts = recorded.get("parts") if isinstance(recorded.get("parts"), dict) else {}
    differs += [name for name in sorted(set(parts) | set(old_parts)) if parts.get(name) != old_parts.get(name)]
    if error is not None:
        differs.append("unreadable")
    return not differs and digest is not None and recorded.get("digest") == digest, differs


def read(params: dict) -> dict:
    """The fingerprint option: {digest, parts, key, matches, differs, error}."""
    owned_now = ledger.read_trusted(str(params.get("ledger") or ""))
    parts: dict[str, str] = {}
    error = None
    parts["ledger"] = digest_of({key: owned_now.get(key) for key in ledger.OWNED})
    packages = sorted({*(params.get("packages") or []), *(owned_now.get("packages") or {}),
                       *(owned_now.get("found") or {})})
    units = sorted({*(params.get("units") or []), *(owned_now.get("units") or [])})
    accounts = sorted({*(params.get("accounts") or []), *(owned_now.get("accounts") or [])})
    try:
        parts["packages"] = digest_of(dpkg.query(packages, TIMEOUT_S))
        parts["files"] = digest_of(walk_state(list(params.get("files") or []), list(params.get("skip") or [])))
        parts["units"] = digest_of(system.read_services(units))
        parts["accounts"] = digest_of(system.read_accounts(accounts))
        parts["sources"] = digest_of(walk_state(list(FINGERPRINT_APT), []))
        parts["system"] = digest_of([walk_state(list(FINGERPRINT_SYSTEM), []), os.uname().release])
        environment = params.get("venv") or {}
        if environment.get("path"):
            path = str(environment["path"])
            owner = str(environment.get("owner") or "") or directory_owner(path)
            checksums = [str(c) for c in environment.get("checksums") or []]
            if not all(c and not os.path.isabs(c) and ".." not in c.split("/") for c in checksums):
                raise ModuleError("fingerprint: venv.checksums must be paths relative to the environment")
            found = read_environment(path, owner, [], checksums) if owner else {"exists": False}
            if found.get("error"):
                raise ModuleError(f"fingerprint: the environment could not be read: {found['error']}")
            parts["wheels"] = digest_of({k: found.get(k) for k in ("exists", "python", "distributions", "checksums",
                                                                   "system_site_packages", "owner")})
    except (ModuleError, OSError, subprocess.SubprocessError) as exc:
        error = str(exc)
    key = params.get("key") or {}
    digest = digest_of(parts) if error is None else None
    answer: dict = {"digest": digest, "parts": parts, "key": key, "matches": False, "differs": [], "error": error}
    record = root_json(str(params.get("record") or "")) if params.get("record") else None
    answer["matches"], answer["differs"] = compare(key, parts, digest, error, record)
    if owned_now.get("pending"):
        # An apply of provision's began and did not finish (cut: power, a lost connection, a killed controller):
        # what it left half done need not show in any part (a wheel whose metadata was written before its files),
        # so the host takes the full path, which finishes it.
        answer["differs"].append("pending")
        answer["matches"] = False
    return answer
