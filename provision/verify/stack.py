"""The installed stack against the plan: the driver, the GPU that answered (and its peak figures), NVRTC, the CUDA
runtime and cuDNN. One function per check, each returning one `Check`; the libraries are read through driver.py,
nvrtc.py and libs.py.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from . import libs
from .driver import DeviceInfo, format_cuda_version
from .expect import Expect
from .nvrtc import Nvrtc, arch_number
from .report import FAIL, PASS, SKIP, Check

PeakLookup = Callable[[DeviceInfo], "tuple[float | None, float | None] | None"]
MODEL_TOLERANCE = 0.15  # memory or DRAM bandwidth further than this from the plan's model: another model


def _versions_match(found: str, expected: str) -> bool:
    """'12.6' matches '12.6' and '12.6.85'; '9.10.2' matches '9.10.2'; compare on the expected's precision."""
    f, e = found.split("."), expected.split(".")
    return f[: len(e)] == e[: len(f)] and len(f) >= min(len(e), 2)


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


# --------------------------------------------------------------------------------------------------------------
# driver and device
# --------------------------------------------------------------------------------------------------------------


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
# NVRTC, the CUDA runtime, cuDNN
# --------------------------------------------------------------------------------------------------------------


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


def _runtime_version_from_package() -> str | None:
    """major.minor of the CUDA runtime wheel in this environment, e.g. nvidia-cuda-runtime-cu11 11.7.99 -> 11.7."""
    # Imported here: importlib.metadata costs tens of milliseconds and only this fallback needs it.
    from importlib import metadata

    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11"):
        try:
            parts = metadata.version(dist).split(".")
        except metadata.PackageNotFoundError:
            continue
        return ".".join(parts[:2])
    return None


def decode_cudnn_version(v: int) -> str:
    """cudnnGetVersion(): 9.x encodes major*10000 + minor*100 + patch, 8.x and older major*1000 + minor*100 + patch."""
    if v >= 90000:
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def check_cudnn(expect: Expect) -> Check:
    libs.preload_cublas()
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
