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

    def line(self, workers: int, machine_speed: float | None = None) -> str:
        """The run's line; with the machine's speed (seconds of tests/support/machine_speed.py's workload, which
        scripts/test.sh measures before the tests), also the worker-seconds in that workload's units."""
        how = f"{workers} workers" if workers else "1 process"
        wall = time.monotonic() - self.started
        text = f"worker-seconds: {self.total():.1f} s over {len(self.per_test)} tests ({how}; wall {wall:.0f} s)"
        if machine_speed:
            text += (f"; normalised: {self.total() / machine_speed:.0f} machine-speed units "
                     f"(/ machine-speed {machine_speed:.3f} s)")
        return text


def machine_speed_from_env(value: str | None) -> float | None:
    """PROVISION_MACHINE_SPEED as scripts/test.sh sets it: the median's seconds; None when unset or not a figure."""
    try:
        speed = float(value) if value else None
    except ValueError:
        return None
    return speed if speed and speed > 0 else None
