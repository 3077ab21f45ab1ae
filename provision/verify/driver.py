"""The CUDA driver API through ctypes on libcuda.so.1: enough to load a CUBIN/PTX, move data, launch and time.

No CUDA runtime, no framework: this works in a minimal image with only the driver's user-space library mounted.
The primary context is used (cuDevicePrimaryCtxRetain) rather than cuCtxCreate so that cuBLAS, which goes
through the runtime API and therefore the primary context, can work on the same device pointers.
The driver's version string (NVML, nvidia-smi, /proc) is read here too: `nvml_driver_version()`.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import libs

CUresult = ctypes.c_int
CUdeviceptr = ctypes.c_uint64

# cuda.h CUdevice_attribute values (stable since CUDA 2.x)
ATTR = {
    "max_threads_per_block": 1,
    "clock_rate_khz": 13,
    "multiprocessor_count": 16,
    "integrated": 18,
    "memory_clock_rate_khz": 36,
    "global_memory_bus_width": 37,
    "l2_cache_size": 38,
    "compute_capability_major": 75,
    "compute_capability_minor": 76,
}


class DriverNotFound(Exception):
    """libcuda.so.1 is not loadable: no NVIDIA driver (or not mounted into this container)."""


class CudaError(Exception):
    def __init__(self, call: str, code: int, name: str, text: str) -> None:
        super().__init__(f"{call} failed: {name} ({text})")
        self.call = call
        self.code = code
        self.name = name


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    cc: int  # 61 for 6.1
    sm_count: int
    clock_mhz: float
    memory_clock_mhz: float
    bus_width_bits: int
    total_memory_bytes: int
    integrated: bool

    @property
    def compute_capability(self) -> str:
        return f"{self.cc // 10}.{self.cc % 10}"


def format_cuda_version(v: int) -> str:
    """12060 -> '12.6' (cuDriverGetVersion / cudaRuntimeGetVersion encoding)."""
    return f"{v // 1000}.{v % 1000 // 10}"


class Driver:
    """A loaded libcuda. Methods raise CudaError naming the call and the driver's error name."""

    def __init__(self, path: str = "libcuda.so.1") -> None:
        try:
            self._lib = ctypes.CDLL(path)
        except OSError as exc:
            raise DriverNotFound(f"{path} not loadable: {exc}") from None
        self.path = path
        self._ctx = ctypes.c_void_p()
        self._dev: ctypes.c_int | None = None

    def _fn(self, name: str):
        for candidate in (f"{name}_v2", name):
            fn = getattr(self._lib, candidate, None)
            if fn is not None:
                return candidate, fn
        raise CudaError(name, -1, "CUDA_ERROR_NOT_FOUND", "symbol not in libcuda")

    def call(self, name: str, *args, v2: bool = False) -> None:
        if v2:
            cname, fn = self._fn(name)
        else:
            cname, fn = name, getattr(self._lib, name)
        rc = fn(*args)
        if rc != 0:
            raise self._error(cname, rc)

    def _error(self, call: str, rc: int) -> CudaError:
        pname, ptext = ctypes.c_char_p(), ctypes.c_char_p()
        try:
            self._lib.cuGetErrorName(rc, ctypes.byref(pname))
            self._lib.cuGetErrorString(rc, ctypes.byref(ptext))
        except AttributeError:
            pass
        name = pname.value.decode() if pname.value else f"CUresult {rc}"
        text = ptext.value.decode() if ptext.value else "no description"
        return CudaError(call, rc, name, text)

    # --- device and versions -----------------------------------------------------------------------------------

    def init(self) -> None:
        self.call("cuInit", 0)

    def driver_version(self) -> int:
        v = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    def device_count(self) -> int:
        n = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        return n.value

    def device(self, index: int = 0) -> DeviceInfo:
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), index)
        name = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", name, 256, dev)

        def attr(key: str) -> int:
            v = ctypes.c_int()
            self.call("cuDeviceGetAttribute", ctypes.byref(v), ATTR[key], dev)
            return v.value

        total = ctypes.c_size_t()
        self.call("cuDeviceTotalMem", ctypes.byref(total), dev, v2=True)
        return DeviceInfo(
            index=index,
            name=name.value.decode(errors="replace"),
            cc=attr("compute_capability_major") * 10 + attr("compute_capability_minor"),
            sm_count=attr("multiprocessor_count"),
            clock_mhz=attr("clock_rate_khz") / 1000,
            memory_clock_mhz=attr("memory_clock_rate_khz") / 1000,
            bus_width_bits=attr("global_memory_bus_width"),
            total_memory_bytes=total.value,
            integrated=bool(attr("integrated")),
        )

    # --- context, modules, memory ------------------------------------------------------------------------------

    def open(self, index: int = 0) -> None:
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), index)
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(self._ctx), dev)
        self.call("cuCtxSetCurrent", self._ctx)
        self._dev = dev

    def close(self) -> None:
        if self._dev is not None:
            self._lib.cuCtxSynchronize()
            self.call("cuDevicePrimaryCtxRelease", self._dev, v2=True)
            self._dev = None

    def load_module(self, image: bytes) -> ctypes.c_void_p:
        mod = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(image, len(image) + 1)  # PTX must be NUL-terminated; a CUBIN ignores it
        self.call("cuModuleLoadData", ctypes.byref(mod), buf)
        return mod

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self.call("cuModuleGetFunction", ctypes.byref(fn), module, name.encode())
        return fn

    def unload(self, module: ctypes.c_void_p) -> None:
        self.call("cuModuleUnload", module)

    def alloc(self, nbytes: int) -> int:
        ptr = CUdeviceptr()
        self.call("cuMemAlloc", ctypes.byref(ptr), ctypes.c_size_t(nbytes), v2=True)
        return ptr.value

    def free(self, ptr: int) -> None:
        self.call("cuMemFree", CUdeviceptr(ptr), v2=True)

    def htod(self, ptr: int, array) -> None:
        """Copy a C-contiguous NumPy array to the device."""
        self.call(
            "cuMemcpyHtoD", CUdeviceptr(ptr), ctypes.c_void_p(array.ctypes.data), ctypes.c_size_t(array.nbytes), v2=True
        )

    def dtoh(self, array, ptr: int) -> None:
        self.call(
            "cuMemcpyDtoH", ctypes.c_void_p(array.ctypes.data), CUdeviceptr(ptr), ctypes.c_size_t(array.nbytes), v2=True
        )

    def synchronize(self) -> None:
        self.call("cuCtxSynchronize")

    # --- launch and timing -------------------------------------------------------------------------------------

    def launch(self, fn: ctypes.c_void_p, grid: tuple[int, int, int], block: tuple[int, int, int], args: list) -> None:
        """`args` are ctypes values (c_uint64 for device pointers, c_int, c_float, ...), passed by address."""
        arg_ptrs = (ctypes.c_void_p * len(args))(*(ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args))
        self.call(
            "cuLaunchKernel", fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0, None, arg_ptrs, None
        )

    def event(self) -> ctypes.c_void_p:
        ev = ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(ev), 0)
        return ev

    def record(self, ev: ctypes.c_void_p) -> None:
        self.call("cuEventRecord", ev, None)

    def elapsed_ms(self, start: ctypes.c_void_p, stop: ctypes.c_void_p) -> float:
        self.call("cuEventSynchronize", stop)
        ms = ctypes.c_float()
        # cuEventElapsedTime (not the 12.8+ _v2, whose semantics differ for timing-disabled events)
        self.call("cuEventElapsedTime", ctypes.byref(ms), start, stop)
        return ms.value

    def destroy_event(self, ev: ctypes.c_void_p) -> None:
        self.call("cuEventDestroy", ev, v2=True)

    def time_ms(self, work, *, warmup: int, repeats: int) -> list[float]:
        """Run `work()` (which enqueues launches) `warmup` times untimed, then `repeats` times each between two
        events. Returns the per-run times in milliseconds."""
        for _ in range(warmup):
            work()
        self.synchronize()
        start, stop = self.event(), self.event()
        times = []
        try:
            for _ in range(repeats):
                self.record(start)
                work()
                self.record(stop)
                times.append(self.elapsed_ms(start, stop))
        finally:
            self.destroy_event(start)
            self.destroy_event(stop)
        return times


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
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9]+\.[0-9.]+)", text)
    return m.group(1) if m else None
