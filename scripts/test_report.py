#!/usr/bin/env python3
"""Where the test command's time goes, from the JUnit report a run wrote (`scripts/test.sh --junitxml=FILE`).

    python scripts/test_report.py FILE [--top 15] [--workers 3] [--group-seconds tests/group_seconds.json]

Prints the counts (passed, skipped, failed), the seconds per file (setup, call and teardown summed: a file's
time on its worker), the slowest tests, and the groups' figures: their sum over the workers, which is as short as a
parallel run can be, and the longest group, which it cannot beat either. A run whose wall is near the first is
balanced; a run near the second waits on that group. docs/testing.md keeps the figures of the runs that were
reported. --group-seconds FILE writes each group's seconds (tests/group_seconds.json: the order the groups start in).
"""

from __future__ import annotations

import argparse
import ast
import json
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "tests" / "conftest.py"
GROUP_SECONDS = CONFTEST.with_name("group_seconds.json")


def shared_host_modules() -> dict[str, str]:
    """tests/conftest.py's SHARED_HOST_MODULES (module -> group), read without importing it (it needs pytest)."""
    for node in ast.parse(CONFTEST.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "SHARED_HOST_MODULES" for t in node.targets):
            return ast.literal_eval(node.value)
    raise SystemExit(f"{CONFTEST}: no SHARED_HOST_MODULES; the groups cannot be told")


def replay(group_tests: dict[str, list[float]], order: list[str], workers: int) -> float:
    """The run's end had its tests taken these seconds and its groups been handed out in `order` as
    tests/conftest.py's scheduler does: one group to each worker, and the next to a worker with two tests or fewer
    left (xdist's loadscope)."""
    queue = list(order)
    pending: list[list[float]] = [[] for _ in range(workers)]
    clock = [0.0] * workers

    def hand_out(worker: int) -> None:
        if queue:
            pending[worker] += group_tests[queue.pop(0)]

    for worker in range(workers):
        hand_out(worker)
    for worker in range(workers):
        if len(pending[worker]) <= 2:
            hand_out(worker)
    while any(pending):
        worker = min((w for w in range(workers) if pending[w]), key=lambda w: clock[w])
        clock[worker] += pending[worker].pop(0)
        if len(pending[worker]) <= 2:
            hand_out(worker)
    return max(clock)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--workers", type=int, default=3, help="the run's workers (PROVISION_TEST_WORKERS)")
    parser.add_argument("--group-seconds", metavar="FILE", help="write each group's seconds there (JSON)")
    args = parser.parse_args()
    root = ET.parse(args.report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts: Counter[str] = Counter()
    per_file: defaultdict[str, float] = defaultdict(float)
    in_order: defaultdict[str, list[float]] = defaultdict(list)  # each file's tests as its worker ran them
    tests: list[tuple[float, str]] = []
    for suite in suites:
        for case in suite.iter("testcase"):
            seconds = float(case.get("time") or 0)
            module = (case.get("classname") or "").split(".")
            # classname is tests.unit.test_x or tests.unit.test_x.TestClass: the file is the test_* part.
            cut = next((i for i, part in enumerate(module) if part.startswith("test_")), len(module) - 1)
            path = "/".join(module[:cut + 1]) + ".py"
            per_file[path] += seconds
            in_order[path].append(seconds)
            tests.append((seconds, f"{path}::{case.get('name')}"))
            outcome = ("failed" if case.find("failure") is not None or case.find("error") is not None
                       else "skipped" if case.find("skipped") is not None else "passed")
            counts[outcome] += 1
    wall = sum(float(s.get("time") or 0) for s in suites)
    print(f"wall {wall:.0f} s ({wall / 60:.1f} min); " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
    print(f"\nseconds per file (sum {sum(per_file.values()):.0f} s):")
    for path, seconds in sorted(per_file.items(), key=lambda kv: -kv[1])[:30]:
        print(f"  {seconds:7.1f}  {path}")
    print(f"\nthe {args.top} slowest tests:")
    for seconds, name in sorted(tests, reverse=True)[:args.top]:
        print(f"  {seconds:7.1f}  {name}")
    shared = shared_host_modules()
    groups: defaultdict[str, float] = defaultdict(float)
    for path, seconds in per_file.items():
        groups[shared.get(path, path)] += seconds
    ranked = dict(sorted(((g, round(s, 1)) for g, s in groups.items()), key=lambda gs: -gs[1]))
    longest = next(iter(ranked), "")
    total = sum(groups.values())
    print(f"\ngroups: {len(groups)}, sum {total:.0f} s; over {args.workers} workers {total / args.workers:.0f} s "
          f"(wall - that: {wall - total / args.workers:.0f} s); the longest group {ranked.get(longest, 0):.0f} s "
          f"({longest})")
    group_tests: defaultdict[str, list[float]] = defaultdict(list)
    for path, seconds_each in in_order.items():
        group_tests[shared.get(path, path)] += seconds_each
    known = json.loads(GROUP_SECONDS.read_text()) if GROUP_SECONDS.is_file() else {}
    order = sorted(group_tests, key=lambda g: -known.get(g, groups[g]))
    print(f"replayed through the scheduler over {args.workers} workers: "
          f"{replay(group_tests, order, args.workers):.0f} s in {GROUP_SECONDS.name}'s order, "
          f"{replay(group_tests, list(ranked), args.workers):.0f} s longest first by this run")
    if args.group_seconds:
        Path(args.group_seconds).write_text(json.dumps(ranked, indent=1) + "\n")


if __name__ == "__main__":
    main()
