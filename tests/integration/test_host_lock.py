"""The apply lock on the host and the controller's wheelhouse (issue 39), on a stock Debian 13 host over SSH.

- A wheel cut short in the controller's wheelhouse (an older provision's download, a full disk, a copy that stopped)
  is found before any host reads the wheelhouse, removed and fetched again; the host installs the whole one.
- Two controllers on one host (two provision state directories: the controllers' own locks never meet): the second
  apply is refused by the lock on the host in one line naming the first (its controller, pid, command) and what to
  do; nothing changes, and the first finishes undisturbed and releases the lock.
- A controller killed with SIGKILL, all its processes with it, right after it took the host's lock: the next apply
  takes over both its locks (the controller's, the host's) with one line each, and converges.
- A power cut (`docker kill`, then the host started again) right after the lock was taken: the next apply takes the
  lock over (the host started again since) and converges. A container shares its kernel's boot id with every other
  container, so the test checks that the boot id stayed and pid 1's start changed: that start is what tells a
  container's new boot (plugins/modules/provision_lock.py reads both).
- `provision destroy` takes the same lock: while an apply from another controller holds it, the destroy is refused
  (exit 2, one line naming the apply) and removes nothing; once the apply is done a destroy removes what the ledger
  lists, taking over a stale lock with one line, and leaves no lock.

The host has a wheelhouse of its own (PROVISION_CACHE is the test's): the shared one is never touched. Its wheels
come from the shared wheelhouse by hard link where they are there already, so only what the test cuts is fetched.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.leftovers import Commands, kill_leftovers
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("host-lock")
PROFILE = str(ROOT / "profiles/deskmini.yaml")
ARGS = ["--os", "debian-13", "--tags", "python_env", "--yes", "--skip-frameworks"]
LOCK = "/var/lib/provision/apply.lock"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def sh(script: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", NAME, "sh", "-ec", script], capture_output=True, text=True, check=check,
                          timeout=300)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from provision import sandbox
    from provision.render.ansible import write_yaml
    from provision.state import cache_root

    shared = cache_root()
    tmp = tmp_path_factory.mktemp("hostlock")
    cache = tmp / "cache"
    (cache / "wheels").mkdir(parents=True)
    (shared / "apt").mkdir(parents=True, exist_ok=True)
    (cache / "apt").symlink_to(shared / "apt")  # apt's downloads stay shared: apt locks its own archive
    for wheel in (shared / "wheels").glob("*.whl"):
        if wheel.stat().st_size < 300 * 1024 * 1024:  # not torch's and its like: this plan has no framework
            os.link(wheel, cache / "wheels" / wheel.name)
    (tmp / "tmp").mkdir()
    base = os.environ | {"PROVISION_CACHE": str(cache), "TMPDIR": str(tmp / "tmp")}
    with private_cache(cache):  # the sandbox mounts this wheelhouse; its SSH key is this cache's too
        sandbox.remove(NAME)
        sandbox.start(NAME, "13", network="bridge")
        inventory = tmp / "inventory.yml"
        write_yaml(sandbox.inventory([NAME]), inventory)
    one = Commands(base | {"PROVISION_STATE": str(tmp / "state-1")}, markers=[str(tmp), f"--limit {NAME}"])
    two = Commands(base | {"PROVISION_STATE": str(tmp / "state-2")}, markers=[str(tmp), f"--limit {NAME}"])
    try:
        yield {"tmp": tmp, "cache": cache, "inventory": inventory, "one": one, "two": two}
    finally:
        one.cleanup()
        two.cleanup()
        sandbox.remove(NAME)


@contextlib.contextmanager
def private_cache(cache: Path) -> Iterator[None]:
    old = os.environ.get("PROVISION_CACHE")
    os.environ["PROVISION_CACHE"] = str(cache)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PROVISION_CACHE")
        else:
            os.environ["PROVISION_CACHE"] = old


def apply(cmds: Commands, inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    proc = cmds.run("apply", PROFILE, "-i", str(inventory), *ARGS, *extra)
    assert not proc.left, f"left running after exit {proc.returncode}: {proc.left}"
    return proc


def start_until_locked(cmds: Commands, inventory: Path) -> tuple[subprocess.Popen, list[str]]:
    """An apply started and read until the host's lock is taken (the gate's task line)."""
    proc = cmds.start("apply", PROFILE, "-i", str(inventory), *ARGS)
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if "gate | Take the apply lock on the host" in line:
            return proc, seen
    raise AssertionError("the apply ended before it took the host's lock: " + "".join(seen)[-3000:])


def in_session(session: int) -> list[int]:
    found = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError):
            if os.getsid(pid) == session:
                found.append(pid)
    return found


def lock_on_host() -> dict | None:
    got = sh(f"cat {LOCK}", check=False)
    return json.loads(got.stdout) if got.returncode == 0 else None


def numpy_imports() -> bool:
    return sh("/opt/provision/venv/bin/python -c 'import numpy'", check=False).returncode == 0


def test_a_wheel_cut_short_in_the_wheelhouse_is_fetched_again_and_the_whole_one_installed(host):
    wheels = host["cache"] / "wheels"
    planned = subprocess.run([str(ROOT / ".venv/bin/provision"), "plan", PROFILE, "--os", "debian-13", "--json"],
                             capture_output=True, text=True, check=True)
    version = re.search(r'"numpy==([\d.]+)"', planned.stdout).group(1)
    numpy = sorted(wheels.glob(f"numpy-{version}-cp313-*.whl"))
    if numpy:  # as the shared wheelhouse has it: a hard link, which the cut must not reach
        whole = numpy[0].read_bytes()
        numpy[0].unlink()
        planted = numpy[0]
    else:  # not downloaded there yet: the name pip downloads for this plan's numpy
        planted = wheels / f"numpy-{version}-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
        whole = b"PK" + b"\0" * 4_000_000
    planted.write_bytes(whole[: len(whole) // 3])  # what a download cut short leaves
    proc = apply(host["one"], host["inventory"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"wheelhouse: {planted.name} is not whole" in proc.stderr, proc.stderr[-3000:]
    again = sorted(wheels.glob(f"numpy-{version}-cp313-*.whl"))
    assert again and again[0].stat().st_size > len(whole) // 3
    with zipfile.ZipFile(again[0]) as archive:
        assert archive.testzip() is None  # whole: every member's CRC holds
    index = json.loads((wheels / ".manifest.json").read_text())  # the wheelhouse's record (provision.artifacts)
    assert index[again[0].name]["size"] == again[0].stat().st_size
    # The host installed from the wheelhouse (PIP_FIND_LINKS) the wheel fetched again.
    assert numpy_imports()
    assert lock_on_host() is None, "the lock stayed after an apply that finished"


def test_a_second_controller_is_refused_by_the_hosts_lock_naming_the_first(host):
    sh("rm -rf /opt/provision/venv")  # the first apply makes it again: long enough for the second to meet it
    first, seen = start_until_locked(host["one"], host["inventory"])
    try:
        assert first.poll() is None, "".join(seen)[-2000:]
        # Not apply(): the first run's processes match the same markers and rightly still run. The refused command
        # started nothing that may outlive it: nothing is left in its own session.
        second = host["two"].run("apply", PROFILE, "-i", str(host["inventory"]), *ARGS)
        assert not in_session(host["two"].sessions[-1])
        assert second.returncode == 2, second.stdout[-3000:] + second.stderr[-3000:]
        refused = [line for line in second.stderr.splitlines() if line.startswith("refused: ")]
        assert len(refused) == 1, second.stderr[-3000:]
        assert re.match(rf"refused: {re.escape(NAME)}: preflight: {re.escape(NAME)}: another provision apply holds "
                        rf"this host \(from \S+ \(machine-id \w+\), as \S+, provision pid {first.pid}, taken [\dT:+-]+: "
                        r"`provision apply .*`; its SSH connection to this host is open\): wait for it to finish, or "
                        r"if it no longer runs \(its controller is off\), remove its lock with "
                        rf"`sudo rm {LOCK}` on the host, then apply again\. Nothing was changed\.", refused[0]), refused[0]
        # The lock is still the first's, which goes on undisturbed.
        assert lock_on_host()["holder"]["pid"] == first.pid
        assert first.poll() is None or first.returncode == 0
    finally:
        rest = first.stderr.read() if first.stderr else ""
        out = first.stdout.read() if first.stdout else ""
        code = first.wait(timeout=900)
    assert code == 0, out[-3000:] + rest[-3000:]
    assert not host["one"].left(first)
    assert lock_on_host() is None
    assert numpy_imports()


def test_a_lock_left_by_a_controller_killed_with_sigkill_is_taken_over(host):
    cmds = host["one"]
    killed, seen = start_until_locked(cmds, host["inventory"])
    # The controller goes at once, every process of it (as a controller that loses power): nothing releases a lock.
    kill_leftovers(killed.pid, cmds.markers, cmds.env)
    killed.wait(timeout=30)
    assert killed.returncode == -signal.SIGKILL
    held = lock_on_host()
    assert held and held["holder"]["pid"] == killed.pid, held
    deadline = time.monotonic() + 30  # the host's sshd sees the connection go
    while time.monotonic() < deadline and sh(f"test -d /proc/{held['session']['pid']}", check=False).returncode == 0:
        time.sleep(0.5)
    proc = apply(cmds, host["inventory"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout + proc.stderr
    # The controller's own lock: one line naming the provision that held it.
    assert re.search(rf"took over the lock on host {re.escape(NAME)} left by a provision apply that is gone \(pid "
                     rf"{killed.pid}, started ", text), text[-3000:]
    # The host's lock: one line in the summary naming the same apply and why it was stale.
    on_host = [line for line in proc.stdout.splitlines() if line.startswith(f"{NAME}: took over the lock on this host")]
    assert len(on_host) == 1, proc.stdout[-3000:]
    assert f"provision pid {killed.pid}" in on_host[0] and on_host[0].endswith(
        "the SSH connection that took it is gone (its controller was stopped or lost the host)"), on_host[0]
    assert lock_on_host() is None
    assert numpy_imports()


def test_a_lock_from_before_a_power_cut_is_taken_over(host):
    from provision.sandbox import ssh_key, ssh_port, wait_ssh

    cmds = host["one"]
    boot_id = sh("cat /proc/sys/kernel/random/boot_id").stdout
    pid1 = sh("cut -d' ' -f22 /proc/1/stat").stdout
    cut, seen = start_until_locked(cmds, host["inventory"])
    subprocess.run(["docker", "kill", NAME], check=True, capture_output=True)  # the power goes
    rest = cut.stderr.read() if cut.stderr else ""
    cut.wait(timeout=300)
    assert cut.returncode != 0, "".join(seen)[-2000:] + rest[-2000:]
    subprocess.run(["docker", "start", NAME], check=True, capture_output=True)
    with private_cache(host["cache"]):
        wait_ssh(NAME, ssh_port(NAME), ssh_key(), timeout=120)
    held = lock_on_host()
    assert held and held["holder"]["pid"] == cut.pid, held
    # What a container's new boot changes: not the kernel's boot id (shared), the start of its pid 1.
    assert sh("cat /proc/sys/kernel/random/boot_id").stdout == boot_id
    assert sh("cut -d' ' -f22 /proc/1/stat").stdout != pid1
    proc = apply(cmds, host["inventory"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    on_host = [line for line in proc.stdout.splitlines() if line.startswith(f"{NAME}: took over the lock on this host")]
    assert len(on_host) == 1 and f"provision pid {cut.pid}" in on_host[0], proc.stdout[-3000:]
    assert on_host[0].endswith("the host has started again since (a power cut or a reboot)"), on_host[0]
    assert lock_on_host() is None
    assert numpy_imports()


PROBE = "/var/lib/pv-destroy-probe"  # a directory the ledger says provision made: what a destroy removes


def plant_ledger() -> dict:
    """The host's ledger lists the environment and a directory of provision's (the --tags applies of this module do
    not run the ledger role, so it claims nothing itself): what a destroy that went ahead would remove."""
    ledger = {"schema": "provision.ledger/1", "packages": {}, "found": {}, "wheels": {}, "paths": [PROBE],
              "units": [], "accounts": [], "venvs": ["/opt/provision/venv"], "planned": {}, "pending": None}
    sh(f"install -d -m 0755 {PROBE} /var/lib/provision && echo kept > {PROBE}/file && "
       f"printf '%s' '{json.dumps(ledger)}' > /var/lib/provision/ledger.json && "
       "chmod 0644 /var/lib/provision/ledger.json")
    return ledger


def destroy(cmds: Commands, inventory: Path) -> subprocess.CompletedProcess:
    return cmds.run("destroy", PROFILE, "-i", str(inventory), "--os", "debian-13", "--yes")


def test_a_destroy_is_refused_while_an_apply_holds_the_lock_and_takes_over_a_stale_one(host):
    """Last in the module: its second destroy takes the environment away."""
    plant_ledger()
    sh("rm -rf /opt/provision/venv")  # the apply makes it again: long enough for the destroy to meet it
    first, seen = start_until_locked(host["one"], host["inventory"])
    try:
        assert first.poll() is None, "".join(seen)[-2000:]
        refused = destroy(host["two"], host["inventory"])
        assert not in_session(host["two"].sessions[-1])
        assert refused.returncode == 2, refused.stdout[-3000:] + refused.stderr[-3000:]
        lines = [line for line in refused.stdout.splitlines() if "another provision apply holds this host" in line]
        assert len(lines) == 1, refused.stdout[-3000:]
        assert lines[0].startswith(f"{NAME}: not destroyed: refused (changed=0) preflight: {NAME}: "), lines[0]
        assert f"provision pid {first.pid}, taken " in lines[0] and "`provision apply " in lines[0], lines[0]
        # Nothing removed: the directory the ledger lists, the ledger itself; the lock is still the apply's.
        assert sh(f"cat {PROBE}/file").stdout == "kept\n"
        assert json.loads(sh("cat /var/lib/provision/ledger.json").stdout)["paths"] == [PROBE]
        assert lock_on_host()["holder"]["pid"] == first.pid
    finally:
        rest = first.stderr.read() if first.stderr else ""
        out = first.stdout.read() if first.stdout else ""
        code = first.wait(timeout=900)
    assert code == 0, out[-3000:] + rest[-3000:]
    assert numpy_imports() and sh(f"test -d {PROBE}", check=False).returncode == 0

    # An apply killed with -9 just after it took the lock leaves a stale one: the destroy takes it over, in one line,
    # removes what the ledger lists, and leaves no lock.
    killed, seen = start_until_locked(host["one"], host["inventory"])
    kill_leftovers(killed.pid, host["one"].markers, host["one"].env)
    killed.wait(timeout=30)
    held = lock_on_host()
    assert held and held["holder"]["pid"] == killed.pid, held
    deadline = time.monotonic() + 30  # the host's sshd sees the connection go
    while time.monotonic() < deadline and sh(f"test -d /proc/{held['session']['pid']}", check=False).returncode == 0:
        time.sleep(0.5)
    gone = destroy(host["two"], host["inventory"])
    assert gone.returncode == 0, gone.stdout[-3000:] + gone.stderr[-3000:]
    notes = [line for line in gone.stdout.splitlines() if line.startswith(f"{NAME}: took over the lock on this host")]
    assert len(notes) == 1 and f"provision pid {killed.pid}" in notes[0], gone.stdout[-3000:]
    assert sh(f"test -e {PROBE}", check=False).returncode != 0
    assert sh("test -e /opt/provision/venv", check=False).returncode != 0
    assert lock_on_host() is None
