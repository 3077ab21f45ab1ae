"""The verifier's own CUDA kernels (kernels/*.cu): compiled with NVRTC, launched through the driver API, checked
against NumPy and timed. Owns the compile checks, the triad / reduce / SGEMM runs, their tolerances and the
percentage-of-peak verdict.

Tolerances:
- triad: every element |a - (b + s*c)| <= 1e-6 * |b + s*c| + 1e-6 (float32; the GPU may fuse into an FMA,
  which differs from NumPy's two roundings by at most one ulp).
- reduce: |sum_gpu - sum_float64| <= 1e-4 * sum_float64 (float32 partial sums over a few hundred elements each).
- sgemm: max|C - C64| <= 2 * K * eps32 * max|A| * max|B| (the forward-error bound of a K-term float32 dot
  product; an indexing bug gives errors of order max|C|, thousands of times larger).
Timings: CUDA events around each of `repeats` runs after `warmup` untimed runs; the best run gives the figure
(as STREAM reports), the median is kept beside it.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import libs
from .driver import CudaError, DeviceInfo, Driver
from .expect import TARGET_BANDWIDTH_PCT, TARGET_SGEMM_PCT, Expect
from .nvrtc import CompileResult, Nvrtc, NvrtcError, arch_number, cubin_sm
from .report import FAIL, PASS, SKIP, Check, Report

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
# kernel file stem -> entry points it must export
KERNELS: dict[str, tuple[str, ...]] = {"triad": ("triad",), "reduce": ("reduce_sum",), "sgemm": ("sgemm_128x128",)}
# The GPU test's reference for the triad (kernels/triad_reference.cu): compiled and timed by that test only.
REFERENCE_KERNELS: dict[str, tuple[str, ...]] = {"triad_reference": ("triad_unroll4",)}
SGEMM_TILE, SGEMM_BK, SGEMM_THREADS = 128, 8, 256
# The register-blocked SGEMM reaches 0.5-0.9x of cuBLAS on the GPUs it was tuned for; below a quarter of cuBLAS it
# is broken (a lost tile, a bank-conflicted load, spills), whatever the peak percentage says.
MIN_SGEMM_VS_CUBLAS = 0.25
BLOCK = 256
REDUCE_UNROLL = 4  # float4 loads in flight per thread in kernels/reduce.cu (REDUCE_UNROLL there)
TRIAD_UNROLL = 4  # float4s per thread of the reference kernel triad_unroll4 (kernels/triad_reference.cu)
BLOCKS_PER_SM = 8  # 2048 resident threads per SM from Kepler to Hopper: one full wave of 256-thread blocks


@dataclass(frozen=True)
class Launch:
    """The geometry a bandwidth kernel ran with, reported with its figures (`verify --json`: checks[].figures)."""

    grid: int
    block: int
    float4_per_thread: int  # float4 loads a thread has in flight per iteration
    how: str

    def figures(self) -> dict[str, Any]:
        return {"grid": self.grid, "block": self.block, "float4_per_thread": self.float4_per_thread,
                "launch": self.how}


def triad_launch(n4: int) -> Launch:
    """One float4 per thread and a grid that covers the array: as fast as PyTorch's triad on an H200 (4215 vs 4268
    GB/s, n = 2^26), where a grid capped at 8 blocks per SM moved 3914."""
    return Launch(max(1, -(-n4 // BLOCK)), BLOCK, 1, "grid covers the array, one float4 per thread")


def triad_reference_launch(n4: int) -> Launch:
    return Launch(max(1, -(-n4 // (BLOCK * TRIAD_UNROLL))), BLOCK, TRIAD_UNROLL,
                  f"grid covers the array, {TRIAD_UNROLL} float4 per thread")


def reduce_launch(n4: int, dev: DeviceInfo) -> Launch:
    """One wave of blocks (8 per SM, few partial sums to add on the host), each thread with REDUCE_UNROLL loads in
    flight; a smaller array gets a grid that covers it."""
    grid = max(1, min(-(-n4 // (BLOCK * REDUCE_UNROLL)), dev.sm_count * BLOCKS_PER_SM))
    return Launch(grid, BLOCK, REDUCE_UNROLL,
                  f"{BLOCKS_PER_SM} blocks per SM at most, grid-stride, {REDUCE_UNROLL} float4 loads in flight per thread")


def kernel_source(stem: str) -> str:
    return (KERNEL_DIR / f"{stem}.cu").read_text()


# --------------------------------------------------------------------------------------------------------------
# compiling
# --------------------------------------------------------------------------------------------------------------


def compile_kernels(nv: Nvrtc, arch: str) -> tuple[list[Check], dict[str, CompileResult]]:
    """Compile every kernel for `arch`. One check per kernel; a refusal is a FAIL carrying NVRTC's reason."""
    checks, images = [], {}
    note = ""
    if arch.startswith("sm_") and not nv.can_cubin:
        # Same-release driver (JetPack ships NVRTC and driver together), so the PTX JIT-compiles.
        arch, note = "compute_" + arch[3:], f" (NVRTC {nv.version_str} has no CUBIN output: PTX for the driver to JIT)"
    for stem, entries in KERNELS.items():
        name = f"compile:{stem}"
        try:
            opts = ("--ptxas-options=-v",) if arch.startswith("sm_") else ()
            res = nv.compile(kernel_source(stem), arch, name=f"{stem}.cu", options=opts)
        except NvrtcError as exc:
            first_log = exc.log.splitlines()[0] if exc.log else ""
            checks.append(Check(name, FAIL, f"{exc}" + (f": {first_log}" if first_log else "")))
            continue
        if res.kind == "cubin" and cubin_sm(res.image) != arch_number(arch):
            checks.append(
                Check(
                    name,
                    FAIL,
                    f"NVRTC returned {len(res.image)} bytes that are not a CUBIN for {arch} "
                    f"(ELF header says sm_{cubin_sm(res.image)})",
                )
            )
            continue
        if res.kind == "ptx" and not all(f".entry {e}" in res.image.decode(errors="replace") for e in entries):
            checks.append(Check(name, FAIL, f"PTX lacks entry point(s) {', '.join(entries)}"))
            continue
        figures: dict[str, Any] = {
            "arch": arch,
            "kind": res.kind,
            "bytes": len(res.image),
            "seconds": round(res.seconds, 3),
            **ptxas_usage(res.log),
        }
        warnings = [ln for ln in res.log.splitlines() if "warning" in ln.lower()]
        usage = (
            f", {figures['registers']} registers, {figures['spill_bytes']} bytes spilled"
            if "registers" in figures
            else ""
        )
        warn = (f"; NVRTC: {warnings[0].strip()}" if warnings else "") + note
        checks.append(
            Check(
                name,
                PASS,
                f"{res.kind} for {arch}, {len(res.image)} bytes in {res.seconds:.2f} s{usage}{warn}",
                figures,
            )
        )
        images[stem] = res
    return checks, images


