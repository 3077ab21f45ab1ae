"""The apply of a plan on a managed interpreter against the same profile on the distribution's Python, in one run.

Issue 38 asks for "the apply time of the managed-interpreter case, against the same plan on the system Python".
The DeskMini profile on Debian 13 plans its environment on the system Python 3.13; the same profile with torch
pinned to 2.1.2 (Python 3.8-3.11) takes a managed CPython 3.11 (python-build-standalone's install_only layout).
Both are applied to a fresh stock Debian 13 sandbox (debootstrap, `main` only, over SSH), frameworks skipped as in
the default tests, so the two applies install the same roles' packages and the same other wheels; the difference is
the interpreter's fetch, check and unpack, and the environment made on it. Runs alternate (system, managed, system,
managed, ...), each on a host made fresh for it, and each is followed by a converged `--full` re-apply, timed too.

The interpreter is the tests' STAND-IN (tests/support/standin_python.py: CPython 3.11 built from Debian 12's source,
laid out as the release's archive, served as `--python-mirror`), since python-build-standalone's releases cannot be
reached from this machine. The real archive is 25-35 MB, the stand-in's size is printed with the figures.

    python bench/managed_apply.py [--runs 2]

Writes docs/bench/managed_apply.json (every run, medians, ratio managed/system).
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision.pipeline.plan import plan_for  # noqa: E402
from tests.support.standin_python import standin_mirror  # noqa: E402

PROFILE = ROOT / "profiles/deskmini.yaml"
NAME = "pv-bench-managed"


def timed(args: list[str], env: dict) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:6])}... failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="provision-managed-"))
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    cli = [sys.executable, "-m", "provision"]
    pinned = tmp / "deskmini-torch212.yaml"
    pinned.write_text(PROFILE.read_text().replace("    - name: pytorch\n",
                                                  '    - name: pytorch\n      version: "2.1.2"\n'))
    plan = plan_for(pinned, os_override="debian-13", indexes={"pytorch": False})
    if plan.python.source != "managed":
        sys.exit(f"the pinned profile does not take a managed interpreter: {plan.python}")
    mirror = standin_mirror(plan.python.managed.archive)
    archive_mb = (mirror / plan.python.managed.archive).stat().st_size / 1e6
    cases = {
        "system": [str(PROFILE)],
        "managed": [str(pinned), "--python-mirror", str(mirror)],
    }
    first: dict[str, list[float]] = {case: [] for case in cases}
    again: dict[str, list[float]] = {case: [] for case in cases}
    base = [*cli, "apply", "--os", "debian-13", "--sandbox", NAME, "--yes", "--skip-frameworks",
            "--index", "pytorch=off"]
    try:
        for i in range(args.runs):
            for case, extra in cases.items():
                subprocess.run([*cli, "sandbox", "down", NAME], cwd=ROOT, env=env, capture_output=True)
                timed([*cli, "sandbox", "up", NAME, "--os", "debian-13", "-o", str(tmp / "inventory.yml")], env)
                apply = [*base[:4], extra[0], *base[4:], *extra[1:]]
                first[case].append(timed(apply, env))
                again[case].append(timed([*apply, "--full"], env))
                print(f"run {i + 1} {case}: apply {first[case][-1]:.1f} s, --full re-apply {again[case][-1]:.1f} s",
                      flush=True)
    finally:
        subprocess.run([*cli, "sandbox", "down", NAME], cwd=ROOT, env=env, capture_output=True)
    med = {case: round(statistics.median(v), 1) for case, v in first.items()}
    med_again = {case: round(statistics.median(v), 1) for case, v in again.items()}
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "load_average_at_end": os.getloadavg(),
        "what": "profiles/deskmini.yaml --os debian-13 --skip-frameworks on a fresh stock Debian 13 sandbox over SSH: "
                "system = the distribution's Python 3.13; managed = the same profile with torch pinned to 2.1.2, "
                f"which takes CPython {plan.python.version} from the stand-in mirror ({archive_mb:.1f} MB archive); "
                "runs alternated, each on a fresh host, each followed by a converged --full re-apply",
        "apply_s": {case: [round(x, 1) for x in v] for case, v in first.items()},
        "full_reapply_s": {case: [round(x, 1) for x in v] for case, v in again.items()},
        "median_apply_s": med,
        "median_full_reapply_s": med_again,
        "ratio_managed_to_system": {"apply": round(med["managed"] / med["system"], 2),
                                    "full_reapply": round(med_again["managed"] / med_again["system"], 2)},
    }
    out = ROOT / "docs" / "bench" / "managed_apply.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"medians: apply {med}, --full re-apply {med_again}; managed/system {result['ratio_managed_to_system']}")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
