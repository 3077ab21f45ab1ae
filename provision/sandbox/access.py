"""How the controller reaches a sandbox: the SSH key and pinned host keys (`ssh_key()`, `pin_host_key()`), the
port its sshd is published on (`ssh_port()`), and the inventory variables of a sandbox host (`host_connection()`,
`inventory()`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import UsageError
from provision.procs import run_tool
from provision.sandbox.image import ADMIN, _docker
from provision.sandbox.wheelhouse import WHEELHOUSE_MOUNT
from provision.state import cache_lock
from provision.state import cache_root as cache_root  # re-exported: where tests and callers find it


def ssh_dir() -> Path:
    path = cache_root() / "ssh"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def ssh_key() -> Path:
    """The controller's key for sandboxes (made once): the key a user's machine would have in authorized_keys."""
    key = ssh_dir() / "id_ed25519"
    if key.is_file() and key.with_suffix(".pub").is_file():
        return key
    with cache_lock("sandbox-ssh-key"):  # made once, not by two commands at the same time
        if not (key.is_file() and key.with_suffix(".pub").is_file()):
            key.unlink(missing_ok=True)  # half of a pair: ssh-keygen would ask whether to overwrite it
            key.with_suffix(".pub").unlink(missing_ok=True)
            run_tool(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "provision-sandbox", "-f", str(key)],
                     "make the sandbox SSH key")
    return key


def known_hosts() -> Path:
    """SSH's known_hosts file that pins the sandboxes' host keys (not the hosts with a record: state.recorded_hosts)."""
    return ssh_dir() / "known_hosts"


def _host_pattern(port: int) -> str:
    return f"[127.0.0.1]:{port}"


def pin_host_key(port: int, public_key: str | None) -> None:
    """Replace what known_hosts says for 127.0.0.1:port (None: forget it)."""
    path = known_hosts()
    pattern = _host_pattern(port)
    with cache_lock("sandbox-known-hosts"):  # read, change, replace: two commands' changes must both stay
        lines = path.read_text().splitlines() if path.is_file() else []
        kept = [ln for ln in lines if ln.split(" ", 1)[0] != pattern]
        if public_key:
            kind, blob = public_key.split()[:2]
            kept.append(f"{pattern} {kind} {blob}")
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text("".join(f"{ln}\n" for ln in kept))
        tmp.replace(path)


@dataclass(frozen=True)
class Sandbox:
    name: str
    release: str
    port: int  # SSH, published on the controller's 127.0.0.1

    def hostvars(self, connection: str = "ssh") -> dict[str, Any]:
        return host_connection(self.name, connection, port=self.port)


def ssh_port(name: str) -> int | None:
    """The controller port that reaches the sandbox's sshd, None when the container is not running."""
    proc = _docker("port", name, "22/tcp")
    for line in proc.stdout.splitlines() if proc.returncode == 0 else []:
        host, _, port = line.strip().rpartition(":")
        if host in ("127.0.0.1", "0.0.0.0") and port.isdigit():
            return int(port)
    return None


def ssh_args() -> str:
    """ssh options for sandboxes: the pinned host keys, strictly; never ask (a changed key is refused at once)."""
    return (f"-o UserKnownHostsFile={known_hosts()} -o StrictHostKeyChecking=yes -o IdentitiesOnly=yes "
            "-o BatchMode=yes -o ConnectTimeout=15")


SHARED_APT_LOCK_TIMEOUT = 900  # seconds a sandbox's apt waits for the archive all sandboxes share


def host_connection(name: str, connection: str = "ssh", *, port: int | None = None) -> dict[str, Any]:
    """Inventory variables that reach sandbox `name`: over SSH as the admin account with sudo (the normal path, as
    a user's machine is reached), or with `docker exec` as root (connection='docker', an option for speed)."""
    common: dict[str, Any] = {
        "ansible_python_interpreter": "/usr/bin/python3",
        # The sandbox mounts the controller's apt cache and wheelhouse (fill_wheelhouse): pip, and uv where the plan
        # installs with it, look there too.
        "provision_environment": {"PIP_CACHE_DIR": "/var/cache/provision/pip/users",
                                  "PIP_FIND_LINKS": WHEELHOUSE_MOUNT, "UV_FIND_LINKS": WHEELHOUSE_MOUNT},
        "provision_sandbox": True,
        # A container has no GPU: the verifier compiles its kernels only, and says so. Chosen here, for these hosts
        # alone: on any other host the plan's GPU must answer (gpu_verify_compile_only defaults to false).
        "gpu_verify_compile_only": True,
        # Every sandbox mounts the same apt archive (cache_mounts), so its lock is one for all of them: eight hosts
        # installing at once wait on each other's downloads for longer than the roles' 120 s (seen on 2 cores: two of
        # eight failed "Could not get lock /var/cache/apt/archives/lock"). A real host's archive is its own.
        **{f"{role}_apt_lock_timeout": SHARED_APT_LOCK_TIMEOUT
           for role in ("nvidia_driver", "python_env", "cuda", "cudnn", "jupyter")},
    }
    if connection == "docker":
        # `docker` (routed to community.docker.docker): the short name is the one Mitogen accelerates.
        return {"ansible_connection": "docker", **common}
    if connection != "ssh":
        raise UsageError(f"sandbox connection '{connection}': use ssh (the default) or docker")
    port = port or ssh_port(name)
    if port is None:
        raise UsageError(f"sandbox {name} is not running; start it with `provision sandbox up {name}`")
    return {
        "ansible_host": "127.0.0.1",
        "ansible_port": port,
        "ansible_user": ADMIN,
        "ansible_ssh_private_key_file": str(ssh_key()),
        "ansible_ssh_common_args": ssh_args(),
        "ansible_become": True,
        **common,
    }


def inventory(names: list[str], *, hostvars: dict[str, dict[str, Any]] | None = None,
              connection: str = "ssh") -> dict[str, Any]:
    """An inventory of running sandboxes; hostvars adds variables per host (provision_profile, provision_os)."""
    return {"all": {"hosts": {name: {**host_connection(name, connection), **(hostvars or {}).get(name, {})}
                              for name in names}}}
