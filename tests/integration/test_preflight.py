"""A foreign stack is found before the first change (roles/preflight): on stock Debian 13 hosts over SSH, each case is
made by hand the way a machine with a history has it, then `provision apply` exits 2 with one line naming what was
found and what to do, and the host is byte-identical where a file list can show it: dpkg's status and audit, every
file under /etc, /opt/provision and /var/lib/provision (types, modes, owners, contents).

One host serves the cases in turn, each undone before the next:
- a driver from NVIDIA's .run installer (its /usr/bin/nvidia-uninstall and the libraries it copies);
- another branch's driver package installed by hand (a stand-in with the 470 tesla package's name, source and
  version, built here); and on a Debian 12 host, the real one: the owner enables non-free in sources.list and
  `apt-get install libnvidia-tesla-470-cuda1` (R470's CUDA library and what it depends on, no kernel module);
- NVIDIA's apt repository entered twice with different keyrings (apt itself refuses those sources; asserted too);
- the Jupyter port held by another process (named, with its pid), with the planned account already there as a
  normal account with files in its home, which is not refused;
- the planned account as a system account, then with another home;
- dpkg left half-configured by a package whose post-installation script fails;
- --dry-run refuses the same way;
- with a plan that has containers (software.containers: docker or podman): an /etc/docker/daemon.json that is not
  JSON or sets features.cdi otherwise, a Docker from a snap, the rootless account of the user's without subordinate
  ids, each refused before the driver, CUDA and the environment change anything (roles/container_engine, which runs
  after them, would refuse them too late).
A second host, clean, is in the run with a refused one: it is refused too, untouched (a run changes every host or
none).

Refusals install nothing, so each apply takes 4-9 s: the module took 104 s on 2 cores, sandbox starts and the real
R470 install (21 s) included.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.apt import APT_WAIT
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("preflight")
CLEAN = NAME + "-clean"
BOOKWORM = NAME + "-deb12"
PROFILE = str(ROOT / "profiles/deskmini.yaml")
ARGS = ["--yes", "--skip-frameworks", "--skip-check"]

pytestmark = [pytest.mark.docker, pytest.mark.slow]

# What a file list can show of the host: dpkg's status and audit, and every entry under the trees provision writes.
SNAPSHOT = r"""
sha256sum /var/lib/dpkg/status
echo "audit: $(dpkg --audit | sha256sum)"
for tree in /etc /opt/provision /var/lib/provision; do
  [ -e "$tree" ] || { echo "absent $tree"; continue; }
  find "$tree" -xdev -printf '%p %y %m %u:%g %s %l\n' | sort
  find "$tree" -xdev -type f -print0 | sort -z | xargs -0 -r sha256sum
