"""`provision apply` and `provision check`: plan → render → ansible-runner → testinfra, against hosts or a sandbox.

The CLI parses arguments and prints; this module decides which hosts, renders, runs and checks.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision import procs
from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK, ProvisionError, UsageError
from provision.models import Plan


@dataclass(frozen=True)
class Hosts:
    """Where to run: an inventory (a file or a dict); sandbox names the sandbox it describes, if it is one."""

    inventory: Path | dict
    sandbox: str | None = None


def sandbox_release(plan: Plan) -> str:
    from provision.sandbox import DEBIAN_CODENAMES

    if plan.target.distribution != "debian" or plan.target.release not in DEBIAN_CODENAMES:
        runnable = ", ".join(f"debian-{r}" for r in sorted(DEBIAN_CODENAMES))
        raise UsageError(
            f"the sandbox runs {runnable} only, and this plan targets {plan.target.os_id}; "
            f"add --os debian-{max(DEBIAN_CODENAMES)} to try the profile in a sandbox"
        )
    if plan.target.arch != "x86_64":
        raise UsageError(f"the sandbox runs x86_64 only, and this plan targets {plan.target.arch}")
    return plan.target.release


def ensure_sandbox(plan: Plan, name: str, *, start: bool, log=None, progress=None) -> None:
    """Start the sandbox container `name` for this plan (apply), or require that it runs (check). Which hosts an
    inventory holds is decided in provision.fleet; this only looks after the container."""
    from provision import sandbox

    release = sandbox_release(plan)
    if sandbox.is_running(name):
        return
    if not start:
        raise UsageError(f"sandbox {name} is not running; run `provision apply ... --sandbox {name}` first")
    sandbox.start(name, release, log=log, progress=progress)


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


def check_target(host: str, hostvars: dict[str, Any], *, become_password: bool = False) -> CheckTarget:
    """Reach `host` the way the apply did: with the inventory's connection settings, and as root because the play
    says `become: true` (unless the inventory turns become off for the host).

    testinfra's ansible backend escalates with a plain `sudo` when the inventory sets ansible_become; when the
    inventory leaves it to the play, `?sudo=true` adds that sudo here (never both: that would be sudo inside sudo).
    A host whose variables hold a password, or whose connection testinfra cannot open, is checked through Ansible's
    own modules (`?force_ansible=true`), which answer sudo's prompt with the inventory's password without putting
    it on a command line; ANSIBLE_BECOME then carries the play's `become: true`. become_password: a password was
    given on the controller (apply --ask-become-pass): Ansible's modules too, with it in a file (run_check)."""
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
    return CheckTarget(f"ansible://{host}" + ("?sudo=true" if outer_sudo else ""), {}, through_ansible=False)


def _secrets(hostvars: dict[str, Any]) -> list[str]:
    """The literal passwords in a host's variables, to blank out of anything printed (templates and vaulted values
    are not secrets themselves)."""
    return [v for k, v in hostvars.items() if k in PASSWORD_VARS and isinstance(v, str) and len(v) >= 4
            and "{{" not in v]


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "********")
    return text


