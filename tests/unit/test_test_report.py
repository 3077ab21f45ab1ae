"""scripts/test_report.py: a run's figures from its JUnit report, the groups' among them (docs/testing.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support import machine_speed

ROOT = Path(__file__).resolve().parents[2]

# Two modules of the shared host's group (tests/conftest.py's SHARED_HOST_MODULES), one module alone, one skipped.
REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="1" tests="4" time="100.0">
<testcase classname="tests.integration.test_apply" name="test_a" time="40.0"/>
<testcase classname="tests.integration.test_least_privilege" name="test_b" time="20.0"/>
<testcase classname="tests.integration.test_faults" name="test_c" time="90.0"/>
<testcase classname="tests.unit.test_x.TestY" name="test_d" time="2.0"><skipped message="no"/></testcase>
</testsuite></testsuites>
"""


def test_the_groups_sum_over_the_workers_and_the_longest_group(tmp_path):
    report = tmp_path / "run.xml"
    report.write_text(REPORT)
    out = tmp_path / "group_seconds.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts/test_report.py"), str(report), "--workers", "2",
                           "--group-seconds", str(out)], capture_output=True, text=True, check=True)
    assert "wall 100 s (1.7 min); 3 passed, 1 skipped" in proc.stdout
    # deskmini: test_apply's 40 s and test_least_privilege's 20 s, one group; 152 s over 2 workers: 76 s.
    assert ("groups: 3, sum 152 s; over 2 workers 76 s (wall - that: 24 s); the longest group 90 s "
            "(tests/integration/test_faults.py)") in proc.stdout, proc.stdout
    # Longest first: test_faults (90 s) to one worker, deskmini (60 s) to the other; test_faults has one test left,
    # so its worker takes test_x's 2 s too: 92 s.
    assert re.search(r"replayed through the scheduler over 2 workers: \d+ s in group_seconds.json's order, 92 s "
                     r"longest first by this run", proc.stdout), proc.stdout
    assert json.loads(out.read_text()) == {"tests/integration/test_faults.py": 90.0, "deskmini": 60.0,
                                           "tests/unit/test_x.py": 2.0}
    assert list(json.loads(out.read_text())) == ["tests/integration/test_faults.py", "deskmini", "tests/unit/test_x.py"]


@pytest.mark.parametrize("workers", ["2", "0"])
def test_every_run_ends_with_its_worker_seconds(tmp_path, workers):
    """A real run of a small file, in two workers and in one process: its last lines before pytest's own say the
    worker-seconds, which is the JUnit report's sum (setup, call and teardown of every test) and its test count."""
    report = tmp_path / "run.xml"
    # This test may itself run in an xdist worker: the run below is a whole run of its own, of its own session (the
    # session's end removes that session's converged DeskMini image: never this one's).
    env = {k: v for k, v in os.environ.items() if not k.startswith(
        ("PYTEST_XDIST", "PYTEST_CURRENT_TEST", "PROVISION_GROUP_SECONDS_OUT", "PROVISION_TEST_SESSION_START",
         "PROVISION_MACHINE_SPEED"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests/unit/test_hashes.py", "-n", workers,
                           "-p", "no:cacheprovider", f"--junitxml={report}"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    line = re.search(r"^worker-seconds: ([\d.]+) s over (\d+) tests \((.*?); wall (\d+) s\)$", proc.stdout, re.M)
    assert line, proc.stdout[-3000:]
    assert line[3] == ("2 workers" if workers == "2" else "1 process")
    cases = list(ET.parse(report).getroot().iter("testcase"))
    assert int(line[2]) == len(cases) == 3
    junit = sum(float(case.get("time")) for case in cases)  # pytest's junit_duration_report "total": all three phases
    assert float(line[1]) == pytest.approx(junit, abs=0.2)
    assert float(line[1]) > 1  # two of the tests build and hash wheels: seconds each
    assert "slowest 10 durations" in proc.stdout


def test_the_test_command_prints_the_machines_speed_and_normalises_the_worker_seconds(tmp_path):
    """scripts/test.sh itself, on a small file in one process: it prints the machine's speed (the median of three
    timings of a fixed workload) before the tests, and the run's last line divides the worker-seconds by it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(
        ("PYTEST_XDIST", "PYTEST_CURRENT_TEST", "PROVISION_GROUP_SECONDS_OUT", "PROVISION_TEST_SESSION_START",
         "PROVISION_MACHINE_SPEED"))}
    proc = subprocess.run(["bash", "scripts/test.sh", "tests/unit/test_hashes.py", "-p", "no:cacheprovider"],
                          capture_output=True, text=True, cwd=ROOT, env=env | {"PROVISION_TEST_WORKERS": "0"},
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    speed = machine_speed.parse(proc.stdout)
    assert speed is not None and speed > 0, proc.stdout[-3000:]
    found = re.search(r"^machine-speed: [\d.]+ s \(median of 3: ([\d.]+) ([\d.]+) ([\d.]+);.*load average [\d.]+\)$",
                      proc.stdout, re.M)
    assert found, proc.stdout[:3000]
    assert speed == pytest.approx(sorted(float(s) for s in found.groups())[1], abs=0.0006)
    # Before the tests: the speed line comes before pytest's session header.
    assert proc.stdout.index("machine-speed:") < proc.stdout.index("test session starts")
    line = re.search(r"^worker-seconds: ([\d.]+) s over (\d+) tests \(1 process; wall \d+ s\); normalised: (\d+) "
                     r"machine-speed units \(/ machine-speed ([\d.]+) s\)$", proc.stdout, re.M)
    assert line, proc.stdout[-3000:]
    assert int(line[2]) == 3
    assert float(line[4]) == pytest.approx(speed, abs=0.0006)
    assert int(line[3]) == pytest.approx(float(line[1]) / speed, abs=1)


def test_the_machine_speed_workload_is_fixed():
    """The workload gives its fixed result (a changed workload would make figures that do not compare), and the line
    parses; a run's output without the line has no speed."""
    assert machine_speed.workload() == machine_speed.CHECKSUM
    assert machine_speed.workload(1000) != machine_speed.CHECKSUM
    assert machine_speed.parse(machine_speed.line([1.25, 0.5, 2.0])) == 1.25
    assert machine_speed.parse("worker-seconds: 1.0 s over 1 tests (1 process; wall 1 s)") is None


def test_the_snapshots_maker_starts_first_and_its_users_after(tmp_path):
    """The collection a worker orders (tests/conftest.py's longest_first; one worker here): the DeskMini host's group,
    which commits the session's converged DeskMini, first, then a group that starts from that image, then the rest."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_CURRENT_TEST"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/integration/test_image.py", "tests/integration/test_fast_reapply.py",
                           "tests/integration/test_apply.py", "tests/integration/test_ssh_hosts.py"],
                          capture_output=True, text=True, cwd=ROOT, env=env | {"PYTEST_XDIST_WORKER": "gw0"},
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    modules = [line.split("::")[0].rsplit("/", 1)[-1] for line in proc.stdout.splitlines() if "::" in line]
    order = list(dict.fromkeys(modules))
    assert order == ["test_apply.py", "test_ssh_hosts.py", "test_fast_reapply.py", "test_image.py"], order
