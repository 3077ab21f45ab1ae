"""The checks, in the order they run, and `run()` which puts them into a Report.

Tolerances (stated once, used below):
- triad: every element |a - (b + s*c)| <= 1e-6 * |b + s*c| + 1e-6 (float32; the GPU may fuse into an FMA,
  which differs from NumPy's two roundings by at most one ulp).
- reduce: |sum_gpu - sum_float64| <= 1e-4 * sum_float64 (float32 partial sums over a few hundred elements each).
- sgemm: max|C - C64| <= 2 * K * eps32 * max|A| * max|B| (the forward-error bound of a K-term float32 dot
  product; an indexing bug gives errors of order max|C|, thousands of times larger).
- framework matmul: 64x64 float32 on the GPU vs NumPy float64, |diff| <= 1e-3 (frameworks may use TF32).
Timings: CUDA events around each of `repeats` runs after `warmup` untimed runs; the best run gives the figure
(as STREAM reports), the median is kept beside it.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import fatbin, libs
from .driver import CudaError, DeviceInfo, Driver, DriverNotFound, format_cuda_version
from .expect import TARGET_BANDWIDTH_PCT, TARGET_SGEMM_PCT, Expect
from .nvrtc import CompileResult, Nvrtc, NvrtcError, arch_number, choose_target, cubin_sm
from .report import FAIL, PASS, SKIP, Check, Report

KERNEL_DIR = Path(__file__).resolve().parent / "kernels"
# kernel file stem -> entry points it must export
KERNELS: dict[str, tuple[str, ...]] = {"triad": ("triad",), "reduce": ("reduce_sum",), "sgemm": ("sgemm_128x128",)}
SGEMM_TILE, SGEMM_BK, SGEMM_THREADS = 128, 8, 256
# The register-blocked SGEMM reaches 0.5-0.9x of cuBLAS on the GPUs it was tuned for; below a quarter of cuBLAS it
# is broken (a lost tile, a bank-conflicted load, spills), whatever the peak percentage says.
MIN_SGEMM_VS_CUBLAS = 0.25
BLOCK = 256
NO_DRIVER = (
    "no NVIDIA driver found (libcuda.so.1 not loadable): exit 2, use --compile-only to check the toolchain "
    "without a GPU"
)

NO_ARCH = "no architecture to compile for: pass --arch sm_XY or --profile (there is no GPU to ask)"

PeakLookup = Callable[[DeviceInfo], "tuple[float | None, float | None] | None"]


def kernel_source(stem: str) -> str:
    return (KERNEL_DIR / f"{stem}.cu").read_text()


# --------------------------------------------------------------------------------------------------------------
# toolchain
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
    import re

    out: dict[str, int] = {}
    m = re.search(r"Used (\d+) registers", log)
    if m:
        out["registers"] = int(m.group(1))
        out["spill_bytes"] = sum(int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))
    return out


def _versions_match(found: str, expected: str) -> bool:
    """'12.6' matches '12.6' and '12.6.85'; '9.10.2' matches '9.10.2'; compare on the expected's precision."""
    f, e = found.split("."), expected.split(".")
    return f[: len(e)] == e[: len(f)] and len(f) >= min(len(e), 2)


def check_nvrtc(nv: Nvrtc, expect: Expect) -> Check:
    ver = nv.version_str
    figures = {"version": ver, "path": nv.path}
    if expect.cuda_version and not _versions_match(ver, expect.cuda_version):
        return Check("nvrtc", FAIL, f"NVRTC {ver} at {nv.path}, planned CUDA {expect.cuda_version}", figures)
    planned = f" (planned {expect.cuda_version})" if expect.cuda_version else ""
    return Check("nvrtc", PASS, f"NVRTC {ver}{planned} from {nv.path}", figures)


