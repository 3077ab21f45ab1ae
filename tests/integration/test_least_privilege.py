"""No path from the notebook account to root on a host `provision apply` made (issue 14, host side).

The session's Debian 13 sandbox (conftest.deskmini_apply, shared with test_apply.py), reached over SSH as the admin
account with sudo, converged to the DeskMini plan without frameworks. Then:

- a `.pth` file the account drops into the environment's site-packages runs on the next apply, but only as the
  account, never as root (docs/security.md: every interpreter of the environment runs as its owner);
- root's login environment has no library path into the environment, the account's has;
- `systemd-analyze security` rates the Jupyter unit below 6.0, and the server still answers an authenticated request;
- an account someone put in the `docker` group (root by another name) fails `provision check`, in one line that says
  how to take it out.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("deskmini")  # conftest.DESKMINI_HOST, shared with test_apply.py
PROFILE = str(ROOT / "profiles/deskmini.yaml")
# Every role that runs the environment's interpreter or reads the account's files, and host_record (which lists the
# environment's wheels); the driver's and the verifier's roles add nothing to what is tested here but minutes.
TAGS = "python_env,cuda,cudnn,jupyter,host_record"
APPLY = ["apply", PROFILE, "--os", "debian-13", "--sandbox", NAME, "--skip-frameworks", "--tags", TAGS, "--yes",
         "--skip-check"]
VENV = "/opt/provision/venv"
USER = "ml"
SERVICE = "provision-jupyter.service"
TOKEN = "/var/lib/provision/jupyter/token"

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# Asked on the host by the account (who alone may read the token): the token goes from the file into the request
# header, never onto a command line.
_STATUS = """
import sys, urllib.error, urllib.request
req = urllib.request.Request(sys.argv[1])
if len(sys.argv) > 2:
    req.add_header("Authorization", "token " + open(sys.argv[2]).read().strip())
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as err:
    print(err.code)
"""


def provision(*args: str, timeout: float = 2400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-3000:] + proc.stderr[-3000:]


def host(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", NAME, *cmd], capture_output=True, text=True, check=check)


@pytest.fixture(scope="module")
def applied(deskmini_apply):
    """The session's DeskMini host (tests/integration/conftest.py): every role applied, frameworks skipped."""
    assert deskmini_apply.returncode == 0, output(deskmini_apply)
    return deskmini_apply


def test_a_pth_file_the_account_plants_never_runs_as_root(applied):
    site = host("sh", "-c", f"ls -d {VENV}/lib/python3*/site-packages").stdout.strip()
    assert site, "no site-packages in the environment"
    uid = host("id", "-u", USER).stdout.strip()
    host("sh", "-c", "rm -f /tmp/pwned-*")
    # The account can write its environment; the payload runs in every interpreter of it that starts.
    payload = "import os; open('/tmp/pwned-' + str(os.getuid()), 'w')\n"
    subprocess.run(["docker", "exec", "-i", "-u", USER, NAME, "sh", "-c", f"cat > {site}/zz_attack.pth"],
                   input=payload, text=True, check=True)
    try:
        again = provision(*APPLY)
        assert again.returncode == 0, output(again)
        assert re.search(r"changed=0\b", again.stdout), output(again)  # and still converged: nothing to redo
        planted = host("sh", "-c", "ls /tmp/pwned-* 2>/dev/null || true").stdout.split()
        assert "/tmp/pwned-0" not in planted, f"the account's .pth ran as root during an apply: {planted}"
        # The payload is live: the apply did start the environment's interpreter, as the account.
        assert f"/tmp/pwned-{uid}" in planted, f"the apply never ran the environment's interpreter: {planted}"
    finally:
        host("rm", "-f", f"{site}/zz_attack.pth", "/tmp/pwned-0", f"/tmp/pwned-{uid}")


@pytest.mark.parametrize("login", [["su", "-l", "root", "-c", "env"], ["sudo", "-i", "env"]], ids=["su-l", "sudo-i"])
def test_roots_login_has_no_library_path_into_the_environment(applied, login):
    env = host(*login).stdout
    assert VENV not in env, [line for line in env.splitlines() if VENV in line]


def test_the_accounts_login_has_the_environments_libraries(applied):
    env = host("su", "-l", USER, "-c", "env").stdout
    paths = next((line.split("=", 1)[1] for line in env.splitlines() if line.startswith("LD_LIBRARY_PATH=")), "")
    assert f"{VENV}/lib/python3" in paths and "/nvidia/" in paths, env


def test_the_jupyter_unit_is_sandboxed(applied):
    proc = host("systemd-analyze", "security", "--no-pager", SERVICE, check=False)
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout)
    assert match, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert float(match.group(1)) < 6.0, proc.stdout[-4000:]
    # Notebooks keep the GPUs (a device ACL, not PrivateDevices), the account's home and the environment.
    props = host("systemctl", "show", SERVICE, "-p", "PrivateDevices", "-p", "DeviceAllow",
                 "-p", "ReadWritePaths").stdout
    assert "PrivateDevices=no" in props and "char-nvidia*" in props, props
    assert f"/home/{USER}" in props and VENV in props, props


