"""The rules of the apply lock on a host (/var/lib/provision/apply.lock, provision_lock): what a lock file's record
says, whether it is free, this run's, stale or live, and the lines that say so. Pure functions of the record and of
what the host shows now (its boot, whether a process lives), so that they are tested on records
(tests/unit/test_module_utils.py); and `acquire` and `release`, which read and write the file under its flock, for
provision_lock and for the fast re-apply's one round trip (converged.py)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import time

from ansible_collections.provision.gpu.plugins.module_utils import files, system

SCHEMA = "provision.lock/1"


def parse(text: str) -> dict:
    """The lock file's record; {} for an empty file; a record that is stale by its boot for one a cut tore
    mid-write (an older provision wrote the lock in place)."""
    try:
        record = json.loads(text) if text.strip() else {}
    except ValueError:
        return {"token": "?", "boot": "?", "unreadable": True}
    return record if isinstance(record, dict) else {}


def who(record: dict) -> str:
    """Whose lock it is, in words: the controller, its machine-id, the account, provision's pid, when, the command."""
    holder = record.get("holder") or {}
    place = holder.get("controller") or "a controller that did not say its name"
    if holder.get("machine_id"):
        place += f" (machine-id {str(holder['machine_id'])[:12]})"
    parts = [f"from {place}"]
    if holder.get("user"):
        parts.append(f"as {holder['user']}")
    if holder.get("pid"):
        parts.append(f"provision pid {holder['pid']}")
    parts.append(f"taken {record.get('taken', '?')}")
    text = ", ".join(parts)
    return text + (f": `{holder['command']}`" if holder.get("command") else "")


def judge(record: dict, holder: dict, live_tokens: list[str], now_boot: str, alive) -> tuple[str, str]:
    """("free" | "ours" | "stale" | "live", why) for the record a lock file holds, as `holder` (its token, its
    machine_id) finds it. alive: whether a {pid, start} process still runs (system.alive)."""
    if not record:
        return "free", ""
    if holder.get("token") and record.get("token") == holder.get("token"):
        return "ours", ""
    if record.get("boot") != now_boot:
        return "stale", "the host has started again since (a power cut or a reboot)"
    if record.get("session"):
        if not alive(record["session"]):
            return "stale", "the SSH connection that took it is gone (its controller was stopped or lost the host)"
        return "live", "its SSH connection to this host is open"
    mine = holder.get("machine_id") and (record.get("holder") or {}).get("machine_id") == holder.get("machine_id")
    if mine and record.get("token") not in live_tokens:
        return "stale", "no process of that apply runs on this controller any more"
    return "live", "it was taken without an SSH session this host can watch"


def refused_line(found: dict, why: str, path: str) -> str:
    return (f"another provision apply holds this host ({who(found)}; {why}): wait for it to finish, or if it no "
            f"longer runs (its controller is off), remove its lock with `sudo rm {path}` on the host, then apply again")


def note_line(found: dict, why: str) -> str:
    return f"took over the lock on this host left by an apply that did not finish ({who(found)}): {why}"


def load(handle) -> dict:
    handle.seek(0)
    return parse(handle.read())


@contextlib.contextmanager
def locked(path: str, create: bool):
    """The lock file open and flocked (made when `create`); None when it does not exist. The inode is checked after
    the flock: a release that removed the file meanwhile is seen, and the new file locked instead."""
    for _try in range(20):
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0) | os.O_NOFOLLOW, 0o644)
        except FileNotFoundError:
            if create:  # its directory went meanwhile (a release that made it took it away): made again
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
                continue
            yield None
            return
        handle = os.fdopen(fd, "r+", encoding="utf-8")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield handle
                return
        finally:
            handle.close()
    raise OSError(f"{path} kept changing while it was being locked")


def acquire(path: str, holder: dict, live_tokens: list[str], *, check_mode: bool = False,
            take_stale: bool = True) -> dict:
    """Take the lock for `holder` (its token; one is made without). A stale lock is taken over (RV note) unless
    take_stale is False (the fast re-apply leaves that to the playbook, which says so); a live one is left and
    `refused` says who holds it. check_mode judges and writes nothing. `state` is the judgement: free, ours, stale
    or live."""
    token = str(holder.get("token") or f"host-{secrets.token_hex(8)}")
    now_boot = system.boot()
    record = {"schema": SCHEMA, "token": token, "boot": now_boot, "session": system.ssh_session(),
              "holder": {k: v for k, v in holder.items() if k != "token"},
              "taken": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    takes = ("free", "stale") if take_stale else ("free",)
    if check_mode:
        with locked(path, create=False) as handle:
            found = load(handle) if handle is not None else {}
        state, why = judge(found, {**holder, "token": token}, live_tokens, now_boot, system.alive)
    else:
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, mode=0o755, exist_ok=True)
            record["made_directory"] = True
        with locked(path, create=True) as handle:
            found = load(handle)
            state, why = judge(found, {**holder, "token": token}, live_tokens, now_boot, system.alive)
            if state in takes:
                files.atomic_write(path, json.dumps(record, sort_keys=True) + "\n", 0o644)
    refused = refused_line(found, why, path) if state == "live" else ""
    note = note_line(found, why) if state == "stale" and take_stale else ""
    return {"changed": state in takes, "token": token, "note": note, "refused": refused, "held_by": found,
            "state": state}


def release(path: str, holder: dict, *, check_mode: bool = False) -> dict:
    """Remove the lock when it is `holder`'s (its token); anyone else's stays. The directory acquire made goes with it
    while it is empty."""
    token = str(holder.get("token") or "")
    with locked(path, create=False) as handle:
        found = load(handle) if handle is not None else {}
        mine = bool(token) and found.get("token") == token
        if mine and not check_mode:
            os.unlink(path)  # under the flock: an acquire waiting on it sees the inode go and opens the new file
            if found.get("made_directory"):
                with contextlib.suppress(OSError):  # not empty (the apply wrote its ledger there): it stays
                    os.rmdir(os.path.dirname(path))
    return {"changed": mine, "token": token, "note": "", "refused": "", "held_by": found}
