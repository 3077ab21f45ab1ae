"""Run a rendered playbook with ansible-runner: one line per task result while it runs, a per-host summary after.

Exit codes (provision.errors): 0 every host ok, 1 a host failed, 3 a host was unreachable or Ansible could not run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import procs
from provision.errors import EXIT_EXTERNAL, EXIT_FAILED, EXIT_OK, RunnerError, printable
from provision.resources import COLLECTION, collections_dir, share_dir

_RESULT_EVENTS = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}


@dataclass
class HostStats:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0


@dataclass
class RunResult:
    status: str  # ansible-runner's: successful | failed | timeout | canceled
    rc: int
    seconds: float
    hosts: dict[str, HostStats] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)  # "host: task: msg", one per failed task
    host_failures: dict[str, tuple[str, str]] = field(default_factory=dict)  # host -> (first failed task, msg)
    # Seconds each task took, summed over hosts (from the events' durations): where a run's time goes (bench/).
    task_seconds: dict[str, float] = field(default_factory=dict)
    # --check: what each host's roles said they could not predict (a prerequisite an earlier step installs).
    unpredicted: dict[str, list[str]] = field(default_factory=dict)
    # The path each host took (roles/preflight): "fast (fingerprint matches)" or "full (why)".
    paths: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if any(h.unreachable for h in self.hosts.values()) or not self.hosts:
            return EXIT_EXTERNAL
        if any(h.failed for h in self.hosts.values()) or self.rc != 0:
            return EXIT_FAILED
        return EXIT_OK

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())


def _one_line(text: Any) -> str:
    """A task's message as one printable line: what a host's commands print (the account's interpreter, a package's
    scripts) can hold escape sequences, which never reach the operator's terminal raw."""
    return printable(" ".join(str(text).split()))[:300]


# What a failed task's output means, for the one line a person reads first. Order: most specific first.
_CAUSES = (
    ("No space left on device", "the disk is full on the host"),
    ("Read-only file system", "a file system is read-only on the host"),
    ("Temporary failure in name resolution", "the host cannot resolve a package source's name"),
    ("Failed to establish a new connection", "a package source is unreachable from the host"),
    ("Connection refused", "a package source refused the connection"),
    ("Could not resolve", "the host cannot resolve a package source's name"),
    ("Failed to fetch", "a package source is unreachable from the host"),
    ("Failed to update apt cache", "apt could not read its package sources"),
    ("(from versions: none)", "the package index the host uses listed no versions at all (unreachable, or a wrong "
                              "index URL)"),
    ("No matching distribution found", "a planned version is not on the package index the host uses"),
    # uv's words for the same (provision_wheels): a name the index does not list, a version it does not have.
    ("was not found in the package registry", "a planned version is not on the package index the host uses"),
    ("there is no version of", "a planned version is not on the package index the host uses"),
    ("Could not get lock", "another process holds the apt/dpkg lock"),
    ("Could not import the python3-apt module", "python3-apt is missing on the host and Ansible's apt module could not "
                                                "install it (run `apt-get update && apt-get install python3-apt` there)"),
    ("No package matching", "a planned package is not in the host's apt lists (a component such as non-free is not "
                            "enabled, or the planned version has left the archive)"),
    ("has no installation candidate", "a planned package is not in the host's apt lists (a component such as non-free "
                                      "is not enabled, or the planned version has left the archive)"),
    ("no enabled apt entry for Debian's own archive", "the host has no apt entry for Debian's archive to enable "
                                                      "components on"),
)


# A role's own failure names the cause and what to do itself: its rescue step ("cuda: task 'x' failed on h: <cause>
# <module's words>") and its asserts ("nvidia_driver: h boots with Secure Boot on ... Enrol the key: `sudo mokutil
# --import ...`"). Kept whole, up to ROLE_MESSAGE_MAX characters: the advice is at the end.
_ROLE_FAILURE = re.compile(r"^(?:" + "|".join(sorted(
    p.name for p in share_dir("roles").iterdir() if (p / "tasks" / "main.yml").is_file())) + r"): ")
ROLE_MESSAGE_MAX = 1200


_DPKG_ERROR = re.compile(r"dpkg: error processing (?:package|archive) (\S+) \(([^)\n]*)\):[ \t]*\n[ \t]*([^\n]+)")


