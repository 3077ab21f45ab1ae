"""The ansible-runner adapter: run a rendered folder's site.yml and hand back its raw events and recap.

What it owns: the run's environment (the shipped collection first on ANSIBLE_COLLECTIONS_PATH, Mitogen's strategy,
pipelining, the SSH control sockets in the run's own directory), secrets passed in a 0600 file, and cancellation
(Ctrl-C and SIGTERM stop the run politely, then firmly). What the events mean is stage `events`'
(provision.pipeline.events); the hosts' key policy is provision.ssh's. A run that cannot start is RunnerError (exit 3).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision import procs
from provision.errors import RunnerError, printable
from provision.request import ApplyRequest
from provision.resources import collections_dir


@dataclass
class RunResult:
    """What ansible-runner reports of a run: its status and exit code, how long it took, and Ansible's recap
    (playbook_on_stats: {"ok": {host: n}, "changed": ..., "failures": ..., "dark": ..., "skipped": ...}). What the
    events mean is stage `events`' (provision.pipeline.events)."""

    status: str  # ansible-runner's: successful | failed | timeout | canceled
    rc: int
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)


def _one_line(text: Any) -> str:
    return printable(" ".join(str(text).split()))[:300]


def collections_path() -> str:
    """ANSIBLE_COLLECTIONS_PATH for a run: the shipped collection provision.gpu first, then the account's own
    (ANSIBLE_COLLECTIONS_PATH when set, else Ansible's default places); a provision.gpu installed there of another
    version is not the one run."""
    others = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.pathsep.join(
        [str(Path("~/.ansible/collections").expanduser()), "/usr/share/ansible/collections"])
    return os.pathsep.join([str(collections_dir()), others])


# Mitogen's strategies that provision runs warmed (provision/runners/strategy/provision_<name>.py).
WARMED = ("mitogen_free", "mitogen_linear")


def strategy_env() -> dict[str, str]:
    """Run plays with Mitogen's free strategy when it is installed (a dependency of provision): it keeps one Python
    interpreter per host for the whole play instead of starting one per task, and lets each host go at its own
    pace. On 8 container hosts a converged re-apply of every role took 163 s with it, 181 s with mitogen_linear and
    440 s with Ansible's linear strategy (docs/fleet.md). On the fast path (about 20 tasks) Ansible's own ssh
    connection with pipelining is 4-6 % faster (1 host: 7.4 s against 7.8 s; 8 hosts: 35.0 s against 37.1 s), but a
    host's path is decided on the host, after the strategy is chosen, and a full path under it took 23.1 s against
    15.1 s on one host: Mitogen for every run size (docs/fleet.md). PROVISION_ANSIBLE_STRATEGY=linear (or free)
    turns Mitogen off. Mitogen's free and linear strategies run as provision's (provision/runners/strategy/:
    provision_mitogen_free and provision_mitogen_linear), which list the collection directories and parse the play's
    vars file once per play instead of once per task (provision.runners.mitogen_warm); PROVISION_MITOGEN_WARM=0
    runs Mitogen's own."""
    wanted = os.environ.get("PROVISION_ANSIBLE_STRATEGY", "mitogen_free")
    if not wanted.startswith("mitogen"):
        return {"ANSIBLE_STRATEGY": wanted}
    try:
        import ansible_mitogen
    except ImportError:
        return {}
    plugins = str(Path(ansible_mitogen.__file__).resolve().parent / "plugins" / "strategy")
    if wanted in WARMED and os.environ.get("PROVISION_MITOGEN_WARM", "1") != "0":
        ours = str(Path(__file__).resolve().parent / "strategy")
        return {"ANSIBLE_STRATEGY_PLUGINS": os.pathsep.join([ours, plugins]), "ANSIBLE_STRATEGY": f"provision_{wanted}"}
    return {"ANSIBLE_STRATEGY_PLUGINS": plugins, "ANSIBLE_STRATEGY": wanted}


def mitogen_connections() -> bool:
    """The playbook's connections are Mitogen's (strategy_env): they put their own StrictHostKeyChecking first
    (provision.ssh)."""
    return "mitogen" in strategy_env().get("ANSIBLE_STRATEGY", "")


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


