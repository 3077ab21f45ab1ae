"""Fleet benchmarks on container hosts: scaling (1, 4, 8 hosts from bare), Ansible strategies on a converged
re-apply, and the re-apply itself (wall time, changed count).

Every host is a fresh `provision sandbox` container (Debian, bridge network) sharing the controller's apt cache and
wheelhouse, which the run warms first (one untimed apply), so the figures measure provisioning, not downloads.
The plan is the DeskMini's on Debian 13 without frameworks (their index is unreachable here): driver user space,
CUDA and cuDNN wheels, Jupyter, the verifier.

Targets (issue 6): t(8)/t(1) <= 2.5 on this 2-core machine; re-apply: zero changes, under 15 s per host.
Each run also reports how busy the machine's cores were (/proc/stat): when they are saturated, the bound is the
work itself (unpacking GBs of wheels and packages per host), not Ansible's parallelism. And whose CPU it was: the
hosts' own (each container's cgroup plus the fuse-overlayfs daemon serving its root: hosts_cpu_s, host_cpu_s_max)
and the rest, the controller's (controller_cpu_s), since the sandboxes share the controller's cores.
Writes docs/bench/fleet.json and prints the figures.

With --before REV it compares instead: this checkout against an earlier commit (checked out with `git worktree` and run
from there, its roles with it), a fleet of --hosts hosts per side, in one run: each round brings up a bare fleet for
each side, applies it and re-applies it, and the rounds alternate the order (before first, then after first), so a
drift in the machine's speed falls on both sides. Writes docs/bench/fleet_ab-<date>-<commit>.json.

    python bench/fleet.py [--sizes 1,4,8] [--strategies mitogen_linear,mitogen_free,linear,free,playbook]  ('' for none)
    python bench/fleet.py --before REV [--hosts 4] [--rounds 2]
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
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROFILE = "profiles/deskmini.yaml"
OS = "debian-13"


def sh(*args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(args[:6])}... failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def provision(*args: str, env: dict | None = None, check: bool = True, tree: Path | None = None
              ) -> subprocess.CompletedProcess:
    """This checkout's provision, or (tree) an earlier version's, run from its own tree: `python -m` puts the working
    directory first on sys.path, before PYTHONPATH."""
    if tree is None:
        return sh(sys.executable, "-m", "provision", *args, env=env, check=check)
    env = dict(env or os.environ) | {"PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, "-m", "provision", *args], cwd=tree, capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        sys.exit(f"provision {' '.join(args[:4])}... ({tree}) failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")
    return proc


def fleet(n: int, tmp: Path, prefix: str = "pv-bench") -> tuple[list[str], Path]:
    names = [f"{prefix}-{i}" for i in range(1, n + 1)]
    inv = tmp / f"{prefix}-{n}.yml"
    provision("sandbox", "down", *[f"{prefix}-{i}" for i in range(1, 9)])
    provision("sandbox", "up", *names, "--os", OS, "-o", str(inv))
    return names, inv


def cpu_busy_s() -> float:
    """CPU-seconds this machine has been busy (all cores, all processes: the containers' work included)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def _hosts_of(inv: Path) -> list[str]:
    """The sandbox names an inventory `provision sandbox up -o` wrote lists (its hosts' names)."""
    return list((yaml.safe_load(inv.read_text()) or {}).get("all", {}).get("hosts", {})) if inv.exists() else []


def hosts_cpu_s(names: list[str]) -> dict[str, float]:
    """CPU-seconds each sandbox has used so far: its container's cgroup (every process in it) plus the
    fuse-overlayfs daemon that serves its root file system (the storage driver's work for that host's files, which
    on a machine of its own the host's kernel would do). Hosts whose figures cannot be read are left out."""
    out: dict[str, float] = {}
    daemons = {}
    for pid in Path("/proc").iterdir():
        if not pid.name.isdigit():
            continue
        try:
            cmd = (pid / "cmdline").read_bytes().split(b"\0")
            if not cmd[0].endswith(b"fuse-overlayfs"):
                continue
            fields = (pid / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        mount = next((c.decode() for c in reversed(cmd) if c), "")
        daemons[mount] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    for name in names:
        proc = subprocess.run(["docker", "inspect", "-f", "{{.Id}} {{.GraphDriver.Data.MergedDir}}", name],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            continue
        cid, _, merged = proc.stdout.strip().partition(" ")
        # cgroup v1 (cpuacct), or v2 under the systemd or the cgroupfs driver's path.
        v1 = Path(f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage")
        v2 = next((p for p in (Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat"),
                               Path(f"/sys/fs/cgroup/docker/{cid}/cpu.stat")) if p.exists()), None)
        if v1.exists():
            used = int(v1.read_text()) / 1e9
        elif v2 is not None and (usage := re.search(r"usage_usec (\d+)", v2.read_text())):
            used = int(usage.group(1)) / 1e6
        else:
            continue
        out[name] = used + daemons.get(merged, 0.0)
    return out


def timed_apply(inv: Path, env: dict, *extra: str, tree: Path | None = None) -> dict:
    names = _hosts_of(inv)
    start, cpu0, hosts0 = time.perf_counter(), cpu_busy_s(), hosts_cpu_s(names)
    proc = provision("apply", PROFILE, "-i", str(inv), "--yes", "--skip-frameworks", "--skip-check", *extra,
                     env=env, check=False, tree=tree)
    wall, cpu = time.perf_counter() - start, cpu_busy_s() - cpu0
    hosts1 = hosts_cpu_s(names)
    per_host = [hosts1[n] - hosts0[n] for n in names if n in hosts0 and n in hosts1]
    if proc.returncode != 0:
        sys.exit(f"apply failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    recap = re.search(r"changed=(\d+)", proc.stdout)
    if recap is None:
        sys.exit(f"apply printed no recap:\n{proc.stdout[-3000:]}")
    changed = int(recap.group(1))
    cores = os.cpu_count() or 1
    # cpu_bound_s: the wall time the machine's cores could not beat for this much work (cpu_s / cores).
    split = {}
    if per_host and len(per_host) == len(names):
        # The hosts' own CPU (their containers and file-system daemons) and the rest of the machine's: the
        # controller's (provision, ssh, Ansible; anything else running shows here too).
        split = {"hosts_cpu_s": round(sum(per_host), 1), "host_cpu_s_max": round(max(per_host), 2),
                 "controller_cpu_s": round(cpu - sum(per_host), 1)}
    return {"wall_s": round(wall, 1), "changed": changed, "cpu_s": round(cpu, 1),
            "cpu_busy_pct": round(100 * cpu / (wall * cores)), "cpu_bound_s": round(cpu / cores, 1), **split}


def compare(before: str, hosts: int, rounds: int, tmp: Path) -> None:
    """This checkout against `before`: a bare fleet applied, then re-applied, per side and round, sides alternated."""
    rev = sh("git", "rev-parse", "--short", before).stdout.strip()
    head = sh("git", "describe", "--always", "--dirty").stdout.strip()
    before_tree = tmp / "before"
    sh("git", "worktree", "remove", "--force", str(before_tree), check=False)
    sh("git", "worktree", "add", "--detach", str(before_tree), rev)
    # Each side keeps its own controller state (records, run state); the caches (wheelhouse, apt archives) are shared.
    env = {side: os.environ | {"PROVISION_STATE": str(tmp / f"state-{side}")} for side in ("before", "after")}
    sides: dict[str, Path | None] = {"before": before_tree, "after": None}
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        _, inv = fleet(1, tmp, "pv-ab")  # warm the shared caches, untimed
        timed_apply(inv, env["after"])
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                names, inv = fleet(hosts, tmp, "pv-ab")
                first = timed_apply(inv, env[side], tree=sides[side])
                again = timed_apply(inv, env[side], tree=sides[side])
                if again["changed"]:
                    sys.exit(f"{side}: the re-apply changed {again['changed']} thing(s); the fleet is not converged")
                runs[side].append({"round": r + 1, "from_bare": first, "reapply": again})
                print(f"round {r + 1}, {side}: {hosts} hosts from bare {first['wall_s']} s "
                      f"(changed={first['changed']}), re-apply {again['wall_s']} s", flush=True)
        provision("sandbox", "down", *names)
    finally:
        sh("git", "worktree", "remove", "--force", str(before_tree), check=False)

    def mean(side: str, what: str) -> float:
        return round(sum(run[what]["wall_s"] for run in runs[side]) / len(runs[side]), 1)

    result: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "what": f"{PROFILE} --os {OS} --skip-frameworks --skip-check on a fleet of {hosts} sandbox hosts; "
                f"before = {rev}, after = {head}; {rounds} round(s), sides alternated",
        "runs": runs,
        "mean_from_bare_s": {side: mean(side, "from_bare") for side in sides},
        "mean_reapply_s": {side: mean(side, "reapply") for side in sides},
    }
    result["ratio_after_to_before"] = {
        what: round(mean("after", what) / mean("before", what), 2) for what in ("from_bare", "reapply")}
    out = ROOT / "docs" / "bench" / f"fleet_ab-{result['date']}-{rev}.json"
    n = 2
    while out.exists():  # an earlier comparison of the same day and commit stays as it is
        out, n = out.with_name(f"fleet_ab-{result['date']}-{rev}-{n}.json"), n + 1
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"from bare: before {result['mean_from_bare_s']['before']} s, after {result['mean_from_bare_s']['after']} s; "
          f"re-apply: before {result['mean_reapply_s']['before']} s, after {result['mean_reapply_s']['after']} s; "
          f"ratios after/before {result['ratio_after_to_before']}")
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,4,8")
    parser.add_argument("--strategies", default="mitogen_linear,mitogen_free,linear,free")
    parser.add_argument("--before", help="compare this checkout against that commit (see above)")
    parser.add_argument("--hosts", type=int, default=4, help="with --before: the fleet's size")
    parser.add_argument("--rounds", type=int, default=2, help="with --before: rounds, the sides' order alternated")
    args = parser.parse_args()
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / "provision-bench-fleet"
    tmp.mkdir(parents=True, exist_ok=True)
    if args.before:
        compare(args.before, args.hosts, args.rounds, tmp)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}

    # Warm the shared caches (apt archives, wheelhouse) with one untimed apply.
    _, inv = fleet(1, tmp)
    timed_apply(inv, env)

    scaling = []
    for n in sizes:
        names, inv = fleet(n, tmp)
        first = timed_apply(inv, env)
        print(f"apply from bare, {n} host(s): {first['wall_s']} s, changed={first['changed']}, "
              f"cores {first['cpu_busy_pct']}% busy", flush=True)
        again = timed_apply(inv, env)
        print(f"re-apply, {n} host(s): {again['wall_s']} s, changed={again['changed']}, "
              f"cores {again['cpu_busy_pct']}% busy", flush=True)
        scaling.append({"hosts": n, **first, "reapply": again})
    t1 = next(r["wall_s"] for r in scaling if r["hosts"] == 1)
    r1 = next(r["reapply"]["wall_s"] for r in scaling if r["hosts"] == 1)
    for r in scaling:
        r["ratio_to_1"] = round(r["wall_s"] / t1, 2)
        r["reapply"]["ratio_to_1"] = round(r["reapply"]["wall_s"] / r1, 2)
        r["reapply"]["per_host_s"] = round(r["reapply"]["wall_s"] / r["hosts"], 1)

    # The largest fleet is now converged: re-apply it under each strategy.
    n = max(sizes)
    strategies = []
    for strategy in filter(None, args.strategies.split(",")):
        # "playbook": the fast path as the playbook's fast play ran it before the round trip (PROVISION_ROUND_TRIP=off,
        # Mitogen); every other name is an Ansible strategy (with the round trip, a converged fleet runs no playbook).
        run = timed_apply(inv, env | ({"PROVISION_ROUND_TRIP": "off"} if strategy == "playbook"
                                      else {"PROVISION_ANSIBLE_STRATEGY": strategy}))
        run.update(strategy=strategy, hosts=n, per_host_s=round(run["wall_s"] / n, 1))
        print(f"re-apply {n} hosts, {strategy}: {run['wall_s']} s ({run['per_host_s']} s/host), "
              f"changed={run['changed']}", flush=True)
        strategies.append(run)
    provision("sandbox", "down", *names)

    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "profile": f"{PROFILE} --os {OS} --skip-frameworks",
        "scaling": scaling,
        "ratio_8_to_1": next((r["ratio_to_1"] for r in scaling if r["hosts"] == 8), None),
        "reapply_strategies": strategies,
        "targets": {"ratio_8_to_1_max": 2.5, "reapply_changed": 0, "reapply_per_host_s_max": 15},
    }
    out = ROOT / "docs" / "bench" / "fleet.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
