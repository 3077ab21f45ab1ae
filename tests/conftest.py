"""Shared pytest options and fixtures. Keep additive: several test modules rely on these."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


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
