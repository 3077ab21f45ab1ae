"""A STAND-IN for NVIDIA's CUDA apt repository for Debian, for the apt mechanics only (issue 41).

NVIDIA's repository cannot be reached from the machines this project is tested on. This builds, in a directory, a
flat apt repository ("deb URL /", as NVIDIA's is laid out) signed with a key made here, carrying EMPTY packages named
as NVIDIA's are: cuda-keyring (the test's key as /usr/share/keyrings/cuda-archive-keyring.gpg and the sources entry
naming it, as NVIDIA's keyring package writes them), nvidia-driver-cuda and nvidia-kernel-open-dkms at two
branches (so a pin that does not hold the planned branch shows), cuda-cudart/cuda-nvrtc. nvidia-driver-cuda carries
a stub /usr/bin/nvidia-smi that says it is a stand-in: the role asserts the file is there, nothing runs a GPU.
Nothing here says anything about NVIDIA's real packages (their dependencies, contents, scripts).
"""

from __future__ import annotations

import email.utils
import hashlib
import subprocess
from pathlib import Path

LIST_FILE = "etc/apt/sources.list.d/cuda-debian13-x86_64.list"
KEYRING_FILE = "usr/share/keyrings/cuda-archive-keyring.gpg"
STUB_SMI = "#!/bin/sh\necho 'provision test stand-in: no NVIDIA driver here'\n"


def _deb(out: Path, name: str, version: str, files: dict[str, tuple[bytes, int]], source: str | None = None) -> None:
    root = out / "build" / f"{name}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    control = (f"Package: {name}\nVersion: {version}\nArchitecture: all\n" + (f"Source: {source}\n" if source else "")
               + "Maintainer: provision tests <tests@example.invalid>\n"
               + f"Description: provision test stand-in for NVIDIA's {name} (empty)\n")
    (root / "DEBIAN" / "control").write_text(control)
    for path, (data, mode) in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root),
                    str(out / f"{name}_{version}_all.deb")], check=True, capture_output=True)


def new_key(home: Path) -> tuple[list[str], str]:
    """A new ed25519 signing key in the gnupg home `home` (made here): the gpg command line for it, its fingerprint.
    Shared with tests/support/standin_container_toolkit.py."""
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", "provision stand-in <standin@example.invalid>",
                    "ed25519", "sign", "never"], check=True, capture_output=True)
    colons = subprocess.run([*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True).stdout
    return gpg, next(line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr:"))


def sign_flat_repository(out: Path, gpg: list[str], architectures: str = "all amd64") -> None:
    """Packages, Release and InRelease (clear-signed with the key of `gpg`) for the .debs in `out`, a flat
    repository ("deb URL /"); then stops the key's gpg-agent."""
    packages = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=out, check=True,
                              capture_output=True).stdout
    (out / "Packages").write_bytes(packages)
    sha = hashlib.sha256(packages).hexdigest()
    date = email.utils.formatdate(usegmt=True)  # apt warns "Invalid 'Date' entry" without one
    release = (f"Origin: provision stand-in\nLabel: provision stand-in\nSuite: ./\nDate: {date}\n"
               f"Architectures: {architectures}\nSHA256:\n {sha} {len(packages)} Packages\n")
    (out / "Release").write_text(release)
    subprocess.run([*gpg, "--yes", "--clearsign", "--digest-algo", "SHA512", "-o", str(out / "InRelease"),
                    str(out / "Release")], check=True, capture_output=True)
    home = gpg[gpg.index("--homedir") + 1]
    subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True)  # its gpg-agent


def build(out: Path, url: str, low: str = "595", high: str = "610") -> str:
    """Build the stand-in repository in `out` for the entry `url`; returns the fingerprint of its key."""
    gpg, fpr = new_key(out.parent / (out.name + "-gnupg"))
    out.mkdir()
    key = subprocess.run([*gpg, "--export"], check=True, capture_output=True).stdout
    entry = f"deb [signed-by=/{KEYRING_FILE}] {url} /\n".encode()
    _deb(out, "cuda-keyring", "1.1-1", {KEYRING_FILE: (key, 0o644), LIST_FILE: (entry, 0o644)})
    for branch in (low, high):
        version = f"{branch}.10.01-1"
        _deb(out, "nvidia-driver-cuda", version, {"usr/bin/nvidia-smi": (STUB_SMI.encode(), 0o755)},
             source="nvidia-graphics-drivers")
        _deb(out, "nvidia-kernel-open-dkms", version, {}, source="nvidia-open-gpu-kernel-modules")
    for name in ("cuda-cudart-13-2", "cuda-nvrtc-13-2"):
        _deb(out, name, "13.2.51-1", {})
    sign_flat_repository(out, gpg)
    return fpr
