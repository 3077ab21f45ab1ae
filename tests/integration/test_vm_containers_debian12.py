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
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.support.names import sandbox_name
from tests.support.vm_containers import image_check_says_no_gpu, report_of, run, standin_image

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("vm-containers-12")
TAGS = "preflight,container_engine,nvidia_container_toolkit"
APPLY_TIMEOUT = 3 * 3600
USER = "ml"  # deskmini's software.user
ADMINS = {"log-opts": {"max-size": "10m"}}  # the admin's own daemon.json, written before provision's apply

pytestmark = [pytest.mark.slow, pytest.mark.long]


def provision(*args: str, env: dict[str, str], timeout: float = 1800) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "provision", *args], env=env, timeout=timeout)


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    from provision import vm as qemu
    from tests.support.standin_container_toolkit import standin_container_toolkit_repo

    tmp = tmp_path_factory.mktemp("vmc12")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {"PROVISION_STATE": str(tmp / "state"), "ANSIBLE_FORCE_COLOR": "false",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    repo = standin_container_toolkit_repo("127.0.0.1")  # the guest reaches it as QEMU's user-network gateway
    base = (ROOT / "profiles/deskmini.yaml").read_text()
    assert "\nsoftware:\n" in base
    (tmp / "docker.yaml").write_text(base.replace("\nsoftware:\n", "\nsoftware:\n  containers: docker\n"))
    (tmp / "standin.json").write_text(json.dumps({
        "nvidia_container_toolkit_repo_url": repo.url.replace("127.0.0.1", qemu.GATEWAY),
        "nvidia_container_toolkit_repo_key_url": repo.key_url.replace("127.0.0.1", qemu.GATEWAY),
        "nvidia_container_toolkit_repo_key_fingerprint": repo.fingerprint}))
    inventory = tmp / "vm.yml"
    provision("sandbox", "down", NAME, env=env, timeout=120)
    try:
        started = time.time()
        up = provision("sandbox", "up", "--vm", NAME, "--os", "debian-12", "--profile", str(tmp / "docker.yaml"),
                       "-o", str(inventory), env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        print(f"VM (Debian 12) up in {time.time() - started:.0f} s", flush=True)
        for name, profile in (("docker", tmp / "docker.yaml"), ("none", ROOT / "profiles/deskmini.yaml")):
            out = provision("render", str(profile), "--os", "debian-12", "-o", str(tmp / name), "-i", str(inventory),
                            env=env, timeout=300)
            assert out.returncode == 0, out.stdout + out.stderr
        yield {"inventory": inventory, "env": env, "tmp": tmp}
    finally:
        provision("sandbox", "down", NAME, env=env, timeout=120)


def ssh_argv(inventory: Path) -> list[str]:
    from provision.ssh import ssh_command

    return ssh_command(NAME, YAML(typ="safe").load(inventory.read_text())["all"]["hosts"][NAME])


def on_vm(inventory: Path, command: str, *, ok: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*ssh_argv(inventory), command], capture_output=True, text=True, timeout=900,
                          stdin=subprocess.DEVNULL)
    if ok:
        assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
    return proc


def apply(vm: dict, rendered: str, tags: str, *extra: str) -> subprocess.CompletedProcess:
    started = time.time()
    proc = run([str(Path(sys.executable).parent / "ansible-playbook"), "site.yml", *extra, "--tags", tags],
               env=vm["env"], cwd=vm["tmp"] / rendered, timeout=APPLY_TIMEOUT, log=vm["tmp"] / f"apply-{rendered}")
    print(f"apply {rendered} ({tags}): exit {proc.returncode} in {time.time() - started:.0f} s", flush=True)
    return proc


def dockerd_started(inv: Path) -> str:
    return on_vm(inv, "systemctl show -p ActiveEnterTimestampMonotonic -p MainPID docker").stdout


def test_docker_20_10_runs_the_image_through_nvidias_runtime_and_gives_it_back(vm):
    from provision.image_hosts import check_commands, engine_of, load_command, remote, send
    from provision.pipeline.plan import plan_for

    inv, tmp = vm["inventory"], vm["tmp"]
    on_vm(inv, f"sudo -n useradd --create-home --shell /bin/bash {USER}")
    # The admin's own Docker settings, before provision: the file (and Docker's directory) made by hand.
    on_vm(inv, "sudo -n mkdir -p /etc/docker && echo " + json.dumps(json.dumps(ADMINS))
          + " | sudo -n tee /etc/docker/daemon.json >/dev/null")

    plan = plan_for(str(tmp / "docker.yaml"), os_override="debian-12")
    containers = plan.containers
    assert containers is not None and containers.engine_version.startswith("20.10") and not containers.cdi
    assert containers.toolkit.runtime_configure == "docker" and containers.toolkit.runtime_mode == "cdi", containers
    assert containers.gpu_run_args == ("--runtime", "nvidia", "-e", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all")

    first = apply(vm, "docker", TAGS, "-e", f"@{tmp / 'standin.json'}")
    text = first.stdout + first.stderr
    assert first.returncode == 0, text[-5000:]
    assert on_vm(inv, "systemctl is-active docker").stdout.strip() == "active"
    version = on_vm(inv, "sudo -n docker version --format '{{.Server.Version}}'").stdout.strip()
    assert version.startswith("20.10."), version
    # What dockerd runs with is what the plan decided: the toolkit's runtime registered, the admin's key beside it.
    runtimes = json.loads(on_vm(inv, "sudo -n docker info --format '{{json .Runtimes}}'").stdout)
    print("dockerd", version, "runtimes:", runtimes, flush=True)
    assert runtimes["nvidia"]["path"] in ("nvidia-container-runtime", "/usr/bin/nvidia-container-runtime"), runtimes
    daemon = json.loads(on_vm(inv, "sudo -n cat /etc/docker/daemon.json").stdout)
    assert daemon["log-opts"] == ADMINS["log-opts"] and "nvidia" in daemon["runtimes"], daemon
    assert "cdi" not in daemon.get("features", {}), daemon
    # apparmor came with it (facts.apparmor): dockerd 20.10 loads its docker-default profile, without which it starts
    # no container on this kernel ("AppArmor enabled on system but the docker-default profile could not be loaded").
    security = json.loads(on_vm(inv, "sudo -n docker info --format '{{json .SecurityOptions}}'").stdout)
    assert "name=apparmor" in security, security
    assert re.search(r'^\s*mode = "cdi"', on_vm(inv, "nvidia-ctk --quiet config").stdout, re.M)
    # No GPU: no spec written, by the role or by anything else.
    assert on_vm(inv, "ls /var/run/cdi /etc/cdi 2>/dev/null | grep -c nvidia", ok=False).stdout.strip() in ("", "0")
    assert "docker" not in on_vm(inv, f"id -nG {USER}").stdout.split()
    assert on_vm(inv, "getent group docker").stdout.strip().endswith(":")

    import docker

    tag = standin_image(plan, f"provision-test/{NAME}:debian-12", tmp)
    try:
        engine = engine_of(plan, plan.profile)
        api = docker.APIClient(version="auto")
        size = int(api.inspect_image(tag)["Size"])
        sent = send(api.get_image(tag), NAME, load_command(ssh_argv(inv), engine), engine, size, lambda *a: None)
        print(f"loaded {tag} ({size / 1e6:.0f} MB) in {sent.seconds:.0f} s", flush=True)
        commands = check_commands(plan)
        assert on_vm(inv, remote(commands["images"])).stdout.split() == [tag]
        verify = [f"{plan.python.venv}/bin/python", "-m", "provision.verify", "--json"]
        # Through the nvidia runtime's binary, no device asked for: it hands the container to runc, and the image's
        # verifier runs and finds no driver.
        plain = on_vm(inv, remote(["sudo", "-n", "docker", "run", "--rm", "--runtime", "nvidia", tag, *verify]),
                      ok=False)
        report = report_of(plain)
        print("verifier through the nvidia runtime, no GPU:", report.get("status"), report.get("error"), flush=True)
        assert plain.returncode == 2 and report["status"] == "error", report
        assert report["error"].startswith("no NVIDIA driver found (libcuda.so.1 not loadable)"), report["error"]
        # The check's own command: the GPU by its CDI name through the runtime; no spec, so no container.
        gpu = on_vm(inv, remote([tag if w == "IMAGE" else w for w in commands["verify"]]), ok=False)
        print("docker --runtime nvidia NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all:", gpu.returncode,
              gpu.stderr.strip()[-400:], flush=True)
        assert gpu.returncode != 0 and "nvidia.com/gpu=all" in gpu.stderr and not gpu.stdout.strip(), gpu.stderr
        # `provision check` itself, through the CLI: it finds the plan's image on the host and runs that command. The
        # VM has only the container roles, so the host's other checks fail too (no driver, no environment); the
        # image's check must say why its container did not run, in its own line.
        checked = provision("check", str(tmp / "docker.yaml"), "-i", str(inv), "--os", "debian-12",
                            "--skip-frameworks", env=vm["env"], timeout=1200)
        image_check_says_no_gpu(checked, tag, "docker")
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)

    # The plan without containers, the ledger role only: the container-only apply above left the engine out of the
    # ledger (`--tags`), so docker.io stays as an admin's own would, and only provision's configuration goes.
    before = dockerd_started(inv)
    dropped = apply(vm, "none", "preflight,ledger")
    assert dropped.returncode == 0, (dropped.stdout + dropped.stderr)[-5000:]
    assert json.loads(on_vm(inv, "sudo -n cat /etc/docker/daemon.json").stdout) == ADMINS
    assert on_vm(inv, "systemctl is-active docker").stdout.strip() == "active"
    assert dockerd_started(inv) != before
    runtimes = json.loads(on_vm(inv, "sudo -n docker info --format '{{json .Runtimes}}'").stdout)
    assert "nvidia" not in runtimes, runtimes
    after = dockerd_started(inv)
    again = apply(vm, "none", "preflight,ledger")
    assert again.returncode == 0 and re.search(r"changed=0\b", again.stdout), again.stdout[-3000:]
    assert dockerd_started(inv) == after
