"""The rules of the apply lock on a host (/var/lib/provision/apply.lock, provision_lock): what a lock file's record
says, whether it is free, this run's, stale or live, and the lines that say so. Pure functions of the record and of
what the host shows now (its boot, whether a process lives), so that they are tested on records
(tests/unit/test_module_utils.py); provision_lock reads and writes the file under its flock."""

from __future__ import annotations

import json

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
