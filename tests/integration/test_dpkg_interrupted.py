"""dpkg work a cut left unfinished (issue 39), on a stock Debian 13 host over SSH.

A power cut while dpkg unpacks leaves packages `unpacked` (or half-configured) and, where the cut fell in an apply of
provision's, the ledger's pending note that apply wrote before its first change. That state is made here directly
(what the cut leaves, not a timed kill): python3-apt, the first package provision installs on a stock host, is
unpacked with `dpkg --unpack` and left unconfigured.

- Without provision's pending note the work is someone else's: the preflight refuses the host in one line naming the
  package and the command to run, and nothing changes.
- With the note (the dpkg snapshot of the host as provision's apply found it, python3-apt absent), the same apply
  finishes dpkg's work first and converges: exit 0, the summary says what was finished, `provision check` passes
  (and the apply ends with the demo's final block, as an apply from bare does), `dpkg --audit` is empty, the ledger owns
  python3-apt, a file in the account's home stays, and the next apply changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import modules
from tests.support.final_block import assert_final_block
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("dpkg-cut")
PROFILE = ROOT / "profiles/deskmini.yaml"
KEEP = "/home/ml/notes/keep.txt"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def sh(command: str, user: str = "root") -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", command], capture_output=True, text=True,
                          timeout=600)


def apply(env: dict, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", "apply", str(PROFILE), "--os", "debian-13", "--sandbox",
                           NAME, "--yes", "--skip-frameworks", *extra], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=2400, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from provision import sandbox
    from provision.pipeline.plan import plan_for
    from provision.pipeline.run import start_sandbox

    env = os.environ | {"PROVISION_STATE": str(tmp_path_factory.mktemp("dpkg") / "state")}
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    start_sandbox(plan_for(PROFILE, os_override="debian-13"), NAME)
    snapshot = dict(line.split("\t") for line in sh(
        "dpkg-query -W -f '${Package}\\t${Version}\\n'").stdout.splitlines())
    assert "python3-apt" not in snapshot, "the base image already has python3-apt: not a stock host"
    made = sh("cd /tmp && apt-get update -qq && apt-get download -qq python3-apt && dpkg --unpack python3-apt_*.deb")
    assert made.returncode == 0, made.stdout + made.stderr
    assert "python3-apt" in sh("dpkg --audit").stdout
    yield {"env": env, "snapshot": snapshot}
    sandbox.remove(NAME)


def test_someone_elses_unfinished_dpkg_work_is_refused_before_any_change(host):
    before = sh("ls -A /opt /var/lib; dpkg-query -W -f '${Package} ${Status}\\n' | sha256sum").stdout
    proc = apply(host["env"])
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    refusal = [line for line in (proc.stdout + proc.stderr).splitlines() if "preflight:" in line and "dpkg" in line]
    assert refusal, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "python3-apt" in refusal[0] and "sudo dpkg --configure -a" in refusal[0]
    assert sh("ls -A /opt /var/lib; dpkg-query -W -f '${Package} ${Status}\\n' | sha256sum").stdout == before


def test_provisions_own_interrupted_work_is_finished_and_the_apply_converges(host):
    note = {**modules.utils("ledger").empty_ledger(),
            "pending": {"packages": host["snapshot"], "wheels": {}, "absent": []}}
    wrote = subprocess.run(["docker", "exec", "-i", NAME, "sh", "-c", "install -d -m 0755 /var/lib/provision && "
                            "cat > /var/lib/provision/ledger.json && chmod 0644 /var/lib/provision/ledger.json"],
                           input=json.dumps(note), capture_output=True, text=True)
    assert wrote.returncode == 0, wrote.stderr
    proc = apply(host["env"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "provision check passed" in proc.stdout + proc.stderr
    # The demo's last screen after an apply from a stock host (test_browser.py opens its URL on a converged host).
    assert_final_block(proc.stdout, NAME)
    # The summary says what was finished (the ledger role's note, handed to the controller by host_record).
    assert re.search(rf"^{re.escape(NAME)}: finished the dpkg work an interrupted apply of provision's left: "
                     r"python3-apt \(dpkg --configure -a", proc.stdout, re.M), proc.stdout[-3000:]
    assert sh("dpkg --audit").stdout == ""
    assert sh("dpkg-query -W -f '${db:Status-Abbrev}' python3-apt").stdout.startswith("ii")
    ledger = json.loads(sh("cat /var/lib/provision/ledger.json").stdout)
    assert "python3-apt" in ledger["packages"] and ledger["pending"] is None
    sh(f"install -d -o ml -g ml /home/ml/notes && echo mine > {KEEP} && chown ml:ml {KEEP}")
    again = apply(host["env"], "--full")
    assert again.returncode == 0, again.stdout[-3000:]
    assert int(re.search(r"changed=(\d+)", again.stdout).group(1)) == 0, again.stdout[-3000:]
    assert "finished the dpkg work" not in again.stdout
    assert sh(f"cat {KEEP}").stdout == "mine\n"