def check_cuda_runtime(expect: Expect) -> Check:
    paths = libs.find("libcudart", ("nvidia/cu13/lib", "nvidia/cuda_runtime/lib"))
    loaded = libs.load_first(paths, ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"))
    if loaded is None:
        status = FAIL if expect.cuda_version else SKIP
        return Check("cuda-runtime", status, "libcudart not found (site-packages nvidia/*/lib, CUDA_HOME, ldconfig)",
                     absent=True)
    lib, where = loaded
    v = ctypes.c_int()
    rc = lib.cudaRuntimeGetVersion(ctypes.byref(v))
    how = "cudaRuntimeGetVersion"
    if rc == 0:
        ver = format_cuda_version(v.value)
    else:
        # CUDA 11's runtime answers cudaErrorInsufficientDriver (35) without a driver and cudaErrorNoDevice (100)
        # with a driver but no GPU (CUDA 12 answers both ways):
        # read the version of the package that installed the library instead.
        from_package = _runtime_version_from_package()
        if from_package is None:
            return Check("cuda-runtime", FAIL, f"cudaRuntimeGetVersion failed in {where} (error {rc})")
        ver = from_package
        how = f"package metadata (cudaRuntimeGetVersion: error {rc} without a driver)"
    figures = {"version": ver, "path": where, "read_from": how}
    if expect.cuda_version and not _versions_match(ver, expect.cuda_version):
        return Check("cuda-runtime", FAIL, f"CUDA runtime {ver} at {where}, planned {expect.cuda_version}", figures)
    return Check("cuda-runtime", PASS, f"CUDA runtime {ver} from {where}", figures)


def decode_cudnn_version(v: int) -> str:
    """cudnnGetVersion(): 9.x encodes major*10000 + minor*100 + patch, 8.x and older major*1000 + minor*100 + patch."""
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def _runtime_version_from_package() -> str | None:
    """major.minor of the CUDA runtime wheel in this environment, e.g. nvidia-cuda-runtime-cu11 11.7.99 -> 11.7."""
    from importlib import metadata

    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"):
        try:
            parts = metadata.version(dist).split(".")
        except metadata.PackageNotFoundError:
            continue
        return ".".join(parts[:2])
    return None


def _preload_cublas() -> None:
    """cuDNN's sub-libraries (libcudnn_ops_infer and friends) resolve cuBLAS through the global symbol table, as
    they do inside a framework that has loaded it; without it cudnnGetVersion aborts the process on cuDNN 8."""
    for stem in ("libcublasLt", "libcublas"):
        for path in libs.find(stem, ("nvidia/cublas/lib", "nvidia/cu13/lib")):
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue


def check_cudnn(expect: Expect) -> Check:
    _preload_cublas()
    paths = libs.find("libcudnn", ("nvidia/cudnn/lib", "nvidia/cu13/lib"))
    loaded = libs.load_first(paths, ("libcudnn.so.9", "libcudnn.so.8"))
    if loaded is None:
        if expect.cudnn_version:
            return Check("cudnn", FAIL, f"cuDNN {expect.cudnn_version} planned but libcudnn is not loadable", absent=True)
        return Check("cudnn", SKIP, "no cuDNN planned and none found")
    lib, where = loaded
    lib.cudnnGetVersion.restype = ctypes.c_size_t
    ver = decode_cudnn_version(lib.cudnnGetVersion())
    figures = {"version": ver, "path": where}
    if expect.cudnn_version and not _versions_match(ver, expect.cudnn_version):
        return Check("cudnn", FAIL, f"cuDNN {ver} at {where}, planned {expect.cudnn_version}", figures)
    return Check("cudnn", PASS, f"cuDNN {ver} loadable from {where}", figures)


# --------------------------------------------------------------------------------------------------------------
# driver and device
# --------------------------------------------------------------------------------------------------------------


def nvml_driver_version() -> str | None:
    """The driver's version string ('550.163.01') from NVML, else nvidia-smi, else /proc/driver/nvidia/version."""
    loaded = libs.load_first([], ("libnvidia-ml.so.1",))
    if loaded is not None:
        lib, _ = loaded
        init = getattr(lib, "nvmlInit_v2", None) or getattr(lib, "nvmlInit", None)
        if init is not None and init() == 0:
            buf = ctypes.create_string_buffer(96)
            try:
                if lib.nvmlSystemGetDriverVersion(buf, 96) == 0:
                    return buf.value.decode()
            finally:
                lib.nvmlShutdown()
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    import re

    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9]+\.[0-9.]+)", text)
    return m.group(1) if m else None


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def check_driver(driver_version: str | None, driver_cuda: int, expect: Expect) -> Check:
    cuda = format_cuda_version(driver_cuda)
    figures: dict[str, Any] = {"version": driver_version, "cuda": cuda}
    if driver_version is None:
        if expect.driver_branch:
            return Check(
                "driver",
                FAIL,
                f"driver version unreadable (no NVML, nvidia-smi or /proc/driver/nvidia); "
                f"planned branch {expect.driver_branch}",
                figures,
            )
        return Check("driver", PASS, f"driver API reports CUDA {cuda} (version string unreadable)", figures)
    branch = driver_version.split(".")[0]
    figures["branch"] = branch
    problems = []
    if expect.driver_branch and branch != expect.driver_branch:
        problems.append(f"branch {branch}, planned {expect.driver_branch}")
    if expect.driver_min_version and _vtuple(driver_version) < _vtuple(expect.driver_min_version):
        problems.append(f"older than {expect.driver_min_version}, which CUDA {expect.cuda_version} needs")
    if problems:
        return Check("driver", FAIL, f"driver {driver_version}: " + "; ".join(problems), figures)
    planned = f" (planned branch {expect.driver_branch})" if expect.driver_branch else ""
    return Check("driver", PASS, f"driver {driver_version}{planned}, CUDA {cuda} API", figures)


def check_device(dev: DeviceInfo, expect: Expect) -> Check:
    figures = {
        "name": dev.name,
        "compute_capability": dev.compute_capability,
        "sm_count": dev.sm_count,
        "memory_gb": round(dev.total_memory_bytes / 2**30, 1),
    }
    want = expect.compute_capability or (
        f"{arch_number(expect.target_arch) // 10}.{arch_number(expect.target_arch) % 10}"
        if expect.target_arch
        else None
    )
    if want and dev.compute_capability != want:
        return Check(
            "device",
            FAIL,
            f"{dev.name} is compute capability {dev.compute_capability}, planned {want} "
            f"({expect.gpu_model or 'profile GPU'})",
            figures,
        )
    other = not_the_planned_model(dev, expect)
    if other:
        return Check("device", FAIL, f"{dev.name} is not the planned {expect.gpu_model}: {other}", figures)
    return Check(
        "device",
        PASS,
        f"{dev.name}, compute capability {dev.compute_capability}, {dev.sm_count} SMs, {figures['memory_gb']} GiB",
        figures,
    )


