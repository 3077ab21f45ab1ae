"""GPU containers' engines running, on a stock Debian 13 virtual machine (provision.vm: QEMU, software emulation).
`long`. Issue 51.

dockerd and rootless podman cannot start in this machine's unprivileged test containers (test_container_roles.py says
so in its one line); a VM has a kernel and a systemd of its own, and they start there. On a VM from `provision sandbox
up --vm`, the playbook `provision render` writes for a Debian 13 plan with `software.containers: docker`, then the one
for `podman`, each with only the container roles (`--tags`, as test_vm_driver.py applies only nvidia_driver), NVIDIA's
Container Toolkit from the STAND-IN repository built here from NVIDIA's v1.20.0 source (tests/support/
standin_container_toolkit.py), served from this process on the controller's loopback, which the guest reaches as
QEMU's user-network gateway:

- dockerd started by the role with `features.cdi` on, and, as the plan decides for Debian 13's docker.io 26 (native
  CDI), the toolkit's `nvidia` runtime not registered; with no GPU the role's one line (nvidia-ctk cdi generate has no
  NVML) and no CDI spec written;
- an image loaded from the controller by provision.image_hosts (the code of `provision build -i`: the engine's save
  stream over the inventory's ssh into `sudo -n docker load`); a container started from it through dockerd, whose
  verifier says what it says without a GPU; the check's own command (`docker run --rm --device nvidia.com/gpu=all`)
  refused by Docker's CDI for want of a spec, never a device faked; `provision check` itself (the CLI) finds the image
  on the host, runs that command and fails its image check with the engine's reason;
- the notebook account (made beforehand as a user's own account: Debian's useradd gives it subordinate ids) not put in
  the `docker` group, which stays without members;
- podman installed for that account, the same image loaded into its own storage by `podman load` as the account, and a
  container run rootless as the account; `provision check` runs the image's check there as the account;
- containerd as a Kubernetes node's, over the configuration a kubeadm guide has the admin write first (`containerd
  config default` with `SystemdCgroup = true`): the toolkit's drop-in imported, the `nvidia` runtime handler and the
  CRI plugin's enable_cdi in what containerd itself reads (`containerd config dump`), the admin's own key kept; the
  image imported with `ctr`, a container started through the handler's binary (nvidia-container-runtime, as the CRI
  plugin would start it: no kubelet runs here), and the GPU by its CDI name refused for want of a spec;
- then a plan without containers, the ledger role only: provision's keys gone from daemon.json and config.toml the
  admin's again, and the engines, still installed and running, restarted so that they run on what the files say.

The image is NOT the one `provision build` makes for the plan (gigabytes of CUDA wheels, hours through an emulated
disk): it is provision/debian:13 with Debian's python3-numpy, provision/verify copied in and the plan's environment path made
with `python3 -m venv`, labelled as the plan's so that the check's image query finds it, and labelled as a stand-in.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import time
import tomllib

import pytest

from tests.support.names import sandbox_name
from tests.support.vm_containers import (
    APPLY_TIMEOUT,
    DESKMINI,
    VM,
    container_vm,
    image_check_says_no_gpu,
    report_of,
    run,
    standin_image,
)

NAME = sandbox_name("vm-containers")
TAGS = "preflight,container_engine,nvidia_container_toolkit"
USER = "ml"  # deskmini's software.user
ENGINES = ("docker", "podman", "containerd")

pytestmark = [pytest.mark.slow, pytest.mark.long]


@pytest.fixture(scope="module")
def vm(tmp_path_factory) -> VM:
    with container_vm(NAME, "debian-13", ENGINES, tmp_path_factory.mktemp("vmc")) as made:
        yield made


def apply(vm: VM, engine: str) -> subprocess.CompletedProcess:
    """ENGINE's plan, the container roles only, the toolkit from the stand-in repository."""
    return vm.playbook(engine, TAGS, "-e", f"@{vm.tmp / 'standin.json'}")


