"""NVRTC through ctypes: find the library, read its version and architectures, compile CUDA C++ to CUBIN or PTX.

Where libnvrtc comes from, first hit wins:
1. an explicit path (`--nvrtc`, or `PROVISION_NVRTC`);
2. the pip wheels in this interpreter's site-packages. Real layouts (checked by unzipping the wheels):
   nvidia-cuda-nvrtc-cu11 11.8.89 -> nvidia/cuda_nvrtc/lib/libnvrtc.so.11.2 (the soname stayed 11.2 for all of 11.x),
   nvidia-cuda-nvrtc-cu12 12.x    -> nvidia/cuda_nvrtc/lib/libnvrtc.so.12,
   nvidia-cuda-nvrtc 13.x         -> nvidia/cu13/lib/libnvrtc.so.13;
3. CUDA_HOME / CUDA_PATH (lib64/ and targets/<arch>-linux/lib/), then /usr/local/cuda;
4. the dynamic loader's cache (ldconfig -p), then the bare sonames (LD_LIBRARY_PATH).

Only the standard library is used, so this file works on a target that has nothing but Python and the wheel.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import libs

SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")
WHEEL_DIRS = ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib")

NVRTC_SUCCESS = 0
NVRTC_ERROR_INVALID_OPTION = 5
NVRTC_ERROR_COMPILATION = 6


class NvrtcError(Exception):
    """NVRTC is missing or refused a compilation. `log` holds the compiler's own output."""

    def __init__(self, message: str, log: str = "", code: int | None = None) -> None:
        super().__init__(message)
        self.log = log
        self.code = code


@dataclass(frozen=True)
class CompileResult:
    kernel: str
    arch: str  # what was asked for: sm_61 (CUBIN) or compute_61 (PTX)
    kind: str  # "cubin" | "ptx"
    image: bytes = field(repr=False)
    log: str
    seconds: float


def candidates(sites: list[Path] | None = None, cuda_home: str | None = None) -> list[Path]:
    """Every place libnvrtc may be, in search order (existing files only)."""
    return libs.find("libnvrtc", WHEEL_DIRS, env_var="PROVISION_NVRTC", sites=sites, cuda_home=cuda_home)


def _uselocale():  # libc's uselocale(3), or None where there is none (not glibc/musl)
    try:
        fn = ctypes.CDLL(None).uselocale
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_void_p]
    return fn


_USELOCALE = _uselocale()


@contextlib.contextmanager
def _thread_locale_kept():
    """NVRTC's compile leaves the calling thread on the "C" locale (uselocale), which makes Python's preferred
    encoding ASCII for everything after it in that thread: a subprocess's UTF-8 output read with text=True then
    fails to decode (found in the test suite: a test that compiled with NVRTC made a later test's `provision apply`
    output, with its '…', a UnicodeDecodeError). Put the thread's locale back as it was."""
    saved = _USELOCALE(None) if _USELOCALE is not None else None
    try:
        yield
    finally:
        if _USELOCALE is not None and saved is not None:
            _USELOCALE(saved)