MODEL_TOLERANCE = 0.15  # memory or DRAM bandwidth further than this from the plan's model: another model


def not_the_planned_model(dev: DeviceInfo, expect: Expect) -> str | None:
    """Why the device that answered is another model than the plan's (an H100 PCIe where the plan says SXM: same
    compute capability, 2.0 vs 3.35 TB/s), from its own memory size and memory clock x bus width; None when it
    matches or the plan says nothing to compare with."""
    why = []
    mem_gb = dev.total_memory_bytes / 1e9
    if expect.memory_gb and abs(mem_gb - expect.memory_gb) > MODEL_TOLERANCE * expect.memory_gb:
        why.append(f"{mem_gb:.1f} GB of memory, the plan's model has {expect.memory_gb:g} GB")
    bw = device_peak_bandwidth(dev)
    if bw and expect.bandwidth_gbps and abs(bw - expect.bandwidth_gbps) > MODEL_TOLERANCE * expect.bandwidth_gbps:
        why.append(f"{bw:.0f} GB/s peak DRAM bandwidth (memory clock x bus width), the plan's model has "
                   f"{expect.bandwidth_gbps:g} GB/s")
    return "; ".join(why) or None


def device_peak_bandwidth(dev: DeviceInfo) -> float | None:
    """Theoretical DRAM bandwidth from the device's own attributes: memory clock x 2 (double data rate) x bus width.
    Matches the data sheets (GTX 1070 256 GB/s, one K80 GK210 240 GB/s, H100 SXM 3352 GB/s)."""
    if dev.memory_clock_mhz <= 0 or dev.bus_width_bits <= 0:
        return None
    return dev.memory_clock_mhz * 1e6 * 2 * dev.bus_width_bits / 8 / 1e9


def peaks_for(dev: DeviceInfo, expect: Expect, lookup: PeakLookup | None) -> dict[str, Any]:
    """Peak bandwidth and FP32 of THE DEVICE THAT ANSWERED, with where each figure came from.

    The plan's peaks count only when the device is the plan's model (compute capability, memory and DRAM bandwidth
    agree); otherwise that model's peaks are looked up in the database by the device's own name, and without a row
    they are None (the percentage checks then SKIP). The database lists dual-GPU boards (K80, M60) per GPU device,
    as CUDA shows them, so no figure is ever divided by a GPU count here.
    """
    dev_bw = device_peak_bandwidth(dev)
    same_model = (expect.compute_capability in (None, dev.compute_capability)) and not not_the_planned_model(dev, expect)
    bw = tf = None
    src = "none"
    if same_model and (expect.bandwidth_gbps or expect.fp32_tflops):
        bw, tf, src = expect.bandwidth_gbps, expect.fp32_tflops, expect.source
    elif lookup is not None:
        found = lookup(dev)
        if found:
            bw, tf = found
            src = f"compat database, the device's own row ({dev.name})"
    if bw is None and dev_bw is not None:
        bw, src = dev_bw, (src + "; " if tf else "") + "bandwidth from device attributes (memory clock x bus width)"
    return {
        "bandwidth_gbps": bw,
        "fp32_tflops": tf,
        "source": src,
        "device_bandwidth_gbps": round(dev_bw, 1) if dev_bw else None,
    }


# --------------------------------------------------------------------------------------------------------------
# kernels on the GPU
# --------------------------------------------------------------------------------------------------------------


