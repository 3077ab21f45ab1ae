"""A converged DeskMini host, committed once per test session (issue 52): the tests that need a converged host to
start from, and are not about how it got there, start it from this image instead of applying from bare.

What the image stands for: a stock Debian 13 sandbox right after `provision apply profiles/deskmini.yaml --os
debian-13 --skip-frameworks --yes --skip-check` converged it from bare (APPLY), committed before any test touched it
(`docker commit`: the container's own files; the caches it mounts and its tmpfs /run are not in it). A container
started from it is that host rebooted under another name and SSH port (provision.sandbox.start(image=...): the
user's key and sudo rule written again, its host key pinned for the new port); the record and fingerprint the apply
left on it are the host's, so its next apply takes the fast path. The from-bare apply itself stays covered where it
is the subject: test_apply.py (the session's DeskMini host, which makes this image: tests/integration/conftest.py's
deskmini_apply), test_dpkg_interrupted.py (an apply from a stock host whose check passes, and the final block it
prints), test_collection_playbook.py, test_faults.py, test_host_lock.py, test_plan_changes.py, test_power_cut.py's
bare point and the others that apply to a stock host. Users: test_fast_reapply.py, test_power_cut.py (its default
point), test_browser.py (docs/testing.md, "Issue 52: less work", says which modules were moved and why).

Made once per session (PROVISION_TEST_SESSION_START, which scripts/test.sh exports to every worker): whoever needs it
first makes it under a lock on the controller, the others wait for it and find it. tests/conftest.py removes it when
the session ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provision.state import cache_lock
from tests.support.names import PREFIX, sandbox_name

ROOT = Path(__file__).resolve().parents[2]
SESSION = os.environ.setdefault("PROVISION_TEST_SESSION_START", str(time.time()))
TAG = f"provision-test/deskmini-converged:{PREFIX.lower()}"
SESSION_LABEL = "io.provision.test.session"
# The apply the image is the result of (tests/integration/conftest.py's deskmini_apply runs the same, from bare).
APPLY = [str(ROOT / "profiles/deskmini.yaml"), "--os", "debian-13", "--skip-frameworks", "--yes", "--skip-check"]


def apply_from_bare(name: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`provision apply` APPLY to a new sandbox `name` (a stale one of that name removed first)."""
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return subprocess.run([sys.executable, "-m", "provision", "apply", *APPLY[:1], "--sandbox", name, *APPLY[1:]],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT, stdin=subprocess.DEVNULL, env=env)


def lock():
    """Held while the image is made: a worker that needs it meanwhile waits, then finds it."""
    return cache_lock(f"test-deskmini-snapshot-{PREFIX}")


def current() -> bool:
    """The image exists and was made in this session (one of an earlier session is of other code: remade)."""
    proc = subprocess.run(["docker", "image", "inspect", "-f", f'{{{{index .Config.Labels "{SESSION_LABEL}"}}}}', TAG],
                          capture_output=True, text=True)
    return proc.returncode == 0 and proc.stdout.strip() == SESSION


# `docker commit` keeps a file's modification time to the second only (its layer is a tar), and the fingerprint
# (plugins/module_utils/fingerprint.py, entry_state) counts a regular file by its time where root does not own it or
# it is over 16 MiB: such a file with a fraction of a second would come back changed ("a file provision wrote
# changed", the full path). So those times are listed in the image beside the files and put back when a host starts
# from it (start()). Not the environment's (VENV): the fingerprint counts it by names, versions and contents. Only
# those: putting a time back copies the file up into the new container's own layer.
MTIMES = "/.provision-test-mtimes.json"
VENV = "/opt/provision/venv"
_LIST_MTIMES = f"""
import json, os, stat
root_dev = os.lstat("/").st_dev
found = {{}}
for top, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_dev == root_dev
               and os.path.join(top, d) not in ("/proc", "/sys", "/dev", "/run", "/tmp", "{VENV}")]
    for entry in files:
        path = os.path.join(top, entry)
        st = os.lstat(path)
        if (stat.S_ISREG(st.st_mode) and (st.st_uid != 0 or st.st_size > 16 * 1024 * 1024)
                and st.st_mtime_ns % 1_000_000_000):
            found[path] = st.st_mtime_ns
with open("{MTIMES}", "w") as out:
    json.dump(found, out)
print(len(found))
"""
_PUT_BACK = f"""
import json, os
found = json.load(open("{MTIMES}"))
os.remove("{MTIMES}")
for path, ns in found.items():
    os.utime(path, ns=(ns, ns), follow_symlinks=False)
print(len(found))
"""


def commit(name: str) -> None:
    """Commit the converged sandbox `name` as TAG, for this session (call under lock())."""
    started = time.monotonic()
    listed = subprocess.run(["docker", "exec", name, "python3", "-c", _LIST_MTIMES], capture_output=True, text=True,
                            timeout=600)
    assert listed.returncode == 0, f"{name}: listing the files' times: {listed.stderr.strip()}"
    subprocess.run(["docker", "image", "rm", TAG], capture_output=True)  # an earlier session's, not left dangling
    proc = subprocess.run(["docker", "commit", "--change", f"LABEL {SESSION_LABEL}={SESSION}", name, TAG],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"docker commit {name}: {proc.stderr.strip()}"
    subprocess.run(["docker", "exec", name, "rm", "-f", MTIMES], check=True, capture_output=True)
    print(f"snapshot: {name} committed as {TAG} in {time.monotonic() - started:.1f} s "
          f"({listed.stdout.strip()} times with a fraction listed)", file=sys.stderr)


def start(name: str, image: str) -> None:
    """Start sandbox `name` from the converged image (converged_deskmini()), its files' times put back."""
    from provision import sandbox

    started = time.monotonic()
    sandbox.start(name, "13", image=image)
    put = subprocess.run(["docker", "exec", name, "python3", "-c", _PUT_BACK], capture_output=True, text=True,
                         timeout=600)
    assert put.returncode == 0, f"{name}: putting the files' times back: {put.stderr.strip()}"
    print(f"snapshot: {name} started from {image} in {time.monotonic() - started:.1f} s "
          f"({put.stdout.strip()} times put back)", file=sys.stderr)


def converged_deskmini() -> str:
    """The image's tag, made now (from bare on a host of its own, then removed) unless this session has it."""
    with lock():
        if not current():
            name = sandbox_name("deskmini-snapshot")
            with tempfile.TemporaryDirectory(prefix="provision-snapshot-") as state:
                proc = apply_from_bare(name, os.environ | {"PROVISION_STATE": state})
                try:
                    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
                    commit(name)
                finally:  # the container and the Jupyter tunnel the apply opened (recorded in its state)
                    subprocess.run([sys.executable, "-m", "provision", "sandbox", "down", name], capture_output=True,
                                   cwd=ROOT, env=os.environ | {"PROVISION_STATE": state}, timeout=300)
    return TAG


def remove() -> None:
    """At the session's end: the image, if this session made it (a container still using it keeps it)."""
    if current():
        subprocess.run(["docker", "image", "rm", TAG], capture_output=True, timeout=300)
