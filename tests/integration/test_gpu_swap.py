"""The GPU replaced in the same box (issue 28): a stock Debian 12 host over SSH applied with the K80 plan (R470's
Tesla packages, CUDA 11.7 wheels), then with the GTX 1070 plan (R535, CUDA 12.6 wheels). One apply converges: the
old branch's packages are purged, no second libcuda is left, the CUDA 11 wheels are gone, the check passes, the next
apply changes nothing and a file in the account's home stays.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("gpu-swap")
KEEP = "/home/ml/keep.txt"

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.long]


def provision(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, timeout=2400)


def sh(command: str, user: str = "root") -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", command], capture_output=True, text=True,
                          timeout=600)


def packages() -> dict[str, str]:
    lines = sh("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'").stdout.splitlines()
    return {parts[1]: parts[2] for parts in (line.split() for line in lines) if parts[0] == "ii"}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from provision import sandbox

    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    yield os.environ | {"PROVISION_STATE": str(tmp_path_factory.mktemp("swap") / "state")}
    sandbox.remove(NAME)


def apply(env: dict, profile: str, *extra: str) -> subprocess.CompletedProcess:
    return provision(env, "apply", f"profiles/{profile}.yaml", "--os", "debian-12", "--sandbox", NAME,
                     "--skip-frameworks", "--yes", *extra)


def test_k80_r470_then_gtx1070_r535(env):
    first = apply(env, "aws-p2")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    before = packages()
    assert any(name.startswith("nvidia-tesla-470") for name in before), sorted(before)
    assert sh(f"echo mine > {KEEP}", user="ml").returncode == 0

    swap = apply(env, "deskmini")
    assert swap.returncode == 0, swap.stdout[-4000:] + swap.stderr[-4000:]
    after = packages()
    assert not [name for name in after if "470" in name], sorted(after)
    libcuda = sorted(name for name in after if re.match(r"lib(nvidia-tesla-470-)?cuda1$", name))
    assert libcuda == ["libcuda1"] and after["libcuda1"].startswith("535."), (libcuda, after.get("libcuda1"))
    # Every libcuda.so on the host is R535's: the links resolve (inside the host) to one 535 library.
    real = set(sh("find / -xdev -name 'libcuda.so*' -not -path '/proc/*' -exec readlink -f {} +").stdout.split())
    assert real and all(".so.535." in path for path in real), real
    wheels = sh("/opt/provision/venv/bin/python -I -m pip list --format freeze", user="ml").stdout
    assert "-cu11" not in wheels and "nvidia-cuda-runtime-cu12==12.6.77" in wheels, wheels

    again = apply(env, "deskmini", "--skip-check")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert re.search(r"changed=0\b", again.stdout), again.stdout[-3000:]
    assert sh(f"cat {KEEP}").stdout == "mine\n"
