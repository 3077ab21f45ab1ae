"""The collection provision.gpu from a playbook of one's own, as a team that already runs Ansible would use it: the
tarball `ansible-galaxy collection build` makes is installed into a collections path of its own, `provision render`
writes the variables, and plain `ansible-playbook` (not provision's runner, no ansible.cfg, no ANSIBLE_LIBRARY or
roles path) applies the roles by their collection names to a stock Debian 13 host over SSH (`provision sandbox up`).
It converges (a second run changes nothing) and `provision check` is green on the host.

Frameworks are skipped (--skip-frameworks): their index is not reachable from the machines this is built on.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from provision import sandbox
from provision.pipeline.plan import plan_for
from provision.resources import COLLECTION
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAME = sandbox_name("collection")
PROFILE = ROOT / "profiles" / "deskmini.yaml"
# The list put cuda and cudnn before python_env: with CUDA and cuDNN from PyPI they install into the
# environment python_env makes, and refuse to run before it ("cuda: the virtual environment /opt/provision/venv does
# not exist on pv-collection; apply the python_env role first"). The order provision applies (render.ansible.ROLES).
ROLES = ["nvidia_driver", "python_env", "cuda", "cudnn", "jupyter", "gpu_verify"]

# 2 min 27 s on 2 cores with the apt cache and wheelhouse warm (2026-11-26): slow, not long.
pytestmark = [pytest.mark.docker, pytest.mark.slow]

# The playbook, as a user writes it; `environment` only points pip at the sandbox's caches (the inventory's
# provision_environment: the controller's wheelhouse, mounted read-only, and a pip cache).
PLAYBOOK = f"""\
---
- name: GPU hosts from the collection {COLLECTION}
  hosts: gpu
  environment: "{{{{ provision_environment | default({{}}) }}}}"
  vars_files: [out/vars/plan.yml]
  roles: [{", ".join(f"{COLLECTION}.{r}" for r in ROLES)}]
"""


def run(*cmd: str, env: dict[str, str], cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-4000:] + proc.stderr[-3000:]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A directory of the user's: the installed collection, provision's rendered variables, an inventory with the
    sandbox in group gpu, and the playbook. Yields (directory, environment for ansible-playbook)."""
    tmp = tmp_path_factory.mktemp("collection")
    user_env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    user_env |= {"PATH": f"{BIN}{os.pathsep}{user_env.get('PATH', '')}", "PROVISION_STATE": str(tmp / "state")}
    build = run(str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(tmp / "dist"), str(ROOT),
                env=user_env, cwd=tmp)
    assert build.returncode == 0, output(build)
    [tarball] = (tmp / "dist").glob("*.tar.gz")
    install = run(str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p", str(tmp / "collections"), str(tarball),
                  env=user_env, cwd=tmp)
    assert install.returncode == 0, output(install)

    up = run(sys.executable, "-m", "provision", "sandbox", "up", NAME, "--os", "debian-13", "-o", str(tmp / "inv.yml"),
             env=user_env, cwd=tmp, timeout=900)
    assert up.returncode == 0, output(up)
    try:
        render = run(sys.executable, "-m", "provision", "render", str(PROFILE), "--os", "debian-13",
                     "--skip-frameworks", "-o", str(tmp / "out"), env=user_env, cwd=tmp)
        assert render.returncode == 0, output(render)
        hosts = YAML(typ="safe").load((tmp / "inv.yml").read_text())["all"]["hosts"]
        with (tmp / "inventory.yml").open("w") as fh:
            YAML(typ="safe").dump({"all": {"children": {"gpu": {"hosts": hosts}}}}, fh)
        (tmp / "site.yml").write_text(PLAYBOOK)
        # What `provision apply --sandbox` does first: the plan's wheels into the wheelhouse the sandbox mounts.
        sandbox.fill_wheelhouse(plan_for(PROFILE, os_override="debian-13"), skip_frameworks=True)
        play_env = user_env | {"ANSIBLE_COLLECTIONS_PATH": str(tmp / "collections"), "ANSIBLE_NOCOLOR": "1"}
        yield tmp, play_env
    finally:
        sandbox.remove(NAME)


def recap(proc: subprocess.CompletedProcess) -> dict[str, int]:
    match = re.search(rf"^{NAME}\s+:\s+(.*)$", proc.stdout, re.M)
    assert match, output(proc)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))}


@pytest.fixture(scope="module")
def first_run(project):
    tmp, env = project
    return run(str(BIN / "ansible-playbook"), "-i", "inventory.yml", "site.yml", env=env, cwd=tmp)


def test_the_playbook_converges_the_host(first_run):
    assert first_run.returncode == 0, output(first_run)
    counts = recap(first_run)
    assert counts["failed"] == 0 and counts["unreachable"] == 0 and counts["changed"] > 0, counts
    # The roles ran from the installed collection (by their collection names), not from provision's checkout.
    assert f"TASK [{COLLECTION}.cuda : " in first_run.stdout


def test_a_second_run_changes_nothing(project, first_run):
    assert first_run.returncode == 0, output(first_run)
    tmp, env = project
    again = run(str(BIN / "ansible-playbook"), "-i", "inventory.yml", "site.yml", env=env, cwd=tmp)
    assert again.returncode == 0, output(again)
    counts = recap(again)
    assert counts["changed"] == 0 and counts["failed"] == 0, output(again)


def test_provision_check_is_green_on_the_host(project, first_run):
    assert first_run.returncode == 0, output(first_run)
    tmp, env = project
    env = {k: v for k, v in env.items() if not k.startswith("ANSIBLE_")}
    proc = run(sys.executable, "-m", "provision", "check", str(PROFILE), "-i", "inventory.yml", "--os", "debian-13",
               "--skip-frameworks", env=env, cwd=tmp)
    assert proc.returncode == 0, output(proc)
    assert "FAILED" not in proc.stdout and " PASSED" in proc.stdout
