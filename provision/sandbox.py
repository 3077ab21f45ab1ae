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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision import procs, tunnel
from provision.errors import RunnerError, UsageError
from provision.hashes import sha256_file
from provision.procs import run_tool, run_tool_streamed
from provision.state import cache_lock
from provision.state import cache_root as cache_root  # re-exported: where tests and callers find it

# What a stock server install has that debootstrap's minbase lacks: an init, an SSH server, sudo, Python (Debian's
# cloud images and any install with the standard task carry it), and the tools of priority `important`.
BASE_PACKAGES = (
    "ca-certificates",
    "python3",
    "sudo",
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "iproute2",
    "procps",
)
# Bump when the image's recipe changes: an image of an older recipe is rebuilt.
BASE_RECIPE = "stock-ssh-3"
MIRROR = os.environ.get("PROVISION_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get("PROVISION_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
LABEL = "io.provision.sandbox"
ADMIN = "admin"


def debian_codenames() -> dict[str, str]:
    """The Debian releases a sandbox can be, by release: codename (provision/data/os.yaml, the systems' rows)."""
    from provision.compat import load_db

    return {row.release: row.codename for row in load_db().systems if row.distribution == "debian"}


def base_image_tag(release: str) -> str:
    return f"provision/debian:{release}"


def _docker(*args: str) -> subprocess.CompletedProcess:
    """A docker CLI call whose failure the caller reads (inspect, port); a missing CLI is one line, exit 3."""
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True)
    except FileNotFoundError:
        raise procs.missing_tool("docker", "the sandbox needs the docker CLI") from None


def image_exists(tag: str) -> bool:
    return _docker("image", "inspect", tag).returncode == 0


