"""The preflight: what on the host would make the plan fail, read before the first change (provision_preflight,
called by roles/preflight). Each check is a pure function of what was read (unit-tested on text in
tests/unit/test_preflight_checks.py); read_preflight reads and asks them. Nothing here changes the host."""

from __future__ import annotations

import os
import pwd
import re

from ansible_collections.provision.gpu.plugins.module_utils import dpkg, json_keys, ledger, sources, system
from ansible_collections.provision.gpu.plugins.module_utils.environment import name_of
from ansible_collections.provision.gpu.plugins.module_utils.files import root_json

LOGIN_DEFS = "/etc/login.defs"
APT_DIR = "/etc/apt"
PROC = "/proc"
TCP_LISTEN = "0A"
MAX_NAMES = 8


# Of dpkg's unfinished states, a package waiting for trigger processing: no install of it was cut, another
# package's install (or removal) activated one of its triggers (libc-bin's ldconfig, an alternative) and the run
# ended before dpkg ran it.
TRIGGERED = ("triggers-awaited", "triggers-pending")


def provisions_unfinished(left: dict[str, str], pending: dict | None, owned: frozenset[str] = frozenset(),
                          triggered: frozenset[str] = frozenset()) -> bool:
    """Whether the dpkg work left unfinished is provision's own: an apply of provision's began (the ledger's pending
    note, written before its first change, is still there) and every package left is one that was not installed at
    that version when it began (that apply was installing it) or one the ledger owns (it was removing or replacing
    it). Packages that only wait for their triggers (`triggered`: libc-bin's ldconfig after provision's install
    of a library was cut) were there before and were not being installed: they count with provision's work as long
    as every other package left is provision's. Anything else is someone else's to finish."""
    if not left or not isinstance(pending, dict) or not isinstance(pending.get("packages"), dict):
        return False
    before = pending["packages"]
    return all(before.get(name) != version or name in owned or name in triggered for name, version in left.items())


def upstream_branch(version: str) -> str:
    """A Debian version's driver branch: its first number, after any epoch (`1:470.256.02-1` → `470`)."""
    upstream = version.split(":", 1)[-1]
    match = re.match(r"[0-9]+", upstream)
    return match.group(0) if match else ""


def other_branch_packages(packages: list[dict], branch: str, sources: str, planned: list[str],
                          owned: list[str]) -> list[str]:
    """Installed packages built from NVIDIA's driver sources (`sources`, a regular expression of source package
    names) for another driver branch than `branch`, neither planned nor owned by provision: "name version" each."""
    if not branch or not sources:
        return []
    pattern = re.compile(sources)
    keep = set(planned) | set(owned)
    found = []
    for p in packages:
        if p["status"] in ("", "not-installed", "config-files") or p["package"] in keep:
            continue
        found_branch = upstream_branch(p["version"])
        # Only a driver branch (three digits) counts: a helper built from the same source with a date for a version
        # (20151021) says nothing about the branch.
        if pattern.search(p["source"]) and len(found_branch) == 3 and found_branch != branch:
            found.append(f"{p['package']} {p['version']}")
    return sorted(found)


def hex_address(text: str) -> str:
    """/proc/net/tcp's address (little-endian words) → its printed form; "*" for a wildcard address."""
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        address = ".".join(str(b) for b in reversed(raw))
        return "*" if address == "0.0.0.0" else address
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    if words == bytes(16):
        return "*"
    if words[:12] == bytes(10) + b"\xff\xff":  # an IPv4-mapped address
        return ".".join(str(b) for b in words[12:])
    return ":".join(words[i:i + 2].hex() for i in range(0, 16, 2))


def listeners(text: str, port: int) -> list[tuple[str, str, int]]:
    """(address, socket inode, owner's uid) of each listening TCP socket on `port` in /proc/net/tcp or tcp6 text."""
    found = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != TCP_LISTEN or ":" not in parts[1] or not parts[7].isdigit():
            continue
        address, hex_port = parts[1].rsplit(":", 1)
        if int(hex_port, 16) == port:
            found.append((hex_address(address), parts[9], int(parts[7])))
    return found


