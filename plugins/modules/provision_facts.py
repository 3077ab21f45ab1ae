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
  interpreter:
    description:
      - A root-owned system interpreter whose C(major.minor) version to read (for example C(/usr/bin/python3)).
        It is run only when it and its directory are owned by root and not writable by group or others.
    type: path
    default: ""
  preflight:
    description:
      - What would make the plan fail on this host, found before the first change (the preflight role). Keys, all
        optional; a key left out is not checked.
      - C(driver_branch) (the driver branch the plan installs, such as C(550)), C(driver_packages) (the plan's own
        driver packages, never foreign), C(driver_sources) (a regular expression of the Debian source packages of
        NVIDIA's driver), C(owned_packages) (packages provision installed, never foreign), C(ledger) (the host's
        ledger, whose packages provision installed and are never foreign either) and C(installer_files)
        (files NVIDIA's C(.run) installer leaves, such as C(/usr/bin/nvidia-uninstall)).
      - C(port), C(bind) and C(port_unit) (the planned Jupyter port and address, and the systemd unit of
        provision's own server, which may hold it).
      - C(account) and C(home) (the planned account and its home).
      - C(nvidia_repo) (the URL prefix of NVIDIA's apt repository), C(nvidia_repo_keyring) (the keyring provision's
        entry for it names) and C(nvidia_repo_planned) (whether the plan adds that entry).
      - dpkg's status is always read when this is given (a package left half-configured, or a source with two
        Signed-By values, stops every plan).
    type: dict
    default: {}
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
interpreter:
  description: C(path) and C(version) (C(major.minor.micro)) of O(interpreter), or empty when not asked.
  returned: always
  type: dict
preflight:
  description: With O(preflight), C(refusals) (one line per thing found that would make the plan fail, each saying
    what to do; empty when none) and C(found) (what each check read). Empty when not asked.
  returned: always
  type: dict
  sample: {"refusals": [], "found": {"half_configured": [], "port_holders": []}}
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
"""

# Ansible's layout: the documentation blocks come before the imports.
import grp  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402
import selectors  # noqa: E402
import shutil  # noqa: E402
import stat  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402

# Run by the environment's interpreter as its owner: it only lists what is installed. Everything it prints is checked
# here before use (the account can make its interpreter print anything).
# It finds distributions where importlib.metadata does (a *.dist-info or *.egg-info in each sys.path entry, the first
# one of a name winning) but reads only the Name and Version lines at the head of each METADATA / PKG-INFO instead of
# parsing the whole file with the email parser: 0.10 s instead of 0.37 s for JupyterLab's 96 distributions in a
# sandbox, and each role that reads an environment pays it once per apply (docs/fleet.md).
DISTRIBUTIONS_SCRIPT = (
    "import hashlib, json, os, site, sys\n"
    "def head(meta):\n"
    "    found = {}\n"
    "    with open(meta, encoding='utf-8', errors='replace') as handle:\n"
    "        for number, line in enumerate(handle):\n"
    "            if not line.strip() or number > 200:\n"
    "                break\n"
    "            key, sep, value = line.partition(':')\n"
    "            if sep and key in ('Name', 'Version') and key not in found:\n"
    "                found[key] = value.strip()\n"
    "                if len(found) == 2:\n"
    "                    break\n"
    "    return found.get('Name'), found.get('Version')\n"
    "found = {}\n"
    "unfinished = []\n"
    "prefix = os.path.realpath(sys.prefix) + os.sep\n"
    "for entry in sys.path:\n"
    "    try:\n"
    "        names = sorted(os.listdir(entry or '.'))\n"
    "    except OSError:\n"
    "        continue\n"
    "    for sub in names:\n"
    "        info = os.path.join(entry, sub)\n"
    "        if sub.endswith('.dist-info'):\n"
    "            meta = os.path.join(info, 'METADATA')\n"
    "            if os.path.realpath(info).startswith(prefix) and not os.path.exists(os.path.join(info, 'INSTALLER')):\n"
    "                unfinished.append(info)\n"
    "        elif sub.endswith('.egg-info'):\n"
    "            meta = os.path.join(info, 'PKG-INFO') if os.path.isdir(info) else info\n"
    "        else:\n"
    "            continue\n"
    "        try:\n"
    "            name, version = head(meta)\n"
    "        except OSError:\n"
    "            continue\n"
    "        if name and version and name not in found:\n"
    "            found[name] = version\n"
    "sums = {}\n"
    "for rel in sys.argv[1:]:\n"
    "    try:\n"
    "        with open(os.path.join(sys.prefix, rel), 'rb') as handle:\n"
    "            sums[rel] = hashlib.sha256(handle.read()).hexdigest()\n"
    "    except OSError:\n"
    "        sums[rel] = None\n"
    "print(json.dumps({'python': '%d.%d' % sys.version_info[:2], 'distributions': found, 'checksums': sums,\n"
    "                  'system_site_packages': sys.base_prefix in site.PREFIXES, 'unfinished': unfinished}))\n"
)
REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*(\S+)")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,99}")
PYTHON = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}")
MAX_OUTPUT = 4 * 1024 * 1024
TIMEOUT_S = 120
# What the dropped interpreter gets as its environment: nothing of root's.
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


class FactsError(Exception):
    """A fact could not be read; the message is for people."""


def run_untrusted(argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run a command whose output is untrusted (the environment's interpreter, as its owner): in a session of its own
    (no controlling terminal shared with root), at most MAX_OUTPUT bytes read from each stream and TIMEOUT_S seconds,
    killed when it exceeds either. Returns (exit status, stdout, stderr)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env,
                            cwd="/", start_new_session=True)
    chunks: dict[int, list[bytes]] = {1: [], 2: []}
    sizes = {1: 0, 2: 0}
    deadline = time.monotonic() + TIMEOUT_S
    with selectors.DefaultSelector() as sel:
        if proc.stdout is None or proc.stderr is None:  # never with PIPE; ansible-test's no-assert wants no assert
            raise FactsError("the environment's interpreter started without its output pipes")
        sel.register(proc.stdout, selectors.EVENT_READ, 1)
        sel.register(proc.stderr, selectors.EVENT_READ, 2)
        try:
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FactsError(f"the environment's interpreter did not answer within {TIMEOUT_S} s")
                for key, _events in sel.select(timeout=left):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    sizes[key.data] += len(data)
                    if sizes[key.data] > MAX_OUTPUT:
                        raise FactsError("the environment's interpreter printed more than expected")
                    chunks[key.data].append(data)
            status = proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except (FactsError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            raise
        finally:
            proc.stdout.close()
            proc.stderr.close()
    out, err = (b"".join(chunks[i]).decode("utf-8", "replace") for i in (1, 2))
    return status, out, err


def normalize(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------------------------------
# dpkg


def parse_dpkg(text: str, wanted: list[str]) -> dict[str, str | None]:
    """`dpkg-query -W -f '${Package}\\t${db:Status-Abbrev}\\t${Version}\\n'` output → {package: version or None}."""
    found: dict[str, str | None] = dict.fromkeys(wanted)
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) != 3:
            continue
        package, status, version = parts
        # A multi-arch package answers as "name:arch" only when asked so; the names asked are what we key by.
        package = package.split(":", 1)[0]
        if package in found and status.strip() == "ii":
            found[package] = version
    return found


def read_packages(names: list[str]) -> dict[str, str | None]:
    if not names:
        return {}
    dpkg_query = shutil.which("dpkg-query") or "/usr/bin/dpkg-query"
    # Exit 1 only says that some name is unknown to dpkg: the others are still listed.
    proc = subprocess.run([dpkg_query, "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Version}\n", "--", *names],
                          capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    if proc.returncode not in (0, 1):
        raise FactsError(f"dpkg-query failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    return parse_dpkg(proc.stdout, names)


def read_dpkg_unfinished() -> bool:
    """Whether an interrupted dpkg run left packages unconfigured or its journal unapplied (what `dpkg --configure -a`
    finishes)."""
    dpkg = shutil.which("dpkg") or "/usr/bin/dpkg"
    proc = subprocess.run([dpkg, "--audit"], capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
    if proc.returncode not in (0, 1):
        raise FactsError(f"dpkg --audit failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
    try:
        journal = any(entry.is_file() for entry in os.scandir("/var/lib/dpkg/updates"))
    except FileNotFoundError:
        journal = False
    return bool(proc.stdout.strip()) or journal


# ---------------------------------------------------------------------------------------------------------------
# The environment


def check_requirement(requirement: str, installed: dict[str, str]) -> dict:
    """One exact pin against {normalized name: version}: {requirement, installed, error}."""
    spec = requirement.split(";", 1)[0].strip()
    match = REQUIREMENT.fullmatch(spec)
    if not match:
        return {"requirement": requirement, "installed": None, "error": "not an exact 'name==version' requirement"}
    name, wanted = match.group(1), match.group(3)
    version = installed.get(normalize(name))
    if version is None:
        return {"requirement": requirement, "installed": None, "error": "not installed"}
    same = version == wanted or ("+" not in wanted and version.split("+", 1)[0] == wanted)
    return {"requirement": requirement, "installed": version, "error": None if same else "other version"}


def parse_distributions(stdout: str, checksums: list[str]) -> dict:
    """The interpreter's answer, validated: {python ("3.13"), distributions ({normalized name: version}),
    checksums ({asked path: sha256 or None}), system_site_packages (bool)}. Raises FactsError."""
    if len(stdout) > MAX_OUTPUT:
        raise FactsError("the environment's interpreter printed more than expected")
    try:
        data = json.loads(stdout)
    except ValueError:
        raise FactsError("the environment's interpreter did not print one JSON object") from None
    if not isinstance(data, dict) or not isinstance(data.get("distributions"), dict):
        raise FactsError("the environment's interpreter printed JSON of another shape")
    python = data.get("python")
    if not isinstance(python, str) or not PYTHON.fullmatch(python):
        raise FactsError("the environment's interpreter reported no valid Python version")
    found: dict[str, str] = {}
    for name, version in data["distributions"].items():
        # A distribution with an odd name or version (a stray egg-info, a hand-made dist-info) is left out, not fatal:
        # only the planned requirements are compared, and one that is left out counts as missing, so pip repairs it.
        if isinstance(name, str) and isinstance(version, str) and NAME.fullmatch(name) and VERSION.fullmatch(version):
            found.setdefault(normalize(name), version)
    sums = data.get("checksums")
    if not isinstance(sums, dict) or sorted(sums) != sorted(checksums) or not all(
            v is None or (isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v)) for v in sums.values()):
        raise FactsError("the environment's interpreter reported invalid checksums")
    system_site = data.get("system_site_packages")
    if not isinstance(system_site, bool):
        raise FactsError("the environment's interpreter did not say whether it sees the system's packages")
    unfinished = data.get("unfinished", [])
    if not isinstance(unfinished, list) or not all(isinstance(p, str) for p in unfinished):
        raise FactsError("the environment's interpreter reported invalid unfinished installs")
    return {"python": python, "distributions": found, "checksums": sums, "system_site_packages": system_site,
            "unfinished": unfinished}


def unfinished_installs(paths: list[str], venv: str, python: str) -> list[dict]:
    """The dist-info folders of the environment's own site-packages that pip began and did not finish, as {name
    (normalized, from the folder's name), path}. pip writes a wheel's files (its METADATA and RECORD among them),
    then INSTALLER, then the final RECORD: a dist-info without INSTALLER is an install that was cut, whose files may
    be half written (tests/integration/test_power_cut.py). Only folders directly in <venv>/lib/pythonX.Y/site-packages
    are taken; anything else the account's interpreter names is left out."""
    site = os.path.join(venv, "lib", f"python{python}", "site-packages")
    found = []
    for path in paths:
        base = os.path.basename(path)
        if os.path.dirname(path) == site and base.endswith(".dist-info") and NAME.fullmatch(base.split("-")[0]):
            found.append({"name": normalize(base.split("-")[0]), "path": path})
    return found


def as_account(owner: str, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """argv run as `owner` (dropped with setpriv when this runs as root), and the minimal environment it gets."""
    try:
        account = pwd.getpwnam(owner)
    except KeyError:
        raise FactsError(f"the environment's owner {owner!r} is not an account on this host") from None
    if account.pw_uid == 0:
        raise FactsError("the environment's owner is root: provision never runs an environment's interpreter as root")
    env = {"PATH": SAFE_PATH, "HOME": account.pw_dir, "USER": owner, "LOGNAME": owner, "LANG": "C.UTF-8"}
    if os.geteuid() == account.pw_uid:
        return argv, env
    if os.geteuid() != 0:
        raise FactsError(f"reading the environment as {owner!r} needs root (become: true) or that account")
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    return [setpriv, f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--init-groups",
            "--", *argv], env


def directory_owner(path: str) -> str:
    """The account that owns the environment's directory (no `owner` given); "" when there is no such directory, so
    the environment reads as absent. Its interpreter still never runs as root: read_environment refuses that."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return ""
    if not stat.S_ISDIR(st.st_mode):
        raise FactsError(f"venv: {path} is not a directory")
    name = name_of(pwd.getpwuid, st.st_uid)
    if name is None:
        raise FactsError(f"venv: {path} is owned by uid {st.st_uid}, which is not an account on this host")
    return name


def read_environment(path: str, owner: str, requirements: list[str], checksums: list[str]) -> dict:
    result: dict = {"path": path, "owner": owner, "exists": False, "python": None, "distributions": {},
                    "checksums": dict.fromkeys(checksums), "system_site_packages": None, "unfinished": [],
                    "ok": [], "wrong": [], "satisfied": False, "error": None}
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        result["wrong"] = [{"requirement": r, "installed": None, "error": "no environment"} for r in requirements]
        return result
    result["exists"] = True
    try:
        pwd.getpwnam(owner)
    except KeyError:
        # The account is made by the role after this read (a changed plan, a rebuilt host that kept /opt): the
        # environment is not the planned one, so it is made again once the account exists.
        result["error"] = f"the environment's owner {owner!r} is not an account on this host yet"
    else:
        argv, env = as_account(owner, [python, "-I", "-c", DISTRIBUTIONS_SCRIPT, *checksums])
        try:
            status, stdout, stderr = run_untrusted(argv, env)
            if status != 0:
                # An environment whose interpreter cannot run (a half-made one, a removed system Python) is one to
                # make again: reported, not fatal.
                raise FactsError(f"{python} exited {status}: {stderr.strip()[-300:]}")
            result.update(parse_distributions(stdout, checksums))
            result["unfinished"] = unfinished_installs(result["unfinished"], path, result["python"])
        except FactsError as exc:
            # Whatever the account's interpreter says or does, the answer is "not the planned environment": pip
            # then runs as the account and the role's assert after it says what is still wrong.
            result["error"] = str(exc)
    checks = [check_requirement(r, result["distributions"]) for r in requirements]
    result["ok"] = [c for c in checks if not c["error"]]
    result["wrong"] = [c for c in checks if c["error"]]
    result["satisfied"] = result["error"] is None and not result["wrong"]
    return result


# ---------------------------------------------------------------------------------------------------------------
# Files, services, accounts, the system interpreter


def name_of(getter, number: int) -> str | None:
    try:
        return getter(number)[0]
    except KeyError:
        return None


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
                raise FactsError(f"files: {path} is no longer a regular file")
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
            raise FactsError(f"files: {path!r} is not an absolute path")
        if checksum and follow:
            raise FactsError(f"files: {path}: a checksum is read from the file itself, never through a link (no follow)")
        found[path] = stat_file(path, checksum, follow)
    return found


MAX_TREE_ENTRIES = 10000


def read_tree(path: str) -> list[str] | None:
    """The entries under `path`, relative, a directory's ending in "/"; links are listed, never followed."""
    if not os.path.isabs(path):
        raise FactsError(f"trees: {path!r} is not an absolute path")
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
            raise FactsError(f"trees: {path} holds more than {MAX_TREE_ENTRIES} entries")
    return sorted(found)


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
        raise FactsError(f"systemctl show failed ({proc.returncode}): {proc.stderr.strip()[:300]}")
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


def read_interpreter(path: str) -> dict:
    if not path:
        return {}
    real = os.path.realpath(path)
    for checked in (real, os.path.dirname(real)):
        st = os.stat(checked)
        if st.st_uid != 0 or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise FactsError(f"interpreter {path}: {checked} is not root's alone; provision runs no such file as root")
    proc = subprocess.run([real, "-I", "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                          capture_output=True, text=True, check=False, env={"PATH": SAFE_PATH}, cwd="/",
                          stdin=subprocess.DEVNULL, timeout=TIMEOUT_S, start_new_session=True)
    version = proc.stdout.strip()
    if proc.returncode != 0 or not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        raise FactsError(f"interpreter {path} did not say its version ({proc.returncode}): {proc.stderr.strip()[:200]}")
    return {"path": path, "version": version}


# ---------------------------------------------------------------------------------------------------------------
# The preflight: what on the host would make the plan fail, read before the first change. Each check is a pure
# function of what was read (unit-tested on text); read_preflight reads and asks them. Nothing here changes the host.

DPKG_STATUS = "/var/lib/dpkg/status"
LOGIN_DEFS = "/etc/login.defs"
APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d")
PROC = "/proc"
TCP_LISTEN = "0A"
MAX_NAMES = 8


def parse_dpkg_status(text: str) -> list[dict]:
    """/var/lib/dpkg/status → [{package, status (its third word: installed, half-configured, ...), version,
    source}]; a package's source is its own name unless a Source field says otherwise."""
    found = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue  # a continuation line of a multi-line field
            key, value = line.split(":", 1)
            fields.setdefault(key.strip(), value.strip())
        if "Package" not in fields:
            continue
        status = fields.get("Status", "").split()
        found.append({"package": fields["Package"], "status": status[2] if len(status) == 3 else "",
                      "version": fields.get("Version", ""),
                      "source": fields.get("Source", fields["Package"]).split(" ", 1)[0]})
    return found


def half_configured(packages: list[dict]) -> list[str]:
    """Packages whose maintainer script failed or was cut short while configuring (or unpacking over an older
    version): what `dpkg --audit` lists that `dpkg --configure -a` may not finish. An interrupted unpack alone
    (status unpacked) is finished by the roles and is not listed here."""
    return sorted(p["package"] for p in packages if p["status"] in ("half-configured", "half-installed"))


# dpkg's states of a package whose install or upgrade did not finish (`dpkg --audit` lists them).
UNFINISHED = ("half-configured", "half-installed", "unpacked", "triggers-awaited", "triggers-pending")
# Of those, a package waiting for trigger processing: no install of it was cut, another package's install (or
# removal) activated one of its triggers (libc-bin's ldconfig, an alternative) and the run ended before dpkg ran it.
TRIGGERED = ("triggers-awaited", "triggers-pending")


def unfinished(packages: list[dict]) -> dict[str, str]:
    """{package: version} of every package dpkg left in the middle of an install, upgrade or configure."""
    return {p["package"]: p["version"] for p in packages if p["status"] in UNFINISHED}


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


def read_ledger(path: str) -> dict:
    """The host's ledger (provision_ledger), read only from a root-owned file no one else can write; {} otherwise."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            st = os.fstat(handle.fileno())
            if st.st_uid != 0 or st.st_mode & 0o022:
                return {}
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ledger_pending(path: str) -> dict | None:
    """The pending note of the host's ledger (an apply of provision's began and did not finish); None when none."""
    pending = read_ledger(path).get("pending")
    return pending if isinstance(pending, dict) else None


def dpkg_journal() -> bool:
    """Whether dpkg's journal holds updates an interrupted run did not apply (dpkg refuses to work until
    `dpkg --configure -a` applies them)."""
    try:
        return any(entry.is_file() for entry in os.scandir("/var/lib/dpkg/updates"))
    except OSError:
        return False


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


def parse_sources(path: str, text: str) -> list[dict]:
    """apt source entries of one file (one-line .list or deb822 .sources): [{file, uris, suites, signed_by}]."""
    entries = []
    if path.endswith(".sources"):
        for block in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            key = ""
            for line in block.splitlines():
                if line.startswith("#"):
                    continue
                if line[:1] in (" ", "\t") and key:
                    fields[key] += "\n" + line.strip()
                    continue
                key, sep, value = line.partition(":")
                key = key.strip().lower()
                if sep:
                    fields[key] = value.strip()
                else:
                    key = ""
            if not fields.get("uris") or fields.get("enabled", "yes").lower() == "no":
                continue
            entries.append({"file": path, "uris": fields["uris"].split(), "suites": fields.get("suites", "").split(),
                            "signed_by": fields.get("signed-by", "").strip()})
        return entries
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        match = re.match(r"deb(?:-src)?\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)", line)
        if not match:
            continue
        options = dict(o.partition("=")[::2] for o in (match.group(1) or "").split())
        entries.append({"file": path, "uris": [match.group(2)], "suites": [match.group(3)],
                        "signed_by": options.get("signed-by", "")})
    return entries


def read_sources() -> list[dict]:
    files = []
    for where in APT_SOURCES:
        if os.path.isdir(where):
            files += sorted(os.path.join(where, n) for n in os.listdir(where) if n.endswith((".list", ".sources")))
        elif os.path.isfile(where):
            files.append(where)
    entries = []
    for path in files:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                entries += parse_sources(path, handle.read())
        except OSError:
            continue
    return entries


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


def names(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_NAMES])
    return shown + (f" and {len(items) - MAX_NAMES} more" if len(items) > MAX_NAMES else "")


def ledger_packages(path: str) -> list[str]:
    """The Debian packages the host's ledger (provision_ledger) says provision installed: an earlier plan's driver
    branch is provision's to replace, not a foreign stack. Read only from a root-owned file no one else can write."""
    packages = read_ledger(path).get("packages")
    return sorted(str(name) for name in packages) if isinstance(packages, dict) else []


def read_preflight(params: dict) -> dict:
    """Every check asked in `params` (the preflight option): {refusals: [one line each], found: {...}}."""
    refusals: list[str] = []
    found: dict = {}
    try:
        with open(DPKG_STATUS, encoding="utf-8", errors="replace") as handle:
            packages = parse_dpkg_status(handle.read())
    except FileNotFoundError:
        packages = []
    # Work dpkg left unfinished: provision's own interrupted apply's is finished by the run (roles/ledger, first);
    # anyone else's is refused here, before any change, naming the packages and the command.
    left = unfinished(packages)
    journal = dpkg_journal()
    pending = ledger_pending(str(params.get("ledger") or ""))
    owned = frozenset(ledger_packages(str(params.get("ledger") or "")))
    triggered = frozenset(p["package"] for p in packages if p["status"] in TRIGGERED)
    own = (bool(left) or journal) and pending is not None and (
        not left or provisions_unfinished(left, pending, owned, triggered))
    found["provision_unfinished"] = sorted(left) or (["(dpkg's journal)"] if journal else []) if own else []
    found["half_configured"] = [] if own else half_configured(packages)
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
                                                   *ledger_packages(str(params.get("ledger") or ""))])
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
    return {"refusals": refusals, "found": found}


