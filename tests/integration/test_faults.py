"""Faults on a real container host, each followed by a re-run that must converge.

- the package index is unreachable: one line names the host, the step and the cause; exit 1;
- the disk fills during a wheel install (/opt/provision is a 30 MB tmpfs, exec): same, and after the space is grown the
  re-run converges;
- an environment whose creation was cut short (bin/pip never written, pip's metadata already there, which is where
  an interrupt during `python -m venv` leaves it): the re-run rebuilds it instead of failing to find pip;
- the apply is interrupted with Ctrl-C (SIGINT to the process group, as a terminal sends it): exit 130, the run is
  remembered as interrupted, and `apply --failed` finishes it; the same with SIGTERM to provision alone (a
  supervisor's `kill`): exit 143;
- a second apply on the same inventory, or on the same host through another inventory, while one runs: refused
  with one line naming the running one (exit 2), and the first one finishes undisturbed.

After every command, nothing it started may still run (tests/support/leftovers.py): no ansible-playbook, worker,
ssh or Mitogen process, no testinfra run.

The python_env role (--tags) is the one exercised: it holds the apt, venv and pip steps these faults hit. A host
lost mid-run is in test_fleet.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from tests.support.leftovers import Commands
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("faults")
PROFILE = str(ROOT / "profiles/deskmini.yaml")
ARGS = ["--os", "debian-13", "--tags", "python_env", "--yes", "--skip-frameworks"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def inventory(path: Path, **environment: str) -> Path:
    """The sandbox over SSH as its admin account (as a user's machine), with extra environment for every task."""
    from provision.render.ansible import write_yaml
    from provision.sandbox import inventory as sandbox_inventory

    env = {"PIP_CACHE_DIR": "/var/cache/provision/pip/users", **environment}
    write_yaml(sandbox_inventory([NAME], hostvars={NAME: {"provision_environment": env}}), path)
    return path


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from provision.sandbox import remove, start

    tmp = tmp_path_factory.mktemp("faults")
    (tmp / "tmp").mkdir()
    remove(NAME)
    start(NAME, "13", network="bridge", extra_args=["--tmpfs", "/opt/provision:exec,size=30m,mode=755"])
    # Temporary directories (the runs' private ones, ssh's control sockets) under the test's own folder: a process
    # naming it in its command line was started by one of these commands.
    env = os.environ | {"PROVISION_STATE": str(tmp / "state"), "TMPDIR": str(tmp / "tmp")}
    cmds = Commands(env, markers=[str(tmp), f"--limit {NAME}"])
    try:
        yield tmp, env, cmds
    finally:  # even when a test failed: no process of theirs, no container
        cmds.cleanup()
        remove(NAME)


def apply(cmds: Commands, inventory_file: Path, *extra: str) -> subprocess.CompletedProcess:
    proc = cmds.run("apply", PROFILE, "-i", str(inventory_file), *ARGS, *extra)
    assert not proc.left, f"left running after exit {proc.returncode}: {proc.left}"
    return proc


def in_session(session: int) -> list[int]:
    found = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if os.getsid(pid) == session:
                found.append(pid)
    return found


def sh(script: str) -> None:
    subprocess.run(["docker", "exec", NAME, "sh", "-ec", script], check=True)


def numpy_imports() -> bool:
    return subprocess.run(["docker", "exec", NAME, "/opt/provision/venv/bin/python", "-c", "import numpy"],
                          capture_output=True).returncode == 0


def last_run(env: dict[str, str], inventory_file: Path) -> dict:
    from provision.state import run_key

    path = Path(env["PROVISION_STATE"]) / "runs" / f"{run_key(str(inventory_file.resolve()))}.json"
    return json.loads(path.read_text())["hosts"]


def test_an_unreachable_index_names_host_step_and_cause(host):
    tmp, env, cmds = host
    # uv installs the plan's wheels (plan.python.installer); pip's variables too, for a plan without it.
    bad = inventory(tmp / "bad-index.yml", PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0",
                    PIP_TIMEOUT="5", UV_INDEX_URL="http://127.0.0.1:9/simple", UV_HTTP_RETRIES="0")
    proc = apply(cmds, bad)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("failed: ")]
    assert failed and failed[0].startswith(f"failed: {NAME}: venv | Install the requirements"), proc.stderr[-2000:]
    # pip says "(from versions: none)"; uv names the refused connection itself.
    assert re.search(r"the package index the host uses listed no versions at all|a package source refused the "
                     r"connection", failed[0]), failed[0]
    assert "Traceback" not in proc.stderr
    # The index is back (the inventory without the bad URL), with room on the disk: the re-run converges. Then the
    # host is put back as the next test needs it (no environment, a 30 MB /opt/provision).
    good = inventory(tmp / "good.yml")
    sh("mount -o remount,size=1g /opt/provision")
    again = apply(cmds, good)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert numpy_imports()
    sh("rm -rf /opt/provision/venv; mount -o remount,size=30m /opt/provision")


def test_a_full_disk_names_the_cause_and_the_rerun_converges(host):
    tmp, env, cmds = host
    good = inventory(tmp / "good.yml")
    proc = apply(cmds, good)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    failed = [line for line in proc.stderr.splitlines() if line.startswith("failed: ")]
    assert len(failed) == 1 and failed[0].startswith(f"failed: {NAME}: venv | "), proc.stderr[-2000:]
    # One line: the host, the file system and the room there, and what the wheels being installed take.
    # uv installs them (the plan's installer): the wheels' room is what uv had unpacked in its cache.
    got = re.search(rf"python_env: the disk is full on {NAME}: uv could not install the planned wheels into "
                    r"/opt/provision/venv: /opt/provision has ([\d.]+) MB free of ([\d.]+) MB, and the wheels it was "
                    r"installing take ([\d.]+) MB unpacked \((\d+) wheels?\)\. Free room "
                    r"there \(or grow that file system\), then apply again", failed[0])
    assert got, failed[0]
    free, total, needed = (float(got.group(i)) for i in (1, 2, 3))
    # uv takes away the file it could not finish (pip left it: 0 MB free), so the room left is what the wheels
    # already copied leave; the line says it is less than the wheels take.
    assert free < total and 25 <= total <= 31 and needed > free, failed[0]
    # The operator frees space; the same command converges (pip left nothing that blocks it).
    sh("mount -o remount,size=1g /opt/provision")
    again = apply(cmds, good)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert numpy_imports()


