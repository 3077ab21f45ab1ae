"""A dist-upgrade under an environment built on a managed Python (issue 38): the OS is upgraded, the environment
is not touched.

A stock Debian 12 host over SSH, applied with the DeskMini profile with `software.python: "3.13"` (frameworks
skipped): Debian 12's python3 is 3.11, so the plan takes a managed CPython 3.13 under /opt/provision/python and the
environment is made on it. Then the owner's dist-upgrade to Debian 13 (the apt sources switched from bookworm to
trixie, `apt-get full-upgrade` as root), which replaces /usr/bin/python3 and every library under /usr. Before any
apply, the environment still runs as it was built: its interpreter and its pyvenv.cfg are the same files, its
base is the managed prefix, NumPy and JupyterLab import, and the Jupyter unit serves. (An environment on the
distribution's Python is broken by the same upgrade: tests/integration/test_dist_upgrade.py.)

Then one apply for Debian 13, whose python3 is 3.13 and fits the pin: the distribution's Python is the default
again, so the environment is made again on it, the managed interpreter the plan no longer needs is removed, the
account's file stays, and the next apply changes nothing.

THE INTERPRETER IS A STAND-IN (tests/support/standin_python.py): CPython 3.13 from trixie's source package, built on
Debian 12 (as python-build-standalone builds on an old glibc) and laid out as python-build-standalone's archive,
served as the mirror. `long`: a whole release is downloaded and installed.
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
from tests.support.standin_python import standin_mirror

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("upgrade-managed")
KEEP = "/home/ml/notes/keep.txt"
VENV = "/opt/provision/venv"

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.long]

WHICH = ("import sys, numpy, jupyterlab; "
         "print('%d.%d' % sys.version_info[:2], sys.base_prefix, numpy.__version__, jupyterlab.__version__)")


def provision(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, timeout=2400)


def sh(command: str, user: str = "root", timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", command], capture_output=True, text=True,
                          timeout=timeout)


def changed(stdout: str) -> int:
    match = re.search(r"changed=(\d+)", stdout)
    assert match, stdout[-2000:]
    return int(match.group(1))


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from provision import sandbox
    from provision.pipeline.plan import plan_for

    tmp = tmp_path_factory.mktemp("upgrade-managed")
    profile = tmp / "deskmini-python313.yaml"
    text = (ROOT / "profiles/deskmini.yaml").read_text()
    assert "  user: ml\n" in text
    profile.write_text(text.replace("  user: ml\n", '  python: "3.13"\n  user: ml\n'))
    plan = plan_for(profile, os_override="debian-12")
    assert plan.python.source == "managed" and plan.python.version == "3.13", plan.python
    assert plan.python.managed is not None
    mirror = standin_mirror(plan.python.managed.archive)
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    yield {"env": os.environ | {"PROVISION_STATE": str(tmp / "state")}, "profile": str(profile), "plan": plan,
           "mirror": str(mirror)}
    sandbox.remove(NAME)


def apply(host: dict, os_name: str, *extra: str) -> subprocess.CompletedProcess:
    return provision(host["env"], "apply", host["profile"], "--os", os_name, "--sandbox", NAME, "--skip-frameworks",
                     "--yes", "--python-mirror", host["mirror"], *extra)


def test_the_dist_upgrade_leaves_the_managed_environment_as_it_was_built(host):
    prefix = host["plan"].python.managed.prefix
    first = apply(host, "debian-12")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    built = sh(f"{VENV}/bin/python -I -c \"{WHICH}\"", user="ml")
    assert built.returncode == 0, built.stderr[-2000:]
    version, base, numpy, jupyterlab = built.stdout.split()
    assert (version, base) == ("3.13", prefix)
    assert sh("/usr/bin/python3 -c 'import sys; print(sys.version_info[1])'").stdout.strip() == "11"
    assert sh(f"install -d -o ml -g ml /home/ml/notes && echo mine > {KEEP} && chown ml:ml {KEEP}").returncode == 0
    files = f"{prefix}/bin/python3.13 {VENV}/pyvenv.cfg {VENV}/bin/python3.13"
    before = sh(f"sha256sum {files}; stat -L -c '%n %i %Y' {files}")
    assert before.returncode == 0, before.stderr

    # The owner's dist-upgrade: every apt source that names bookworm names trixie, then a full upgrade.
    upgrade = sh(APT_WAIT + "sed -i 's/bookworm/trixie/g' $(grep -rl bookworm /etc/apt/sources.list /etc/apt/sources.list.d "
                 "2>/dev/null) && apt-get update -q && apt_wait env DEBIAN_FRONTEND=noninteractive apt-get -y -q "
                 "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold full-upgrade",
                 timeout=3000)
    assert upgrade.returncode == 0, upgrade.stdout[-4000:] + upgrade.stderr[-4000:]
    assert 'VERSION_ID="13"' in sh("cat /etc/os-release").stdout
    assert sh("/usr/bin/python3 -c 'import sys; print(sys.version_info[1])'").stdout.strip() == "13"

    # Nothing of the environment was touched, and it runs as it was built, on the new release's libraries.
    after = sh(f"sha256sum {files}; stat -L -c '%n %i %Y' {files}")
    assert after.stdout == before.stdout, (before.stdout, after.stdout)
    runs = sh(f"{VENV}/bin/python -I -c \"{WHICH}\"", user="ml")
    assert runs.returncode == 0, runs.stderr[-2000:]
    assert runs.stdout.split() == [version, base, numpy, jupyterlab]
    assert sh("systemctl is-active provision-jupyter").stdout.strip() == "active"

    # Debian 13's python3 fits the pin: the distribution's Python is the default again, in one apply.
    second = apply(host, "debian-13")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    assert "provision check passed" in second.stdout + second.stderr, second.stdout[-3000:]
    out = sh(f"{VENV}/bin/python -I -c 'import sys; print(\"%d.%d\" % sys.version_info[:2], sys.base_prefix)'",
             user="ml")
    assert out.stdout.split() == ["3.13", "/usr"], out.stdout + out.stderr
    assert sh(f"test -e {prefix}").returncode != 0, "the managed interpreter the plan no longer needs stayed"
    assert sh(f"cat {KEEP}").stdout == "mine\n"
    again = apply(host, "debian-13", "--skip-check")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert changed(again.stdout) == 0, again.stdout[-3000:]