@pytest.mark.parametrize(("with_token", "expected"), [(True, "200"), (False, "403")], ids=["token", "no-token"])
def test_the_sandboxed_server_still_answers(applied, with_token, expected):
    assert host("systemctl", "is-active", SERVICE).stdout.strip() == "active"
    args = ["http://127.0.0.1:8888/api/status", *([TOKEN] if with_token else [])]
    proc = host("runuser", "-u", USER, "--", "/usr/bin/python3", "-I", "-c", _STATUS, *args, check=False)
    assert proc.stdout.strip() == expected, proc.stdout + proc.stderr


# The account controls what its environment's interpreter prints, so it controls the probes' reports. A report whose
# path would close the `case` in /etc/profile.d/provision-*.sh and run a command in every login shell, root's too.
_HOSTILE = "/opt/x:*) ;; esac; touch /tmp/pwned-0; case y in (z"
_FAKE_PYTHON = """#!/bin/bash
# The account's stand-in for the environment's interpreter: the probes (python -I - --venv ...) get a crafted report,
# everything else the real interpreter.
if [ "$1 $2 $3" = "-I - --venv" ]; then
  cat >/dev/null
  case " $* " in
    *" --home "*) echo '{"runtime_version": "12.6", "runtime_library": "/opt/x/lib/libcudart.so.12",
      "nvrtc_version": null, "library_dirs": ["HOSTILE"], "home": "/opt/x", "nvcc_version": null, "errors": []}' ;;
    *) echo '{"version": "9.10.2", "raw": 91002, "library": "/opt/x/libcudnn.so.9", "library_dir": "HOSTILE",
      "errors": []}' ;;
  esac
  exit 0
fi
exec -a "$0" /usr/bin/python3 "$@"
""".replace("HOSTILE", _HOSTILE)


@pytest.mark.parametrize("role", ["cuda", "cudnn"])
def test_a_probe_report_the_account_crafts_is_refused_and_reaches_no_root_file(applied, role):
    script = f"/etc/profile.d/provision-{role}.sh"
    before = host("sha256sum", script).stdout
    python = f"{VENV}/bin/python"
    target = host("readlink", python).stdout.strip()
    assert target, f"{python} is not the symlink python -m venv makes"
    subprocess.run(["docker", "exec", "-i", "-u", USER, NAME, "sh", "-c", f"rm {python} && cat > {python} && "
                    f"chmod 755 {python}"], input=_FAKE_PYTHON, text=True, check=True)
    try:
        attacked = provision("apply", PROFILE, "--os", "debian-13", "--sandbox", NAME, "--skip-frameworks", "--tags",
                             role, "--yes", "--skip-check")
        assert attacked.returncode == 1, output(attacked)
        assert "is not a plain" in attacked.stdout + attacked.stderr, output(attacked)
        assert host("sha256sum", script).stdout == before, "the crafted path was written into " + script
        for login in (["su", "-l", "root", "-c", "true"], ["sudo", "-i", "true"], ["su", "-l", USER, "-c", "true"]):
            host(*login, check=False)
        assert host("test", "-e", "/tmp/pwned-0", check=False).returncode != 0, "a login shell ran the payload"
    finally:
        subprocess.run(["docker", "exec", "-u", USER, NAME, "ln", "-sfn", target, python], check=True)
        host("rm", "-f", "/tmp/pwned-0")
    assert host(python, "-c", "import sys; print(sys.prefix)").stdout.strip() == VENV


def test_an_account_in_the_docker_group_fails_the_check_with_the_way_out(applied):
    """provision never puts the notebook account in `docker` (issue 51: the socket is root by another name); where an
    admin did, `provision check` says so and how to undo it, and passes again once it is undone."""
    made = host("getent", "group", "docker", check=False).returncode != 0
    if made:
        host("groupadd", "--system", "docker")
    host("usermod", "-aG", "docker", USER)
    try:
        proc = provision("check", "--sandbox", NAME, timeout=600)
        assert proc.returncode != 0, output(proc)
        assert re.search(r"test_the_account_is_in_no_group_that_is_root_by_another_name\S* FAILED", proc.stdout), \
            output(proc)
        assert f"{USER} is in the group(s) docker" in proc.stdout and f"gpasswd -d {USER} docker" in proc.stdout
    finally:
        host("gpasswd", "-d", USER, "docker")
        if made:
            host("groupdel", "docker")
    again = provision("check", "--sandbox", NAME, timeout=600)
    assert again.returncode == 0, output(again)
    assert re.search(r"test_the_account_is_in_no_group_that_is_root_by_another_name\S* PASSED", again.stdout)
