"""End to end on a sandbox: `provision apply` converges a Debian 13 container to the deskmini plan, `provision check`
is green against it, and a second apply changes nothing.

Frameworks are left out (--skip-frameworks): the plan's PyTorch index (download.pytorch.org) is not reachable from
the machines this is built on. Everything else is installed for real from Debian's archive and PyPI.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("deskmini")  # conftest.DESKMINI_HOST
PROFILE = str(ROOT / "profiles/deskmini.yaml")
COMMON = ["--os", "debian-13", "--sandbox", NAME, "--skip-frameworks"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def provision(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def first_apply(deskmini_apply):
    """The session's DeskMini host (tests/integration/conftest.py), first applied with --skip-check."""
    return deskmini_apply


def _changed(stdout: str) -> int:
    match = re.search(r"changed=(\d+)", stdout)
    assert match, stdout[-2000:]
    return int(match.group(1))


def test_apply_refuses_without_yes_off_a_terminal():
    proc = provision("apply", PROFILE, *COMMON)
    assert proc.returncode == 2 and "nothing was changed" in proc.stderr


def test_first_apply_converges(first_apply):
    assert first_apply.returncode == 0, first_apply.stdout[-3000:] + first_apply.stderr[-3000:]
    assert _changed(first_apply.stdout) > 0
    # The summary: one row for the host, the profile as given (relative to the working directory), the result with the
    # path the host took (a stock host has no record: every role), the verdict short.
    assert re.search(rf"^ ?{NAME}\s+profiles/deskmini\.yaml\s+ok \(full\)\s+\d+\s+verify \w+", first_apply.stdout, re.M), (
        first_apply.stdout[-3000:])
    assert f"{NAME}: full path: no converged apply is recorded on the host" in first_apply.stdout, (
        first_apply.stdout[-3000:])
    # One refresh of apt's lists on a stock host: nvidia_driver enables contrib/non-free before python3-apt's install,
    # whose `apt-get update` fetches them too, so its own refresh for the components is skipped.
    ran = {line.split(None, 2)[2] for line in first_apply.stderr.splitlines() if re.match(r"\S+\s+(ok|changed)\s", line)}
    assert "python3_apt | Install python3-apt where dpkg does not have it" in ran, sorted(ran)
    assert "source | Refresh apt's lists for the components just enabled" not in ran, sorted(ran)


def test_check_is_green(first_apply):
    proc = provision("check", PROFILE, *COMMON)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "FAILED" not in proc.stdout and "token-200] PASSED" in proc.stdout and "no-token-403] PASSED" in proc.stdout
    token = subprocess.run(["docker", "exec", NAME, "cat", "/var/lib/provision/jupyter/token"], capture_output=True,
                           text=True).stdout.strip()
    assert token and token not in proc.stdout + proc.stderr


def test_check_without_profile_uses_what_apply_recorded(first_apply):
    """No PROFILE, --os or --skip-frameworks: the host is checked against the plan and options its apply recorded
    (frameworks skipped, so no framework check runs and none fails on torch)."""
    proc = provision("check", "--sandbox", NAME)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "token-200] PASSED" in proc.stdout
    framework = [line for line in proc.stdout.splitlines() if line.startswith("test_framework_at_planned_version")]
    assert all(" SKIPPED" in line for line in framework), framework  # recorded as skipped: not run, not failed


def test_second_apply_changes_nothing(first_apply):
    proc = provision("apply", PROFILE, *COMMON, "--yes", "--skip-check", "--timings")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _changed(proc.stdout) == 0, proc.stderr[-3000:]
    # On a converged host the probes answer and apt and pip do not run: none of their steps is reported as run.
    ran = {line.split(None, 2)[2] for line in proc.stderr.splitlines() if re.match(r"\S+\s+(ok|changed)\s", line)}
    assert not {t for t in ran if t.startswith(("packages | Install", "pypi | Install", "venv | Install",
                                                "install | Install", "update | Install"))}, sorted(ran)
    # --timings lists the slowest steps with their seconds.
    slowest = re.search(r"slowest steps \(([\d.]+) s of steps in all\):\n((?:\s+[\d.]+ s  .+\n)+)", proc.stdout)
    assert slowest and float(slowest.group(1)) > 0, proc.stdout[-2000:]
    assert len(slowest.group(2).splitlines()) >= 5