def dpkg_script_error(text: str) -> str:
    """When apt's "E: Sub-process /usr/bin/dpkg returned an error code" hides a package script's failure: the
    package, the step, dpkg's reason and the last line the script printed before it; empty when none is found."""
    match = _DPKG_ERROR.search(text)
    if not match:
        return ""
    package, step, reason = match.group(1), match.group(2), match.group(3).strip()
    before = [ln.strip() for ln in text[:match.start()].splitlines() if ln.strip()]
    said = before[-1] if before and not before[-1].startswith(("Setting up ", "Preparing to ", "Unpacking ")) else ""
    line = (f"a package script failed: {package} ({step}): {reason}" + (f"; it said: {said.rstrip('.')}" if said else "")
            + ". Run `sudo dpkg --configure -a` on the host to see it again, fix what it names, then apply again")
    return printable(" ".join(line.split()))[:ROLE_MESSAGE_MAX]


def host_failure(first: tuple[str, str] | None, task: str, msg: str) -> tuple[str, str]:
    """The (task, message) a host's summary line names: its first failure, unless a role's rescue said the cause in
    its own words after it (a failure after another means the first was rescued); that line is the one a person
    reads (python_env's full disk: the host, the file system, the room there and what the wheels take)."""
    if first is None or (_ROLE_FAILURE.match(msg) and not _ROLE_FAILURE.match(first[1])):
        return task, msg
    return first


def failure_message(res: dict[str, Any]) -> str:
    """One line for a failed task: the cause when the output shows a known one, then the module's own words."""
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items:  # a loop: the first failed item says what went wrong
        return failure_message(items[0])
    if _ROLE_FAILURE.match(str(res.get("msg") or "")):
        # Kept whole: cutting it around a needle below would cut off the role's advice.
        return printable(" ".join(str(res["msg"]).split()))[:ROLE_MESSAGE_MAX]
    text = " ".join(str(res.get(k) or "") for k in ("msg", "stderr", "stdout", "module_stderr", "reason"))
    own = _one_line(res.get("msg") or res.get("stderr") or res.get("module_stderr") or res.get("reason") or "")
    if "returned an error code" in text:
        script = dpkg_script_error("\n".join(str(res.get(k) or "") for k in ("stdout", "msg", "stderr")))
        if script:
            return script
    for needle, cause in _CAUSES:
        if needle in text:
            # The module's message often starts with pages of progress; keep the part that names the error.
            at = own.find(needle)
            detail = own[max(0, at - 120):at + 180] if at > 120 else own[:300]
            return f"{cause}: {detail}"
    return own