def _grid_for(n4: int, dev: DeviceInfo) -> int:
    return max(1, min((n4 + BLOCK - 1) // BLOCK, dev.sm_count * 8))


def stream_elements(dev: DeviceInfo, cap: int = 1 << 26) -> int:
    """Elements per array: 2^26 floats (256 MiB, far beyond any L2) or what fits three arrays in a quarter of memory."""
    fit = dev.total_memory_bytes // 4 // (3 * 4)
    n = min(cap, fit)
    return max(1 << 16, n - n % (4 * BLOCK))


def _ptr(p: int) -> ctypes.c_uint64:
    return ctypes.c_uint64(p)


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


def run_triad(
    drv: Driver, fn, dev: DeviceInfo, np, peaks: dict[str, Any], expect: Expect, warmup: int, repeats: int
) -> tuple[Check, dict[str, Any]]:
    n = stream_elements(dev)
    rng = np.random.default_rng(1)
    b = rng.random(n, dtype=np.float32)
    c = rng.random(n, dtype=np.float32)
    s = np.float32(3.0)
    a = np.empty_like(b)
    pa, pb, pc = drv.alloc(a.nbytes), drv.alloc(b.nbytes), drv.alloc(c.nbytes)
    try:
        drv.htod(pb, b)
        drv.htod(pc, c)
        n4 = n // 4
        grid = _grid_for(n4, dev)
        args = [_ptr(pa), _ptr(pb), _ptr(pc), ctypes.c_float(s), ctypes.c_uint64(n4)]
        times = drv.time_ms(lambda: drv.launch(fn, (grid, 1, 1), (BLOCK, 1, 1), args), warmup=warmup, repeats=repeats)
        drv.dtoh(a, pa)
    finally:
        for p in (pa, pb, pc):
            drv.free(p)
    ref = b + s * c
    ok = bool(np.allclose(a, ref, rtol=1e-6, atol=1e-6))
    best = min(times)
    gbps = 3 * n * 4 / (best / 1e3) / 1e9
    figs = {"n": n, "best_ms": round(best, 4), "median_ms": round(float(np.median(times)), 4), "repeats": repeats}
    bad = f"wrong result: max |a - (b + s*c)| = {float(np.max(np.abs(a - ref))):.3g}"
    chk = _pct_check(
        "triad",
        ok,
        gbps,
        "GB/s",
        peaks["bandwidth_gbps"],
        expect.min_bandwidth_pct,
        TARGET_BANDWIDTH_PCT,
        bad,
        figs,
        "triad_gbps",
    )
    return chk, figs


def run_reduce(
    drv: Driver, fn, dev: DeviceInfo, np, peaks: dict[str, Any], expect: Expect, warmup: int, repeats: int
) -> tuple[Check, dict[str, Any]]:
    n = stream_elements(dev)
    x = np.random.default_rng(2).random(n, dtype=np.float32)
    n4 = n // 4
    grid = _grid_for(n4, dev)
    partial = np.empty(grid, dtype=np.float32)
    px, pp = drv.alloc(x.nbytes), drv.alloc(partial.nbytes)
    try:
        drv.htod(px, x)
        args = [_ptr(px), _ptr(pp), ctypes.c_uint64(n4)]
        times = drv.time_ms(lambda: drv.launch(fn, (grid, 1, 1), (BLOCK, 1, 1), args), warmup=warmup, repeats=repeats)
        drv.dtoh(partial, pp)
    finally:
        drv.free(px)
        drv.free(pp)
    got = float(np.sum(partial, dtype=np.float64))
    ref = float(np.sum(x, dtype=np.float64))
    ok = abs(got - ref) <= 1e-4 * abs(ref)
    best = min(times)
    gbps = n * 4 / (best / 1e3) / 1e9
    figs = {"n": n, "best_ms": round(best, 4), "median_ms": round(float(np.median(times)), 4), "repeats": repeats}
    bad = f"wrong sum: GPU {got:.6g}, NumPy float64 {ref:.6g} (relative error {abs(got - ref) / ref:.2g} > 1e-4)"
    chk = _pct_check(
        "reduce",
        ok,
        gbps,
        "GB/s",
        peaks["bandwidth_gbps"],
        expect.min_bandwidth_pct,
        TARGET_BANDWIDTH_PCT,
        bad,
        figs,
        "reduce_gbps",
    )
    return chk, figs


def sgemm_tolerance(np, a, b, k: int) -> float:
    return 2 * k * float(np.finfo(np.float32).eps) * float(np.max(np.abs(a))) * float(np.max(np.abs(b)))


def _sgemm_launch(drv: Driver, fn, m: int, n: int, k: int, pa: int, pb: int, pc: int):
    grid = (n // SGEMM_TILE, m // SGEMM_TILE, 1)
    args = [
        ctypes.c_int(m),
        ctypes.c_int(n),
        ctypes.c_int(k),
        ctypes.c_float(1.0),
        _ptr(pa),
        _ptr(pb),
        ctypes.c_float(0.0),
        _ptr(pc),
    ]
    return lambda: drv.launch(fn, grid, (SGEMM_THREADS, 1, 1), args)


def sgemm_size(dev: DeviceInfo, fp32_tflops: float | None) -> int:
    """4096 where the GPU is fast enough for a run to take milliseconds; smaller on small or unknown GPUs."""
    if dev.total_memory_bytes < 2 * 2**30 or (fp32_tflops is not None and fp32_tflops < 1):
        return 1024
    if fp32_tflops is None or fp32_tflops < 5:
        return 2048
    return 4096


def run_sgemm(
    drv: Driver, fn, dev: DeviceInfo, np, peaks: dict[str, Any], expect: Expect, warmup: int, repeats: int
) -> tuple[list[Check], dict[str, Any]]:
    checks: list[Check] = []
    rng = np.random.default_rng(3)
    # 1. correctness on a non-square problem (every element compared)
    m, n, k = 256, 384, 264
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, dtype=np.float32)  # beta = 0 must not read C
    pa, pb, pc = drv.alloc(a.nbytes), drv.alloc(b.nbytes), drv.alloc(c.nbytes)
    try:
        drv.htod(pa, a)
        drv.htod(pb, b)
        drv.htod(pc, c)
        _sgemm_launch(drv, fn, m, n, k, pa, pb, pc)()
        drv.synchronize()
        drv.dtoh(c, pc)
    finally:
        for p in (pa, pb, pc):
            drv.free(p)
    err = float(np.max(np.abs(c.astype(np.float64) - a.astype(np.float64) @ b.astype(np.float64))))
    tol = sgemm_tolerance(np, a, b, k)
    if not np.isfinite(err) or err > tol:
        checks.append(Check("sgemm-correct", FAIL, f"{m}x{n}x{k}: max error {err:.3g} > tolerance {tol:.3g}"))
        return checks, {}
    checks.append(
        Check(
            "sgemm-correct",
            PASS,
            f"{m}x{n}x{k}: max error {err:.3g} <= {tol:.3g} vs NumPy float64",
            {"max_error": err, "tolerance": tol},
        )
    )

    # 2. performance on a square problem, spot-checked on sampled rows
    size = sgemm_size(dev, peaks["fp32_tflops"])
    a = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    b = rng.uniform(-1, 1, (size, size)).astype(np.float32)
    c = np.empty((size, size), dtype=np.float32)
    pa, pb, pc = drv.alloc(a.nbytes), drv.alloc(b.nbytes), drv.alloc(c.nbytes)
    figs: dict[str, Any] = {"size": size, "repeats": repeats}
    try:
        drv.htod(pa, a)
        drv.htod(pb, b)
        times = drv.time_ms(_sgemm_launch(drv, fn, size, size, size, pa, pb, pc), warmup=warmup, repeats=repeats)
        drv.dtoh(c, pc)
        cublas_ms = cublas_sgemm_ms(drv, size, pa, pb, pc, warmup, repeats)
    finally:
        for p in (pa, pb, pc):
            drv.free(p)
    rows = rng.choice(size, 32, replace=False)
    err = float(np.max(np.abs(c[rows].astype(np.float64) - a[rows].astype(np.float64) @ b.astype(np.float64))))
    tol = sgemm_tolerance(np, a, b, size)
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
    if cublas_ms is None:
        checks.append(Check("sgemm-vs-cublas", SKIP, "libcublas not found or not usable: no cuBLAS comparison"))
    elif isinstance(cublas_ms, str):
        checks.append(Check("sgemm-vs-cublas", SKIP, cublas_ms))
    else:
        cublas_gflops = 2 * size**3 / (cublas_ms / 1e3) / 1e9
        ratio = gflops / cublas_gflops
        figs.update(cublas_gflops=round(cublas_gflops, 1), sgemm_vs_cublas=round(ratio, 3))
        checks.append(
            Check(
                "sgemm-vs-cublas",
                PASS if ratio >= MIN_SGEMM_VS_CUBLAS else FAIL,
                f"cuBLAS {cublas_gflops:.1f} GFLOPS; this kernel {ratio:.2f}x of it (floor {MIN_SGEMM_VS_CUBLAS:g}x)",
                {"cublas_gflops": round(cublas_gflops, 1), "ratio": round(ratio, 3)},
            )
        )
    return checks, figs


def cublas_sgemm_ms(drv: Driver, size: int, pa: int, pb: int, pc: int, warmup: int, repeats: int) -> float | str | None:
    """Best time of cublasSgemm_v2 on the same buffers (column-major: C^T = B^T A^T gives row-major C = A B)."""
    loaded = libs.load_first(
        libs.find("libcublas", ("nvidia/cu13/lib", "nvidia/cublas/lib")),
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
        lib.cublasSgemm_v2.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
            ctypes.c_uint64,
            ctypes.c_int,
        ]
        status = []

        def work() -> None:
            status.append(
                lib.cublasSgemm_v2(
                    handle,
                    0,
                    0,
                    size,
                    size,
                    size,
                    ctypes.byref(alpha),
                    pb,
                    size,
                    pa,
                    size,
                    ctypes.byref(beta),
                    pc,
                    size,
                )
            )

        times = drv.time_ms(work, warmup=warmup, repeats=repeats)
        if any(status):
            return f"cublasSgemm_v2 returned status {max(status)} ({where})"
        return min(times)
    finally:
        lib.cublasDestroy_v2(handle)


# --------------------------------------------------------------------------------------------------------------
# frameworks and Jupyter (in a subprocess of the environment's python)
# --------------------------------------------------------------------------------------------------------------

_FRAMEWORK_PROBE = r"""
import json, sys
name, want_gpu = sys.argv[1], sys.argv[2] == "1"
spec = json.load(sys.stdin)
out = {"name": name}
try:
    if name == "pytorch":
        import torch
        out["version"] = torch.__version__
        out["cuda"] = torch.version.cuda
        out["gpu"] = bool(torch.cuda.is_available())
        if want_gpu and out["gpu"]:
            out["device"] = torch.cuda.get_device_name(0)
            torch.backends.cuda.matmul.allow_tf32 = False
            a = torch.tensor(spec["a"], dtype=torch.float32, device="cuda")
            b = torch.tensor(spec["b"], dtype=torch.float32, device="cuda")
            out["c"] = (a @ b).cpu().tolist()
    elif name == "tensorflow":
        import tensorflow as tf
        out["version"] = tf.__version__
        gpus = tf.config.list_physical_devices("GPU")
        out["gpu"] = bool(gpus)
        if want_gpu and gpus:
            tf.config.experimental.enable_tensor_float_32_execution(False)
            out["device"] = gpus[0].name
            with tf.device("/GPU:0"):
                a, b = tf.constant(spec["a"], tf.float32), tf.constant(spec["b"], tf.float32)
                out["c"] = tf.matmul(a, b).numpy().tolist()
except ImportError as exc:
    out["missing"] = str(exc)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("PROVISION-PROBE " + json.dumps(out))
"""

_PACKAGES = {"pytorch": "torch", "tensorflow": "tensorflow"}


def _probe(python: str, script: str, args: list[str], stdin: str = "", timeout: int = 600) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [python, "-c", script, *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "PYTHONNOUSERSITE": "1"},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"could not run {python}: {exc}"}
    for line in proc.stdout.splitlines():
        if line.startswith("PROVISION-PROBE "):
            return json.loads(line[len("PROVISION-PROBE ") :])
    tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"{python} exited {proc.returncode}: {tail}"}


