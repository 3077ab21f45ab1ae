"""The user's SSH host key settings, read as ansible-playbook reads them (provision.ssh): the host's
variables over ANSIBLE_HOST_KEY_CHECKING over ansible.cfg, and StrictHostKeyChecking in the ssh arguments, the first
one given winning as in ssh. End to end over SSH: tests/integration/test_ssh_hosts.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision import ssh
from provision.ssh import ssh_command


@pytest.fixture(autouse=True)
def _fresh_config(monkeypatch):
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    ssh.configured_host_key_checking.cache_clear()
    yield
    ssh.configured_host_key_checking.cache_clear()


@pytest.mark.parametrize(("hostvars", "off"), [
    ({}, None),
    ({"ansible_ssh_common_args": "-o UserKnownHostsFile=/kh -o StrictHostKeyChecking=yes"}, None),
    ({"ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"},
     "ansible_ssh_common_args: StrictHostKeyChecking=no"),
    ({"ansible_ssh_extra_args": "-o 'StrictHostKeyChecking off'"}, "ansible_ssh_extra_args: StrictHostKeyChecking=off"),
    ({"ansible_ssh_common_args": "-oStrictHostKeyChecking=no"}, "ansible_ssh_common_args: StrictHostKeyChecking=no"),
    # ssh takes the first value given: common args come before extra args on Ansible's command line
    ({"ansible_ssh_common_args": "-o StrictHostKeyChecking=yes", "ansible_ssh_extra_args": "-o StrictHostKeyChecking=no"},
     None),
    ({"ansible_host_key_checking": False}, "ansible_host_key_checking: False"),
    ({"ansible_host_key_checking": "no"}, "ansible_host_key_checking: no"),
    ({"ansible_ssh_host_key_checking": "yes", "ansible_host_key_checking": "no"}, None),
])
def test_what_turns_host_key_checking_off_for_a_host(hostvars, off):
    assert ssh.host_key_checking_off(hostvars) == off


def test_the_environment_and_ansible_cfg_are_the_users(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert ssh.host_key_checking_off({}) == "ANSIBLE_HOST_KEY_CHECKING=False in the environment"
    assert ssh.host_key_checking_off({"ansible_host_key_checking": True}) is None  # the host's variable wins
    # ansible.cfg in the directory provision runs in, as ansible-playbook reads it (a fresh process: the
    # configuration is read once per run)
    (tmp_path / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    proc = subprocess.run([sys.executable, "-c", "from provision.ssh import host_key_checking_off as f; "
                           "print(f({}))"], capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert proc.stdout.strip() == f"host_key_checking = False in {tmp_path / 'ansible.cfg'}"


def test_warnings_name_each_host_and_its_setting():
    lines = ssh.host_key_warnings(ssh.host_keys({
        "b": {"ansible_ssh_common_args": "-o StrictHostKeyChecking=no"}, "a": {}, "c": {"ansible_host_key_checking": 0}},
        mitogen=True))
    assert [line.split(": its SSH")[0] for line in lines] == [
        "warning: b: ansible_ssh_common_args: StrictHostKeyChecking=no", "warning: c: ansible_host_key_checking: 0"]


def test_provisions_own_ssh_keeps_the_inventorys_options_first():
    # The tunnel and the token read: the inventory's options first (ssh takes the first value), then what the
    # playbook's connections did with checking off.
    hv = {"ansible_host": "10.0.0.5", "ansible_user": "me",
          "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/home/me/kh"}
    cmd = ssh_command("box", hv)
    assert cmd is not None
    assert cmd[:5] == ["ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/home/me/kh"]
    assert cmd[-1] == "me@10.0.0.5" and "GlobalKnownHostsFile=/dev/null" in cmd
    assert ssh_command("box", {"ansible_host": "10.0.0.5"}) == ["ssh", "10.0.0.5"]


# --- StrictHostKeyChecking=accept-new / ask under Mitogen ---------------------------------------------------------
# Mitogen's ssh puts `-o StrictHostKeyChecking yes` before the inventory's arguments (mitogen/ssh.py, check_host_keys
# 'enforce': ansible_mitogen gives it only 'enforce' or 'ignore'), so ssh never sees the inventory's accept-new or ask.


def test_mitogen_puts_its_own_strict_host_key_checking_first(monkeypatch):
    """What the workaround rests on, read from the Mitogen installed here: with checking on, its ssh command line says
    StrictHostKeyChecking yes before the inventory's arguments, which ssh then ignores for that option. (The remote
    Python's part of the command, which needs a running router, is left out.)"""
    import mitogen.parent
    import mitogen.ssh

    monkeypatch.setattr(mitogen.parent.Connection, "get_boot_command", lambda self: [])

    conn = mitogen.ssh.Connection.__new__(mitogen.ssh.Connection)
    conn.options = mitogen.ssh.Options(hostname="box", check_host_keys="enforce", max_message_size=1 << 20,
                                       ssh_args=["-o", "StrictHostKeyChecking=accept-new"])
    bits = conn.get_boot_command()
    ours = bits.index("StrictHostKeyChecking yes")
    assert ours < bits.index("StrictHostKeyChecking=accept-new")


