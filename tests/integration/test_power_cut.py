"""A cut at each step of a DeskMini apply, and the next apply converges (issue 39), on a stock Debian 13 host over SSH.

Each point of POINTS starts an apply (profiles/deskmini.yaml, --os debian-13, --skip-frameworks), waits for a moment
it observes for real, and cuts there:

- power: `docker kill` of the host, then `docker start` (what survives is what a disk keeps: the container's files;
  /run is a tmpfs and goes, as on a real host; a container's page cache is the controller's, so no write is torn below
  what the writer itself left half done);
- controller: SIGKILL to provision and every process under it (ansible-playbook, its workers, ssh), all at once;
- ssh: the host's sshd processes serving the admin account's connection are killed (SIGKILL), so the connection
  drops under the running task; the controller survives and sees the host unreachable.

The moment comes from the host itself (a watcher on the host reads /proc every few ms: apt's download in its
partial folder, `dpkg --unpack` or `--configure` with dpkg's journal begun, pip extracting a wheel, `python -m venv`
inside ensurepip, a file or unit appearing) or from the apply's own lines (the task whose result it prints is done and
the next one started). Where the cut is a power cut, the watcher stops (SIGSTOP) the process it found, so the cut lands
exactly there and not a few milliseconds later; the host then dies as a whole.

After each cut, one apply must exit 0 with `provision check` passed, leave `dpkg --audit` empty and no pending note,
have a ledger that lists what is installed (the planned packages dpkg has, the planned wheels the environment has, the
environment and the Jupyter unit), keep the planted files of the accounts (a note in each home, a wheel of the notebook
account's own in the environment, never owned by the ledger), and a second apply must report changed=0 (--full for
the long points; the default point's second apply is a plain one, as a user's next apply is).

The points share one host, which starts converged: the session's converged DeskMini host (tests/support/snapshot.py:
the same plan, --os debian-13 --skip-frameworks, applied from bare; that apply is test_apply.py's subject, and an
apply from bare whose check passes is test_dpkg_interrupted.py's and test_browser.py's), under this module's name and
state. The first point replaces it with a stock host (the issue's own case: the cut falls in python3-apt's unpack,
provision's first install; it runs first in the module, before any apply), and each point leaves the host converged
for the next, which first takes away what its cut needs to be re-made (a wheel uninstalled by the account, packages
purged, a unit or files removed). A point after one that failed converges the host first (ensure_converged).

The default command runs one point, wheel-numpy-files (the converged host, then the cut; before the snapshot the
host was converged from bare first: about 300 s on 2 cores while other test runs shared them, 2026-11-27; figures in
docs/testing.md, "Issue 52: less work"); the others are `long` (PROVISION_LONG=1), with their
figures in docs/reliability.md. Two points found bugs, fixed in the product: pip-numpy-metadata (run while pip
installed the wheels, before uv; a wheel whose METADATA was written before its libraries read as installed for ever:
provision_facts' `unfinished`, the ledger role,
the fingerprint's `pending`) and dpkg-configure-driver (libc-bin's and nvidia-alternative's pending triggers made
provision's own interrupted work someone else's: provision_facts' TRIGGERED).
The driver's reboot step: a container's driver install is its user space only (nvidia_driver's `module.yml`, where
a full install reboots, does not run), so driver-reboot restarts the host (docker kill + start) at the moment a full
install reboots: the driver's packages just installed and the reboot notified; tests/integration/test_vm_driver.py
reboots a VM for real (long).

Time: PROVISION_POWER_CUT_OUT=FILE writes the table (point, cut, what the cut left, seconds to converge); it is also
printed at the end of the module. Figures: docs/reliability.md, "A cut at each step of an apply".
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import signal
import subprocess
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from tests.support import snapshot
from tests.support.apt import APT_WAIT
from tests.support.leftovers import Commands
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("power-cut")
PROFILE = str(ROOT / "profiles/deskmini.yaml")
ARGS = ["--os", "debian-13", "--sandbox", NAME, "--yes", "--skip-frameworks"]
VENV = "/opt/provision/venv"
SITE = f"{VENV}/lib/python3.13/site-packages"
UNIT = "/etc/systemd/system/provision-jupyter.service"
# The environment's installer as /proc shows it: uv (`.../uv pip install ...`), or pip where a plan names no installer.
INSTALLER = r"(?:/uv pip|bin/pip)"
DRIVER_USERSPACE = ["libcuda1", "libnvidia-ml1", "nvidia-smi"]
PLANNED_WHEELS = ["numpy", "jupyterlab", "ipykernel", "nvidia-cuda-runtime-cu12", "nvidia-cuda-nvrtc-cu12",
                  "nvidia-cublas-cu12", "nvidia-cudnn-cu12"]
HOME_NOTES = {"admin": "/home/admin/notes/keep.txt", "ml": "/home/ml/notes/keep.txt"}
MINE = "pv-mine"  # the notebook account's own wheel, installed by it into the environment
OWN_ARCHIVE = "/var/cache/apt/pv-own"

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# --- the points ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Moment:
    """When to cut: a process on the host (cmdline regex, optionally with paths that must exist / be absent, and
    stopped there when `freeze`), or a line of the apply's output (the task named there is done)."""

    process: str = ""
    exists: tuple[str, ...] = ()
    absent: tuple[str, ...] = ()
    freeze: bool = False
    line: str = ""
    what: str = ""