def _release(v: str) -> tuple[int, ...] | None:
    """PEP 440 release of a version ('2.7.1+cu126' -> (2, 7, 1)), trailing zeros dropped (2.0 == 2.0.0); None
    for a version that is not plain digits (a pre-release, a dev build): those match only as exact strings."""
    public = v.split("+", 1)[0]
    parts = public.split(".")
    if not all(p.isdigit() for p in parts):
        return None
    nums = [int(p) for p in parts]
    while len(nums) > 1 and nums[-1] == 0:
        nums.pop()
    return tuple(nums)


def framework_version_matches(found: str, planned: str, variant: str = "") -> str | None:
    """Why `found` is not the planned release, or None: the same PEP 440 release exactly ('2.0.10' is not '2.0.1',
    '2.0.1' is '2.0.1+cu117'), and where both say a local variant (+cu126), the same one."""
    f_rel, p_rel = _release(found), _release(planned)
    same = f_rel == p_rel if f_rel is not None and p_rel is not None else found.split("+")[0] == planned.split("+")[0]
    if not same:
        return f"{found} is not the planned {planned}"
    local = found.split("+", 1)[1] if "+" in found else ""
    if variant and local and local != variant:
        return f"{found} is the {local} build, the plan says {variant}"
    return None


def check_frameworks(expect: Expect, python: str, gpu: bool, np) -> list[Check]:
    checks: list[Check] = []
    planned = {f["name"]: f for f in expect.frameworks}
    names = list(planned) or list(_PACKAGES)
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    b = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    spec = json.dumps({"a": a.tolist(), "b": b.tolist()})
    # Each framework is probed in its own interpreter; the probes wait mostly on imports, so they run side by side.
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        results = list(pool.map(lambda n: _probe(python, _FRAMEWORK_PROBE, [n, "1" if gpu else "0"], spec), names))
    for name, res in zip(names, results, strict=True):
        label = f"framework:{name}"
        want = planned.get(name)
        if "missing" in res:
            if want:
                checks.append(
                    Check(label, FAIL, f"{name} {want['version']} planned but not importable: {res['missing']}",
                          absent=True)
                )
            else:
                checks.append(Check(label, SKIP, f"{name} not installed in {python}"))
            continue
        if "error" in res and "version" not in res:
            checks.append(Check(label, FAIL, res["error"]))
            continue
        figs = {k: res.get(k) for k in ("version", "cuda", "gpu", "device")}
        mismatch = framework_version_matches(str(res["version"]), want["version"], want.get("variant", "")) if want else None
        if mismatch:
            checks.append(Check(label, FAIL, f"{name} {mismatch}", figs))
            continue
        if "error" in res:
            checks.append(Check(label, FAIL, f"{name} {res['version']}: {res['error']}", figs))
            continue
        if not gpu:
            checks.append(Check(label, PASS, f"{name} {res['version']} imports (GPU part skipped: compile-only)", figs))
            continue
        if not res.get("gpu"):
            checks.append(Check(label, FAIL, f"{name} {res['version']} does not see the GPU", figs))
            continue
        diff = float(np.max(np.abs(np.array(res["c"], dtype=np.float64) - a.astype(np.float64) @ b.astype(np.float64))))
        figs["matmul_max_error"] = diff
        status = PASS if diff <= 1e-3 else FAIL
        checks.append(
            Check(
                label,
                status,
                f"{name} {res['version']} sees {res.get('device')}; 64x64 matmul vs NumPy "
                f"max error {diff:.2g} (tolerance 1e-3)",
                figs,
            )
        )
    return checks


