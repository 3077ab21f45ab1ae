"""The verifier's CUDA kernels run on the CPU through a small CUDA-C++ emulation (tests/unit/verify_emu/), so their
index arithmetic, tiling and synchronisation are checked against NumPy on a machine without a GPU; and the
verifier's own runners (provision.verify.kernel_checks) drive them through a CPU stand-in for the driver, so their
buffers, argument order and result checks are exercised too.

The .cu files are compiled unchanged by g++ with cuda_emu.h (one std::thread per CUDA thread, a std::barrier for
__syncthreads). This says nothing about speed; the `gpu` tests and docs/verification.md cover that.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from provision.resources import kernels_dir
from provision.verify.driver import DeviceInfo
from provision.verify.expect import Expect
from provision.verify.kernel_checks import (
    KERNELS,
    run_kernels,
    run_reduce,
    run_sgemm,
    run_triad,
    sgemm_tolerance,
    triad_launch,
    triad_reference_launch,
    triad_vs_reference,
)
from provision.verify.nvrtc import CompileResult
from provision.verify.report import Report

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
    lib.emu_triad_unroll4.argtypes = lib.emu_triad.argtypes
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
    assert np.max(np.abs(c - ref)) <= sgemm_tolerance(a, b, k)


def test_sgemm_applies_alpha_and_beta(emu) -> None:
    rng = np.random.default_rng(7)
    m, n, k = 128, 256, 16
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c0 = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    c = c0.copy()
    emu.emu_sgemm(m, n, k, 0.5, _p(a), _p(b), 2.0, _p(c))
    ref = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + 2.0 * c0
    assert np.max(np.abs(c - ref)) <= sgemm_tolerance(a, b, k) + 1e-6


def test_triad_matches_numpy_with_a_grid_stride_loop(emu) -> None:
    rng = np.random.default_rng(1)
    n = 4 * 256 * 13  # more elements than grid x block: every thread loops
    b, c = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a = np.zeros_like(b)
    emu.emu_triad(_p(a), _p(b), _p(c), 3.0, n, 5)
    np.testing.assert_allclose(a, b + np.float32(3.0) * c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("launch", ["verifier", "small grid"])
def test_triad_covers_the_array_as_the_verifier_launches_it_and_any_grid_through_its_loop(emu, launch) -> None:
    rng = np.random.default_rng(5)
    n = 4 * (256 * 9 + 37)  # not a whole number of blocks: the last block's threads past the end do nothing
    b, c = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a = np.full_like(b, np.nan)
    grid = triad_launch(n // 4).grid if launch == "verifier" else 3
    assert launch != "verifier" or grid == 10
    emu.emu_triad(_p(a), _p(b), _p(c), 3.0, n, grid)
    np.testing.assert_allclose(a, b + np.float32(3.0) * c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n4", [256 * 4 * 5, 256 * 4 * 5 + 300, 100])
def test_the_reference_triad_unrolled_by_four_matches_numpy(emu, n4) -> None:
    rng = np.random.default_rng(6)
    n = 4 * n4
    b, c = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a = np.full_like(b, np.nan)
    emu.emu_triad_unroll4(_p(a), _p(b), _p(c), 3.0, n, triad_reference_launch(n4).grid)
    np.testing.assert_allclose(a, b + np.float32(3.0) * c, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("n4", "grid"),
    [
        (256 * 11, 6),  # fewer than four strides: the remainder loop only
        (256 * 6 * 4 * 3 + 256 * 5 + 7, 6),  # three unrolled rounds, then the remainder
        (256 * 4 * 3, 3),  # exactly one unrolled round per thread
    ],
)
def test_reduce_partials_sum_to_the_numpy_sum(emu, n4, grid) -> None:
    rng = np.random.default_rng(2)
    n = 4 * n4
    x = rng.random(n, dtype=np.float32)
    partial = np.zeros(grid, dtype=np.float32)
    emu.emu_reduce(_p(x), _p(partial), n, grid)
    ref = float(np.sum(x, dtype=np.float64))
    assert abs(float(np.sum(partial, dtype=np.float64)) - ref) <= 1e-4 * ref
    assert np.all(partial > 0)  # every block got a slice


# --- the runners, through a CPU stand-in for the driver ----------------------------------------------------------


class CpuDriver:
    """The part of provision.verify.driver.Driver that run_kernels uses, on host memory: a "module" is a kernel
    stem, a launch calls that kernel's emulation with the arguments the runner packed for cuLaunchKernel."""

    def __init__(self, emu: ctypes.CDLL, skip: str = "") -> None:
        self.emu, self.skip = emu, skip  # skip: a kernel whose launches do nothing (a broken kernel)
        self.buffers: dict[int, np.ndarray] = {}
        self.launched: list[str] = []
        self.grids: dict[str, int] = {}

    def open(self, index: int) -> None:
        pass

    def close(self) -> None:
        pass

    def load_module(self, image: bytes) -> str:
        return image.decode()

    def function(self, module: str, name: str) -> str:
        assert KERNELS[module][0] == name
        return module

    def unload(self, module: str) -> None:
        pass

    def alloc(self, nbytes: int) -> int:
        buf = np.zeros(nbytes, dtype=np.uint8)
        self.buffers[buf.ctypes.data] = buf
        return buf.ctypes.data

    def free(self, ptr: int) -> None:
        del self.buffers[ptr]

    def htod(self, ptr: int, array: np.ndarray) -> None:
        assert array.nbytes <= self.buffers[ptr].nbytes
        ctypes.memmove(ptr, array.ctypes.data, array.nbytes)

    def dtoh(self, array: np.ndarray, ptr: int) -> None:
        assert array.nbytes <= self.buffers[ptr].nbytes
        ctypes.memmove(array.ctypes.data, ptr, array.nbytes)

    def synchronize(self) -> None:
        pass

    def launch(self, fn: str, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[Any]) -> None:
        self.launched.append(fn)
        self.grids.setdefault(fn, grid[0])
        if fn == self.skip:
            return
        v = [a.value for a in args]
        if fn == "triad":
            self.emu.emu_triad(v[0], v[1], v[2], v[3], 4 * v[4], grid[0])
        elif fn == "triad_reference":
            self.emu.emu_triad_unroll4(v[0], v[1], v[2], v[3], 4 * v[4], grid[0])
        elif fn == "reduce":
            self.emu.emu_reduce(v[0], v[1], 4 * v[2], grid[0])
        else:
            assert grid == (v[1] // 128, v[0] // 128, 1)
            self.emu.emu_sgemm(*v)

    def time_ms(self, work, *, warmup: int, repeats: int) -> list[float]:
        for _ in range(warmup):
            work()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            work()
            times.append((time.perf_counter() - start) * 1e3)
        return times


# A tiny GPU (3 MiB): the smallest arrays (2^16 floats), 8 blocks, and the smallest SGEMM (1024^3).
SMALL = DeviceInfo(index=0, name="emulated", cc=61, sm_count=1, clock_mhz=1000.0, memory_clock_mhz=0.0,
                   bus_width_bits=0, total_memory_bytes=3 * 2**20, integrated=False)
NO_PEAKS = {"bandwidth_gbps": None, "fp32_tflops": None}


def _run(driver: CpuDriver) -> Report:
    images = {stem: CompileResult(f"{stem}.cu", "sm_61", "cubin", stem.encode(), "", 0.0) for stem in KERNELS}
    report = Report(mode="full", expect={})
    run_kernels(driver, SMALL, images, Expect(), NO_PEAKS, report, warmup=0, repeats=1)
    return report


def test_the_runners_check_correct_results_and_report_figures(emu) -> None:
    driver = CpuDriver(emu)
    report = _run(driver)
    statuses = {c.name: c.status for c in report.checks}
    details = {c.name: c.detail for c in report.checks}
    # No peak figure for an emulated device: correct results, percentages SKIPped (never a PASS without a peak).
    assert statuses == {"triad": "SKIP", "reduce": "SKIP", "sgemm-correct": "PASS", "sgemm": "SKIP",
                        "sgemm-vs-cublas": statuses["sgemm-vs-cublas"]}, details
    assert all("(results correct)" in details[k] for k in ("triad", "reduce", "sgemm")), details
    # Emulated speeds round to 0.0 GB/s: the figures are there, and the times behind them were measured.
    assert {"triad_gbps", "reduce_gbps", "sgemm_gflops"} <= report.figures.keys()
    figures = {c.name: c.figures for c in report.checks}
    assert figures["triad"]["n"] == figures["reduce"]["n"] == 1 << 16 and figures["sgemm"]["size"] == 1024
    assert all(figures[k]["best_ms"] > 0 for k in ("triad", "reduce", "sgemm"))
    assert driver.buffers == {}  # every device buffer freed
    assert driver.launched == ["triad", "reduce", "sgemm", "sgemm"]
    # The launch geometry is reported: the triad's grid covers the 2^14 float4s, the reduce's is one wave of 8
    # blocks on the one-SM device, each thread with four loads in flight.
    assert {k: figures["triad"][k] for k in ("grid", "block", "float4_per_thread")} == {
        "grid": 64, "block": 256, "float4_per_thread": 1}
    assert {k: figures["reduce"][k] for k in ("grid", "block", "float4_per_thread")} == {
        "grid": 8, "block": 256, "float4_per_thread": 4}
    assert (driver.grids["triad"], driver.grids["reduce"]) == (64, 8)  # what was launched, not only reported


@pytest.mark.parametrize(
    ("runner", "broken", "detail"),
    [(run_triad, "triad", "wrong result"), (run_reduce, "reduce", "wrong sum")],
)
def test_a_stream_kernel_that_computes_nothing_fails_its_check(emu, runner, broken: str, detail: str) -> None:
    driver = CpuDriver(emu, skip=broken)
    check = runner(driver, broken, SMALL, NO_PEAKS, Expect(), 0, 1)
    assert check.status == "FAIL" and check.detail.startswith(detail), check.detail
    assert driver.buffers == {}


def test_an_sgemm_that_computes_nothing_fails_before_it_is_timed(emu) -> None:
    driver = CpuDriver(emu, skip="sgemm")
    checks, figures = run_sgemm(driver, "sgemm", SMALL, NO_PEAKS, Expect(), 0, 1)
    assert [(c.name, c.status) for c in checks] == [("sgemm-correct", "FAIL")] and figures == {}
    assert "max error nan > tolerance" in checks[0].detail  # C was NaN-filled and never written
    assert driver.buffers == {} and driver.launched == ["sgemm"]


@pytest.mark.parametrize("broken", ["", "triad", "triad_reference"])
def test_the_triad_and_its_reference_are_timed_together_and_checked(emu, broken: str) -> None:
    """What the GPU test compares (tests/unit/test_verify_gpu.py), here for its arithmetic: both kernels run with
    their own launches on the same arrays, round after round, and a kernel that computes nothing is caught."""
    driver = CpuDriver(emu, skip=broken)
    res = triad_vs_reference(driver, "triad", "triad_reference", SMALL, warmup=0, repeats=1, rounds=2)
    assert res["correct"] is (broken == "")
    assert driver.launched == ["triad", "triad_reference"] * 2
    assert (driver.grids["triad"], driver.grids["triad_reference"]) == (64, 16)
    assert res["triad_launch"]["grid"] == 64 and res["reference_launch"]["float4_per_thread"] == 4
    assert res["ratio"] is not None and res["n"] == 1 << 16  # emulated speeds round to 0.0 GB/s, not their ratio
    assert driver.buffers == {}