# ---------------------------------------------------------------------------------------------------------------
# The fingerprint: one digest of what provision owns on the host, so that a re-apply on a host that has not changed
# since its last converged apply runs only the verifier and the record (docs/hosts.md, "The fast re-apply"). Each
# part is read once; a part that cannot be read makes the digest unmatchable, and the roles run.

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
            raise FactsError(f"fingerprint: more than {MAX_FINGERPRINT_ENTRIES} files under {', '.join(paths)}")
        return stat.S_ISDIR(st.st_mode)

    for top in sorted({os.path.normpath(p) for p in paths}):
        if not os.path.isabs(top):
            raise FactsError(f"fingerprint: {top!r} is not an absolute path")
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


def root_json(path: str) -> dict | None:
    """A JSON object from a file only root can write (the ledger, the record), or None."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            st = os.fstat(handle.fileno())
            if st.st_uid != 0 or st.st_mode & 0o022:
                return None
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_fingerprint(params: dict) -> dict:
    """The fingerprint option: {digest, parts, key, matches, differs, error}."""
    ledger = root_json(str(params.get("ledger") or "")) or {}
    parts: dict[str, str] = {}
    error = None
    owned = {key: ledger.get(key) for key in ("packages", "found", "wheels", "paths", "units", "accounts", "venvs")}
    parts["ledger"] = digest_of(owned)
    packages = sorted({*(params.get("packages") or []), *(ledger.get("packages") or {}), *(ledger.get("found") or {})})
    units = sorted({*(params.get("units") or []), *(ledger.get("units") or [])})
    accounts = sorted({*(params.get("accounts") or []), *(ledger.get("accounts") or [])})
    try:
        parts["packages"] = digest_of(read_packages(packages))
        parts["files"] = digest_of(walk_state(list(params.get("files") or []), list(params.get("skip") or [])))
        parts["units"] = digest_of(read_services(units))
        parts["accounts"] = digest_of(read_accounts(accounts))
        parts["sources"] = digest_of(walk_state(list(FINGERPRINT_APT), []))
        parts["system"] = digest_of([walk_state(list(FINGERPRINT_SYSTEM), []), os.uname().release])
        environment = params.get("venv") or {}
        if environment.get("path"):
            path = str(environment["path"])
            owner = str(environment.get("owner") or "") or directory_owner(path)
            checksums = [str(c) for c in environment.get("checksums") or []]
            if not all(c and not os.path.isabs(c) and ".." not in c.split("/") for c in checksums):
                raise FactsError("fingerprint: venv.checksums must be paths relative to the environment")
            found = read_environment(path, owner, [], checksums) if owner else {"exists": False}
            if found.get("error"):
                raise FactsError(f"fingerprint: the environment could not be read: {found['error']}")
            parts["wheels"] = digest_of({k: found.get(k) for k in ("exists", "python", "distributions", "checksums",
                                                                   "system_site_packages", "owner")})
    except (FactsError, OSError, subprocess.SubprocessError) as exc:
        error = str(exc)
    key = params.get("key") or {}
    digest = digest_of(parts) if error is None else None
    answer: dict = {"digest": digest, "parts": parts, "key": key, "matches": False, "differs": [], "error": error}
    record = root_json(str(params.get("record") or "")) if params.get("record") else None
    recorded = (record or {}).get("fingerprint") if isinstance((record or {}).get("fingerprint"), dict) else None
    if recorded is None:
        answer["differs"] = ["record"]
    else:
        old_key = recorded.get("key") if isinstance(recorded.get("key"), dict) else {}
        differs = [f"key:{name}" for name in sorted(set(key) | set(old_key)) if key.get(name) != old_key.get(name)]
        old_parts = recorded.get("parts") if isinstance(recorded.get("parts"), dict) else {}
        differs += [name for name in sorted(set(parts) | set(old_parts)) if parts.get(name) != old_parts.get(name)]
        if error is not None:
            differs.append("unreadable")
        if ledger.get("pending"):
            # An apply of provision's began and did not finish (cut: power, a lost connection, a killed controller):
            # what it left half done need not show in any part (a wheel whose metadata was written before its
            # files), so the host takes the full path, which finishes it.
            differs.append("pending")
        answer["differs"] = differs
        answer["matches"] = not differs and digest is not None and recorded.get("digest") == digest
    return answer


def gather(params: dict) -> dict:
    environment = params.get("venv") or {}
    facts = {
        "packages": read_packages(list(params.get("packages") or [])),
        "dpkg_unfinished": read_dpkg_unfinished() if params.get("dpkg_unfinished") else None,
        "files": read_files(list(params.get("files") or [])
                            + [{"path": p, "checksum": True} for p in params.get("hash_files") or []]),
        "trees": {path: read_tree(path) for path in params.get("trees") or []},
        "services": read_services(list(params.get("services") or [])),
        "accounts": read_accounts(list(params.get("accounts") or [])),
        "interpreter": read_interpreter(params.get("interpreter") or ""),
        "venv": {},
        "preflight": read_preflight(params["preflight"]) if params.get("preflight") else {},
        "fingerprint": read_fingerprint(params["fingerprint"]) if params.get("fingerprint") else {},
    }
    if environment:
        path, owner = environment.get("path"), environment.get("owner")
        requirements = environment.get("requirements") or []
        checksums = environment.get("checksums") or []
        if not isinstance(checksums, list) or not all(
                isinstance(c, str) and c and not os.path.isabs(c) and ".." not in c.split("/") for c in checksums):
            raise FactsError("venv.checksums must be a list of paths relative to the environment")
        if not isinstance(path, str) or not os.path.isabs(path) or not isinstance(owner, (str, type(None))):
            raise FactsError("venv needs an absolute 'path' (and, optionally, an 'owner' account)")
        if not owner:
            owner = directory_owner(path)
        if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
            raise FactsError("venv.requirements must be a list of strings")
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
            "interpreter": {"type": "path", "default": ""},
            "preflight": {"type": "dict", "default": {}},
            "fingerprint": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        facts = gather(module.params)
    except (FactsError, OSError, subprocess.SubprocessError) as exc:
        module.fail_json(msg=f"provision_facts: {exc}")
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
