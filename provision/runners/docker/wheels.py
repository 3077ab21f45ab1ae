"""The image's wheels, fetched on the controller: each wheel group downloaded once into
`provision.state.cache_root()/wheels` for the image's interpreter, ABI, C library and machine (`WheelTarget`), its
files' sha256 recorded then and checked on every reuse (`fetch_wheels()`)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename

from provision import hashes
from provision.artifacts import CHANGED, OK, Store, entry
from provision.errors import RunFailed
from provision.render.docker import WheelGroup
from provision.runners.docker.engine import Progress
from provision.state import cache_root

# The oldest manylinux the wheel tags go back to (PEP 600 counts from glibc 2.5), and the legacy aliases.
MANYLINUX_FIRST_MINOR = 5


LEGACY_MANYLINUX = ("manylinux2014", "manylinux2010", "manylinux1")


@dataclass(frozen=True)
class WheelTarget:
    """What pip must download for: the image's interpreter, ABI, C library and machine."""

    python: str  # "3.13"
    glibc: tuple[int, int]
    machine: str  # x86_64

    @property
    def key(self) -> str:
        return f"cp{self.python.replace('.', '')}-glibc{self.glibc[0]}.{self.glibc[1]}-{self.machine}"

    def pip_args(self) -> list[str]:
        abi = f"cp{self.python.replace('.', '')}"
        platforms = [f"manylinux_{self.glibc[0]}_{minor}_{self.machine}"
                     for minor in range(self.glibc[1], MANYLINUX_FIRST_MINOR - 1, -1)]
        platforms += [f"{legacy}_{self.machine}" for legacy in LEGACY_MANYLINUX]
        args = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp",
                "--abi", abi, "--abi", "abi3", "--abi", "none"]
        for plat in [*platforms, "any"]:
            args += ["--platform", plat]
        return args


def wheel_dir(group: WheelGroup, target: WheelTarget) -> Path:
    key: list[Any] = [group.requirements, group.index_url, group.no_deps]
    if group.leave_out:  # only then, so the directories of groups without it keep their names
        key.append(group.leave_out)
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
    return cache_root() / "wheels" / target.key / f"{group.name}-{digest}"


def group_store(dest: Path) -> Store:
    """One wheel group's directory as an artifact store (provision.artifacts): its manifest, its lock, its check."""
    return Store(dest, f"image-wheels-{dest.parent.name}-{dest.name}")


def fetch_wheels(group: WheelGroup, target: WheelTarget, progress: Progress) -> Path:
    """Download a group's wheels once (with their dependencies, unless `group.no_deps`); later builds reuse them,
    each wheel checked against what the group's manifest recorded when it came in.

    The CUDA/cuDNN group is `no_deps`: the NVIDIA wheels declare unpinned dependencies (nvidia-cudnn-cu11 wants
    any nvidia-cublas-cu11), which the plan pins in the same group; resolving them would fetch what it did not choose.
    """
    dest = wheel_dir(group, target)
    done = dest / ".complete"
    store = group_store(dest)
    if done.exists() and (dest / hashes.HASHES_FILE).is_file() and store.whole("*.whl") and store.manifest():
        return dest
    # One filler per group at a time: a second build on this controller waits here, then finds the group complete
    # (two fillers raced on one directory, and one's clean-up deleted the other's requirements file).
    dest.parent.mkdir(parents=True, exist_ok=True)
    with store.lock():
        if done.exists() and (dest / hashes.HASHES_FILE).is_file():
            return _checked(store)
        # A directory without its hashes (an interrupted fill, or a cache from before they were recorded) is
        # downloaded again: hashes recorded now would vouch for files nobody checked.
        shutil.rmtree(dest, ignore_errors=True)
        return _fill_wheel_dir(group, target, progress, dest, done)


def _checked(store: Store) -> Path:
    """The cached wheel directory, after checking every wheel against what its manifest recorded when it was
    downloaded (provision.artifacts: size and time, the sha256 where the time moved). A group cached before the
    manifest is checked once against its SHA256SUMS in full and recorded. Under the group's lock."""
    dest = store.root
    manifest = store.manifest()
    if manifest:
        listed = set(manifest)
        bad = [p.name for p in sorted(dest.glob("*.whl")) if p.name not in listed]
        bad += [name for name in sorted(listed) if store.state(name, manifest) not in (OK, CHANGED)]
        sums = None if bad else {name: str(manifest[name]["sha256"]) for name in listed}
    else:
        bad = hashes.verify_hashes(dest)
        sums = None if bad else hashes.wheel_hashes(dest)
    if bad:
        raise RunFailed(
            f"the cached wheels in {dest} no longer match the sha256 recorded when they were downloaded "
            f"({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}): a wheel was changed or swapped; remove the "
            "directory and build again (it is downloaded anew)")
    fresh = {name: entry(dest / name, digest) for name, digest in (sums or {}).items()}
    if fresh != manifest:  # recorded now (a cache from before the manifest), or a time that moved
        store.write_manifest(fresh)
    return dest


def _fill_wheel_dir(group: WheelGroup, target: WheelTarget, progress: Progress, dest: Path, done: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "requirements.txt").write_text("".join(f"{r}\n" for r in group.requirements))
    cmd = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--no-cache-dir", "--progress-bar", "off",
           "--disable-pip-version-check", *target.pip_args(), "--requirement", str(dest / "requirements.txt")]
    if group.no_deps:
        cmd.append("--no-deps")
    if group.index_url:
        cmd += ["--index-url", group.index_url]
    progress(f"downloading wheels for {group.name}: {' '.join(group.requirements)}")
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)  # no half-filled directory left in the cache
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("ERROR")] or proc.stderr.splitlines()[-3:]
        raise RunFailed(
            f"wheels for {group.name} ({', '.join(group.requirements)}) could not be downloaded for Python "
            f"{target.python} on {target.machine} from {group.index_url or 'PyPI'}: {' | '.join(lines)[:400]}; "
            "check the pins in the plan (`provision plan --explain`), or the network (pip download exit "
            f"{proc.returncode})"
        )
    if group.leave_out:
        leave_out_wheels(dest, group, progress)
    # The image installs from requirements.lock with --require-hashes: exactly these files, byte for byte; the
    # group's manifest records the same sha256s for the controller's own check on every reuse (_checked).
    hashes.write_hashes(dest)
    group_store(dest).write_manifest({name: entry(dest / name, digest)
                                      for name, digest in hashes.wheel_hashes(dest).items()})
    size = sum(p.stat().st_size for p in dest.glob("*.whl"))
    done.write_text(json.dumps({"seconds": round(time.monotonic() - started, 1), "bytes": size}))
    progress(f"wheels for {group.name}: {size / 1e6:.0f} MB in {time.monotonic() - started:.0f}s")
    return dest


def leave_out_wheels(dest: Path, group: WheelGroup, progress: Progress) -> None:
    """Delete the group's `leave_out` wheels and rewrite requirements.txt as the exact list of the wheels kept,
    which the Dockerfile installs with --no-deps (pip has no option to skip one dependency)."""
    kept, dropped = [], []
    for wheel in sorted(dest.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if name.startswith(group.leave_out):
            dropped.append(f"{name}=={version}")
            wheel.unlink()
        else:
            kept.append(f"{name}=={version}")
    (dest / "requirements.txt").write_text("".join(f"{r}\n" for r in sorted(kept)))
    progress(f"wheels for {group.name}: left out {', '.join(dropped) or 'nothing'} "
             f"({', '.join(p + '*' for p in group.leave_out)}: the base image has its own)")
