"""The run's worker-seconds: every test's setup, call and teardown summed over all workers (tests/conftest.py prints
it at the end of every run; docs/testing.md compares runs by it). In a parallel run the controller receives every
worker's reports, each with its `duration`, so the sum is made there; in one process, the same hook sees them."""

from __future__ import annotations

import time
from collections import defaultdict


class WorkerSeconds:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.per_test: defaultdict[str, float] = defaultdict(float)

    def add(self, nodeid: str, duration: float) -> None:
        """One report (setup, call or teardown) of one test."""
        self.per_test[nodeid] += duration

    def total(self) -> float:
        return sum(self.per_test.values())

    def line(self, workers: int) -> str:
        how = f"{workers} workers" if workers else "1 process"
        wall = time.monotonic() - self.started
        return f"worker-seconds: {self.total():.1f} s over {len(self.per_test)} tests ({how}; wall {wall:.0f} s)"
