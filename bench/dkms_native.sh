#!/usr/bin/env bash
# How long DKMS takes to build Debian 13's NVIDIA module natively on this machine, for comparison with the same
# build inside the QEMU guest under software emulation (tests/integration/test_vm_driver.py; docs/hosts.md).
#
# A throwaway container from the sandbox base image (provision/debian:13, built by `provision sandbox up`): Debian's
# contrib and non-free enabled, then dkms, the headers of the guest's kernel and nvidia-kernel-dkms installed with
# DKMS's automatic build left to fail or skip (the container runs the controller's kernel, not the guest's); then
# the one timed step: `dkms build` of the module for the guest's kernel, the step the VM's apply spends its hour in.
#
#     bash bench/dkms_native.sh [KERNEL]     (default: the kernel of the VM base image, ~/.cache/provision/vm)
set -euo pipefail
cd "$(dirname "$0")/.."
base_json=~/.cache/provision/vm/debian-13/base.json
kernel=${1:-$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['kernel'].removeprefix('vmlinuz-'))" "$base_json")}
image=provision/debian:13
docker image inspect "$image" >/dev/null 2>&1 || { echo "dkms_native: no $image image: run 'provision sandbox up' once" >&2; exit 3; }
name=pv-bench-dkms
docker rm -f "$name" >/dev/null 2>&1 || true
trap 'docker rm -f "$name" >/dev/null 2>&1 || true' EXIT
docker run -d --name "$name" "$image" sleep infinity >/dev/null
docker exec "$name" sh -c "sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' /etc/apt/sources.list.d/debian.sources"
echo "dkms_native: installing dkms, linux-headers-$kernel and nvidia-kernel-dkms (untimed)" >&2
docker exec -e DEBIAN_FRONTEND=noninteractive "$name" sh -c \
  "apt-get update -qq && apt-get install -y -qq --no-install-recommends dkms linux-headers-$kernel nvidia-kernel-dkms >/tmp/install.log 2>&1 || (tail -20 /tmp/install.log; exit 1)"
module=$(docker exec "$name" sh -c "ls /usr/src | sed -n 's/^\(nvidia-current\)-\(.*\)$/\1\/\2/p' | head -1")
[ -n "$module" ] || { echo "dkms_native: no nvidia-current source under /usr/src" >&2; exit 1; }
docker exec "$name" sh -c "dkms remove $module -k $kernel >/dev/null 2>&1 || true"
echo "dkms_native: dkms build $module -k $kernel on $(nproc) cores (timed)" >&2
start=$(date +%s)
docker exec "$name" dkms build "$module" -k "$kernel" >/tmp/dkms_native.log 2>&1 || { tail -30 /tmp/dkms_native.log; exit 1; }
took=$(( $(date +%s) - start ))
status=$(docker exec "$name" dkms status "$module" -k "$kernel")
echo "dkms_native: $status"
echo "dkms_native: built in ${took} s natively ($(date -u +%F), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
