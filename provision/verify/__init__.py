"""GPU verification: CUDA C++ kernels compiled at run time with NVRTC, launched through the driver API (ctypes),
checked against NumPy, timed with CUDA events, reported as text lines and JSON (schema in report.py).

Runs as `python -m provision.verify` from the installed wheel, or as `python -m verify` from a copy of this
directory (the gpu_verify role puts it in /opt/provision/verify): only relative imports, the standard library
and NumPy, plus the NVRTC library at run time.

Where things are:
- suite.py: the whole run (which checks, in what order) -> report.py: Check, Report, text lines and JSON schema;
- stack.py: driver, device and peak figures, NVRTC, CUDA runtime, cuDNN against the plan (expect.py);
- kernel_checks.py: the CUDA kernels in kernels/ compiled, launched, checked against NumPy and timed;
- environment.py: frameworks, their GPU code (fatbin.py) and Jupyter, through the scripts in probes/;
- driver.py, nvrtc.py, libs.py: libcuda/NVML, libnvrtc, and finding libraries plus cuBLAS, through ctypes;
- __main__.py: the target-side command line; controller.py: `provision verify` on the controller.
"""

from .report import SCHEMA

__all__ = ["SCHEMA"]
