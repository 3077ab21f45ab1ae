"""The converged re-apply against a bare Ansible play on the same hosts, measured in one run (runs alternated).

Issue 29 asked that the whole converged `provision apply` (planning, rendering, the playbook, the verifier, the record
and the testinfra checks) take at most 5x, issue 55 at most 3x, what Ansible needs to reach the hosts and look at them: a bare play that
connects over SSH with pipelining, becomes root with sudo and gathers the facts the roles read (`min`, `virtual`).
Measured on the same converged sandboxes, in the same minutes, alternating:

- bare_ssh:      that bare play with Ansible's own linear strategy, ssh with pipelining (a fresh connection per run);
- bare_ssh_all_facts: the same play gathering Ansible's default facts (every subset), the baseline as the issue
                 words it ("a bare ansible-playbook play ... gathers facts"); the stricter bare_ssh is the headline;
- bare_mitogen:  the same play with Mitogen's free strategy (provision's default);
- fast:          `provision apply` on the converged hosts, checks included (each host takes the fast path in its one
                 round trip, provision.pipeline.probe: no playbook);
- fast_playbook: the same with PROVISION_ROUND_TRIP=off: the fast path as the playbook's fast play ran it before the
                 round trip (preflight play, gate, verifier and record; Mitogen, provision's default);
- full:          `provision apply --full` (every role on every host, checks included).

Each run's wall time and the controller's CPU-seconds (this process's children: provision, ansible, ssh, pytest)
are written to docs/bench/fast_reapply-<hosts>.json with the medians and the ratios to bare_ssh.

    python bench/fast_reapply.py [--hosts 1] [--runs 3] [--profile profiles/deskmini.yaml --os debian-13]
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
sys.path.insert(0, str(ROOT))

from provision.runners.ansible import strategy_env  # noqa: E402  (the strategy provision's runs use)

BARE = "- hosts: all\n  become: true\n  gather_facts: true\n  gather_subset: [min, virtual]\n  tasks: []\n"
# The issue's own baseline: the same play gathering Ansible's default facts (every subset), as a bare
# `ansible-playbook` does unless told otherwise. The stricter BARE (only what the roles read) is the headline ratio.
BARE_ALL_FACTS = "- hosts: all\n  become: true\n  gather_facts: true\n  tasks: []\n"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(args: list[str], env: dict, *, expect: str | None = None, hosts: int = 1) -> tuple[float, float]:
    """(wall seconds, controller CPU-seconds) of one command; exits on failure, or when not every one of `hosts`
    says `expect` in its output (the path each host must have taken)."""
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    took, used = time.perf_counter() - start, children_cpu() - cpu
    said = sum(1 for line in proc.stdout.splitlines() if expect and f": {expect}" in line)
    if proc.returncode != 0 or (expect is not None and said != hosts):
        sys.exit(f"{' '.join(args[:8])}... failed ({proc.returncode}, expected {expect!r}):\n"
                 f"{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    return took, used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", default="profiles/deskmini.yaml")
    parser.add_argument("--os", default="debian-13")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="provision-fast-"))
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    cli = [sys.executable, "-m", "provision"]
    names = [f"pv-fast-{i}" for i in range(1, args.hosts + 1)]
    inventory = tmp / "inventory.yml"
    apply = [*cli, "apply", args.profile, "--os", args.os, "--yes", "--skip-frameworks", "-i", str(inventory)]
    (tmp / "bare.yml").write_text(BARE)
    (tmp / "bare_all_facts.yml").write_text(BARE_ALL_FACTS)
    playbook = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(tmp / "bare.yml")]
    playbook_all = [*playbook[:-1], str(tmp / "bare_all_facts.yml")]
    base = env | {"ANSIBLE_PIPELINING": "1", "ANSIBLE_HOST_KEY_CHECKING": "True"}
    parts = {
        "bare_ssh": (playbook, base | {"ANSIBLE_STRATEGY": "linear"}, None),
        "bare_ssh_all_facts": (playbook_all, base | {"ANSIBLE_STRATEGY": "linear"}, None),
        "bare_mitogen": (playbook, base | strategy_env(), None),
        "fast": (apply, env, "fast path"),
        "fast_playbook": (apply, env | {"PROVISION_ROUND_TRIP": "off"}, "fast path"),
        "full": ([*apply, "--full"], env, "full path"),
    }
    wall: dict[str, list[float]] = {part: [] for part in parts}
    cpu: dict[str, list[float]] = {part: [] for part in parts}
    try:
        subprocess.run([*cli, "sandbox", "down", *names], cwd=ROOT, env=env, capture_output=True)
        run([*cli, "sandbox", "up", *names, "--os", args.os, "-o", str(inventory)], env)
        t0 = time.perf_counter()
        run(apply, env)  # from bare: untimed here (docs/fleet.md has those figures)
        converge = time.perf_counter() - t0
        run(apply, env)  # records each host's fingerprint (a host converged by an older provision has none)
        for i in range(args.runs):
            for part, (argv, part_env, expect) in parts.items():
                # A fresh SSH control directory per run: each run connects, as a new `provision apply` does.
                control = Path(tempfile.mkdtemp(prefix="cp-", dir="/tmp"))
                took, used = run(argv, part_env | {"ANSIBLE_SSH_CONTROL_PATH_DIR": str(control)}, expect=expect,
                                 hosts=args.hosts)
                wall[part].append(took)
                cpu[part].append(used)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in wall.items()), flush=True)
    finally:
        subprocess.run([*cli, "sandbox", "down", *names], cwd=ROOT, env=env, capture_output=True)
    med = {part: round(statistics.median(v), 2) for part, v in wall.items()}
    med_cpu = {part: round(statistics.median(v), 2) for part, v in cpu.items()}
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "load_average_at_end": os.getloadavg(),
        "what": f"{args.hosts} converged sandbox(es) over SSH, {args.profile} --os {args.os} --skip-frameworks; "
                "`provision apply` wall time includes planning, the playbook, the verifier, the record and the checks; "
                "runs alternated",
        "hosts": args.hosts,
        "apply_from_bare_s": round(converge, 1),
        "wall_s": {part: [round(x, 2) for x in v] for part, v in wall.items()},
        "controller_cpu_s": {part: [round(x, 2) for x in v] for part, v in cpu.items()},
        "median_wall_s": med,
        "median_controller_cpu_s_per_host": {part: round(c / args.hosts, 2) for part, c in med_cpu.items()},
        "ratio_to_bare_ssh": {part: round(m / med["bare_ssh"], 2) for part, m in med.items()},
        "ratio_to_bare_ssh_all_facts": {part: round(m / med["bare_ssh_all_facts"], 2) for part, m in med.items()},
        "target_ratio": 3,
    }
    out = ROOT / "docs" / "bench" / f"fast_reapply-{args.hosts}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"medians {med}; ratio to the bare play (ssh) {result['ratio_to_bare_ssh']}")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
