"""NVIDIA libraries other than the driver and NVRTC (driver.py, nvrtc.py): where they are, and cuBLAS through ctypes.

Owns the search for a library (the way a pip-installed stack lays them out, then CUDA_HOME, then the loader
cache), loading it, preloading cuBLAS for cuDNN, and the cuBLAS SGEMM timing the kernel checks compare with.

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
from collections.abc import Callable
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


def preload_cublas() -> None:
    """Load cuBLAS into the global symbol table. cuDNN's sub-libraries (libcudnn_ops_infer and friends) resolve
    cuBLAS through it, as they do inside a framework that has loaded it; without it cudnnGetVersion aborts the
    process on cuDNN 8."""
    for stem in ("libcublasLt", "libcublas"):
        for path in find(stem, ("nvidia/cublas/lib", "nvidia/cu13/lib")):
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue


def cublas_sgemm_ms(
    time_ms: Callable[..., list[float]], size: int, pa: int, pb: int, pc: int, warmup: int, repeats: int
) -> float | str | None:
    """Best time of cublasSgemm_v2 on the same device buffers, timed by `time_ms` (Driver.time_ms): column-major,
    so C^T = B^T A^T gives the row-major C = A B. None without a loadable cuBLAS; a string says why it did not run."""
    loaded = load_first(
        find("libcublas", ("nvidia/cu13/lib", "nvidia/cublas/lib")),
        ("libcublas.so.13", "libcublas.so.12", "libcublas.so.11"),
    )
    if loaded is None:
        return None
    lib, where = loaded
    handle = ctypes.c_void_p()
    if lib.cublasCreate_v2(ctypes.byref(handle)) != 0:
        return f"cublasCreate failed ({where})"
    try:
        alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        f32p, dptr, i32 = ctypes.POINTER(ctypes.c_float), ctypes.c_uint64, ctypes.c_int
        # handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc
        lib.cublasSgemm_v2.argtypes = [ctypes.c_void_p, i32, i32, i32, i32, i32, f32p, dptr, i32, dptr, i32, f32p,
                                       dptr, i32]
        status: list[int] = []

        def work() -> None:
            status.append(lib.cublasSgemm_v2(handle, 0, 0, size, size, size, ctypes.byref(alpha), pb, size, pa, size,
                                             ctypes.byref(beta), pc, size))

        times = time_ms(work, warmup=warmup, repeats=repeats)
        if any(status):
            return f"cublasSgemm_v2 returned status {max(status)} ({where})"
        return min(times)
    finally:
        lib.cublasDestroy_v2(handle)
