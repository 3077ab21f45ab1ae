"""The verifier's CUDA kernels run on the CPU through a small CUDA-C++ emulation (tests/unit/verify_emu/), so their
index arithmetic, tiling and synchronisation are checked against NumPy on a machine without a GPU.

The .cu files are compiled unchanged by g++ with cuda_emu.h (one std::thread per CUDA thread, a std::barrier for
__syncthreads). This says nothing about speed; the `gpu` tests and docs/verification.md cover that.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from provision.resources import kernels_dir
from provision.verify.checks import sgemm_tolerance

HERE = Path(__file__).resolve().parent / "verify_emu"


@pytest.fixture(scope="module")
def emu(tmp_path_factory) -> ctypes.CDLL:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ is not installed: the CPU emulation of the kernels needs a C++20 compiler")
    out = tmp_path_factory.mktemp("emu") / "emu.so"
    proc = subprocess.run(
        [
            cxx,
            "-std=c++20",
            "-O1",
            "-shared",
            "-fPIC",
            "-pthread",
            "-Wno-unknown-pragmas",
            f"-I{kernels_dir()}",
            f"-I{HERE}",
            str(HERE / "harness.cpp"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lib = ctypes.CDLL(str(out))
    lib.emu_sgemm.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_float,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_float,
        ctypes.c_void_p,
    ]
    lib.emu_triad.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_float,
        ctypes.c_ulonglong,
        ctypes.c_uint,
    ]
    lib.emu_reduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_uint]
    return lib


def _p(a: np.ndarray) -> int:
    return a.ctypes.data


@pytest.mark.parametrize(("m", "n", "k"), [(128, 128, 8), (256, 384, 264)])
def test_sgemm_matches_numpy_with_beta_zero_ignoring_nan_in_c(emu, m, n, k) -> None:
    rng = np.random.default_rng(m + n + k)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, dtype=np.float32)
    emu.emu_sgemm(m, n, k, 1.0, _p(a), _p(b), 0.0, _p(c))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(c - ref)) <= sgemm_tolerance(np, a, b, k)


def test_sgemm_applies_alpha_and_beta(emu) -> None:
    rng = np.random.default_rng(7)
    m, n, k = 128, 256, 16
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    c = c0.copy()
    emu.emu_sgemm(m, n, k, 0.5, _p(a), _p(b), 2.0, _p(c))
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + 2.0 * c0
    assert np.max(np.abs(c - ref)) <= sgemm_tolerance(np, a, b, k) + 1e-6


def test_triad_matches_numpy_with_a_grid_stride_loop(emu) -> None:
    rng = np.random.default_rng(1)
    n = 4 * 256 * 13  # more elements than grid x block: every thread loops
    b, c = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a = np.zeros_like(b)
    emu.emu_triad(_p(a), _p(b), _p(c), 3.0, n, 5)
    np.testing.assert_allclose(a, b + np.float32(3.0) * c, rtol=1e-6, atol=1e-6)


def test_reduce_partials_sum_to_the_numpy_sum(emu) -> None:
    rng = np.random.default_rng(2)
    n = 4 * 256 * 11
    x = rng.random(n, dtype=np.float32)
    grid = 6
    partial = np.zeros(grid, dtype=np.float32)
    emu.emu_reduce(_p(x), _p(partial), n, grid)
    ref = float(np.sum(x, dtype=np.float64))
    assert abs(float(np.sum(partial, dtype=np.float64)) - ref) <= 1e-4 * ref
    assert np.all(partial > 0)  # every block got a slice
