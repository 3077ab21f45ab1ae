"""Probe: the shared libraries of JAX's CUDA plugin (jax_plugins/xla_cudaNN/*.so from jax-cudaNN-pjrt and
jax_cudaNN_plugin/*.so), found without importing jax.

Run by provision/verify/environment.py as `python -c <this file> EXTRA` (cuda12 | cuda13) in the environment's Python.
Prints one line: PROVISION-PROBE {"libs": [paths], "version": jax's or null} or {"missing": why}.
"""

import importlib.metadata
import importlib.util
import json
import os
import sys

extra = sys.argv[1]
libs = []
missing = []
for module in ("jax_plugins.xla_" + extra, "jax_" + extra + "_plugin"):
    try:
        spec = importlib.util.find_spec(module)
    except ImportError:
        spec = None
    where = list(spec.submodule_search_locations or []) if spec is not None else []
    if not where:
        missing.append(module)
    for folder in where:
        libs += [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".so")]
out: dict = {"libs": libs} if libs else {"missing": " and ".join(missing) + " not installed"}
if libs:
    # The installed jax's version, from its metadata (jax itself is not imported): what the check names.
    try:
        out["version"] = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        out["version"] = None
print("PROVISION-PROBE " + json.dumps(out))
