"""A pin the distribution's Python cannot hold (issue 38), on a stock Debian 13 host over SSH (system Python 3.13):
torch 2.1.2 supports Python 3.8-3.11, so the plan takes a managed CPython 3.11 and the environment is built on it.

The interpreter is a STAND-IN: python-build-standalone's releases (GitHub) cannot be reached from the machines this is
built on, so tests/support/standin_python.py builds CPython 3.11 once from Debian 12's source package, laid out as
python-build-standalone's install_only archive under the file name the database names, with a SHA256SUMS, and it is
served as the mirror (`--python-mirror DIR`). It links Debian's shared libraries where the real build is
self-contained; what is tested is the mechanics: the mirror and its hashes, the controller's check, the unpack
root-owned under /opt/provision/python, the environment on it, the ledger owning it, the move back to the system
Python and destroy. Frameworks are skipped (--skip-frameworks) as in test_apply.py: the plan's other wheels (NumPy,
the CUDA and cuDNN wheels, Jupyter) install into the 3.11 environment for real.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name
from tests.support.standin_python import standin_archive_bytes_tampered, standin_mirror

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("managed-py")
PROFILE = ROOT / "profiles/deskmini.yaml"
KEEP = "/home/ml/notes/keep.txt"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def provision(env: dict, *args: str, timeout: float = 2400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)


def sh(command: str, user: str = "root") -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", command], capture_output=True, text=True,
                          timeout=600)


def changed(stdout: str) -> int:
    match = re.search(r"changed=(\d+)", stdout)
    assert match, stdout[-2000:]
    return int(match.group(1))


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A stock Debian 13 host; the profile pinning torch 2.1.2; the stand-in mirror."""
    from provision import sandbox
    from provision.pipeline.plan import plan_for
    from provision.pipeline.run import start_sandbox

    tmp = tmp_path_factory.mktemp("managed")
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    pinned = tmp / "deskmini-torch212.yaml"
    pinned.write_text(PROFILE.read_text().replace("    - name: pytorch\n",
                                                  '    - name: pytorch\n      version: "2.1.2"\n'))
    plan = plan_for(pinned, os_override="debian-13", indexes={"pytorch": False})
    assert plan.python.source == "managed" and plan.python.version == "3.11", plan.python
    mirror = standin_mirror(plan.python.managed.archive)
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    start_sandbox(plan_for(PROFILE, os_override="debian-13"), NAME)
    yield {"env": env, "pinned": str(pinned), "plan": plan, "mirror": mirror, "tmp": tmp}
    sandbox.remove(NAME)


def apply(host: dict, profile: str, *extra: str) -> subprocess.CompletedProcess:
    return provision(host["env"], "apply", profile, "--os", "debian-13", "--sandbox", NAME, "--yes",
                     "--skip-frameworks", "--index", "pytorch=off", *extra)


