"""End to end for the AWS P2 (Tesla K80) profile on a stock Debian 12 host over SSH: `provision apply` installs the
Kepler stack (the R470 Tesla driver's user space from Debian's non-free, which the roles enable, the CUDA 11.7
runtime, cuBLAS and cuDNN 8.5 wheels), `provision check` is green, `provision check --sandbox NAME` alone re-checks
from what apply recorded, the host records what it got, and a second apply changes nothing.

The host is a `provision sandbox` container: Debian 12's default one-line sources.list with `main` only, no
python3-apt, no curl, reached over SSH as an `admin` account with sudo (tests/integration/test_ssh_hosts.py).

Frameworks are left out (--skip-frameworks; torch 2.0.1 for the K80 runs with PROVISION_HEAVY=1 in the
python_env heavy scenario): everything else is installed for real from Debian's archive and PyPI.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("p2")
PROFILE = str(ROOT / "profiles/aws-p2.yaml")
COMMON = ["--os", "debian-12", "--sandbox", NAME, "--skip-frameworks", "--yes"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def provision(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=1800,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def first_apply():
    provision("sandbox", "down", NAME)
    proc = provision("apply", PROFILE, *COMMON)  # includes `provision check`
    yield proc
    provision("sandbox", "down", NAME)


def test_the_k80_stack_is_installed_and_checked(first_apply):
    assert first_apply.returncode == 0, first_apply.stdout[-3000:] + first_apply.stderr[-3000:]
    assert "FAILED" not in first_apply.stdout and re.search(r"\d+ passed", first_apply.stdout)
    record = json.loads(subprocess.run(["docker", "exec", NAME, "cat", "/var/lib/provision/applied.json"],
                                       capture_output=True, text=True).stdout)
    # R470 is the last driver branch for Kepler: Debian 12 carries it as nvidia-tesla-470-driver.
    assert any(v and v.startswith("470.") for v in record["packages"].values()), record["packages"]
    assert record["wheels"]["nvidia-cuda-runtime-cu11"].startswith("11.7.")
    assert record["wheels"]["nvidia-cudnn-cu11"].startswith("8.5.0")


def on_host(*cmd: str) -> str:
    return subprocess.run(["docker", "exec", NAME, *cmd], capture_output=True, text=True, check=True).stdout


def test_the_roles_enabled_debians_components_and_recorded_them(first_apply):
    assert first_apply.returncode == 0
    sources = on_host("cat", "/etc/apt/sources.list")
    lines = [line.split() for line in sources.splitlines() if line.startswith("deb ")]
    assert lines and all({"main", "contrib", "non-free"} <= set(words[3:]) for words in lines), sources
    assert all(len(words[3:]) == len(set(words[3:])) for words in lines), sources  # nothing twice
    record = json.loads(on_host("cat", "/var/lib/provision/apt-components.json"))
    assert "non-free" in json.dumps(record), record  # what was added, for a revert


def test_check_alone_rechecks_from_what_apply_recorded(first_apply):
    assert first_apply.returncode == 0
    proc = provision("check", "--sandbox", NAME)  # no PROFILE, no --os, no --skip-frameworks
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\d+ passed", proc.stdout) and "FAILED" not in proc.stdout


def test_second_apply_changes_nothing(first_apply):
    assert first_apply.returncode == 0
    proc = provision("apply", PROFILE, *COMMON, "--skip-check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert int(re.search(r"changed=(\d+)", proc.stdout).group(1)) == 0, proc.stderr[-3000:]
