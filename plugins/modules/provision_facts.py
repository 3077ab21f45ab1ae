#!/usr/bin/python
"""Read in one call what a provision role needs to decide: dpkg versions, a virtual environment's distributions
(read as the account that owns it), file stats, systemd unit states and accounts.

A role calls it once, decides from its answer and acts only on differences: on a converged host one task replaces
a probe task per fact (and the requirement checker each role used to carry).
"""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: provision_facts
short_description: Read the host once for a provision role (packages, environment, files, services, accounts)
description:
  - Answers, in one call, what a role needs to decide whether anything is to be done. Reads only; never changes
    the host, so it runs unchanged in check mode.
  - C(packages) come from one C(dpkg-query) call; a package counts as installed when dpkg says C(ii).
  - The environment's installed distributions are read by the environment's own interpreter, where
    C(importlib.metadata) finds them, from the Name and Version lines of each C(METADATA). The interpreter runs in
    isolated mode (C(-I)) as the account that owns the environment (C(owner) in O(venv)), never as root. When
    the module runs as root it drops to that account with C(setpriv) (its uid, gid and groups) and a minimal
    environment. The interpreter's output is treated as untrusted data, so it
    must be one JSON object of the expected shape, or the environment is reported as unreadable.
    Whether each requirement (C(name==version), C(name[extra]==version)) is met is decided here, not by the
    interpreter; a local version label on the installed distribution (C(2.6.0+cu126)) satisfies a requirement
    without one, as pip does.
  - Files are read with C(lstat) (a link is reported as a link, not followed); a sha256 is computed only where asked,
    only for a regular file, opened without following links.
  - Services are read with one C(systemctl show) call.
