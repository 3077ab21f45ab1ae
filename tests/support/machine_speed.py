"""The machine's speed, so that runs on different machines compare (issue 52, part 2; docs/testing.md).

A fixed, deterministic, single-threaded pure-Python workload (integer arithmetic, a dict, a sort, string joins: the
kinds of work pytest, Ansible and the controller do), timed three times; the median is the figure. Its checksum is
fixed: a workload changed by accident is an error, not a figure that no longer compares. The seconds depend on the
CPU, the Python (the line names it) and what else runs beside it (the line gives the load average), so a figure
stands for the machine as the run found it.

`python -m tests.support.machine_speed` prints one line, e.g.
`machine-speed: 0.084 s (median of 3: 0.083 0.084 0.090; ...)`; scripts/test.sh prints it before the tests and passes
the median to them (PROVISION_MACHINE_SPEED), and tests/conftest.py ends the run with the worker-seconds divided by it.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import sys
import time

ROUNDS = 3
# The workload's size and its result: change both together, and say so in docs/testing.md (figures before and after
# the change do not compare).
STEPS = 400_000
CHECKSUM = 547_142_302

LINE = re.compile(r"^machine-speed: (?P<median>\d+\.\d+) s \(median of (?P<rounds>\d+): (?P<each>[\d. ]+);", re.M)


def workload(steps: int = STEPS) -> int:
    """The fixed work: a linear congruential sequence binned into a dict, then sorted and joined. Deterministic."""
    x = 12345
    bins: dict[int, int] = {}
    for i in range(steps):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        key = x % 4099
        bins[key] = bins.get(key, 0) + (i ^ x) % 1000
    ranked = sorted(bins.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ",".join(f"{k}:{v}" for k, v in ranked)
    total = 0
    for ch in text:
        total = (total * 31 + ord(ch)) & 0x7FFFFFFF
    return total


def measure(rounds: int = ROUNDS) -> list[float]:
    """Seconds of each round; raises if the workload's result is not the fixed one."""
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        result = workload()
        seconds.append(time.perf_counter() - start)
        if result != CHECKSUM:
            raise SystemExit(f"machine-speed: the workload gave {result}, not {CHECKSUM}: "
                             "tests/support/machine_speed.py changed; set CHECKSUM and say so in docs/testing.md")
    return seconds


def line(seconds: list[float]) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    # Three decimals: on a machine this fast (0.08 s) two would round away 6 %, more than a cut the figure is for.
    each = " ".join(f"{s:.3f}" for s in seconds)
    return (f"machine-speed: {statistics.median(seconds):.3f} s (median of {len(seconds)}: {each}; "
            f"a fixed pure-Python workload, tests/support/machine_speed.py; lower is faster; "
            f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.1f})")


def parse(text: str) -> float | None:
    """The median from a run's output (the first machine-speed line), or None when it has none."""
    found = LINE.search(text)
    return float(found["median"]) if found else None


def main() -> int:
    print(line(measure()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
