"""Shared pytest options and fixtures. Keep additive: several test modules rely on these."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support import snapshot
from tests.support.worker_seconds import WorkerSeconds, machine_speed_from_env

# Seconds each group of tests took in a whole run (PROVISION_GROUP_SECONDS_OUT writes them): the groups start
# longest first, so that the last to finish is a short one.
GROUP_SECONDS = Path(__file__).with_name("group_seconds.json")
# Modules that share one session fixture's host (tests/integration/conftest.py: deskmini_apply makes it once per
# process) run in one worker, as one group. Checked at collection: a module that uses the fixture must be listed.
SHARED_HOST_FIXTURE = "deskmini_apply"
# The session's converged DeskMini image (tests/support/snapshot.py), which deskmini_apply commits after its apply:
# shared across workers through a lock, so its modules need no group; longest_first starts them after the others.
SNAPSHOT_FIXTURE = "converged_deskmini"
SHARED_HOST_MODULES = {
    "tests/integration/test_apply.py": "deskmini",
    "tests/integration/test_least_privilege.py": "deskmini",
    "tests/integration/test_ssh_hosts.py": "deskmini",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite golden files (plans, Dockerfiles) from the current output; review the diff",
    )


def docker_available() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    heavy = os.environ.get("PROVISION_HEAVY") == "1"
    long = os.environ.get("PROVISION_LONG") == "1"
    have_docker = docker_available() if any("docker" in i.keywords for i in items) else True
    for item in items:
        if "heavy" in item.keywords and not heavy:
            item.add_marker(pytest.mark.skip(reason="heavy (framework wheels, or pip resolving every plan): set PROVISION_HEAVY=1 to run"))
        if "long" in item.keywords and not long:
            # Kept out of the default command so that it stays within 30 minutes on 2 cores (README, docs/testing.md).
            item.add_marker(pytest.mark.skip(reason="long (the fleet, the VM, and molecule scenarios test_apply covers): set PROVISION_LONG=1 to run"))
        if "docker" in item.keywords and not have_docker:
            # CI requires Docker: .ci/run sets PROVISION_REQUIRE_DOCKER=1, so there these tests run and fail loudly.
            if os.environ.get("PROVISION_REQUIRE_DOCKER") != "1":
                item.add_marker(pytest.mark.skip(reason="no Docker engine running"))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker of a parallel run (scripts/test.sh): only they collect
        check_shared_hosts(items)
        longest_first(items, int(getattr(config, "workerinput", {}).get("workercount", 1)))


def test_group(nodeid: str) -> str:
    """The group a test runs in, from its id alone (the controller of a parallel run sees only ids): its module
    (the module's fixtures make hosts and images with fixed names, so its tests stay in one worker), or the shared
    host's group."""
    module = nodeid.split("::")[0]
    return SHARED_HOST_MODULES.get(module, module)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadscope` (scripts/test.sh) with test_group as the scope: a group is one unit of work, and a worker
    takes the next unit in collection order (longest_first) when it has two tests or fewer left. pytest-xdist's own
    `loadgroup` cannot do it with pytest 9: the group it appends to a test's id (item._nodeid) no longer reaches
    the id pytest reports (Node._id)."""
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return test_group(nodeid)

    return GroupScheduling(config, log)


def check_shared_hosts(items: list[pytest.Item]) -> None:
    """A module that uses the shared host's fixture and is not in SHARED_HOST_MODULES would make the same host
    in another worker at the same time: stop the run with one line that says where to add it."""
    using = {item.nodeid.split("::")[0] for item in items if SHARED_HOST_FIXTURE in getattr(item, "fixturenames", ())}
    if missing := sorted(using - SHARED_HOST_MODULES.keys()):
        raise pytest.UsageError(f"{', '.join(missing)}: uses {SHARED_HOST_FIXTURE}; add it to SHARED_HOST_MODULES in "
                                "tests/conftest.py so that it runs in the worker that holds that host")


def longest_first(items: list[pytest.Item], workers: int = 1) -> None:
    """Order the groups longest first by tests/group_seconds.json (a group it does not know counts as long when
    it has a slow test that runs); within a group, the collection's order. Every worker orders alike (each
    collects, and xdist compares the collections).

    Two exceptions, for the session's converged DeskMini image: the group that makes it (deskmini_apply's) starts
    first, and a group that starts from it (SNAPSHOT_FIXTURE) no earlier than the `workers`-th place, so it runs
    after a group of another worker, by when the image is made, rather than waiting for it (a wait is worker-seconds
    too)."""
    seconds = json.loads(GROUP_SECONDS.read_text()) if GROUP_SECONDS.is_file() else {}
    weight: dict[str, float] = {}
    makes, uses = set(), set()
    for item in items:
        group = test_group(item.nodeid)
        guess = 300.0 if "slow" in item.keywords and not item.get_closest_marker("skip") else 1.0
        weight[group] = max(weight.get(group, 0.0), float(seconds.get(group, guess)))
        runs = not item.get_closest_marker("skip")
        if runs and SHARED_HOST_FIXTURE in getattr(item, "fixturenames", ()):
            makes.add(group)
        if runs and SNAPSHOT_FIXTURE in getattr(item, "fixturenames", ()):
            uses.add(group)
    first = {item.nodeid: i for i, item in enumerate(items)}
    order = sorted(weight, key=lambda g: (g not in makes, -weight[g]))
    others = [g for g in order if g not in uses]
    later = [g for g in order if g in uses]
    cut = min(max(workers, len(makes)), len(others))
    order = others[:cut] + later + others[cut:]
    place = {g: i for i, g in enumerate(order)}
    items.sort(key=lambda item: (place[test_group(item.nodeid)], first[item.nodeid]))


_group_seconds: dict[str, float] = {}
_worker_seconds = WorkerSeconds()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum each group's time (setup, call, teardown), for PROVISION_GROUP_SECONDS_OUT, and the run's worker-seconds.
    In a parallel run the controller gets here with every worker's reports."""
    group = test_group(report.nodeid)
    _group_seconds[group] = _group_seconds.get(group, 0.0) + report.duration
    _worker_seconds.add(report.nodeid, report.duration)


@pytest.hookimpl(trylast=True)  # after pytest's --durations list (pyproject: the 10 slowest setups, calls, teardowns)
def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """One line at the end of every run: the worker-seconds (every test's setup, call and teardown summed over the
    workers), the figure docs/testing.md compares runs by. Not on a worker: its reports reach the controller."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not _worker_seconds.per_test:
        return
    speed = machine_speed_from_env(os.environ.get("PROVISION_MACHINE_SPEED"))
    terminalreporter.write_line(_worker_seconds.line(int(config.getoption("numprocesses", None) or 0), speed))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """PROVISION_GROUP_SECONDS_OUT=FILE: write each group's seconds there (copy it over tests/group_seconds.json
    after a whole run to keep the longest-first order true). The session's converged DeskMini image goes (its
    hosts are gone: each module removes its own)."""
    if not os.environ.get("PYTEST_XDIST_WORKER") and shutil.which("docker"):
        snapshot.remove()
    out = os.environ.get("PROVISION_GROUP_SECONDS_OUT")
    if out and not os.environ.get("PYTEST_XDIST_WORKER") and _group_seconds:
        ranked = dict(sorted(((g, round(s, 1)) for g, s in _group_seconds.items()), key=lambda gs: -gs[1]))
        Path(out).write_text(json.dumps(ranked, indent=1) + "\n")