@dataclass(frozen=True)
class Point:
    id: str
    role: str
    cut: str  # power | controller | ssh
    moment: Moment
    prepare: str = ""  # shell run as root on the host before the apply: takes away what the cut apply re-makes
    restore: str = ""  # shell run after the point's checks (a test setting taken back)
    full: bool = False  # --full for the cut apply (nothing taken away: the fast path would skip the roles)
    bare: bool = False  # the point starts from a bare host
    long: bool = False


POINTS = [
    Point("dpkg-unpack-python3-apt", "nvidia_driver", "power", bare=True, long=True,
          moment=Moment(process=r"dpkg .*--unpack", exists=("/var/lib/dpkg/updates/0*",), freeze=True,
                        what="dpkg unpacking python3-apt (provision's first install), its journal begun")),
    Point("wheel-numpy-files", "python_env", "power",
          prepare=f"runuser -u ml -- {VENV}/bin/python -m pip uninstall -y -q numpy",
          moment=Moment(process=INSTALLER + r" install .*numpy", freeze=True,
                        exists=(f"{SITE}/numpy/__init__.py",),
                        absent=(f"{SITE}/numpy-2.2.6.dist-info/INSTALLER",),
                        what="the installer (uv) copying numpy into the environment: its files part written, its "
                             "INSTALLER not (uv writes the dist-info after the package's files, INSTALLER last)")),
    Point("unit-written-not-started", "jupyter", "power", long=True,
          prepare=f"systemctl disable --now provision-jupyter; rm -f {UNIT}; systemctl daemon-reload",
          moment=Moment(exists=(UNIT,), what="the Jupyter unit file written, the service not yet enabled")),
    Point("apt-download", "nvidia_driver", "power", long=True,
          prepare=(f"install -d {OWN_ARCHIVE}/partial && echo 'Dir::Cache::Archives \"{OWN_ARCHIVE}/\";' > "
                   "/etc/apt/apt.conf.d/00pv-own-archive && DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "
                   + " ".join(DRIVER_USERSPACE)),
          restore=f"rm -rf /etc/apt/apt.conf.d/00pv-own-archive {OWN_ARCHIVE}",
          moment=Moment(process=r"/usr/lib/apt/methods/https?$", exists=(f"{OWN_ARCHIVE}/partial/*.deb",),
                        freeze=True, what="apt downloading the driver's packages (a .deb half in partial/)")),
    Point("dpkg-configure-driver", "nvidia_driver", "power", long=True,
          prepare=APT_WAIT + "apt_wait env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q " + " ".join(DRIVER_USERSPACE),
          moment=Moment(process=r"dpkg .*--configure", freeze=True,
                        what="dpkg configuring the driver's user-space packages")),
    # A full install reboots here (module.yml flushes the handlers: "Reboot to load the NVIDIA kernel module") and
    # goes on once the host is back; a container's install is the user space only and does not, so the host is
    # restarted at that moment instead: the driver's packages just installed (the reboot notified), the task after
    # them begun, and the apply that asked for it loses the host.
    Point("driver-reboot", "nvidia_driver", "power", long=True,
          prepare="DEBIAN_FRONTEND=noninteractive apt-get purge -y -q " + " ".join(DRIVER_USERSPACE),
          moment=Moment(line="packages | Read the host again after installing",
                        what="the driver's packages installed, where a full install reboots to load its module")),
    Point("venv-ensurepip", "python_env", "power", long=True,
          prepare=f"rm -rf {VENV}",
          moment=Moment(process=r"ensurepip", absent=(f"{VENV}/bin/pip",), freeze=True,
                        what="python -m venv installing pip into the new environment (no bin/pip yet)")),
    Point("pip-cudnn-controller-killed", "cudnn", "controller", long=True,
          prepare=f"runuser -u ml -- {VENV}/bin/python -m pip uninstall -y -q nvidia-cudnn-cu12",
          moment=Moment(process=INSTALLER + r" install .*nvidia-cudnn", exists=(f"{SITE}/nvidia/cudnn/lib/lib*",),
                        what="pip extracting nvidia-cudnn-cu12 (700 MB)")),
    Point("pip-cublas-ssh-dropped", "cudnn", "ssh", long=True,
          prepare=f"runuser -u ml -- {VENV}/bin/python -m pip uninstall -y -q nvidia-cublas-cu12",
          moment=Moment(process=INSTALLER + r" install .*nvidia-cublas", exists=(f"{SITE}/nvidia/cublas/lib/lib*",),
                        what="pip extracting nvidia-cublas-cu12 (390 MB)")),
    Point("cuda-env-file", "cuda", "power", long=True,
          prepare="rm -f /etc/provision/cuda.env /etc/profile.d/provision-cuda.sh",
          moment=Moment(exists=("/etc/provision/cuda.env",), what="the CUDA environment file written, the profile "
                                                                   "script not yet")),
    Point("verifier-files", "gpu_verify", "power", long=True,
          prepare="rm -rf /opt/provision/verify",
          moment=Moment(exists=("/opt/provision/verify/*",), what="the verifier's files being copied")),
    Point("ledger-commit", "host_record", "power", long=True, full=True,
          moment=Moment(line="Read the installed packages and wheels",
                        what="the ledger being closed (the task before it done)")),
    Point("record-write-controller-killed", "host_record", "controller", long=True, full=True,
          moment=Moment(line="Read the fingerprint of what provision owns",
                        what="the record being written (the fingerprint read just before)")),
]

