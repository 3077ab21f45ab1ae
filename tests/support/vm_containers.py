"""What the VM tests of GPU containers share (tests/integration/test_vm_containers.py on Debian 13,
test_vm_containers_debian12.py on Debian 12): the VM itself (`provision sandbox up --vm`, the stand-in toolkit
repository it reaches, each engine's profile rendered for it), a command on it over the inventory's ssh, an apply of
a rendered playbook with its output kept, an image loaded into its engine as `provision build -i` loads it, the
stand-in image labelled as a plan's, and the verifier's JSON report read from a container's output."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
DESKMINI = ROOT / "profiles/deskmini.yaml"
APPLY_TIMEOUT = 3 * 3600


def run(cmd: list[str], *, env: dict[str, str], cwd: Path = ROOT, timeout: float = 1800,
        log: Path | None = None) -> subprocess.CompletedProcess:
    if log is None:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    out, err = log.with_suffix(".out"), log.with_suffix(".err")
    print(f"{log.name}: output in {out} and {err}", flush=True)
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.run(cmd, stdout=o, stderr=e, text=True, cwd=cwd, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text())


@dataclass(frozen=True)
class VM:
    """A running VM host: its name, the inventory `sandbox up` wrote, the controller's environment for provision and
    ansible-playbook, and the test's folder (each engine's profile ENGINE.yaml and its rendered playbook ENGINE/)."""

    name: str
    inventory: Path
    env: dict[str, str]
    tmp: Path

    def ssh_argv(self) -> list[str]:
        from provision.ssh import ssh_command

        return ssh_command(self.name, YAML(typ="safe").load(self.inventory.read_text())["all"]["hosts"][self.name])

    def sh(self, command: str, *, ok: bool = True) -> subprocess.CompletedProcess:
        """COMMAND on the VM as the inventory's (sudo) user; with ok, it must exit 0."""
        proc = subprocess.run([*self.ssh_argv(), command], capture_output=True, text=True, timeout=900,
                              stdin=subprocess.DEVNULL)
        if ok:
            assert proc.returncode == 0, f"{command}: {proc.stderr[-2000:]}"
        return proc

    def provision(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
        return run([sys.executable, "-m", "provision", *args], env=self.env, timeout=timeout)

    def playbook(self, rendered: str, tags: str, *extra: str) -> subprocess.CompletedProcess:
        """The playbook `provision render` wrote to RENDERED/, with only TAGS."""
        started = time.time()
        proc = run([str(Path(sys.executable).parent / "ansible-playbook"), "site.yml", *extra, "--tags", tags],
                   env=self.env, cwd=self.tmp / rendered, timeout=APPLY_TIMEOUT, log=self.tmp / f"apply-{rendered}")
        print(f"apply {rendered} ({tags}): exit {proc.returncode} in {time.time() - started:.0f} s", flush=True)
        return proc

    def started(self, unit: str) -> str:
        """When UNIT last started, and its PID: changes with every restart."""
        return self.sh(f"systemctl show -p ActiveEnterTimestampMonotonic -p MainPID {unit}").stdout

    def load(self, plan, tag: str) -> float:
        """The image into the plan's engine on the VM by provision.image_hosts, as `provision build -i` does; returns
        seconds."""
        import docker

        from provision.image_hosts import engine_of, load_command, send

        engine = engine_of(plan, plan.profile)
        api = docker.APIClient(version="auto")
        size = int(api.inspect_image(tag)["Size"])
        sent = send(api.get_image(tag), self.name, load_command(self.ssh_argv(), engine), engine, size,
                    lambda *a: None)
        print(f"loaded {tag} ({size / 1e6:.0f} MB) by {engine.name} in {sent.seconds:.0f} s", flush=True)
        return sent.seconds


def with_containers(engine: str) -> str:
    """The DeskMini profile with `software.containers: ENGINE`."""
    base = DESKMINI.read_text()
    assert "\nsoftware:\n" in base
    return base.replace("\nsoftware:\n", f"\nsoftware:\n  containers: {engine}\n")


@contextmanager
def container_vm(name: str, os_id: str, engines: tuple[str, ...], tmp: Path) -> Iterator[VM]:
    """A stock VM of OS_ID (`provision sandbox up --vm`, made for the first engine's profile), the stand-in toolkit
    repository served from this process (the guest reaches the controller's loopback as QEMU's user-network gateway;
    its settings in standin.json, for `-e @`), and each engine's profile rendered for the VM into ENGINE/ (the
    DeskMini profile itself into none/). The VM is taken down at the end, whatever happened."""
    from provision import vm as qemu
    from tests.support.standin_container_toolkit import standin_container_toolkit_repo

    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env |= {"PROVISION_STATE": str(tmp / "state"), "ANSIBLE_FORCE_COLOR": "false",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    repo = standin_container_toolkit_repo("127.0.0.1")
    (tmp / "standin.json").write_text(json.dumps({
        "nvidia_container_toolkit_repo_url": repo.url.replace("127.0.0.1", qemu.GATEWAY),
        "nvidia_container_toolkit_repo_key_url": repo.key_url.replace("127.0.0.1", qemu.GATEWAY),
        "nvidia_container_toolkit_repo_key_fingerprint": repo.fingerprint}))
    profiles = {engine: tmp / f"{engine}.yaml" for engine in engines}
    for engine, path in profiles.items():
        path.write_text(with_containers(engine))
    vm = VM(name, tmp / "vm.yml", env, tmp)
    vm.provision("sandbox", "down", name, timeout=120)
    try:
        started = time.time()
        up = vm.provision("sandbox", "up", "--vm", name, "--os", os_id, "--profile", str(profiles[engines[0]]),
                          "-o", str(vm.inventory))
        assert up.returncode == 0, up.stdout + up.stderr
        print(f"VM ({os_id}) up in {time.time() - started:.0f} s", flush=True)
        for rendered, profile in (*profiles.items(), ("none", DESKMINI)):
            out = vm.provision("render", str(profile), "--os", os_id, "-o", str(tmp / rendered), "-i",
                               str(vm.inventory), timeout=300)
            assert out.returncode == 0, out.stdout + out.stderr
        yield vm
    finally:
        vm.provision("sandbox", "down", name, timeout=120)


def standin_image(plan, tag: str, tmp: Path) -> str:
    """provision/debian:13 with provision/verify and the plan's environment path: labelled as the plan's image (profile,
    OS release) and as a stand-in."""
    ctx = tmp / ("image-" + re.sub(r"\W+", "-", tag))  # one context per image: the tests each make their own
    shutil.copytree(ROOT / "provision" / "verify", ctx / "provision" / "verify",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (ctx / "provision" / "__init__.py").write_text("")
    venv = plan.python.venv
    (ctx / "Dockerfile").write_text(
        "FROM provision/debian:13\n"
        # The verifier checks its results with NumPy: Debian's, seen through the environment.
        "RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-numpy >/dev/null "
        "&& rm -rf /var/lib/apt/lists/*\n"
        f"RUN python3 -m venv --without-pip --system-site-packages {venv}\n"
        f"COPY provision {venv}/lib/provision-verify/provision\n"
        f"ENV PYTHONPATH={venv}/lib/provision-verify\n"
        f'LABEL io.provision.profile="{plan.profile}" io.provision.os="{plan.target.os_id}" '
        'io.provision.standin="provision/verify on provision/debian:13; not the image provision build makes"\n')
    proc = subprocess.run(["docker", "build", "-q", "-t", tag, str(ctx)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return tag


def report_of(proc: subprocess.CompletedProcess) -> dict:
    try:
        return json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"no JSON report (exit {proc.returncode}): {proc.stderr[-1500:]}") from None


# What each engine says when the GPU's CDI name has no spec (seen on the VMs): the check's line must be the engine's
# own, so that a check that ran the other engine's command cannot pass for this one.
ENGINE_WORDS = {"docker": "docker: Error response from daemon:", "podman": "Error: setting up CDI devices:"}


def image_check_says_no_gpu(checked: subprocess.CompletedProcess, image: str, engine: str) -> str:
    """`provision check` on a VM that has only the container roles: exit 1 (the driver, the environment and Jupyter
    are not there), and the image's own check FAILED with its line: the container did not run, and why, in the
    engine's words about the GPU's CDI name. Returns that line."""
    said = checked.stdout + checked.stderr
    print("provision check:", checked.returncode, *said.strip().splitlines()[-12:], sep="\n", flush=True)
    assert checked.returncode == 1, said[-3000:]
    assert "Traceback" not in said, said[-3000:]
    image_check = [line for line in said.splitlines() if "test_the_images_verifier_runs_on_the_gpu" in line]
    assert image_check and all("FAILED" in line for line in image_check), said[-3000:]
    why = re.findall(rf"{re.escape(image)}: the container did not run its verifier \(exit \d+\): .*", said)
    assert why and all("nvidia.com/gpu=all" in line and ENGINE_WORDS[engine] in line for line in why), said[-3000:]
    return why[0]
