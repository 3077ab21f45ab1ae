"""How the controller reaches a host over SSH: the host-key policy, computed once per host, and the ssh command line.

Ansible checks a host's SSH key against known_hosts unless host_key_checking is off (the host's variables, then
ANSIBLE_HOST_KEY_CHECKING, then ansible.cfg) or the host's ssh arguments say StrictHostKeyChecking=no, which ssh
honours because Ansible's ssh connection puts no such option before them. Mitogen's connection (the playbook's,
runners.ansible.strategy_env) puts `StrictHostKeyChecking yes` before them, so provision tells it the host's checking
is off (pipeline.render writes it into the playbook's host_vars), and says so; an inventory's
StrictHostKeyChecking=accept-new, which that option would shadow, provision honours itself before the play
(accept_new_host_keys, pipeline.run); =ask it cannot, and says so (HostKeys.warning, pipeline.preflight).

One `HostKeys` per host (host_keys), from the inventory's variables as the run reaches the host, is what the
stages read: preflight's warnings, render's host_vars, run's accept-new connections, check's testinfra environment
(runners.testinfra.check_target) and connect's tunnels and token reads (its ssh command line).
"""

from __future__ import annotations

import functools
import os
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from provision.errors import printable

HOST_KEY_VARS = ("ansible_ssh_host_key_checking", "ansible_host_key_checking")  # Ansible's order of precedence
SSH_ARG_VARS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")  # their order on the line
# What the playbook's connections (Mitogen's check_host_keys=ignore) do when checking is off; provision's own ssh
# (the tunnel, the token) adds these after the inventory's arguments, which win where they say otherwise.
NO_HOST_KEY_CHECKING = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                        "-o", "GlobalKnownHostsFile=/dev/null")
SSH_CONNECTIONS = ("ssh", "ansible.builtin.ssh", "paramiko")  # connections provision's own ssh can stand in for


@functools.cache
def configured_host_key_checking() -> tuple[bool, str]:
    """host_key_checking as ansible-playbook started here has it (ANSIBLE_HOST_KEY_CHECKING, then ANSIBLE_CONFIG,
    ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg; on by default), and where that came from."""
    try:
        from ansible.config.manager import ConfigManager

        value, origin = ConfigManager().get_config_value_and_origin("HOST_KEY_CHECKING")
    except Exception:  # no ansible-core, or a configuration it cannot read: the run itself reports that
        return True, "Ansible's default"
    if origin.startswith("env:"):
        name = origin.split(":", 1)[1].strip()
        return bool(value), f"{name}={os.environ.get(name, value)} in the environment"
    return bool(value), "Ansible's default" if origin == "default" else f"host_key_checking = {value} in {origin}"


def _ansible_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text in ("yes", "on", "true", "1", "y", "t") else False if text in (
        "no", "off", "false", "0", "n", "f") else None


def ssh_option(args: str, name: str) -> str | None:
    """The value of ssh option `name` in these arguments (`-o Name=value`, `-o 'Name value'`, `-oName=value`): the
    first one given, as ssh takes it."""
    try:
        words = shlex.split(args)
    except ValueError:
        return None
    for i, word in enumerate(words):
        text = words[i + 1] if word == "-o" and i + 1 < len(words) else word[2:] if word.startswith("-o") else ""
        key, _, value = text.strip().replace("=", " ", 1).partition(" ")
        if key.lower() == name.lower():
            return value.strip()
    return None


def strict_host_key_option(hostvars: dict[str, Any]) -> tuple[str, str] | None:
    """The host's StrictHostKeyChecking as ssh takes it from the inventory's ssh arguments (the first one given), and
    the variable that says it; None when they do not say."""
    for var in SSH_ARG_VARS:
        strict = ssh_option(str(hostvars.get(var) or ""), "StrictHostKeyChecking")
        if strict is not None:
            return var, strict
    return None


def host_key_checking_off(hostvars: dict[str, Any]) -> str | None:
    """None when Ansible checks this host's SSH key (known_hosts; an unknown or changed key is refused); otherwise
    the setting that turned the checking off, as a person finds it (`ansible_ssh_common_args:
    StrictHostKeyChecking=no`, `ansible_host_key_checking: false`, `ANSIBLE_HOST_KEY_CHECKING=False in the
    environment`, ...)."""
    for var in HOST_KEY_VARS:
        value = _ansible_bool(hostvars.get(var)) if var in hostvars else None
        if value is not None:
            if not value:
                return f"{var}: {hostvars[var]}"
            break
    else:
        value, where = configured_host_key_checking()
        if not value:
            return where
    found = strict_host_key_option(hostvars)
    if found is not None:
        var, strict = found
        return f"{var}: StrictHostKeyChecking={strict}" if strict.lower() in ("no", "off") else None
    return None


