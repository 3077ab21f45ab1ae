#!/usr/bin/env bash
# The main job on a fresh machine (README "Run it"): provision a throwaway Debian 13 container as if it were the
# DeskMini (GTX 1070), check it with the testinfra suite, and print how to reach its Jupyter.
# On your own machine, run `provision apply profiles/deskmini.yaml -i inventory/local.yml` instead (it asks first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# --skip-frameworks: the DeskMini plan takes PyTorch from download.pytorch.org (cu126), which the machines this
# project is built on cannot reach; everything else in the plan is installed for real.
exec .venv/bin/provision apply "${1:-profiles/deskmini.yaml}" --os "${2:-debian-13}" --sandbox provision-demo --yes --skip-frameworks