@pytest.mark.parametrize(("hostvars", "mode"), [
    ({"ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new"}, "accept-new"),
    ({"ansible_ssh_extra_args": "-o 'StrictHostKeyChecking ask'"}, "ask"),
    ({"ansible_ssh_common_args": "-oStrictHostKeyChecking=Accept-New -o UserKnownHostsFile=/kh"}, "accept-new"),
    # the first one given is ssh's
    ({"ansible_ssh_common_args": "-o StrictHostKeyChecking=yes", "ansible_ssh_extra_args": "-o StrictHostKeyChecking=ask"},
     None),
    ({"ansible_ssh_common_args": "-o StrictHostKeyChecking=yes"}, None),
    ({}, None),
    # checking off for the host: Mitogen ignores the key anyway (write_host_key_vars)
    ({"ansible_host_key_checking": False, "ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new"}, None),
    # not an ssh connection
    ({"ansible_connection": "docker", "ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new"}, None),
])
def test_what_mitogen_would_shadow(hostvars, mode, monkeypatch):
    monkeypatch.delenv("PROVISION_ANSIBLE_STRATEGY", raising=False)
    from provision.runners.ansible import mitogen_connections

    assert mitogen_connections()  # Mitogen is a dependency: the playbook's connections are its
    assert ssh.host_keys_of("box", hostvars, mitogen=True).mitogen_mode == mode


def test_without_mitogen_ansibles_ssh_honours_the_setting_itself(monkeypatch):
    monkeypatch.setenv("PROVISION_ANSIBLE_STRATEGY", "linear")
    from provision.runners.ansible import mitogen_connections

    mitogen = mitogen_connections()
    assert mitogen is False
    hv = {"ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new"}
    keys = ssh.host_keys_of("box", hv, mitogen=mitogen)
    assert keys.mitogen_mode is None and keys.accept_new_command is None
    assert ssh.host_key_warnings(ssh.host_keys({"box": {"ansible_ssh_common_args": "-o StrictHostKeyChecking=ask"}},
                                               mitogen=mitogen)) == []


def test_ask_is_one_warning_naming_the_host_and_the_setting_and_accept_new_none(monkeypatch):
    monkeypatch.delenv("PROVISION_ANSIBLE_STRATEGY", raising=False)
    lines = ssh.host_key_warnings(ssh.host_keys({
        "a": {"ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new"},
        "b": {"ansible_ssh_extra_args": "-o StrictHostKeyChecking=ask -o BatchMode=no"},
        "c": {}}, mitogen=True))
    assert lines == ["warning: b: ansible_ssh_extra_args: StrictHostKeyChecking=ask: nobody can answer ssh's question "
                     "during a run, so its SSH host key is checked as with StrictHostKeyChecking=yes (an unknown or "
                     "changed key is refused; connect once with ssh to accept a new one)"]


