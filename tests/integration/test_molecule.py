"""Run each role's molecule `default` scenario (create, converge, idempotence, verify, destroy) in local containers.

The platforms are the sandbox images provision/debian:12 and :13 (built here with debootstrap when missing) with
the same apt and pip cache mounts as provision.sandbox, passed to molecule.yml through PROVISION_* variables.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from provision import sandbox

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
# Cheapest first: a failure in python_env (which the others' prepare step applies) shows up early.
# nvidia_driver's scenario runs in the default command: its three driver variants (R535 and R470 on Debian 12, R550
# on 13) are tested nowhere else. The other five roles run on stock hosts over SSH in test_apply*.py (every role,
# then a second apply that must change nothing), so their scenarios (3-5 minutes each, 18 minutes together on
# 2 cores, 2026-11-23) are `long`, to keep the default command under 50 minutes.
LONG = pytest.mark.long
# container_engine and nvidia_container_toolkit (issue 51) install docker.io (and podman) in their scenarios, more
# than 2 minutes each on 2 cores; tests/integration/test_container_roles.py applies both roles to a stock host over
# SSH in the default command (refusals, merge, pin, idempotence, the ledger's take-back), so theirs are `long` too.
ROLES = [pytest.param("python_env", marks=LONG), "nvidia_driver", pytest.param("cuda", marks=LONG),
         pytest.param("jupyter", marks=LONG), pytest.param("cudnn", marks=LONG), pytest.param("gpu_verify", marks=LONG),
         pytest.param("container_engine", marks=LONG), pytest.param("nvidia_container_toolkit", marks=LONG)]

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI on this machine"),
    pytest.mark.skipif(
        not (BIN / "molecule").exists(), reason="molecule is not installed next to this Python (test extra)"
    ),
]


@pytest.fixture(scope="module")
def molecule_env() -> dict[str, str]:
    for release in ("12", "13"):
        sandbox.ensure_base_image(release)
    env = dict(os.environ)
    env["PATH"] = f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    for release in ("12", "13"):
        mounts = sandbox.cache_mounts(release)
        apt = mounts[1].split(":")[0]
        env[f"PROVISION_APT_CACHE_{release}"] = apt
        env["PROVISION_PIP_CACHE"] = mounts[3].split(":")[0]
    env.setdefault("ANSIBLE_FORCE_COLOR", "false")
    env["PY_COLORS"] = "0"
    return env


def run_scenario(role: str, scenario: str, env: dict[str, str]) -> None:
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "molecule"), "test", "-s", scenario],
        cwd=REPO / "roles" / role,
        env=env,
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - started
    print(f"molecule {role}/{scenario}: rc={proc.returncode} in {elapsed:.0f}s")
    assert proc.returncode == 0, f"molecule test for {role}/{scenario} failed:\n{(proc.stdout + proc.stderr)[-12000:]}"


@pytest.mark.parametrize("role", ROLES)
def test_default_scenario(role: str, molecule_env: dict[str, str]) -> None:
    env = molecule_env
    if role == "nvidia_container_toolkit":
        # NVIDIA's libnvidia-container repository cannot be reached here: the stand-in built from NVIDIA's source
        # (tests/support/standin_container_toolkit.py), served from this process for the scenario's molecule.yml.
        from tests.support.standin_container_toolkit import standin_container_toolkit_repo

        repo = standin_container_toolkit_repo()
        env = {**molecule_env, "PROVISION_STANDIN_CTK_URL": repo.url, "PROVISION_STANDIN_CTK_KEY_URL": repo.key_url,
               "PROVISION_STANDIN_CTK_FINGERPRINT": repo.fingerprint}
    run_scenario(role, "default", env)


@pytest.mark.heavy
@pytest.mark.skipif(
    os.environ.get("PROVISION_HEAVY") != "1", reason="set PROVISION_HEAVY=1 to install torch 2.0.1 (~2 GB)"
)
def test_python_env_heavy_torch_for_k80(molecule_env: dict[str, str]) -> None:
    run_scenario("python_env", "heavy", molecule_env)