def overlaps(listening: str, bind: str) -> bool:
    """Whether a socket listening on `listening` keeps a server from binding `bind` on the same port."""
    return listening == "*" or bind in ("", "*", "0.0.0.0", "::") or listening == bind


def socket_owners(inodes: set[str]) -> dict[str, list[dict]]:
    """inode → [{pid, name, cgroup}] of the processes holding that socket, from /proc/*/fd."""
    found: dict[str, list[dict]] = {}
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(os.path.join(entry.path, "fd"))
        except OSError:  # gone, or not ours to read
            continue
        links = set()
        for fd in fds:
            try:
                links.add(os.readlink(os.path.join(entry.path, "fd", fd)))
            except OSError:  # closed since the listing (the listing's own descriptor, for this process)
                continue
        held = {i for i in inodes if f"socket:[{i}]" in links}
        if not held:
            continue
        try:
            with open(os.path.join(entry.path, "comm"), encoding="utf-8", errors="replace") as handle:
                name = handle.read().strip()
            with open(os.path.join(entry.path, "cgroup"), encoding="utf-8", errors="replace") as handle:
                cgroup = handle.read()
        except OSError:
            continue
        for inode in held:
            found.setdefault(inode, []).append({"pid": int(entry.name), "name": name, "cgroup": cgroup})
    return found


def processes() -> list[dict]:
    """Every process's {pid, name, uid, cgroup}: what /proc shows of a process without ptrace's permission (a
    container's root has no CAP_SYS_PTRACE, so it cannot read another account's /proc/PID/fd)."""
    found = []
    for entry in os.scandir(PROC):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "comm"), encoding="utf-8", errors="replace") as handle:
                name = handle.read().strip()
            with open(os.path.join(entry.path, "cgroup"), encoding="utf-8", errors="replace") as handle:
                cgroup = handle.read()
            with open(os.path.join(entry.path, "status"), encoding="utf-8", errors="replace") as handle:
                # "Uid: real effective saved fs": a socket belongs to the effective one (the directory's owner is
                # root for a process that is not dumpable).
                uids = next((line.split()[1:] for line in handle if line.startswith("Uid:")), [])
        except OSError:
            continue
        if len(uids) < 2 or not uids[1].isdigit():
            continue
        found.append({"pid": int(entry.name), "name": name, "uid": int(uids[1]), "cgroup": cgroup})
    return found


def in_unit(proc: dict, unit: str) -> bool:
    return bool(unit) and f"/{unit}\n" in proc["cgroup"] + "\n"


def holder_line(address: str, port: int, uid: int, owners: list[dict] | None, everyone: list[dict]) -> str:
    """Who holds a socket: the processes whose descriptors show it, or, when they cannot be read, the socket's
    account and that account's processes."""
    if owners:
        return ", ".join(f"{p['name']} (pid {p['pid']})" for p in owners) + f" on {address}:{port}"
    account = name_of(pwd.getpwuid, uid) or f"uid {uid}"
    theirs = [f"{p['name']} (pid {p['pid']})" for p in everyone if p["uid"] == uid][:3]
    return (f"a process of account {account!r} on {address}:{port}"
            + (f" (its processes: {', '.join(theirs)})" if theirs else ""))


def port_holders(port: int, bind: str, own_unit: str) -> list[str]:
    """One line per socket listening where the planned server would, naming what holds it; provision's own unit
    (a re-apply finds its own server there) is left out."""
    sockets = []
    for table in ("tcp", "tcp6"):
        try:
            with open(os.path.join(PROC, "net", table), encoding="ascii", errors="replace") as handle:
                sockets += listeners(handle.read(), port)
        except FileNotFoundError:
            continue
    sockets = [s for s in sockets if overlaps(s[0], bind)]
    if not sockets:
        return []
    owners = socket_owners({sock[1] for sock in sockets})
    everyone = processes()
    found = []
    for address, inode, uid in sockets:
        procs = owners.get(inode)
        if procs and any(in_unit(p, own_unit) for p in procs):
            continue
        if not procs and any(in_unit(p, own_unit) and p["uid"] == uid for p in everyone):
            # Its descriptors cannot be read here, but provision's unit runs a process as the socket's account.
            continue
        found.append(holder_line(address, port, uid, procs, everyone))
    return sorted(set(found))


