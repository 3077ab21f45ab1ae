#!/usr/bin/env bash
# The test command (README "Run the tests"; CI runs exactly this through .ci/run).
# Unit and data tests, then the real ones: containers, Docker builds, molecule scenarios, NVRTC compiles.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PROVISION_REQUIRE_DOCKER=1   # Docker tests must run here, never skip
export PATH="$PWD/.venv/bin:$PATH"
# When the session began, for every worker: the build cache it made is removed with its images (tests/support/images.py).
export PROVISION_TEST_SESSION_START="${PROVISION_TEST_SESSION_START:-$(date +%s)}"
# Side by side in PROVISION_TEST_WORKERS processes (default 3: most of the time is spent waiting on apt, pip, SSH and
# Docker, which overlap even on 2 cores). A module's tests stay on one worker, with the modules that share its host
# (tests/conftest.py); the longest groups start first. PROVISION_TEST_WORKERS=0: one process, in file order.
workers=${PROVISION_TEST_WORKERS:-3}
parallel=()
if [ "$workers" != 0 ]; then
  parallel=(-n "$workers" --dist loadscope --no-loadscope-reorder)
fi
# The disk's room before and after, for a run that fails for want of it (CI's of 2026-11-27 did: "[Errno 28] No space
# left on device"; a whole run from a fresh machine peaks at about 30 GB, docs/testing.md).
free_disk() { df -B1G --output=avail "$(docker info --format '{{.DockerRootDir}}' 2>/dev/null || echo /)" . 2>/dev/null |
         awk 'NR>1 {printf "%s%s GB", sep, $1; sep=", "}'; }
echo "test.sh: free disk before the tests (Docker's root, this checkout): $(free_disk)"
# The machine's speed (a fixed pure-Python workload, median of 3: about 3 s), so that runs on different machines
# compare (issue 52, docs/testing.md); the run's last line divides its worker-seconds by it (tests/conftest.py).
speed_line=$(.venv/bin/python -m tests.support.machine_speed)
echo "$speed_line"
PROVISION_MACHINE_SPEED=$(awk '{print $2}' <<<"$speed_line")
export PROVISION_MACHINE_SPEED
rc=0
.venv/bin/python -m pytest "${parallel[@]}" "$@" || rc=$?
echo "test.sh: free disk after the tests: $(free_disk)"
exit "$rc"