def _image_recipe(tag: str) -> str:
    proc = _docker("image", "inspect", "-f", f'{{{{index .Config.Labels "{LABEL}.recipe"}}}}', tag)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def default_sources(release: str) -> tuple[str, str]:
    """(path, text) of the package sources Debian's installer writes for `release`: `main` only."""
    codename = debian_codenames()[release]
    if int(release) >= 13:
        return "etc/apt/sources.list.d/debian.sources", (
            "Types: deb\n"
            f"URIs: {MIRROR}\n"
            f"Suites: {codename} {codename}-updates\n"
            "Components: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
            "\n"
            "Types: deb\n"
            f"URIs: {SECURITY_MIRROR}\n"
            f"Suites: {codename}-security\n"
            "Components: main\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )
    return "etc/apt/sources.list", (
        f"deb {MIRROR} {codename} main\n"
        f"deb {MIRROR} {codename}-updates main\n"
        f"deb {SECURITY_MIRROR} {codename}-security main\n"
    )


def ensure_base_image(release: str, *, rebuild: bool = False, log=None, progress=None) -> str:
    """Build `provision/debian:<release>` (a stock Debian, see the module's text) unless an image of this recipe
    exists. Returns the tag. log: lines that stay (what is built, and why it takes a while); progress: debootstrap's
    own lines as they come (`I: Retrieving libc6`), for a status line."""
    codenames = debian_codenames()
    if release not in codenames:
        raise RunnerError(f"no sandbox base image for Debian {release}; this machine can build {sorted(codenames)}")
    tag = base_image_tag(release)
    if not rebuild and _image_recipe(tag) == BASE_RECIPE:
        return tag
    # One build at a time per release: a second command started meanwhile waits, then finds the image made.
    with cache_lock(f"base-image-{release}"):
        if not rebuild and _image_recipe(tag) == BASE_RECIPE:
            return tag
        _build_base_image(release, tag, log=log, progress=progress)
    return tag


def _build_base_image(release: str, tag: str, *, log=None, progress=None) -> None:
    if os.geteuid() != 0:
        raise RunnerError(f"building the sandbox base image {tag} needs root (debootstrap and chroot): run "
                          "scripts/bootstrap.sh as root once, or build it elsewhere and `docker load` it")
    codename = debian_codenames()[release]
    if log:
        log(f"building the Debian {release} base image {tag} with debootstrap (once; 1-3 minutes)")
    debs = cache_root() / "debootstrap" / codename
    debs.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"provision-{codename}-") as tmp:
        root = Path(tmp) / "root"
        run_tool_streamed(
            [
                "debootstrap",
                "--variant=minbase",
                f"--cache-dir={debs}",
                "--include=" + ",".join(BASE_PACKAGES),
                "--components=main",
                codename,
                str(root),
                MIRROR,
            ],
            f"debootstrap {codename}",
            progress,
        )
        path, text = default_sources(release)
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        # A cache, not a behaviour: /var/cache/apt/archives is mounted from the controller and keeps its .debs.
        (root / "etc/apt/apt.conf.d/99provision-keep-debs").write_text(
            'Binary::apt::APT::Keep-Downloaded-Packages "true";\n'
        )
        # systemd in a container: nothing to do with the console or hardware clocks.
        for unit in ("getty.target", "systemd-timesyncd.service", "console-getty.service"):
            link = root / "etc/systemd/system" / unit
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to("/dev/null")
        trust_controller_cas(root)
        # The sudo account a user logs in with; its key and sudo rule are set when a container starts.
        run_tool(["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo", ADMIN],
                 "create the admin account in the base image")
        # Host keys are per machine: every container makes its own on its first boot, as cloud images do
        # (cloud-init there; here a drop-in that runs ssh-keygen -A before sshd checks its configuration).
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        dropin = root / "etc/systemd/system/ssh.service.d/10-provision-host-keys.conf"
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text("[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\n"
                          "ExecStartPre=/usr/sbin/sshd -t\n")
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        if progress:
            progress(f"importing the Debian {release} tree into Docker as {tag}")
        tar = subprocess.Popen(["tar", "-C", str(root), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            run_tool(
                [
                    "docker",
                    "import",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    "ENV container=docker",
                    "--change",
                    f"LABEL {LABEL}.base=debian-{release} {LABEL}.recipe={BASE_RECIPE}",
                    "-",
                    tag,
                ],
                f"docker import {tag}",
                stdin=tar.stdout,
            )
        finally:
            tar.wait()


def trust_controller_cas(root: Path) -> None:
    """Give the image the controller's extra CA certificates (TLS-intercepting proxies, private mirrors).

    A machine on a company network trusts its egress proxy's CA; without it pip fails certificate verification
    wherever the controller itself only reaches PyPI through such a proxy. The CAs are the ones the controller
    already trusts, nothing more.
    """
    extra = Path(os.environ.get("PROVISION_EXTRA_CA_DIR", "/usr/local/share/ca-certificates"))
    certs = sorted(extra.glob("*.crt")) if extra.is_dir() else []
    if not certs:
        return
    dest = root / "usr/local/share/ca-certificates"
    dest.mkdir(parents=True, exist_ok=True)
    for cert in certs:
        shutil.copyfile(cert, dest / cert.name)
    run_tool(["chroot", str(root), "update-ca-certificates"], "trust the controller's CA certificates in the base image")


# --- SSH: the controller's key and the hosts' keys ------------------------------------------------------------


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



def cache_mounts(release: str, name: str | None = None) -> list[str]:
    """`docker run -v` arguments for the apt cache, a pip cache and the read-only wheelhouse.

    name: the sandbox's own pip cache (cache_root()/pip/<name>), written by that host alone, so one host cannot
    poison what another installs; None: the controller's shared one (molecule scenarios). The wheelhouse, filled
    by the controller, is mounted read-only in every host.
    """
    codename = debian_codenames()[release]
    apt = cache_root() / "apt" / codename
    (apt / "partial").mkdir(parents=True, exist_ok=True)
    pip = cache_root() / "pip" / name if name else cache_root() / "pip"
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


# What the wheelhouse holds, wheel by wheel: {name: {sha256, size, mtime_ns}}, written when a wheel is renamed in
# whole (pip checked it against the index's hash as it downloaded it). A wheel whose size differs, or whose content
# no longer has its sha256, is not whole: it is removed before any host reads the wheelhouse, and fetched again.
WHEEL_INDEX = ".wheels.json"


def _wheel_index(wheels: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads((wheels / WHEEL_INDEX).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_wheel_index(wheels: Path, index: dict[str, dict[str, Any]]) -> None:
    tmp = wheels / f"{WHEEL_INDEX}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n")
    os.replace(tmp, wheels / WHEEL_INDEX)


def _entry(path: Path, sha256: str) -> dict[str, Any]:
    st = path.stat()
    return {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _wheel_state(path: Path, entry: dict[str, Any] | None) -> str:
    """"ok" (as recorded: same size and time, or the same sha256), "changed" (its time only: re-hashed, whole),
    "bad" (another size or content than recorded, or not a zip whose directory can be read), "unknown" (never
    recorded: an earlier provision's download)."""
    st = path.stat()
    if entry is None:
        return "unknown"
    if st.st_size != entry.get("size"):
        return "bad"
    if st.st_mtime_ns == entry.get("mtime_ns"):
        return "ok"
    return "changed" if sha256_file(path) == entry.get("sha256") else "bad"


def _readable_zip(path: Path) -> bool:
    """A wheel cut short (a download or copy that stopped, a full disk) has no zip directory at its end."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def check_wheelhouse(wheels: Path, *, log=None) -> list[str]:
    """Check every wheel in the wheelhouse against what was recorded when it came in (WHEEL_INDEX): one that is not
    whole is removed, with every plan's completion stamp (they vouched for it), so the next download fetches it
    again and no host installs it. A wheel an earlier provision left without a record is kept when its zip directory
    reads, and recorded with its sha256 (once). Returns the names removed. Under the wheelhouse's lock."""
    index = _wheel_index(wheels)
    removed: list[str] = []
    adopted = 0
    for path in sorted(wheels.glob("*.whl")):
        entry = index.get(path.name)
        found = _wheel_state(path, entry)
        if found == "unknown" and _readable_zip(path):
            index[path.name] = _entry(path, sha256_file(path))
            adopted += 1
        elif found == "changed":
            index[path.name] = _entry(path, str((entry or {}).get("sha256")))
        elif found in ("bad", "unknown"):
            size = path.stat().st_size
            path.unlink()
            index.pop(path.name, None)
            removed.append(path.name)
            if log:
                expected = f" of {entry['size']}" if entry and entry.get("size") else ""
                log(f"wheelhouse: {path.name} is not whole ({size} bytes{expected}): removed, to be fetched again")
    for name in [n for n in index if not (wheels / n).is_file()]:
        index.pop(name)
    if removed:
        for stamp in wheels.glob(".complete-*"):
            stamp.unlink()
    if removed or adopted or index != _wheel_index(wheels):
        _write_wheel_index(wheels, index)
    return removed


def _wheelhouse_checked(wheels: Path) -> bool:
    """Whether every wheel is as recorded by size and time (a read of its directory; no lock, no hashing)."""
    index = _wheel_index(wheels)
    for path in wheels.glob("*.whl"):
        entry = index.get(path.name)
        try:
            st = path.stat()
        except OSError:
            return False
        if entry is None or st.st_size != entry.get("size") or st.st_mtime_ns != entry.get("mtime_ns"):
            return False
    return True


def fill_wheelhouse(plan, *, skip_frameworks: bool = False, log=None) -> bool:
    """Download the plan's wheels (and their dependencies) once, on the controller, into the wheelhouse every
    sandbox mounts read-only; pip in the sandboxes finds them there (PIP_FIND_LINKS) before the index.

    pip's own HTTP cache cannot be shared here: the package proxy on the machines this is built on marks its
    responses uncacheable, so every host would download every wheel again. Returns False (and the hosts simply
    download from the index) when pip could not fetch everything, e.g. offline.

    Every wheel is checked first against what was recorded when it came in (check_wheelhouse): one that is not whole
    (cut short, changed) is removed and fetched again, never installed.
    """
    reqs = plan.pip_requirements(frameworks=not skip_frameworks, default_index_only=True)
    wheels = wheelhouse_dir()
    key = hashlib.sha256("\n".join([plan.python.version, *reqs]).encode()).hexdigest()[:16]
    stamp = wheels / f".complete-{key}"
    if stamp.exists() and _wheelhouse_checked(wheels):
        return True
    # pip download into one folder by one command at a time (two would write the same wheel); whoever waited
    # finds the stamp, or downloads only what its plan adds.
    with cache_lock("wheelhouse"):
        check_wheelhouse(wheels, log=log)
        return stamp.exists() or _download_wheels(plan, reqs, wheels, stamp, log)


def _download_wheels(plan, reqs: list[str], wheels: Path, stamp: Path, log) -> bool:
    # Into a folder beside the wheelhouse, then each new wheel renamed in whole: a sandbox installing from the
    # wheelhouse meanwhile never reads a wheel half written. The wheels already there are found, not downloaded.
    with tempfile.TemporaryDirectory(prefix=".download-", dir=wheels.parent) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--dest", tmp,
               "--find-links", str(wheels), "--only-binary", ":all:", "--python-version", plan.python.version,
               "--implementation", "cp", *[arg for tag in _PLATFORMS for arg in ("--platform", tag)], *reqs]
        if plan.pip_index_url:  # the plan's PyPI mirror (software.indexes.pypi, --index pypi=URL)
            cmd += ["--index-url", plan.pip_index_url]
        if log:
            log(f"wheelhouse: downloading {len(reqs)} requirement(s) for Python {plan.python.version} into {wheels}")
        # In a session of its own, stopped with everything it started on Ctrl-C, SIGTERM or an error (provision.procs).
        proc = procs.run(cmd)
        if proc.returncode != 0:
            if log:
                log("wheelhouse: incomplete, hosts download from the index: "
                    + " | ".join(proc.stderr.strip().splitlines()[-2:]))
            return False
        index = _wheel_index(wheels)
        for wheel in Path(tmp).iterdir():
            if wheel.suffix == ".whl" and not (wheels / wheel.name).exists():
                digest = sha256_file(wheel)  # whole: pip checked it against the index's hash as it came in
                os.replace(wheel, wheels / wheel.name)
                index[wheel.name] = _entry(wheels / wheel.name, digest)
            elif not wheel.name.endswith(".whl") and not (wheels / wheel.name).exists():
                os.replace(wheel, wheels / wheel.name)
        _write_wheel_index(wheels, index)
    stamp.write_text("\n".join(reqs) + "\n")
    return True


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