def uid_min(text: str) -> int:
    """UID_MIN from /etc/login.defs text (1000 when it is not set there, useradd's default)."""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "UID_MIN" and parts[1].isdigit():
            return int(parts[1])
    return 1000


def account_problem(name: str, home: str, entry: tuple[int, str] | None, first_uid: int) -> str:
    """Why the existing account `name` ((uid, home) or None when there is none) is not the planned one: empty when
    it is fine to use (a normal account with the planned home, whose files are kept)."""
    if entry is None:
        return ""
    uid, found_home = entry
    if uid < first_uid:
        return (f"the planned account {name!r} exists as a system account (uid {uid}, below UID_MIN {first_uid}); "
                f"provision runs the environment and Jupyter as a normal account: choose another software.user in "
                f"the profile, or remove that account, then apply again")
    if home and os.path.normpath(found_home) != os.path.normpath(home):
        return (f"the planned account {name!r} exists with the home {found_home}, and the plan puts it at {home}: "
                f"choose another software.user in the profile, or move the account's home "
                f"(`sudo usermod -d {home} -m {name}`), then apply again")
    return ""


def source_entries(path: str, text: str) -> list[dict]:
    """The enabled apt source entries of one file (sources.parse), as the checks compare them: [{file, uris,
    suites, signed_by}]."""
    return [{"file": path, "uris": e.uris, "suites": e.suites, "signed_by": e.signed_by}
            for e in sources.parse(sources.file_format(path), text) if e.enabled and e.uris]


def read_sources(apt_dir: str = APT_DIR) -> list[dict]:
    """source_entries of every file apt reads its sources from."""
    return [entry for path, text in sources.read_files(apt_dir).items() for entry in source_entries(path, text)]


def signed_by_conflicts(entries: list[dict]) -> list[str]:
    """Sources that name one repository (URI and suite) with different Signed-By values: apt refuses them all
    ("Conflicting values set for option Signed-By")."""
    seen: dict[tuple[str, str], dict] = {}
    found = []
    for entry in entries:
        for uri in entry["uris"]:
            for suite in entry["suites"] or [""]:
                key = (uri.rstrip("/"), suite)
                first = seen.setdefault(key, entry)
                if first is not entry and first["signed_by"] != entry["signed_by"]:
                    found.append(f"{uri} {suite} in {first['file']} (Signed-By {first['signed_by'] or 'unset'}) and "
                                 f"{entry['file']} (Signed-By {entry['signed_by'] or 'unset'})")
    return sorted(set(found))


def nvidia_repo_others(entries: list[dict], prefix: str, keyring: str) -> list[str]:
    """Entries for NVIDIA's repository (URIs under `prefix`) that name another keyring than provision's."""
    found = []
    for entry in entries:
        for uri in entry["uris"]:
            if prefix and uri.startswith(prefix) and entry["signed_by"] != keyring:
                found.append(f"{entry['file']} ({uri}, Signed-By {entry['signed_by'] or 'unset'})")
    return sorted(set(found))


def daemon_json_problem(path: str, text: str | None, record: dict, values: dict, owner: str) -> str:
    """Why provision cannot merge `values` into the daemon.json `text` (None: absent), as the role's merge would
    refuse it (json_keys.parse and json_keys.merge, the record of the keys provision set): not JSON, or a key of the
    user's at another value. Empty when the merge would go through."""
    try:
        json_keys.merge(path, json_keys.parse(path, text), text is not None, json_keys.load_record(record), owner,
                        values)
    except json_keys.JsonKeysError as exc:
        return str(exc)
    return ""


