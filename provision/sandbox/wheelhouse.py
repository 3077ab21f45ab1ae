"""The caches a sandbox mounts, which make it faster and change nothing it does: apt's downloaded .debs, a pip cache
of its own, and the read-only wheelhouse the controller fills once per plan (`fill_wheelhouse()`), each wheel's
sha256 recorded and checked (`check_wheelhouse()`)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from provision import procs
from provision.hashes import sha256_file
from provision.sandbox.image import debian_codenames
from provision.state import cache_lock
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