def test_accept_new_is_honoured_by_an_ssh_with_the_inventorys_arguments_first(monkeypatch):
    monkeypatch.delenv("PROVISION_ANSIBLE_STRATEGY", raising=False)
    hv = {"ansible_host": "192.0.2.7", "ansible_port": 2222, "ansible_user": "admin",
          "ansible_ssh_common_args": "-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile=/home/me/kh"}
    cmd = ssh.host_keys_of("box", hv, mitogen=True).accept_new_command
    assert cmd is not None
    assert cmd[:7] == ["ssh", "-p", "2222", "-o", "StrictHostKeyChecking=accept-new", "-o",
                       "UserKnownHostsFile=/home/me/kh"]
    assert cmd[-2:] == ["admin@192.0.2.7", "true"] and "BatchMode=yes" in cmd
    assert ssh.host_keys_of("box", {"ansible_host": "192.0.2.7"}, mitogen=True).accept_new_command is None


def test_accept_new_connects_to_each_such_host_once_and_comes_back(tmp_path, monkeypatch):
    """Against a port where nothing listens: ssh fails at once, nothing is recorded, nothing raised (the play's own
    connection reports the host); the host without accept-new is not connected to."""
    import socket

    monkeypatch.delenv("PROVISION_ANSIBLE_STRATEGY", raising=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kh = tmp_path / "kh"
    args = f"-o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={kh}"
    done = ssh.accept_new_host_keys(ssh.host_keys({
        "a": {"ansible_host": "127.0.0.1", "ansible_port": port, "ansible_ssh_common_args": args},
        "b": {"ansible_host": "127.0.0.1", "ansible_port": port}}, mitogen=True), timeout=20)
    assert done == ["a"] and not kh.exists()


# --- provision check (testinfra's ssh) with checking off for a host ------------------------------------------------


def _testinfra_ssh(tmp_path: Path, host: str, hostvars: dict, monkeypatch) -> str:
    """The ssh command line testinfra's ansible backend builds for `host` from an inventory file, in the environment
    check_target gives its pytest run."""
    import json

    from testinfra.utils.ansible_runner import AnsibleRunner

    from provision.runners.testinfra import check_target

    inv = tmp_path / "inv.json"
    inv.write_text(json.dumps({"all": {"hosts": {host: hostvars}}}))
    target = check_target(host, hostvars)
    for key, value in target.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    AnsibleRunner._runners.clear()
    backend = AnsibleRunner(str(inv)).get_host(host).backend
    cmd, args = backend._build_ssh_command("true")
    return " ".join(cmd) % tuple(args)


def test_check_leaves_the_key_unchecked_where_the_inventory_turns_checking_off(tmp_path, monkeypatch):
    common = "-o UserKnownHostsFile=/home/me/kh -o IdentitiesOnly=yes"
    line = _testinfra_ssh(tmp_path, "box", {"ansible_host": "192.0.2.7", "ansible_host_key_checking": False,
                                           "ansible_ssh_common_args": common}, monkeypatch)
    # what the apply's connections did, first (ssh takes the first value), then the inventory's own arguments
    assert line.startswith("ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                           f"-o GlobalKnownHostsFile=/dev/null {common}"), line


def test_check_keeps_checking_where_the_inventory_does(tmp_path, monkeypatch):
    common = "-o UserKnownHostsFile=/home/me/kh -o StrictHostKeyChecking=yes"
    line = _testinfra_ssh(tmp_path, "box", {"ansible_host": "192.0.2.7", "ansible_ssh_common_args": common},
                          monkeypatch)
    assert line.startswith(f"ssh {common}") and "StrictHostKeyChecking=no" not in line, line


def test_check_honours_ansible_host_key_checking_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    ssh.configured_host_key_checking.cache_clear()
    line = _testinfra_ssh(tmp_path, "box", {"ansible_host": "192.0.2.7"}, monkeypatch)
    assert line.startswith("ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"), line


def test_check_takes_the_policy_the_run_computed():
    from provision.runners.testinfra import check_target

    hv = {"ansible_host": "192.0.2.7", "ansible_host_key_checking": False}
    off = ssh.host_keys_of("box", hv, mitogen=False)
    assert check_target("box", hv, keys=off).env == check_target("box", hv).env
    assert check_target("box", hv, keys=off).env["ANSIBLE_SSH_COMMON_ARGS"].startswith("-o StrictHostKeyChecking=no")
    # the policy given is the one used, not a second reading of the variables
    checked = ssh.host_keys_of("box", {"ansible_host": "192.0.2.7"}, mitogen=False)
    assert check_target("box", hv, keys=checked).env == {}
