"""`provision check`'s image check (provision/checks/test_host.py, issue 51 item 5) against this controller's own Docker
engine, through testinfra's local backend: with no image of the plan it is skipped with the reason; with one it runs
the verifier's command, and where the engine starts no container (this machine has no GPU, and its Docker 20.10 has
no CDI: no device driver for `--device nvidia.com/gpu=all`) it fails in one line with the engine's words. The command
lines per plan are tests/unit/test_image_hosts.py's; the VM test (test_vm_containers.py, `long`) runs them on dockerd
and rootless podman. Here the commands run as root without sudo (the controller's tests run as root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.image_hosts import check_commands
from provision.pipeline.plan import plan_for
from provision.report import plan_json
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "provision" / "checks" / "test_host.py"

pytestmark = [pytest.mark.docker]


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("imagecheck")
    text = (ROOT / "profiles/deskmini.yaml").read_text().replace("\nsoftware:\n", "\nsoftware:\n  containers: docker\n")
    (tmp / "box.yaml").write_text(text)
    # A profile name of this test's own, so that the label query finds only the image made here.
    name = sandbox_name("imagecheck")
    (tmp / "box.yaml").write_text(text.replace("name: deskmini", f"name: {name}", 1))
    plan = plan_for(str(tmp / "box.yaml"), os_override="debian-13")
    assert plan.profile == name
    (tmp / "plan.json").write_text(json.dumps(plan_json(plan)))
    commands = check_commands(plan)
    assert commands is not None and commands["images"][:3] == ["sudo", "-n", "docker"]
    local = {k: (v[2:] if isinstance(v, list) else v) for k, v in commands.items()}  # root here: no sudo
    return tmp, plan, local


def check(tmp: Path, commands: dict) -> subprocess.CompletedProcess:
    env = os.environ | {"PROVISION_CHECK_PLAN": str(tmp / "plan.json"), "PROVISION_CHECK_IMAGE": json.dumps(commands),
                        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    (tmp / "pytest.ini").write_text("[pytest]\n")
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(tmp / "pytest.ini"), "--rootdir", str(tmp),
                           "-p", "testinfra.plugin", "-p", "no:cacheprovider", "-rs", "-v", "--tb=line", "--hosts",
                           "local://", "-k", "test_the_images_verifier", str(SUITE)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_no_image_of_the_plan_is_a_skip_with_the_reason_and_an_image_is_run_on_the_gpu(plan_files):
    tmp, plan, commands = plan_files
    none = check(tmp, commands)
    assert none.returncode == 0, none.stdout[-3000:]
    assert "1 skipped" in none.stdout and "no image of this plan on the host" in none.stdout, none.stdout[-3000:]

    tag = f"provision-test/{plan.profile}:debian-13"
    (tmp / "Dockerfile").write_text(f'FROM provision/debian:13\nLABEL io.provision.profile="{plan.profile}" '
                                    f'io.provision.os="{plan.target.os_id}"\n')
    built = subprocess.run(["docker", "build", "-q", "-t", tag, str(tmp)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    try:
        ran = check(tmp, commands)
        out = ran.stdout
        assert ran.returncode == 1 and "1 failed" in out, out[-3000:]
        # This machine's Docker 20.10 has no CDI: it cannot select a "cdi" device driver for nvidia.com/gpu=all.
        assert (f"{tag}: the container did not run its verifier (exit 125): docker: Error response from daemon: "
                'could not select device driver "cdi"') in out, out[-3000:]
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
