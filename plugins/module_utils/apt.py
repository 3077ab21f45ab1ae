"""apt-get as provision's modules run it: waiting for apt's and dpkg's locks within one time budget.

`DPkg::Lock::Timeout` makes apt-get wait for dpkg's lock, but apt takes its own locks (the lists', the archives')
without waiting: a run racing another apt (unattended-upgrades, or another container sharing the archive cache)
fails at once with "Could not get lock". That failure is tried again every RETRY_S seconds until the budget is spent;
any other failure, or success, is returned as it is.
"""

from __future__ import annotations

import os
import subprocess
import time

LOCKED = "Could not get lock"
RETRY_S = 5


def apt_get(args: list[str], budget_s: float, *, retry_s: float = RETRY_S,
            timeout_s: float | None = None) -> subprocess.CompletedProcess:
    """`apt-get -q -y ARGS` with what is left of `budget_s` as its dpkg lock timeout, again while another process
    holds one of apt's locks and the budget lasts. Returns the last run (the caller reads its returncode, stdout and
    stderr). Messages in English (LC_ALL=C.UTF-8): the retry reads apt's."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LANG="C.UTF-8", LC_ALL="C.UTF-8")
    deadline = time.monotonic() + budget_s
    while True:
        left = max(1, int(deadline - time.monotonic()))
        proc = subprocess.run(["apt-get", "-q", "-y", "-o", f"DPkg::Lock::Timeout={left}", *args], capture_output=True,
                              text=True, check=False, env=env, timeout=timeout_s)
        if proc.returncode == 0 or LOCKED not in proc.stderr or time.monotonic() + retry_s > deadline:
            return proc
        time.sleep(retry_s)