_LIBDIR_PROBE = r"""
import importlib.util, json, os, sys
spec = importlib.util.find_spec(sys.argv[1])
out = {}
if spec is None or not spec.origin:
    out["missing"] = sys.argv[1] + " is not installed"
else:
    lib = os.path.join(os.path.dirname(spec.origin), "lib")
    out["libs"] = sorted(os.path.join(lib, f) for f in os.listdir(lib) if ".so" in f) if os.path.isdir(lib) else []
print("PROVISION-PROBE " + json.dumps(out))
"""


def _cuda_tuple(v: str | None) -> tuple[int, ...] | None:
    return tuple(int(x) for x in v.split(".")[:2]) if v and all(x.isdigit() for x in v.split(".")[:2]) else None


def framework_kernels(images: fatbin.Images, cc: str, fw_cuda: str | None, driver_cuda: str | None) -> tuple[str, str]:
    """(status, detail) for a framework's GPU code against compute capability `cc`: PASS with a binary-compatible
    cubin (same major, minor <= the GPU's) or PTX at or below `cc` that the driver can JIT (its CUDA >= the
    framework's; a driver older than the framework's CUDA runs its cubins through minor-version compatibility but
    cannot JIT its PTX); FAIL otherwise, the "no kernel image is available for execution on the device" box."""
    have, need = _cuda_tuple(driver_cuda), _cuda_tuple(fw_cuda)
    jit_ok = have is None or need is None or have >= need
    how = fatbin.binary_runs(images, cc) if jit_ok else fatbin.binary_runs(fatbin.Images(images.cubin), cc)
    carried = images.describe()
    sm = "sm_" + cc.replace(".", "")
    if how is not None:
        return PASS, f"{how} runs on {sm} (the build carries {carried})"
    ptx_note = ""
    if images.ptx and not jit_ok:
        ptx_note = f"; its PTX is from CUDA {fw_cuda}, newer than the driver's CUDA {driver_cuda}, so it cannot be JIT-compiled"
    return FAIL, (f"nothing runs on {sm} (cc {cc}): the build carries {carried}{ptx_note}; every GPU operation would "
                  f"fail with 'no kernel image is available for execution on the device'")


