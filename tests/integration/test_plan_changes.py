"""Machines with a history (issue 28): on one stock Debian 13 host over SSH, the DeskMini plan (CUDA 12.6 from PyPI),
then the same profile with `frameworks: []` (CUDA 12.4 from Debian), then the first again, then `provision destroy`.

Each change converges in one apply whose check passes; the next apply changes nothing; a file planted in the
account's home stays. What the ledger says provision put there for the old plan goes (the CUDA wheels, then Debian's
CUDA packages). After destroy, `dpkg -l` and /etc are the stock host's, plus only what the test did by hand.

Frameworks are skipped (--skip-frameworks) as in test_apply.py: torch's 2.5 GB of wheels would dominate the run,
and the PyPI CUDA wheels the DeskMini plan installs itself (the cuda role) show the same transition: with them left
in the environment, gpu_verify failed every re-apply (`CUDA runtime 12.6 ..., planned 12.4`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("changes")
PROFILE = ROOT / "profiles/deskmini.yaml"
KEEP = "/home/ml/notes/keep.txt"


def _uv() -> str:
    from provision.compat import load_db

    uv = load_db().installer
    assert uv is not None
    return f"{uv.prefix}/bin/uv"


UV = _uv()
# Files under /etc that the tools rewrite whatever the content: the linker's cache (ldconfig after every package
# change) and the account tools' backups (useradd and userdel copy passwd to passwd-).
REWRITTEN = re.compile(r"^/etc/(ld\.so\.cache|(passwd|group|shadow|gshadow|subuid|subgid)-)$")

# The CUDA round trip and destroy are the default command's (3 min 44 s on 2 cores); the others are `long`.
pytestmark = [pytest.mark.docker, pytest.mark.slow]


PASSWORD = "correct horse 28"  # typed at --ask-jupyter-pass's prompt (stdin here: no terminal)


def provision(env: dict, *args: str, timeout: float = 2400, typed: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout,
                          **({"input": typed + "\n"} if typed is not None else {"stdin": subprocess.DEVNULL}))


def sh(command: str, user: str = "root") -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", command], capture_output=True, text=True,
                          timeout=600)


def changed(stdout: str) -> int:
    match = re.search(r"changed=(\d+)", stdout)
    assert match, stdout[-2000:]
    return int(match.group(1))


def snapshot() -> dict:
    """dpkg's installed packages with versions, and every path under /etc with its type and content's sha256."""
    dpkg = sh("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'").stdout.splitlines()
    etc = sh("find /etc -xdev \\( -type f -exec sha256sum {} + \\) -o \\( ! -type f -printf 'other  %p\\n' \\)")
    files = {}
    for line in etc.stdout.splitlines():
        digest, path = line.split(None, 1)
        if not REWRITTEN.match(path):
            files[path] = digest
    return {"dpkg": sorted(dpkg), "etc": files}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A stock host, started and snapshotted before any apply; the profile without frameworks beside it."""
    from provision import sandbox
    from provision.pipeline.plan import plan_for
    from provision.pipeline.run import start_sandbox

    tmp = tmp_path_factory.mktemp("changes")
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    no_frameworks = tmp / "deskmini-no-frameworks.yaml"
    no_frameworks.write_text(re.sub(r"  frameworks:\n    - name: pytorch\n", "  frameworks: []\n",
                                    PROFILE.read_text()))
    assert "frameworks: []" in no_frameworks.read_text()
    no_jupyter = tmp / "deskmini-no-jupyter.yaml"
    no_jupyter.write_text(PROFILE.read_text().replace("jupyter: {port: 8888,", "jupyter: {enabled: false, port: 8888,"))
    assert "enabled: false" in no_jupyter.read_text()
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    start_sandbox(plan_for(PROFILE, os_override="debian-13"), NAME)
    stock = snapshot()
    renamed = tmp / "deskmini-ada.yaml"
    renamed.write_text(PROFILE.read_text().replace("  user: ml\n", "  user: ada\n"))
    assert "user: ada" in renamed.read_text()
    password = tmp / "deskmini-password.yaml"
    password.write_text(PROFILE.read_text().replace("auth: token}", "auth: password}"))
    assert "auth: password" in password.read_text()
    yield {"env": env, "a": str(PROFILE), "b": str(no_frameworks), "c": str(no_jupyter), "d": str(renamed),
           "e": str(password), "stock": stock, "state": tmp / "state"}
    sandbox.remove(NAME)