# --- the host -----------------------------------------------------------------------------------------------------

# Runs on the host as root (python3 is on a stock Debian): finds the moment in /proc every few milliseconds, stops the
# process there when asked, prints one JSON line and exits; exit 1 when it did not come within the time given.
WATCHER = r"""
import glob, json, os, re, signal, sys, time
spec = json.loads(sys.argv[1])
pattern = re.compile(spec["process"]) if spec["process"] else None
deadline = time.monotonic() + spec["timeout"]
me = os.getpid()

def find():
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                args = handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if args and pattern.search(args):
            return int(pid), args
    return None

def tree(root):
    # root and every process under it (parents first), from /proc/*/stat
    parents = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    parents[int(pid)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo += [child for child, parent in parents.items() if parent == pid]
    return out

found = None
while time.monotonic() < deadline:
    if pattern:
        if found is None or not os.path.exists(f"/proc/{found[0]}"):
            found = find()
        if found is None:
            time.sleep(0.005)
            continue
    if all(glob.glob(p) for p in spec["exists"]) and not any(glob.glob(p) for p in spec["absent"]):
        if found and spec["freeze"]:
            for pid in tree(found[0]):  # dpkg and its dpkg-deb, ensurepip and its pip
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    pass
        print(json.dumps({"pid": found[0] if found else None, "args": found[1][:300] if found else "",
                          "at": time.time()}), flush=True)
        sys.exit(0)
    time.sleep(0.005)
sys.exit(1)
"""


