"""The host's system as provision's modules read it: systemd units and accounts (provision_facts and the fingerprint:
one `systemctl show` call for every unit asked, and the password database), and its processes and boot as /proc
shows them (provision_lock: whether the apply that took the lock still runs)."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess

from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError

TIMEOUT_S = 120
PROC = "/proc"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
SSHD = ("sshd", "sshd-session")  # OpenSSH's per-connection processes (sshd-session since OpenSSH 9.8)


def unit_name(name: str) -> str:
    return name if re.search(r"\.(service|socket|timer|target|mount|path)$", name) else f"{name}.service"


def parse_systemctl_show(text: str, names: list[str]) -> dict:
    """`systemctl show -p Id,LoadState,ActiveState,SubState,UnitFileState u1 u2 ...`: blank-line separated blocks,
    one per unit, in the order asked."""
    blocks = text.strip("\n").split("\n\n")
    found = {}
    for name, block in zip(names, blocks, strict=False):
        fields = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[name] = {"load": fields.get("LoadState", ""), "active": fields.get("ActiveState", ""),
                       "sub": fields.get("SubState", ""), "enabled": fields.get("UnitFileState", "")}
    return found


def read_services(names: list[str]) -> dict:
    if not names:
        return {}
    systemctl = shutil.which("systemctl")
    # sd_booted(3): without /run/systemd/system there is no systemd to ask (a plain container).
    if systemctl is None or not os.path.isdir("/run/systemd/system"):
        return {name: {"load": "no-systemd", "active": "", "sub": "", "enabled": ""} for name in names}
    proc = subprocess.run([systemctl, "show", "--no-pager", "-p", "Id,LoadState,ActiveState,SubState,UnitFileState",
                           "--", *[unit_name(n) for n in names]], capture_output=True, text=True, check=False,
                          timeout=TIMEOUT_S)
    if proc.returncode != 0:
        raise ModuleError(f"systemctl show failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    return parse_systemctl_show(proc.stdout, names)


def read_accounts(names: list[str]) -> dict:
    found: dict[str, dict] = {}
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            found[name] = {"exists": False}
            continue
        found[name] = {"exists": True, "uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir,
                       "shell": entry.pw_shell}
    return found


SUBID_FILES = {"subuid": "/etc/subuid", "subgid": "/etc/subgid"}
SUBID_FIRST = 100000  # where useradd's SUB_UID_MIN starts on Debian and Ubuntu (login.defs)
SUBID_COUNT = 65536  # useradd's SUB_UID_COUNT


def parse_subids(text: str) -> list[tuple[str, int, int]]:
    """(account, first id, count) of each `name:first:count` line of /etc/subuid or /etc/subgid."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split(":")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            out.append((parts[0], int(parts[1]), int(parts[2])))
    return out


def free_subid_range(entries: list[tuple[str, int, int]], count: int = SUBID_COUNT) -> int:
    """The first id from SUBID_FIRST where `count` ids overlap no range in use (as useradd picks one)."""
    start = SUBID_FIRST
    for _name, first, size in sorted(entries, key=lambda e: e[1]):
        if first + size <= start:
            continue
        if first >= start + count:
            break
        start = first + size
    return start


def read_subids(names: list[str], owned_accounts: set[str]) -> dict:
    """Per account: its subordinate uid and gid ranges ([first, count] each), whether provision's ledger owns the
    account (provision created it), and the first free range of each file where one must be added."""
    found: dict[str, dict] = {}
    tables = {kind: parse_subids(read_text(path)) for kind, path in SUBID_FILES.items()}
    for name in names:
        entry: dict = {"owned": name in owned_accounts}
        for kind, rows in tables.items():
            entry[kind] = [[first, count] for who, first, count in rows if who == name]
            entry[f"{kind}_free"] = free_subid_range(rows)
        found[name] = entry
    return found


def read_text(path: str) -> str:
    """A small text file (/proc's), "" when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def process(pid: int) -> tuple[str, int, int] | None:
    """(comm, ppid, start time in clock ticks after the kernel booted) of a live process; None when it is gone (or a
    zombie). The start time tells a process from a later one given the same pid."""
    raw = read_text(f"{PROC}/{pid}/stat")
    if not raw or ")" not in raw:
        return None
    comm = raw[raw.index("(") + 1:raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return comm, int(fields[1]), int(fields[19])


def alive(proc: dict) -> bool:
    """Whether {pid, start} (as ssh_session gives it) is still that process."""
    found = process(int(proc.get("pid") or 0)) if proc.get("pid") else None
    return found is not None and found[2] == proc.get("start")


def boot() -> str:
    """The host's boot: the kernel's boot id and the start of pid 1 in this pid namespace, which a restarted
    container changes while its kernel's boot id stays (containers share their host's kernel)."""
    one = process(1)
    return f"{read_text(BOOT_ID).strip()}/{one[2] if one else '?'}"


def ssh_session(pid: int = 0) -> dict:
    """The SSH session process `pid` (this one by default) runs in: the nearest sshd process above it (OpenSSH's
    per-connection process, which lives exactly as long as the connection), as {pid, start}. Empty when there is
    none (a local or container connection)."""
    first = pid or os.getpid()
    pid = first
    for _step in range(64):
        found = process(pid)
        if found is None:
            return {}
        comm, ppid, start = found
        if comm in SSHD and pid != first:
            return {"pid": pid, "start": start}
        if ppid <= 1:
            return {}
        pid = ppid
    return {}
