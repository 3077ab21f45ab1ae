"""A fleet of two container hosts with different profiles in one inventory, applied in one run.

pv-fleet-k80 is the AWS P2 (Tesla K80) profile on Debian 12 and pv-fleet-1070 the DeskMini (GTX 1070) on Debian 13;
each must get the CUDA its own plan decides (11.7 wheels for the K80, 12.6 for the GTX 1070). Then one host
disappears mid-run (docker kill): the other finishes, the summary names the lost host and its step, the exit code
is 3, and `apply --failed` re-runs only that host and converges. After every command nothing it started may still
run (tests/support/leftovers.py). Only the python_env and cuda roles run (--tags):
they carry the per-profile difference and keep the test to a few minutes; test_apply.py runs every role.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.support.leftovers import Commands
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
K80, GTX = sandbox_name("fleet-k80"), sandbox_name("fleet-1070")
TAGS = ["--tags", "python_env,cuda", "--skip-frameworks"]

# `long`: two hosts on two Debian releases and four applies, 10-15 minutes on 2 cores.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.long]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    (tmp / "tmp").mkdir()
    # The runs' temporary directories under the test's folder: a process naming it was started by these commands.
    env = os.environ | {"PROVISION_STATE": str(tmp / "state"), "TMPDIR": str(tmp / "tmp")}
    cmds = Commands(env, markers=[str(tmp)])
    try:
        cmds.run("sandbox", "down", K80, GTX, timeout=300)
        for name, os_name, profile in ((K80, "debian-12", "aws-p2"), (GTX, "debian-13", "deskmini")):
            proc = cmds.run("sandbox", "up", name, "--os", os_name, "--profile", profile, "-o",
                            str(tmp / f"{name}.yml"), timeout=900)
            assert proc.returncode == 0, proc.stdout + proc.stderr
        # One inventory, two groups, each with its own profile and OS; each host reached over SSH as `sandbox up`
        # wrote it (the admin account with sudo).
        reach = {}
        for name in (K80, GTX):
            host = YAML(typ="safe").load((tmp / f"{name}.yml").read_text())["all"]["hosts"][name]
            reach[name] = {k: v for k, v in host.items() if k.startswith(("ansible_", "provision_", "gpu_verify_"))
                       and k not in ("provision_profile", "provision_os")}
        inventory = tmp / "fleet.yml"
        inventory.write_text(json.dumps({"all": {"children": {
            "p2": {"vars": {"provision_profile": "aws-p2", "provision_os": "debian-12"}, "hosts": {K80: reach[K80]}},
            "deskminis": {"vars": {"provision_profile": f"{ROOT}/profiles/deskmini.yaml", "provision_os": "debian-13"},
                          "hosts": {GTX: reach[GTX]}},
        }}}, indent=2))
        yield inventory, env, cmds
    finally:  # even when a test failed: no process of theirs, no container
        cmds.cleanup()
        subprocess.run([sys.executable, "-m", "provision", "sandbox", "down", K80, GTX], capture_output=True, env=env)


def provision(cmds: Commands, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    proc = cmds.run(*args, timeout=timeout)
    assert not proc.left, f"left running after exit {proc.returncode}: {proc.left}"
    return proc


def wheels(host: str) -> dict[str, str]:
    proc = subprocess.run(["docker", "exec", host, "/opt/provision/venv/bin/python", "-m", "pip", "list",
                           "--format", "json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return {row["name"].lower(): row["version"] for row in json.loads(proc.stdout)}


@pytest.fixture(scope="module")
def first_apply(fleet):
    inventory, env, cmds = fleet
    return provision(cmds, "apply", "-i", str(inventory), "--yes", *TAGS)


def test_each_host_gets_the_stack_of_its_own_profile(fleet, first_apply):
    assert first_apply.returncode == 0, first_apply.stdout[-3000:] + first_apply.stderr[-3000:]
    out = first_apply.stdout
    assert f"== profiles/deskmini.yaml --os debian-13: {GTX}" in out and "--os debian-12: " + K80 in out
    # The K80 plan is CUDA 11.7 from PyPI (its last toolkit line with sm_37); the GTX 1070's is CUDA 12.6.
    k80, gtx = wheels(K80), wheels(GTX)
    assert k80["nvidia-cuda-runtime-cu11"].startswith("11.7.") and "nvidia-cuda-runtime-cu12" not in k80
    assert gtx["nvidia-cuda-runtime-cu12"].startswith("12.6.") and "nvidia-cuda-runtime-cu11" not in gtx


def test_every_host_is_recorded_and_diff_against_reads_it(fleet, first_apply):
    inventory, env, cmds = fleet
    assert first_apply.returncode == 0
    state = Path(env["PROVISION_STATE"])
    record = json.loads((state / "hosts" / K80 / "applied.json").read_text())
    assert record["plan"]["gpu"]["model"] == "Tesla K80" and record["plan"]["cuda"]["version"] == "11.7"
    assert record["installed"]["wheels"]["nvidia-cuda-runtime-cu11"].startswith("11.7.")
    # The host keeps its own copy of the record.
    on_host = subprocess.run(["docker", "exec", K80, "cat", "/var/lib/provision/applied.json"], capture_output=True,
                             text=True)
    assert json.loads(on_host.stdout)["digest"] == record["digest"]
    same = provision(cmds, "plan", str(ROOT / "profiles/aws-p2.yaml"), "--os", "debian-12",
                     "--diff-against", K80)
    # Same plan; the host lacks only what --tags left out (cuDNN, Jupyter, the verifier's wheels), and says so.
    assert same.returncode == 1 and not [ln for ln in same.stdout.splitlines() if ln.startswith("plan  ")], same.stdout
    assert "host  nvidia-cudnn-cu11: not installed, the plan now pins 8.5.0.96" in same.stdout
    assert "the last apply ran only --tags python_env,cuda" in same.stdout
    other = provision(cmds, "plan", str(ROOT / "profiles/deskmini.yaml"), "--os", "debian-12", "--diff-against", K80)
    assert other.returncode == 1, other.stdout + other.stderr
    assert "plan  cuda.version: applied 11.7, now 12.6" in other.stdout
    assert "host  nvidia-cuda-runtime-cu12: not installed" in other.stdout


def test_a_host_lost_mid_run_does_not_stop_the_other_and_failed_retries_it(fleet, first_apply):
    inventory, env, cmds = fleet
    assert first_apply.returncode == 0
    # Make the K80 host's next python_env run do real work, so it is still running when it disappears.
    subprocess.run(["docker", "exec", K80, "rm", "-rf", "/opt/provision/venv"], check=True)
    proc = cmds.start("apply", "-i", str(inventory), "--yes", *TAGS)
    killed = False
    for line in proc.stderr:  # one line per task result
        if not killed and line.startswith(K80) and "Create the virtual environment" in line:
            subprocess.run(["docker", "kill", K80], check=True, capture_output=True)
            killed = True
    out = proc.stdout.read()
    assert proc.wait(timeout=900) == 3, out[-3000:]
    left = cmds.left(proc)
    assert not left, f"left running: {left}"
    assert killed, "the K80 host never reached the step the test waits for"
    lost = next(line for line in out.splitlines() if line.strip().startswith(K80))
    assert "unreachable" in lost or "failed" in lost, out[-3000:]
    assert next(line for line in out.splitlines() if line.strip().startswith(GTX)).split()[2] == "ok", out[-3000:]
    # The host comes back; --failed runs it alone and converges.
    subprocess.run(["docker", "start", K80], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and subprocess.run(
            ["docker", "exec", K80, "systemctl", "is-system-running"], capture_output=True,
            text=True).stdout.strip() not in ("running", "degraded"):
        time.sleep(1)
    retry = provision(cmds, "apply", "-i", str(inventory), "--yes", "--failed", *TAGS)
    assert retry.returncode == 0, retry.stdout[-3000:] + retry.stderr[-3000:]
    assert K80 in retry.stdout and not any(line.strip().startswith(GTX) for line in retry.stdout.splitlines())
    assert wheels(K80)["nvidia-cuda-runtime-cu11"].startswith("11.7.")
    again = provision(cmds, "apply", "-i", str(inventory), "--yes", "--failed", *TAGS)
    assert again.returncode == 0 and "nothing to retry" in again.stdout