def test_docker_and_rootless_podman_run_the_image_from_the_controller_and_no_gpu_is_faked(vm: VM):
    from provision.image_hosts import check_commands, remote
    from provision.pipeline.plan import plan_for

    tmp = vm.tmp
    # The notebook account exists before the apply, as a user's own account (useradd gives it subordinate ids).
    # (Where useradd gave none, the ranges the role's refusal line asks for are added, as a user would.)
    vm.sh(f"sudo -n useradd --create-home --shell /bin/bash {USER} && {{ grep -q '^{USER}:' /etc/subuid || sudo -n "
          f"usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {USER}; }}")

    # --- docker ---------------------------------------------------------------------------------------------------
    docker_plan = plan_for(str(tmp / "docker.yaml"), os_override="debian-13")
    first = apply(vm, "docker")
    text = first.stdout + first.stderr
    assert first.returncode == 0, text[-5000:]
    said = re.findall(r"nvidia_container_toolkit: no NVIDIA driver answers on \S+ \(nvidia-ctk cdi generate: [^)]*\),"
                      r"\s+so the CDI spec /var/run/cdi/nvidia.yaml is left to nvidia-cdi-refresh", text)
    assert len(said) == 1 and "NVML" in said[0], text[-5000:]
    assert vm.sh("systemctl is-active docker").stdout.strip() == "active"
    # What the plan decided is what dockerd has: Debian 13's docker.io 26 requests devices by CDI name itself
    # (features.cdi, `--device nvidia.com/gpu=all`), so the toolkit's runtime is not registered (`runtime_configure:
    # none`); Debian 12's 20.10 would take the runtime instead (test_container_roles.py renders both).
    runtimes = json.loads(vm.sh("sudo -n docker info --format '{{json .Runtimes}}'").stdout)
    containers = docker_plan.containers
    assert containers is not None and containers.cdi and containers.toolkit.runtime_configure == "none", containers
    assert "nvidia" not in runtimes, runtimes
    assert containers.gpu_run_args == ("--device", "nvidia.com/gpu=all"), containers.gpu_run_args
    assert json.loads(vm.sh("sudo -n cat /etc/docker/daemon.json").stdout)["features"]["cdi"] is True
    # apparmor came with it (data/containers.yaml facts.apparmor): the containers get dockerd's docker-default profile.
    security = json.loads(vm.sh("sudo -n docker info --format '{{json .SecurityOptions}}'").stdout)
    assert "name=apparmor" in security, security
    # No GPU: no spec written, by the role or by anything else.
    assert vm.sh("ls /var/run/cdi /etc/cdi 2>/dev/null | grep -c nvidia", ok=False).stdout.strip() in ("", "0")
    # The docker group left alone: the notebook account is not in it, and it has no members.
    assert "docker" not in vm.sh(f"id -nG {USER}").stdout.split()
    assert vm.sh("getent group docker").stdout.strip().endswith(":")

    tag = standin_image(docker_plan, f"provision-test/{NAME}:debian-13", tmp)
    try:
        vm.load(docker_plan, tag)
        commands = check_commands(docker_plan)
        listed = vm.sh(remote(commands["images"])).stdout.split()
        assert listed == [tag], listed
        # A container through dockerd: the image's verifier runs and says there is no GPU.
        plain = vm.sh(remote(["sudo", "-n", "docker", "run", "--rm", tag,
                              f"{docker_plan.python.venv}/bin/python", "-m", "provision.verify", "--json"]),
                      ok=False)
        report = report_of(plain)
        print("verifier in a docker container, no GPU:", report.get("status"), report.get("error"), flush=True)
        assert plain.returncode == 2 and report["status"] == "error", report
        assert report["error"].startswith("no NVIDIA driver found (libcuda.so.1 not loadable)"), report["error"]
        # The check's own command: the GPU requested by its CDI name; Docker's CDI finds no spec, so no container.
        gpu = vm.sh(remote([tag if w == "IMAGE" else w for w in commands["verify"]]), ok=False)
        print("docker --device nvidia.com/gpu=all:", gpu.returncode, gpu.stderr.strip()[-400:], flush=True)
        assert gpu.returncode != 0 and "nvidia.com/gpu=all" in gpu.stderr and not gpu.stdout.strip(), gpu.stderr
        # `provision check` itself, through the CLI: it finds the plan's image on the host and runs that command (the
        # VM has only the container roles, so the host's other checks fail too: the image's says why in its line).
        image_check_says_no_gpu(vm.provision("check", str(tmp / "docker.yaml"), "-i", str(vm.inventory), "--os",
                                             "debian-13", "--skip-frameworks", timeout=1200), tag, "docker")

        # --- podman, rootless as the notebook account --------------------------------------------------------------
        podman_plan = plan_for(str(tmp / "podman.yaml"), os_override="debian-13")
        second = apply(vm, "podman")
        assert second.returncode == 0, (second.stdout + second.stderr)[-5000:]
        assert "docker" not in vm.sh(f"id -nG {USER}").stdout.split()
        vm.load(podman_plan, tag)
        pcommands = check_commands(podman_plan)
        listed = vm.sh(remote(pcommands["images"])).stdout.split()
        assert len(listed) == 1 and listed[0].endswith(tag), listed
        prefix = pcommands["images"][: pcommands["images"].index("images")]
        rootless = vm.sh(remote([*prefix, "info", "--format", "{{.Host.Security.Rootless}}"]))
        assert rootless.stdout.strip() == "true", rootless.stdout + rootless.stderr
        plain = vm.sh(remote([*prefix, "run", "--rm", listed[0], f"{podman_plan.python.venv}/bin/python", "-m",
                              "provision.verify", "--json"]), ok=False)
        report = report_of(plain)
        print("verifier in a rootless podman container, no GPU:", report.get("status"), report.get("error"),
              flush=True)
        assert plain.returncode == 2 and report["status"] == "error", report
        assert report["error"].startswith("no NVIDIA driver found (libcuda.so.1 not loadable)"), report["error"]
        gpu = vm.sh(remote([listed[0] if w == "IMAGE" else w for w in pcommands["verify"]]), ok=False)
        print("podman --device nvidia.com/gpu=all:", gpu.returncode, gpu.stderr.strip()[-400:], flush=True)
        assert gpu.returncode != 0 and "nvidia.com/gpu=all" in gpu.stderr and not gpu.stdout.strip(), gpu.stderr
        # The same through `provision check`: the image in the notebook account's own storage, run as that account.
        # The VM's inventory names the docker profile for the host (provision_profile, which wins over the command's
        # PROFILE, as for `provision apply -i`): the podman plan's check gets an inventory that names podman's.
        podman_inv = tmp / "vm-podman.yml"
        podman_inv.write_text(vm.inventory.read_text().replace(str(tmp / "docker.yaml"), str(tmp / "podman.yaml")))
        assert str(tmp / "podman.yaml") in podman_inv.read_text()
        image_check_says_no_gpu(vm.provision("check", str(tmp / "podman.yaml"), "-i", str(podman_inv), "--os",
                                             "debian-13", "--skip-frameworks", timeout=1200), tag, "podman")

    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_provision_build_puts_the_plans_own_image_on_the_host_and_provision_check_runs_it(vm: VM):
    """The same VM after the test before (dockerd configured by the docker plan): `provision build PROFILE -i
    INVENTORY` through the CLI, the image the plan's own (the Debian 13 base is provision/debian:13, as test_image.py
    builds it: no registry here), loaded over ssh with its progress lines; then `provision check` runs that image's
    verifier in a container on the host and reports why it did not run. podman is not loaded here: a second copy of
    the image would not fit the VM's 12 GB disk beside the first (the stand-in above shows the account's load)."""
    from provision.image_hosts import check_commands, remote
    from provision.pipeline.plan import plan_for

    tmp, env = vm.tmp, vm.env
    plan = plan_for(str(tmp / "docker.yaml"), os_override="debian-13")
    commands = check_commands(plan)
    # Only this image of the plan on the host: the test before left its stand-in in dockerd's store.
    for old in vm.sh(remote(commands["images"])).stdout.split():
        vm.sh(remote(["sudo", "-n", "docker", "rmi", "-f", old]))
    tag = f"provision-test/{NAME}:built"
    started = time.time()
    built = run([sys.executable, "-m", "provision", "build", str(tmp / "docker.yaml"), "--os", "debian-13",
                 "--skip-frameworks", "--base-image", "provision/debian:13", "--tag", tag, "-i", str(vm.inventory),
                 "--json"],
                env=env, timeout=APPLY_TIMEOUT, log=tmp / "build-i")
    print(f"provision build -i: exit {built.returncode} in {time.time() - started:.0f} s", flush=True)
    result: dict = {}
    try:
        said = built.stdout + built.stderr
        assert built.returncode == 0, said[-5000:]
        assert "Traceback" not in said, said[-5000:]
        result = json.loads(built.stdout)
        # The progress display off a terminal: a line per tenth of the image, then the engine's account.
        tenths = re.findall(rf"^{re.escape(NAME)}: (\d+) MB of (\d+) MB \((\d+)%\), [\d.]+ MB/s", built.stderr, re.M)
        assert len(tenths) >= 10 and tenths[-1][2] == "100", built.stderr[-3000:]
        assert re.search(rf"^{re.escape(NAME)}: .*: loaded as root \(sudo docker\)$", built.stderr, re.M), built.stderr
        (loaded,) = result["loaded"]
        assert loaded["host"] == NAME and loaded["bytes"] >= result["size_bytes"] > 1e9, result
        print(f"loaded {loaded['bytes'] / 1e6:.0f} MB in {loaded['seconds']} s", flush=True)
        assert vm.sh(remote(commands["images"])).stdout.split() == [tag]
        labels = json.loads(vm.sh(f"sudo -n docker image inspect --format '{{{{json .Config.Labels}}}}' {tag}")
                            .stdout)
        assert labels["io.provision.profile"] == "deskmini" and labels["io.provision.os"] == "debian-13", labels
        assert "io.provision.standin" not in labels, labels
        # The plan's own image, its verifier through dockerd without a GPU: the same answer as the stand-in's.
        verify = commands["verify"]
        gpu_at = verify.index(plan.containers.gpu_run_args[0])
        without_gpu = verify[:gpu_at] + verify[gpu_at + len(plan.containers.gpu_run_args):]
        plain = vm.sh(remote([tag if w == "IMAGE" else w for w in without_gpu]), ok=False)
        report = report_of(plain)
        print("the built image's verifier through dockerd, no GPU:", report.get("status"), report.get("error"),
              flush=True)
        assert plain.returncode == 2 and report["status"] == "error", report
        assert report["error"].startswith("no NVIDIA driver found (libcuda.so.1 not loadable)"), report["error"]
        image_check_says_no_gpu(vm.provision("check", str(tmp / "docker.yaml"), "-i", str(vm.inventory), "--os",
                                             "debian-13", "--skip-frameworks", timeout=1200), tag, "docker")
    finally:
        vm.sh(remote(["sudo", "-n", "docker", "rmi", "-f", tag]), ok=False)  # room for the tests after
        subprocess.run(["docker", "rmi", "-f", tag, *([result["environment_image"]] if result.get("environment_image")
                                                     else [])], capture_output=True)


