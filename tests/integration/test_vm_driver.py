"""The driver's kernel side on a stock Debian 13 virtual machine (provision.vm: QEMU, software emulation). `long`.

Containers share the controller's kernel, so everywhere else nvidia_driver installs the user-space half only. Here the
host has a kernel of its own, and `provision apply` with the DeskMini profile (nvidia_driver only: the other roles are
the same on a VM as on the container hosts of test_apply.py) must take the whole path:

- Debian's contrib, non-free and non-free-firmware enabled on a host whose sources say `main` only;
- no EFI in this guest: the role says that Secure Boot cannot be on, before building anything;
- nvidia-kernel-dkms built by DKMS for the running kernel, nouveau blacklisted, the initramfs regenerated;
- the reboot handler reboots the guest over SSH and waits for it (a new boot id);
- then the truth, in one line and exit 1: the module is built for the running kernel and does not load, because
  the guest has no NVIDIA GPU;
- a second apply changes nothing and does not reboot.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.support.names import sandbox_name

ROOT = Path(__file__).resolve().parents[2]
NAME = sandbox_name("vm-driver")
APPLY_TIMEOUT = 4 * 3600  # DKMS under software emulation: see docs/hosts.md for the measured time

pytestmark = [pytest.mark.slow, pytest.mark.long]


def provision(*args: str, env: dict[str, str], timeout: float, log: Path | None = None) -> subprocess.CompletedProcess:
    """Run the CLI. With `log`, its output goes to log.out/log.err as it comes (an apply here takes hours: the files
    show how far it got), and is read back when it ends."""
    cmd = [sys.executable, "-m", "provision", *args]
    if log is None:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    out, err = log.with_suffix(".out"), log.with_suffix(".err")
    print(f"{' '.join(args[:1])}: output in {out} and {err}", flush=True)
    with out.open("w") as o, err.open("w") as e:
        proc = subprocess.run(cmd, stdout=o, stderr=e, text=True, cwd=ROOT, env=env, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    return subprocess.CompletedProcess(cmd, proc.returncode, out.read_text(), err.read_text())


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vm")
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    inventory = tmp / "vm.yml"
    provision("sandbox", "down", NAME, env=env, timeout=120)
    try:
        up = provision("sandbox", "up", "--vm", NAME, "--os", "debian-13", "--profile", "deskmini", "-o",
                       str(inventory), env=env, timeout=1800)
        assert up.returncode == 0, up.stdout + up.stderr
        yield inventory, env, tmp
    finally:
        provision("sandbox", "down", NAME, env=env, timeout=120)


def on_vm(inventory: Path, command: str) -> str:
    host = YAML(typ="safe").load(inventory.read_text())["all"]["hosts"][NAME]
    proc = subprocess.run(["ssh", *host["ansible_ssh_common_args"].split(), "-i", host["ansible_ssh_private_key_file"],
                           "-p", str(host["ansible_port"]), f"{host['ansible_user']}@127.0.0.1", command],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{command}: {proc.stderr}"
    return proc.stdout.strip()


def test_the_kernel_side_is_built_the_host_reboots_and_the_missing_gpu_is_the_one_line_answer(vm):
    inventory, env, tmp = vm
    assert on_vm(inventory, "grep -h Components /etc/apt/sources.list.d/debian.sources | sort -u") == "Components: main"
    boot_before = on_vm(inventory, "cat /proc/sys/kernel/random/boot_id")
    started = time.time()
    first = provision("apply", "-i", str(inventory), "--yes", "--skip-frameworks", "--tags", "nvidia_driver",
                      env=env, timeout=APPLY_TIMEOUT, log=tmp / "first-apply")
    took = time.time() - started
    out = first.stdout + first.stderr
    print(f"first apply: exit {first.returncode} in {took:.0f} s")
    assert first.returncode == 1, out[-4000:]
    assert re.search(r"the NVIDIA module 5\d\d\.\d+(\.\d+)? is built for the running kernel \S+ on " + NAME
                     + " but does not load: there is no NVIDIA GPU on its PCI bus", out), out[-4000:]
    assert re.search(r"ok\s+secure_boot \| Say that Secure Boot cannot be on", first.stderr), first.stderr[-4000:]
    # The components the driver needs were enabled; DKMS built the module for the running kernel; nouveau is
    # blacklisted and the initramfs was made again; the guest rebooted.
    components = on_vm(inventory, "grep -h Components /etc/apt/sources.list.d/debian.sources | sort -u")
    assert "contrib" in components and "non-free" in components, components
    kernel = on_vm(inventory, "uname -r")
    dkms = on_vm(inventory, "sudo -n dkms status")  # dkms is in /usr/sbin, not on the account's PATH
    assert re.search(rf"nvidia[-\w]*/5\d\d[.\d]*, {re.escape(kernel)}, x86_64: installed", dkms), dkms
    assert on_vm(inventory, "cat /etc/modprobe.d/provision-blacklist-nouveau.conf").startswith("#")
    assert int(on_vm(inventory, f"stat -c %Y /boot/initrd.img-{kernel}")) > started
    assert on_vm(inventory, "cat /proc/sys/kernel/random/boot_id") != boot_before, "the guest was not rebooted"
    assert on_vm(inventory, "test -e /proc/driver/nvidia/version && echo loaded || echo absent") == "absent"

    # Again: nothing to change, no reboot, the same answer.
    boot_after = on_vm(inventory, "cat /proc/sys/kernel/random/boot_id")
    again = provision("apply", "-i", str(inventory), "--yes", "--skip-frameworks", "--tags", "nvidia_driver",
                      env=env, timeout=APPLY_TIMEOUT, log=tmp / "second-apply")
    assert again.returncode == 1, again.stdout[-4000:] + again.stderr[-4000:]
    assert "there is no NVIDIA GPU on its PCI bus" in again.stdout + again.stderr
    assert not re.search(r"^\S+\s+changed\s", again.stderr, re.M), again.stderr[-4000:]
    assert on_vm(inventory, "cat /proc/sys/kernel/random/boot_id") == boot_after, "the second apply rebooted"
