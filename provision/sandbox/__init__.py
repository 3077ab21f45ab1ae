"""Throwaway Debian hosts in local containers that look like a user's machine: the demo target and the test hosts.

A sandbox is what a stock Debian install reached over SSH is, and nothing more:

- debootstrap's minimal Debian with systemd, openssh-server, sudo and python3 (as Debian's cloud images have it);
- Debian's default package sources, `main` only (deb822 `debian.sources` on Debian 13, a one-line
  `sources.list` on Debian 12, as each release's installer writes them): enabling contrib/non-free is the roles' job;
- an `admin` account with an SSH key and sudo (passwordless, or asking for a password);
- the controller's extra CA certificates, the way a machine on a company network trusts its egress proxy.

No python3-apt, no curl, no extra components: a role that needs them installs them. The container publishes its
SSH port on the controller's loopback only; its host keys are made when it starts (as cloud-init does on a first
boot) and pinned in a known_hosts file, so a host whose key changes is refused, not trusted.

No image registry is reachable from the machines this project is built on, so base images are made here:
`debootstrap` into a folder and `docker import`. Two caches are mounted for speed and change no behaviour: apt's
downloaded .debs and a read-only wheelhouse the controller fills once (`fill_wheelhouse`).

This package starts, waits for and removes sandboxes (here); image.py makes the base image, access.py the SSH
key, host keys and inventory, wheelhouse.py the caches. Every name is importable from provision.sandbox.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from provision import procs, tunnel
from provision.errors import RunnerError, UsageError
from provision.procs import run_tool
from provision.sandbox.access import (
    SHARED_APT_LOCK_TIMEOUT,
    Sandbox,
    _host_pattern,
    host_connection,
    inventory,
    known_hosts,
    pin_host_key,
    ssh_args,
    ssh_dir,
    ssh_key,
    ssh_port,
)
from provision.sandbox.image import (
    ADMIN,
    BASE_PACKAGES,
    BASE_RECIPE,
    LABEL,
    MIRROR,
    SECURITY_MIRROR,
    _build_base_image,
    _docker,
    _image_recipe,
    base_image_tag,
    debian_codenames,
    default_sources,
    ensure_base_image,
    image_exists,
    trust_controller_cas,
)
from provision.sandbox.wheelhouse import (
    _PLATFORMS,
    WHEELHOUSE_MOUNT,
    _download_wheels,
    cache_mounts,
    check_wheelhouse,
    fill_wheelhouse,
    wheelhouse_dir,
    wheelhouse_store,
    wheelhouse_whole,
)
from provision.state import cache_lock
from provision.state import cache_root as cache_root  # re-exported: where tests and callers find it

__all__ = [
    "ADMIN", "BASE_PACKAGES", "BASE_RECIPE", "LABEL", "MIRROR", "SECURITY_MIRROR", "SHARED_APT_LOCK_TIMEOUT",
    "WHEELHOUSE_MOUNT", "Sandbox", "base_image_tag", "cache_mounts", "cache_root", "check_wheelhouse",
    "debian_codenames", "default_sources", "engine_cgroups", "ensure_base_image", "fill_wheelhouse", "free_port",
    "host_connection", "image_exists", "inventory", "is_running", "known_hosts", "pin_host_key", "remove",
    "ssh_args", "ssh_dir", "ssh_key", "ssh_port", "start", "start_fleet", "systemd_run_args", "trust_controller_cas",
    "wait_ready", "wait_ssh", "wheelhouse_dir", "wheelhouse_store", "wheelhouse_whole",
    # Private names the module had before it was a package, which tests and callers may still reach here.
    "_PLATFORMS", "_build_base_image", "_docker", "_download_wheels", "_host_pattern", "_image_recipe",
]


def engine_cgroups() -> tuple[int, bool]:
    """The Docker engine's cgroup version (1 or 2; 1 when it does not say) and whether it remaps user namespaces
    (`docker info`: CgroupVersion, SecurityOptions name=userns)."""
    proc = _docker("info", "--format", "{{.CgroupVersion}} {{json .SecurityOptions}}")
    if proc.returncode != 0:
        return 1, False
    version, _, options = proc.stdout.strip().partition(" ")
    return (2 if version == "2" else 1), "name=userns" in options


def systemd_run_args(cgroup_version: int, userns: bool) -> list[str]:
    """`docker run` arguments that let systemd run as the container's PID 1 with as little of the host as the engine
    allows (docs/hosts.md, "Sandbox privileges").

    cgroup v2 with user namespaces remapped: a private cgroup namespace, whose cgroupfs the engine mounts read-write
    (it clears the read-only flag in a user namespace): no CAP_SYS_ADMIN, nothing of the host's tree.
    Otherwise systemd needs the host's hierarchy read-write and CAP_SYS_ADMIN: on cgroup v1 it mounts and manages
    its controllers there, and on v2 Docker mounts a private namespace's cgroupfs read-only unless the container is
    privileged (moby/moby#46763; use the private namespace there too once Docker can mount it read-write).
    --privileged is not used: nested engines refuse it.
    """
    if cgroup_version == 2 and userns:
        return ["--cgroupns", "private"]
    return ["--cap-add", "SYS_ADMIN", "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw"]


def start(name: str, release: str, *, hostname: str | None = None, extra_args: list[str] | None = None,
          network: str | None = None, sudo_password: str | None = None, image: str | None = None, log=None,
          progress=None) -> Sandbox:
    """Start a stock Debian host in a container (base image built if missing) and let the controller in over SSH.

    sudo_password: the admin account's sudo asks for this password (the account gets it); None: passwordless sudo.
    image: start from this image instead of the base image: a `docker commit` of a sandbox of `release` (the tests'
    converged host, tests/support/snapshot.py), which then boots as that host rebooted under a new name and port.
    Docker's bridge network by default, SSH published on 127.0.0.1 only. Where the bridge cannot resolve the package
    registries, PROVISION_SANDBOX_NETWORK=host puts sandboxes on the host's network (one at a time, then).
    """
    network = network or os.environ.get("PROVISION_SANDBOX_NETWORK", "bridge")
    if network == "host":
        raise UsageError("PROVISION_SANDBOX_NETWORK=host: a sandbox is reached over SSH on a port of its own, which "
                         "the host network cannot give; use Docker's bridge network")
    tag = image or ensure_base_image(release, log=log, progress=progress)
    key = ssh_key()
    if progress:
        progress(f"starting sandbox {name} (systemd, sshd)")
    remove(name)  # a stale sandbox of this name; refuses to touch a container provision did not start
    cmd = [
        "docker", "run", "-d", "--name", name, "--label", f"{LABEL}=1", "--network", network,
        *systemd_run_args(*engine_cgroups()),
        "--tmpfs", "/run", "--tmpfs", "/run/lock",
        *cache_mounts(release, name),
    ]
    # A port of its own, fixed for the container's life: a host that reboots (docker restart) keeps its address.
    # Chosen and bound under one lock: two sandboxes started at once would otherwise be handed the same free port.
    with cache_lock("sandbox-ports"):
        cmd += ["--publish", f"127.0.0.1:{free_port()}:22", "--hostname", hostname or name]
        cmd += [*(extra_args or []), tag, "/sbin/init"]
        run_tool(cmd, f"start sandbox {name}")
    wait_ready(name)
    # What a cloud provider's first boot does (cloud-init): the user's key and sudo rule (host keys: the image).
    sudo_rule = f"{ADMIN} ALL=(ALL:ALL) " + ("ALL" if sudo_password else "NOPASSWD:ALL")
    script = (
        "set -e; "
        f"install -d -m 0700 -o {ADMIN} -g {ADMIN} /home/{ADMIN}/.ssh; "
        f"cat > /home/{ADMIN}/.ssh/authorized_keys; "
        f"chown {ADMIN}:{ADMIN} /home/{ADMIN}/.ssh/authorized_keys; chmod 0600 /home/{ADMIN}/.ssh/authorized_keys; "
        f"echo '{sudo_rule}' > /etc/sudoers.d/90-{ADMIN}; chmod 0440 /etc/sudoers.d/90-{ADMIN}; "
        # pip runs as the plan's non-root account: a directory of its own in this host's own pip cache (no other
        # sandbox mounts it).
        "install -d -m 1777 /var/cache/provision/pip/users"
    )
    run_tool(["docker", "exec", "-i", name, "sh", "-c", script], f"sandbox {name}: SSH key and sudo",
         input=(key.with_suffix(".pub")).read_text())
    if sudo_password:  # on standard input, never on a command line
        run_tool(["docker", "exec", "-i", name, "chpasswd"], f"sandbox {name}: admin password",
             input=f"{ADMIN}:{sudo_password}\n")
    port = ssh_port(name)
    if port is None:
        raise RunnerError(f"sandbox {name}: docker did not publish its SSH port")
    host_key = run_tool(["docker", "exec", name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub"],
                    f"sandbox {name}: read its host key").stdout
    pin_host_key(port, host_key)
    wait_ssh(name, port, key)
    return Sandbox(name=name, release=release, port=port)


def free_port() -> int:
    """A TCP port on the controller's 127.0.0.1 that nothing listens on now (a sandbox's or a VM's SSH)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ssh(name: str, port: int, key: Path, timeout: float = 30) -> None:
    """Wait until the admin account gets in over SSH on 127.0.0.1:port (a sandbox container or a VM)."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            proc = subprocess.run(["ssh", *ssh_args().split(), "-i", str(key), "-p", str(port), f"{ADMIN}@127.0.0.1",
                                   "true"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            raise procs.missing_tool("ssh", f"sandbox {name}") from None
        if proc.returncode == 0:
            return
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        time.sleep(0.5)
    raise RunnerError(f"sandbox {name}: SSH on 127.0.0.1:{port} did not let the admin account in within "
                      f"{timeout:.0f}s ({last})")


def start_fleet(names: list[str], release: str, *, network: str | None = None, log=None,
                progress=None) -> list[Sandbox]:
    """Start several sandboxes (one at a time: each start is a short burst of systemd work)."""
    ensure_base_image(release, log=log, progress=progress)
    return [start(name, release, network=network, progress=progress) for name in names]


def wait_ready(name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = _docker("exec", name, "systemctl", "is-system-running")
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise RunnerError(f"sandbox {name}: systemd did not come up within {timeout:.0f}s (state '{state}')")


def is_running(name: str) -> bool:
    proc = _docker("inspect", "-f", "{{.State.Running}}", name)
    return proc.returncode == 0 and proc.stdout.strip() == "true"


def remove(name: str) -> None:
    """Remove a container, only if provision started it (it carries the sandbox label), and forget its host key."""
    proc = _docker("inspect", "-f", f'{{{{index .Config.Labels "{LABEL}"}}}}', name)
    if proc.returncode != 0:
        return  # no such container
    if proc.stdout.strip() != "1":
        raise RunnerError(f"container {name} was not started by provision (no {LABEL} label); not removing it")
    tunnel.stop(name)  # the SSH tunnel to its Jupyter (provision.tunnel) must not outlive the host
    port = ssh_port(name)
    _docker("rm", "-f", name)
    if port is not None:
        pin_host_key(port, None)
