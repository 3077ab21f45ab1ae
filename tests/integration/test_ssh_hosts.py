"""Stock Debian hosts reached over SSH as a sudo user, as a user's machine is: nothing prepared by provision.

The hosts are `provision sandbox up` containers: debootstrap's Debian with systemd, openssh-server, sudo and python3,
Debian's default sources (`main` only; a one-line sources.list on Debian 12), no python3-apt, no curl, and an `admin`
account with a key. The roles must bring everything else. Here:

- what `sandbox up` makes is stock (checked before anything is applied), and its inventory reaches it over SSH as
  the admin account with `become`;
- sudo that asks for a password: refused in one line without one; accepted from the inventory, from a vault, and
  from `--ask-become-pass`; the password never appears in any output or state file;
- a host whose SSH key changed is refused in one line, quickly (no prompt, no hang), unless the inventory turns host
  key checking off (`ansible_ssh_common_args: -o StrictHostKeyChecking=no ...`), which provision keeps, with one
  warning line;
- a port where nothing listens is one line and exit 3.

End to end on such hosts: test_apply.py (DeskMini, Debian 13) and test_apply_p2.py (AWS P2, Debian 12), through
`--sandbox` (the same SSH path); test_fleet.py and test_faults.py through SSH inventories.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from provision import sandbox
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
D12 = sandbox_name("ssh-12")
SUDO = sandbox_name("ssh-sudo")
DESKMINI = sandbox_name("deskmini")  # conftest.DESKMINI_HOST, shared with test_apply.py
PASSWORD = "pv-Sudo-7c1e9f"  # a test host's password, made for this test only

pytestmark = [pytest.mark.docker, pytest.mark.slow]
# host_record alone: it needs root on the host (it writes /var/lib/provision) and takes seconds.
RECORD_ONLY = ["--yes", "--skip-frameworks", "--tags", "host_record", "--skip-check"]


def provision(env, *args: str, timeout: float = 1800, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                          timeout=timeout)


def output(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout[-3000:] + proc.stderr[-3000:]


def read_yaml(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def write_yaml(data: dict, path: Path) -> Path:
    with path.open("w") as fh:
        YAML(typ="safe").dump(data, fh)
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ssh")
    return tmp, os.environ | {"PROVISION_STATE": str(tmp / "state")}


@pytest.fixture(scope="module")
def debian12(env):
    tmp, environ = env
    inv = tmp / "debian12.yml"
    up = provision(environ, "sandbox", "up", D12, "--os", "debian-12", "--profile", "aws-p2", "-o", str(inv),
                   timeout=900)
    assert up.returncode == 0, output(up)
    yield inv, environ
    sandbox.remove(D12)


def host_exec(name: str, *cmd: str) -> str:
    return subprocess.run(["docker", "exec", name, *cmd], capture_output=True, text=True, check=True).stdout


def test_the_sandbox_is_a_stock_host(debian12):
    """What `sandbox up` makes is what a user's machine is; this runs before anything is applied to it."""
    inv, _ = debian12
    host = read_yaml(inv)["all"]["hosts"][D12]
    assert host["ansible_user"] == "admin" and host["ansible_host"] == "127.0.0.1" and host["ansible_become"] is True
    assert "ansible_connection" not in host  # ssh, Ansible's default
    assert host_exec(D12, "cat", "/etc/apt/sources.list").split("\n")[0].endswith(" bookworm main")
    dpkg = subprocess.run(["docker", "exec", D12, "dpkg-query", "-W", "-f", "${Status}", "python3-apt"],
                          capture_output=True, text=True)
    assert "install ok installed" not in dpkg.stdout
    assert subprocess.run(["docker", "exec", D12, "sh", "-c", "command -v curl"]).returncode != 0


def test_check_mode_on_a_stock_host_says_what_it_cannot_predict_and_changes_nothing(debian12):
    inv, environ = debian12
    before = host_exec(D12, "cat", "/etc/apt/sources.list")
    proc = provision(environ, "apply", "-i", str(inv), "--dry-run", "--skip-frameworks", timeout=600)
    assert proc.returncode == 0, output(proc)
    said = [line.split("cannot predict: ", 1)[1] for line in proc.stdout.splitlines()
            if line.startswith(f"{D12}: --dry-run cannot predict: ")]
    roles = [line.split(":", 1)[0] for line in said]
    assert roles == ["nvidia_driver", "python_env", "cuda", "cudnn", "jupyter", "gpu_verify"], said
    assert "python3-apt is not installed yet" in said[0] and "/opt/provision/venv does not exist yet" in said[2]
    # A dry run: nothing on the host changed.
    assert host_exec(D12, "cat", "/etc/apt/sources.list") == before
    assert subprocess.run(["docker", "exec", D12, "test", "-e", "/opt/provision"]).returncode != 0
    assert not host_exec(D12, "sh", "-c", "ls /usr/lib/python3/dist-packages | grep apt_pkg || true").strip()


