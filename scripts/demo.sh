#!/usr/bin/env bash
# The main job on a fresh machine (README "Run it"): provision a throwaway Debian 13 container as if it were the
# DeskMini (GTX 1070), check it with the testinfra suite, and end with what it has and a URL that opens its
# JupyterLab in a browser here (through an SSH tunnel apply starts; `provision sandbox down provision-demo` removes
# the container and the tunnel).
# On your own machine, run `provision apply profiles/deskmini.yaml -i inventory/local.yml` instead (it asks first).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# --index pytorch=off: the machines this project is built on cannot reach download.pytorch.org, so the plan takes
# the newest PyPI torch whose compiled architectures run on the GTX 1070 (sm_61): torch 2.7.1, PyPI's CUDA 12.6
# build. Everything in the plan is installed for real, the framework included (about 2.5 GB of wheels).
exec .venv/bin/provision apply "${1:-profiles/deskmini.yaml}" --os "${2:-debian-13}" --sandbox provision-demo --yes \
  --index pytorch=off