def apply(host: dict, profile: str, *extra: str, password: str | None = None) -> subprocess.CompletedProcess:
    """password: typed at --ask-jupyter-pass's prompt."""
    args = ["apply", profile, "--os", "debian-13", "--sandbox", NAME, "--yes", *extra]
    if profile != host["b"]:
        args.append("--skip-frameworks")
    if password is not None:
        args.append("--ask-jupyter-pass")
    return provision(host["env"], *args, typed=password)


def wheels(user: str = "ml") -> dict[str, str]:
    out = sh("/opt/provision/venv/bin/python -I -c 'import importlib.metadata as m, json; "
             "print(json.dumps({d.metadata[\"Name\"].lower(): d.version for d in m.distributions()}))'", user=user)
    assert out.returncode == 0, out.stderr
    return {re.sub(r"[-_.]+", "-", name): version for name, version in json.loads(out.stdout).items()}


def installed(package: str) -> bool:
    return sh(f"dpkg-query -W -f '${{db:Status-Abbrev}}' {package}").stdout.startswith("ii")


def converges(host: dict, profile: str, keep: str = KEEP, password: str | None = None) -> list[str]:
    """One apply with its check passing, then a second that changes nothing; the planted file still there.
    The two applies' output."""
    proc = apply(host, profile, password=password)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "FAILED" not in proc.stdout
    again = apply(host, profile, "--skip-check", password=password)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert changed(again.stdout) == 0, again.stderr[-3000:]
    assert sh(f"cat {keep}").stdout == "mine\n"
    return [proc.stdout, proc.stderr, again.stdout, again.stderr]


def test_pypi_cuda_to_debian_and_back_then_destroy(host):
    # 1. The DeskMini plan: CUDA 12.6 from PyPI. Then a file of the account's own in its home.
    first = apply(host, host["a"])
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert sh(f"mkdir -p {KEEP.rsplit('/', 1)[0]} && echo mine > {KEEP}", user="ml").returncode == 0
    assert "nvidia-cuda-runtime-cu12" in wheels()
    assert not installed("libcudart12")
    ledger = json.loads(sh("cat /var/lib/provision/ledger.json").stdout)
    assert "nvidia-cuda-runtime-cu12" in ledger["wheels"] and ledger["pending"] is None
    assert "ml" in ledger["accounts"] and "provision-jupyter" in ledger["units"]
    assert "openssh-server" not in ledger["packages"]  # the stock host's, not provision's
    # uv, which installed the environment's wheels: root's, and the ledger's (destroy below removes it).
    assert sh(f"stat -c '%U %a' {UV}").stdout.split() == ["root", "755"]
    assert UV.rsplit("/bin/", 1)[0] in ledger["paths"]

    # 2. frameworks: [] plans CUDA 12.4 from Debian. --dry-run --diff lists what goes before anything changes.
    preview = provision(host["env"], "apply", host["b"], "--os", "debian-13", "--sandbox", NAME, "--dry-run", "--diff",
                        "--skip-check")
    assert re.search(rf"^{NAME}: remove\s+wheel\s+nvidia-cuda-runtime-cu12 ", preview.stdout, re.M), preview.stdout
    assert re.search(rf"^{NAME}: install\s+package\s+", preview.stdout, re.M), preview.stdout
    converges(host, host["b"])
    assert installed("libcudart12")
    left = wheels()
    assert not {name for name in left if name.startswith("nvidia-cuda-runtime")}, sorted(left)
    # plan --diff-against lists the way back, from the ledger the apply fetched.
    back = provision(host["env"], "plan", host["a"], "--os", "debian-13", "--diff-against", NAME)
    assert back.returncode == 1 and re.search(r"^remove\s+package\s+\S+", back.stdout, re.M), back.stdout

    # 3. Back to the first plan: Debian's CUDA packages are purged, the PyPI wheels come back.
    converges(host, host["a"])
    assert not installed("libcudart12")
    assert "nvidia-cuda-runtime-cu12" in wheels()

    # 4. destroy: --dry-run lists, changes nothing; then everything the ledger lists goes, the home stays.
    listed = provision(host["env"], "destroy", "--sandbox", NAME, "--dry-run")
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    assert re.search(rf"^{NAME}: remove\s+environment\s+/opt/provision/venv", listed.stdout, re.M), listed.stdout
    assert sh("test -d /opt/provision/venv").returncode == 0
    gone = provision(host["env"], "destroy", "--sandbox", NAME, "--yes")
    assert gone.returncode == 0, gone.stdout[-3000:] + gone.stderr[-3000:]
    assert sh(f"cat {KEEP}").stdout == "mine\n"  # the home stays without --purge-home
    assert sh("test -e /usr/local/lib/provision/uv").returncode != 0, sh("ls -laR /usr/local/lib/provision").stdout
    after = snapshot()
    assert after["dpkg"] == host["stock"]["dpkg"], sorted(set(after["dpkg"]) ^ set(host["stock"]["dpkg"]))
    differ = {p for p in set(after["etc"]) | set(host["stock"]["etc"])
              if after["etc"].get(p) != host["stock"]["etc"].get(p)}
    assert not differ, sorted(differ)


