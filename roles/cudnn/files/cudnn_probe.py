"""Find and load libcudnn, call cudnnGetVersion and report the version as JSON.

Shipped with the cudnn role and fed on stdin to `python -I -` (as the environment's owner for wheels). Works without a GPU or driver:
cudnnGetVersion only reports the version the library was built as.

Search order: the nvidia-cudnn wheels in a virtual environment (--venv), then --lib-dir, then the loader cache.
cuDNN 9 encodes major*10000 + minor*100 + patch, earlier releases major*1000 + minor*100 + patch.
Exit status 1 when no loadable libcudnn is found.
"""

import argparse
import ctypes
import glob
import json
import os
import re
import subprocess
import sys


def candidates(venv: str, lib_dir: str) -> list[str]:
    found = []
    if venv:
        found += sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "cudnn", "lib",
                                               "libcudnn.so*")))
    if lib_dir:
        found += sorted(glob.glob(os.path.join(lib_dir, "libcudnn.so*")))
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        cache = ""
    found += [m.group(1) for m in (re.search(r"\slibcudnn\.so[.0-9]*\s.*=>\s*(\S+)", line) for line in cache.splitlines()) if m]
    return found


def decode(value: int) -> str:
    if value >= 90000:
        return f"{value // 10000}.{(value % 10000) // 100}.{value % 100}"
    return f"{value // 1000}.{(value % 1000) // 100}.{value % 100}"


def preload_cublas(venv: str) -> None:
    """cuDNN 8's sub-libraries find cuBLAS through the global symbol table (a framework loads it first); without
    it cudnnGetVersion aborts the whole process. Load the environment's cuBLAS the same way."""
    if not venv:
        return
    site = os.path.join(venv, "lib", "python3*", "site-packages", "nvidia", "cublas", "lib")
    for stem in ("libcublasLt.so*", "libcublas.so*"):
        for path in sorted(glob.glob(os.path.join(site, stem)), reverse=True):
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default="")
    parser.add_argument("--lib-dir", default="")
    args = parser.parse_args()
    preload_cublas(args.venv)
    errors = []
    for path in candidates(args.venv, args.lib_dir):
        try:
            lib = ctypes.CDLL(path)
            lib.cudnnGetVersion.restype = ctypes.c_size_t
            raw = int(lib.cudnnGetVersion())
        except (OSError, AttributeError) as exc:
            errors.append(f"{path}: {exc}")
            continue
        real = os.path.realpath(path)
        print(json.dumps({"version": decode(raw), "raw": raw, "library": real, "library_dir": os.path.dirname(real),
                          "errors": errors}))
        return 0
    print(json.dumps({"version": None, "raw": None, "library": None, "library_dir": None, "errors": errors}))
    return 1


if __name__ == "__main__":
    sys.exit(main())
