"""Issue 51's stand-in NVIDIA Container Toolkit repository, the ARTIFACT itself, on stock Debian 12 and 13 hosts.

NVIDIA's repository (nvidia.github.io/libnvidia-container) cannot be reached from the machines this is tested on.
tests/support/standin_container_toolkit.py builds the toolkit v1.20.0 HERE from NVIDIA's source (vendored modules,
offline, Debian's golang-1.25), packages nvidia-container-toolkit-base 1.20.0-1 and, as a newer candidate that is NOT
a release, the same binaries as 1.20.1-1, into a repository laid out as NVIDIA's and signed with a TEST key, and
serves it from the controller on Docker's bridge. This checks what the nvidia_container_toolkit role relies on, not
the role: on one stock host per release, reached over SSH as the sudo account, apt verifies the repository's
signature with the test key (and refuses it with another keyring); a pin holds 1.20.0-1 against 1.20.1-1; the
installed nvidia-ctk reports 1.20.0 and NVIDIA's commit; `nvidia-ctk runtime configure` merges into an existing
daemon.json (keeping the user's keys, except `features` with --cdi.enabled: an upstream bug, recorded below);
`nvidia-ctk cdi generate` with no GPU fails with its NVML message; the refresh units are installed, enabled, and
skip on a host without nvidia-smi; purge removes the package's files.

Needs the source tarball in the controller's cache: `scripts/standin-container-toolkit-source.sh [GIT_DIR_OR_URL]`
once (a missing tarball FAILS here, with that command). The first run on a controller builds the repository (go
build of three commands: 7.4 minutes on 2 busy cores, 2026-11-28); later runs find it cached. About 2 minutes then.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest

from provision import sandbox
from tests.support.apt import APT_WAIT
from tests.support.names import sandbox_name
from tests.support.standin_container_toolkit import (
    NEWER,
    PACKAGE,
    PINNED,
    UNITS,
    VERSION,
    MissingSource,
    build_info,
    standin_container_toolkit_repo,
    stop_serving,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

KEYRING = "/usr/share/keyrings/nvidia-container-toolkit-keyring.asc"  # armoured: a stock host has no gpg to dearmor
LIST = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
PREF = "/etc/apt/preferences.d/nvidia-container-toolkit.pref"
# Every sandbox of a release mounts one apt archive: apt-get waits for its lock (tests/support/apt.py).
APT = APT_WAIT + "export DEBIAN_FRONTEND=noninteractive; apt_wait apt-get -y"
# What `nvidia-ctk cdi generate` says on a host with no NVIDIA driver (no libnvidia-ml.so.1), v1.20.0.
NO_NVML = ("failed to generate CDI spec: failed to create device CDI specs: failed to construct device spec "
           "generators: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND")
USER_DAEMON_JSON = {"log-driver": "journald", "data-root": "/srv/docker",
                    "runtimes": {"custom": {"path": "/usr/bin/custom"}}, "features": {"buildkit": True}}


@pytest.fixture(scope="module")
def repo():
    try:
        served = standin_container_toolkit_repo()
    except MissingSource as e:
        pytest.fail(str(e), pytrace=False)
    yield served
    stop_serving()


@pytest.fixture(scope="module", params=["12", "13"], ids=["debian-12", "debian-13"])
def host(request, repo):
    """One stock host per release, one at a time (the module's tests run on each in turn)."""
    name = sandbox_name(f"ctk{request.param}")
    box = sandbox.start(name, request.param)
    yield box
    sandbox.remove(name)


def ssh(box: sandbox.Sandbox, script: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`script` as root through the admin account's sudo, over SSH, as a user's machine is reached."""
    return subprocess.run(["ssh", *sandbox.ssh_args().split(), "-i", str(sandbox.ssh_key()), "-p", str(box.port),
                           f"{sandbox.ADMIN}@127.0.0.1", "sudo", "sh", "-s"], input=script, capture_output=True,
                          text=True, timeout=timeout)


def ok(box: sandbox.Sandbox, script: str) -> str:
    proc = ssh(box, "set -e\n" + script)
    assert proc.returncode == 0, f"{script}\n--- exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def installed(box: sandbox.Sandbox) -> str | None:
    proc = ssh(box, f"dpkg-query -W -f '${{db:Status-Abbrev}} ${{Version}}' {PACKAGE}")
    words = proc.stdout.split()  # "ii  1.20.0-1": the status abbreviation is padded to three characters
    return words[1] if len(words) == 2 and words[0] == "ii" else None


def test_served_key_is_the_repository_key(repo):
    served = urllib.request.urlopen(repo.key_url, timeout=10).read()
    assert served == repo.key_file.read_bytes()
    colons = subprocess.run(["gpg", "--show-keys", "--with-colons"], input=served, capture_output=True,
                            check=True).stdout.decode()
    assert [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:")] == [repo.fingerprint]
    assert repo.url.endswith("/stable/deb/$(ARCH)"), repo.url  # NVIDIA's list: deb [signed-by=K] URL/stable/deb/$(ARCH) /


def test_signature_verifies_with_the_test_key_and_the_pin_holds(host, repo):
    entry = f"deb [signed-by={{}}] {repo.url} /"
    ok(host, f"cat > {KEYRING} <<'EOF'\n{repo.key_file.read_text()}EOF\n")
    # Another keyring: apt refuses the repository (its signature is checked, not just fetched).
    ok(host, f"echo '{entry.format('/usr/share/keyrings/debian-archive-keyring.gpg')}' > {LIST}")
    refused = ssh(host, "apt-get update")
    assert "NO_PUBKEY" in refused.stdout + refused.stderr or "not signed" in refused.stdout + refused.stderr, (
        refused.stdout[-2000:] + refused.stderr[-2000:])
    assert "Candidate:" not in ssh(host, f"apt-cache policy {PACKAGE}").stdout  # nothing read from it

    ok(host, f"echo '{entry.format(KEYRING)}' > {LIST}")
    update = ssh(host, "apt-get update")
    assert update.returncode == 0 and "W:" not in update.stderr and "E:" not in update.stderr, (
        update.stdout[-2000:] + update.stderr[-2000:])
    assert f"Candidate: {NEWER}" in ok(host, f"apt-cache policy {PACKAGE}")  # the newer one is offered
    ok(host, f"printf 'Package: {PACKAGE}\\nPin: version {PINNED}\\nPin-Priority: 1001\\n' > {PREF}")
    policy = ok(host, f"apt-cache policy {PACKAGE}")
    assert f"Candidate: {PINNED}" in policy and NEWER in policy, policy
    ok(host, f"{APT} install --no-install-recommends {PACKAGE}={PINNED}")
    assert installed(host) == PINNED
    assert PACKAGE not in ok(host, "apt-get -s upgrade")  # the pin holds against 1.20.1-1
    description = ok(host, f"dpkg-query -W -f '${{Description}}' {PACKAGE}")
    assert description.startswith("STAND-IN built by provision's tests"), description


def test_nvidia_ctk_reports_version_configures_docker_and_has_no_nvml(host):
    assert installed(host) == PINNED, "needs the previous test's install"
    version = ok(host, "nvidia-ctk --version")
    assert version.splitlines() == [f"NVIDIA Container Toolkit CLI version {VERSION}",
                                    f"commit: {build_info()['commit']}"], version
    # The postinst's `nvidia-ctk config --in-place` wrote the runtime's config (no package owns it).
    assert "[nvidia-container-runtime]" in ok(host, "cat /etc/nvidia-container-runtime/config.toml")
    assert ssh(host, "dpkg -S /etc/nvidia-container-runtime/config.toml").returncode != 0

    # A daemon.json that already has the user's settings: the nvidia runtime is merged in, every user key kept.
    ok(host, f"cat > /tmp/daemon.json <<'EOF'\n{json.dumps(USER_DAEMON_JSON)}\nEOF\n"
             "nvidia-ctk runtime configure --runtime=docker --config=/tmp/daemon.json")
    merged = json.loads(ok(host, "cat /tmp/daemon.json"))
    assert merged == {**USER_DAEMON_JSON, "runtimes": {**USER_DAEMON_JSON["runtimes"],
                                                        "nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    # Upstream bug (v1.20.0 pkg/config/engine/docker/docker.go:113, a map[string]bool assertion on decoded JSON):
    # --cdi.enabled REPLACES `features`, dropping the user's other features. The role sets features.cdi itself.
    # When this fails, NVIDIA fixed it: the role's own merge of features.cdi may go.
    ok(host, "nvidia-ctk runtime configure --runtime=docker --config=/tmp/daemon.json --cdi.enabled")
    assert json.loads(ok(host, "cat /tmp/daemon.json"))["features"] == {"cdi": True}
    # A daemon.json that is not JSON: refused, the file untouched.
    bad = ssh(host, "printf '{not json' > /tmp/bad.json; nvidia-ctk runtime configure --runtime=docker "
                    "--config=/tmp/bad.json; echo \"rc=$?\"; cat /tmp/bad.json")
    assert "rc=1" in bad.stdout and bad.stdout.endswith("{not json") and "unable to load config" in bad.stderr, bad

    # No GPU, no driver: cdi generate fails on NVML and writes no spec. Never a faked device.
    generate = ssh(host, "nvidia-ctk cdi generate --output=/tmp/nvidia.yaml")
    assert generate.returncode == 1, generate
    assert f'level=error msg="{NO_NVML}"' in generate.stderr, generate.stderr
    assert ssh(host, "test -e /tmp/nvidia.yaml").returncode != 0


def test_refresh_units_installed_enabled_skipped_without_a_gpu_and_purged(host):
    assert installed(host) == PINNED, "needs the first test's install"
    for unit in UNITS:
        assert ok(host, f"systemctl is-enabled {unit}").strip() == "enabled", unit
        assert ok(host, f"test -f /lib/systemd/system/{unit} && echo yes").strip() == "yes"
    assert ok(host, "systemctl is-active nvidia-cdi-refresh.path").strip() == "active"
    # The service's condition (nvidia-smi present) is false on a host with no driver: skipped, not failed, no spec.
    shown = ok(host, "systemctl show -p ConditionResult -p Result -p ActiveState nvidia-cdi-refresh.service")
    assert "ConditionResult=no" in shown and "Result=success" in shown and "ActiveState=inactive" in shown, shown
    assert ssh(host, "test -e /var/run/cdi/nvidia.yaml").returncode != 0

    ok(host, f"{APT} purge {PACKAGE}")
    assert installed(host) is None
    left = ssh(host, "ls /usr/bin/nvidia-ctk /usr/bin/nvidia-container-runtime /usr/bin/nvidia-cdi-hook "
                     "/lib/systemd/system/nvidia-cdi-refresh.* /etc/nvidia-container-toolkit 2>/dev/null").stdout
    assert left == "", left
    assert ssh(host, "systemctl is-enabled nvidia-cdi-refresh.path").stdout.strip() not in ("enabled", "masked")
    # What the postinst made and no package owns stays after purge: destroy must remove it.
    assert ok(host, "test -e /etc/nvidia-container-runtime/config.toml && echo left").strip() == "left"
