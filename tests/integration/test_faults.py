"""Faults on a real container host, each followed by a re-run that must converge.

- the package index is unreachable: one line names the host, the step and the cause; exit 1;
- the disk fills during a wheel install (/opt/provision is a 30 MB tmpfs, exec): same, and after the space is grown the
  re-run converges;
- an environment whose creation was cut short (bin/pip never written, pip's metadata already there, which is where
  an interrupt during `python -m venv` leaves it): the re-run rebuilds it instead of failing to find pip;
- the apply is interrupted with Ctrl-C (SIGINT to the process group, as a terminal sends it): exit 130, the run is
  remembered as interrupted, and `apply --failed` finishes it.

The python_env role (--tags) is the one exercised: it holds the apt, venv and pip steps these faults hit. A host
lost mid-run is in test_fleet.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = "pv-faults"
PROFILE = str(ROOT / "profiles/deskmini.yaml")
ARGS = ["--os", "debian-13", "--tags", "python_env", "--yes", "--skip-frameworks"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def inventory(path: Path, **environment: str) -> Path:
    env = {"PIP_CACHE_DIR": "/var/cache/provision/pip/users", **environment}
    lines = "".join(f"        {k}: '{v}'\n" for k, v in env.items())
    path.write_text(f"all:\n  hosts:\n    {NAME}:\n      ansible_connection: docker\n"
                    f"      ansible_python_interpreter: /usr/bin/python3\n      provision_environment:\n{lines}")
    return path


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from provision.sandbox import remove, start

    tmp = tmp_path_factory.mktemp("faults")
    remove(NAME)
    start(NAME, "13", network="bridge", extra_args=["--tmpfs", "/opt/provision:exec,size=30m,mode=755"])
    yield tmp, os.environ | {"PROVISION_STATE": str(tmp / "state")}
    remove(NAME)


def provision(env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, stdin=subprocess.DEVNULL, timeout=1200)


def test_an_unreachable_index_names_host_step_and_cause(host):
    tmp, env = host
    bad = inventory(tmp / "bad-index.yml", PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0",
                    PIP_TIMEOUT="5")
    proc = provision(env, "apply", PROFILE, "-i", str(bad), *ARGS)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("failed: ")]
    assert failed and failed[0].startswith(f"failed: {NAME}: venv | Install the requirements"), proc.stderr[-2000:]
    assert "the package index the host uses listed no versions at all" in failed[0], failed[0]
    assert "Traceback" not in proc.stderr


def test_a_full_disk_names_the_cause_and_the_rerun_converges(host):
    tmp, env = host
    good = inventory(tmp / "good.yml")
    proc = provision(env, "apply", PROFILE, "-i", str(good), *ARGS)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("failed: ")]
    assert failed and failed[0].startswith(f"failed: {NAME}: venv | "), proc.stderr[-2000:]
    assert "the disk is full on the host" in failed[0], failed[0]
    # The operator frees space; the same command converges (pip left nothing that blocks it).
    subprocess.run(["docker", "exec", NAME, "mount", "-o", "remount,size=1g", "/opt/provision"], check=True)
    again = provision(env, "apply", PROFILE, "-i", str(good), *ARGS)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    numpy = subprocess.run(["docker", "exec", NAME, "/opt/provision/venv/bin/python", "-c",
                            "import numpy; print(numpy.__version__)"], capture_output=True, text=True)
    assert numpy.returncode == 0, numpy.stderr


def test_an_environment_left_without_pip_is_rebuilt(host):
    """Where a Ctrl-C during `python -m venv` leaves it: the re-run must not stop at "Unable to find pip"."""
    tmp, env = host
    good = inventory(tmp / "good.yml")
    # As the role leaves it: the environment's files belong to its account (ml), and /opt/provision has room.
    subprocess.run(["docker", "exec", NAME, "sh", "-ec",
                    "mount -o remount,size=1g /opt/provision; id ml >/dev/null 2>&1 || useradd -m ml;"
                    " rm -rf /opt/provision/venv; install -d -o ml -g ml /opt/provision/venv;"
                    " runuser -u ml -- python3 -m venv /opt/provision/venv; rm /opt/provision/venv/bin/pip*;"
                    " ls -d /opt/provision/venv/lib/python3*/site-packages/pip-*.dist-info"], check=True)
    proc = provision(env, "apply", PROFILE, "-i", str(good), *ARGS)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    pip = subprocess.run(["docker", "exec", NAME, "/opt/provision/venv/bin/pip", "--version"], capture_output=True,
                         text=True)
    assert pip.returncode == 0, pip.stderr
    numpy = subprocess.run(["docker", "exec", NAME, "/opt/provision/venv/bin/python", "-c",
                            "import numpy; print(numpy.__version__)"], capture_output=True, text=True)
    assert numpy.returncode == 0, numpy.stderr


def test_ctrl_c_stops_the_run_and_failed_finishes_it(host):
    tmp, env = host
    good = inventory(tmp / "good.yml")
    subprocess.run(["docker", "exec", NAME, "sh", "-c", "rm -rf /opt/provision/venv"], check=True)
    proc = subprocess.Popen([sys.executable, "-m", "provision", "apply", PROFILE, "-i", str(good), *ARGS], cwd=ROOT,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "Create the virtual environment" in line:
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
            break
    rest = proc.stderr.read()
    code = proc.wait(timeout=300)
    assert code == 130, "".join(seen)[-2000:] + rest[-2000:]
    assert "interrupted" in rest and "Traceback" not in rest, rest[-2000:]
    retry = provision(env, "apply", PROFILE, "-i", str(good), *ARGS, "--failed")
    assert retry.returncode == 0, retry.stdout[-2000:] + retry.stderr[-2000:]
    assert f"{NAME}" in retry.stdout and "ok" in retry.stdout