def ptxas_usage(log: str) -> dict[str, int]:
    """Registers per thread and spilled bytes from ptxas -v output (the SGEMM's register blocking must not spill)."""
    out: dict[str, int] = {}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        out["registers"] = int(m.group(1))
        out["spill_bytes"] = sum(int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return out


# --------------------------------------------------------------------------------------------------------------
# running on the GPU
# --------------------------------------------------------------------------------------------------------------


def run_kernels(
    drv: Driver,
    dev: DeviceInfo,
    images: dict[str, CompileResult],
    expect: Expect,
    peaks: dict[str, Any],
    report: Report,
    warmup: int,
    repeats: int,
) -> None:
    """Load every compiled kernel on `dev`, run triad, reduce and SGEMM (with the cuBLAS comparison), and add their
    checks and headline figures to `report`. A kernel that does not load or run is a FAIL, never an exception."""
    drv.open(dev.index)
    modules = []
    try:
        fns = {}
        for stem, res in images.items():
            try:
                mod = drv.load_module(res.image)
            except CudaError as exc:
                report.add(Check(f"load:{stem}", FAIL, f"{res.kind} for {res.arch} did not load: {exc}"))
                continue
            modules.append(mod)
            fns[stem] = drv.function(mod, KERNELS[stem][0])
        if len(fns) < len(KERNELS):
            return
        for stem, runner in (("triad", run_triad), ("reduce", run_reduce)):
            try:
                chk = runner(drv, fns[stem], dev, peaks, expect, warmup, repeats)
            except CudaError as exc:
                report.add(Check(stem, FAIL, str(exc)))
                continue
            report.add(chk)
            report.figures.update({k: v for k, v in chk.figures.items() if k.startswith(stem)})
        try:
            sg_checks, figs = run_sgemm(drv, fns["sgemm"], dev, peaks, expect, warmup, repeats)
        except CudaError as exc:
            report.add(Check("sgemm", FAIL, str(exc)))
        else:
            for c in sg_checks:
                report.add(c)
                report.figures.update({k: v for k, v in c.figures.items() if k.startswith(("sgemm_", "cublas_"))})
            report.figures.update({k: v for k, v in figs.items() if k in ("sgemm_vs_cublas", "cublas_gflops")})
        report.environment["cublas"] = "present" if "cublas_gflops" in report.figures else None
    finally:
        for mod in modules:
            drv.unload(mod)
        drv.close()


@contextmanager
def device_buffers(drv: Driver, *arrays: np.ndarray) -> Iterator[list[int]]:
    """Device memory the size of each array (not copied), all freed on the way out, also when an allocation fails."""
    ptrs: list[int] = []
    try:
        for a in arrays:
            ptrs.append(drv.alloc(a.nbytes))
        yield ptrs
    finally:
        for p in ptrs:
            drv.free(p)


def _ptr(p: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(p)


def stream_elements(dev: DeviceInfo, cap: int = 1 << 26) -> int:
    """Elements per array: 2^26 floats (256 MiB, far beyond any L2) or what fits three arrays in a quarter of memory."""
    fit = dev.total_memory_bytes // 4 // (3 * 4)
    n = min(cap, fit)
    return max(1 << 16, n - n % (4 * BLOCK))


def _pct_check(
    name: str,
    ok_values: bool,
    value: float,
    unit: str,
    peak: float | None,
    minimum: float,
    target: float,
    bad_detail: str,
    figures: dict[str, Any],
    key: str,
) -> Check:
    figures[key] = round(value, 1)
    if not ok_values:
        return Check(name, FAIL, bad_detail, figures)
    if not peak:
        return Check(
            name,
            SKIP,
            f"{value:.1f} {unit} (results correct); % of peak not computed: no peak figure for this device "
            "(pass --profile, or add the GPU to the compat database)",
            figures,
        )
    pct = 100 * value / peak
    figures[f"{key.rsplit('_', 1)[0]}_pct_peak"] = round(pct, 1)
    detail = f"{value:.1f} {unit} = {pct:.1f}% of peak {peak:g} (minimum {minimum:g}%, design target {target:g}%)"
    return Check(name, PASS if pct >= minimum else FAIL, detail, figures)


def _stream(
    drv: Driver,
    fn: ctypes.c_void_p,
    grid: int,
    arrays: list[np.ndarray],
    out: np.ndarray,
    scalars: list[Any],
    warmup: int,
    repeats: int,
) -> list[float]:
    """Time a bandwidth kernel whose arguments are `arrays` (device pointers, in order) then `scalars`: every array
    but `out` is copied in, `out` is copied back after the timed runs. Returns the per-run times in ms."""
    with device_buffers(drv, *arrays) as ptrs:
        for a, p in zip(arrays, ptrs, strict=True):
            if a is not out:
                drv.htod(p, a)
        args = [*map(_ptr, ptrs), *scalars]
        times = drv.time_ms(lambda: drv.launch(fn, (grid, 1, 1), (BLOCK, 1, 1), args), warmup=warmup, repeats=repeats)
        drv.dtoh(out, next(p for a, p in zip(arrays, ptrs, strict=True) if a is out))
    return times


def _bandwidth_check(
    name: str, ok: bool, bytes_moved: int, times: list[float], n: int, peaks: dict[str, Any], expect: Expect, bad: str,
    launch: Launch,
) -> Check:
    """GB/s of the best run against the peak bandwidth; figures `<name>_gbps` and `<name>_pct_peak`, and the launch."""
    best = min(times)
    figs = {"n": n, "best_ms": round(best, 4), "median_ms": round(float(np.median(times)), 4), "repeats": len(times),
            **launch.figures()}
    gbps = bytes_moved / (best / 1e3) / 1e9
    return _pct_check(name, ok, gbps, "GB/s", peaks["bandwidth_gbps"], expect.min_bandwidth_pct, TARGET_BANDWIDTH_PCT,
                      bad, figs, f"{name}_gbps")


def run_triad(
    drv: Driver, fn: ctypes.c_void_p, dev: DeviceInfo, peaks: dict[str, Any], expect: Expect, warmup: int, repeats: int
) -> Check:
    """STREAM triad a = b + s*c: three arrays move per run."""
    n = stream_elements(dev)
    rng = np.random.default_rng(1)
    b = rng.random(n, dtype=np.float32)
    c = rng.random(n, dtype=np.float32)
    s = np.float32(3.0)
    a = np.empty_like(b)
    n4 = n // 4
    scalars = [ctypes.c_float(float(s)), ctypes.c_uint64(n4)]
    launch = triad_launch(n4)
    times = _stream(drv, fn, launch.grid, [a, b, c], a, scalars, warmup, repeats)
    ref = b + s * c
    ok = bool(np.allclose(a, ref, rtol=1e-6, atol=1e-6))
    bad = f"wrong result: max |a - (b + s*c)| = {float(np.max(np.abs(a - ref))):.3g}"
    return _bandwidth_check("triad", ok, 3 * n * 4, times, n, peaks, expect, bad, launch)


def run_reduce(
    drv: Driver, fn: ctypes.c_void_p, dev: DeviceInfo, peaks: dict[str, Any], expect: Expect, warmup: int, repeats: int
) -> Check:
    """Sum of one array into a partial sum per block (added up on the host): one array moves per run."""
    n = stream_elements(dev)
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    n4 = n // 4
    launch = reduce_launch(n4, dev)
    partial = np.empty(launch.grid, dtype=np.float32)
    times = _stream(drv, fn, launch.grid, [x, partial], partial, [ctypes.c_uint64(n4)], warmup, repeats)
    got = float(np.sum(partial, dtype=np.float64))
    ref = float(np.sum(x, dtype=np.float64))
    ok = abs(got - ref) <= 1e-4 * abs(ref)
    bad = f"wrong sum: GPU {got:.6g}, NumPy float64 {ref:.6g} (relative error {abs(got - ref) / ref:.2g} > 1e-4)"
    return _bandwidth_check("reduce", ok, n * 4, times, n, peaks, expect, bad, launch)


def triad_vs_reference(
    drv: Driver, triad_fn: Any, reference_fn: Any, dev: DeviceInfo, warmup: int, repeats: int, rounds: int = 3
) -> dict[str, Any]:
    """The verifier's triad and the reference kernel (kernels/triad_reference.cu) timed in the same run on the same
    arrays, alternately for `rounds` rounds so that a clock or thermal drift hits both; the best GB/s of each, their
    ratio, both launches, and whether both computed a = b + s*c. For the GPU test (and a GPU machine's own checks)."""
    n = stream_elements(dev)
    n4 = n // 4
    rng = np.random.default_rng(1)
    b, c = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    a = np.empty_like(b)
    ref = b + np.float32(3.0) * c
    kernels = {"triad": (triad_fn, triad_launch(n4)), "reference": (reference_fn, triad_reference_launch(n4))}
    best = dict.fromkeys(kernels, 0.0)
    correct = True
    with device_buffers(drv, a, b, c) as ptrs:
        drv.htod(ptrs[1], b)
        drv.htod(ptrs[2], c)
        args = [*map(_ptr, ptrs), ctypes.c_float(3.0), ctypes.c_uint64(n4)]
        poison = np.full_like(a, np.nan)  # each kernel's result is its own: `a` is reset before it runs
        for _ in range(rounds):
            for name, (fn, launch) in kernels.items():
                drv.htod(ptrs[0], poison)
                times = drv.time_ms(lambda fn=fn, launch=launch: drv.launch(fn, (launch.grid, 1, 1), (launch.block, 1, 1),
                                                                             args), warmup=warmup, repeats=repeats)
                best[name] = max(best[name], 3 * n * 4 / (min(times) / 1e3) / 1e9)
                drv.dtoh(a, ptrs[0])
                correct = correct and bool(np.allclose(a, ref, rtol=1e-6, atol=1e-6))
    return {
        "n": n,
        "triad_gbps": round(best["triad"], 1),
        "reference_gbps": round(best["reference"], 1),
        "ratio": round(best["triad"] / best["reference"], 3) if best["reference"] else None,
        "triad_launch": kernels["triad"][1].figures(),
        "reference_launch": kernels["reference"][1].figures(),
        "correct": correct,
    }


def sgemm_tolerance(a: np.ndarray, b: np.ndarray, k: int) -> float:
    return 2 * k * float(np.finfo(np.float32).eps) * float(np.max(np.abs(a))) * float(np.max(np.abs(b)))


def _sgemm_launch(
    drv: Driver, fn: ctypes.c_void_p, m: int, n: int, k: int, pa: int, pb: int, pc: int
) -> Callable[[], None]:
    grid = (n // SGEMM_TILE, m // SGEMM_TILE, 1)
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    args = [ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), alpha, _ptr(pa), _ptr(pb), beta, _ptr(pc)]
    return lambda: drv.launch(fn, grid, (SGEMM_THREADS, 1, 1), args)


def sgemm_size(dev: DeviceInfo, fp32_tflops: float | None) -> int:
    """4096 where the GPU is fast enough for a run to take milliseconds; smaller on small or unknown GPUs."""
    if dev.total_memory_bytes < 2 * 2**30 or (fp32_tflops is not None and fp32_tflops < 1):
        return 1024
    if fp32_tflops is None or fp32_tflops < 5:
        return 2048
    return 4096


def _sgemm_correct(drv: Driver, fn: ctypes.c_void_p, rng: np.random.Generator) -> Check:
    """Correctness on a non-square problem, every element compared with NumPy in float64."""
    m, n, k = 256, 384, 264
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, dtype=np.float32)  # beta = 0 must not read C
    with device_buffers(drv, a, b, c) as (pa, pb, pc):
        drv.htod(pa, a)
        drv.htod(pb, b)
        drv.htod(pc, c)
        _sgemm_launch(drv, fn, m, n, k, pa, pb, pc)()
        drv.synchronize()
        drv.dtoh(c, pc)
    err = float(np.max(np.abs(c.astype(np.float64) - a.astype(np.float64) @ b.astype(np.float64))))
    tol = sgemm_tolerance(a, b, k)
    if not np.isfinite(err) or err > tol:
        return Check("sgemm-correct", FAIL, f"{m}x{n}x{k}: max error {err:.3g} > tolerance {tol:.3g}")
    return Check(
        "sgemm-correct",
        PASS,
        f"{m}x{n}x{k}: max error {err:.3g} <= {tol:.3g} vs NumPy float64",
        {"max_error": err, "tolerance": tol},
    )


def _sgemm_vs_cublas(cublas_ms: float | str | None, gflops: float, size: int, figs: dict[str, Any]) -> Check:
    """The kernel's GFLOPS against cuBLAS's on the same problem (skipped without a usable cuBLAS); adds the
    figures to figs."""
    if cublas_ms is None:
        return Check("sgemm-vs-cublas", SKIP, "libcublas not found or not usable: no cuBLAS comparison")
    if isinstance(cublas_ms, str):
        return Check("sgemm-vs-cublas", SKIP, cublas_ms)
    cublas_gflops = 2 * size**3 / (cublas_ms / 1e3) / 1e9
    ratio = gflops / cublas_gflops
    figs.update(cublas_gflops=round(cublas_gflops, 1), sgemm_vs_cublas=round(ratio, 3))
    return Check(
        "sgemm-vs-cublas",
        PASS if ratio >= MIN_SGEMM_VS_CUBLAS else FAIL,
        f"cuBLAS {cublas_gflops:.1f} GFLOPS; this kernel {ratio:.2f}x of it (floor {MIN_SGEMM_VS_CUBLAS:g}x)",
        {"cublas_gflops": round(cublas_gflops, 1), "ratio": round(ratio, 3)},
    )


def run_sgemm(
    drv: Driver, fn: ctypes.c_void_p, dev: DeviceInfo, peaks: dict[str, Any], expect: Expect, warmup: int, repeats: int
) -> tuple[list[Check], dict[str, Any]]:
    """The SGEMM kernel: correct on a non-square problem, then timed on a square one (spot-checked on sampled rows)
    against the GPU's FP32 peak and against cuBLAS."""
    rng = np.random.default_rng(3)
    correct = _sgemm_correct(drv, fn, rng)
    checks: list[Check] = [correct]
    if correct.status == FAIL:
        return checks, {}

    # performance on a square problem, spot-checked on sampled rows
    size = sgemm_size(dev, peaks["fp32_tflops"])
    a = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    b = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    c = np.empty((size, size), dtype=np.float32)
    figs: dict[str, Any] = {"size": size, "repeats": repeats}
    with device_buffers(drv, a, b, c) as (pa, pb, pc):
        drv.htod(pa, a)
        drv.htod(pb, b)
        times = drv.time_ms(_sgemm_launch(drv, fn, size, size, size, pa, pb, pc), warmup=warmup, repeats=repeats)
        drv.dtoh(c, pc)
        cublas_ms = libs.cublas_sgemm_ms(drv.time_ms, size, pa, pb, pc, warmup, repeats)
    rows = rng.choice(size, 32, replace=False)
    err = float(np.max(np.abs(c[rows].astype(np.float64) - a[rows].astype(np.float64) @ b.astype(np.float64))))
    tol = sgemm_tolerance(a, b, size)
    best = min(times)
    gflops = 2 * size**3 / (best / 1e3) / 1e9
    figs.update(best_ms=round(best, 4), median_ms=round(float(np.median(times)), 4), max_error_sampled=err)
    peak = peaks["fp32_tflops"] * 1e3 if peaks["fp32_tflops"] else None
    bad = f"{size}^3: sampled max error {err:.3g} > tolerance {tol:.3g}"
    checks.append(
        _pct_check(
            "sgemm",
            bool(np.isfinite(err) and err <= tol),
            gflops,
            "GFLOPS",
            peak,
            expect.min_sgemm_pct,
            TARGET_SGEMM_PCT,
            bad,
            figs,
            "sgemm_gflops",
        )
    )
    checks.append(_sgemm_vs_cublas(cublas_ms, gflops, size, figs))
    return checks, figs
