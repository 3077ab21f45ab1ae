"""Mitogen warmed (provision.runners.mitogen_warm: the collection directories listed once per play, the play's vars file
parsed once per play) against Mitogen as it ships (every task's worker lists them, ansible-playbook parses the vars
file for every task), measured in one run on the same converged host, runs alternated.

The workload is `provision apply --full --skip-check --skip-frameworks` on a converged DeskMini sandbox: every role's
every task (about 200 workers), nothing to change, so the controller's per-task cost is most of what is measured.
Each run's wall time and the controller's CPU-seconds (this process's children: provision, ansible-playbook and its
workers, ssh) go to docs/bench/mitogen_warm.json with the medians and the ratios warmed / shipped.

    python bench/mitogen_warm.py [--runs 3] [--sandbox NAME] [--profile profiles/deskmini.yaml --os debian-13]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def apply(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, controller CPU-seconds) of one apply; exits when it fails or changes something."""
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "provision", "apply", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL)
    took, used = time.perf_counter() - start, children_cpu() - cpu
    changed = re.search(r"changed=(\d+)", proc.stdout)
    if proc.returncode != 0 or changed is None or changed.group(1) != "0":
        sys.exit(f"apply failed or changed something (exit {proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
    return took, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sandbox", default="bench-warm")
    parser.add_argument("--profile", default="profiles/deskmini.yaml")
    parser.add_argument("--os", default="debian-13")
    parser.add_argument("--out", default=str(ROOT / "docs/bench/mitogen_warm.json"))
    opts = parser.parse_args()
    base = [opts.profile, "--os", opts.os, "--sandbox", opts.sandbox, "--skip-frameworks", "--yes"]
    env = {k: v for k, v in os.environ.items() if k not in ("PROVISION_MITOGEN_WARM", "PROVISION_ANSIBLE_STRATEGY")}
    first = subprocess.run([sys.executable, "-m", "provision", "apply", *base, "--skip-check"], cwd=ROOT, env=env,
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if first.returncode != 0:
        sys.exit(f"the converging apply failed:\n{first.stdout[-3000:]}{first.stderr[-2000:]}")
    runs: dict[str, list[dict[str, float]]] = {"warmed": [], "shipped": []}
    started = dt.datetime.now(dt.UTC)
    load = os.getloadavg()[0]
    for n in range(opts.runs):
        for name, warm in (("warmed", "1"), ("shipped", "0")) if n % 2 == 0 else (("shipped", "0"), ("warmed", "1")):
            wall, cpu = apply([*base, "--full", "--skip-check"], env | {"PROVISION_MITOGEN_WARM": warm})
            runs[name].append({"wall_s": round(wall, 2), "controller_cpu_s": round(cpu, 2)})
            print(f"{name:8} wall {wall:6.1f} s  controller CPU {cpu:6.1f} s", flush=True)
    med = {name: {key: statistics.median(r[key] for r in rows) for key in ("wall_s", "controller_cpu_s")}
           for name, rows in runs.items()}
    result = {
        "command": " ".join(["python", "bench/mitogen_warm.py", "--runs", str(opts.runs)]),
        "workload": "provision apply " + " ".join([*base, "--full", "--skip-check"]) + " on a converged host",
        "started": started.isoformat(timespec="seconds"), "load_at_start": round(load, 2),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs", "runs": runs, "medians": med,
        "ratio_warmed_to_shipped": {key: round(med["warmed"][key] / med["shipped"][key], 3)
                                    for key in ("wall_s", "controller_cpu_s")},
    }
    Path(opts.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["medians"]), result["ratio_warmed_to_shipped"])


if __name__ == "__main__":
    main()