def test_containerd_as_a_kubernetes_node_runs_the_image_through_the_nvidia_handler_and_no_gpu_is_faked(vm: VM):
    """The same VM, whatever the test before left on it (docker.io brings containerd too): the plan with `containers:
    containerd` over the admin's own config.toml."""
    from provision.image_hosts import remote
    from provision.pipeline.plan import plan_for

    tmp = vm.tmp
    tag = standin_image(plan_for(str(tmp / "containerd.yaml"), os_override="debian-13"),
                        f"provision-test/{NAME}:containerd", tmp)
    try:
        # The admin's own containerd first (where docker.io did not bring it), configured as kubeadm's guide has it
        # written: containerd's defaults, runc with the systemd cgroup driver.
        vm.sh("command -v containerd >/dev/null || { sudo -n apt-get update -q >/dev/null && sudo -n env "
              "DEBIAN_FRONTEND=noninteractive apt-get install -y -q containerd >/dev/null; }")
        vm.sh("sudo -n sh -ec 'mkdir -p /etc/containerd && containerd config default "
              "| sed \"s/SystemdCgroup = false/SystemdCgroup = true/\" > /etc/containerd/config.toml' "
              "&& grep -c 'SystemdCgroup = true' /etc/containerd/config.toml")
        ctrd_plan = plan_for(str(tmp / "containerd.yaml"), os_override="debian-13")
        containers = ctrd_plan.containers
        assert containers is not None and containers.cdi and containers.toolkit.runtime_configure == "containerd"
        third = apply(vm, "containerd")
        assert third.returncode == 0, (third.stdout + third.stderr)[-5000:]
        assert vm.sh("systemctl is-active containerd").stdout.strip() == "active"
        dropin = vm.sh("sudo -n cat /etc/containerd/conf.d/99-nvidia.toml").stdout
        print("the toolkit's drop-in:", dropin, sep="\n", flush=True)
        assert "/etc/containerd/conf.d/*.toml" in vm.sh("sudo -n cat /etc/containerd/config.toml").stdout
        # What containerd itself reads, its drop-in merged: the handler, CDI on in the CRI plugin, the admin's key kept.
        cri = tomllib.loads(vm.sh("sudo -n containerd config dump").stdout)["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["enable_cdi"] is True, cri.get("enable_cdi")
        runtimes = cri["containerd"]["runtimes"]
        assert runtimes["nvidia"]["runtime_type"] == "io.containerd.runc.v2", runtimes["nvidia"]
        assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime", runtimes["nvidia"]
        assert runtimes["runc"]["options"]["SystemdCgroup"] is True, runtimes["runc"]
        # The runtime's own mode is the plan's: it injects devices only by their CDI names.
        assert re.search(r'^\s*mode = "cdi"', vm.sh("nvidia-ctk --quiet config").stdout, re.M)
        again = apply(vm, "containerd")
        assert again.returncode == 0 and re.search(r"changed=0\b", again.stdout), again.stdout[-3000:]

        # The image into containerd's own store (a node takes it from a registry; here `ctr import` over ssh), and a
        # container through the nvidia handler's binary.
        ctr = ["sudo", "-n", "ctr", "--namespace", "provision-test"]
        save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
        imported = subprocess.run([*vm.ssh_argv(), remote([*ctr, "images", "import", "-"])], stdin=save.stdout,
                                  capture_output=True, text=True, timeout=1800)
        save.wait(timeout=60)
        assert imported.returncode == 0, imported.stderr[-2000:]
        ref = next(r for r in vm.sh(remote([*ctr, "images", "ls", "-q"])).stdout.split() if r.endswith(tag))
        via = [*ctr, "run", "--rm", "--runc-binary", "/usr/bin/nvidia-container-runtime"]
        verify = [f"{ctrd_plan.python.venv}/bin/python", "-m", "provision.verify", "--json"]
        plain = vm.sh(remote([*via, ref, "provision-plain", *verify]), ok=False)
        report = report_of(plain)
        print("verifier in a containerd container through nvidia-container-runtime, no GPU:", report.get("status"),
              report.get("error"), flush=True)
        assert plain.returncode == 2 and report["status"] == "error", report
        assert report["error"].startswith("no NVIDIA driver found (libcuda.so.1 not loadable)"), report["error"]
        gpu = vm.sh(remote([*via, "--env", "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all", ref, "provision-gpu",
                            *verify]), ok=False)
        print("ctr with NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all:", gpu.returncode, gpu.stderr.strip()[-400:],
              flush=True)
        assert gpu.returncode != 0 and "nvidia.com/gpu=all" in gpu.stderr and not gpu.stdout.strip(), gpu.stderr
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


def test_a_plan_without_containers_takes_provisions_configuration_back_and_the_running_engines_read_it(vm: VM):
    """The same VM after the tests before: the DeskMini plan itself (no `containers:`), applied with the ledger role
    only. The container-only applies above ran without the ledger role (`--tags`), so the ledger lists none of the
    engines' packages and they stay, installed and running, as an admin's own engines would: only provision's
    configuration goes. Docker's daemon.json loses the keys provision merged, containerd's config.toml comes back as
    the admin wrote it, and both engines are restarted so that what runs is what the files now say: Docker's CDI off
    in `docker info`, containerd started anew. The next apply restarts nothing."""
    from provision.pipeline.plan import plan_for

    assert plan_for(str(DESKMINI), os_override="debian-13").containers is None  # rendered to none/ by the fixture
    for unit in ("docker", "containerd"):
        assert vm.sh(f"systemctl is-active {unit}").stdout.strip() == "active"
    assert json.loads(vm.sh("sudo -n docker info --format '{{json .CDISpecDirs}}'").stdout), "CDI is off already"
    before = {unit: vm.started(unit) for unit in ("docker", "containerd")}
    originals = json.loads(vm.sh("sudo -n cat /var/lib/provision/originals.json").stdout)["files"]
    admins = originals["/etc/containerd/config.toml"]

    dropped = vm.playbook("none", "preflight,ledger")
    text = dropped.stdout + dropped.stderr
    assert dropped.returncode == 0, text[-5000:]
    # The files: the keys provision merged gone from daemon.json (the file deleted if provision made it and nothing
    # else is left), config.toml the admin's bytes again.
    daemon = vm.sh("sudo -n cat /etc/docker/daemon.json", ok=False)
    assert daemon.returncode != 0 or "cdi" not in json.loads(daemon.stdout).get("features", {}), daemon.stdout
    now = vm.sh("sudo -n sha256sum /etc/containerd/config.toml").stdout.split()[0]
    assert now == hashlib.sha256(base64.b64decode(admins["content"])).hexdigest()
    assert "/etc/containerd/conf.d/*.toml" not in vm.sh("sudo -n cat /etc/containerd/config.toml").stdout
    # The engines: still the admin's and running, each started again after provision's change, and what runs is
    # what the files say.
    for unit in ("docker", "containerd"):
        assert vm.sh(f"systemctl is-active {unit}").stdout.strip() == "active"
        assert vm.started(unit) != before[unit], unit
    assert not json.loads(vm.sh("sudo -n docker info --format '{{json .CDISpecDirs}}'").stdout or "null")
    cri = tomllib.loads(vm.sh("sudo -n containerd config dump").stdout)["plugins"]["io.containerd.grpc.v1.cri"]
    assert "nvidia" not in cri["containerd"]["runtimes"], cri["containerd"]["runtimes"]

    # Converged: the next apply changes nothing and restarts nothing.
    after = {unit: vm.started(unit) for unit in ("docker", "containerd")}
    again = vm.playbook("none", "preflight,ledger")
    assert again.returncode == 0 and re.search(r"changed=0\b", again.stdout), again.stdout[-3000:]
    assert {unit: vm.started(unit) for unit in ("docker", "containerd")} == after
