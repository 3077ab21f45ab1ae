"""Fixtures shared by integration modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import snapshot
from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
DESKMINI_HOST = sandbox_name("deskmini")


@pytest.fixture(scope="session")
def deskmini_apply():
    """One stock Debian 13 host over SSH, `provision apply` of the DeskMini plan (frameworks skipped, no check):
    test_apply.py tests the apply itself, test_least_privilege.py what it leaves on the host. A full apply takes
    minutes, so it is made once per session. The CompletedProcess of that first apply.

    Converged, the host is committed as the session's converged DeskMini (tests/support/snapshot.py) before any test
    changes it, unless this session has one already: the modules that only need a converged host start from it."""
    with snapshot.lock():  # a worker that needs the snapshot meanwhile waits for this apply instead of making its own
        proc = snapshot.apply_from_bare(DESKMINI_HOST)
        if proc.returncode == 0 and not snapshot.current():
            snapshot.commit(DESKMINI_HOST)
    yield proc
    from provision import sandbox

    sandbox.remove(DESKMINI_HOST)  # the container and the Jupyter tunnel apply opened to it


@pytest.fixture(scope="session")
def converged_deskmini() -> str:
    """The session's converged DeskMini image (tests/support/snapshot.py), made now unless the DeskMini host's
    group (deskmini_apply) or another worker made it: start a host from it with provision.sandbox.start(image=...)."""
    return snapshot.converged_deskmini()
