"""Print, as JSON, the installed versions of the given Debian packages and of every wheel in a virtual environment.

Run by the host_record role as the environment's owner (never root: the environment's interpreter loads what its owner
wrote), with the system Python in isolated mode, the script on stdin: `python3 -I - --venv DIR [PACKAGE ...]`.
Missing packages are recorded as null, so the record says what is absent as well as what is there.
"""

import argparse
import json
import os
import subprocess
import sys


def packages(names):
    out = {}
    for name in names:
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Version}", name],
                              capture_output=True, text=True)
        status, _, version = proc.stdout.partition("\t")
        out[name] = version if proc.returncode == 0 and status.startswith("ii") else None
    return out


# The environment's own interpreter lists its distributions (importlib.metadata, as `pip list` does, in sys.path
# order, first one wins) without loading pip: this whole script took 0.65-0.8 s instead of 1.0-1.5 s on a converged
# sandbox (docs/bench/reapply_ab.json), with the same names and versions.
_LIST = """
import importlib.metadata as m, json
seen = {}
for d in m.distributions():
    name = (d.metadata["Name"] or "").lower()
    if name and name not in seen:
        seen[name] = d.version
print(json.dumps(seen))
"""


def wheels(venv):
    python = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(python):
        return {}
    proc = subprocess.run([python, "-I", "-c", _LIST], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(1)
    return json.loads(proc.stdout)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--venv", default="")
    parser.add_argument("packages", nargs="*")
    args = parser.parse_args()
    json.dump({"packages": packages(args.packages), "wheels": wheels(args.venv)}, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
