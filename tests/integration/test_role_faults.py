"""Fault behaviour of the roles' apt step against a real Debian 12 container (python_env's packages.yml; the
nvidia_driver, cuda and cudnn roles carry the same block): a package missing from the source, an apt lock held
by another process, and a dpkg run interrupted between unpack and configure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision import sandbox
from provision.resources import collections_dir
from tests.support.names import sandbox_name

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAME = sandbox_name("role-faults")

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI on this machine"),
]

PLAY = """---
- name: Apply python_env
  hosts: all
  tasks:
    - name: Apply the python_env role
      ansible.builtin.include_role:
        name: python_env
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory):
    box = sandbox.start(NAME, "12")
    workdir = tmp_path_factory.mktemp("faults")
    (workdir / "play.yml").write_text(PLAY)
    (workdir / "inventory").write_text(
        f"{NAME} ansible_connection=community.docker.docker ansible_python_interpreter=/usr/bin/python3\n"
    )
    yield box, workdir
    sandbox.remove(NAME)


def docker_exec(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", NAME, *cmd], capture_output=True, text=True, check=check)


def apply(workdir: Path, **extra_vars) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        # provision's own modules (provision.gpu.provision_facts...), as provision.runners.ansible passes them.
        ANSIBLE_COLLECTIONS_PATH=str(collections_dir()),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_HOST_KEY_CHECKING="false",
        PATH=f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
    )
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            "-i",
            str(workdir / "inventory"),
            str(workdir / "play.yml"),
            "-e",
            json.dumps({"python_env_user": "ml", **extra_vars}),
        ],
        capture_output=True,
        text=True,
        env=env,
    )


def test_missing_package_names_package_and_source(host) -> None:
    _, workdir = host
    proc = apply(workdir, python_env_packages=["provision-no-such-package"])
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "a package is not available from the configured apt sources" in out, out[-3000:]
    assert "provision-no-such-package" in out and NAME in out


def test_apt_lock_held_fails_naming_host_task_and_cause(host) -> None:
    _, workdir = host
    # fcntl lock, as dpkg and apt take it, held for two minutes by a process the test owns.
    holder = subprocess.Popen(
        [
            "docker",
            "exec",
            NAME,
            "python3",
            "-c",
            "import fcntl, time; f = open('/var/lib/dpkg/lock-frontend', 'w'); "
            "fcntl.lockf(f, fcntl.LOCK_EX); import os; print(os.getpid(), flush=True); time.sleep(120)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    pid = holder.stdout.readline().strip()
    try:
        assert pid.isdigit(), "the lock holder did not start"
        started = time.monotonic()
        proc = apply(workdir, python_env_apt_lock_timeout=5)
        elapsed = time.monotonic() - started
    finally:
        if pid.isdigit():
            docker_exec("kill", pid, check=False)
        holder.wait(timeout=30)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"failed on {NAME}" in out, out[-3000:]
    assert "packages | Install the venv prerequisites" in out
    assert "held the apt/dpkg lock for more than 5 s" in out
    assert elapsed < 110, "the role waited far longer than python_env_apt_lock_timeout"


def test_interrupted_dpkg_is_finished_then_the_run_continues(host) -> None:
    _, workdir = host
    docker_exec("apt-get", "update", "-qq")
    docker_exec("bash", "-c", "cd /tmp && apt-get download -qq hello && dpkg --unpack /tmp/hello_*.deb")
    assert "hello" in docker_exec("dpkg", "--audit", check=False).stdout
    proc = apply(workdir)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "packages | Finish the interrupted dpkg run" in proc.stdout
    assert docker_exec("dpkg", "--audit", check=False).stdout.strip() == ""
    status = docker_exec("dpkg-query", "--show", "--showformat=${db:Status-Status}", "hello").stdout
    assert status == "installed"
    assert docker_exec("test", "-x", "/opt/provision/venv/bin/python", check=False).returncode == 0


def test_interrupted_dpkg_on_a_converged_host_is_still_finished(host) -> None:
    """After the test above the host is converged: every package python_env wants is installed, so its package steps
    are skipped as a group. A dpkg run interrupted since then must still be finished (provision_facts reports it)."""
    _, workdir = host
    docker_exec("bash", "-c", "dpkg --unpack /tmp/hello_*.deb")
    assert "hello" in docker_exec("dpkg", "--audit", check=False).stdout
    proc = apply(workdir)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert "packages | Finish the interrupted dpkg run" in proc.stdout
    assert docker_exec("dpkg", "--audit", check=False).stdout.strip() == ""
