"""Run inside a Jupyter kernel by jupyter_kernel.py: which interpreter the kernel is and how many GPUs the driver
shows it (-1: libcuda.so.1 not loadable). Prints one JSON line."""

import ctypes
import json
import sys

n = -1
try:
    cu = ctypes.CDLL("libcuda.so.1")
    c = ctypes.c_int()
    n = c.value if cu.cuInit(0) == 0 and cu.cuDeviceGetCount(ctypes.byref(c)) == 0 else 0
except OSError:
    pass
print(json.dumps({"executable": sys.executable, "gpus": n}))