def sh(script: str, user: str = "root", check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", "exec", "-u", user, NAME, "sh", "-c", script], capture_output=True, text=True,
                          timeout=900)
    if check:
        assert proc.returncode == 0, f"{script}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}"
    return proc


def wait_host() -> None:
    from provision import sandbox

    sandbox.wait_ready(NAME, timeout=120)
    port = sandbox.ssh_port(NAME)
    assert port is not None
    sandbox.wait_ssh(NAME, port, sandbox.ssh_key(), timeout=60)


def mine_wheel() -> bytes:
    """A wheel of the notebook account's own (pure Python, one module): what a person pip-installs into the
    environment provision made, which no apply may take away or claim."""
    files = {"pv_mine/__init__.py": "VALUE = 42\n",
             "pv_mine-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: pv-mine\nVersion: 1.0\n",
             "pv_mine-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            "Tag: py3-none-any\n"}
    record = "".join(f"{name},,\n" for name in files) + "pv_mine-1.0.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as wheel:
        for name, text in {**files, "pv_mine-1.0.dist-info/RECORD": record}.items():
            wheel.writestr(name, text)
    return out.getvalue()


def plant() -> list[str]:
    """The accounts' own files (a note in each home that exists, the notebook account's wheel in the environment
    where there is one). Returns what was planted, for the checks after the cut."""
    planted = []
    for account, path in HOME_NOTES.items():
        if sh(f"id {account}", check=False).returncode != 0:
            continue
        sh(f"install -d -o {account} -g {account} {os.path.dirname(path)} && echo mine > {path} && "
           f"chown {account}:{account} {path}")
        planted.append(path)
    if sh(f"test -x {VENV}/bin/pip", check=False).returncode == 0:
        data = base64.b64encode(mine_wheel()).decode()
        sh(f"echo {data} | base64 -d > /tmp/pv_mine-1.0-py3-none-any.whl && chmod 644 /tmp/pv_mine-1.0-py3-none-any.whl"
           f" && runuser -u ml -- {VENV}/bin/python -m pip install -q --no-index --no-deps "
           "/tmp/pv_mine-1.0-py3-none-any.whl")
        planted.append(MINE)
    return planted


# --- a run of provision, and the cut ------------------------------------------------------------------------------


@dataclass
class Run:
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)
    out: list[str] = field(default_factory=list)
    seen: threading.Event = field(default_factory=threading.Event)
    wanted: str = ""

    def read(self) -> None:
        def err() -> None:
            for line in self.proc.stderr:
                self.lines.append(line)
                if self.wanted and self.wanted in line and line.startswith(NAME):
                    self.seen.set()

        def out() -> None:
            self.out.extend(self.proc.stdout)

        self.threads = [threading.Thread(target=err, daemon=True), threading.Thread(target=out, daemon=True)]
        for t in self.threads:
            t.start()

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        for t in self.threads:
            t.join(timeout=30)
        return code

    def text(self) -> str:
        return "".join(self.out) + "".join(self.lines)


