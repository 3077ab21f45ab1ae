"""Docker 20.10 with NVIDIA's runtime, running, on a stock Debian 12 virtual machine (provision.vm: QEMU, software
emulation). `long`. Issue 51.

Debian 12's docker.io is 20.10.24, which cannot request a device by its CDI name. So the plan registers the toolkit's
`nvidia` runtime with dockerd (`nvidia-ctk runtime configure --runtime=docker`), in the runtime's CDI mode, and the
check asks for the GPU by `--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all`. test_container_roles.py's
Debian 12 leg installs and configures that on a container host, where dockerd cannot start; here it starts. On a VM
from `provision sandbox up --vm --os debian-12`, the playbook `provision render` writes for that plan, with only the
container roles (`--tags`, as test_vm_containers.py does on Debian 13), the toolkit from the STAND-IN repository built
here from NVIDIA's v1.20.0 source (tests/support/standin_container_toolkit.py):

- dockerd 20.10 running with the `nvidia` runtime (`docker info`'s runtimes) and no CDI of its own, as the plan says;
  the admin's own daemon.json key kept beside it; AppArmor's docker-default profile on, with the apparmor package the
  plan brings (without it dockerd 20.10 started no container here: data/containers.yaml facts.apparmor);
- the stand-in image (tests/support/vm_containers.py's: provision/verify on provision/debian:13, labelled as the plan's)
  loaded from the controller by provision.image_hosts, as `provision build -i` loads it;
- a container started through the `nvidia` runtime's binary without a device request: the image's verifier runs and
  says there is no driver; the check's own command, the GPU by its CDI name through the runtime, refused for want of a
  spec, never a device faked;
- the notebook account not put in the `docker` group, which stays without members;
- then the plan without containers (the ledger role only): the runtime gone from daemon.json, the admin's key kept,
  dockerd restarted so that `docker info` no longer lists it; the next apply restarts nothing.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.support.names import sandbox_name
from tests.support.vm_containers import VM, container_vm, image_check_says_no_gpu, report_of, standin_image

NAME = sandbox_name("vm-containers-12")
TAGS = "preflight,container_engine,nvidia_container_toolkit"
USER = "ml"  # deskmini's software.user
ADMINS = {"log-opts": {"max-size": "10m"}}  # the admin's own daemon.json, written before provision's apply

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.fixture(scope="module")
def vm(tmp_path_factory) -> VM:
    with container_vm(NAME, "debian-12", ("docker",), tmp_path_factory.mktemp("vmc12")) as made:
        yield made


def test_docker_20_10_runs_the_image_through_nvidias_runtime_and_gives_it_back(vm: VM):
    from provision.image_hosts import check_commands, remote
    from provision.pipeline.plan import plan_for

    tmp = vm.tmp
    vm.sh(f"sudo -n useradd --create-home --shell /bin/bash {USER}")
    # The admin's own Docker settings, before provision: the file (and Docker's directory) made by hand.
    vm.sh("sudo -n mkdir -p /etc/docker && echo " + json.dumps(json.dumps(ADMINS))
     + " | sudo -n tee /etc/docker/daemon.json >/dev/null")

    plan = plan_for(str(tmp / "docker.yaml"), os_override="debian-12")
    containers = plan.containers
    assert containers is not None and containers.engine_version.startswith("20.10") and not containers.cdi
    assert containers.toolkit.runtime_configure == "docker" and containers.toolkit.runtime_mode == "cdi", containers
    assert containers.gpu_run_args == ("--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all")

    first = vm.playbook("docker", TAGS, "-e", f"@{tmp / 'standin.json'}")
    text = first.stdout + first.stderr
    assert first.returncode == 0, text[-5000:]
    assert vm.sh("systemctl is-active docker").stdout.strip() == "active"
    version = vm.sh("sudo -n docker version --format '{{.Server.Version}}'").stdout.strip()
    assert version.startswith("20.10."), version
    # What dockerd runs with is what the plan decided: the toolkit's runtime registered, the admin's key beside it.
    runtimes = json.loads(vm.sh("sudo -n docker info --format '{{json .Runtimes}}'").stdout)
    print("dockerd", version, "runtimes:", runtimes, flush=True)
    assert runtimes["nvidia"]["path"] in ("nvidia-container-runtime", "/usr/bin/nvidia-container-runtime"), runtimes
    daemon = json.loads(vm.sh("sudo -n cat /etc/docker/daemon.json").stdout)
    assert daemon["log-opts"] == ADMINS["log-opts"] and "nvidia" in daemon["runtimes"], daemon
    assert "cdi" not in daemon.get("features", {}), daemon
    # apparmor came with it (facts.apparmor): dockerd 20.10 loads its docker-default profile, without which it starts
    # no container on this kernel ("AppArmor enabled on system but the docker-default profile could not be loaded").
    security = json.loads(vm.sh("sudo -n docker info --format '{{json .SecurityOptions}}'").stdout)
    assert "name=apparmor" in security, security
    assert re.search(r'^\s*mode = "cdi"', vm.sh("nvidia-ctk --quiet config").stdout, re.M)
    # No GPU: no spec written, by the role or by anything else.
    assert vm.sh("ls /var/run/cdi /etc/cdi 2>/dev/null | grep -c nvidia", ok=False).stdout.strip() in ("", "0")
    assert "docker" not in vm.sh(f"id -nG {USER}").stdout.split()
    assert vm.sh("getent group docker").stdout.strip().endswith(":")

    tag = standin_image(plan, f"provision-test/{NAME}:debian-12", tmp)
    try:
        vm.load(plan, tag)
        commands = check_commands(plan)
        assert vm.sh(remote(commands["images"])).stdout.split() == [tag]
        verify = [f"{plan.python.venv}/bin/python", "-m", "provision.verify", "--json"]
        # Through the nvidia runtime's binary, no device asked for: it hands the container to runc, and the image's
        # verifier runs and finds no driver.
        plain = vm.sh(remote(["sudo", "-n", "docker", "run", "--rm", "--runtime", "nvidia", tag, *verify]),
                      ok=False)
        report = report_of(plain)
        print("verifier through the nvidia runtime, no GPU:", report.get("status"), report.get("error"), flush=True)
        assert plain.returncode == 2 and report["status"] == "error", report
        assert report["error"].startswith("no NVIDIA driver found (libcuda.so.1 not loadable)"), report["error"]
        # The check's own command: the GPU by its CDI name through the runtime; no spec, so no container.
        gpu = vm.sh(remote([tag if w == "IMAGE" else w for w in commands["verify"]]), ok=False)
        print("docker --runtime nvidia NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all:", gpu.returncode,
              gpu.stderr.strip()[-400:], flush=True)
        assert gpu.returncode != 0 and "nvidia.com/gpu=all" in gpu.stderr and not gpu.stdout.strip(), gpu.stderr
        # `provision check` itself, through the CLI: it finds the plan's image on the host and runs that command. The
        # VM has only the container roles, so the host's other checks fail too (no driver, no environment); the
        # image's check must say why its container did not run, in its own line.
        checked = vm.provision("check", str(tmp / "docker.yaml"), "-i", str(vm.inventory), "--os", "debian-12",
                               "--skip-frameworks", timeout=1200)
        image_check_says_no_gpu(checked, tag, "docker")
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)

    # The plan without containers, the ledger role only: the container-only apply above left the engine out of the
    # ledger (`--tags`), so docker.io stays as an admin's own would, and only provision's configuration goes.
    before = vm.started("docker")
    dropped = vm.playbook("none", "preflight,ledger")
    assert dropped.returncode == 0, (dropped.stdout + dropped.stderr)[-5000:]
    assert json.loads(vm.sh("sudo -n cat /etc/docker/daemon.json").stdout) == ADMINS
    assert vm.sh("systemctl is-active docker").stdout.strip() == "active"
    assert vm.started("docker") != before
    runtimes = json.loads(vm.sh("sudo -n docker info --format '{{json .Runtimes}}'").stdout)
    assert "nvidia" not in runtimes, runtimes
    after = vm.started("docker")
    again = vm.playbook("none", "preflight,ledger")
    assert again.returncode == 0 and re.search(r"changed=0\b", again.stdout), again.stdout[-3000:]
    assert vm.started("docker") == after
