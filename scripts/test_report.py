#!/usr/bin/env python3
"""Where the test command's time goes, from the JUnit report a run wrote (`scripts/test.sh --junitxml=FILE`).

    python scripts/test_report.py FILE [--top 15]

Prints the counts (passed, skipped, failed), the seconds per file (setup, call and teardown summed: a file's
time on its worker) and the slowest tests. docs/testing.md keeps the figures of the runs that were reported.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    root = ET.parse(args.report).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts: Counter[str] = Counter()
    per_file: defaultdict[str, float] = defaultdict(float)
    tests: list[tuple[float, str]] = []
    for suite in suites:
        for case in suite.iter("testcase"):
            seconds = float(case.get("time") or 0)
            module = (case.get("classname") or "").split(".")
            # classname is tests.unit.test_x or tests.unit.test_x.TestClass: the file is the test_* part.
            cut = next((i for i, part in enumerate(module) if part.startswith("test_")), len(module) - 1)
            path = "/".join(module[:cut + 1]) + ".py"
            per_file[path] += seconds
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


if __name__ == "__main__":
    main()
