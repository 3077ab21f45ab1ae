"""A missing external program (the docker CLI, ssh, qemu-img, debootstrap) or an engine that does not answer is one
`error:` line and exit 3 (EXIT_EXTERNAL), never a traceback: the commands run with PATH holding none of them.

Ansible is not here: provision runs ansible-playbook and ansible-inventory from its own interpreter's environment
(a dependency of the package), never from PATH.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provision import procs, sandbox, tunnel
from provision.errors import EXIT_EXTERNAL, RunnerError

ROOT = Path(__file__).resolve().parents[2]
NAME = "pv-unit-notool"  # never created: every command below stops before it would start anything


@pytest.fixture
def bare(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """An environment whose PATH is an empty folder, with the controller's cache and state in tmp_path."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {"PATH": str(empty), "HOME": str(tmp_path), "PROVISION_CACHE": str(tmp_path / "cache"),
           "PROVISION_STATE": str(tmp_path / "state"), "LANG": "C.UTF-8"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


def provision(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "says"), [
    (["sandbox", "up", NAME], "'docker' is not installed or not on PATH (apt-get install docker.io)"),
    (["sandbox", "down", NAME], "'docker' is not installed or not on PATH (apt-get install docker.io)"),
    (["apply", "profiles/deskmini.yaml", "--sandbox", NAME, "--os", "debian-13", "--yes"],
     "'docker' is not installed or not on PATH"),
    (["check", "profiles/deskmini.yaml", "--sandbox", NAME, "--os", "debian-13"],
     "'docker' is not installed or not on PATH"),
    (["sandbox", "up", "--vm", NAME], "a VM sandbox needs qemu-system-x86_64, qemu-img, mkfs.ext4, debootstrap"),
])
def test_a_missing_tool_is_one_line_and_exit_3(bare: dict[str, str], args: list[str], says: str) -> None:
    proc = provision(bare, *args)
    assert proc.returncode == EXIT_EXTERNAL, proc.stdout + proc.stderr
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr  # one line, nothing before or after it
    assert proc.stderr.startswith("error: ") and says in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_a_docker_engine_that_does_not_answer_is_one_line_and_exit_3(bare: dict[str, str], tmp_path: Path) -> None:
    proc = provision(bare | {"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}, "build", "profiles/deskmini.yaml")
    assert proc.returncode == EXIT_EXTERNAL, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"the Docker engine at unix://{tmp_path}/no-engine.sock does not answer" in errors[0]
    assert "Traceback" not in proc.stderr


def test_without_ssh_a_tunnel_is_one_runner_error(bare: dict[str, str]) -> None:
    with pytest.raises(RunnerError) as caught:
        tunnel.open_tunnel("h1", ["ssh", "-p", "2222", "admin@127.0.0.1"], 8888, timeout=2)
    assert caught.value.exit_code == EXIT_EXTERNAL
    assert caught.value.lines() == ["h1: the SSH tunnel to its Jupyter: 'ssh' is not installed or not on PATH "
                                    "(apt-get install openssh-client)"]


def test_without_ssh_waiting_for_a_sandbox_is_one_runner_error(bare: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(RunnerError) as caught:
        sandbox.wait_ssh(NAME, sandbox.free_port(), tmp_path / "key", timeout=2)
    assert caught.value.lines() == [f"sandbox {NAME}: 'ssh' is not installed or not on PATH "
                                    "(apt-get install openssh-client)"]


@pytest.mark.parametrize(("tool", "package"), [("qemu-img", "qemu-utils"), ("ssh-keygen", "openssh-client"),
                                               ("debootstrap", "debootstrap")])
def test_run_tool_names_the_missing_program_and_its_package(bare: dict[str, str], tool: str, package: str) -> None:
    with pytest.raises(RunnerError) as caught:
        procs.run_tool([tool, "--version"], "make something")
    assert caught.value.lines() == [f"make something: '{tool}' is not installed or not on PATH "
                                    f"(apt-get install {package})"]


def test_procs_run_of_a_missing_program_is_a_runner_error(bare: dict[str, str]) -> None:
    with pytest.raises(RunnerError, match="'no-such-program' is not installed or not on PATH"):
        procs.run(["no-such-program"])
