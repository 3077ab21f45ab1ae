"""Find and load the CUDA runtime (and NVRTC) a host has, and report their versions as JSON.

Shipped with the cuda role and fed on stdin to `python -I -` (as the environment's owner for wheels).
nvrtcVersion works without a GPU or driver, and so does cudaRuntimeGetVersion from CUDA 12 on. CUDA 11's runtime
answers cudaErrorInsufficientDriver (35) when no driver is loaded, and cudaErrorNoDevice (100) when the driver's user
space is there but no GPU is (a container, or a host before its first reboot); the library then still loaded, and its
version is read from the package that installed it (the wheel's metadata, or dpkg). The report says which way the
version was found.

Search order: the wheels in a virtual environment (--venv), then CUDA_HOME (--home), then the loader cache.
Exit status 1 when no loadable libcudart is found (the JSON then says where it looked).
"""

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys


def candidates(pattern: str, venv: str, home: str) -> list[str]:
    found = []
    if venv:
        found += sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "**", pattern),
                                  recursive=True))
    if home:
        for sub in ("lib64", "lib", os.path.join("targets", "*", "lib")):
            found += sorted(glob.glob(os.path.join(home, sub, pattern)))
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        cache = ""
    regex = re.compile(r"\s(" + re.escape(pattern).replace(r"\*", ".*") + r")\s.*=>\s*(\S+)")
    found += [m.group(2) for m in map(regex.search, cache.splitlines()) if m]
    return [p for p in found if not p.endswith(".a")]


# Answers of CUDA 11's cudaRuntimeGetVersion that mean "loaded, but cannot ask the driver", and why.
CUDA_NO_DRIVER_ANSWERS = {35: "no driver loaded", 100: "no GPU device"}


def owner_version(path: str) -> str | None:
    """major.minor of the wheel or Debian package that installed `path`."""
    real = os.path.realpath(path)
    try:
        from importlib import metadata

        for dist in metadata.distributions():
            for file in dist.files or ():
                if os.path.realpath(dist.locate_file(file)) == real:
                    return ".".join(dist.version.split(".")[:2])
    except Exception:  # noqa: BLE001 - a broken distribution must not hide the dpkg answer
        pass
    owner = subprocess.run(["dpkg-query", "--search", real], capture_output=True, text=True, check=False)
    if owner.returncode == 0:
        package = owner.stdout.split(":", 1)[0].strip()
        version = subprocess.run(["dpkg-query", "--show", "--showformat=${Version}", package],
                                 capture_output=True, text=True, check=False).stdout
        match = re.search(r"(\d+\.\d+)\.\d+", version)
        return match.group(1) if match else None
    return None


def load_version(paths: list[str], symbol: str, two_ints: bool) -> tuple[str | None, str | None, list[str], str]:
    errors = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
            if two_ints:
                major, minor = ctypes.c_int(), ctypes.c_int()
                rc = getattr(lib, symbol)(ctypes.byref(major), ctypes.byref(minor))
                version = f"{major.value}.{minor.value}"
            else:
                value = ctypes.c_int()
                rc = getattr(lib, symbol)(ctypes.byref(value))
                version = f"{value.value // 1000}.{(value.value % 1000) // 10}"
        except (OSError, AttributeError) as exc:
            errors.append(f"{path}: {exc}")
            continue
        if rc in CUDA_NO_DRIVER_ANSWERS and not two_ints:
            version = owner_version(path)
            if version:
                return version, os.path.realpath(path), errors, f"package metadata ({CUDA_NO_DRIVER_ANSWERS[rc]})"
        if rc != 0:
            errors.append(f"{path}: {symbol} returned {rc}")
            continue
        return version, os.path.realpath(path), errors, symbol
    return None, None, errors, "not found"


def nvcc_version(home: str) -> str | None:
    nvcc = os.path.join(home, "bin", "nvcc") if home else ""
    if not nvcc or not os.access(nvcc, os.X_OK):
        return None
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default="")
    parser.add_argument("--home", default="")
    args = parser.parse_args()
    runtime, runtime_lib, runtime_errors, runtime_how = load_version(
        candidates("libcudart.so*", args.venv, args.home), "cudaRuntimeGetVersion", two_ints=False)
    nvrtc, nvrtc_lib, nvrtc_errors, _nvrtc_how = load_version(
        candidates("libnvrtc.so*", args.venv, args.home), "nvrtcVersion", two_ints=True)
    lib_dirs = sorted({os.path.dirname(p) for p in (runtime_lib, nvrtc_lib) if p})
    report = {
        "runtime_version": runtime,
        "runtime_library": runtime_lib,
        "runtime_version_from": runtime_how,
        "nvrtc_version": nvrtc,
        "nvrtc_library": nvrtc_lib,
        "library_dirs": lib_dirs,
        "home": os.path.dirname(os.path.dirname(runtime_lib)) if runtime_lib else None,
        "nvcc_version": nvcc_version(args.home),
        "errors": runtime_errors + nvrtc_errors,
    }
    print(json.dumps(report))
    return 0 if runtime else 1


if __name__ == "__main__":
    sys.exit(main())
