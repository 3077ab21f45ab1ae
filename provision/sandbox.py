"""Throwaway Debian hosts in local containers: the demo target, the molecule platform and the test hosts.

No image registry is reachable from the machines this project is built on, so base images are made here:
`debootstrap` a minimal Debian into a folder and `docker import` it. The image carries what Ansible needs
(python3, sudo) and systemd, so services (Jupyter) run as they would on a real host.

Package caches live on the controller under `cache_root()` and are bind-mounted into every container, so
repeated runs download nothing again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from provision.errors import RunnerError

# Debian releases this machine can execute; codenames are facts about Debian, kept beside the per-OS data.
DEBIAN_CODENAMES = {"12": "bookworm", "13": "trixie"}
BASE_PACKAGES = (
    "ca-certificates",
    "python3",
    "python3-apt",
    "sudo",
    "systemd",
    "systemd-sysv",
    "dbus",
    "iproute2",
    "procps",
    "curl",
    "gnupg",
)
MIRROR = os.environ.get("PROVISION_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("PROVISION_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
LABEL = "io.provision.sandbox"


def cache_root() -> Path:
    root = Path(os.environ.get("PROVISION_CACHE", Path.home() / ".cache" / "provision"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def base_image_tag(release: str) -> str:
    return f"provision/debian:{release}"


def _run(cmd: list[str], what: str, **kwargs) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    except FileNotFoundError:
        raise RunnerError(f"{what}: '{cmd[0]}' is not installed (apt-get install {cmd[0]})") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RunnerError(f"{what} failed (exit {proc.returncode}): " + " | ".join(tail))
    return proc


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def sources_list(codename: str) -> str:
    comps = "main contrib non-free non-free-firmware"
    return (
        f"deb {MIRROR} {codename} {comps}\n"
        f"deb {MIRROR} {codename}-updates {comps}\n"
        f"deb {SECURITY_MIRROR} {codename}-security {comps}\n"
    )


def ensure_base_image(release: str, *, rebuild: bool = False) -> str:
    """Build `provision/debian:<release>` with debootstrap + docker import unless it exists. Returns the tag."""
    if release not in DEBIAN_CODENAMES:
        raise RunnerError(
            f"no sandbox base image for Debian {release}; this machine can build {sorted(DEBIAN_CODENAMES)}"
        )
    tag = base_image_tag(release)
    if image_exists(tag) and not rebuild:
        return tag
    codename = DEBIAN_CODENAMES[release]
    debs = cache_root() / "debootstrap" / codename
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"provision-{codename}-") as tmp:
        root = Path(tmp) / "root"
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--cache-dir={debs}",
                "--include=" + ",".join(BASE_PACKAGES),
                "--components=main,contrib,non-free,non-free-firmware",
                codename,
                str(root),
                MIRROR,
            ],
            f"debootstrap {codename}",
        )
        (root / "etc/apt/sources.list").write_text(sources_list(codename))
        # Keep downloaded .debs: /var/cache/apt/archives is a shared cache mounted from the controller.
        (root / "etc/apt/apt.conf.d/99provision-keep-debs").write_text(
            'Binary::apt::APT::Keep-Downloaded-Packages "true";\n'
        )
        (root / "etc/apt/apt.conf.d/99provision-no-recommends").write_text('APT::Install-Recommends "false";\n')
        # systemd in a container: nothing to do with the console or hardware clocks.
        for unit in ("getty.target", "systemd-timesyncd.service", "console-getty.service"):
            link = root / "etc/systemd/system" / unit
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to("/dev/null")
        _trust_controller_cas(root)
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            _run(
                [
                    "docker",
                    "import",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    "ENV container=docker",
                    "--change",
                    f"LABEL {LABEL}.base=debian-{release}",
                    "-",
                    tag,
                ],
                f"docker import {tag}",
                stdin=tar.stdout,
            )
        finally:
            tar.wait()
    return tag


def _trust_controller_cas(root: Path) -> None:
    """Give the image the controller's extra CA certificates (TLS-intercepting proxies, private mirrors).

    Without them pip inside a sandbox fails certificate verification wherever the controller itself only
    reaches PyPI through such a proxy. The CAs are the ones the controller already trusts, nothing more.
    """
    extra = Path(os.environ.get("PROVISION_EXTRA_CA_DIR", "/usr/local/share/ca-certificates"))
    certs = sorted(extra.glob("*.crt")) if extra.is_dir() else []
    if not certs:
        return
    dest = root / "usr/local/share/ca-certificates"
    dest.mkdir(parents=True, exist_ok=True)
    for cert in certs:
        shutil.copyfile(cert, dest / cert.name)
    _run(["chroot", str(root), "update-ca-certificates"], "trust the controller's CA certificates in the base image")


@dataclass(frozen=True)
class Sandbox:
    name: str
    release: str

    @property
    def connection(self) -> str:
        return f"docker://{self.name}"


def cache_mounts(release: str) -> list[str]:
    """`docker run -v` arguments for the shared apt and pip caches."""
    codename = DEBIAN_CODENAMES[release]
    apt = cache_root() / "apt" / codename
    (apt / "partial").mkdir(parents=True, exist_ok=True)
    pip = cache_root() / "pip"
    pip.mkdir(parents=True, exist_ok=True)
    wheels = wheelhouse_dir()
    return ["-v", f"{apt}:/var/cache/apt/archives", "-v", f"{pip}:/var/cache/provision/pip",
            "-v", f"{wheels}:{WHEELHOUSE_MOUNT}:ro"]


WHEELHOUSE_MOUNT = "/var/cache/provision/wheels"
# manylinux tags the planned wheels use (NumPy, NVIDIA's CUDA/cuDNN wheels, Jupyter's compiled dependencies).
_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64",
              "manylinux_2_34_x86_64", "linux_x86_64")


def wheelhouse_dir() -> Path:
    path = cache_root() / "wheels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def fill_wheelhouse(plan, *, skip_frameworks: bool = False, log=None) -> bool:
    """Download the plan's wheels (and their dependencies) once, on the controller, into the wheelhouse every
    sandbox mounts read-only; pip in the sandboxes finds them there (PIP_FIND_LINKS) before the index.

    pip's own HTTP cache cannot be shared here: the package proxy on the machines this is built on marks its
    responses uncacheable, so every host would download every wheel again. Returns False (and the hosts simply
    download from the index) when pip could not fetch everything, e.g. offline.
    """
    import hashlib
    import sys

    reqs = plan.pip_requirements(frameworks=not skip_frameworks, default_index_only=True)
    wheels = wheelhouse_dir()
    key = hashlib.sha256("\n".join([plan.python.version, *reqs]).encode()).hexdigest()[:16]
    stamp = wheels / f".complete-{key}"
    if stamp.exists():
        return True
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", str(wheels),
           "--only-binary", ":all:", "--python-version", plan.python.version, "--implementation", "cp",
           *[arg for tag in _PLATFORMS for arg in ("--platform", tag)], *reqs]
    if log:
        log(f"wheelhouse: downloading {len(reqs)} requirement(s) for Python {plan.python.version} into {wheels}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        if log:
            log("wheelhouse: incomplete, hosts download from the index: "
                + " | ".join(proc.stderr.strip().splitlines()[-2:]))
        return False
    stamp.write_text("\n".join(reqs) + "\n")
    return True


def start(name: str, release: str, *, hostname: str | None = None, extra_args: list[str] | None = None,
          network: str | None = None) -> Sandbox:
    """Start a systemd container from the base image (built if missing), with shared caches.

    Docker's bridge network by default: every sandbox has its own ports (each runs Jupyter on the plan's port, and
    two sandboxes on the host's network would fight over it). Where the bridge cannot resolve the package
    registries, PROVISION_SANDBOX_NETWORK=host puts sandboxes on the host's network (one at a time, then).
    """
    network = network or os.environ.get("PROVISION_SANDBOX_NETWORK", "bridge")
    tag = ensure_base_image(release)
    remove(name)  # a stale sandbox of this name; refuses to touch a container provision did not start
    cmd = [
        "docker",
        "run",
        "-d",
        "--name",
        name,
        "--label",
        f"{LABEL}=1",
        "--network",
        network,
        # systemd as PID 1 needs CAP_SYS_ADMIN and the cgroup tree; --privileged is refused by nested engines.
        "--cap-add",
        "SYS_ADMIN",
        "--cgroupns",
        "host",
        "-v",
        "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/run/lock",
        "-e",
        "PIP_CACHE_DIR=/var/cache/provision/pip",
        *cache_mounts(release),
    ]
    if hostname:
        cmd += ["--hostname", hostname]
    cmd += [*(extra_args or []), tag, "/sbin/init"]
    _run(cmd, f"start sandbox {name}")
    wait_ready(name)
    # The image's package lists are as old as the image (and debootstrap fetched main only): refresh them, as a
    # host that is about to be provisioned would have.
    _run(["docker", "exec", name, "apt-get", "update", "-qq"], f"sandbox {name}: apt-get update")
    # pip runs as the plan's non-root account: give it a writable directory in the shared pip cache.
    _run(["docker", "exec", name, "install", "-d", "-m", "1777", "/var/cache/provision/pip/users"],
         f"sandbox {name}: pip cache directory")
    return Sandbox(name=name, release=release)


def start_fleet(names: list[str], release: str, *, network: str | None = None) -> list[Sandbox]:
    """Start several sandboxes (one at a time: each start is a short burst of systemd and apt work)."""
    ensure_base_image(release)
    return [start(name, release, hostname=name, network=network) for name in names]


def wait_ready(name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = subprocess.run(
            ["docker", "exec", name, "systemctl", "is-system-running"], capture_output=True, text=True
        )
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise RunnerError(f"sandbox {name}: systemd did not come up within {timeout:.0f}s (state '{state}')")


def remove(name: str) -> None:
    """Remove a container, only if provision started it (it carries the sandbox label)."""
    proc = subprocess.run(["docker", "inspect", "-f", f'{{{{index .Config.Labels "{LABEL}"}}}}', name],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return  # no such container
    if proc.stdout.strip() != "1":
        raise RunnerError(f"container {name} was not started by provision (no {LABEL} label); not removing it")
    subprocess.run(["docker", "rm", "-f", name], capture_output=True)
