"""GPU verification: CUDA C++ kernels compiled at run time with NVRTC, launched through the driver API (ctypes),
checked against NumPy, timed with CUDA events, reported as text lines and JSON (schema in report.py).

Runs as `python -m provision.verify` from the installed wheel, or as `python -m verify` from a copy of this
directory (the gpu_verify role puts it in /opt/provision/verify): only relative imports, the standard library
and NumPy, plus the NVRTC library at run time.
"""

from .report import SCHEMA

__all__ = ["SCHEMA"]