def subids_problem(name: str, exists: bool, entry: dict) -> str:
    """Why the rootless account `name` cannot run podman (entry: system.read_subids' for it): it exists, provision did
    not create it, and /etc/subuid or /etc/subgid has no range for it. Empty otherwise (an account provision creates
    or created gets a free range from the role)."""
    if not exists or entry.get("owned") or (entry.get("subuid") and entry.get("subgid")):
        return ""
    uid, gid = entry.get("subuid_free", system.SUBID_FIRST), entry.get("subgid_free", system.SUBID_FIRST)
    last = system.SUBID_COUNT - 1
    return (f"rootless podman for {name} needs subordinate uid and gid ranges, /etc/subuid or /etc/subgid has none "
            f"for that account, and provision did not create it: run `sudo usermod --add-subuids {uid}-{uid + last} "
            f"--add-subgids {gid}-{gid + last} {name}`, then apply again")


def container_problems(params: dict) -> list[str]:
    """The container engine's refusals (roles/container_engine makes the same checks where it runs alone): a Docker
    from a snap, a daemon.json provision cannot merge into, a rootless account of the user's without subordinate ids."""
    engine = str(params.get("container_engine") or "")
    problems: list[str] = []
    if not engine:
        return problems
    snap = str(params.get("snap_docker") or "")
    if engine == "docker" and snap and os.path.lexists(snap):
        problems.append(f"Docker is installed as a snap ({snap}), which provision does not configure (the snap's "
                        "dockerd reads its own configuration and the NVIDIA runtime does not reach it): remove it "
                        "(`sudo snap remove docker`), then apply again")
    path = str(params.get("daemon_json") or "")
    if engine == "docker" and path:
        try:
            with open(path, encoding="utf-8") as handle:
                text: str | None = handle.read()
        except FileNotFoundError:
            text = None
        except UnicodeDecodeError:
            text = "\ufffd"  # not UTF-8, so not JSON: parse says so with the file's name
        problem = daemon_json_problem(path, text, root_json(json_keys.RECORD) or {},
                                      dict(params.get("daemon_values") or {}), "container_engine")
        if problem:
            problems.append(f"Docker's configuration {problem}")
    user = str(params.get("rootless_user") or "")
    if engine == "podman" and user:
        exists = system.read_accounts([user])[user]["exists"]
        entry = system.read_subids([user], ledger.owned(ledger.read_trusted(str(params.get("ledger") or ledger.PATH)),
                                                        "accounts"))[user]
        problem = subids_problem(user, exists, entry)
        if problem:
            problems.append(problem)
    return problems


def names(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_NAMES])
    return shown + (f" and {len(items) - MAX_NAMES} more" if len(items) > MAX_NAMES else "")