@pytest.mark.long  # 3 min 16 s on 2 cores
def test_jupyter_disabled_then_enabled_again(host):
    """The same host, from wherever the test before left it: the DeskMini plan, then with Jupyter disabled (the unit
    stopped and gone, its state directory and the JupyterLab wheels uninstalled), then enabled again."""
    keep = "/home/ml/keep-jupyter.txt"
    first = apply(host, host["a"], "--skip-check")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert sh(f"echo mine > {keep}", user="ml").returncode == 0
    assert sh("systemctl is-active provision-jupyter").stdout.strip() == "active"

    converges(host, host["c"], keep)
    assert sh("test -e /etc/systemd/system/provision-jupyter.service").returncode == 1
    assert sh("systemctl is-active provision-jupyter").stdout.strip() != "active"
    assert sh("test -e /var/lib/provision/jupyter").returncode == 1
    left = wheels()
    assert "jupyterlab" not in left and "jupyter-server" not in left and "numpy" in left, sorted(left)

    converges(host, host["a"], keep)
    assert sh("systemctl is-active provision-jupyter").stdout.strip() == "active"
    assert "jupyterlab" in wheels()


@pytest.mark.long
def test_the_account_renamed(host):
    """The plan's account renamed from ml to ada: the server runs as ada and no process of ml is left, the
    environment is made again for ada, ml's home (and ml) stay."""
    keep = "/home/ml/keep-rename.txt"
    first = apply(host, host["a"], "--skip-check")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert sh(f"echo mine > {keep}", user="ml").returncode == 0

    converges(host, host["d"], keep)
    assert sh("systemctl show -p User --value provision-jupyter").stdout.strip() == "ada"
    assert sh("systemctl is-active provision-jupyter").stdout.strip() == "active"
    assert sh("pgrep -u ml").stdout == ""
    assert sh("stat -c %U /opt/provision/venv/bin/pip").stdout.strip() == "ada"
    assert "jupyterlab" in wheels("ada")


@pytest.mark.long
def test_an_environment_whose_interpreter_link_broke_is_made_again(host):
    """What a dist-upgrade from Debian 12 to 13 does to an environment (its links to python3.11 dangle once 3.13
    replaces it), done by hand on this Debian 13 host: the next apply makes the environment again, its check
    passes, the one after changes nothing. (A real 12 -> 13 dist-upgrade is not run here.)"""
    keep = "/home/ml/keep-upgrade.txt"
    first = apply(host, host["a"], "--skip-check")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert sh(f"echo mine > {keep}", user="ml").returncode == 0
    links = sh("cd /opt/provision/venv/bin && for f in python python3 python3.13; do ln -sfn /usr/bin/python3.11 $f; "
               "done")
    assert links.returncode == 0, links.stderr
    assert sh("test -e /opt/provision/venv/bin/python").returncode == 1

    converges(host, host["a"], keep)
    assert sh("/opt/provision/venv/bin/python -c 'import jupyterlab'", user="ml").returncode == 0