def test_a_changed_host_key_is_refused_in_one_line(debian12):
    inv, environ = debian12
    # The host is "reinstalled": new host keys, same address and port.
    first = provision(environ, "apply", "-i", str(inv), *RECORD_ONLY, timeout=300)
    assert first.returncode == 0, output(first)  # the inventory `sandbox up` wrote reaches the host
    host_exec(D12, "sh", "-c", "rm -f /etc/ssh/ssh_host_* && ssh-keygen -A >/dev/null && systemctl restart ssh")
    try:
        started = time.monotonic()
        proc = provision(environ, "apply", "-i", str(inv), *RECORD_ONLY, timeout=120)
        seconds = time.monotonic() - started
        assert proc.returncode == 3, output(proc)
        failed = [line for line in proc.stderr.splitlines() if line.startswith(f"failed: {D12}:")]
        assert failed and "SSH key" in failed[0], output(proc)
        assert "Traceback" not in proc.stderr
        assert seconds < 90, f"refusing a changed key took {seconds:.0f} s"
        # The same host, from an inventory that turns host key checking off (as ansible-playbook takes it): provision
        # keeps the inventory's setting, applies, and says so in one warning line naming the host and the setting.
        hosts = read_yaml(inv)
        hosts["all"]["hosts"][D12]["ansible_ssh_common_args"] = (
            "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o IdentitiesOnly=yes -o BatchMode=yes")
        trusting = write_yaml(hosts, inv.parent / "no-host-key-checking.yml")
        proc = provision(environ, "apply", "-i", str(trusting), *RECORD_ONLY, timeout=300)
        assert proc.returncode == 0, output(proc)
        warned = [line for line in proc.stderr.splitlines() if line.startswith("warning: ") and "host key" in line]
        assert warned == [f"warning: {D12}: ansible_ssh_common_args: StrictHostKeyChecking=no: its SSH host key is "
                          "not checked, as this setting asks (provision checks it otherwise and refuses an unknown or "
                          "changed key)"], output(proc)
    finally:  # trust the new key again for the tests after this one
        port = read_yaml(inv)["all"]["hosts"][D12]["ansible_port"]
        sandbox.pin_host_key(port, host_exec(D12, "cat", "/etc/ssh/ssh_host_ed25519_key.pub"))


def new_host_keys(name: str) -> None:
    """The host is "reinstalled": new host keys, same address and port."""
    host_exec(name, "sh", "-c", "rm -f /etc/ssh/ssh_host_* && ssh-keygen -A >/dev/null && systemctl restart ssh")


