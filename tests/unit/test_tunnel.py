"""provision.tunnel's bookkeeping: distinct local ports, records of tunnels that ended. Starting and stopping real
tunnels is tests/integration/test_browser.py's (a sandbox's sshd at the other end)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from provision import tunnel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_port_in_use_or_held_by_another_tunnel_is_skipped():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        chosen = tunnel.free_port(port, taken={port + 1})
        assert chosen not in (port, port + 1)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", chosen))  # really free


def test_a_fleet_gets_one_port_per_host():
    taken: set[int] = set()
    for _ in range(4):
        taken.add(tunnel.free_port(18888, taken))
    assert len(taken) == 4


def _record(host: str, pid: int) -> Path:
    path = tunnel.tunnels_dir() / f"{host}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": tunnel.SCHEMA, "host": host, "pid": pid, "local_port": 18888,
                                "remote_port": 8888, "ssh": ["ssh", "admin@127.0.0.1"], "started": "now",
                                "log": "/dev/null"}))
    return path


def test_a_record_whose_ssh_ended_is_forgotten():
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    path = _record("gone", int(proc.stdout))
    assert tunnel.read("gone") is None and not path.exists()
    assert tunnel.all_tunnels() == [] and tunnel.stop("gone") is False


def test_a_pid_reused_by_another_program_is_not_a_tunnel_and_is_not_killed():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        _record("reused", other.pid)
        assert tunnel.read("reused") is None
        assert tunnel.stop("reused") is False
        assert other.poll() is None  # still running: stop() only signals the ssh it started
    finally:
        other.kill()
        other.wait()


def test_installed_line_names_the_versions_the_host_reported():
    from provision.pipeline.plan import plan_for
    from provision.pipeline.report import installed_line

    plan = plan_for(ROOT / "profiles/deskmini.yaml", os_override="debian-13")
    installed = {"packages": {"libcuda1": "550.163.01-2", "nvidia-driver": None},
                 "wheels": {"nvidia-cuda-runtime-cu12": "12.6.77", "nvidia-cudnn-cu12": "9.10.2.21",
                            "numpy": "2.2.6", "jupyterlab": "4.4.10"}}
    line = installed_line(plan, installed, skip_frameworks=True)
    for part in ("NVIDIA driver 550.163.01-2 (user space)", "CUDA 12.6.77", "cuDNN 9.10.2.21", "NumPy 2.2.6",
                 "JupyterLab 4.4.10", "torch skipped (--skip-frameworks)"):
        assert part in line, line
