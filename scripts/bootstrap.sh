#!/usr/bin/env bash
# Prepare a fresh machine (Debian/Ubuntu controller with Docker) for provision: system tools, a virtual
# environment in .venv with provision and its test tools. Idempotent: a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v debootstrap >/dev/null 2>&1 || need_apt+=(debootstrap)
command -v chroot >/dev/null 2>&1 || need_apt+=(coreutils)
# Sandboxes are reached over SSH, as a user's machines are.
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
# The browser test (tests/integration/test_browser.py) opens the demo's JupyterLab URL in a headless Chromium.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# The `long` suites' VM host (tests/integration/test_vm_driver.py): QEMU, only when they are asked for.
if [ "${PROVISION_LONG:-}" = 1 ]; then
  # qemu-img comes in the same apt transaction as the emulator: a qemu-utils from another release (a backport, as
  # on the machine image this is built on) is removed by apt when Debian's qemu-system-x86 goes in beside it, and
  # only a request for both in one install keeps a matching qemu-img (checked again after the install, below).
  command -v qemu-system-x86_64 >/dev/null 2>&1 || need_apt+=(qemu-system-x86 qemu-utils)
  command -v qemu-img >/dev/null 2>&1 || need_apt+=(qemu-utils)
  # The VM's disk (an EFI system partition and a partition table made from files) and its UEFI firmware.
  command -v mkfs.vfat >/dev/null 2>&1 || need_apt+=(dosfstools)
  command -v mcopy >/dev/null 2>&1 || need_apt+=(mtools)
  command -v sfdisk >/dev/null 2>&1 || need_apt+=(fdisk)
  [ -f /usr/share/OVMF/OVMF_CODE_4M.secboot.fd ] || need_apt+=(ovmf)
fi
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if ((${#need_apt[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: please install ${need_apt[*]} (apt-get install ${need_apt[*]}) and run again" >&2
    exit 3
  fi
  echo "bootstrap: installing ${need_apt[*]} with apt-get (once; a minute or two)" >&2
  apt-get update -qq
  # sort -u: qemu-utils may be named twice above.
  mapfile -t need_apt < <(printf '%s\n' "${need_apt[@]}" | sort -u)
  allow=()
  if printf '%s\n' "${need_apt[@]}" | grep -qx qemu-system-x86; then
    # A qemu-utils newer than the emulator (a backport whose source is no longer listed, as on the machine image
    # this is built on) Breaks Debian's qemu-system-common, and apt then refuses the whole install ("held broken
    # packages"): ask for qemu-utils at the emulator's own version, which may be a downgrade.
    qemu_version=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ {print $2}')
    mapfile -t need_apt < <(printf '%s\n' "${need_apt[@]}" | sed "s/^qemu-utils\$/qemu-utils=$qemu_version/")
    allow=(--allow-downgrades)
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${allow[@]}" "${need_apt[@]}" >/dev/null
fi
if [ "${PROVISION_LONG:-}" = 1 ] && ! command -v qemu-img >/dev/null 2>&1; then
  echo "bootstrap: qemu-img is still missing after the install (apt-get install qemu-utils, then run again)" >&2
  exit 3
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
  echo "bootstrap: installing provision and its test tools into .venv (once; under a minute)" >&2
  # uv, from PyPI into .venv, installs them: 8 s here with its cache warm, where pip took 36 s (issue 42: the test
  # command's time includes this; the versions resolved are the same).
  .venv/bin/python -m pip install -q --disable-pip-version-check uv
  .venv/bin/uv pip install -q --python .venv/bin/python -e '.[test]'
  touch "$stamp"
fi