def test_check_mode_on_a_converged_host_reports_no_change_and_records_nothing(first_apply, tmp_path):
    import os

    state = tmp_path / "state"
    proc = subprocess.run([sys.executable, "-m", "provision", "apply", PROFILE, *COMMON, "--dry-run", "--diff"],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT, stdin=subprocess.DEVNULL,
                          env=os.environ | {"PROVISION_STATE": str(state)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert _changed(proc.stdout) == 0
    # The run lock lives in the state directory too; records and run results must not.
    written = list(state.rglob("*.json")) if state.exists() else []
    assert not written, f"a dry run must not write records: {written}"


def test_the_host_carries_the_record_of_what_was_applied(first_apply):
    import json

    proc = subprocess.run(["docker", "exec", NAME, "cat", "/var/lib/provision/applied.json"], capture_output=True,
                          text=True)
    record = json.loads(proc.stdout)
    assert record["profile"] == "deskmini" and record["os"] == "debian-13"
    assert record["packages"]["nvidia-smi"].startswith("550.")
    assert record["wheels"]["nvidia-cudnn-cu12"] == "9.10.2.21"
    assert record["wheels_error"] is None


# Asked on the host by the account (who alone may read the token): the token goes from the file into the request
# header, never onto a command line.
_STATUS = """
import sys, urllib.error, urllib.request
req = urllib.request.Request("http://127.0.0.1:8888/api/status")
if len(sys.argv) > 1:
    req.add_header("Authorization", "token " + open(sys.argv[1]).read().strip())
try:
    print(urllib.request.urlopen(req, timeout=10).status)
except urllib.error.HTTPError as err:
    print(err.code)
"""


def test_drift_the_facts_see_is_repaired_by_the_next_apply(first_apply):
    """Drift a converged host's single read must not miss: the Jupyter token emptied while the server runs (made
    again, and the server restarted to take it: a server without a token would take anyone), a token changed by hand
    (the server still holds the one it read when it started: restarted), and a file in the verifier's directory that
    provision does not ship (a module a newer provision split)."""
    token = "/var/lib/provision/jupyter/token"

    def read_token() -> str:
        return subprocess.run(["docker", "exec", NAME, "cat", token], capture_output=True, text=True).stdout

    def status(*args: str) -> str:
        return subprocess.run(["docker", "exec", "-u", "ml", NAME, "python3", "-I", "-c", _STATUS, *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    def apply() -> subprocess.CompletedProcess:
        proc = provision("apply", PROFILE, *COMMON, "--yes", "--skip-check", "--tags", "jupyter,gpu_verify")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    old = read_token()
    subprocess.run(["docker", "exec", NAME, "sh", "-c", f": > {token}; echo stale > /opt/provision/verify/checks.py"],
                   check=True)
    proc = apply()
    assert len(read_token()) == 48 and read_token() != old
    assert re.search(r"changed\s+Restart Jupyter", proc.stderr), proc.stderr[-3000:]
    assert "files | Remove what the verifier no longer ships" in proc.stderr
    assert subprocess.run(["docker", "exec", NAME, "test", "-e", "/opt/provision/verify/checks.py"]).returncode == 1
    assert status(token) == "200" and status() == "403"

    by_hand = "0123456789abcdef" * 3
    subprocess.run(["docker", "exec", "-u", "ml", NAME, "sh", "-c", f"printf %s {by_hand} > {token}"], check=True)
    assert status(token) == "403"  # the server still holds the token it read when it started
    proc = apply()
    assert "restart | Restart the server" in proc.stderr, proc.stderr[-3000:]
    assert read_token() == by_hand and status(token) == "200" and status() == "403"
