"""What provision remembers on the controller between runs: per host, what was applied; per inventory, the last run.

    $PROVISION_STATE (default $XDG_STATE_HOME/provision, else ~/.local/state/provision)
      hosts/<host>/applied.json   the Plan applied, the packages and wheels installed, the verification report
      hosts/<host>/ledger.json    what provision owns on the host (the host's own ledger, fetched after each apply)
      runs/<key>.json             the last apply on an inventory: every host's result (for `apply --failed`)

Records are written by `provision apply` after each run and read by `provision apply --failed` and
`provision plan --diff-against HOST`. Nothing here talks to a host.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from provision.errors import RunnerError
from provision.resources import collection_module

RECORD_SCHEMA = "provision.applied/1"
RUN_SCHEMA = "provision.run/1"
LOCK_NAME = ".lock"  # in each directory of records: hosts/<host>/.lock, runs/.lock


def state_dir() -> Path:
    if os.environ.get("PROVISION_STATE"):
        return Path(os.environ["PROVISION_STATE"])
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "provision"


def cache_root() -> Path:
    """The controller's caches (downloaded wheels and .debs, base disks, the sandboxes' SSH key): $PROVISION_CACHE,
    else ~/.cache/provision. Made on first use. Nothing in it is state: deleting it costs only time."""
    root = Path(os.environ.get("PROVISION_CACHE", Path.home() / ".cache" / "provision"))
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """An exclusive flock on cache_root()/locks/<name>.lock while something shared on this controller is made or
    changed: a base image, the sandboxes' SSH key and known_hosts, the wheelhouse, a port chosen for a sandbox or a
    tunnel. Two provision commands (two admins, or test workers side by side) take turns there; whoever waited
    finds the work done. Blocking; released when the block ends or the process dies."""
    locks = cache_root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with _flock(locks / f"{_safe(name)}.lock"):
        yield


@contextlib.contextmanager
def _flock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path` (made if missing) for the time of the block."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _safe(name: str) -> str:
    """A host name as one path component (inventory names may hold '/', ':' or '..')."""
    safe = re.sub(r"[^A-Za-z0-9._@-]", "_", name)
    return "_" + safe if safe.startswith(".") else safe


class StateError(RunnerError):
    """A record could not be written (a full disk, a read-only state directory): exit 3, one line that says what
    was not recorded."""


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """An exclusive flock on `directory`/.lock for the time of one write: two writers of one host's record (two
    provision processes, two threads) take turns. Short-lived and blocking, unlike the apply locks of
    provision.pipeline.preflight.locks, which refuse a second apply: this one only orders writes."""
    with _flock(directory / LOCK_NAME):
        yield


def _write(path: Path, data: dict[str, Any], what: str) -> None:
    """Replace `path` with `data` atomically: a unique temporary file in the same directory, written and fsynced,
    renamed over the old one and the directory fsynced, under the directory's lock. A reader sees the old record or
    the new one, never half of one; a crash or a full disk leaves the old one and no temporary file."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _locked(directory):
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(dir_fd)  # the rename itself survives a power cut
            finally:
                os.close(dir_fd)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise StateError(
            f"{what} was not recorded: writing {path} failed ({reason}); the earlier record, if any, is unchanged. "
            f"Free space in {directory} (or set PROVISION_STATE to a writable directory), then run the same command "
            "again to record it"
        ) from None


def record_path(host: str) -> Path:
    return state_dir() / "hosts" / _safe(host) / "applied.json"


def write_record(host: str, record: dict[str, Any]) -> Path:
    """Raises StateError (exit 3) when the record cannot be written; the apply on the host has happened."""
    path = record_path(host)
    _write(path, {"schema": RECORD_SCHEMA, **record}, f"the apply on {host}")
    return path


def _read(path: Path, schema: str) -> dict[str, Any] | None:
    """The JSON at path if it is a readable document of this schema, else None (a missing or foreign file)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == schema else None


def read_record(host: str) -> dict[str, Any] | None:
    return _read(record_path(host), RECORD_SCHEMA)


def ledger_schema() -> str:
    """The schema of the hosts' ledgers: plugins/module_utils/ledger.py's, which provision_ledger writes there."""
    return str(collection_module("plugins.module_utils.ledger").SCHEMA)


def ledger_path(host: str) -> Path:
    return state_dir() / "hosts" / _safe(host) / "ledger.json"


def write_ledger(host: str, ledger: dict[str, Any]) -> Path:
    """The host's ledger as its apply fetched it. Raises StateError (exit 3)."""
    path = ledger_path(host)
    _write(path, ledger, f"what provision owns on {host} (its ledger)")
    return path


def read_ledger(host: str) -> dict[str, Any] | None:
    return _read(ledger_path(host), ledger_schema())


def forget_host(host: str) -> None:
    """After `provision destroy`: the host's record and ledger go (provision owns nothing there any more)."""
    for path in (record_path(host), ledger_path(host)):
        path.unlink(missing_ok=True)


def recorded_hosts() -> list[str]:
    """The hosts with a record of an apply on this controller (not SSH's known_hosts: that is sandbox.known_hosts)."""
    root = state_dir() / "hosts"
    return sorted(p.parent.name for p in root.glob("*/applied.json")) if root.is_dir() else []


def run_key(inventory: str) -> str:
    """Runs are remembered per inventory (its absolute path, or a sandbox's name)."""
    return hashlib.sha256(inventory.encode()).hexdigest()[:16]


def write_run(inventory: str, results: dict[str, dict[str, Any]]) -> Path:
    """results: host -> {"result": ok|failed|unreachable|interrupted, "profile", "step", "message"}."""
    path = state_dir() / "runs" / f"{run_key(inventory)}.json"
    _write(path, {"schema": RUN_SCHEMA, "inventory": inventory, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "hosts": results}, f"the run on {inventory} (which hosts failed, for `apply --failed`)")
    return path


def read_run(inventory: str) -> dict[str, Any] | None:
    return _read(state_dir() / "runs" / f"{run_key(inventory)}.json", RUN_SCHEMA)


def failed_hosts(inventory: str) -> list[str] | None:
    """Hosts that did not succeed in the last run on this inventory; None when no run is remembered."""
    run = read_run(inventory)
    if run is None:
        return None
    return sorted(h for h, r in run.get("hosts", {}).items() if r.get("result") != "ok")
