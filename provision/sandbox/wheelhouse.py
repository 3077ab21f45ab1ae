"""The caches a sandbox mounts, which make it faster and change nothing it does: apt's downloaded .debs, a pip cache
of its own, and the read-only wheelhouse the controller fills once per plan (`fill_wheelhouse()`), each wheel's
sha256 recorded and checked (`check_wheelhouse()`). The wheelhouse is one of the controller's artifact stores
(provision.artifacts), with uv's wheel (provision.installer) beside the plans' wheels."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from provision import procs
from provision.artifacts import Store, readable_zip
from provision.hashes import sha256_file
from provision.sandbox.image import debian_codenames
from provision.state import cache_root as cache_root  # re-exported: where tests and callers find it


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


def wheelhouse_store(wheels: Path | None = None) -> Store:
    """The wheelhouse as an artifact store (provision.artifacts: its manifest, its lock, its check); `wheels`: another
    directory than the controller's (a test's)."""
    return Store(wheels or wheelhouse_dir(), "wheelhouse")


def _vouch(path: Path) -> str | None:
    """A wheel never recorded (an earlier provision's download) is adopted when its zip directory reads."""
    return sha256_file(path) if readable_zip(path) else None


def check_wheelhouse(wheels: Path, *, log=None) -> list[str]:
    """Check every wheel in the wheelhouse against what was recorded when it came in (the store's manifest): one that
    is not whole is removed, with every plan's completion stamp (they vouched for it), so the next download fetches
    it again and no host installs it. A wheel an earlier provision left without a record is kept when its zip
    directory reads, and recorded with its sha256 (once). Returns the names removed. Under the wheelhouse's lock."""
    removed = wheelhouse_store(wheels).sweep("*.whl", vouch=_vouch, log=log)
    if removed:
        for stamp in wheels.glob(".complete-*"):
            stamp.unlink()
    return removed


def wheelhouse_whole(wheels: Path) -> bool:
    """Whether every wheel is as recorded by size and time (a read of its directory; no lock, no hashing)."""
    return wheelhouse_store(wheels).whole("*.whl")


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
    if stamp.exists() and wheelhouse_whole(wheels):
        return True
    # pip download into one folder by one command at a time (two would write the same wheel); whoever waited
    # finds the stamp, or downloads only what its plan adds.
    with wheelhouse_store(wheels).lock():
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
        store = wheelhouse_store(wheels)
        manifest = store.manifest()
        for wheel in Path(tmp).iterdir():
            if wheel.suffix == ".whl" and not (wheels / wheel.name).exists():
                # whole: pip checked it against the index's hash as it came in
                store.admit(wheel, sha256_file(wheel), manifest)
            elif not wheel.name.endswith(".whl") and not (wheels / wheel.name).exists():
                os.replace(wheel, wheels / wheel.name)
        store.write_manifest(manifest)
    stamp.write_text("\n".join(reqs) + "\n")
    return True
