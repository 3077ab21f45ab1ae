"""Cold-start time of `provision plan PROFILE --json` for every shipped profile and of `provision --help`, each run
a fresh process, beside a bare `python -c pass` timed in the same run.

Targets (issue 55): median <= 0.3 s per profile, `--help` <= 0.15 s. The machine this project runs on is a shared
2-core VM, so each figure is given with the load average and as a ratio to `python -c pass` measured in the same
run, interleaved (pass, then each command, round after round), so a busy minute weighs on all of them alike. Wall
time and the process's CPU time (user + sys, from getrusage) are both reported: CPU time moves less with the load.

`--before REV` times the same commands for an earlier commit's package in the same run (its files from `git archive`
into a temporary directory, put first on PYTHONPATH), round by round with this tree's. With it, both sides run as
`python -m provision` (the console script would import this tree); without it, the console script installed next to
this interpreter, as a user types it. Writes docs/bench/plan_cold_start.json (or --json PATH) and prints a table.

    python bench/plan_cold_start.py [--runs 9] [--before REV]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLAN_TARGET_S, HELP_TARGET_S = 0.3, 0.15


def timed(cmd: list[str], env: dict[str, str], cwd: Path = ROOT) -> tuple[float, float]:
    """Wall and CPU (user + sys) seconds of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def console_script() -> list[str]:
    """What a user types: the `provision` console script installed next to this interpreter (else `-m provision`)."""
    script = Path(sys.executable).parent / "provision"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "provision"]


def checkout(rev: str, into: Path) -> Path:
    """REV's package, byte-compiled, in `into` (a `git archive` of provision/)."""
    archive = subprocess.run(["git", "archive", rev, "provision"], cwd=ROOT, check=True, capture_output=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    compile_package(into / "provision")
    return into


def compile_package(path: Path) -> None:
    # Byte-compile as `pip install` does for a wheel. Without this, a checkout used with PYTHONDONTWRITEBYTECODE=1
    # (set on this machine) recompiles every module on every run, which no installed provision does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(path)], check=True, stdout=subprocess.DEVNULL)


def commands(sides: dict[str, list[str]]) -> dict[str, list[str]]:
    """Every timed command, by name: `pass`, then per side `SIDE help` and `SIDE plan PROFILE`."""
    out = {"pass": [sys.executable, "-c", "pass"]}
    for side, prog in sides.items():
        out[f"{side} help"] = [*prog, "--help"]
        for profile in sorted((ROOT / "profiles").glob("*.yaml")):
            out[f"{side} plan {profile.stem}"] = [*prog, "plan", str(profile), "--json"]
    return out


def measure(cmds: dict[str, list[str]], envs: dict[str, dict[str, str]], runs: int, cwd: Path) -> dict[str, dict]:
    """Run every command once to warm the page cache (and build the database's cache), then `runs` rounds, each
    round every command once in turn."""
    for name, cmd in cmds.items():
        timed(cmd, envs[name], cwd)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, cmd in cmds.items():
            wall, cpu = timed(cmd, envs[name], cwd)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {name: {"median_s": round(statistics.median(walls[name]), 3), "max_s": round(max(walls[name]), 3),
                   "cpu_median_s": round(statistics.median(cpus[name]), 3)} for name in cmds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--before", metavar="REV", help="also time this commit's package, in the same rounds")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "bench" / "plan_cold_start.json")
    args = parser.parse_args()
    compile_package(ROOT / "provision")
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="plan-cold-before-") as tmp:
        # An empty working directory: `python -m provision` puts it first on sys.path, before PYTHONPATH.
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        old = ROOT
        if args.before:
            old = checkout(args.before, Path(tmp) / "before")
            module = [sys.executable, "-m", "provision"]
            sides = {"before": module, "after": module}
            side_env = {"before": env | {"PYTHONPATH": str(old)}, "after": env | {"PYTHONPATH": str(ROOT)}}
        else:
            sides, side_env = {"now": console_script()}, {"now": env}
        for side, expected in ({"before": old, "after": ROOT} if args.before else {}).items():
            where = subprocess.run([sys.executable, "-c", "import provision; print(provision.__file__)"], cwd=cwd,
                                   env=side_env[side], check=True, capture_output=True, text=True).stdout.strip()
            assert Path(where).is_relative_to(expected), f"{side} imports {where}, not {expected}'s provision"
        cmds = commands(sides)
        envs = {name: side_env.get(name.split(" ")[0], env) for name in cmds}
        load_start = os.getloadavg()
        results = measure(cmds, envs, args.runs, cwd)
        load_end = os.getloadavg()
    report = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_average_1_5_15": {"start": [round(x, 2) for x in load_start], "end": [round(x, 2) for x in load_end]},
        "runs": args.runs,
        "command": "provision plan PROFILE --json and provision --help, "
        + (f"python -m provision, before = {args.before}, after = this tree" if args.before else "console script"),
        "targets_s": {"plan": PLAN_TARGET_S, "help": HELP_TARGET_S},
        "results": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)


def print_table(report: dict) -> None:
    results = report["results"]
    base, base_cpu = results["pass"]["median_s"], results["pass"]["cpu_median_s"]
    print(f"{report['date']}, load average {report['load_average_1_5_15']['start']} -> "
          f"{report['load_average_1_5_15']['end']}, {report['runs']} runs each")
    print(f"{'command':32} {'median s':>9} {'max s':>7} {'x pass':>7} {'CPU s':>7} {'x pass':>7}")
    for name, r in results.items():
        print(f"{name:32} {r['median_s']:9.3f} {r['max_s']:7.3f} {r['median_s'] / base:7.1f} "
              f"{r['cpu_median_s']:7.3f} {r['cpu_median_s'] / max(base_cpu, 1e-3):7.1f}")
    for side in sorted({name.split(" ")[0] for name in results if name != "pass"}):
        worst = max(r["median_s"] for name, r in results.items() if name.startswith(f"{side} plan "))
        helps = results[f"{side} help"]["median_s"]
        print(f"{side}: worst plan median {worst:.3f} s (target <= {PLAN_TARGET_S}), --help {helps:.3f} s "
              f"(target <= {HELP_TARGET_S})")


if __name__ == "__main__":
    main()
