"""Fixtures shared by integration modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
DESKMINI_HOST = sandbox_name("deskmini")


@pytest.fixture(scope="session")
def deskmini_apply():
    """One stock Debian 13 host over SSH, `provision apply` of the DeskMini plan (frameworks skipped, no check):
    test_apply.py tests the apply itself, test_least_privilege.py what it leaves on the host. A full apply takes
    minutes, so it is made once per session. The CompletedProcess of that first apply."""
    subprocess.run(["docker", "rm", "-f", DESKMINI_HOST], capture_output=True)
    proc = subprocess.run([sys.executable, "-m", "provision", "apply", str(ROOT / "profiles/deskmini.yaml"), "--os",
                           "debian-13", "--sandbox", DESKMINI_HOST, "--skip-frameworks", "--yes", "--skip-check"],
                          capture_output=True, text=True, timeout=1800, cwd=ROOT, stdin=subprocess.DEVNULL)
    yield proc
    from provision import sandbox

    sandbox.remove(DESKMINI_HOST)  # the container and the Jupyter tunnel apply opened to it
