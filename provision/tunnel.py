"""SSH tunnels from this machine to the hosts' Jupyter: a local URL that opens JupyterLab in a browser here.

Jupyter binds 127.0.0.1 on each host (roles/jupyter), so nothing but the host itself reaches it; the way in from
the controller is a local port forward through the SSH connection Ansible already uses (`ssh -N -L`). After an
apply, `open_tunnel` starts one per host (a distinct free local port each, from the planned port upwards, so a
fleet gets one URL per host) as a background process and records it:

    $PROVISION_STATE/tunnels/<host>.json   pid, local port, host port, the ssh command (no secret), started

Running the apply again reuses a tunnel that still runs (the URL stays the same). `provision tunnel stop [HOST]`
stops tunnels, `provision sandbox down NAME` stops the sandbox's with it, and a tunnel whose host goes away ends
by itself (ServerAliveInterval). The token is read over the same SSH (`sudo -n cat`, on standard output) for the
URL the apply prints; it never goes into a record, a command line or a log.

A tunnel is the one process provision starts on purpose to outlive the command: it runs without provision's
process tag (provision.procs sweeps everything tagged when a command ends) in a session of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from provision import state
from provision.errors import RunnerError
from provision.procs import missing_tool

SCHEMA = "provision.tunnel/1"
TOKEN_FILE = "/var/lib/provision/jupyter/token"
PORT_SPAN = 100  # local ports tried above the planned one before asking the kernel for any free port
# Stop at once when the forward cannot be set up; notice a host that went away (3 x 15 s) and end.
TUNNEL_OPTIONS = ("-o", "ExitOnForwardFailure=yes", "-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=3",
                  "-o", "BatchMode=yes")


@dataclass(frozen=True)
class Tunnel:
    host: str
    pid: int
    local_port: int
    remote_port: int
    ssh: list[str]  # how the host is reached (ssh_command), without the forward
    started: str
    log: str

    @property
    def local_address(self) -> str:
        return f"127.0.0.1:{self.local_port}"


def tunnels_dir() -> Path:
    return state.state_dir() / "tunnels"


def _record_path(host: str) -> Path:
    return tunnels_dir() / f"{state._safe(host)}.json"


def _forward(local_port: int, remote_port: int) -> str:
    return f"127.0.0.1:{local_port}:127.0.0.1:{remote_port}"


def _alive(t: Tunnel) -> bool:
    """The recorded pid still runs this tunnel's ssh (not a process that reused the pid)."""
    try:
        cmdline = Path(f"/proc/{t.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return (bool(cmdline) and os.path.basename(cmdline[0]) == b"ssh"
            and _forward(t.local_port, t.remote_port).encode() in cmdline)


def read(host: str) -> Tunnel | None:
    """The live tunnel recorded for host; a record whose process is gone is removed and None returned."""
    path = _record_path(host)
    try:
        data = json.loads(path.read_text())
        data.pop("schema")
        t = Tunnel(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not _alive(t):
        path.unlink(missing_ok=True)
        return None
    return t


def all_tunnels() -> list[Tunnel]:
    root = tunnels_dir()
    if not root.is_dir():
        return []
    found = []
    for path in sorted(root.glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            host = json.loads(path.read_text()).get("host")
            t = read(host) if isinstance(host, str) else None
            if t is not None:
                found.append(t)
    return found


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(preferred: int, taken: set[int] = frozenset()) -> int:  # type: ignore[assignment]
    """The first free loopback port from `preferred` upwards that no other tunnel holds; else any free port."""
    for port in range(preferred, min(preferred + PORT_SPAN, 65536)):
        if port not in taken and _port_free(port):
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_listening(proc: subprocess.Popen, port: int, timeout: float) -> str | None:
    """None once 127.0.0.1:port accepts connections; the reason otherwise (ssh ended, or the time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"ssh ended (exit {proc.returncode})"
        with socket.socket() as sock:
            sock.settimeout(0.5)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return None
        time.sleep(0.2)
    return f"nothing listened on 127.0.0.1:{port} within {timeout:.0f}s"


def open_tunnel(host: str, ssh: list[str], remote_port: int, *, taken: set[int] | None = None,
                timeout: float = 20) -> Tunnel:
    """A running tunnel from a free local port to 127.0.0.1:remote_port on host, through `ssh` (ssh_command's
    list: program, options, destination). Reuses the recorded one when it runs to the same place."""
    current = read(host)
    if current is not None and current.ssh == ssh and current.remote_port == remote_port:
        return current
    if current is not None:
        stop(host)
    # The port is chosen, and the tunnel started and found listening, under one lock on this controller: two
    # applies at once (another admin, another PROVISION_STATE) would otherwise both take the first free port.
    with state.cache_lock("tunnel-ports"):
        return _start(host, ssh, remote_port, (taken or set()) | {t.local_port for t in all_tunnels()}, timeout)


def _start(host: str, ssh: list[str], remote_port: int, taken: set[int], timeout: float) -> Tunnel:
    port = free_port(remote_port, taken)
    root = tunnels_dir()
    root.mkdir(parents=True, exist_ok=True)
    log = root / f"{state._safe(host)}.log"
    cmd = [ssh[0], "-N", "-L", _forward(port, remote_port), *TUNNEL_OPTIONS, *ssh[1:]]
    # Not tagged (provision.procs sweeps tagged processes when the command ends) and in a session of its own (a
    # Ctrl-C in the terminal after the apply does not reach it): this process is meant to outlive the command.
    env = {k: v for k, v in os.environ.items() if k != "PROVISION_PROCESS_TAG"}
    with open(log, "w") as out:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
        except FileNotFoundError:
            raise missing_tool(cmd[0], f"{host}: the SSH tunnel to its Jupyter") from None
    problem = _wait_listening(proc, port, timeout)
    if problem is not None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        said = " | ".join(log.read_text(errors="replace").strip().splitlines()[-2:])
        raise RunnerError(f"{host}: the SSH tunnel to its Jupyter did not start: {problem}"
                          + (f" ({said})" if said else "") + f"; try it by hand: {' '.join(cmd)}")
    t = Tunnel(host=host, pid=proc.pid, local_port=port, remote_port=remote_port, ssh=list(ssh),
               started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), log=str(log))
    tmp = _record_path(host).with_suffix(".tmp")
    tmp.write_text(json.dumps({"schema": SCHEMA, **asdict(t)}, indent=2) + "\n")
    tmp.replace(_record_path(host))
    return t


def stop(host: str) -> bool:
    """Stop host's tunnel if one runs; True when one was stopped. The record goes either way."""
    t = read(host)
    _record_path(host).unlink(missing_ok=True)
    if t is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(t.pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while _alive(t) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(t):
        with contextlib.suppress(ProcessLookupError):
            os.kill(t.pid, signal.SIGKILL)
    return True


def read_token(ssh: list[str], user: str, timeout: float = 30) -> str | None:
    """The host's Jupyter token, read over SSH with `sudo -n -u USER cat` (on standard output, never an argument).
    As the account that owns it, not root: the account can write its state directory, and root reading a link it
    put there would hand over whatever the link names (docs/security.md).
    None when it cannot be read without a prompt (sudo wants a password, the host does not answer)."""
    try:
        proc = subprocess.run([*ssh[:-1], *TUNNEL_OPTIONS[-2:], ssh[-1], "sudo", "-n", "-u", user, "cat", TOKEN_FILE],
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    token = proc.stdout.strip()
    return token if proc.returncode == 0 and token and len(token.split()) == 1 else None
