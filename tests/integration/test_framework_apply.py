"""A plan with a real framework applied to a stock SSH host: the DeskMini's PyPI torch 2.7.1 (the CUDA 12.6 build,
sm_50-sm_90) with the PyTorch index off, installed for real (about 2.5 GB of wheels with its nvidia-* wheels, from the
controller's wheelhouse), then verified on the host in compile-only mode (sandboxes have no GPU; provision_sandbox
chooses compile-only) including the check of torch's own kernels against sm_61.

`heavy`: the first run downloads the wheels (PROVISION_HEAVY=1 to run; later runs take them from the wheelhouse).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision import sandbox
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
HOST = sandbox_name("fw-deskmini")

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.heavy]


def provision(env, *args: str, timeout: float = 3000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, timeout=timeout)


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    state = tmp_path_factory.mktemp("fw") / "state"
    env = os.environ | {"PROVISION_STATE": str(state)}
    proc = provision(env, "apply", "profiles/deskmini.yaml", "--os", "debian-13", "--sandbox", HOST, "--yes",
                     "--index", "pytorch=off")
    yield proc, state
    sandbox.remove(HOST)


def _exec(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", HOST, *cmd], capture_output=True, text=True, timeout=300)


def test_apply_installs_the_pypi_torch_the_plan_picked(applied):
    proc, _ = applied
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "torch==2.7.1" in proc.stdout  # the plan printed before the run: the PyPI build, no --index-url
    assert "download.pytorch.org" not in proc.stdout
    version = _exec("/opt/provision/venv/bin/python", "-c",
                    "import importlib.metadata as m; print(m.version('torch'), m.version('nvidia-cuda-nvrtc-cu12'))")
    assert version.returncode == 0, version.stderr
    assert version.stdout.split() == ["2.7.1", "12.6.77"]  # the framework's pin, not pypi.yaml's 12.6.85


def test_the_hosts_verification_checked_torchs_kernels_against_sm_61(applied):
    proc, _ = applied
    report = json.loads(_exec("cat", "/var/lib/provision/verify/verify.json").stdout)
    assert report["mode"] == "compile-only"
    checks = {c["name"]: c for c in report["checks"]}
    kernels = checks["framework-kernels:pytorch"]
    assert kernels["status"] == "PASS", kernels
    assert "cubin sm_60" in kernels["detail"]
    assert "sm_90" in kernels["figures"]["cubin"] and "sm_61" not in kernels["figures"]["cubin"]
    assert checks["framework:pytorch"]["status"] == "PASS", checks["framework:pytorch"]
    assert report["status"] == "pass"
