"""Converged re-apply, this checkout against an earlier commit, measured in one run (runs alternated).

This machine's speed varies from one session to the next by up to 2x (the same re-apply took 28 s one day and 15 s
the next), so a change to the re-apply is judged only against its baseline measured beside it: two sandboxes in the
same state, one provisioned by each version, then N re-applies of each, alternating, same profile, same caches.
The earlier commit is checked out with `git worktree` and run from there (its roles come with it: provision finds
roles/ beside its package). Also counts the tasks each version runs.
Writes docs/bench/reapply_ab.json (or, when that holds an earlier comparison, reapply_ab-<date>-<commit>.json) and
prints the figures.

    python bench/reapply_ab.py --before REV [--runs 8] [--profile profiles/deskmini.yaml --os debian-13]
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def provision(tree: Path | None, *args: str, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(env)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    # cwd is the version's own tree: `python -m` puts the working directory first on sys.path, before PYTHONPATH.
    proc = subprocess.run([sys.executable, "-m", "provision", *args], cwd=tree or ROOT, capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        sys.exit(f"provision {' '.join(args[:4])}... failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")
    return proc


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True, help="the commit to compare against")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--profile", default="profiles/deskmini.yaml")
    parser.add_argument("--os", default="debian-13")
    args = parser.parse_args()
    rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    head = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    tmp = Path(tempfile.mkdtemp(prefix="provision-ab-"))
    before_tree = tmp / "before"
    subprocess.run(["git", "worktree", "add", "--detach", str(before_tree), rev], cwd=ROOT, capture_output=True,
                   check=True)
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    sides = {"before": (before_tree, "pv-ab-before"), "after": (None, "pv-ab-after")}
    common = [args.profile, "--os", args.os, "--yes", "--skip-frameworks", "--skip-check"]
    walls: dict[str, list[float]] = {"before": [], "after": []}
    # The controller's CPU-seconds per run (provision, ansible-playbook, Mitogen, docker exec: every process this
    # run waits for, not the container's own): what each Ansible task costs the controller, and what grows with the
    # number of hosts. Steadier than the wall time on a VM whose speed drifts.
    cpus: dict[str, list[float]] = {"before": [], "after": []}
    tasks: dict[str, int] = {}
    # The first apply of each sandbox, from bare (the sandbox's start included): one run each, before first.
    from_bare: dict[str, float] = {}
    try:
        for side, (tree, name) in sides.items():  # provision each sandbox with its own version, timed (one each)
            provision(None, "sandbox", "down", name, env=env)
            start = time.perf_counter()
            provision(tree, "apply", *common, "--sandbox", name, env=env)
            from_bare[side] = round(time.perf_counter() - start, 1)
        for _ in range(args.runs):
            for side, (tree, name) in sides.items():
                start, cpu0 = time.perf_counter(), children_cpu_s()
                proc = provision(tree, "apply", *common, "--sandbox", name, env=env)
                walls[side].append(round(time.perf_counter() - start, 1))
                cpus[side].append(round(children_cpu_s() - cpu0, 1))
                changed = int(re.search(r"changed=(\d+)", proc.stdout).group(1))
                if changed:
                    sys.exit(f"{side}: a re-apply changed {changed} thing(s); the sandboxes are not converged")
                tasks[side] = len(re.findall(rf"^{name}\s+(ok|changed|skipped)\s", proc.stdout + proc.stderr, re.M))
            print(f"before {walls['before'][-1]} s ({cpus['before'][-1]} CPU-s), "
                  f"after {walls['after'][-1]} s ({cpus['after'][-1]} CPU-s)", flush=True)
    finally:
        for _, name in sides.values():
            provision(None, "sandbox", "down", name, env=env, check=False)
        subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT, capture_output=True)
    med = {side: statistics.median(w) for side, w in walls.items()}
    med_cpu = {side: statistics.median(c) for side, c in cpus.items()}
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "what": f"converged single-host re-apply of {args.profile} --os {args.os} --skip-frameworks --skip-check; "
                f"before = {rev}, after = {head}; two sandboxes, runs alternated",
        "reapply_wall_s": {**walls, "median_before": med["before"], "median_after": med["after"],
                           "ratio_after_to_before": round(med["after"] / med["before"], 2)},
        "controller_cpu_s": {**cpus, "median_before": med_cpu["before"], "median_after": med_cpu["after"]},
        "tasks_reported": tasks,
        "from_bare_wall_s": from_bare,
        "changed": 0,
        "target_s": 15,
    }
    # An earlier comparison's figures stay as they are: a new one gets the date and the commit it was measured against.
    out = ROOT / "docs" / "bench" / "reapply_ab.json"
    if out.exists():
        out = out.with_name(f"reapply_ab-{result['date']}-{rev}.json")
    n = 2
    while out.exists():  # nor one of the same day and commit
        out, n = out.with_name(f"reapply_ab-{result['date']}-{rev}-{n}.json"), n + 1
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"from bare (one each): {from_bare}")
    print(f"median before {med['before']} s, after {med['after']} s "
          f"(ratio {result['reapply_wall_s']['ratio_after_to_before']}); controller CPU-s {med_cpu}; tasks {tasks}")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
