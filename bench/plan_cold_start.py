"""Cold-start time of `provision plan --json` for every shipped profile, each run a fresh process.

Target (issue 2): under 0.5 s per profile. Reported with the bare interpreter's start-up measured in the same run,
so the ratio stays comparable across machines. Writes docs/bench/plan_cold_start.json and prints a table.

    python bench/plan_cold_start.py [--runs 7]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def command() -> list[str]:
    """What a user types: the `provision` console script installed next to this interpreter (else `-m provision`)."""
    script = Path(sys.executable).parent / "provision"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "provision"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    # Byte-compile the package as `pip install` does for a wheel. Without this, a checkout used with
    # PYTHONDONTWRITEBYTECODE=1 (set on this machine) recompiles every module of provision on every run, which is
    # not what an installed provision does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "provision")], check=True)
    base = [timed([sys.executable, "-c", "pass"]) for _ in range(args.runs)]
    results = []
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        cmd = [*command(), "plan", str(profile.relative_to(ROOT)), "--json"]
        timed(cmd)  # warm the page cache, as any second run on a machine would be
        samples = [timed(cmd) for _ in range(args.runs)]
        results.append(
            {"profile": profile.stem, "median_s": round(statistics.median(samples), 3), "max_s": round(max(samples), 3)}
        )
    report = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "interpreter_start_s": round(statistics.median(base), 3),
        "command": "provision plan PROFILE --json (console script, byte-compiled package)",
        "target_s": 0.5,
        "profiles": results,
    }
    out = ROOT / "docs" / "bench" / "plan_cold_start.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{'profile':20} {'median s':>9} {'max s':>7} {'x python -c pass':>17}")
    for r in results:
        print(
            f"{r['profile']:20} {r['median_s']:9.3f} {r['max_s']:7.3f} {r['median_s'] / report['interpreter_start_s']:17.1f}"
        )
    worst = max(r["median_s"] for r in results)
    print(
        f"worst median {worst:.3f} s (target < {report['target_s']} s): {'OK' if worst < report['target_s'] else 'OVER'}"
    )


if __name__ == "__main__":
    main()
