"""Rendering many plans' Dockerfiles: the template compiled once per process (provision.render.docker._env, cached)
against a fresh Jinja environment per render (as before 2026-11-29, when each render compiled the template again).

The plans are the matrix of tests/data/test_every_plan_renders.py for one OS and framework (every GPU of the
database that resolves there), resolved once; then, round after round, each side renders all of them (the two
interleaved, so a busy minute weighs on both alike). Reports each side's median seconds per round and their ratio,
and writes docs/bench/render_matrix.json (or --json PATH).

    python bench/render_matrix.py [--os debian-13] [--framework pytorch] [--runs 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provision.compat import load_db  # noqa: E402
from provision.errors import ProvisionError  # noqa: E402
from provision.models import Profile  # noqa: E402
from provision.render import docker  # noqa: E402
from provision.resolver import resolve  # noqa: E402

FRAMEWORKS = {"none": [], "pytorch": [{"name": "pytorch"}], "tensorflow": [{"name": "tensorflow"}]}


def plans(os_id: str, framework: str) -> list:
    db = load_db()
    dist, rel = os_id.split("-")
    out = []
    for gpu in db.gpus:
        if gpu.tegra:
            continue
        profile = Profile.model_validate({
            "name": "matrix", "hardware": {"gpu": {"model": gpu.model}, "memory_gb": 64,
                                           "cpu": {"model": "CPU", "flags": ["sse4_2", "avx", "avx2"]}},
            "target": {"kind": "baremetal", "os": {"distribution": dist, "release": rel}, "arch": "x86_64"},
            "software": {"frameworks": FRAMEWORKS[framework]}})
        try:
            out.append(resolve(profile, db))
        except ProvisionError:
            continue
    return out


def one_round(resolved: list, fresh: bool) -> float:
    start = time.perf_counter()
    if fresh:  # the environment made anew for every render, as before
        with mock.patch.object(docker, "_env", docker._env.__wrapped__):
            for plan in resolved:
                docker.render_dockerfile(plan)
    else:
        for plan in resolved:
            docker.render_dockerfile(plan)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--os", default="debian-13")
    parser.add_argument("--framework", default="pytorch", choices=sorted(FRAMEWORKS))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "bench" / "render_matrix.json")
    args = parser.parse_args()
    resolved = plans(args.os, args.framework)
    docker.render_dockerfile(resolved[0])  # the cached side's one compile, outside the rounds
    cached, fresh = [], []
    for _ in range(args.runs):
        fresh.append(one_round(resolved, fresh=True))
        cached.append(one_round(resolved, fresh=False))
    result = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": platform.node(), "python": platform.python_version(), "load_average": os.getloadavg()[0],
        "os": args.os, "framework": args.framework, "plans": len(resolved), "runs": args.runs,
        "fresh_environment_per_render_s": fresh, "one_environment_per_process_s": cached,
        "median_fresh_s": statistics.median(fresh), "median_cached_s": statistics.median(cached),
        "ratio_cached_over_fresh": statistics.median(cached) / statistics.median(fresh),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{len(resolved)} plans ({args.os}, {args.framework}), {args.runs} rounds, load {result['load_average']:.1f}: "
          f"a fresh environment per render {result['median_fresh_s']:.2f} s, one per process "
          f"{result['median_cached_s']:.3f} s (median per round): ratio {result['ratio_cached_over_fresh']:.4f}")


if __name__ == "__main__":
    main()
