"""The image on the host (issue 51, item 5; provision.image_hosts): the engine's command lines per plan (load, list,
the verifier in a container on the GPU), the refusals `provision build -i` makes before the build (no engine, another
plan, a host that cannot be reached), and the stream into the load command with its progress. The plans come from
test_containers_plan's fixture table; the commands and the unreachable host are real processes on this machine."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from provision.errors import RunnerError, UsageError
from provision.image_hosts import (
    Engine,
    check_commands,
    engine_of,
    load_command,
    probe_host,
    progress_text,
    refuse_other_plans,
    send,
)
from provision.resolver import resolve
from tests.unit.test_containers_plan import DB, profile

ROOT = Path(__file__).resolve().parents[2]


def plan(os: str = "debian-13", containers: str = "docker"):
    return resolve(profile(os, containers), DB)


@pytest.mark.parametrize(("os", "containers", "gpu_args"), [
    ("debian-13", "docker", "--device nvidia.com/gpu=all"),  # docker.io 26.1.5: native CDI
    ("debian-12", "docker", "--runtime nvidia -e NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"),  # 20.10: the runtime
    ("debian-12", "docker-ce", "--device nvidia.com/gpu=all"),
])
def test_docker_plans_load_and_run_the_verifier_through_sudo(os, containers, gpu_args):
    p = plan(os, containers)
    engine = engine_of(p, "profiles/t.yaml")
    assert shlex.join(engine.load()) == "sudo -n docker load"
    assert shlex.join(engine.verify(p, "provision/t:" + os)) == (
        f"sudo -n docker run --rm {gpu_args} provision/t:{os} {p.python.venv}/bin/python -m provision.verify --json")
    assert shlex.join(engine.images(p)) == (
        f"sudo -n docker images --filter label=io.provision.profile=t --filter label=io.provision.os={os} "
        "--format '{{.Repository}}:{{.Tag}}'")


def test_podman_loads_and_runs_as_the_notebook_account():
    p = plan("debian-13", "podman")
    engine = engine_of(p, "profiles/t.yaml")
    assert engine.as_account == "ml"
    assert shlex.join(engine.load()) == "sudo -n -u ml -H sh -c 'cd \"$HOME\" && exec podman \"$@\"' podman load"
    assert engine.verify(p, "IMG")[-9:] == ["run", "--rm", "--device", "nvidia.com/gpu=all", "IMG",
                                            f"{p.python.venv}/bin/python", "-m", "provision.verify", "--json"]
    # The prefix runs podman itself as the account, with its arguments passed through unchanged.
    run = subprocess.run(["sh", "-c", engine.prefix[-2].replace("podman", "printf '%s|'"), "x", "a b", "c"],
                         capture_output=True, text=True, check=True)
    assert run.stdout == "a b|c|"


def test_check_commands_reach_test_host_as_json_with_the_image_left_open():
    commands = check_commands(plan("debian-13", "podman"))
    assert json.loads(json.dumps(commands)) == commands
    assert commands["engine"] == "podman" and "IMAGE" in commands["verify"]
    assert check_commands(resolve(profile("debian-13", "none"), DB)) is None
    assert check_commands(plan("debian-13", "containerd")) is None


def test_a_plan_without_an_engine_to_load_into_is_refused_in_one_line():
    with pytest.raises(UsageError) as exc:
        engine_of(resolve(profile("debian-13", "none"), DB), "profiles/t.yaml")
    line = str(exc.value)
    assert line.startswith("profiles/t.yaml: software.containers: none") and "\n" not in line
    assert "software.containers: docker" in line
    with pytest.raises(UsageError, match=r"software.containers: containerd: a Kubernetes node takes its images from a "
                                         r"registry"):
        engine_of(plan("debian-13", "containerd"), "profiles/t.yaml")


def test_hosts_of_another_plan_are_refused_by_name():
    p13, p12 = plan("debian-13"), plan("debian-12")
    refuse_other_plans(p13, {"a": p13, "b": p13}, "inv.yml", "profiles/t.yaml")
    with pytest.raises(UsageError) as exc:
        refuse_other_plans(p13, {"a": p13, "b": p12, "c": p12}, "inv.yml", "profiles/t.yaml")
    assert str(exc.value).startswith("inv.yml: host(s) b, c: their plan is not the one profiles/t.yaml makes")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_host_is_said_in_one_line():
    engine = engine_of(plan(), "t")
    ssh = ["ssh", "-p", str(_closed_port()), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
           "nobody@127.0.0.1"]
    why = probe_host("h", ssh, engine, timeout=30)
    assert why is not None and why.startswith("cannot be reached: nothing accepts SSH connections"), why
    assert probe_host("h", None, engine).startswith("not reached over SSH")


def test_the_archive_streams_into_the_load_command_with_its_progress(tmp_path):
    engine = engine_of(plan(), "t")
    assert load_command(["ssh", "-p", "22", "admin@h"], engine) == [
        "ssh", "-p", "22", "-o", "BatchMode=yes", "admin@h", "sudo -n docker load"]
    dest = tmp_path / "got.tar"
    chunks = [b"x" * 1000, b"y" * 500]
    seen: list[tuple[int, int]] = []
    sent = send(iter(chunks), "h", ["sh", "-c", f"cat > {dest}"], engine, 1500,
                lambda host, n, total, s: seen.append((n, total)))
    assert dest.read_bytes() == b"".join(chunks) and sent.bytes == 1500
    assert seen == [(1000, 1500), (1500, 1500)]
    assert progress_text("h", 750_000_000, 1_500_000_000, 10.0) == "h: 750 MB of 1500 MB (50%), 75.0 MB/s"


def test_a_load_that_fails_says_the_engines_last_line():
    engine = Engine("docker", ("sudo", "-n", "docker"), "root")
    with pytest.raises(RunnerError) as exc:
        send(iter([b"z" * 10]), "h", ["sh", "-c", "cat >/dev/null; echo 'Error: no space left on device' >&2; exit 1"],
             engine, 10, lambda *a: None)
    assert str(exc.value) == "h: `docker load` failed after 0 MB: Error: no space left on device"


def test_build_with_an_inventory_refuses_a_profile_without_containers_before_building(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    gpu1:\n      ansible_host: 127.0.0.1\n")
    proc = subprocess.run([sys.executable, "-m", "provision", "build", "profiles/deskmini.yaml", "-i", str(inventory)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "profiles/deskmini.yaml: software.containers: none" in lines[0], proc.stderr
    assert "building" not in proc.stdout + proc.stderr


def test_build_with_an_inventory_refuses_hosts_of_another_plan_and_unreachable_ones_before_building(tmp_path):
    text = (ROOT / "profiles/deskmini.yaml").read_text()
    assert "\nsoftware:\n" in text
    (tmp_path / "box.yaml").write_text(text.replace("\nsoftware:\n", "\nsoftware:\n  containers: docker\n"))
    port = _closed_port()
    host = (f"ansible_host: 127.0.0.1, ansible_port: {port}, ansible_user: nobody, "
            "ansible_ssh_common_args: '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  hosts:\n    gpu1: {{{host}}}\n    gpu2: {{{host}, provision_profile: deskmini}}\n")

    def build(*extra: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "provision", "build", str(tmp_path / "box.yaml"), "-i",
                               str(inventory), *extra], capture_output=True, text=True, cwd=ROOT, timeout=120)

    other = build()
    assert other.returncode == 2, other.stdout + other.stderr
    assert "host(s) gpu2: their plan is not the one" in other.stderr and len(other.stderr.strip().splitlines()) == 1
    unreachable = build("--limit", "gpu1")
    assert unreachable.returncode == 3, unreachable.stdout + unreachable.stderr
    line = unreachable.stderr.strip()
    assert "the image cannot go to gpu1: cannot be reached: nothing accepts SSH connections" in line, line
    assert len(line.splitlines()) == 1 and "building" not in unreachable.stdout
