"""Time from a bare Debian container to a verified environment, per shipped profile, with warm caches.

"Verified" is the whole `provision apply`: every role, the GPU verifier (compile-only here: no GPU), and
`provision check` (testinfra) green. Each profile runs once untimed to warm the apt cache and the wheelhouse, then
once timed on a fresh container. Frameworks are left out (their wheel indexes are unreachable here).
Writes docs/bench/bare_to_verified.json and prints the figures.

    python bench/bare_to_verified.py [--profiles deskmini:debian-13,aws-p2:debian-12,h100:debian-13]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "pv-bench-bare"


def apply(profile: str, os_name: str, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    subprocess.run([sys.executable, "-m", "provision", "sandbox", "down", NAME], capture_output=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "provision", "apply", f"profiles/{profile}.yaml", "--os", os_name,
                           "--sandbox", NAME, "--yes", "--skip-frameworks"], cwd=ROOT, capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{profile} on {os_name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, proc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profiles", default="deskmini:debian-13,aws-p2:debian-12,h100:debian-13")
    args = parser.parse_args()
    env = os.environ | {"PROVISION_STATE": str(Path(os.environ.get("TMPDIR", "/tmp")) / "provision-bench-state")}
    rows = []
    for item in args.profiles.split(","):
        profile, os_name = item.split(":")
        apply(profile, os_name, env)  # warm the caches
        wall, proc = apply(profile, os_name, env)
        checks = re.search(r"(\d+) passed", proc.stdout)
        record = json.loads((Path(env["PROVISION_STATE"]) / "hosts" / NAME / "applied.json").read_text())
        report = record.get("verify") or {}
        summary = report.get("summary", {})
        row = {"profile": profile, "os": os_name, "wall_s": round(wall, 1),
               "changed": int(re.search(r"changed=(\d+)", proc.stdout).group(1)),
               "checks_passed": int(checks.group(1)) if checks else None,
               "verify": f"{report.get('status')} ({report.get('mode')}): {summary.get('passed')} passed, "
                         f"{summary.get('failed')} failed"}
        print(json.dumps(row), flush=True)
        rows.append(row)
    subprocess.run([sys.executable, "-m", "provision", "sandbox", "down", NAME], capture_output=True)
    result = {"date": dt.date.today().isoformat(),
              "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
              "note": "apply + verify (compile-only, no GPU) + check, frameworks skipped, warm apt cache and wheelhouse",
              "profiles": rows}
    out = ROOT / "docs" / "bench" / "bare_to_verified.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
