"""plugins/modules/provision_python_apt.py run by Ansible (ad hoc, as the collection's provision.gpu.provision_python_apt,
packed with the shared code it imports from plugins/module_utils by AnsiballZ) against a stock Debian 13 container (no python3-apt, `main`
only, lists as old as the base image): the prerequisite every role that installs with apt calls first.

Dry run predicts without installing; apt's lists lock held by another process past the budget is one failure that
names the lock; held for less, the module waits and installs; a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision import sandbox
from provision.resources import collections_dir
from tests.support.names import sandbox_name

BIN = Path(sys.executable).parent
NAME = sandbox_name("python-apt")

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI on this machine"),
]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory):
    sandbox.start(NAME, "13")
    inventory = tmp_path_factory.mktemp("python-apt") / "inventory"
    inventory.write_text(f"{NAME} ansible_connection=community.docker.docker ansible_python_interpreter=/usr/bin/python3\n")
    yield inventory
    sandbox.remove(NAME)


def module(inventory: Path, lock_timeout: int, check: bool = False) -> tuple[int, dict]:
    """Run the module as Ansible does (ad hoc, from provision's collection); its exit code and its result."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collections_dir()), ANSIBLE_NOCOLOR="1",
               ANSIBLE_HOST_KEY_CHECKING="false", PATH=f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    env.pop("ANSIBLE_LIBRARY", None)
    cmd = [str(BIN / "ansible"), "all", "-i", str(inventory), "-o", "-m", "provision.gpu.provision_python_apt", "-a",
           f"lock_timeout={lock_timeout}", *(["--check"] if check else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    found = re.search(rf"^{NAME} \| [A-Z!]+ => (\{{.*\}})$", proc.stdout, re.M)
    assert found, proc.stdout + proc.stderr
    return proc.returncode, json.loads(found.group(1))


def dpkg_status(package: str) -> str:
    return subprocess.run(["docker", "exec", NAME, "dpkg-query", "-W", "-f", "${db:Status-Abbrev}", package],
                          capture_output=True, text=True).stdout.strip()


def module_beside_a_lists_lock(inventory: Path, held_s: int, lock_timeout: int) -> tuple[int, dict, float]:
    """The module run while a process in the host holds apt's lists lock as apt takes it (fcntl) for `held_s`:
    its exit code, its result and how long it took."""
    holder = subprocess.Popen(
        ["docker", "exec", NAME, "python3", "-c",
         "import fcntl, os, time; f = open('/var/lib/apt/lists/lock', 'w'); fcntl.lockf(f, fcntl.LOCK_EX); "
         f"print(os.getpid(), flush=True); time.sleep({held_s})"],
        stdout=subprocess.PIPE, text=True)
    pid = holder.stdout.readline().strip()
    try:
        assert pid.isdigit(), "the lock holder did not start"
        started = time.monotonic()
        code, result = module(inventory, lock_timeout)
        return code, result, time.monotonic() - started
    finally:
        if pid.isdigit():
            subprocess.run(["docker", "exec", NAME, "kill", pid], capture_output=True)
        holder.wait(timeout=30)


def test_the_host_is_stock_and_a_dry_run_predicts_the_install_without_making_it(host):
    assert dpkg_status("python3-apt") == "", "the base image should not have python3-apt"
    code, result = module(host, 60, check=True)
    assert code == 0 and result["changed"] is True and result["installed_before"] is False, result
    assert dpkg_status("python3-apt") == ""


def test_a_lists_lock_held_past_the_budget_is_one_failure_naming_the_lock(host):
    code, result, elapsed = module_beside_a_lists_lock(host, held_s=120, lock_timeout=5)
    assert code != 0, result  # the one-line output drops `failed`; ansible exits 2 for a failed host
    assert "apt-get update" in result["msg"] and "Could not get lock" in result["msg"], result["msg"]
    assert elapsed < 60, "the module waited far longer than its lock_timeout"
    assert dpkg_status("python3-apt") == ""


def test_a_lock_released_within_the_budget_is_waited_for_then_python3_apt_is_installed(host):
    code, result, elapsed = module_beside_a_lists_lock(host, held_s=15, lock_timeout=300)
    assert code == 0 and result["changed"] is True, result
    assert elapsed >= 10, "the lock was held for 15 s: the module cannot have run apt-get update sooner"
    assert dpkg_status("python3-apt") == "ii"
    # What Ansible's apt module needs from it: the bindings import in the host's system interpreter.
    imported = subprocess.run(["docker", "exec", NAME, "/usr/bin/python3", "-c", "import apt_pkg"],
                              capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr


def test_a_second_run_changes_nothing(host):
    code, result = module(host, 60)
    assert code == 0 and result["changed"] is False and result["installed_before"] is True, result
