"""The fast re-apply (issue 29), on one Debian 13 host over SSH: a converged host runs only the verifier, the
record and the checks; anything changed by hand sends the next apply down the full path, which repairs it.

The host starts converged: the session's DeskMini host as its from-bare apply left it (tests/support/snapshot.py;
that apply, and the full path it takes on a stock host, are test_apply.py's), under this module's name and state.

Each case changes the converged host as a person could (a package removed, a wheel added or removed, a line added to
a file provision wrote, the Jupyter unit stopped or disabled, a Debian component removed, the record naming an older
provision, the profile changed), then applies: the summary must name the full path and why, the host must be
repaired, and the next apply must take the fast path again. Frameworks are skipped as in test_apply.py (torch's
2.5 GB of wheels would dominate the run and change nothing here).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import snapshot
from tests.support.apt import APT_WAIT
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("fast")
PROFILE = ROOT / "profiles/deskmini.yaml"
VENV = "/opt/provision/venv"
RECORD = "/var/lib/provision/applied.json"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def sh(command: str, user: str = "root") -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", command], capture_output=True, text=True,
                          timeout=600)


class Host:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def apply(self, *args: str, profile: Path = PROFILE) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "provision", "apply", str(profile), "--os", "debian-13",
                               "--sandbox", NAME, "--yes", "--skip-frameworks", *args], capture_output=True, text=True,
                              cwd=ROOT, env=self.env, stdin=subprocess.DEVNULL, timeout=2400)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
        return proc


def changed(stdout: str) -> int:
    match = re.search(r"changed=(\d+)", stdout)
    assert match, stdout[-2000:]
    return int(match.group(1))


@pytest.fixture(scope="module")
def host(tmp_path_factory, converged_deskmini):
    """The session's converged DeskMini host (tests/support/snapshot.py: applied from bare, every role, and the
    fingerprint recorded at the end; test_apply.py asserts that apply), started under this module's name
    (snapshot.start: the files' times put back, which docker commit keeps to the second)."""
    tmp = tmp_path_factory.mktemp("fast")
    h = Host(os.environ | {"PROVISION_STATE": str(tmp / "state")})
    subprocess.run(["docker", "rm", "-f", NAME], capture_output=True)
    snapshot.start(NAME, converged_deskmini)
    yield h
    subprocess.run([sys.executable, "-m", "provision", "sandbox", "down", NAME], capture_output=True, cwd=ROOT,
                   env=h.env)


def path_said(out: str) -> str:
    return next((line for line in out.splitlines() if line.startswith(f"{NAME}: ") and " path" in line), "no path line")


def assert_fast(proc: subprocess.CompletedProcess) -> None:
    out = proc.stdout
    assert f"{NAME}: fast path: fingerprint matches its last converged apply" in out, path_said(out)
    assert re.search(rf"{NAME}\s+\S+\s+ok \(fast\)\s+0\s", out), out[-3000:]
    assert changed(out) == 0
    assert "provision check passed" in out, out[-3000:]
    assert "18 passed" in out  # the checks ran, every one of them (the environment on the planned interpreter, the account in no root-equivalent group)


def reasons(proc: subprocess.CompletedProcess) -> list[str]:
    """What the summary's path line gives for the full path, one reason a part that differed ("; " between them)."""
    line = path_said(proc.stdout)
    head = f"{NAME}: full path: "
    assert line.startswith(head), line
    return line[len(head):].split("; ")


def assert_full(proc: subprocess.CompletedProcess, why: str) -> None:
    out = proc.stdout
    assert why in reasons(proc), path_said(out)
    assert "provision check passed" in out, out[-3000:]


def verify_report() -> dict:
    found = sh("cat /var/lib/provision/verify/verify.json")
    return json.loads(found.stdout) if found.returncode == 0 else {}


def test_a_converged_host_runs_only_the_verifier_the_record_and_the_checks(host):
    before = verify_report().get("created")
    proc = host.apply("--timings")
    assert_fast(proc)
    # No playbook ran: one round trip read the host, ran the verifier and fetched the record (provision.pipeline.probe;
    # each step a host ran is listed as it ends, on stderr), and the checks asserted on that same reading.
    steps = proc.stderr
    assert re.search(rf"^{NAME}\s+ok\s+Read the host in one round trip: ", steps, re.M), steps[-3000:]
    assert re.search(rf"^{NAME}\s+ok\s+run \| Run the verifier$", steps, re.M), steps[-3000:]
    assert "no playbook: every host answered converged in its one round trip" in proc.stdout, proc.stdout[-3000:]
    for step in ("Gathering Facts", "Open the ledger", "Install the venv prerequisites", "Close the ledger",
                 "Write the record"):
        assert step not in proc.stdout + steps, step
    # The verifier ran in that round trip: the report on the host is a new one, and it passed.
    report = verify_report()
    assert report["created"] != before and report["summary"]["failed"] == 0 and report["summary"]["passed"] > 0
    # The wheels are on the host once, in the environment: no installer's cache is left in the account's home.
    caches = sh("ls -A /home/ml/.cache")
    assert caches.returncode in (0, 2) and not {"uv", "provision-uv", "pip"} & set(caches.stdout.split()), caches.stdout
    record = json.loads(sh(f"cat {RECORD}").stdout)
    assert record["fingerprint"]["digest"] and set(record["fingerprint"]["parts"]) >= {
        "packages", "wheels", "files", "units", "sources", "ledger"}
    # This controller did not converge the host (the snapshot's apply ran from another state directory): the round
    # trip brought the host's ledger with the record, so `apply --dry-run --diff` of a plan change lists what goes.
    fetched = Path(host.env["PROVISION_STATE"]) / "hosts" / NAME / "ledger.json"
    assert json.loads(fetched.read_text()) == json.loads(sh("cat /var/lib/provision/ledger.json").stdout)


def test_check_mode_says_no_change(host):
    proc = host.apply("--dry-run")
    assert f"{NAME}: no change (fingerprint matches)" in proc.stdout, proc.stdout[-3000:]
    assert changed(proc.stdout) == 0


def test_full_runs_every_role(host):
    # What an install cut short leaves (a power cut between uv's copy and the cache's removal): provision's own uv
    # cache in the account's home, which a full apply that installs nothing removes; the account's own stays.
    planted = sh("sudo -u ml sh -c 'mkdir -p ~/.cache/provision-uv/archive-v0/x ~/.cache/uv"
                 " && echo left > ~/.cache/provision-uv/archive-v0/x/f && echo mine > ~/.cache/uv/mine'")
    assert planted.returncode == 0, planted.stderr
    proc = host.apply("--full", "--timings")
    assert_full(proc, "--full asked for it")
    assert changed(proc.stdout) == 1  # that removal, nothing else
    left = sh("test ! -e /home/ml/.cache/provision-uv && cat /home/ml/.cache/uv/mine")
    assert (left.returncode, left.stdout.strip()) == (0, "mine"), left.stdout + left.stderr
    assert "Open the ledger" in proc.stderr
    assert_fast(host.apply())


# (what a person changes, the words the summary gives, how to see the host repaired; None: nothing to repair)
CASES = {
    "package-removed": (
        # apt_wait: apt's archive lock, which every sandbox shares, may be held by another sandbox's download.
        APT_WAIT + "apt_wait apt-get remove -y -qq nvidia-smi",
        "a package changed",
        ("dpkg-query -W -f '${db:Status-Abbrev}' nvidia-smi", "ii")),
    "wheel-removed": (
        # With a file in the account's own uv cache: uv installs numpy again, with a cache of provision's own that
        # it removes after; the account's ~/.cache/uv is left as it was.
        f"sudo -u ml {VENV}/bin/python -m pip uninstall -y -q numpy"
        " && sudo -u ml sh -c 'mkdir -p ~/.cache/uv && echo mine > ~/.cache/uv/mine'",
        "the environment's distributions changed",
        (f"sudo -u ml {VENV}/bin/python -c 'import numpy; print(numpy.__version__)'"
         " && cat /home/ml/.cache/uv/mine && ls /home/ml/.cache/uv && test ! -e /home/ml/.cache/provision-uv",
         "2.2.6\nmine\nmine")),
    "wheel-added": (
        # A distribution installed by hand (its metadata is what pip and importlib read): not provision's, it stays.
        f"sudo -u ml sh -c 'd=$({VENV}/bin/python -c \"import sysconfig; print(sysconfig.get_paths()[\\\"purelib\\\"])\")"
        "/handmade-1.0.dist-info && mkdir -p $d && printf \"Metadata-Version: 2.1\\nName: handmade\\nVersion: 1.0\\n\""
        " > $d/METADATA'",
        "the environment's distributions changed",
        (f"sudo -u ml {VENV}/bin/python -c 'import importlib.metadata as m; print(m.version(\"handmade\"))'", "1.0")),
    "line-added-to-a-file": (
        "echo 'export CUDA_HOME=/somewhere/else' >> /etc/profile.d/provision-cuda.sh",
        "a file provision wrote changed",
        ("grep -c somewhere /etc/profile.d/provision-cuda.sh || true", "0")),
    "jupyter-stopped": (
        "systemctl stop provision-jupyter",
        "a unit changed (stopped, disabled or removed)",
        ("systemctl is-active provision-jupyter", "active")),
    "jupyter-disabled": (
        "systemctl disable -q provision-jupyter",
        "a unit changed (stopped, disabled or removed)",
        ("systemctl is-enabled provision-jupyter", "enabled")),
    "component-removed": (
        "sed -i 's/^Components: main contrib non-free non-free-firmware$/Components: main contrib non-free-firmware/' "
        "/etc/apt/sources.list.d/debian.sources && ! grep -q ' non-free ' /etc/apt/sources.list.d/debian.sources",
        "apt's sources, pins or keyrings changed",
        # Added back to each entry (at the end of its Components line, as the module adds).
        ("grep -cE '^Components:.* non-free( |$)' /etc/apt/sources.list.d/debian.sources", "2")),
    "provision-upgraded": (
        # The record as an older provision left it: its roles' version differs from this one's.
        f"python3 -c \"import json; p='{RECORD}'; r=json.load(open(p)); r['fingerprint']['key']['roles']='0.0.9+older'; "
        "json.dump(r, open(p, 'w'))\"",
        "provision's roles changed (another version of provision)",
        None),
}


# The cases in rounds (issue 52: 10 applies instead of 22): a round makes its changes together, then applies once,
# reads each repair, and applies again. The summary names every part of the fingerprint that differs, each in its own
# words (roles/preflight/vars/main.yml), so no two cases of a round share their words: each case's own words in the
# path line show that its change alone was seen, and the round's line names nothing else
# (test_a_round_names_only_what_it_changed).
ROUNDS = (("package-removed", "wheel-removed", "line-added-to-a-file", "jupyter-stopped", "component-removed"),
          ("wheel-added", "jupyter-disabled", "provision-upgraded"))


@pytest.fixture(scope="module")
def by_hand(host) -> dict[str, tuple]:
    """Each case's (round's full apply, what its repair check read after it, the round's next apply)."""
    done: dict[str, tuple] = {}
    for cases in ROUNDS:
        assert len({CASES[case][1] for case in cases}) == len(cases), cases  # a reason names one case of a round
        for case in cases:
            made = sh(CASES[case][0])
            assert made.returncode == 0, f"{case}: {made.stdout}{made.stderr}"
        full = host.apply()
        read = {case: sh(CASES[case][2][0]) for case in cases if CASES[case][2] is not None}
        again = host.apply()
        done.update({case: (full, read.get(case), again) for case in cases})
    return done


@pytest.mark.parametrize("case", list(CASES))
def test_a_change_by_hand_takes_the_full_path_and_is_repaired(by_hand, case):
    _change, why, repaired = CASES[case]
    full, got, again = by_hand[case]
    assert_full(full, why)
    if repaired is not None:
        command, expected = repaired
        assert got.stdout.strip() == expected, f"{case}: not repaired: {command} said {got.stdout!r} {got.stderr[-300:]}"
    assert_fast(again)


def test_a_round_names_only_what_it_changed(by_hand):
    for cases in ROUNDS:
        full = by_hand[cases[0]][0]
        assert sorted(reasons(full)) == sorted(CASES[case][1] for case in cases), path_said(full.stdout)


def test_a_changed_profile_takes_the_full_path(host, tmp_path):
    other = tmp_path / "deskmini-8890.yaml"
    other.write_text(PROFILE.read_text().replace("port: 8888", "port: 8890"))
    assert "port: 8890" in other.read_text()
    proc = host.apply(profile=other)
    assert_full(proc, "the plan changed")
    listening = sh("python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8890), 5); print('open')\"")
    assert listening.stdout.strip() == "open", listening.stderr
    assert_fast(host.apply(profile=other))