def check_framework_kernels(expect: Expect, python: str, cc: str | None, driver_cuda: str | None) -> list[Check]:
    """The compute capability against the GPU code the installed PyTorch was compiled with, read from the fat
    binaries of its CUDA libraries (torch/lib/*.so): no GPU and no import of torch needed."""
    out = []
    for want in expect.frameworks:
        if want.get("name") != "pytorch":
            continue
        label = "framework-kernels:pytorch"
        if cc is None:
            out.append(Check(label, SKIP, "no compute capability to check against (no GPU, no --arch, no --profile)"))
            continue
        res = _probe(python, _LIBDIR_PROBE, ["torch"], timeout=60)
        if "missing" in res or "error" in res:
            out.append(Check(label, SKIP, f"torch not found in {python}: {res.get('missing') or res.get('error')} "
                             "(framework:pytorch says whether it should be)"))
            continue
        images = fatbin.Images()
        read = []
        for path in res.get("libs", []):
            try:
                found = fatbin.read_images(path)
            except (OSError, fatbin.FatbinError) as exc:
                out.append(Check(label, FAIL, f"cannot read the GPU code of {path}: {exc}"))
                break
            if not found.empty:
                read.append(Path(path).name)
            images = images | found
        else:
            figs = {"cubin": [f"sm_{a}" for a in sorted(images.cubin)], "ptx": [f"compute_{a}" for a in sorted(images.ptx)],
                    "libraries": read, "compute_capability": cc}
            if images.empty:
                out.append(Check(label, FAIL, f"torch in {python} carries no GPU code (a CPU-only build?); "
                                 f"the plan wants its {want.get('variant') or 'CUDA'} build", figs))
                continue
            status, detail = framework_kernels(images, cc, want.get("cuda") or None, driver_cuda)
            out.append(Check(label, status, f"torch {want.get('version')}: {detail} (read from {', '.join(read)})", figs))
    return out


_JUPYTER_PROBE = r"""
import json, sys
out = {}
try:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import start_new_kernel
except ImportError as exc:
    print("PROVISION-PROBE " + json.dumps({"missing": str(exc)})); sys.exit(0)
out["kernelspecs"] = sorted(KernelSpecManager().find_kernel_specs())
code = '''
import ctypes, json, sys
n = -1
try:
    cu = ctypes.CDLL("libcuda.so.1")
    c = ctypes.c_int()
    n = c.value if cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(c)) == 0 else 0
except OSError:
    pass
print(json.dumps({"executable": sys.executable, "gpus": n}))
'''
chunks = []
def hook(msg):
    if msg["msg_type"] == "stream":
        chunks.append(msg["content"]["text"])
try:
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        kc.execute_interactive(code, timeout=120, output_hook=hook)
    finally:
        kc.stop_channels(); km.shutdown_kernel(now=True)
    out.update(json.loads("".join(chunks).strip().splitlines()[-1]))
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("PROVISION-PROBE " + json.dumps(out))
"""


def check_jupyter(expect: Expect, python: str, gpu: bool) -> Check:
    res = _probe(python, _JUPYTER_PROBE, [], timeout=300)
    if "missing" in res:
        status = FAIL if expect.jupyter else SKIP
        return Check("jupyter", status, f"jupyter_client not installed in {python}", absent=True)
    if "error" in res:
        return Check("jupyter", FAIL, f"kernel python3 did not run: {res['error']}")
    figs = {"kernelspecs": res.get("kernelspecs"), "executable": res.get("executable"), "gpus": res.get("gpus")}
    where = f"kernel python3 ran in {res.get('executable')} (kernelspecs: {', '.join(res.get('kernelspecs') or [])})"
    if not gpu:
        return Check("jupyter", PASS, f"{where}; GPU part skipped (compile-only)", figs)
    if (res.get("gpus") or 0) < 1:
        why = "libcuda.so.1 not loadable in the kernel" if res.get("gpus") == -1 else "cuDeviceGetCount = 0"
        return Check("jupyter", FAIL, f"{where} but sees no GPU ({why})", figs)
    return Check("jupyter", PASS, f"{where}, sees {res['gpus']} GPU(s)", figs)


# --------------------------------------------------------------------------------------------------------------
# the whole run
# --------------------------------------------------------------------------------------------------------------


