"""Print, as JSON, the installed versions of the given Debian packages and of every wheel in a virtual environment.

Run by the host_record role with the host's system Python: `installed.py --venv DIR [PACKAGE ...]`.
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


def wheels(venv):
    python = os.path.join(venv, "bin", "python")
    if not venv or not os.path.exists(python):
        return {}
    proc = subprocess.run([python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                          capture_output=True, text=True, env=dict(os.environ, PIP_NO_INPUT="1"))
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        sys.exit(1)
    return {row["name"].lower(): row["version"] for row in json.loads(proc.stdout)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--venv", default="")
    parser.add_argument("packages", nargs="*")
    args = parser.parse_args()
    json.dump({"packages": packages(args.packages), "wheels": wheels(args.venv)}, sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()