def ssh_command(host: str, hostvars: dict[str, Any]) -> list[str] | None:
    """The ssh command line that reaches `host` as the inventory does (address, port, user, key, options), None for a
    host Ansible does not reach over SSH."""
    if hostvars.get("ansible_connection", "ssh") not in SSH_CONNECTIONS:
        return None
    cmd = ["ssh"]
    if hostvars.get("ansible_ssh_private_key_file"):
        cmd += ["-i", str(hostvars["ansible_ssh_private_key_file"])]
    if hostvars.get("ansible_port"):
        cmd += ["-p", str(hostvars["ansible_port"])]
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        cmd += shlex.split(str(hostvars.get(var) or ""))
    if host_key_checking_off(hostvars):  # as the inventory says, and as the playbook's connections did
        cmd += NO_HOST_KEY_CHECKING
    user = hostvars.get("ansible_user")
    address = str(hostvars.get("ansible_host") or host)
    return [*cmd, f"{user}@{address}" if user else address]


@dataclass(frozen=True)
class HostKeys:
    """One host's SSH host-key policy, as the user's Ansible and inventory set it (host_keys computes it once)."""

    host: str
    off: str | None  # the setting that turns checking off (a person finds it by this text); None: keys are checked
    strict: tuple[str, str] | None  # (variable, value) of StrictHostKeyChecking in the host's ssh arguments
    # 'accept-new' (honoured by accept_new_host_keys before the play) or 'ask' (cannot be: checked as with =yes) where
    # the playbook's connections are Mitogen's, which shadow the inventory's setting; None otherwise.
    mitogen_mode: str | None
    ssh: tuple[str, ...] | None  # the ssh command line that reaches the host (ssh_command); None: not over SSH

    @property
    def warning(self) -> str | None:
        """The line the preflight prints for this host, None when there is nothing to say."""
        if self.off:
            return (f"warning: {self.host}: {self.off}: its SSH host key is not checked, as this setting asks "
                    "(provision checks it otherwise and refuses an unknown or changed key)")
        if self.mitogen_mode == "ask" and self.strict:
            var, value = self.strict
            return (f"warning: {self.host}: {var}: StrictHostKeyChecking={value}: nobody can answer ssh's question "
                    "during a run, so its SSH host key is checked as with StrictHostKeyChecking=yes (an unknown or "
                    "changed key is refused; connect once with ssh to accept a new one)")
        return None

    @property
    def accept_new_command(self) -> list[str] | None:
        """The ssh command accept_new_host_keys runs for a host whose inventory says StrictHostKeyChecking=accept-new
        while the play runs under Mitogen; None for any other host."""
        if self.mitogen_mode != "accept-new" or not self.ssh:
            return None
        cmd = list(self.ssh)
        # After the inventory's arguments (ssh takes the first value given): no prompt, no hang.
        return [*cmd[:-1], "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR", cmd[-1], "true"]


def host_keys_of(host: str, hostvars: dict[str, Any], *, mitogen: bool) -> HostKeys:
    """The policy of one host. mitogen: the connections that will reach it are Mitogen's (the playbook's, when
    runners.ansible.mitogen_connections() says so); False for provision check's and provision's own ssh."""
    off = host_key_checking_off(hostvars)
    strict = strict_host_key_option(hostvars)
    mode = None
    if (mitogen and strict is not None and not off and strict[1].lower() in ("accept-new", "ask")
            and str(hostvars.get("ansible_connection") or "ssh") in ("ssh", "ansible.builtin.ssh", "smart")):
        mode = strict[1].lower()
    cmd = ssh_command(host, hostvars)
    return HostKeys(host, off, strict, mode, tuple(cmd) if cmd else None)


def host_keys(hostvars: dict[str, dict[str, Any]], *, mitogen: bool) -> dict[str, HostKeys]:
    """Every host's policy, computed once (host_keys_of)."""
    return {host: host_keys_of(host, hv, mitogen=mitogen) for host, hv in sorted(hostvars.items())}