options:
  packages:
    description: Debian package names whose installed versions to read.
    type: list
    elements: str
    default: []
  venv:
    description:
      - A virtual environment to read. Keys C(path) (the environment's directory), C(owner) (the account that owns
        it; the interpreter runs as this account; left out, the owner of C(path)), C(requirements) (exact pins to
        check) and C(checksums) (paths relative to the environment whose sha256 the account's interpreter reads,
        since root does not read the account's files).
      - Empty (the default) reads no environment.
    type: dict
    default: {}
  files:
    description:
      - Paths to stat. An item is a path, or a dict with C(path), C(checksum) (true for a sha256) and C(follow)
        (true to report what a link points to, as C(stat -L) does, for an installed command behind Debian's
        alternatives). C(checksum) and C(follow) do not go together.
    type: list
    elements: raw
    default: []
  hash_files:
    description: Paths to stat and hash (sha256), as O(files) items with C(checksum) true; reported under RV(files).
    type: list
    elements: path
    default: []
  trees:
    description:
      - Directories whose entries to list (recursively, without following links), so a role can remove what it no
        longer ships. At most 10000 entries per directory.
    type: list
    elements: path
    default: []
  dpkg_unfinished:
    description:
      - Also say whether dpkg left work unfinished (C(dpkg --audit) lists packages, or C(/var/lib/dpkg/updates) holds
        journal entries), so a role repairs it even when every package it wants is installed.
    type: bool
    default: false
  services:
    description: systemd unit names (C(jupyter) or C(jupyter.service)) whose states to read.
    type: list
    elements: str
    default: []
  accounts:
    description: Account names to look up in the password database.
    type: list
    elements: str
    default: []
  subids:
    description:
      - Account names whose subordinate uid and gid ranges (C(/etc/subuid), C(/etc/subgid)) to read, for rootless
        containers, with whether provision created the account (the ledger at C(/var/lib/provision/ledger.json)
        lists it, or the note of the apply under way says it was absent when the apply began).
    type: list
    elements: str
    default: []
  interpreter:
    description:
      - A root-owned system interpreter whose C(major.minor) version to read (for example C(/usr/bin/python3)).
        It is run only when it and its directory are owned by root and not writable by group or others.
    type: path
    default: ""
  fingerprint:
    description:
      - One digest of the state provision owns on the host, read in this one call, and its comparison with the digest
        the last converged apply recorded (the fast re-apply, docs/hosts.md). Keys, all optional.
      - C(ledger) (the host's ledger; its packages, the packages it found and its accounts and units join those
        below), C(packages) (Debian packages whose dpkg status and version count), C(files) (paths; a directory
        counts with everything under it, links not followed), C(skip) (paths under those left out, such as the
        environment and the verifier's reports, which count by their owner and mode only, or the record, which
        does not count), C(units),
        C(accounts), C(venv) (C(path), C(owner), C(checksums) as in O(venv); its distributions and those files count,
        read as the account).
      - apt's sources, preferences and keyrings, C(/etc/os-release) and the running kernel always count.
      - C(record) (the record of the last converged apply, root's file) and C(key) (what else must match - the
        plan's variables and the roles' version); the answer says whether the host matches that record.
      - A regular file owned by root counts by its content (sha256); a file another account owns counts by its type,
        owner, mode, size and modification time, never read as root.
    type: dict
    default: {}
  space:
    description:
      - Where a write ran out of room - C(path) (the file system of this path is read - its mount point, free and
        total bytes) and C(pip_output) (what a pip install that failed printed - the wheels it was installing, by
        the sizes its C(Downloading) and C(Using cached) lines give and the size of the local wheels it processed;
        where the failed result holds provision_wheels' C(wheel_sizes), the wheels uv had unpacked, those sizes,
        with C(measure) C(unpacked)).
    type: dict
    default: {}
author: provision maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the host
  provision_facts:
    packages: [python3-venv]
    venv:
      path: /opt/provision/venv
      owner: ml
      requirements: ["numpy==2.2.6"]
    files: [{path: /opt/provision/venv/pip.conf, checksum: true}]
    services: [jupyter]
    accounts: [ml]
  register: python_env_facts
"""

RETURN = r"""
packages:
  description: Per package asked, its installed version, or null when dpkg does not have it installed (C(ii)).
  returned: always
  type: dict
  sample: {"python3-venv": "3.13.5-1", "python3-apt": null}
dpkg_unfinished:
  description: Whether dpkg left work unfinished (with O(dpkg_unfinished)); null when not asked.
  returned: always
  type: bool
  sample: false
venv:
  description:
    - The environment read. C(exists) (its C(bin/python) is there), C(python) (C(major.minor) of its interpreter),
      C(system_site_packages) (whether it sees the system's packages), C(checksums) (per path asked, its sha256 or
      null when absent),
      C(distributions) (normalized name to version), C(ok) and C(wrong) (the requirements met, and those not, each
      C({requirement, installed, error})), C(satisfied) (every requirement met), C(error) (why the environment could
      not be read, or null), C(unfinished) (C({name, path}) of each dist-info in its site-packages that pip began
      and did not finish, with no INSTALLER, which pip writes after the wheel's last file).
  returned: always
  type: dict
  sample: {"path": "/opt/provision/venv", "exists": true, "python": "3.13", "satisfied": true, "ok": [], "wrong": [],
           "distributions": {"numpy": "2.2.6"}, "error": null}
files:
  description: Per path asked, C(exists), and when it does C(type) (file, directory, link, other), C(mode) (C("0644")),
    C(executable) (a regular file with an execute bit), C(owner), C(group), C(uid), C(gid), C(size) and, where asked,
    C(sha256).
  returned: always
  type: dict
  sample: {"/etc/hosts": {"exists": true, "type": "file", "mode": "0644", "owner": "root", "group": "root"}}
trees:
  description: Per directory asked, its entries as paths relative to it (a directory's with a trailing C(/)), sorted;
    null when it is not a directory.
  returned: always
  type: dict
  sample: {"/opt/provision/verify": ["__main__.py", "kernels/", "kernels/triad.cu"]}
services:
  description: Per unit asked (by the name given), C(load) (C(loaded), C(not-found)), C(active) (C(active),
    C(inactive), C(failed)), C(sub) and C(enabled) (the unit file state, C(enabled), C(disabled), or empty).
  returned: always
  type: dict
accounts:
  description: Per account asked, C(exists), and when it does C(uid), C(gid), C(home), C(shell).
  returned: always
  type: dict
subids:
  description: Per account asked, C(subuid) and C(subgid) (lists of C([first, count])), C(owned) (provision created
    the account) and C(subuid_free), C(subgid_free) (the first id of a free range of 65536 from 100000, as useradd
    picks one).
  returned: always
  type: dict
  sample: {"ml": {"subuid": [[100000, 65536]], "subgid": [[100000, 65536]], "owned": true, "subuid_free": 165536,
           "subgid_free": 165536}}
interpreter:
  description: C(path) and C(version) (C(major.minor.micro)) of O(interpreter), or empty when not asked.
  returned: always
  type: dict
fingerprint:
  description:
    - With O(fingerprint), C(digest) (one sha256 of all the parts), C(parts) (a sha256 per part - ledger, packages,
      wheels, files, units, accounts, sources, system), C(key) (the O(fingerprint) key, as given), C(matches)
      (the record holds the same key and digest), C(differs) (the names of what differs from the record - C(record)
      when there is none, C(key:<name>) for a key, else the parts, and C(pending) when the ledger holds the pending
      note of an apply that did not finish, when it never matches) and C(error) (why a part could not be read; then
      it never matches). Empty when not asked.
  returned: always
  type: dict
  sample: {"digest": "3f1c...", "matches": true, "differs": [], "parts": {"packages": "a9e0..."}}
space:
  description:
    - With O(space), C(path), C(mount) (the mount point of its file system), C(free) and C(total) (bytes; C(free) as
      an unprivileged account gets it), C(wheels) (the wheels pip was installing, by name) and C(wheels_bytes) (their
      size as downloaded, summed; unpacked they take more). Empty when not asked.
  returned: always
  type: dict
  sample: {"path": "/opt/provision/venv", "mount": "/opt/provision", "free": 4096, "total": 31457280,
           "wheels": ["numpy-2.2.6-cp313-cp313-manylinux_2_17_x86_64.whl"], "wheels_bytes": 16800000}
"""

# Ansible's layout: the documentation blocks come before the imports.
import contextlib  # noqa: E402
import grp  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils import dpkg, fingerprint, ledger, system  # noqa: E402
from ansible_collections.provision.gpu.plugins.module_utils.environment import (  # noqa: E402
    SAFE_PATH,
    TIMEOUT_S,
    directory_owner,
    name_of,
    read_environment,
)
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError  # noqa: E402

# ---------------------------------------------------------------------------------------------------------------
# Files, the system interpreter (the packages, the environment, services, accounts and the fingerprint are read by
# the shared code in plugins/module_utils)


def stat_file(path: str, checksum: bool, follow: bool = False) -> dict:
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:  # with follow, a dangling link too
        return {"exists": False}
    except NotADirectoryError:
        return {"exists": False}
    kind = ("file" if stat.S_ISREG(st.st_mode) else "directory" if stat.S_ISDIR(st.st_mode)
            else "link" if stat.S_ISLNK(st.st_mode) else "other")
    info: dict = {"exists": True, "type": kind, "mode": f"{stat.S_IMODE(st.st_mode):04o}",
                  "executable": kind == "file" and bool(st.st_mode & 0o111), "uid": st.st_uid,
                  "gid": st.st_gid, "owner": name_of(pwd.getpwuid, st.st_uid),
                  "group": name_of(grp.getgrgid, st.st_gid), "size": st.st_size}
    if checksum and kind == "file":
        digest = hashlib.sha256()
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):  # replaced since the lstat
                raise ModuleError(f"files: {path} is no longer a regular file")
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        info["sha256"] = digest.hexdigest()
    return info


def read_files(items: list) -> dict:
    found = {}
    for item in items:
        if isinstance(item, dict):
            path, checksum, follow = (str(item.get("path", "")), bool(item.get("checksum", False)),
                                      bool(item.get("follow", False)))
        else:
            path, checksum, follow = str(item), False, False
        if not os.path.isabs(path):
            raise ModuleError(f"files: {path!r} is not an absolute path")
        if checksum and follow:
            raise ModuleError(f"files: {path}: a checksum is read from the file itself, never through a link (no follow)")
        found[path] = stat_file(path, checksum, follow)
    return found


MAX_TREE_ENTRIES = 10000


def read_tree(path: str) -> list[str] | None:
    """The entries under `path`, relative, a directory's ending in "/"; links are listed, never followed."""
    if not os.path.isabs(path):
        raise ModuleError(f"trees: {path!r} is not an absolute path")
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return None
    except (FileNotFoundError, NotADirectoryError):
        return None
    found: list[str] = []
    for top, dirs, files in os.walk(path, followlinks=False):
        rel = os.path.relpath(top, path)
        prefix = "" if rel == "." else rel + "/"
        # os.walk lists a link to a directory among dirs, but does not enter it: report it as the link it is.
        links = [d for d in dirs if os.path.islink(os.path.join(top, d))]
        dirs[:] = [d for d in dirs if d not in links]
        found.extend(prefix + d + "/" for d in dirs)
        found.extend(prefix + f for f in files + links)
        if len(found) > MAX_TREE_ENTRIES:
            raise ModuleError(f"trees: {path} holds more than {MAX_TREE_ENTRIES} entries")
    return sorted(found)


def read_interpreter(path: str) -> dict:
    if not path:
        return {}
    real = os.path.realpath(path)
    for checked in (real, os.path.dirname(real)):
        st = os.stat(checked)
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ModuleError(f"interpreter {path}: {checked} is not root's alone; provision runs no such file as root")
    proc = subprocess.run([real, "-I", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                          capture_output=True, text=True, check=False, env={"PATH": SAFE_PATH}, cwd="/",
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, start_new_session=True)
    version = proc.stdout.strip()
    if proc.returncode != 0 or not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        raise ModuleError(f"interpreter {path} did not say its version ({proc.returncode}): {proc.stderr.strip()[:200]}")
    return {"path": path, "version": version}


_PIP_SIZED = re.compile(r"(?:Downloading|Using cached) (?:\S*/)?([^/\s]+\.whl) \(([\d.]+) (kB|MB|GB|bytes)\)")
_PIP_LOCAL = re.compile(r"Processing (/\S+\.whl)")
_UNITS = {"bytes": 1, "kB": 1000, "MB": 1000 ** 2, "GB": 1000 ** 3}  # pip's sizes are decimal (pip._internal.utils)


def mount_point(path: str) -> str:
    path = os.path.realpath(path)
    while not os.path.ismount(path) and path != "/":
        path = os.path.dirname(path)
    return path


def read_space(params: dict) -> dict:
    """The room on the file system of `path` (the nearest existing directory above it), and the size of the wheels
    a failed pip install was installing, from what it printed."""
    path = str(params.get("path") or "/")
    here = path
    while not os.path.exists(here) and here != "/":
        here = os.path.dirname(here)
    st = os.statvfs(here)
    wheels: dict[str, int] = {}
    text = str(params.get("pip_output") or "")
    for name, size, unit in _PIP_SIZED.findall(text):
        wheels[name] = int(float(size) * _UNITS[unit])
    for local in _PIP_LOCAL.findall(text):
        with contextlib.suppress(OSError):
            wheels[os.path.basename(local)] = os.stat(local).st_size
    unpacked = _wheel_sizes(text)  # provision_wheels' report where uv installed: the wheels' sizes unpacked
    measure = "unpacked" if unpacked else "downloaded"
    wheels = unpacked or wheels
    return {"path": path, "mount": mount_point(here), "free": st.f_bavail * st.f_frsize,
            "total": st.f_blocks * st.f_frsize, "wheels": sorted(wheels), "wheels_bytes": sum(wheels.values()),
            "measure": measure}


def _wheel_sizes(text: str) -> dict[str, int]:
    """Every `wheel_sizes` mapping in a failed task's result (JSON; a loop's results included), merged."""
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    found: dict[str, int] = {}
    todo = [data]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            sizes = item.get("wheel_sizes")
            if isinstance(sizes, dict):
                found.update({str(k): int(v) for k, v in sizes.items() if isinstance(v, int)})
            todo.extend(v for k, v in item.items() if k != "wheel_sizes")
        elif isinstance(item, list):
            todo.extend(item)
    return found


def read_subids(names: list[str]) -> dict:
    """The accounts' subordinate ids, with whether provision's ledger owns each account (system.read_subids)."""
    if not names:
        return {}
    return system.read_subids(names, ledger.owned(ledger.read_trusted(ledger.PATH), "accounts"))


def gather(params: dict) -> dict:
    environment = params.get("venv") or {}
    facts = {
        "packages": dpkg.query(list(params.get("packages") or []), TIMEOUT_S),
        "dpkg_unfinished": (dpkg.audit_lists(TIMEOUT_S) or dpkg.journal()) if params.get("dpkg_unfinished") else None,
        "files": read_files(list(params.get("files") or [])
                            + [{"path": p, "checksum": True} for p in params.get("hash_files") or []]),
        "trees": {path: read_tree(path) for path in params.get("trees") or []},
        "services": system.read_services(list(params.get("services") or [])),
        "accounts": system.read_accounts(list(params.get("accounts") or [])),
        "subids": read_subids(list(params.get("subids") or [])),
        "interpreter": read_interpreter(params.get("interpreter") or ""),
        "venv": {},
        "fingerprint": fingerprint.read(params["fingerprint"]) if params.get("fingerprint") else {},
        "space": read_space(params["space"]) if params.get("space") else {},
    }
    if environment:
        path, owner = environment.get("path"), environment.get("owner")
        requirements = environment.get("requirements") or []
        checksums = environment.get("checksums") or []
        if not isinstance(checksums, list) or not all(
                isinstance(c, str) and c and not os.path.isabs(c) and ".." not in c.split("/") for c in checksums):
            raise ModuleError("venv.checksums must be a list of paths relative to the environment")
        if not isinstance(path, str) or not os.path.isabs(path) or not isinstance(owner, (str, type(None))):
            raise ModuleError("venv needs an absolute 'path' (and, optionally, an 'owner' account)")
        if not owner:
            owner = directory_owner(path)
        if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
            raise ModuleError("venv.requirements must be a list of strings")
        facts["venv"] = read_environment(path, owner, requirements, checksums)
    return facts


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "packages": {"type": "list", "elements": "str", "default": []},
            "venv": {"type": "dict", "default": {}},
            "files": {"type": "list", "elements": "raw", "default": []},
            "hash_files": {"type": "list", "elements": "path", "default": []},
            "trees": {"type": "list", "elements": "path", "default": []},
            "dpkg_unfinished": {"type": "bool", "default": False},
            "services": {"type": "list", "elements": "str", "default": []},
            "accounts": {"type": "list", "elements": "str", "default": []},
            "subids": {"type": "list", "elements": "str", "default": []},
            "interpreter": {"type": "path", "default": ""},
            "fingerprint": {"type": "dict", "default": {}},
            "space": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        facts = gather(module.params)
    except (ModuleError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"provision_facts: {exc}")
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
