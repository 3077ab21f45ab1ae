#!/usr/bin/env bash
# Prepare a fresh machine (Debian/Ubuntu controller with Docker) for provision: system tools, a virtual
# environment in .venv with provision and its test tools. Idempotent: a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v chroot >/dev/null 2>&1 || need_apt+=(coreutils)
if ((${#need_apt[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: please install ${need_apt[*]} (apt-get install ${need_apt[*]}) and run again" >&2
    exit 3
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "bootstrap: the Docker engine is not running (docker info failed): start it and run again" >&2
  exit 3
fi

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "bootstrap: provision needs Python >= 3.11 ($PY is $("$PY" -V 2>&1))" >&2
  exit 3
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.provision-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