done
"""


def sh(script: str, host: str = NAME, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", host, "sh", "-ec", script], capture_output=True, text=True, check=check)


def snapshot(host: str = NAME) -> str:
    return sh(SNAPSHOT, host).stdout


def build_deb(package: str, version: str, source: str = "", postinst: str = "") -> None:
    """Build and dpkg -i a package by hand on the host (as a user who installed one would)."""
    control = (f"Package: {package}\n" + (f"Source: {source}\n" if source else "")
               + f"Version: {version}\nArchitecture: all\nMaintainer: test <test@example.com>\n"
                 f"Description: installed by hand for the preflight test\n")
    script = (f"rm -rf /tmp/deb && mkdir -p /tmp/deb/DEBIAN && printf '%s' '{control}' > /tmp/deb/DEBIAN/control\n")
    if postinst:
        script += f"printf '%s\\n' '#!/bin/sh' '{postinst}' > /tmp/deb/DEBIAN/postinst && chmod 755 /tmp/deb/DEBIAN/postinst\n"
    script += f"dpkg-deb --build /tmp/deb /tmp/{package}.deb >/dev/null\ndpkg -i /tmp/{package}.deb\n"
    sh(script, check=False)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    from provision.render.ansible import write_yaml
    from provision.sandbox import inventory, remove, start

    tmp = tmp_path_factory.mktemp("preflight")
    for name in (NAME, CLEAN):
        remove(name)
        start(name, "13")
    one, both = tmp / "one.yml", tmp / "both.yml"
    write_yaml(inventory([NAME]), one)
    write_yaml(inventory([NAME, CLEAN]), both)
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    try:
        yield one, both, env
    finally:
        for name in (NAME, CLEAN):
            remove(name)


def apply(inventory: Path, env: dict[str, str], *extra: str, os_name: str = "debian-13",
          profile: str = PROFILE) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", "apply", profile, "-i", str(inventory), "--os", os_name,
                           *ARGS, *extra],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)


def refused(hosts, *expected: str, extra: tuple[str, ...] = (), host: str = NAME, os_name: str = "debian-13",
            profile: str = PROFILE) -> str:
    """Apply on the prepared host: exit 2, one `refused:` line holding every expected text, the host unchanged."""
    one, _, env = hosts
    before = snapshot(host)
    proc = apply(one, env, *extra, os_name=os_name, profile=profile)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-4000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(f"refused: {host}: preflight: ")]
    assert len(lines) == 1, out[-4000:]
    for text in expected:
        assert text in lines[0], lines[0]
    assert "Nothing was changed" in lines[0]
    assert snapshot(host) == before, "the refused apply changed the host"
    return lines[0]


def test_a_run_installer_driver_is_refused(hosts):
    sh("install -m 755 /dev/null /usr/bin/nvidia-uninstall && install -m 755 /dev/null /usr/bin/nvidia-installer && "
       "touch /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14 /var/log/nvidia-installer.log")
    try:
        line = refused(hosts, "NVIDIA's .run installer", "/usr/bin/nvidia-uninstall", "`sudo nvidia-uninstall`")
        # --dry-run refuses the same way, and says the same.
        assert refused(hosts, extra=("--dry-run",)) == line
    finally:
        sh("rm -f /usr/bin/nvidia-uninstall /usr/bin/nvidia-installer /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.14 "
           "/var/log/nvidia-installer.log")


def test_another_branchs_driver_package_is_refused(hosts):
    build_deb("libnvidia-tesla-470-cuda1", "470.256.02-1~deb12u1", source="nvidia-graphics-drivers-tesla-470")
    try:
        refused(hosts, "another branch than the planned 550", "libnvidia-tesla-470-cuda1 470.256.02-1~deb12u1",
                "sudo apt-get purge libnvidia-tesla-470-cuda1")
    finally:
        sh("dpkg --purge libnvidia-tesla-470-cuda1")


@pytest.fixture
def bookworm(hosts, tmp_path):
    """A stock Debian 12 host beside the others (Debian 12's non-free still has R470), its inventory."""
    from provision.render.ansible import write_yaml
    from provision.sandbox import inventory, remove, start

    remove(BOOKWORM)
    start(BOOKWORM, "12")
    try:
        write_yaml(inventory([BOOKWORM]), tmp_path / "deb12.yml")
        yield tmp_path / "deb12.yml", None, hosts[2]
    finally:
        remove(BOOKWORM)


def test_a_real_r470_package_installed_by_hand_is_refused(bookworm):
    # As the owner of a Tesla K80 box did: non-free enabled in sources.list, R470's CUDA library installed.
    installed = sh(APT_WAIT + "sed -i 's/ main$/ main contrib non-free non-free-firmware/' /etc/apt/sources.list && "
                   "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt_wait apt-get install -y -q --no-install-recommends "
                   "libnvidia-tesla-470-cuda1", host=BOOKWORM, check=False)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    version = sh("dpkg-query -W -f '${Version}' libnvidia-tesla-470-cuda1", host=BOOKWORM).stdout
    assert version.startswith("470."), version
    refused(bookworm, "another branch than the planned 535", f"libnvidia-tesla-470-cuda1 {version}",
            "sudo apt-get purge ", "libnvidia-tesla-470-cuda1", host=BOOKWORM, os_name="debian-12")


def test_nvidia_repo_with_another_keyring_is_refused(hosts):
    repo = "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"
    sh(f"echo 'deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repo} /' "
       "> /etc/apt/sources.list.d/cuda-debian13-x86_64.list && "
       f"printf 'Types: deb\\nURIs: {repo}\\nSuites: /\\nSigned-By: /etc/apt/keyrings/nvidia-old.gpg\\n' "
       "> /etc/apt/sources.list.d/nvidia-cuda.sources")
    try:
        # What apt itself says of these sources: the preflight finds the same, before anything runs apt.
        apt = sh("apt-cache policy", check=False)
        assert "Conflicting values set for option Signed-By" in apt.stderr, apt.stderr
        refused(hosts, "Conflicting values set for option Signed-By", repo, "nvidia-cuda.sources",
                "/etc/apt/keyrings/nvidia-old.gpg")
    finally:
        sh("rm -f /etc/apt/sources.list.d/cuda-debian13-x86_64.list /etc/apt/sources.list.d/nvidia-cuda.sources")


def test_a_held_jupyter_port_is_refused_and_an_existing_normal_account_is_not(hosts):
    sh("useradd -m -s /bin/bash ml && echo mine > /home/ml/notes.txt && chown ml: /home/ml/notes.txt")
    # Another service's account, as a web server runs: a container's root cannot read its descriptors (no
    # CAP_SYS_PTRACE), so the line names the account and its processes; on a host it names the process itself.
    pid = sh("cd /tmp && setsid setpriv --reuid=nobody --regid=nogroup --clear-groups python3 -m http.server 8888 "
             "--bind 127.0.0.1 >/dev/null 2>&1 & echo $!").stdout.strip()
    try:
        sh("for i in $(seq 50); do grep -q ':22B8 00000000:0000 0A' /proc/net/tcp && exit 0; sleep 0.1; done; exit 1")
        line = refused(hosts, "Jupyter port 8888 is held by", f"python3 (pid {pid})", "127.0.0.1:8888",
                       "software.jupyter.port")
        assert "planned account" not in line  # a normal account with the planned name and home is reused, files kept
        assert sh("cat /home/ml/notes.txt").stdout == "mine\n"
    finally:
        sh(f"kill {pid}", check=False)
        sh("userdel -r ml")


@pytest.mark.parametrize(("make", "expected"), [
    ("useradd --system ml", "exists as a system account"),
    ("useradd -m -d /srv/ml ml", "exists with the home /srv/ml, and the plan puts it at /home/ml"),
], ids=["system-account", "other-home"])
def test_the_planned_account_of_another_kind_is_refused(hosts, make, expected):
    sh(make)
    try:
        refused(hosts, "the planned account 'ml'", expected)
    finally:
        sh("userdel ml && rm -rf /srv/ml")


def test_a_half_configured_dpkg_is_reported_as_such(hosts):
    sh("touch /tmp/pv-broken-fails")  # its post-installation script fails while this is there, as a real one can
    build_deb("pv-broken", "1.0", postinst="[ -e /tmp/pv-broken-fails ] && { echo 'pv-broken: refusing' >&2; exit 30; }; exit 0")
    try:
        assert "pv-broken" in sh("dpkg --audit", check=False).stdout
        refused(hosts, "dpkg was already half-configured before this run: pv-broken", "`sudo dpkg --configure -a`")
    finally:
        sh("rm -f /tmp/pv-broken-fails && dpkg --configure -a && dpkg --purge pv-broken")


DAEMON_NOT_JSON = '{"log-driver": "local"\n  "debug": true}\n'  # a comma left out: every Python's json says the same


@pytest.mark.parametrize(("containers", "make", "undo", "expected"), [
    ("docker", f"mkdir -p /etc/docker && printf '%s' '{DAEMON_NOT_JSON}' > /etc/docker/daemon.json", "rm -rf /etc/docker",
     "Docker's configuration /etc/docker/daemon.json:2:3 is not JSON (Expecting ',' delimiter): provision changes "
     "nothing in it; fix it (or move it away) and apply again"),
    ("docker", "mkdir -p /etc/docker && echo '{\"features\": {\"cdi\": false}}' > /etc/docker/daemon.json",
     "rm -rf /etc/docker",
     "Docker's configuration /etc/docker/daemon.json: features.cdi is false (not set by provision), the plan needs "
     "true: provision never overwrites a key it did not set; change or remove it yourself and apply again"),
    ("docker", "mkdir -p /snap/bin && install -m 755 /dev/null /snap/bin/docker", "rm -rf /snap",
     "Docker is installed as a snap (/snap/bin/docker), which provision does not configure"),
    # The planned account is the user's (useradd, not provision) and has no subordinate ids; the free range the line
    # names is the host's (the image's own account holds the first).
    ("podman", "useradd -m ml && sed -i '/^ml:/d' /etc/subuid /etc/subgid 2>/dev/null || true", "userdel -r ml",
     "rootless podman for ml needs subordinate uid and gid ranges, /etc/subuid or /etc/subgid has none for that "
     "account, and provision did not create it: run `sudo usermod --add-subuids "),
], ids=["daemon-json-not-json", "daemon-json-conflict", "snap-docker", "rootless-without-subids"])
def test_a_container_plans_bad_input_is_refused_before_the_driver(hosts, tmp_path, containers, make, undo, expected):
    """roles/container_engine runs after the driver, CUDA and the environment: these are refused before any of them."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    data = yaml.load(Path(PROFILE).read_text())
    data["software"]["containers"] = containers
    profile = tmp_path / f"deskmini-{containers}.yaml"
    with profile.open("w") as handle:
        yaml.dump(data, handle)
    sh(make)
    try:
        daemon = sh("cat /etc/docker/daemon.json 2>/dev/null || true").stdout
        line = refused(hosts, expected, profile=str(profile))
        print(line)
        # Nothing of the plan reached the host: no NVIDIA package, no ledger, the user's file as it was.
        assert sh("dpkg-query -W -f '${Package}\\n' 'nvidia-*' 'cuda-*' 2>/dev/null || true").stdout.strip() == ""
        assert sh("test -e /var/lib/provision/ledger.json", check=False).returncode == 1
        assert sh("cat /etc/docker/daemon.json 2>/dev/null || true").stdout == daemon
    finally:
        sh(undo)


def test_a_refused_host_stops_the_whole_run(hosts):
    _, both, env = hosts
    install = "install -m 755 /dev/null /usr/bin/nvidia-uninstall"
    sh(install)
    try:
        before = {h: snapshot(h) for h in (NAME, CLEAN)}
        proc = apply(both, env)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out[-4000:]
        assert f"refused: {NAME}: preflight: {NAME}: a driver installed with NVIDIA's .run installer" in proc.stderr
        assert (f"refused: {CLEAN}: preflight: {CLEAN} was not changed, because the preflight refused {NAME}"
                in proc.stderr), out[-4000:]
        assert {h: snapshot(h) for h in (NAME, CLEAN)} == before
    finally:
        sh("rm -f /usr/bin/nvidia-uninstall")
