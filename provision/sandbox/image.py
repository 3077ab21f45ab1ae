"""A sandbox's base image, `provision/debian:<release>`: a stock Debian made here with debootstrap and
`docker import` (no registry is reachable from where this project is built), rebuilt when its recipe changes
(`ensure_base_image()`); and `_docker`, the docker CLI call every part of the sandbox makes."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from provision import procs
from provision.errors import RunnerError
from provision.procs import run_tool, run_tool_streamed
from provision.state import cache_lock, cache_root

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
