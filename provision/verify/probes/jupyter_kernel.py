"""Probe: start the environment's Jupyter kernel `python3` and run the code given on stdin in it
(kernel_sees_gpu.py), which prints one JSON line.

Run by provision/verify/environment.py as `python -c <this file>` in the environment's Python.
Prints one line: PROVISION-PROBE {"kernelspecs": [...], "executable": ..., "gpus": n} or {"missing"/"error": why}.
"""

import json
import sys

out: dict = {}
try:
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import start_new_kernel
except ImportError as exc:
    print("PROVISION-PROBE " + json.dumps({"missing": str(exc)}))
    sys.exit(0)
out["kernelspecs"] = sorted(KernelSpecManager().find_kernel_specs())
code = sys.stdin.read()
chunks: list = []


def hook(msg):
    if msg["msg_type"] == "stream":
        chunks.append(msg["content"]["text"])


try:
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
    try:
        kc.execute_interactive(code, timeout=120, output_hook=hook)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    out.update(json.loads("".join(chunks).strip().splitlines()[-1]))
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("PROVISION-PROBE " + json.dumps(out))
