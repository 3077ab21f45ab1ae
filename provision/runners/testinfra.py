"""`provision check`'s runner: provision/checks/test_host.py under pytest-testinfra, against one inventory host.

A thin adapter over a pytest subprocess (provision.procs runs it): how testinfra reaches the host the way the apply
did (check_target), the secrets it needs kept off command lines, and the suite's exit status as the project's exit
codes (0 green, 1 red, 3 cannot run).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision import procs
from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK
from provision.image_hosts import check_commands
from provision.models import Plan
from provision.render.ansible import write_yaml
from provision.ssh import NO_HOST_KEY_CHECKING, HostKeys, host_key_checking_off, unreachable_message

# Inventory variables that hold a password. testinfra's own connections cannot use them without exposing them (an SSH
# password goes to `sshpass -p` on a command line) or at all (a become password: its `sudo` has no way to answer a
# prompt); Ansible can, so a host with any of these is checked through Ansible's modules (slower: one `ansible` run
# per command). Only the names are looked at, never the values.
PASSWORD_VARS = frozenset({
    "ansible_password", "ansible_ssh_pass", "ansible_ssh_password",
    "ansible_become_password", "ansible_become_pass", "ansible_sudo_pass", "ansible_sudo_password",
})
# Connections testinfra's ansible backend opens itself (testinfra.utils.ansible_runner.get_ansible_host); any
# other goes through Ansible.
TESTINFRA_CONNECTIONS = frozenset({"smart", "ssh", "paramiko_ssh", "local", "docker", "community.docker.docker",
                                   "lxc", "lxd"})


def _read_report(path: Path) -> dict[str, Any]:
    """What the checks said as data (test_host.py writes it only where it has something to say)."""
    try:
        said = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return said if isinstance(said, dict) else {}


def _truthy(value: Any) -> bool:
    """An inventory boolean as Ansible reads it (an INI inventory gives strings)."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


@dataclass(frozen=True)
class CheckTarget:
    """How testinfra reaches one inventory host: the --hosts value and the environment for its pytest run."""

    spec: str
    env: dict[str, str]
    through_ansible: bool


def check_target(host: str, hostvars: dict[str, Any], *, become_password: bool = False,
                 keys: HostKeys | None = None) -> CheckTarget:
    """Reach `host` the way the apply did: with the inventory's connection settings, and as root because the play
    says `become: true` (unless the inventory turns become off for the host).

    testinfra's ansible backend escalates with a plain `sudo` when the inventory sets ansible_become; when the
    inventory leaves it to the play, `?sudo=true` adds that sudo here (never both: that would be sudo inside sudo).
    A host whose variables hold a password, or whose connection testinfra cannot open, is checked through Ansible's
    own modules (`?force_ansible=true`), which answer sudo's prompt with the inventory's password without putting
    it on a command line; ANSIBLE_BECOME then carries the play's `become: true`. become_password: a password was
    given on the controller (apply --ask-become-pass): Ansible's modules too, with it in a file (run_check). keys:
    the host's SSH host-key policy as the run computed it (provision.ssh), else read from hostvars here."""
    become_var = hostvars.get("ansible_become", hostvars.get("ansible_sudo"))
    become = True if become_var is None else _truthy(become_var)
    connection = str(hostvars.get("ansible_connection") or "ssh")
    # testinfra reads ansible_become with Python's truth (to it the INI string "no" is true): where that differs
    # from Ansible's reading, Ansible decides.
    misread = isinstance(become_var, str) and _truthy(become_var) != bool(become_var)
    if (PASSWORD_VARS & hostvars.keys() or connection not in TESTINFRA_CONNECTIONS or misread
            or (become_password and become)):
        return CheckTarget(f"ansible://{host}?force_ansible=true", {"ANSIBLE_BECOME": "true" if become else "false"},
                           through_ansible=True)
    inner_sudo = bool(hostvars.get("ansible_become", False))
    outer_sudo = become and not inner_sudo
    off = keys.off if keys is not None else host_key_checking_off(hostvars)
    return CheckTarget(f"ansible://{host}" + ("?sudo=true" if outer_sudo else ""), _host_key_env(hostvars, off),
                       through_ansible=False)


def _host_key_env(hostvars: dict[str, Any], off: str | None) -> dict[str, str]:
    """testinfra's own ssh takes the inventory's ssh arguments but not host_key_checking (the host's
    ansible_host_key_checking, ANSIBLE_HOST_KEY_CHECKING, ansible.cfg): where that turns checking off, its ssh
    arguments begin with what the apply's connections did (NO_HOST_KEY_CHECKING, before the inventory's own, where
    Ansible puts its StrictHostKeyChecking=no too), through ANSIBLE_SSH_COMMON_ARGS, which testinfra reads over the
    host's ansible_ssh_common_args (one pytest process per host: it reaches this host only)."""
    if not off:
        return {}
    if "ANSIBLE_SSH_COMMON_ARGS" in os.environ:  # testinfra's order: the environment, the host, ansible.cfg
        common = os.environ["ANSIBLE_SSH_COMMON_ARGS"]
    elif "ansible_ssh_common_args" in hostvars:
        common = str(hostvars["ansible_ssh_common_args"] or "")
    else:
        from testinfra.utils.ansible_runner import get_ansible_config

        common = get_ansible_config().get("ssh_connection", "ssh_common_args", fallback="")
    return {"ANSIBLE_SSH_COMMON_ARGS": " ".join([*NO_HOST_KEY_CHECKING, common]).strip()}