def pin_again(name: str, port: int) -> None:
    """Trust the host's (new) key again in the sandboxes' known_hosts, for the tests after this one."""
    sandbox.pin_host_key(port, host_exec(name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub"))


def known(known_hosts: Path, port: int) -> str:
    """What known_hosts holds for 127.0.0.1:port (hashed or not, as ssh_config says), '' for nothing."""
    return subprocess.run(["ssh-keygen", "-F", f"[127.0.0.1]:{port}", "-f", str(known_hosts)], capture_output=True,
                          text=True).stdout


def test_accept_new_records_an_unknown_key_and_refuses_a_changed_one(debian12):
    """StrictHostKeyChecking=accept-new in the inventory, which Mitogen's own `StrictHostKeyChecking yes` would
    shadow: the apply reaches a host whose key known_hosts does not have, records it there (no warning: the setting
    is honoured), and a changed key is then refused in one line. =ask cannot be honoured during a run: one warning
    line, and the unknown key is refused."""
    inv, environ = debian12
    hosts = read_yaml(inv)
    port = hosts["all"]["hosts"][D12]["ansible_port"]
    kh = inv.parent / "accept-new-known-hosts"
    kh.unlink(missing_ok=True)

    def inventory(strict: str, known_hosts: Path) -> Path:
        hosts["all"]["hosts"][D12]["ansible_ssh_common_args"] = (
            f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking={strict} -o IdentitiesOnly=yes "
            "-o BatchMode=yes -o ConnectTimeout=15")
        return write_yaml(hosts, inv.parent / f"strict-{strict}.yml")

    proc = provision(environ, "apply", "-i", str(inventory("accept-new", kh)), *RECORD_ONLY, timeout=300)
    assert proc.returncode == 0, output(proc)
    assert not [line for line in proc.stderr.splitlines() if line.startswith("warning: ") and "host key" in line]
    key = host_exec(D12, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()[1]
    assert key in known(kh, port), kh.read_text()

    asking = inventory("ask", inv.parent / "ask-known-hosts")  # a known_hosts without this host
    started = time.monotonic()
    proc = provision(environ, "apply", "-i", str(asking), *RECORD_ONLY, timeout=120)
    assert proc.returncode == 3, output(proc)
    warned = [line for line in proc.stderr.splitlines() if line.startswith("warning: ") and "host key" in line]
    assert warned == [f"warning: {D12}: ansible_ssh_common_args: StrictHostKeyChecking=ask: nobody can answer ssh's "
                      "question during a run, so its SSH host key is checked as with StrictHostKeyChecking=yes (an "
                      "unknown or changed key is refused; connect once with ssh to accept a new one)"], output(proc)
    failed = [line for line in proc.stderr.splitlines() if line.startswith(f"failed: {D12}:")]
    assert failed and "SSH key" in failed[0], output(proc)
    assert time.monotonic() - started < 90

    new_host_keys(D12)
    try:
        started = time.monotonic()
        proc = provision(environ, "apply", "-i", str(inventory("accept-new", kh)), *RECORD_ONLY, timeout=120)
        assert proc.returncode == 3, output(proc)
        failed = [line for line in proc.stderr.splitlines() if line.startswith(f"failed: {D12}:")]
        assert failed and "SSH key" in failed[0], output(proc)
        assert "Traceback" not in proc.stderr
        assert time.monotonic() - started < 90
        assert key in known(kh, port)  # the key it knew is kept: accept-new adds, never replaces
    finally:
        pin_again(D12, port)


def test_check_honours_the_inventorys_host_key_setting(deskmini_apply, env):
    """`provision check -i INV` on a host whose SSH key changed: refused in one line while the inventory checks keys;
    green, with the apply's warning line, when the inventory turns checking off for that host
    (ansible_host_key_checking: false, which testinfra's own ssh does not read)."""
    assert deskmini_apply.returncode == 0, deskmini_apply.stdout[-3000:] + deskmini_apply.stderr[-3000:]
    tmp, environ = env
    name = DESKMINI
    hosts = sandbox.inventory([name])
    port = hosts["all"]["hosts"][name]["ansible_port"]
    checking = write_yaml(hosts, tmp / "deskmini-checking.yml")
    hosts["all"]["hosts"][name]["ansible_host_key_checking"] = False
    trusting = write_yaml(hosts, tmp / "deskmini-no-host-key-checking.yml")
    check = ["check", str(ROOT / "profiles/deskmini.yaml"), "--os", "debian-13", "--skip-frameworks", "-i"]
    new_host_keys(name)
    try:
        started = time.monotonic()
        proc = provision(environ, *check, str(checking), timeout=300)
        assert proc.returncode == 3, output(proc)
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        assert lines == [f"cannot reach {name}: the host's SSH key is not the one known for it (refused: if the host "
                         "was reinstalled, remove the old key with `ssh-keygen -R HOST` and connect once to check the "
                         "new one)"], output(proc)
        assert time.monotonic() - started < 120

        proc = provision(environ, *check, str(trusting), timeout=600)
        assert proc.returncode == 0, output(proc)
        assert "FAILED" not in proc.stdout and "token-200] PASSED" in proc.stdout, output(proc)
        warned = [line for line in proc.stderr.splitlines() if line.startswith("warning: ") and "host key" in line]
        assert warned == [f"warning: {name}: ansible_host_key_checking: False: its SSH host key is not checked, as "
                          "this setting asks (provision checks it otherwise and refuses an unknown or changed key)"], (
            output(proc))
    finally:
        pin_again(name, port)


def test_a_port_where_nothing_listens_is_one_line_and_exit_3(env):
    tmp, environ = env
    with socket.socket() as s:  # a free port on the loopback, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inv = write_yaml({"all": {"hosts": {"nowhere": {
        "ansible_host": "127.0.0.1", "ansible_port": port, "ansible_user": "admin",
        "ansible_ssh_common_args": sandbox.ssh_args(), "provision_profile": "deskmini",
        "provision_os": "debian-13"}}}}, tmp / "nowhere.yml")
    started = time.monotonic()
    proc = provision(environ, "apply", "-i", str(inv), "--yes", "--skip-frameworks", timeout=120)
    assert proc.returncode == 3, output(proc)
    failed = [line for line in proc.stderr.splitlines() if line.startswith("failed: nowhere:")]
    assert failed and "nothing accepts SSH connections" in failed[0], output(proc)
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 90


