"""A real Debian 12 -> 13 dist-upgrade (issue 28): a stock Debian 12 host over SSH applied with the DeskMini plan
(frameworks skipped), then upgraded as its owner would upgrade it (the apt sources switched from bookworm to trixie,
`apt-get full-upgrade` as root, provision's driver pin left in place), then applied with the same profile for
Debian 13. One apply converges: the environment is made again on Debian 13's Python (3.11 -> 3.13), the driver
packages follow the new plan's branch, the check passes, the next apply changes nothing and a file planted in the
account's home stays.

`long`: the upgrade downloads and installs a whole release (4 min 45 s on 2 cores, both applies included).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.apt import APT_WAIT
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("dist-upgrade")
KEEP = "/home/ml/notes/keep.txt"
VENV_PYTHON = "/opt/provision/venv/bin/python"

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.long]


def provision(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, timeout=2400)


def sh(command: str, user: str = "root", timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", command], capture_output=True, text=True,
                          timeout=timeout)


def apply(env: dict, os_name: str, *extra: str) -> subprocess.CompletedProcess:
    return provision(env, "apply", "profiles/deskmini.yaml", "--os", os_name, "--sandbox", NAME,
                     "--skip-frameworks", "--yes", *extra)


def packages() -> dict[str, str]:
    lines = sh("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n'").stdout.splitlines()
    return {parts[1]: parts[2] for parts in (line.split() for line in lines) if parts[0] == "ii"}


def venv_python() -> str:
    out = sh(f"{VENV_PYTHON} -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'", user="ml")
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from provision import sandbox

    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    yield os.environ | {"PROVISION_STATE": str(tmp_path_factory.mktemp("upgrade") / "state")}
    sandbox.remove(NAME)


def test_debian_12_dist_upgraded_to_13(env):
    first = apply(env, "debian-12")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    assert venv_python() == "3.11"
    assert packages()["libcuda1"].startswith("535."), packages().get("libcuda1")
    assert sh(f"mkdir -p {KEEP.rsplit('/', 1)[0]} && echo mine > {KEEP}", user="ml").returncode == 0

    # The owner's dist-upgrade: every apt source that names bookworm names trixie, then a full upgrade.
    listed = sh("grep -rl bookworm /etc/apt/sources.list /etc/apt/sources.list.d 2>/dev/null")
    assert listed.stdout.strip(), "no apt source names bookworm"
    upgrade = sh(APT_WAIT + "sed -i 's/bookworm/trixie/g' $(grep -rl bookworm /etc/apt/sources.list /etc/apt/sources.list.d "
                 "2>/dev/null) && apt-get update -q && apt_wait env DEBIAN_FRONTEND=noninteractive apt-get -y -q "
                 "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold full-upgrade",
                 timeout=3000)
    assert upgrade.returncode == 0, upgrade.stdout[-4000:] + upgrade.stderr[-4000:]
    assert 'VERSION_ID="13"' in sh("cat /etc/os-release").stdout
    assert sh("test -x /usr/bin/python3.13").returncode == 0
    # full-upgrade leaves python3.11 installed, but the environment's bin/python goes through /usr/bin/python3, now
    # 3.13, which does not see its packages (lib/python3.11): no dangling link; its missing bin/python3.13 tells the
    # apply to make it again (plugins/modules/provision_ledger.py, venv_runs).

    second = apply(env, "debian-13")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert "FAILED" not in second.stdout
    assert venv_python() == "3.13"
    assert sh(f"{VENV_PYTHON} -c 'import jupyterlab'", user="ml").returncode == 0
    assert sh("systemctl is-active provision-jupyter").stdout.strip() == "active"
    after = packages()
    assert after["libcuda1"].startswith("550."), after.get("libcuda1")
    assert not [name for name in after if "535" in name], sorted(after)

    again = apply(env, "debian-13", "--skip-check")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert re.search(r"changed=0\b", again.stdout), again.stdout[-3000:]
    assert sh(f"cat {KEEP}").stdout == "mine\n"