class Nvrtc:
    """A loaded libnvrtc. `Nvrtc.load()` finds one; `Nvrtc(path)` loads that file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        try:
            self._lib = ctypes.CDLL(self.path)
        except OSError as exc:
            raise NvrtcError(f"NVRTC at {self.path} could not be loaded: {exc}") from None
        lib = self._lib
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        lib.nvrtcGetErrorString.argtypes = [ctypes.c_int]
        lib.nvrtcCreateProgram.argtypes = [
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.nvrtcCompileProgram.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        for name in ("nvrtcGetProgramLogSize", "nvrtcGetPTXSize", "nvrtcGetCUBINSize"):
            if hasattr(lib, name):
                getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
        for name in ("nvrtcGetProgramLog", "nvrtcGetPTX", "nvrtcGetCUBIN"):
            if hasattr(lib, name):
                getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_char_p]

    @classmethod
    def load(cls, path: str | None = None) -> Nvrtc:
        if path:
            return cls(path)
        tried = []
        for cand in candidates():
            try:
                return cls(cand)
            except NvrtcError as exc:
                tried.append(str(exc))
        for soname in SONAMES:
            try:
                return cls(soname)
            except NvrtcError as exc:
                tried.append(str(exc))
        raise NvrtcError(
            "NVRTC not found (looked in this Python's site-packages for nvidia/cuda_nvrtc/lib and nvidia/cu13/lib, "
            "CUDA_HOME, /usr/local/cuda and ldconfig); install the planned wheel, e.g. pip install "
            "nvidia-cuda-nvrtc-cu12, or pass --nvrtc PATH"
        )

    def _check(self, rc: int, what: str, log: str = "") -> None:
        if rc != NVRTC_SUCCESS:
            name = self._lib.nvrtcGetErrorString(rc).decode(errors="replace")
            raise NvrtcError(f"{what}: {name}", log=log, code=rc)

    @property
    def can_cubin(self) -> bool:
        """NVRTC 11.1+ emits CUBIN; older ones (CUDA 10.2 on a Jetson Nano) only PTX for the driver to JIT."""
        return hasattr(self._lib, "nvrtcGetCUBIN")

    @property
    def version(self) -> tuple[int, int]:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._check(self._lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
        return major.value, minor.value

    @property
    def version_str(self) -> str:
        major, minor = self.version
        return f"{major}.{minor}"

    def supported_archs(self) -> list[int]:
        """Architectures this NVRTC can target, e.g. [50, 52, ..., 90] (NVRTC >= 11.2 has the query)."""
        if not hasattr(self._lib, "nvrtcGetNumSupportedArchs"):
            return []
        n = ctypes.c_int()
        self._check(self._lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)), "nvrtcGetNumSupportedArchs")
        arr = (ctypes.c_int * n.value)()
        self._check(self._lib.nvrtcGetSupportedArchs(arr), "nvrtcGetSupportedArchs")
        return list(arr)

    def compile(
        self, source: str, arch: str, *, name: str = "kernel.cu", options: tuple[str, ...] = ()
    ) -> CompileResult:
        """Compile `source` for `arch`: 'sm_XY' gives a CUBIN (SASS, what the verifier prefers), 'compute_XY' PTX.

        Raises NvrtcError with the compiler log when NVRTC refuses the architecture or the source.
        """
        m = re.fullmatch(r"(sm|compute)_(\d+[a-z]?)", arch)
        if not m:
            raise NvrtcError(f"not an architecture: {arch!r} (use sm_XY for a CUBIN or compute_XY for PTX)")
        kind = "cubin" if m.group(1) == "sm" else "ptx"
        if kind == "cubin" and not hasattr(self._lib, "nvrtcGetCUBIN"):
            raise NvrtcError(f"NVRTC {self.version_str} cannot emit CUBIN (needs 11.1 or newer); use compute_XY")
        with _thread_locale_kept():
            return self._compile(source, arch, kind, name, options)

    def _compile(self, source: str, arch: str, kind: str, name: str, options: tuple[str, ...]) -> CompileResult:
        prog = ctypes.c_void_p()
        self._check(
            self._lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
            "nvrtcCreateProgram",
        )
        try:
            opts = [f"--gpu-architecture={arch}", "-std=c++11", *options]
            c_opts = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
            start = time.perf_counter()
            rc = self._lib.nvrtcCompileProgram(prog, len(opts), c_opts)
            seconds = time.perf_counter() - start
            log = self._log(prog)
            if rc == NVRTC_ERROR_INVALID_OPTION:
                supported = self.supported_archs()
                hint = f"; this NVRTC targets {', '.join(f'sm_{a}' for a in supported)}" if supported else ""
                raise NvrtcError(f"NVRTC {self.version_str} cannot compile for {arch}{hint}", log=log, code=rc)
            self._check(rc, f"NVRTC {self.version_str} failed to compile {name} for {arch}", log)
            size = ctypes.c_size_t()
            getter = "CUBIN" if kind == "cubin" else "PTX"
            self._check(getattr(self._lib, f"nvrtcGet{getter}Size")(prog, ctypes.byref(size)), f"nvrtcGet{getter}Size")
            buf = ctypes.create_string_buffer(size.value)
            self._check(getattr(self._lib, f"nvrtcGet{getter}")(prog, buf), f"nvrtcGet{getter}")
            image = buf.raw[: size.value]
            return CompileResult(kernel=name, arch=arch, kind=kind, image=image, log=log, seconds=seconds)
        finally:
            self._lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        if self._lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != NVRTC_SUCCESS or size.value <= 1:
            return ""
        buf = ctypes.create_string_buffer(size.value)
        self._lib.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode(errors="replace").strip()


def arch_number(arch: str) -> int:
    """'sm_61' / 'compute_61' / '6.1' -> 61."""
    m = re.fullmatch(r"(?:sm_|compute_)?(\d+)(?:\.(\d+))?[a-z]?", arch.strip())
    if not m:
        raise ValueError(f"not an architecture: {arch!r}")
    return int(m.group(1)) * 10 + int(m.group(2)) if m.group(2) is not None else int(m.group(1))


def choose_target(
    device_cc: int, supported: list[int], nvrtc_version: tuple[int, int], driver_version: int | None
) -> tuple[str, str]:
    """Pick what to build for a device: ('sm_XY' CUBIN) when this NVRTC knows the device's exact architecture,
    else PTX for the newest architecture below it that NVRTC knows, but only where the driver can JIT that PTX
    (driver CUDA version >= NVRTC version). Returns (arch, why); raises NvrtcError when neither works.
    """
    if not supported or device_cc in supported:
        return f"sm_{device_cc}", "CUBIN for the device's exact architecture"
    lower = [a for a in supported if a <= device_cc]
    nvrtc_api = nvrtc_version[0] * 1000 + nvrtc_version[1] * 10
    if not lower:
        raise NvrtcError(
            f"NVRTC {nvrtc_version[0]}.{nvrtc_version[1]} cannot build for sm_{device_cc} (its oldest target is "
            f"sm_{min(supported)}); install the NVRTC of an older CUDA that still supports this GPU"
        )
    if driver_version is not None and driver_version < nvrtc_api:
        raise NvrtcError(
            f"NVRTC {nvrtc_version[0]}.{nvrtc_version[1]} does not know sm_{device_cc}, and PTX from it cannot be "
            f"JIT-compiled by this driver (CUDA {driver_version // 1000}.{driver_version % 1000 // 10}); install a "
            "newer NVRTC or driver"
        )
    return f"compute_{max(lower)}", f"PTX for compute_{max(lower)}, JIT-compiled by the driver (NVRTC predates the GPU)"


EM_CUDA = 190


def cubin_sm(image: bytes) -> int | None:
    """The SM a CUBIN was built for, read from its ELF header (None if it is not a CUDA ELF).

    Two encodings exist (read from cubins NVRTC 11.8/12.6/13.5 produced): ELF OS ABI 0x33 (ABI version 7) keeps the
    SM in the low byte of e_flags (0x3d053d = sm_61); OS ABI 0x41 (ABI version 8, CUDA 13) keeps it in bits 8-15
    (0x6005a04 = sm_90).
    """
    if len(image) < 52 or not image.startswith(b"\x7fELF") or image[4] != 2:
        return None
    if struct.unpack_from("<H", image, 18)[0] != EM_CUDA:
        return None
    flags = struct.unpack_from("<I", image, 48)[0]
    return (flags >> 8) & 0xFF if image[7] == 0x41 else flags & 0xFF