# --- sudo that asks for a password -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sudo_host(env):
    tmp, environ = env
    box = sandbox.start(SUDO, "13", sudo_password=PASSWORD)
    base = sandbox.inventory([SUDO], hostvars={SUDO: {"provision_profile": "deskmini", "provision_os": "debian-13"}})
    yield tmp, environ, base
    sandbox.remove(SUDO)
    assert box.port


def assert_never_shown(*texts: str, state: Path | None = None) -> None:
    for text in texts:
        assert PASSWORD not in text
    if state is not None and state.exists():
        for path in state.rglob("*"):
            if path.is_file():
                assert PASSWORD not in path.read_text(errors="replace"), path




def test_sudo_without_its_password_is_one_line(sudo_host):
    tmp, environ, base = sudo_host
    inv = write_yaml(base, tmp / "sudo-none.yml")
    proc = provision(environ, "apply", "-i", str(inv), *RECORD_ONLY, timeout=300)
    assert proc.returncode != 0, output(proc)
    failed = [line for line in proc.stderr.splitlines() if line.startswith(f"failed: {SUDO}:")]
    assert failed and "sudo asks for a password" in failed[0], output(proc)
    assert "Traceback" not in proc.stderr


def test_sudo_password_from_the_inventory(sudo_host):
    tmp, environ, base = sudo_host
    data = json.loads(json.dumps(base))
    data["all"]["hosts"][SUDO]["ansible_become_password"] = PASSWORD
    inv = write_yaml(data, tmp / "sudo-inventory.yml")
    proc = provision(environ, "apply", "-i", str(inv), *RECORD_ONLY, timeout=300)
    assert proc.returncode == 0, output(proc)
    assert_never_shown(proc.stdout, proc.stderr, state=tmp / "state")


def test_sudo_password_from_a_vault(sudo_host):
    tmp, environ, base = sudo_host
    vault_pass = tmp / "vault-pass"
    vault_pass.write_text("pv-vault-secret\n")
    vault_pass.chmod(0o600)
    enc = subprocess.run([str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string",
                          "--vault-password-file", str(vault_pass), "--stdin-name", "ansible_become_password"],
                         input=PASSWORD, capture_output=True, text=True, check=True).stdout
    assert enc.startswith("ansible_become_password: !vault |"), enc
    lines = [f"    {SUDO}:"]
    for key, value in base["all"]["hosts"][SUDO].items():
        lines.append(f"      {key}: {json.dumps(value)}")
    lines += ["      " + line for line in enc.strip().splitlines()]
    inv = tmp / "sudo-vault.yml"
    inv.write_text("all:\n  hosts:\n" + "\n".join(lines) + "\n")
    assert PASSWORD not in inv.read_text()
    proc = provision(environ, "apply", "-i", str(inv), "--vault-password-file", str(vault_pass), *RECORD_ONLY,
                     timeout=300)
    assert proc.returncode == 0, output(proc)
    assert_never_shown(proc.stdout, proc.stderr, state=tmp / "state")


def test_sudo_password_asked_for(sudo_host):
    tmp, environ, base = sudo_host
    inv = write_yaml(base, tmp / "sudo-ask.yml")
    proc = provision(environ, "apply", "-i", str(inv), "--ask-become-pass", *RECORD_ONLY, timeout=300,
                     stdin=PASSWORD + "\n")
    assert proc.returncode == 0, output(proc)
    assert_never_shown(proc.stdout, proc.stderr, state=tmp / "state")