def kill_controller(cmds: Commands, proc: subprocess.Popen) -> int:
    """SIGKILL to provision and everything it started, at once (a controller that loses power)."""
    victims = [proc.pid]
    with contextlib.suppress(psutil.NoSuchProcess):
        victims += [child.pid for child in psutil.Process(proc.pid).children(recursive=True)]
    victims += [int(line.split()[0]) for line in cmds.left(proc)]
    for pid in dict.fromkeys(victims):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return len(set(victims))


def drop_ssh() -> list[str]:
    """Kill (SIGKILL) the host's sshd processes that serve the admin account's connections: the TCP connection
    drops under the running task. The listening sshd stays, so the next apply gets in."""
    ps = sh("ps -eo pid=,args=").stdout.splitlines()
    sessions = [line.split(None, 1) for line in ps if re.search(r"\bsshd(-session)?: admin\b", line)]
    for pid, _ in sessions:
        sh(f"kill -KILL {pid}", check=False)
    return [args for _, args in sessions]


def cut_apply(cmds: Commands, point: Point) -> dict:
    """Start the apply, wait for the point's moment, cut. Returns what happened, for the table."""
    m = point.moment
    watcher = None
    if not m.line:
        spec = {"process": m.process, "exists": list(m.exists), "absent": list(m.absent), "freeze": m.freeze,
                "timeout": 1500}
        watcher = subprocess.Popen(["docker", "exec", NAME, "python3", "-c", WATCHER, json.dumps(spec)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    run = Run(cmds.start("apply", PROFILE, *ARGS, *(["--full"] if point.full else [])), wanted=m.line)
    run.read()
    found: dict = {}
    deadline = started + 1500
    while time.monotonic() < deadline:
        if run.proc.poll() is not None:
            break
        if watcher is not None and watcher.poll() is not None:
            if watcher.returncode == 0:
                found = json.loads(watcher.stdout.read().strip().splitlines()[-1])
            break
        if watcher is None and run.seen.is_set():
            found = {"line": m.line}
            break
        time.sleep(0.01)
    if watcher is not None and watcher.poll() is None:
        watcher.kill()
    assert found, (f"{point.id}: the moment ({m.what}) never came; the apply ended with "
                   f"{run.proc.poll()}:\n{run.text()[-3000:]}")
    at = time.monotonic() - started
    detail = ""
    if point.cut == "power":
        subprocess.run(["docker", "kill", NAME], check=True, capture_output=True)
    elif point.cut == "controller":
        detail = f"{kill_controller(cmds, run.proc)} controller processes killed"
    elif point.cut == "ssh":
        detail = f"sshd processes killed: {drop_ssh()}"
    code = run.wait(timeout=600)
    if point.cut == "power":
        subprocess.run(["docker", "start", NAME], check=True, capture_output=True)
        wait_host()
    return {"cut_at_s": round(at, 1), "cut_apply_exit": code, "found": found, "detail": detail,
            "cut_output": run.text()[-2000:]}


def left_on_host() -> dict:
    """What the cut left: dpkg's unfinished work, the ledger's pending note, processes of the cut apply still
    running on the host (a controller or a connection lost does not stop them)."""
    audit = sh("dpkg --audit", check=False).stdout.strip()
    ledger = sh("cat /var/lib/provision/ledger.json", check=False)
    pending = bool(ledger.returncode == 0 and json.loads(ledger.stdout or "{}").get("pending"))
    running = [ln.strip() for ln in sh("ps -eo args=").stdout.splitlines()
               if re.search(r"\b(apt-get|dpkg|pip|ensurepip|ansible|mitogen)\b", ln)]
    return {"dpkg_audit": audit.splitlines()[:4], "pending_note": pending, "still_running": running[:6]}


# What provision's fingerprint reads (its files outside the environment, the Jupyter unit's state, the record's parts),
# as text, to say what an apply after a converged one found changed when it reports changed=N.
OWNED_STATE = r"""
for p in /etc/provision /opt/provision /var/lib/provision /usr/local/lib/provision /etc/profile.d/provision-cuda.sh \
         /etc/profile.d/provision-cudnn.sh /etc/systemd/system/provision-jupyter.service; do
  [ -e "$p" ] || continue
  find "$p" -path /opt/provision/venv -prune -o -path /var/lib/provision/verify -prune -o \
       -path /var/lib/provision/applied.json -prune -o -path /var/lib/provision/ledger.json -prune -o \
       -path /var/lib/provision/apply.lock -prune -o -printf '%p %y %m %u:%g %s %T@\n'
  find "$p" -path /opt/provision/venv -prune -o -type f -uid 0 -exec sha256sum {} +
done
systemctl show -p ActiveState,SubState,UnitFileState provision-jupyter
python3 -c 'import json; r = json.load(open("/var/lib/provision/applied.json")); f = r.get("fingerprint") or {}; \
print("record", json.dumps({k: v for k, v in r.items() if k != "fingerprint"}, sort_keys=True)); \
print("fingerprint", json.dumps(f, sort_keys=True))'
"""


def owned_state() -> list[str]:
    return sh(OWNED_STATE, check=False).stdout.splitlines()


def what_differs(before: list[str], after: list[str]) -> str:
    gone = [line for line in before if line not in after]
    new = [line for line in after if line not in before]
    return "what changed between the two applies:\n- " + "\n- ".join(gone) + "\n+ " + "\n+ ".join(new)


# --- the checks after the converging apply ------------------------------------------------------------------------


def assert_converged(planted: list[str]) -> None:
    assert sh("dpkg --audit").stdout == ""
    ledger = json.loads(sh("cat /var/lib/provision/ledger.json").stdout)
    assert ledger["pending"] is None, ledger["pending"]
    # The ledger lists what is installed: every planned package dpkg has is owned or found there before; every
    # planned wheel the environment has is owned; the environment and the unit are provision's.
    status = sh("dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' " + " ".join(DRIVER_USERSPACE + ["python3-apt"]),
                check=False).stdout
    installed = [line.split()[0] for line in status.splitlines() if line.split()[1:2] == ["ii"]]
    assert set(DRIVER_USERSPACE) <= set(installed), status
    for package in installed:
        assert package in ledger["packages"] or package in ledger["found"], (package, sorted(ledger["packages"]))
    wheels = {row["name"].lower(): row["version"] for row in json.loads(
        sh(f"runuser -u ml -- {VENV}/bin/python -m pip list --format json").stdout)}
    for wheel in PLANNED_WHEELS:
        assert wheel in wheels, (wheel, sorted(wheels))
        assert wheel in ledger["wheels"], (wheel, sorted(ledger["wheels"]))
    assert VENV in ledger["venvs"] and "provision-jupyter" in ledger["units"], ledger
    # The environment imports what it has (a half-extracted wheel whose metadata says it is there would not).
    sh(f"runuser -u ml -- {VENV}/bin/python -c 'import numpy, jupyterlab; numpy.linalg.inv(numpy.eye(3))'")
    for path in planted:
        if path == MINE:
            assert MINE in wheels, sorted(wheels)
            assert MINE not in ledger["wheels"], "the account's own wheel was claimed by the ledger"
            sh(f"runuser -u ml -- {VENV}/bin/python -c 'import pv_mine; assert pv_mine.VALUE == 42'")
        else:
            assert sh(f"cat {path}").stdout == "mine\n", path


# --- the fixture: one host for every point, and the table ---------------------------------------------------------

RESULTS: list[dict] = []


@pytest.fixture(scope="module")
def host(tmp_path_factory, request, converged_deskmini):
    """The session's converged DeskMini host under this module's name and state (snapshot.start: the files' times
    put back); the bare point replaces it with a stock one."""
    from provision import sandbox

    tmp = tmp_path_factory.mktemp("power-cut")
    (tmp / "tmp").mkdir()
    env = os.environ | {"PROVISION_STATE": str(tmp / "state"), "TMPDIR": str(tmp / "tmp")}
    cmds = Commands(env, markers=[str(tmp)])
    sandbox.remove(NAME)
    snapshot.start(NAME, converged_deskmini)
    state = {"cmds": cmds, "fresh": True, "converged": True}
    try:
        yield state
    finally:
        cmds.cleanup()
        sandbox.remove(NAME)
        write_table(request.config)


def write_table(config) -> None:
    if not RESULTS:
        return
    lines = ["| point | role | cut | what the cut left | converged | seconds to converge |",
             "|---|---|---|---|---|---|"]
    for r in RESULTS:
        left = r.get("left") or {}
        what = (f"dpkg --audit: {len(left.get('dpkg_audit') or [])} line(s)"
                + (", pending note" if left.get("pending_note") else "")
                + (f", still running: {len(left['still_running'])}" if left.get("still_running") else ""))
        lines.append(f"| {r['point']} | {r['role']} | {r['cut']} | {what} | {r['converged']} | "
                     f"{r.get('converge_s', '')} |")
    converged = sum(1 for r in RESULTS if r["converged"] == "yes")
    lines.append(f"\n{len(RESULTS)} point(s) tried, {converged} converged")
    out = os.environ.get("PROVISION_POWER_CUT_OUT")
    if out:
        Path(out).write_text("\n".join(lines) + "\n\n" + json.dumps(RESULTS, indent=1, default=str) + "\n")
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line)


def ensure_converged(state: dict) -> None:
    """A point that starts from a converged host, after one that failed (or the bare point): converge first."""
    if state["converged"]:
        return
    proc = state["cmds"].run("apply", PROFILE, *ARGS, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    state["fresh"], state["converged"] = False, True


@pytest.mark.parametrize("point", [pytest.param(p, id=p.id, marks=[pytest.mark.long] if p.long else [])
                                   for p in POINTS])
def test_a_cut_here_converges_with_the_next_apply(host, point: Point):
    cmds: Commands = host["cmds"]
    if point.bare:
        from provision import sandbox

        assert host["fresh"], "this point starts from a bare host; run it first in the module"
        sandbox.remove(NAME)  # the converged host goes; a stock one under the same name, no apply made to it yet
        sandbox.start(NAME, "13")
    else:
        ensure_converged(host)
    host["fresh"], host["converged"] = False, False
    if point.prepare:
        sh(point.prepare)
    planted = plant()
    result = {"point": point.id, "role": point.role, "cut": point.cut, "moment": point.moment.what,
              "converged": "no"}
    RESULTS.append(result)
    result.update(cut_apply(cmds, point))
    result["left"] = left_on_host()

    started = time.monotonic()
    proc = cmds.run("apply", PROFILE, *ARGS, timeout=1800)
    result["converge_s"] = round(time.monotonic() - started, 1)
    assert proc.returncode == 0, (json.dumps(result, default=str)[-2500:] + "\n" + proc.stdout[-3000:]
                                  + proc.stderr[-3000:])
    assert not proc.left, f"left running: {proc.left}"
    assert "provision check passed" in proc.stdout, proc.stdout[-3000:]
    assert_converged(planted)
    # The default command's point: a plain second apply (the fast path where the host matches the record this apply
    # wrote, as a user's next apply takes it); the long ones: --full, every role run again.
    before = owned_state()
    again = cmds.run("apply", PROFILE, *ARGS, *(["--full"] if point.long else []), timeout=1800)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    changed = re.search(r"changed=(\d+)", again.stdout)
    assert changed and int(changed.group(1)) == 0, (again.stdout[-3000:] + again.stderr[-2000:] + "\n"
                                                    + what_differs(before, owned_state()))
    host["converged"] = True
    result["converged"] = "yes"
    if point.restore:
        sh(point.restore)
