"""A virtual environment read as the account that owns it: its interpreter runs plugins/module_utils/distributions.py
in isolated mode, dropped to that account (setpriv) with a minimal environment, under a deadline and with its output
capped; what it prints is untrusted and checked here before use. Used by provision_facts (venv) and the fingerprint
(its wheels part)."""

from __future__ import annotations

import json
import os
import pwd
import re
import selectors
import shutil
import stat
import subprocess
import time

from ansible_collections.provision.gpu.plugins.module_utils import distributions
from ansible_collections.provision.gpu.plugins.module_utils.errors import ModuleError

REQUIREMENT = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*(\S+)")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,99}")
PYTHON = re.compile(r"[0-9]{1,2}\.[0-9]{1,3}")
MAX_OUTPUT = 4 * 1024 * 1024
TIMEOUT_S = 120
# What the dropped interpreter gets as its environment: nothing of root's.
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def name_of(getter, number: int) -> str | None:
    """The name getpwuid / getgrgid gives `number`, None when it has none."""
    try:
        return getter(number)[0]
    except KeyError:
        return None


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
            raise ModuleError("the environment's interpreter started without its output pipes")
        sel.register(proc.stdout, selectors.EVENT_READ, 1)
        sel.register(proc.stderr, selectors.EVENT_READ, 2)
        try:
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ModuleError(f"the environment's interpreter did not answer within {TIMEOUT_S} s")
                for key, _events in sel.select(timeout=left):
                    data = os.read(key.fd, 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    sizes[key.data] += len(data)
                    if sizes[key.data] > MAX_OUTPUT:
                        raise ModuleError("the environment's interpreter printed more than expected")
                    chunks[key.data].append(data)
            status = proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except (ModuleError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            raise
        finally:
            proc.stdout.close()
            proc.stderr.close()
    out, err = (b"".join(chunks[i]).decode("utf-8", "replace") for i in (1, 2))
    return status, out, err


def program() -> str:
    """The program the environment's interpreter runs: distributions.py's source."""
    try:
        return distributions.program()
    except RuntimeError as exc:
        raise ModuleError(str(exc)) from None


def check_requirement(requirement: str, installed: dict[str, str]) -> dict:
    """One exact pin against {normalized name: version}: {requirement, installed, error}."""
    spec = requirement.split(";", 1)[0].strip()
    match = REQUIREMENT.fullmatch(spec)
    if not match:
        return {"requirement": requirement, "installed": None, "error": "not an exact 'name==version' requirement"}
    name, wanted = match.group(1), match.group(3)
    version = installed.get(distributions.normalize(name))
    if version is None:
        return {"requirement": requirement, "installed": None, "error": "not installed"}
    same = version == wanted or ("+" not in wanted and version.split("+", 1)[0] == wanted)
    return {"requirement": requirement, "installed": version, "error": None if same else "other version"}


def parse_distributions(stdout: str, checksums: list[str]) -> dict:
    """The interpreter's answer, validated: {python ("3.13"), distributions ({normalized name: version}),
    checksums ({asked path: sha256 or None}), system_site_packages (bool), unfinished ([dist-info path])}. Raises
    ModuleError."""
    if len(stdout) > MAX_OUTPUT:
        raise ModuleError("the environment's interpreter printed more than expected")
    try:
        data = json.loads(stdout)
    except ValueError:
        raise ModuleError("the environment's interpreter did not print one JSON object") from None
    if not isinstance(data, dict) or not isinstance(data.get("distributions"), dict):
        raise ModuleError("the environment's interpreter printed JSON of another shape")
    python = data.get("python")
    if not isinstance(python, str) or not PYTHON.fullmatch(python):
        raise ModuleError("the environment's interpreter reported no valid Python version")
    found: dict[str, str] = {}
    for name, version in data["distributions"].items():
        # A distribution with an odd name or version (a stray egg-info, a hand-made dist-info) is left out, not fatal:
        # only the planned requirements are compared, and one that is left out counts as missing, so pip repairs it.
        if isinstance(name, str) and isinstance(version, str) and NAME.fullmatch(name) and VERSION.fullmatch(version):
            found.setdefault(distributions.normalize(name), version)
    sums = data.get("checksums")
    if not isinstance(sums, dict) or sorted(sums) != sorted(checksums) or not all(
            v is None or (isinstance(v, str) and re.fullmatch("[0-9a-f]{64}", v)) for v in sums.values()):
        raise ModuleError("the environment's interpreter reported invalid checksums")
    system_site = data.get("system_site_packages")
    if not isinstance(system_site, bool):
        raise ModuleError("the environment's interpreter did not say whether it sees the system's packages")
    unfinished = data.get("unfinished", [])
    if not isinstance(unfinished, list) or not all(isinstance(p, str) for p in unfinished):
        raise ModuleError("the environment's interpreter reported invalid unfinished installs")
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
            found.append({"name": distributions.normalize(base.split("-")[0]), "path": path})
    return found


def as_account(owner: str, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """argv run as `owner` (dropped with setpriv when this runs as root), and the minimal environment it gets."""
    try:
        account = pwd.getpwnam(owner)
    except KeyError:
        raise ModuleError(f"the environment's owner {owner!r} is not an account on this host") from None
    if account.pw_uid == 0:
        raise ModuleError("the environment's owner is root: provision never runs an environment's interpreter as root")
    env = {"PATH": SAFE_PATH, "HOME": account.pw_dir, "USER": owner, "LOGNAME": owner, "LANG": "C.UTF-8"}
    if os.geteuid() == account.pw_uid:
        return argv, env
    if os.geteuid() != 0:
        raise ModuleError(f"reading the environment as {owner!r} needs root (become: true) or that account")
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
        raise ModuleError(f"venv: {path} is not a directory")
    name = name_of(pwd.getpwuid, st.st_uid)
    if name is None:
        raise ModuleError(f"venv: {path} is owned by uid {st.st_uid}, which is not an account on this host")
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
        argv, env = as_account(owner, [python, "-I", "-c", program(), *checksums])
        try:
            status, stdout, stderr = run_untrusted(argv, env)
            if status != 0:
                # An environment whose interpreter cannot run (a half-made one, a removed system Python) is one to
                # make again: reported, not fatal.
                raise ModuleError(f"{python} exited {status}: {stderr.strip()[-300:]}")
            result.update(parse_distributions(stdout, checksums))
            result["unfinished"] = unfinished_installs(result["unfinished"], path, result["python"])
        except ModuleError as exc:
            # Whatever the account's interpreter says or does, the answer is "not the planned environment": pip
            # then runs as the account and the role's assert after it says what is still wrong.
            result["error"] = str(exc)
    checks = [check_requirement(r, result["distributions"]) for r in requirements]
    result["ok"] = [c for c in checks if not c["error"]]
    result["wrong"] = [c for c in checks if c["error"]]
    result["satisfied"] = result["error"] is None and not result["wrong"]
    return result
