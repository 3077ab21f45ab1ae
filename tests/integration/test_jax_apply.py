"""JAX applied to a stock SSH host for real: the DeskMini (GTX 1070, sm_61) on Debian 13 with `frameworks: [{name:
jax}]` plans jax[cuda12]==0.12.0.1 (the CUDA 13 plugin starts at sm_75), installed with its plugin, PJRT runtime and
NVIDIA's wheels (about 3 GB, from the controller's wheelhouse), then verified on the host in compile-only mode
(sandboxes have no GPU): framework:jax imports it, framework-kernels:jax reads the plugin's libraries against sm_61.

`heavy`: the first run downloads the wheels (PROVISION_HEAVY=1 to run; later runs take them from the wheelhouse).
2026-11-26, first run on the 2-core build machine: 2 passed in 195 s (downloads included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision import sandbox
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
HOST = sandbox_name("fw-jax")

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.heavy]


def provision(env, *args: str, timeout: float = 3000) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, timeout=timeout)


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    work = tmp_path_factory.mktemp("jax")
    profile = yaml.safe_load((ROOT / "profiles" / "deskmini.yaml").read_text())
    profile["name"] = "deskmini-jax"
    profile["software"]["frameworks"] = [{"name": "jax"}]
    path = work / "deskmini-jax.yaml"
    path.write_text(yaml.safe_dump(profile))
    env = os.environ | {"PROVISION_STATE": str(work / "state")}
    proc = provision(env, "apply", str(path), "--os", "debian-13", "--sandbox", HOST, "--yes")
    yield proc
    sandbox.remove(HOST)


def _exec(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", HOST, *cmd], capture_output=True, text=True, timeout=300)


def test_apply_installs_jax_with_its_cuda12_plugin(applied):
    assert applied.returncode == 0, applied.stdout[-4000:] + applied.stderr[-4000:]
    assert "jax[cuda12]==0.12.0.1" in applied.stdout  # the plan printed before the run
    versions = _exec("/opt/provision/venv/bin/python", "-c",
                     "import importlib.metadata as m; print(*(m.version(p) for p in "
                     "('jax', 'jaxlib', 'jax-cuda12-plugin', 'jax-cuda12-pjrt', 'nvidia-cudnn-cu12')))")
    assert versions.returncode == 0, versions.stderr
    # jax and its CUDA 12 plugin at the planned release; cuDNN at the plan's pin inside the plugin's range
    assert versions.stdout.split() == ["0.12.0.1"] * 4 + ["9.10.2.21"]


def test_the_hosts_verification_checked_jax_and_its_plugins_kernels_against_sm_61(applied):
    report = json.loads(_exec("cat", "/var/lib/provision/verify/verify.json").stdout)
    assert report["mode"] == "compile-only"
    checks = {c["name"]: c for c in report["checks"]}
    kernels = checks["framework-kernels:jax"]
    assert kernels["status"] == "PASS", kernels
    assert "cubin sm_60" in kernels["detail"] and "xla_cuda_plugin.so" in kernels["detail"]
    assert kernels["detail"].startswith("jax 0.12.0.1 [cuda"), kernels  # the installed jax, read from its metadata
    assert "sm_50" in kernels["figures"]["cubin"] and "sm_61" not in kernels["figures"]["cubin"]
    assert checks["framework:jax"]["status"] == "PASS", checks["framework:jax"]
    assert report["status"] == "pass"