# Why a host could not be reached (SSH's and Mitogen's words), and what to do. Most specific first.
_UNREACHABLE_CAUSES = (
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


def host_key_refusal(text: str) -> str | None:
    """The cause line for an SSH host key that ssh (or Mitogen) refused in this output, None when it says no such
    thing."""
    for needle, cause in _UNREACHABLE_CAUSES[:3]:
        if needle in text:
            return cause
    return None


# A host that disappears mid-task (powered off, its network gone, `docker kill`) is unreachable, but Mitogen reports
# some of those losses as a failed task, depending on the moment: while it connects, or in its own service thread
# after the stream died (measured 2026-11-23, `docker kill` of a stock host at 3, 5, 6 and 8 s into a play: two of
# four came back "failed"). These are its messages for a lost connection, never a module's.
_CONNECTION_LOST = (
    "Channel was disconnected while connection attempt was in progress",
    "Mitogen was disconnected from the remote environment",
    "the respondent Context has disconnected",
    "EOF on stream",
)
_MITOGEN_STREAM_GONE = "object has no attribute 'protocol'"  # mitogen/service.py, on a stream that has died


def connection_lost(res: dict[str, Any]) -> bool:
    """Whether a failed task's result says the connection to its host was lost rather than the task failing."""
    msg = str(res.get("msg") or "")
    if any(needle in msg for needle in _CONNECTION_LOST):
        return True
    return _MITOGEN_STREAM_GONE in msg and "mitogen/" in msg


def _is_become_failure(res: dict[str, Any]) -> bool:
    text = str(res.get("msg") or "") + str(res.get("module_stderr") or "")
    return "sudo password" in text or "privilege escalation" in text.lower()


def unreachable_message(res: dict[str, Any]) -> str:
    text = " ".join(str(res.get(k) or "") for k in ("msg", "stderr", "stdout", "module_stderr"))
    for needle, cause in _UNREACHABLE_CAUSES:
        if needle in text:
            return cause
    return _one_line(res.get("msg") or text)


# The roles' debug messages in check mode that name what a dry run cannot predict (roles/README.md).
UNPREDICTABLE = "provision --check cannot predict: "


def unpredicted_line(event: dict[str, Any]) -> tuple[str, str] | None:
    """(host, what) for a role's 'cannot predict' message in check mode, None for any other event."""
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data", {})
    msg = (data.get("res") or {}).get("msg")
    if isinstance(msg, str) and msg.startswith(UNPREDICTABLE):
        return data.get("host", "?"), msg.removeprefix(UNPREDICTABLE)
    return None


PATH_PREFIX = "path: "  # roles/preflight says which path each host takes: "path: fast (...)" or "path: full (...)"


def path_line(event: dict[str, Any]) -> tuple[str, str] | None:
    """(host, "fast (...)" or "full (...)") for the preflight's line on the path a host takes, None for any other
    event."""
    if event.get("event") != "runner_on_ok":
        return None
    data = event.get("event_data", {})
    msg = (data.get("res") or {}).get("msg")
    if isinstance(msg, str) and msg.startswith(PATH_PREFIX) and str(data.get("role", "")).endswith("preflight"):
        return data.get("host", "?"), msg.removeprefix(PATH_PREFIX)
    return None


def task_name(data: dict[str, Any]) -> str:
    """A task's name as a person reads it: "cuda : Install ...", without the collection's prefix that Ansible puts
    before the name of a role run as provision.gpu.cuda."""
    return str(data.get("task", "?")).removeprefix(f"{COLLECTION}.")


def task_line(event: dict[str, Any]) -> tuple[str, str, str, str] | None:
    """(host, task, state, message) for a task-result event, None for any other event."""
    state = _RESULT_EVENTS.get(event.get("event", ""))
    if state is None:
        return None
    data = event.get("event_data", {})
    res = data.get("res") or {}
    if state == "ok" and res.get("changed"):
        state = "changed"
    msg = ""
    if state == "failed" and connection_lost(res):
        return data.get("host", "?"), task_name(data), "unreachable", (
            "the connection to the host was lost during this step (" + _one_line(res.get("msg"))[:120] + ")")
    if state == "failed":
        if data.get("ignore_errors"):
            state = "ignored"
        # sudo's refusals arrive as failed tasks ("Missing sudo password"); they mean the same as for a connection.
        msg = unreachable_message(res) if _is_become_failure(res) else failure_message(res)
    elif state == "unreachable":
        msg = unreachable_message(res)
    return data.get("host", "?"), task_name(data), state, msg


def collections_path() -> str:
    """ANSIBLE_COLLECTIONS_PATH for a run: the shipped collection provision.gpu first, then the account's own
    (ANSIBLE_COLLECTIONS_PATH when set, else Ansible's default places); a provision.gpu installed there of another
    version is not the one run."""
    others = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(
        [str(Path("~/.ansible/collections").expanduser()), "/usr/share/ansible/collections"])
    return os.pathsep.join([str(collections_dir()), others])


# --- host key checking, as the user's Ansible has it -------------------------------------------------------------
# Ansible checks a host's SSH key against known_hosts unless host_key_checking is off (the host's variables, then
# ANSIBLE_HOST_KEY_CHECKING, then ansible.cfg) or the host's ssh arguments say StrictHostKeyChecking=no, which ssh
# honours because Ansible's ssh connection puts no such option before them. Mitogen's connection (strategy_env) puts
# `StrictHostKeyChecking yes` before them, so provision tells it the host's checking is off, and says so; and an
# inventory's StrictHostKeyChecking=accept-new, which that option would shadow, provision honours itself before the
# play (accept_new_host_keys); =ask it cannot, and says so (host_key_warnings).
HOST_KEY_VARS = ("ansible_ssh_host_key_checking", "ansible_host_key_checking")  # Ansible's order of precedence
SSH_ARG_VARS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")  # their order on the line
# What the playbook's connections (Mitogen's check_host_keys=ignore) do when checking is off; provision's own ssh
# (the tunnel, the token) adds these after the inventory's arguments, which win where they say otherwise.
NO_HOST_KEY_CHECKING = ("-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                        "-o", "GlobalKnownHostsFile=/dev/null")


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
    for var in SSH_ARG_VARS:
        strict = ssh_option(str(hostvars.get(var) or ""), "StrictHostKeyChecking")
        if strict is not None:
            return f"{var}: StrictHostKeyChecking={strict}" if strict.lower() in ("no", "off") else None
    return None


def ssh_command(host: str, hostvars: dict) -> list[str] | None:
    """The ssh command line that reaches `host` as the inventory does (address, port, user, key, options), None for a
    host Ansible does not reach over SSH."""
    if hostvars.get("ansible_connection", "ssh") not in ("ssh", "ansible.builtin.ssh", "paramiko"):
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


def strict_host_key_option(hostvars: dict[str, Any]) -> tuple[str, str] | None:
    """The host's StrictHostKeyChecking as ssh takes it from the inventory's ssh arguments (the first one given), and
    the variable that says it; None when they do not say."""
    for var in SSH_ARG_VARS:
        strict = ssh_option(str(hostvars.get(var) or ""), "StrictHostKeyChecking")
        if strict is not None:
            return var, strict
    return None


def mitogen_connections() -> bool:
    """The playbook's connections are Mitogen's (strategy_env)."""
    return strategy_env().get("ANSIBLE_STRATEGY", "").startswith("mitogen")


def mitogen_host_key_mode(hostvars: dict[str, Any]) -> str | None:
    """What provision does about a host's StrictHostKeyChecking=accept-new or =ask while checking is on, which
    Mitogen's ssh overrides with its own `-o StrictHostKeyChecking yes` placed before the inventory's arguments
    (mitogen/ssh.py; ansible_mitogen gives it only 'enforce' or 'ignore'): 'accept-new' is honoured by
    accept_new_host_keys before the play; 'ask' cannot be (nobody answers ssh's question during a run), so the key is
    checked as with =yes and host_key_warnings says so. None for every other host, and when the play does not run
    under Mitogen (Ansible's own ssh connection puts no such option first and honours the setting itself)."""
    found = strict_host_key_option(hostvars)
    if found is None or host_key_checking_off(hostvars) or found[1].lower() not in ("accept-new", "ask"):
        return None
    if str(hostvars.get("ansible_connection") or "ssh") not in ("ssh", "ansible.builtin.ssh", "smart"):
        return None
    return found[1].lower() if mitogen_connections() else None


def host_key_warnings(hostvars: dict[str, dict[str, Any]], *, mitogen: bool = True) -> list[str]:
    """One warning line per host whose SSH key the inventory (or the user's Ansible configuration) says not to
    check, naming the setting: provision checks keys unless told otherwise, and keeps what the user said. One too for
    a host whose ssh arguments say StrictHostKeyChecking=ask, which a playbook run cannot honour
    (mitogen_host_key_mode); mitogen=False for connections that are not the playbook's (`provision check`)."""
    lines = []
    for host in sorted(hostvars):
        why = host_key_checking_off(hostvars[host])
        if why:
            lines.append(f"warning: {host}: {why}: its SSH host key is not checked, as this setting asks (provision "
                         "checks it otherwise and refuses an unknown or changed key)")
        elif mitogen and mitogen_host_key_mode(hostvars[host]) == "ask":
            var, value = strict_host_key_option(hostvars[host]) or ("", "")
            lines.append(f"warning: {host}: {var}: StrictHostKeyChecking={value}: nobody can answer ssh's question "
                         "during a run, so its SSH host key is checked as with StrictHostKeyChecking=yes (an unknown "
                         "or changed key is refused; connect once with ssh to accept a new one)")
    return lines


def accept_new_command(host: str, hostvars: dict[str, Any]) -> list[str] | None:
    """The ssh command accept_new_host_keys runs for a host whose inventory says StrictHostKeyChecking=accept-new
    while the play runs under Mitogen (mitogen_host_key_mode); None for any other host."""
    if mitogen_host_key_mode(hostvars) != "accept-new":
        return None
    cmd = ssh_command(host, hostvars)
    if not cmd:
        return None
    # After the inventory's arguments (ssh takes the first value given): no prompt, no hang.
    return [*cmd[:-1], "-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "LogLevel=ERROR", cmd[-1], "true"]


def accept_new_host_keys(hostvars: dict[str, dict[str, Any]], *, timeout: float = 30.0) -> list[str]:
    """Honour StrictHostKeyChecking=accept-new for the hosts whose ssh arguments say it (mitogen_host_key_mode): one
    ssh connection to each, with the inventory's own arguments first, records a key it does not know in the
    known_hosts those arguments name, as the inventory asks, and refuses nothing itself: a changed key stays
    refused, by Mitogen's connection after it, with the run's usual line. Returns the hosts it connected to."""
    commands = {host: cmd for host, hv in sorted(hostvars.items()) if (cmd := accept_new_command(host, hv))}

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


def write_host_key_vars(project_dir: str | Path, hostvars: dict[str, dict[str, Any]]) -> None:
    """host_vars/HOST.yml beside the playbook (above the inventory's variables) with ansible_host_key_checking off
    for each host whose checking is off: the playbook's Mitogen connections then leave the key unchecked, as
    Ansible's own ssh connection would with these settings."""
    for host, hv in hostvars.items():
        if host_key_checking_off(hv) and "/" not in host and host not in (".", ".."):
            path = Path(project_dir) / "host_vars" / f"{host}.yml"
            path.parent.mkdir(exist_ok=True)
            path.write_text("# Written by provision: the inventory turns host key checking off for this host.\n"
                            "ansible_host_key_checking: false\n")


def strategy_env() -> dict[str, str]:
    """Run plays with Mitogen's free strategy when it is installed (a dependency of provision): it keeps one Python
    interpreter per host for the whole play instead of starting one per task, and lets each host go at its own
    pace. On 8 container hosts a converged re-apply of every role took 163 s with it, 181 s with mitogen_linear and
    440 s with Ansible's linear strategy (docs/fleet.md). On the fast path (about 20 tasks) Ansible's own ssh
    connection with pipelining is 4-6 % faster (1 host: 7.4 s against 7.8 s; 8 hosts: 35.0 s against 37.1 s), but a
    host's path is decided on the host, after the strategy is chosen, and a full path under it took 23.1 s against
    15.1 s on one host: Mitogen for every run size (docs/fleet.md). PROVISION_ANSIBLE_STRATEGY=linear (or free)
    turns Mitogen off."""
    wanted = os.environ.get("PROVISION_ANSIBLE_STRATEGY", "mitogen_free")
    if not wanted.startswith("mitogen"):
        return {"ANSIBLE_STRATEGY": wanted}
    try:
        import ansible_mitogen
    except ImportError:
        return {}
    plugins = Path(ansible_mitogen.__file__).resolve().parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(plugins), "ANSIBLE_STRATEGY": wanted}


# Seconds ansible-playbook gets to stop on SIGINT (it ends its tasks' workers and prints its recap), then after
# SIGTERM to every process of the run, before ansible-runner kills its process group and procs.stop what is left.
POLITE_SECONDS = 10.0
TERM_SECONDS = 5.0


class _Cancel:
    """ansible-runner's cancel_callback (called about once a second): once Ctrl-C or SIGTERM asked, SIGINT to
    ansible-playbook's process group (what Ctrl-C would do in its terminal); POLITE_SECONDS later SIGTERM to every
    process of the run; TERM_SECONDS later True, and ansible-runner SIGKILLs the process group."""

    def __init__(self, token: str, asked: Callable[[], int | None]) -> None:
        self.token, self.asked = token, asked
        self.started: float | None = None
        self.termed: float | None = None

    def __call__(self) -> bool:
        if self.asked() is None:
            return False
        now = time.monotonic()
        if self.started is None:
            self.started = now
            me = os.getpid()
            for pid in procs.find(tokens=[self.token]):
                if procs.parent(pid) == me:  # ansible-playbook, the leader of its session and process group
                    with contextlib.suppress(OSError):
                        os.killpg(pid, signal.SIGINT)
            return False
        if self.termed is None:
            if now - self.started < POLITE_SECONDS:
                return False
            self.termed = now
            for pid in procs.find(tokens=[self.token]):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM)
            return False
        return now - self.termed >= TERM_SECONDS


def run_playbook(
    project_dir: str | Path,
    inventory: str | Path,
    *,
    limit: str | None = None,
    check: bool = False,
    diff: bool = False,
    tags: str | None = None,
    forks: int | None = None,
    on_task: Callable[[str, str, str, str], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    on_path: Callable[[str, str], None] | None = None,
    become_password: str | None = None,
    vault_password_file: str | Path | None = None,
    jupyter_password: str | None = None,
) -> RunResult:
    """Run project_dir/site.yml against inventory; call on_task(host, task, state, msg) for each task result
    and on_start(task) when a task starts (the CLI shows it while it runs: apt and pip tasks take minutes);
    on_path(host, path) when the preflight says which path a host takes (provision.apply starts the checks early
    when every host takes the fast one)."""
    try:  # here, not at the top: a missing ansible-runner is this one line (exit 3), not an import traceback
        import ansible_runner
    except ImportError:
        raise RunnerError("ansible-runner is not installed (pip install ansible-runner)") from None
    args = ["--check"] if check else []
    args += ["--diff"] if diff else []
    if vault_password_file:
        args += ["--vault-password-file", shlex.quote(str(Path(vault_password_file).resolve()))]
    cmdline = " ".join(args)

    failures: list[str] = []
    host_failures: dict[str, tuple[str, str]] = {}
    lost: set[str] = set()  # hosts whose "failed" task was a lost connection (connection_lost)

    final: dict[str, Any] = {}
    task_seconds: dict[str, float] = {}
    unpredicted: dict[str, list[str]] = {}
    paths: dict[str, str] = {}

    def handler(event: dict[str, Any]) -> bool:
        if event.get("event") == "playbook_on_stats":
            final.update(event.get("event_data", {}))
        if on_start and event.get("event") == "playbook_on_task_start":
            on_start(task_name(event.get("event_data", {})))
        said = unpredicted_line(event)
        if said is not None:
            unpredicted.setdefault(said[0], []).append(said[1])
        took = path_line(event)
        if took is not None:
            paths[took[0]] = took[1]
            if on_path:
                on_path(*took)
        line = task_line(event)
        if line is not None:
            host, task, state, msg = line
            duration = event.get("event_data", {}).get("duration")
            if isinstance(duration, (int, float)):
                task_seconds[task] = task_seconds.get(task, 0.0) + duration
            if state in ("failed", "unreachable"):
                failures.append(f"{host}: {task}: {msg}")
                host_failures[host] = host_failure(host_failures.get(host), task, msg)
                if state == "unreachable" and event.get("event") == "runner_on_failed":
                    lost.add(host)
            if on_task:
                on_task(host, task, state, msg)
        return False  # do not keep the event files: they hold every task's full result

    # Ctrl-C and SIGTERM stop the run politely, then firmly (_Cancel), and raise here once it has ended: ansible-playbook
    # runs in a terminal session of its own (pexpect), which a terminal's SIGINT does not reach.
    asked: list[int] = []
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, _frame: asked.append(signum))
    token = procs.new_token()  # every process of this run carries it (procs.TAG_VAR), in whatever session it ends up
    cancel = _Cancel(token, lambda: asked[0] if asked else procs.cancel_requested())

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="provision-runner-") as private:
        env_dir = Path(private) / "env"
        env_dir.mkdir(mode=0o700)
        # ansible-runner reads its cancel_callback once per pexpect_timeout (5 s by default): 1 s answers Ctrl-C sooner.
        (env_dir / "settings").write_text(json.dumps({"pexpect_timeout": 1}))
        secrets = ({"ansible_become_password": become_password} if become_password else {}) | (
            {"jupyter_password": jupyter_password} if jupyter_password else {})
        if secrets:
            # A file in the run's private directory (0600, removed with it) that ansible-runner hands over as
            # `-e @env/extravars`: the passwords are never on a command line, in the environment or in an event.
            # (ansible-runner's own `extravars=` argument would put them on ansible-playbook's command line.)
            fd = os.open(env_dir / "extravars", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                json.dump(secrets, fh)
        # SSH multiplexing masters (ControlPersist, Ansible's ssh connection) in this run's directory, not the
        # account's shared ~/.ansible/cp: no other run reuses them, and they are found and stopped when it ends.
        # A socket's path has room for about 104 bytes (macOS; 108 on Linux) and Ansible adds a 40-character hash:
        # a long TMPDIR gets a short directory in /tmp instead (0700, removed with the run).
        control_dir = Path(private) / "cp"
        if len(str(control_dir)) > 60 and os.path.isdir("/tmp"):
            control_dir = Path(tempfile.mkdtemp(prefix="provision-cp-", dir="/tmp"))
        else:
            control_dir.mkdir(mode=0o700)
        try:
            runner = ansible_runner.run(
                private_data_dir=private,
                project_dir=str(Path(project_dir).resolve()),
                playbook="site.yml",
                inventory=str(Path(inventory).resolve()),
                limit=limit,
                tags=tags,
                cmdline=cmdline or None,
                forks=forks,
                envvars={"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
                         # One connection round trip per task instead of four (needs no `requiretty` in sudoers,
                         # which no supported OS sets). Measured with bench/fleet.py (docs/fleet.md).
                         "ANSIBLE_PIPELINING": "1",
                         # ansible-runner turns host key checking off unless told otherwise; a host whose SSH key
                         # is unknown or changed must be refused unless the user's Ansible says otherwise.
                         # The user's setting (configured_host_key_checking); per host, the inventory's variables
                         # win over it, as they do in ansible-playbook (write_host_key_vars).
                         "ANSIBLE_HOST_KEY_CHECKING": str(configured_host_key_checking()[0]),
                         # Ansible's (and Mitogen's) 10 s connect timeout fails hosts whose sshd is merely slow: a
                         # busy controller starting many connections, a fleet on a slow link. Seen at load 12 on 2
                         # cores: "the host did not answer on its SSH port" for a healthy host.
                         "ANSIBLE_TIMEOUT": os.environ.get("ANSIBLE_TIMEOUT", "30"),
                         # ansible-playbook from this interpreter's environment, activated or not.
                         "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
                         # The roles (site.yml names them provision.gpu.<role>) and provision's own modules, as
                         # the collection provision.gpu shipped with this installation, found before any other copy.
                         "ANSIBLE_COLLECTIONS_PATH": collections_path(),
                         "ANSIBLE_SSH_CONTROL_PATH_DIR": str(control_dir),
                         procs.TAG_VAR: procs.tagged_env(token)[procs.TAG_VAR],
                         **strategy_env()},
                event_handler=handler,
                cancel_callback=cancel,
                quiet=True,
            )
        except Exception as exc:  # ansible-runner raises plain exceptions for a bad setup
            raise RunnerError(f"ansible-runner could not start the playbook: {_one_line(exc)}") from None
        finally:
            # Whatever the run left (ansible-playbook after an exception here, workers, ssh masters that daemonized
            # out of its session): SIGTERM, then SIGKILL. A second Ctrl-C meanwhile is only noted.
            try:
                procs.stop(lambda: procs.find(tokens=[token], markers=[private, str(control_dir)]))
            finally:
                shutil.rmtree(control_dir, ignore_errors=True)
                for sig, old in previous.items():
                    signal.signal(sig, old)
        if asked or cancel.started is not None:
            raise procs.interruption(asked[0] if asked else procs.cancel_requested())
        stats = final or runner.stats or {}
        if not stats and runner.rc != 0:
            tail = [ln for ln in runner.stdout.read().splitlines() if ln.strip()][-3:]
            raise RunnerError(f"ansible-playbook could not run (exit {runner.rc}): " + " | ".join(_one_line(t) for t in tail))
    hosts: dict[str, HostStats] = {}
    for key, attr in (("ok", "ok"), ("changed", "changed"), ("failures", "failed"), ("dark", "unreachable"),
                      ("skipped", "skipped")):
        for host, count in (stats.get(key) or {}).items():
            setattr(hosts.setdefault(host, HostStats()), attr, count)
    for host in lost:  # Ansible counted the lost connection as a failure
        h = hosts.setdefault(host, HostStats())
        h.failed, h.unreachable = max(0, h.failed - 1), h.unreachable + 1
    return RunResult(status=runner.status, rc=runner.rc, seconds=time.monotonic() - started, hosts=hosts,
                     failures=failures, host_failures=host_failures, task_seconds=task_seconds,
                     unpredicted=unpredicted, paths=paths)