def _secrets(hostvars: dict[str, Any]) -> list[str]:
    """The literal passwords in a host's variables, to blank out of anything printed (templates and vaulted values
    are not secrets themselves)."""
    return [v for k, v in hostvars.items() if k in PASSWORD_VARS and isinstance(v, str) and len(v) >= 4
            and "{{" not in v]


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "********")
    return text


def run_check(plan: Plan, inventory: Path | dict[str, Any], host: str, *, hostvars: dict[str, Any],
              skip_frameworks: bool = False, echo: Callable[[str], None] | None = None,
              become_password: str | None = None, vault_password_file: Path | None = None,
              keys: HostKeys | None = None, reading: dict[str, Any] | None = None) -> int:
    """Run provision/checks/test_host.py with pytest-testinfra against one inventory host.
    Returns 0 green, 1 red, 3 cannot run.

    Every host, a sandbox included, is reached through the inventory with testinfra's ansible:// backend
    (connection, user, port, key and ssh arguments as the inventory gives them; see check_target for escalation).
    inventory: a file (used where it is) or a dict (a sandbox's, written out); hostvars: the host's variables in it.
    become_password (apply --ask-become-pass) reaches Ansible in a 0600 file of the run's private directory
    (ANSIBLE_BECOME_PASSWORD_FILE), vault_password_file as ANSIBLE_VAULT_PASSWORD_FILE: neither on a command line."""
    suite = Path(__file__).resolve().parents[1] / "checks" / "test_host.py"
    with tempfile.TemporaryDirectory(prefix="provision-check-") as tmp:
        # A dict (a sandbox's) is written out; a file is used where it is, so that its group_vars/, host_vars/ and
        # an inventory plugin's file name still count.
        # The checks read the plan alone (as render_fleet writes plan.json): no playbook is rendered for them.
        plan_file = Path(tmp) / "plan.json"
        report = Path(tmp) / "report.json"  # what the checks say as data (test_host.py `unreachable`)
        plan_file.write_text(json.dumps(plan.model_dump(mode="json"), indent=2) + "\n")
        if isinstance(inventory, dict):
            inventory_file = Path(tmp) / "inventory.yml"
            write_yaml(inventory, inventory_file)
        else:
            inventory_file = Path(inventory).resolve()
        target = check_target(host, hostvars, become_password=bool(become_password), keys=keys)
        secret_env = {}
        if vault_password_file:
            secret_env["ANSIBLE_VAULT_PASSWORD_FILE"] = str(Path(vault_password_file).resolve())
        if become_password and target.through_ansible:
            fd = os.open(Path(tmp) / "become-password", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(become_password)
            secret_env["ANSIBLE_BECOME_PASSWORD_FILE"] = str(Path(tmp) / "become-password")
        if reading is not None:
            fd = os.open(Path(tmp) / "reading.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(reading, fh)
            secret_env["PROVISION_CHECK_READING"] = str(Path(tmp) / "reading.json")
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        env = os.environ | target.env | secret_env | {
            # Only testinfra's plugin (named below), not every pytest plugin installed beside provision: another
            # plugin could change how the checks run, and loading them all cost ~0.75 s of the fast re-apply.
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PROVISION_CHECK_PLAN": str(plan_file),
            "PROVISION_CHECK_REPORT": str(report),
            # testinfra runs ansible-inventory (and ansible): the ones installed with this interpreter.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "PROVISION_CHECK_SKIP_FRAMEWORKS": "1" if skip_frameworks else "0",
            # The plan's engine commands for its image (provision.image_hosts): "null" where it has none.
            "PROVISION_CHECK_IMAGE": json.dumps(check_commands(plan))}
        cmd = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", tmp, "-p", "testinfra.plugin",
               "-p", "no:cacheprovider",
               "-v", "--tb=line", "--no-header", "--hosts", target.spec,
               "--ansible-inventory", str(inventory_file), str(suite)]
        # In a session of its own (testinfra's ssh and ansible processes with it), stopped whole on Ctrl-C or SIGTERM
        # even from check_hosts' worker threads, and swept of anything it left when it ends (provision.procs).
        proc = procs.run(cmd, env=env)
        said = _read_report(report)
    secrets = _secrets(hostvars) + ([become_password] if become_password else [])
    stdout, stderr = _redact(proc.stdout, secrets), _redact(proc.stderr, secrets)
    if "unreachable" in said:  # every check would fail on it: one line, as the apply says it, and "cannot run"
        if echo:
            words = _redact(str(said["unreachable"]), secrets)
            echo(f"cannot reach {host}: {unreachable_message({'msg': words})}")
        return EXIT_EXTERNAL
    for line in stdout.splitlines():
        if echo and (" PASSED" in line or " FAILED" in line or " SKIPPED" in line or line.startswith(("E ", "/"))
                     or " passed" in line or " failed" in line):
            echo(line.split("::", 1)[-1] if "::" in line else line)
    if proc.returncode == 0:
        return EXIT_OK
    if proc.returncode == 1:
        return EXIT_FAILED
    if echo:
        echo(" | ".join((stderr or stdout).strip().splitlines()[-3:]))
    return EXIT_EXTERNAL
