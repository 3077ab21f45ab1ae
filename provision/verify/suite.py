"""The whole verification: which checks run, in what order, and the Report they fill (`run()`).

Order: NVRTC; the driver and device (full runs); the CUDA runtime, cuDNN and the frameworks' GPU code; the kernels
compiled, then run on the GPU; last the framework and Jupyter probes, which in a compile-only run start first and
go side by side with the toolchain checks. The checks themselves live in stack.py (driver, device, libraries),
kernel_checks.py (the CUDA kernels) and environment.py (frameworks, Jupyter); result objects in report.py.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future, ThreadPoolExecutor

from .driver import CudaError, DeviceInfo, Driver, DriverNotFound, format_cuda_version, nvml_driver_version
from .environment import check_framework_kernels, check_frameworks, check_jax_kernels, check_jupyter
from .expect import Expect
from .kernel_checks import KERNELS, compile_kernels, run_kernels
from .nvrtc import CompileResult, Nvrtc, NvrtcError, arch_number, choose_target
from .report import FAIL, SKIP, Check, Report
from .stack import PeakLookup, check_cuda_runtime, check_cudnn, check_device, check_driver, check_nvrtc, peaks_for

NO_DRIVER = (
    "no NVIDIA driver found (libcuda.so.1 not loadable): exit 2, use --compile-only to check the toolchain "
    "without a GPU"
)
NO_ARCH = "no architecture to compile for: pass --arch sm_XY or --profile (there is no GPU to ask)"


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
    report = Report(mode="compile-only" if compile_only else "full", expect=expect.to_dict())
    python = python or sys.executable
    if compile_only and arch is None and expect.target_arch is None:
        report.error = NO_ARCH
        return report
    probes: list[Future[list[Check]]] = []
    if compile_only:  # no GPU to share: the probes run while the toolchain is checked
        probes = _start_environment_probes(expect, python, False, frameworks, jupyter)

    nv = _load_nvrtc(report, expect, nvrtc_path)
    drv: Driver | None = None
    dev: DeviceInfo | None = None
    if not compile_only:
        opened = _open_device(report, expect, libcuda)
        if opened is None:
            return report
        drv, dev = opened

    report.add(check_cuda_runtime(expect))
    report.add(check_cudnn(expect))
    if frameworks:
        _check_framework_kernels(report, expect, python, arch, drv, dev)

    images = _compile(report, expect, nv, arch, drv, dev) if nv is not None else {}
    if dev is not None and drv is not None and len(images) == len(KERNELS):
        peaks = peaks_for(dev, expect, peak_lookup)
        report.environment["peaks"] = peaks
        run_kernels(drv, dev, images, expect, peaks, report, warmup, repeats)
    elif dev is not None:
        report.add(Check("kernels", SKIP, "not run: a kernel did not compile (see compile:* above)"))

    if not compile_only:
        # With a GPU, the environment's probes start only now: the frameworks' matmul must not share the GPU with
        # the bandwidth and FLOPS measurements above.
        probes = _start_environment_probes(expect, python, True, frameworks, jupyter)
    for f in probes:
        for c in f.result():
            report.add(c)
    return report


def _load_nvrtc(report: Report, expect: Expect, nvrtc_path: str | None) -> Nvrtc | None:
    """Load NVRTC and check its version; None (and a failed check) when it cannot be loaded."""
    try:
        nv = Nvrtc.load(nvrtc_path)
        report.environment["nvrtc"] = {"version": nv.version_str, "path": nv.path, "archs": nv.supported_archs()}
    except NvrtcError as exc:
        report.environment["nvrtc"] = None
        report.add(Check("nvrtc", FAIL, str(exc), absent=str(exc).startswith("NVRTC not found")))
        return None
    assert nv is not None  # loaded in the try above
    report.add(check_nvrtc(nv, expect))
    return nv


def _open_device(report: Report, expect: Expect, libcuda: str) -> tuple[Driver, DeviceInfo] | None:
    """Open the driver and the first GPU and check both; None (with report.error set) when there is no usable GPU."""
    try:
        drv = Driver(libcuda)
        drv.init()
        if drv.device_count() < 1:
            raise CudaError("cuDeviceGetCount", 100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device")
        dev = drv.device(0)
    except DriverNotFound:
        report.error = NO_DRIVER
        report.environment["driver"] = None
        return None
    except CudaError as exc:
        report.error = f"the NVIDIA driver is present but no GPU is usable ({exc}): exit 2, use --compile-only"
        return None
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
    return drv, dev


def _check_framework_kernels(report: Report, expect: Expect, python: str, arch: str | None, drv: Driver | None,
                             dev: DeviceInfo | None) -> None:
    """The framework's own kernels against the GPU (the device's, else the plan's or --arch): the GPU-less proof
    that the box will not answer "no kernel image is available"."""
    target_cc = dev.compute_capability if dev is not None else expect.compute_capability
    chosen = arch or expect.target_arch
    if dev is None and chosen and chosen.startswith(("sm_", "compute_")):
        n = arch_number(chosen)
        target_cc = f"{n // 10}.{n % 10}"
    driver_cuda_version = format_cuda_version(drv.driver_version()) if drv is not None else expect.driver_cuda
    for c in check_framework_kernels(expect, python, target_cc, driver_cuda_version):
        report.add(c)
    for c in check_jax_kernels(expect, python, target_cc, driver_cuda_version):
        report.add(c)


def _compile(report: Report, expect: Expect, nv: Nvrtc, arch: str | None, drv: Driver | None,
             dev: DeviceInfo | None) -> dict[str, CompileResult]:
    """Compile the kernels for --arch, else the device's best target, else the plan's; the images by kernel name."""
    images: dict[str, CompileResult] = {}
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
    return images


def _start_environment_probes(
    expect: Expect, python: str, gpu: bool, frameworks: bool, jupyter: bool
) -> list[Future[list[Check]]]:
    """Start the framework and Jupyter probes (each its own interpreter of the environment) in the background.
    They spend their time waiting on imports and on a kernel's start (2 s of a 5 s re-apply verification), so in a
    compile-only run they go side by side with the toolchain checks."""
    pool = ThreadPoolExecutor(max_workers=2)
    futures = []
    if frameworks:
        futures.append(pool.submit(check_frameworks, expect, python, gpu))
    if jupyter:
        futures.append(pool.submit(lambda: [check_jupyter(expect, python, gpu)]))
    pool.shutdown(wait=False)
    return futures