def read_preflight(params: dict) -> dict:
    """Every check asked in `params` (the preflight option): {refusals: [one line each], found: {...}}."""
    refusals: list[str] = []
    found: dict = {}
    packages = dpkg.read_status()
    # Work dpkg left unfinished: provision's own interrupted apply's is finished by the run (roles/ledger, first);
    # anyone else's is refused here, before any change, naming the packages and the command.
    left = dpkg.unfinished(packages)
    journal = dpkg.journal()
    pending = ledger.pending_of(str(params.get("ledger") or ""))
    owned = frozenset(ledger.packages_of(str(params.get("ledger") or "")))
    triggered = frozenset(p["package"] for p in packages if p["status"] in TRIGGERED)
    own = (bool(left) or journal) and pending is not None and (
        not left or provisions_unfinished(left, pending, owned, triggered))
    found["provision_unfinished"] = sorted(left) or (["(dpkg's journal)"] if journal else []) if own else []
    found["half_configured"] = [] if own else dpkg.half_configured(packages)
    interrupted = [] if own else sorted(set(left) - set(found["half_configured"]))
    found["unfinished"] = interrupted
    if found["half_configured"]:
        refusals.append(f"dpkg was already half-configured before this run: {names(found['half_configured'])} "
                        "(`sudo dpkg --audit` lists them; a package script failed or was cut short); run "
                        "`sudo dpkg --configure -a`, fix what its error names, then apply again")
    elif interrupted or (journal and not own):
        what = names(interrupted) if interrupted else "its journal in /var/lib/dpkg/updates"
        refusals.append(f"dpkg work that provision did not start was left unfinished: {what} (an install or upgrade "
                        "was cut short); run `sudo dpkg --configure -a` (then `sudo apt-get -f install` if it asks), "
                        "then apply again")
    branch = str(params.get("driver_branch") or "")
    found["installer_files"] = [f for f in params.get("installer_files") or [] if branch and os.path.lexists(f)]
    if found["installer_files"]:
        refusals.append(f"a driver installed with NVIDIA's .run installer is on the host ({found['installer_files'][0]}); "
                        "Debian's driver packages do not install over it: remove it first with `sudo nvidia-uninstall` "
                        "(NVIDIA's installation guide), reboot, then apply again")
    found["other_branch"] = other_branch_packages(packages, branch, str(params.get("driver_sources") or ""),
                                                  list(params.get("driver_packages") or []),
                                                  [*(params.get("owned_packages") or []),
                                                   *ledger.packages_of(str(params.get("ledger") or ""))])
    if found["other_branch"]:
        bare = [p.split(" ", 1)[0] for p in found["other_branch"]]
        refusals.append(f"NVIDIA driver packages of another branch than the planned {branch} are installed, not by "
                        f"provision: {names(found['other_branch'])}; remove them first "
                        f"(`sudo apt-get purge {' '.join(bare[:MAX_NAMES])}`{' ...' if len(bare) > MAX_NAMES else ''}), "
                        "then apply again")
    entries = read_sources()
    found["signed_by_conflicts"] = signed_by_conflicts(entries)
    if found["signed_by_conflicts"]:
        refusals.append("apt refuses the host's sources (Conflicting values set for option Signed-By): "
                        f"{found['signed_by_conflicts'][0]}; keep one entry for that repository, then apply again")
    prefix, keyring = str(params.get("nvidia_repo") or ""), str(params.get("nvidia_repo_keyring") or "")
    found["nvidia_repo_others"] = (nvidia_repo_others(entries, prefix, keyring)
                                   if params.get("nvidia_repo_planned") else [])
    if found["nvidia_repo_others"] and not found["signed_by_conflicts"]:
        refusals.append(f"NVIDIA's apt repository is already configured with another keyring: "
                        f"{names(found['nvidia_repo_others'])}; the plan adds it with {keyring}, and apt would refuse "
                        "both (Conflicting values set for option Signed-By): remove that entry, then apply again")
    port = int(params.get("port") or 0)
    found["port_holders"] = port_holders(port, str(params.get("bind") or ""), str(params.get("port_unit") or "")) \
        if port else []
    if found["port_holders"]:
        refusals.append(f"the Jupyter port {port} is held by {names(found['port_holders'])}: stop it (`sudo ss -ltnp "
                        f"'sport = :{port}'` shows it) or choose another software.jupyter.port in the profile, then "
                        "apply again")
    account = str(params.get("account") or "")
    if account:
        try:
            entry = pwd.getpwnam(account)
            existing: tuple[int, str] | None = (entry.pw_uid, entry.pw_dir)
        except KeyError:
            existing = None
        try:
            with open(LOGIN_DEFS, encoding="utf-8", errors="replace") as handle:
                first = uid_min(handle.read())
        except FileNotFoundError:
            first = uid_min("")
        found["account"] = account_problem(account, str(params.get("home") or ""), existing, first)
        if found["account"]:
            refusals.append(found["account"])
    found["containers"] = container_problems(params)
    refusals.extend(found["containers"])
    return {"refusals": refusals, "found": found}