def _cmdline(check: bool, diff: bool, vault_password_file: str | Path | None) -> str:
    """ansible-playbook's extra arguments for a run: --check, --diff and the vault password file."""
    args = ["--check"] if check else []
    args += ["--diff"] if diff else []
    if vault_password_file:
        args += ["--vault-password-file", shlex.quote(str(Path(vault_password_file).resolve()))]
    return " ".join(args)


def _write_private_env(env_dir: Path, become_password: str | None, jupyter_password: str | None) -> None:
    """Fill the run's private env/ directory: ansible-runner's settings and the secrets' extravars file."""
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


def _control_dir(private: str) -> Path:
    """The directory for the run's SSH multiplexing sockets (made here, 0700)."""
    # SSH multiplexing masters (ControlPersist, Ansible's ssh connection) in this run's directory, not the
    # account's shared ~/.ansible/cp: no other run reuses them, and they are found and stopped when it ends.
    # A socket's path has room for about 104 bytes (macOS; 108 on Linux) and Ansible adds a 40-character hash:
    # a long TMPDIR gets a short directory in /tmp instead (0700, removed with the run).
    control_dir = Path(private) / "cp"
    if len(str(control_dir)) > 60 and os.path.isdir("/tmp"):
        control_dir = Path(tempfile.mkdtemp(prefix="provision-cp-", dir="/tmp"))
    else:
        control_dir.mkdir(mode=0o700)
    return control_dir


def _run_env(host_key_checking: bool, control_dir: Path, token: str) -> dict[str, str]:
    """The environment variables ansible-playbook runs with."""
    return {"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
            # One connection round trip per task instead of four (needs no `requiretty` in sudoers,
            # which no supported OS sets). Measured with bench/fleet.py (docs/fleet.md).
            "ANSIBLE_PIPELINING": "1",
            # ansible-runner turns host key checking off unless told otherwise; a host whose SSH key
            # is unknown or changed must be refused unless the user's Ansible says otherwise.
            "ANSIBLE_HOST_KEY_CHECKING": str(host_key_checking),
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
            **strategy_env()}


def _catch_signals(asked: list[int]) -> dict[signal.Signals, Any]:
    """Note Ctrl-C and SIGTERM in `asked` instead of raising (main thread only); return the handlers replaced."""
    # Ctrl-C and SIGTERM stop the run politely, then firmly (_Cancel), and raise once it has ended: ansible-playbook
    # runs in a terminal session of its own (pexpect), which a terminal's SIGINT does not reach.
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda signum, _frame: asked.append(signum))
    return previous


def run_playbook(
    project_dir: str | Path,
    inventory: str | Path,
    request: ApplyRequest,
    *,
    limit: str | None = None,
    forks: int | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    host_key_checking: bool = True,
) -> RunResult:
    """Run project_dir/site.yml against inventory, as the request asks (--dry-run: Ansible's --check; --diff; --tags;
    its secrets: the become and Jupyter passwords in the run's private extravars, the vault file); call
    on_event(event) with each of ansible-runner's events as it comes (stage `events` reads them).
    host_key_checking: ANSIBLE_HOST_KEY_CHECKING for the run (the user's setting; per host, the inventory's
    variables win over it, as they do in ansible-playbook: provision.ssh)."""
    secrets, tags = request.secrets, request.tags
    try:  # here, not at the top: a missing ansible-runner is this one line (exit 3), not an import traceback
        import ansible_runner
    except ImportError:
        raise RunnerError("ansible-runner is not installed (pip install ansible-runner)") from None
    cmdline = _cmdline(request.dry_run, request.diff, secrets.vault_password_file)
    final: dict[str, Any] = {}

    def handler(event: dict[str, Any]) -> bool:
        if event.get("event") == "playbook_on_stats":
            final.update(event.get("event_data", {}))
        if on_event:
            on_event(event)
        return False  # do not keep the event files: they hold every task's full result

    asked: list[int] = []
    previous = _catch_signals(asked)
    token = procs.new_token()  # every process of this run carries it (procs.TAG_VAR), in whatever session it ends up
    cancel = _Cancel(token, lambda: asked[0] if asked else procs.cancel_requested())

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="provision-runner-") as private:
        _write_private_env(Path(private) / "env", secrets.become_password, secrets.jupyter_password)
        control_dir = _control_dir(private)
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
                envvars=_run_env(host_key_checking, control_dir, token),
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
    return RunResult(status=runner.status, rc=runner.rc, seconds=time.monotonic() - started, stats=stats)
