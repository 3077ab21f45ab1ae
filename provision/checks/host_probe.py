"""Read in one run on the checked host everything test_host.py asserts: `python3 -I -c <this file> ARGS_JSON`, as root.

The check suite sends this file's text as the `-c` argument and its questions as one JSON argument, and gets one
JSON object back: one command over the connection instead of one per check (each costs a round trip and a sudo,
0.2-0.5 s; 19 checks took 8-9 s, now about 1 s). Standard library only, run by the host's own /usr/bin/python3 in
isolated mode. What runs code the plan's account controls (the environment's interpreter, a login shell, the HTTP
probe that reads the token) runs as that account with `sudo -n -u`, never as root (docs/security.md).

ARGS_JSON keys: user, venv, packages (dpkg names), smi (read the driver version with nvidia-smi), service (the
Jupyter unit, or ""), http (a list of [url, token file or ""]), http_status (the text of http_status.py).
"""

import grp
import json
import os
import pwd
import shutil
import subprocess
import sys

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# importlib.metadata's view of the environment, as pip's: every distribution's name and version.
DISTRIBUTIONS = (
    "import importlib.metadata as m, json, re\n"
    "print(json.dumps({re.sub(r'[-_.]+', '-', (d.metadata['Name'] or '')).lower(): d.version\n"
    "                  for d in m.distributions() if d.metadata['Name']}))\n"
)


def run(argv: list, timeout: int = 60) -> dict:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env={"PATH": PATH, "LANG": "C.UTF-8"}, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:]}


def as_user(user: str, argv: list) -> list:
    return argv if user == "root" else ["sudo", "-n", "-u", user, *argv]


def managed_state(prefix: str) -> dict:
    """A managed interpreter's directory: whether it is there, and the first entries under it that are not root's or
    that another account can write (none, where the notebook account cannot change what the environment runs)."""
    if not os.path.isdir(prefix):
        return {"exists": False, "foreign": []}
    foreign = []
    for where, dirs, files in os.walk(prefix):
        for name in [".", *dirs, *files]:
            path = os.path.normpath(os.path.join(where, name))
            st = os.lstat(path)
            if st.st_uid != 0 or (not os.path.islink(path) and st.st_mode & 0o022):
                foreign.append(path)
        if len(foreign) >= 5:
            break
    return {"exists": True, "foreign": foreign[:5]}


def main(args: dict) -> int:
    user, venv = args["user"], args["venv"]
    out: dict = {}
    packages = args.get("packages") or []
    out["packages"] = dict.fromkeys(packages)
    if packages:
        found = run(["dpkg-query", "-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Version}\n", "--", *packages])
        for line in found["stdout"].splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[0].split(":")[0] in out["packages"] and parts[1].strip() == "ii":
                out["packages"][parts[0].split(":")[0]] = parts[2]
    out["nvidia_smi"] = shutil.which("nvidia-smi", path=PATH)
    if args.get("smi"):
        out["smi"] = run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    home = run(["su", "-", user, "-c", 'printf %s "$CUDA_HOME"'])
    home["is_directory"] = bool(home["stdout"].strip()) and os.path.isdir(home["stdout"].strip())
    out["cuda_home"] = home
    python = os.path.join(venv, "bin", "python")
    out["venv"] = {"python_exists": os.path.exists(python), "owner": None}
    try:
        out["venv"]["owner"] = pwd.getpwuid(os.lstat(venv).st_uid).pw_name
    except (OSError, KeyError):
        pass
    # Which interpreter the environment runs (its links, read without running anything) and the planned one's.
    out["venv"]["interpreter"] = os.path.realpath(python)
    out["interpreter"] = os.path.realpath(args.get("interpreter") or "/usr/bin/python3")
    prefix = args.get("managed_prefix") or ""
    if prefix:
        out["managed"] = managed_state(prefix)
    listed = run(as_user(user, [python, "-I", "-c", DISTRIBUTIONS])) if out["venv"]["python_exists"] else None
    try:
        out["distributions"] = json.loads(listed["stdout"]) if listed and listed["rc"] == 0 else None
    except ValueError:
        out["distributions"] = None
    out["distributions_error"] = None if out["distributions"] is not None else (listed or {}).get("stderr", "no environment")
    try:
        account = pwd.getpwnam(user)
        out["uid"] = account.pw_uid
        # Every group the account is in (its primary and the supplementary ones), by name: a group whose socket or
        # files are root's by another name (docker) is a path to root.
        out["groups"] = sorted({grp.getgrgid(gid).gr_name for gid in os.getgrouplist(user, account.pw_gid)})
    except KeyError:
        out["uid"] = None
        out["groups"] = []
    service = args.get("service") or ""
    if service:
        shown = run(["systemctl", "show", "-p", "ActiveState,SubState,UnitFileState,MainPID", "--", service])
        fields = dict(line.split("=", 1) for line in shown["stdout"].splitlines() if "=" in line)
        unit = {"active": fields.get("ActiveState", ""), "sub": fields.get("SubState", ""),
                "enabled": fields.get("UnitFileState", ""), "pid": fields.get("MainPID", ""), "uid": None}
        if unit["pid"] not in ("", "0"):
            try:
                with open(f"/proc/{unit['pid']}/status", encoding="utf-8") as handle:
                    unit["uid"] = next((line.split()[1] for line in handle if line.startswith("Uid:")), None)
            except OSError:
                pass
        out["service"] = unit
    out["http"] = []
    for url, token_file in args.get("http") or []:
        argv = ["/usr/bin/python3", "-I", "-c", args["http_status"], url, *([token_file] if token_file else [])]
        out["http"].append(run(as_user(user, argv), timeout=90))  # http_status.py waits up to 60 s for a listener
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