def run(
    expect: Expect,
    *,
    compile_only: bool = False,
    arch: str | None = None,
    nvrtc_path: str | None = None,
    python: str | None = None,
    peak_lookup: PeakLookup | None = None,
    warmup: int = 3,
    repeats: int = 10,
    frameworks: bool = True,
    jupyter: bool = True,
    libcuda: str = "libcuda.so.1",
) -> Report:
    """Run every check and return the report. Never raises for a failed check; `report.error` is set (exit 2)
    when the verifier could not run at all."""
    import numpy as np

    report = Report(mode="compile-only" if compile_only else "full", expect=expect.to_dict())
    python = python or sys.executable
    if compile_only and arch is None and expect.target_arch is None:
        report.error = NO_ARCH
        return report
    probes: list[Future] = []
    if compile_only:  # no GPU to share: the probes run while the toolchain is checked
        probes = _start_environment_probes(expect, python, False, np, frameworks, jupyter)

    try:
        nv = Nvrtc.load(nvrtc_path)
        report.environment["nvrtc"] = {"version": nv.version_str, "path": nv.path, "archs": nv.supported_archs()}
    except NvrtcError as exc:
        report.environment["nvrtc"] = None
        report.add(Check("nvrtc", FAIL, str(exc), absent=str(exc).startswith("NVRTC not found")))
        nv = None
    else:
        assert nv is not None  # loaded in the try above
        report.add(check_nvrtc(nv, expect))

    drv: Driver | None = None
    dev: DeviceInfo | None = None
    if not compile_only:
        try:
            drv = Driver(libcuda)
            drv.init()
            if drv.device_count() < 1:
                raise CudaError("cuDeviceGetCount", 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device")
            dev = drv.device(0)
        except DriverNotFound:
            report.error = NO_DRIVER
            report.environment["driver"] = None
            return report
        except CudaError as exc:
            report.error = f"the NVIDIA driver is present but no GPU is usable ({exc}): exit 2, use --compile-only"
            return report
        driver_version = nvml_driver_version()
        driver_cuda = drv.driver_version()
        report.environment["driver"] = {
            "version": driver_version,
            "cuda": format_cuda_version(driver_cuda),
            "libcuda": libcuda,
        }
        report.environment["device"] = {
            "name": dev.name,
            "compute_capability": dev.compute_capability,
            "sm_count": dev.sm_count,
            "memory_gb": round(dev.total_memory_bytes / 2**30, 1),
            "clock_mhz": dev.clock_mhz,
            "integrated": dev.integrated,
        }
        report.add(check_driver(driver_version, driver_cuda, expect))
        report.add(check_device(dev, expect))

    report.add(check_cuda_runtime(expect))
    report.add(check_cudnn(expect))
    if frameworks:
        # The framework's own kernels against the GPU (the device's, else the plan's or --arch): the GPU-less proof
        # that the box will not answer "no kernel image is available".
        target_cc = dev.compute_capability if dev is not None else expect.compute_capability
        chosen = arch or expect.target_arch
        if dev is None and chosen and chosen.startswith(("sm_", "compute_")):
            n = arch_number(chosen)
            target_cc = f"{n // 10}.{n % 10}"
        driver_cuda_version = format_cuda_version(drv.driver_version()) if drv is not None else expect.driver_cuda
        for c in check_framework_kernels(expect, python, target_cc, driver_cuda_version):
            report.add(c)

    images: dict[str, CompileResult] = {}
    if nv is not None:
        target = arch
        if target is None and dev is not None and drv is not None:
            try:
                target, why = choose_target(dev.cc, nv.supported_archs(), nv.version, drv.driver_version())
                report.environment["target"] = {"arch": target, "why": why}
            except NvrtcError as exc:
                report.add(Check("compile", FAIL, str(exc)))
        elif target is None:
            target = expect.target_arch
        if target is not None:
            compile_checks, images = compile_kernels(nv, target)
            for c in compile_checks:
                report.add(c)

    if dev is not None and drv is not None and len(images) == len(KERNELS):
        _run_gpu(drv, dev, images, expect, report, np, peak_lookup, warmup, repeats)
    elif dev is not None:
        report.add(Check("kernels", SKIP, "not run: a kernel did not compile (see compile:* above)"))

    if not compile_only:
        # With a GPU, the environment's probes start only now: the frameworks' matmul must not share the GPU with
        # the bandwidth and FLOPS measurements above.
        probes = _start_environment_probes(expect, python, True, np, frameworks, jupyter)
    for c in _finish(probes):
        report.add(c)
    return report


def _start_environment_probes(
    expect: Expect, python: str, gpu: bool, np, frameworks: bool, jupyter: bool
) -> list[Future]:
    """Start the framework and Jupyter probes (each its own interpreter of the environment) in the background.
    They spend their time waiting on imports and on a kernel's start (2 s of a 5 s re-apply verification), so in a
    compile-only run they go side by side with the toolchain checks."""
    pool = ThreadPoolExecutor(max_workers=2)
    futures = []
    if frameworks:
        futures.append(pool.submit(check_frameworks, expect, python, gpu, np))
    if jupyter:
        futures.append(pool.submit(lambda: [check_jupyter(expect, python, gpu)]))
    pool.shutdown(wait=False)
    return futures


def _finish(futures: list[Future]) -> list[Check]:
    return [c for f in futures for c in f.result()]


def _run_gpu(
    drv: Driver,
    dev: DeviceInfo,
    images: dict[str, CompileResult],
    expect: Expect,
    report: Report,
    np,
    peak_lookup: PeakLookup | None,
    warmup: int,
    repeats: int,
) -> None:
    peaks = peaks_for(dev, expect, peak_lookup)
    report.environment["peaks"] = peaks
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
                chk, figs = runner(drv, fns[stem], dev, np, peaks, expect, warmup, repeats)
            except CudaError as exc:
                report.add(Check(stem, FAIL, str(exc)))
                continue
            report.add(chk)
            report.figures.update({k: v for k, v in figs.items() if k.startswith(stem)})
            report.figures.update({k: v for k, v in chk.figures.items() if k.startswith(stem)})
        try:
            sg_checks, figs = run_sgemm(drv, fns["sgemm"], dev, np, peaks, expect, warmup, repeats)
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
