"""Find NVIDIA shared libraries the way a pip-installed stack lays them out, then CUDA_HOME, then the loader cache.

Wheel layouts (site-packages/...): CUDA 11/12 wheels put each library under nvidia/<component>/lib
(nvidia/cuda_nvrtc/lib, nvidia/cuda_runtime/lib, nvidia/cublas/lib, nvidia/cudnn/lib); CUDA 13 wheels share one
nvidia/cu13/lib. cuDNN 9 for CUDA 13 (nvidia-cudnn-cu13) still uses nvidia/cudnn/lib.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

CUDA_HOME_SUBDIRS = ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib", "targets/aarch64-linux/lib")
SYSTEM_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/local/cuda/lib64",
    "/usr/lib/aarch64-linux-gnu/tegra",
)


def site_dirs() -> list[Path]:
    """site-packages / dist-packages directories of this interpreter, in sys.path order."""
    return [Path(e) for e in sys.path if e and Path(e).name in ("site-packages", "dist-packages") and Path(e).is_dir()]


def ldconfig_paths(stem: str) -> list[Path]:
    try:
        text = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    pat = re.compile(rf"\s*({re.escape(stem)}\.so[.\d]*)\s.*=>\s*(\S+)")
    return [Path(m.group(2)) for m in map(pat.match, text.splitlines()) if m]


def find(
    stem: str,
    wheel_dirs: tuple[str, ...],
    *,
    env_var: str | None = None,
    sites: list[Path] | None = None,
    cuda_home: str | None = None,
) -> list[Path]:
    """Existing files named `<stem>.so*` (stem e.g. 'libnvrtc'), best candidates first, helper libraries excluded."""
    found: list[Path] = []
    if env_var and os.environ.get(env_var):
        found.append(Path(os.environ[env_var]))
    for site in sites if sites is not None else site_dirs():
        for sub in wheel_dirs:
            d = site / sub
            if d.is_dir():
                found.extend(sorted(d.glob(f"{stem}.so*"), key=_version_key, reverse=True))
    homes = [h for h in (cuda_home, os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if h]
    for home in homes:
        for sub in CUDA_HOME_SUBDIRS:
            d = Path(home) / sub
            if d.is_dir():
                found.extend(sorted(d.glob(f"{stem}.so*"), key=_version_key, reverse=True))
    found.extend(ldconfig_paths(stem))
    for system_dir in SYSTEM_DIRS:
        if Path(system_dir).is_dir():
            found.extend(sorted(Path(system_dir).glob(f"{stem}.so*"), key=_version_key, reverse=True))
    seen: set[Path] = set()
    result = []
    for p in found:
        # libnvrtc-builtins, libcudnn_ops etc. have other stems; 'libcublasLt' must not match 'libcublas'
        if p in seen or not p.exists() or not re.fullmatch(rf"{re.escape(stem)}\.so[.\d]*", p.name):
            continue
        seen.add(p)
        result.append(p)
    return result


def _version_key(p: Path) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", p.name.split(".so", 1)[-1]))


def load_first(paths: list[Path], sonames: tuple[str, ...] = ()) -> tuple[ctypes.CDLL, str] | None:
    """Load the first path that loads (then bare sonames through LD_LIBRARY_PATH). None when nothing loads."""
    for target in [*map(str, paths), *sonames]:
        try:
            return ctypes.CDLL(target), target
        except OSError:
            continue
    return None