def run_check(plan: Plan, hosts: Hosts, host: str, *, hostvars: dict[str, Any] | None = None,
              skip_frameworks: bool = False, echo: Callable[[str], None] | None = None,
              become_password: str | None = None, vault_password_file: Path | None = None) -> int:
    """Run provision/checks/test_host.py with pytest-testinfra against one inventory host.
    Returns 0 green, 1 red, 3 cannot run.

    Every host, a sandbox included, is reached through the inventory with testinfra's ansible:// backend
    (connection, user, port, key and ssh arguments as the inventory gives them; see check_target for escalation).
    hostvars: the host's inventory variables when the caller has them (else they are read from the inventory).
    become_password (apply --ask-become-pass) reaches Ansible in a 0600 file of the run's private directory
    (ANSIBLE_BECOME_PASSWORD_FILE), vault_password_file as ANSIBLE_VAULT_PASSWORD_FILE: neither on a command line."""
    from provision.fleet import inventory_hostvars
    from provision.render.ansible import render_ansible

    suite = Path(__file__).resolve().parent / "checks" / "test_host.py"
    with tempfile.TemporaryDirectory(prefix="provision-check-") as tmp:
        # A dict (a sandbox's) is written out; a file is used where it is, so that its group_vars/, host_vars/ and
        # an inventory plugin's file name still count.
        files = render_ansible(plan, tmp, inventory=hosts.inventory if isinstance(hosts.inventory, dict) else None,
                               skip_frameworks=skip_frameworks)
        inventory = files.get("inventory")
        if inventory is None:
            assert not isinstance(hosts.inventory, dict)  # render_ansible wrote a dict out as files["inventory"]
            inventory = Path(hosts.inventory).resolve()
        if hostvars is None:
            hostvars = inventory_hostvars(hosts.inventory, vault_password_file=vault_password_file).get(host, {})
        target = check_target(host, hostvars, become_password=bool(become_password))
        secret_env = {}
        if vault_password_file:
            secret_env["ANSIBLE_VAULT_PASSWORD_FILE"] = str(Path(vault_password_file).resolve())
        if become_password and target.through_ansible:
            fd = os.open(Path(tmp) / "become-password", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(become_password)
            secret_env["ANSIBLE_BECOME_PASSWORD_FILE"] = str(Path(tmp) / "become-password")
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        env = os.environ | target.env | secret_env | {
            "PROVISION_CHECK_PLAN": str(files["plan"]),
            # testinfra runs ansible-inventory (and ansible): the ones installed with this interpreter.
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "PROVISION_CHECK_SKIP_FRAMEWORKS": "1" if skip_frameworks else "0"}
        cmd = [sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", tmp, "-p", "no:cacheprovider",
               "-v", "--tb=line", "--no-header", "--hosts", target.spec,
               "--ansible-inventory", str(inventory), str(suite)]
        # In a session of its own (testinfra's ssh and ansible processes with it), stopped whole on Ctrl-C or SIGTERM
        # even from check_hosts' worker threads, and swept of anything it left when it ends (provision.procs).
        proc = procs.run(cmd, env=env)
    secrets = _secrets(hostvars) + ([become_password] if become_password else [])
    stdout, stderr = _redact(proc.stdout, secrets), _redact(proc.stderr, secrets)
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


def ssh_command(host: str, hostvars: dict) -> list[str] | None:
    """The ssh command line that reaches `host` as the inventory does (address, port, user, key, options), None for a
    host Ansible does not reach over SSH."""
    import shlex

    if hostvars.get("ansible_connection", "ssh") not in ("ssh", "ansible.builtin.ssh", "paramiko"):
        return None
    cmd = ["ssh"]
    if hostvars.get("ansible_ssh_private_key_file"):
        cmd += ["-i", str(hostvars["ansible_ssh_private_key_file"])]
    if hostvars.get("ansible_port"):
        cmd += ["-p", str(hostvars["ansible_port"])]
    cmd += shlex.split(str(hostvars.get("ansible_ssh_common_args") or ""))
    user = hostvars.get("ansible_user")
    address = str(hostvars.get("ansible_host") or host)
    return [*cmd, f"{user}@{address}" if user else address]


def _version(found: dict[str, Any], names: list[str]) -> str | None:
    """The installed version of the first of `names` (package or wheel names, a trailing * matches a prefix)."""
    for name in names:
        for key, version in found.items():
            if version and (key == name or (name.endswith("*") and key.startswith(name[:-1]))):
                return str(version)
    return None


def installed_line(plan: Plan, installed: dict[str, Any] | None, *, skip_frameworks: bool = False) -> str:
    """What the host has now, as its apply read it back (host_record): the stack's components with their versions."""
    packages = (installed or {}).get("packages") or {}
    wheels = {k.lower().replace("_", "-"): v for k, v in ((installed or {}).get("wheels") or {}).items()}
    parts = []
    if plan.driver.install or packages:
        driver = _version(packages, [*plan.driver.userspace_packages, *plan.driver.packages])
        if driver:
            parts.append(f"NVIDIA driver {driver}" + (" (user space)" if set(packages) and not _version(
                packages, [p for p in plan.driver.packages if p not in plan.driver.userspace_packages]) else ""))
    cuda = _version(wheels, ["nvidia-cuda-runtime*"]) if plan.cuda.source == "pypi" else _version(
        packages, [p.split("=")[0] for p in plan.cuda.packages])
    parts.append(f"CUDA {cuda or plan.cuda.version}" + (f" ({plan.cuda.source})" if plan.cuda.source else ""))
    if plan.cudnn.version:
        cudnn = _version(wheels, ["nvidia-cudnn*"]) or _version(packages, [p.split("=")[0] for p in plan.cudnn.packages])
        parts.append(f"cuDNN {cudnn or plan.cudnn.version}")
    parts.append(f"Python {plan.python.version}")
    for label, name in (("NumPy", "numpy"), ("JupyterLab", "jupyterlab")):
        version = wheels.get(name)
        if version:
            parts.append(f"{label} {version}")
    for fw in plan.frameworks:
        if skip_frameworks:
            parts.append(f"{fw.package} skipped (--skip-frameworks)")
        else:
            parts.append(f"{fw.package} {wheels.get(fw.package.lower()) or 'not found'}")
    return ", ".join(parts)


@dataclass
class JupyterAccess:
    """How to reach one host's JupyterLab from this machine. url carries the token (print it once, to the user)."""

    host: str
    url: str | None = None  # http://127.0.0.1:<local port>/lab?token=...: opens JupyterLab in a browser here
    where: str = ""  # the URL without the token, or where the server answers when no tunnel could be made
    token_hint: str = ""  # how to read the token when it is not in url
    tunnel: Any = None  # provision.tunnel.Tunnel
    problem: str = ""  # why no tunnel was made


def jupyter_access(plan: Plan, hosts: list[str], hostvars: dict[str, dict], *, tunnels: bool = True) -> list[JupyterAccess]:
    """For each host: a tunnel from a free local port (a distinct one per host) to its Jupyter, and the URL that
    opens JupyterLab here with the token read over SSH (provision.tunnel). A host Ansible does not reach over SSH,
    or whose Jupyter does not bind the loopback, gets where its server answers and how to read the token."""
    import shlex

    from provision import tunnel as tunnels_mod

    found: list[JupyterAccess] = []
    if not plan.jupyter.enabled:
        return found
    j = plan.jupyter
    scheme = "https" if j.tls else "http"
    token_file = tunnels_mod.TOKEN_FILE
    taken: set[int] = set()
    for host in sorted(hosts):
        ssh = ssh_command(host, hostvars.get(host, {}))
        access = JupyterAccess(host)
        if not j.bind.startswith("127."):
            access.where = f"{scheme}://{host}:{j.port}/lab"
            access.token_hint = f"{j.auth} in /var/lib/provision/jupyter/, readable by {plan.user} only"
        elif ssh is None:
            access.where = f"{scheme}://127.0.0.1:{j.port}/lab on the host itself"
            access.token_hint = f"token in {token_file} (readable by {plan.user} and root)"
        else:
            access.token_hint = shlex.join([*ssh, "sudo", "-u", plan.user, "cat", token_file])
            manual = shlex.join([ssh[0], "-N", "-L", f"{j.port}:127.0.0.1:{j.port}", *ssh[1:]])
            access.where = f"{scheme}://127.0.0.1:{j.port}/lab after `{manual}`"
            if tunnels:
                try:
                    t = tunnels_mod.open_tunnel(host, ssh, j.port, taken=taken)
                except ProvisionError as exc:
                    access.problem = exc.lines()[0]
                else:
                    taken.add(t.local_port)
                    access.tunnel = t
                    access.where = f"{scheme}://127.0.0.1:{t.local_port}/lab"
                    token = tunnels_mod.read_token(ssh, plan.user) if j.auth == "token" else None
                    if token:
                        access.url = f"{access.where}?token={token}"
        found.append(access)
    return found


def host_summaries(plan: Plan, hosts: list[str], hostvars: dict[str, dict]) -> list[str]:
    """One line per host on how to reach its Jupyter, without starting anything (a dry run's or a failed run's
    hint): the exact tunnel command and how to read the token; never the token itself."""
    lines = []
    for a in jupyter_access(plan, hosts, hostvars, tunnels=False):
        lines.append(f"{a.host}: jupyter: {a.where}, token: {a.token_hint}")
    return lines
