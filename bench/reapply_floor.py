"""Where a converged re-apply's time goes, against what any re-apply over SSH must spend, measured in one run.

Issue 18 asks for a converged single-host re-apply under 8 s on this machine. This measures the parts no role can
remove, on the same converged sandbox and in the same minutes as the re-apply itself (runs alternated, so the
machine's load falls on every part alike), and reports each as a fraction of the whole:

- start:   ansible-playbook with Mitogen starting, reading the inventory and ending, with an empty play;
- connect: the same play connecting over SSH with sudo (Mitogen's bootstrap) and running one `ping`;
- facts:   connect plus the fact gathering the roles ask for (`min`, `virtual`);
- verify:  the verifier alone, as gpu_verify runs it on the host (compile-only in a sandbox), through `docker exec`;
- reapply: `provision apply` on the converged host (planning, rendering, every role, the verifier, the record).

The floor of a re-apply that still verifies is facts + verify (+ provision's own planning); what is left above it is
the roles' steps. Writes docs/bench/reapply_floor.json and prints the figures.

    python bench/reapply_floor.py [--runs 5] [--profile profiles/deskmini.yaml --os debian-13]
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

from provision.runners.ansible import strategy_env  # noqa: E402  (the strategy provision's runs use)

NAME = "pv-bench-floor"
PLAYS = {
    "start": "- hosts: all\n  gather_facts: false\n  tasks: []\n",
    "connect": "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.ping:\n",
    "facts": "- hosts: all\n  gather_facts: true\n  gather_subset: [min, virtual]\n  tasks:\n"
             "    - ansible.builtin.ping:\n",
}
VERIFY = ("cd /opt/provision && PYTHONDONTWRITEBYTECODE=1 /opt/provision/venv/bin/python -m verify "
          "--expect /opt/provision/verify/expect.json --report /tmp/floor-verify.json "
          "--python /opt/provision/venv/bin/python --repeats 5 --compile-only --arch {arch}")


def run(args: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:6])}... failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", default="profiles/deskmini.yaml")
    parser.add_argument("--os", default="debian-13")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="provision-floor-"))
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    cli = [sys.executable, "-m", "provision"]
    inventory = tmp / "inventory.yml"
    apply = [*cli, "apply", args.profile, "--os", args.os, "--yes", "--skip-frameworks", "--skip-check",
             "--sandbox", NAME]
    plan = json.loads(subprocess.run([*cli, "plan", args.profile, "--os", args.os, "--json"], cwd=ROOT,
                                     capture_output=True, text=True, check=True).stdout)
    arch = plan["verify"]["target_arch"]
    ansible_env = env | strategy_env() | {"ANSIBLE_PIPELINING": "1", "ANSIBLE_HOST_KEY_CHECKING": "True"}
    for part, play in PLAYS.items():
        (tmp / f"{part}.yml").write_text(play)
    figures: dict[str, list[float]] = {part: [] for part in (*PLAYS, "verify", "reapply")}
    try:
        run([*cli, "sandbox", "down", NAME], env)
        run([*cli, "sandbox", "up", NAME, "--os", args.os, "-o", str(inventory)], env)
        run(apply, env)  # from bare: untimed
        run(apply, env)  # the first re-apply after an apply from bare is slower (docs/fleet.md): untimed
        for i in range(args.runs):
            for part in PLAYS:
                figures[part].append(run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                                          str(tmp / f"{part}.yml")], ansible_env))
            figures["verify"].append(run(["docker", "exec", "-u", "ml", NAME, "sh", "-c", VERIFY.format(arch=arch)]))
            figures["reapply"].append(run(apply, env))
            print(f"run {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in figures.items()), flush=True)
    finally:
        subprocess.run([*cli, "sandbox", "down", NAME], cwd=ROOT, env=env, capture_output=True)
    med = {part: round(statistics.median(v), 2) for part, v in figures.items()}
    whole = med["reapply"]
    result = {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.node()} ({os.cpu_count()} cores, {platform.machine()})",
        "load_average_at_end": os.getloadavg(),
        "what": f"converged single-host re-apply of {args.profile} --os {args.os} --skip-frameworks --skip-check on a "
                "sandbox over SSH, and the parts no role can remove, runs alternated",
        "seconds": {part: [round(x, 2) for x in v] for part, v in figures.items()},
        "median_s": med,
        "fraction_of_reapply": {part: round(m / whole, 2) for part, m in med.items()},
        "floor_s": round(med["facts"] + med["verify"], 2),
        "target_s": 8,
    }
    out = ROOT / "docs" / "bench" / "reapply_floor.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"medians {med}; floor (facts + verify) {result['floor_s']} s of a {whole} s re-apply")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
