"""The user's SSH host key settings, read as ansible-playbook reads them (provision.runners.ansible): the host's
variables over ANSIBLE_HOST_KEY_CHECKING over ansible.cfg, and StrictHostKeyChecking in the ssh arguments, the first
one given winning as in ssh. End to end over SSH: tests/integration/test_ssh_hosts.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from provision.apply import ssh_command
from provision.runners import ansible as runner


@pytest.fixture(autouse=True)
def _fresh_config(monkeypatch):
    monkeypatch.delenv("ANSIBLE_HOST_KEY_CHECKING", raising=False)
    monkeypatch.delenv("ANSIBLE_CONFIG", raising=False)
    runner.configured_host_key_checking.cache_clear()
    yield
    runner.configured_host_key_checking.cache_clear()


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
    assert runner.host_key_checking_off(hostvars) == off


def test_the_environment_and_ansible_cfg_are_the_users(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    assert runner.host_key_checking_off({}) == "ANSIBLE_HOST_KEY_CHECKING=False in the environment"
    assert runner.host_key_checking_off({"ansible_host_key_checking": True}) is None  # the host's variable wins
    # ansible.cfg in the directory provision runs in, as ansible-playbook reads it (a fresh process: the
    # configuration is read once per run)
    (tmp_path / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    proc = subprocess.run([sys.executable, "-c", "from provision.runners.ansible import host_key_checking_off as f; "
                           "print(f({}))"], capture_output=True, text=True, cwd=tmp_path, env=env, check=True)
    assert proc.stdout.strip() == f"host_key_checking = False in {tmp_path / 'ansible.cfg'}"


def test_warnings_name_each_host_and_its_setting():
    lines = runner.host_key_warnings({
        "b": {"ansible_ssh_common_args": "-o StrictHostKeyChecking=no"}, "a": {}, "c": {"ansible_host_key_checking": 0}})
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