# Asks the server on the host (loopback) what a browser would: /api/status with no credential, with the token given,
# and after a login on /login (its _xsrf cookie, then the form) with a wrong password and with the right one.
JUPYTER_CLIENT = r"""
import http.cookiejar, json, sys, urllib.error, urllib.parse, urllib.request
base = "http://127.0.0.1:8888"
given = json.load(sys.stdin)

def status(opener, path, data=None, headers=None):
    try:
        with opener.open(urllib.request.Request(base + path, data=data, headers=headers or {}), timeout=15) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code

plain = urllib.request.build_opener(urllib.request.ProxyHandler({}))
out = {"none": status(plain, "/api/status")}
if given.get("token"):
    out["token"] = status(plain, "/api/status", headers={"Authorization": "token " + given["token"]})
for key, password in (("wrong", given["password"] + "x"), ("login", given["password"])):
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(jar))
    status(browser, "/login")
    xsrf = next((c.value for c in jar if c.name == "_xsrf"), "")
    form = urllib.parse.urlencode({"_xsrf": xsrf, "password": password}).encode()
    out[key + " form"] = status(browser, "/login", data=form)
    out[key] = status(browser, "/api/status")
print(json.dumps(out))
"""


def jupyter_answers(password: str, token: str = "") -> dict:
    proc = subprocess.run(["docker", "exec", "-i", NAME, "python3", "-I", "-c", JUPYTER_CLIENT], capture_output=True,
                          text=True, timeout=120, input=json.dumps({"password": password, "token": token}))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.long
def test_jupyter_token_to_password_and_back(host):
    """Jupyter's token replaced by a password (typed at --ask-jupyter-pass's prompt): one apply converges, its check
    passes, the next changes nothing; the server refuses a request without the password and with the old token,
    and takes a login with the password; the token file is gone. Then back to a token: the password's hash goes."""
    keep = "/home/ml/keep-password.txt"
    state_dir = "/var/lib/provision/jupyter"
    first = apply(host, host["a"], "--skip-check")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert sh(f"echo mine > {keep}", user="ml").returncode == 0
    token = sh(f"cat {state_dir}/token", user="ml").stdout.strip()
    assert len(token) == 48, token

    # A password plan with no password given is refused before anything changes.
    refused = apply(host, host["e"])
    assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
    assert "no jupyter_password is set" in refused.stderr and "--ask-jupyter-pass" in refused.stderr, refused.stderr
    assert sh(f"test -e {state_dir}/token").returncode == 0

    said = converges(host, host["e"], keep, password=PASSWORD)
    assert sh(f"test -e {state_dir}/token").returncode == 1, "the token is still there"
    assert sh(f"test -s {state_dir}/password.hash").returncode == 0
    got = jupyter_answers(PASSWORD, token)
    assert got["none"] == 403 and got["token"] == 403 and got["wrong"] == 403 and got["login"] == 200, got
    # The password is never shown, nor kept on the controller or on the host (only its hash).
    assert not [text for text in said if PASSWORD in text]
    kept = subprocess.run(["grep", "-rlF", PASSWORD, str(host["state"])], capture_output=True, text=True)
    assert kept.stdout == "", kept.stdout
    assert sh(f"grep -rlF '{PASSWORD}' /var/lib/provision /etc /opt/provision /home /tmp").stdout == ""

    converges(host, host["a"], keep)
    assert sh(f"test -e {state_dir}/password.hash").returncode == 1, "the password's hash is still there"
    token = sh(f"cat {state_dir}/token", user="ml").stdout.strip()
    assert len(token) == 48, token
    back = jupyter_answers(PASSWORD, token)
    assert back["none"] == 403 and back["token"] == 200 and back["login"] == 403, back
