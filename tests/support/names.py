"""Names of the sandbox containers the tests start.

Every test host is named `<prefix>-<base>`. The prefix is PROVISION_TEST_SANDBOX_PREFIX where it is set (several
people's runs on one Docker daemon, each naming its own); otherwise it is made from this checkout's path, so two
checkouts' suites on one daemon never start, reuse or remove each other's hosts (a fixture removes a stale host of
its name before it starts one). The provision state kept per host (records, ledgers) follows the name, so it is
separate too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PREFIX = os.environ.get("PROVISION_TEST_SANDBOX_PREFIX") or "pv" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:4]


def sandbox_name(base: str) -> str:
    """The container name for the test host `base` (e.g. "faults" -> "pv1a2b-faults")."""
    return f"{PREFIX}-{base}"