def test_an_environment_left_without_pip_is_rebuilt(host):
    """Where a Ctrl-C during `python -m venv` leaves it: the re-run must not stop at "Unable to find pip"."""
    tmp, env, cmds = host
    good = inventory(tmp / "good.yml")
    # As the role leaves it: the environment's files belong to its account (ml), and /opt/provision has room.
    sh("mount -o remount,size=1g /opt/provision; id ml >/dev/null 2>&1 || useradd -m ml;"
       " rm -rf /opt/provision/venv; install -d -o ml -g ml /opt/provision/venv;"
       " runuser -u ml -- python3 -m venv /opt/provision/venv; rm /opt/provision/venv/bin/pip*;"
       " ls -d /opt/provision/venv/lib/python3*/site-packages/pip-*.dist-info")
    proc = apply(cmds, good)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    pip = subprocess.run(["docker", "exec", NAME, "/opt/provision/venv/bin/pip", "--version"], capture_output=True,
                         text=True)
    assert pip.returncode == 0, pip.stderr
    assert numpy_imports()


def stop_mid_run(cmds: Commands, good: Path, send) -> tuple[subprocess.Popen, int, str]:
    """Start an apply on a host without its environment and call send(proc) once the environment was created
    (pip is installing the requirements then). Returns the process, its exit code and everything it printed."""
    sh("rm -rf /opt/provision/venv; mount -o remount,size=1g /opt/provision")  # room: this test is not about space
    proc = cmds.start("apply", PROFILE, "-i", str(good), *ARGS)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "Create the virtual environment" in line:
            send(proc)
            break
    started = time.monotonic()
    rest = proc.stderr.read()
    out = proc.stdout.read()
    code = proc.wait(timeout=300)
    # Bounded: ansible-playbook gets 10 s to stop on SIGINT, 5 s more after SIGTERM (provision.runners.ansible).
    assert time.monotonic() - started < 60, f"took {time.monotonic() - started:.0f}s to stop"
    return proc, code, "".join(seen) + rest + out


@pytest.mark.parametrize(("sig", "code", "word"), [
    pytest.param(signal.SIGINT, 130, "interrupted", id="ctrl-c"),
    pytest.param(signal.SIGTERM, 143, "terminated (SIGTERM)", id="sigterm"),
])
def test_a_stopped_run_leaves_nothing_running_and_failed_finishes_it(host, sig, code, word):
    tmp, env, cmds = host
    good = inventory(tmp / "good.yml")
    if sig == signal.SIGINT:
        send = lambda proc: os.killpg(proc.pid, signal.SIGINT)  # noqa: E731  # Ctrl-C: the whole foreground group
    else:
        send = lambda proc: os.kill(proc.pid, signal.SIGTERM)  # noqa: E731  # a supervisor: provision's pid only
    proc, got, printed = stop_mid_run(cmds, good, send)
    assert got == code, printed[-3000:]
    assert word in printed and "Traceback" not in printed, printed[-3000:]
    left = cmds.left(proc)
    assert not left, f"left running: {left}"
    assert last_run(env, good)[NAME]["result"] == "interrupted"
    retry = apply(cmds, good, "--failed")
    assert retry.returncode == 0, retry.stdout[-2000:] + retry.stderr[-2000:]
    assert NAME in retry.stdout and "ok" in retry.stdout
    assert numpy_imports()


def test_a_second_apply_on_the_same_hosts_is_refused(host):
    tmp, env, cmds = host
    good = inventory(tmp / "good.yml")
    other = inventory(tmp / "other.yml")  # the same host, through another inventory file
    sh("rm -rf /opt/provision/venv; mount -o remount,size=1g /opt/provision")
    first = cmds.start("apply", PROFILE, "-i", str(good), *ARGS)
    seen = []
    for line in first.stderr:
        seen.append(line)
        if line.startswith(NAME):  # the first task result: the run holds its locks
            break
    assert first.poll() is None, "".join(seen)[-2000:]
    # Through the same inventory the first lock found taken may be the inventory's or the host's; through another
    # inventory it can only be the host's.
    same = f"(?:{re.escape(str(good.resolve()))}|host {re.escape(NAME)})"
    for inv, what in ((good, same), (other, f"host {re.escape(NAME)}")):
        # Not apply(): the first run's processes match the same markers and rightly still run. The refused command
        # started nothing that may outlive it: nothing is left in its own session.
        second = cmds.run("apply", PROFILE, "-i", str(inv), *ARGS)
        assert not in_session(cmds.sessions[-1]), in_session(cmds.sessions[-1])
        assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert re.match(rf"error: another provision apply is running on {what} \(pid {first.pid}, "
                        r"started \d{4}-\d\d-\d\dT[\d:]+[+-]\d{4}: `provision apply ", lines[0]), lines[0]
    rest = first.stderr.read()
    out = first.stdout.read()
    assert first.wait(timeout=900) == 0, out[-2000:] + rest[-2000:]
    assert not cmds.left(first)
    assert last_run(env, good)[NAME]["result"] == "ok"
    assert numpy_imports()
