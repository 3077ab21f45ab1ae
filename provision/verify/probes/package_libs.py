"""Probe: the shared libraries a package ships in its lib/ directory (torch/lib/*.so), without importing it.

Run by provision/verify/environment.py as `python -c <this file> MODULE` in the environment's Python.
Prints one line: PROVISION-PROBE {"libs": [paths], "version": "2.11.0+cu130"} or {"missing": why}; the version is
the installed distribution's of the same name (its metadata, read without importing it), null where it has none.
"""

import importlib.metadata
import importlib.util
import json
import os
import sys

spec = importlib.util.find_spec(sys.argv[1])
out: dict = {}
if spec is None or not spec.origin:
    out["missing"] = sys.argv[1] + " is not installed"
else:
    lib = os.path.join(os.path.dirname(spec.origin), "lib")
    out["libs"] = sorted(os.path.join(lib, f) for f in os.listdir(lib) if ".so" in f) if os.path.isdir(lib) else []
    try:
        out["version"] = importlib.metadata.version(sys.argv[1])
    except importlib.metadata.PackageNotFoundError:
        out["version"] = None
print("PROVISION-PROBE " + json.dumps(out))
