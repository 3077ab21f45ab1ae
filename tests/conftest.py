"""Shared pytest options and fixtures. Keep additive: several test modules rely on these."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

# Seconds each group of tests took in a whole run (scripts/group_seconds.py writes it from a JUnit report): the
# groups start longest first, so that the last to finish is a short one.
GROUP_SECONDS = Path(__file__).with_name("group_seconds.json")
# Modules that share one session fixture's host (tests/integration/conftest.py, deskmini_apply) run on one worker.
SHARED_HOST_FIXTURES = {"deskmini_apply": "deskmini"}


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
            # Kept out of the default command so that it stays under 50 minutes on 2 cores (README).
            item.add_marker(pytest.mark.skip(reason="long (the fleet, the VM, and molecule scenarios test_apply covers): set PROVISION_LONG=1 to run"))
        if "docker" in item.keywords and not have_docker:
            # CI requires Docker: .ci/run sets PROVISION_REQUIRE_DOCKER=1, so there these tests run and fail loudly.
            if os.environ.get("PROVISION_REQUIRE_DOCKER") != "1":
                item.add_marker(pytest.mark.skip(reason="no Docker engine running"))
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker of a parallel run (scripts/test.sh): only they collect
        group_for_workers(items)


def test_group(module: str, fixtures: set[str]) -> str:
    """The xdist group of a module's tests: the module itself (its module fixtures make one host, with a fixed
    name, so its tests stay on one worker), or the shared host's name for modules that use a session fixture's."""
    shared = sorted(SHARED_HOST_FIXTURES[f] for f in fixtures & SHARED_HOST_FIXTURES.keys())
    return shared[0] if shared else module


def group_for_workers(items: list[pytest.Item]) -> None:
    """Put each test in its group (`--dist loadgroup` keeps a group on one worker) and order the groups longest
    first by tests/group_seconds.json; a group it does not know counts as long when marked slow. The order is the
    same on every worker (each collects, and xdist compares the collections)."""
    fixtures: dict[str, set[str]] = {}
    for item in items:
        fixtures.setdefault(item.nodeid.split("::")[0], set()).update(getattr(item, "fixturenames", ()))
    groups = {module: test_group(module, names) for module, names in fixtures.items()}
    seconds = json.loads(GROUP_SECONDS.read_text()) if GROUP_SECONDS.is_file() else {}
    weight: dict[str, float] = {}
    for item in items:
        group = groups[item.nodeid.split("::")[0]]
        if not any(m.name == "xdist_group" for m in item.iter_markers()):
            item.add_marker(pytest.mark.xdist_group(group))
        guess = 300.0 if "slow" in item.keywords and not item.get_closest_marker("skip") else 1.0
        weight[group] = max(weight.get(group, 0.0), float(seconds.get(group, guess)))
    first = {item.nodeid: i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-weight[groups[item.nodeid.split("::")[0]]], first[item.nodeid]))


_group_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Sum each group's time (setup, call, teardown), for PROVISION_GROUP_SECONDS_OUT. Under `--dist loadgroup`
    a test's id ends in @<group>; in a run of one process the group is its module."""
    node, _, group = report.nodeid.partition("@")
    group = group or node.split("::")[0]
    _group_seconds[group] = _group_seconds.get(group, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    """PROVISION_GROUP_SECONDS_OUT=FILE: write each group's seconds there (copy it over tests/group_seconds.json
    after a whole run to keep the longest-first order true)."""
    out = os.environ.get("PROVISION_GROUP_SECONDS_OUT")
    if out and not os.environ.get("PYTEST_XDIST_WORKER") and _group_seconds:
        ranked = dict(sorted(((g, round(s, 1)) for g, s in _group_seconds.items()), key=lambda gs: -gs[1]))
        Path(out).write_text(json.dumps(ranked, indent=1) + "\n")

