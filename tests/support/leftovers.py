"""Run `provision` the way a terminal or a supervisor does and find what it left running (psutil).

A command is started in a session of its own (start_new_session): every process it starts without leaving on purpose
stays in that session and process group. What leaves them (ansible-playbook under pexpect, Mitogen's ssh, an ssh
ControlPersist master) still inherits the environment, so a process is counted as left behind when it is in the
session or group, names one of the test's paths in its command line, or carries the test's PROVISION_STATE.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def tunnels(env: dict[str, str]) -> set[int]:
    """The SSH tunnels to Jupyter that apply starts on purpose to outlive it (provision.tunnel), by their records."""
    found = set()
    for record in Path(env.get("PROVISION_STATE", "/nonexistent"), "tunnels").glob("*.json"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            found.add(int(json.loads(record.read_text())["pid"]))
    return found


def leftovers(session: int, markers: list[str], env: dict[str, str]) -> list[str]:
    """Live processes (not this one, not zombies, not a recorded tunnel) that belong to the command started as
    `session`."""
    state = env.get("PROVISION_STATE")
    me = os.getpid()
    allowed = tunnels(env)
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status", "username"]):
        try:
            if proc.pid == me or proc.pid in allowed or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.info["username"] != psutil.Process(me).username():
                continue
            cmd = " ".join(proc.info["cmdline"] or [])
            ours = session in (os.getsid(proc.pid), os.getpgid(proc.pid)) or any(m in cmd for m in markers)
            if not ours and state:
                with contextlib.suppress(psutil.AccessDenied):
                    ours = proc.environ().get("PROVISION_STATE") == state
            if ours:
                found.append(f"{proc.pid} {cmd[:200]}")
        except (psutil.NoSuchProcess, ProcessLookupError, PermissionError):
            continue
    return found


def kill_leftovers(session: int, markers: list[str], env: dict[str, str]) -> None:
    """What a test must not leave behind even when it failed: SIGKILL to all of it."""
    with contextlib.suppress(OSError):
        os.killpg(session, signal.SIGKILL)
    for line in leftovers(session, markers, env):
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


class Commands:
    """The provision commands a test started; `cleanup()` (a finalizer) kills whatever any of them left."""

    def __init__(self, env: dict[str, str], markers: list[str]) -> None:
        self.env, self.markers = env, markers
        self.sessions: list[int] = []

    def start(self, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "provision", *args], cwd=ROOT, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.sessions.append(proc.pid)
        return proc

    def run(self, *args: str, timeout: float = 1200) -> subprocess.CompletedProcess:
        proc = self.start(*args)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_leftovers(proc.pid, self.markers, self.env)
            out, err = proc.communicate()
            raise AssertionError(f"provision {' '.join(args)} ran past {timeout}s: {err[-2000:]}") from None
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        done.left = self.left(proc)  # type: ignore[attr-defined]  # right after it returned
        return done

    def left(self, proc: subprocess.Popen | int) -> list[str]:
        return leftovers(proc if isinstance(proc, int) else proc.pid, self.markers, self.env)

    def cleanup(self) -> None:
        for pid in tunnels(self.env):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        for session in self.sessions:
            kill_leftovers(session, self.markers, self.env)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(self.left(s) for s in self.sessions):
            time.sleep(0.2)