def test_an_archive_that_matches_no_trusted_hash_is_refused_before_anything_changes(host):
    from provision import interpreters
    from provision.state import cache_root

    archive = host["plan"].python.managed.archive
    with interpreters.store().lock():  # as provision removes a file of the store: never under another's reader
        (cache_root() / "python" / archive).unlink(missing_ok=True)  # read from the mirror, not an earlier run
    bad = standin_archive_bytes_tampered(host["mirror"], archive, host["tmp"] / "bad-mirror")
    before = sh("ls -A /opt /var/lib; dpkg-query -W -f '${Package}\\n' | sort | sha256sum").stdout
    proc = apply(host, host["pinned"], "--python-mirror", str(bad))
    assert proc.returncode == 2, proc.stdout[-1500:] + proc.stderr[-1500:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "sha256" in errors[0] and "refused" in errors[0], proc.stderr[-1500:]
    assert "Traceback" not in proc.stderr
    assert sh("ls -A /opt /var/lib; dpkg-query -W -f '${Package}\\n' | sort | sha256sum").stdout == before
    assert not (cache_root() / "python" / archive).exists(), "the refused archive stayed in the controller's cache"


def test_the_pin_gets_its_interpreter_and_the_environment_runs_on_it(host):
    plan = host["plan"]
    proc = apply(host, host["pinned"], "--python-mirror", str(host["mirror"]))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "provision check passed" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    prefix = plan.python.managed.prefix
    out = sh("/opt/provision/venv/bin/python -I -c 'import sys, numpy; print(\"%d.%d\" % sys.version_info[:2], "
             "sys.base_prefix, numpy.__version__)'", user="ml")
    assert out.returncode == 0, out.stderr
    version, base, numpy = out.stdout.split()
    assert (version, base) == ("3.11", prefix)
    assert f"numpy=={numpy}" == plan.verify.numpy_requirement
    # Root's alone: the notebook account can neither write into the interpreter nor replace it.
    assert sh(f"stat -c '%U %a' {prefix} {prefix}/bin/python3.11").stdout.split() == ["root", "755", "root", "755"]
    assert sh(f"test -w {prefix}/lib/python3.11/os.py || touch {prefix}/x", user="ml").returncode != 0
    assert prefix in sh("cat /var/lib/provision/ledger.json").stdout
    sh(f"install -d -o ml -g ml /home/ml/notes && echo mine > {KEEP} && chown ml:ml {KEEP}")
    again = apply(host, host["pinned"], "--python-mirror", str(host["mirror"]), "--full")
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed(again.stdout) == 0, again.stdout[-3000:]


@pytest.mark.heavy  # torch 2.1.2 and its CUDA 12.1 wheels from PyPI: about 2.5 GB
def test_the_real_torch_2_1_2_wheel_runs_on_the_managed_interpreter(host):
    """The pin itself, not only the mechanics: PyPI's torch 2.1.2 (its CUDA 12.1 build, cp311 only) installed by the
    apply into the environment on the managed 3.11, imported as the notebook account (no GPU here: CUDA is not
    initialised, the import and the build's own CUDA version are what is checked)."""
    proc = provision(host["env"], "apply", host["pinned"], "--os", "debian-13", "--sandbox", NAME, "--yes",
                     "--index", "pytorch=off", "--python-mirror", str(host["mirror"]))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = sh("/opt/provision/venv/bin/python -I -c 'import sys, torch; print(\"%d.%d\" % sys.version_info[:2], "
             "sys.base_prefix, torch.__version__, torch.version.cuda)'", user="ml")
    assert out.returncode == 0, out.stderr[-2000:]
    # PyPI's torch 2.1.2 names its CUDA build in its version ("2.1.2+cu121", measured 2026-11-27).
    assert out.stdout.split() == ["3.11", host["plan"].python.managed.prefix, "2.1.2+cu121", "12.1"], out.stdout


@pytest.mark.long  # two environments made again, each with its CUDA, cuDNN and Jupyter wheels: ~10 min on 2 cores
def test_back_to_the_system_python_and_to_the_managed_one_again(host):
    prefix = host["plan"].python.managed.prefix
    proc = apply(host, str(PROFILE))  # torch unpinned: the distribution's Python 3.13 fits
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = sh("/opt/provision/venv/bin/python -I -c 'import sys; print(\"%d.%d\" % sys.version_info[:2], "
             "sys.base_prefix)'", user="ml")
    assert out.stdout.split() == ["3.13", "/usr"], out.stdout + out.stderr
    assert sh(f"test -e {prefix}").returncode != 0, "the managed interpreter the plan no longer needs stayed"
    assert sh(f"cat {KEEP}").stdout == "mine\n"
    proc = apply(host, host["pinned"], "--python-mirror", str(host["mirror"]))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = sh("/opt/provision/venv/bin/python -I -c 'import sys; print(sys.base_prefix)'", user="ml")
    assert out.stdout.strip() == prefix
    assert sh(f"cat {KEEP}").stdout == "mine\n"


def test_destroy_leaves_no_interpreter_behind(host):
    proc = provision(host["env"], "destroy", host["pinned"], "--os", "debian-13", "--sandbox", NAME, "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert sh("test -e /opt/provision/python").returncode != 0 or sh("ls -A /opt/provision/python").stdout == ""
    assert sh("ls /opt/provision 2>/dev/null").stdout.strip() == ""
    assert sh(f"cat {KEEP}").stdout == "mine\n"
