#!/usr/bin/env bash
# The test command (README "Run the tests"; CI runs exactly this through .ci/run).
# Unit and data tests, then the real ones: containers, Docker builds, molecule scenarios, NVRTC compiles.
# Extra arguments go to pytest (e.g. scripts/test.sh -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export PROVISION_REQUIRE_DOCKER=1   # Docker tests must run here, never skip
export PATH="$PWD/.venv/bin:$PATH"
exec .venv/bin/python -m pytest "$@"