def host_key_warnings(keys: dict[str, HostKeys]) -> list[str]:
    """One warning line per host whose SSH key the inventory (or the user's Ansible configuration) says not to check,
    naming the setting: provision checks keys unless told otherwise, and keeps what the user said. One too for a host
    whose ssh arguments say StrictHostKeyChecking=ask, which a playbook run under Mitogen cannot honour."""
    return [line for _, k in sorted(keys.items()) if (line := k.warning)]


def accept_new_host_keys(keys: dict[str, HostKeys], *, timeout: float = 30.0) -> list[str]:
    """Honour StrictHostKeyChecking=accept-new for the hosts whose ssh arguments say it (HostKeys.mitogen_mode): one
    ssh connection to each, with the inventory's own arguments first, records a key it does not know in the
    known_hosts those arguments name, as the inventory asks, and refuses nothing itself: a changed key stays
    refused, by Mitogen's connection after it, with the run's usual line. Returns the hosts it connected to."""
    commands = {host: cmd for host, k in sorted(keys.items()) if (cmd := k.accept_new_command)}

    def one(cmd: list[str]) -> None:
        try:
            subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           timeout=timeout, check=False)
        except (OSError, subprocess.TimeoutExpired):  # the play's own connection says what is wrong
            pass

    if commands:
        with ThreadPoolExecutor(max_workers=min(8, len(commands))) as pool:
            list(pool.map(one, commands.values()))
    return sorted(commands)


# --- why a connection failed --------------------------------------------------------------------------------------
# Why a host could not be reached (SSH's, sudo's and Mitogen's words), and what to do. Most specific first. Read from
# the playbook's events (pipeline.events) and from provision check's output (runners.testinfra).
UNREACHABLE_CAUSES = (
    ("REMOTE HOST IDENTIFICATION HAS CHANGED", "the host's SSH key is not the one known for it (refused: if the host "
     "was reinstalled, remove the old key with `ssh-keygen -R HOST` and connect once to check the new one)"),
    ("unrecognized or mismatching host key", "the host's SSH key is unknown or changed (refused: check it and add "
     "it to known_hosts, e.g. `ssh HOST` once, or `ssh-keygen -R HOST` if it was reinstalled)"),
    ("Host key verification failed", "the host's SSH key is unknown or changed (refused: check it and add it to "
     "known_hosts, e.g. `ssh HOST` once, or `ssh-keygen -R HOST` if it was reinstalled)"),
    ("Permission denied", "SSH refused the login (check ansible_user and the key or password for it)"),
    ("Connection refused", "nothing accepts SSH connections at the host's address and port (is sshd running, is "
     "ansible_port right?)"),
    ("Connection timed out", "the host did not answer on its SSH port (address, port or firewall)"),
    ("No route to host", "the host's address cannot be reached from here"),
    ("Could not resolve hostname", "the host's name does not resolve (check ansible_host)"),
    ("Incorrect sudo password", "sudo refused the password (check --ask-become-pass or ansible_become_password)"),
    ("sudo password is incorrect", "sudo refused the password (check --ask-become-pass or ansible_become_password)"),
    ("sudo password is required", "sudo asks for a password and none was given (use --ask-become-pass, or set "
     "ansible_become_password in the inventory or a vault)"),
    ("Missing sudo password", "sudo asks for a password and none was given (use --ask-become-pass, or set "
     "ansible_become_password in the inventory or a vault)"),
)


def one_line(text: Any) -> str:
    """Output from a host as one printable line: what a host's commands print (the account's interpreter, a
    package's scripts) can hold escape sequences, which never reach the operator's terminal raw."""
    return printable(" ".join(str(text).split()))[:300]


def host_key_refusal(text: str) -> str | None:
    """The cause line for an SSH host key that ssh (or Mitogen) refused in this output, None when it says no such
    thing."""
    for needle, cause in UNREACHABLE_CAUSES[:3]:
        if needle in text:
            return cause
    return None


def unreachable_message(res: dict[str, Any]) -> str:
    """Why a host could not be reached, from a task result's words: a known cause first, else its own message."""
    text = " ".join(str(res.get(k) or "") for k in ("msg", "stderr", "stdout", "module_stderr"))
    for needle, cause in UNREACHABLE_CAUSES:
        if needle in text:
            return cause
    return one_line(res.get("msg") or text)
