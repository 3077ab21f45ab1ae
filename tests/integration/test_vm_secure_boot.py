"""Secure Boot on a stock Debian 13 virtual machine (provision.vm, `--firmware secure-boot`). `long`.

The guest boots as a machine with Secure Boot on does: OVMF with Microsoft's keys enrolled, Debian's signed shim,
GRUB and kernel from its own EFI system partition, the kernel locked down (it refuses modules no trusted key signed).
`provision apply` with the DeskMini profile (nvidia_driver only) must find that before building anything and stop
with what to do: DKMS's signing key is made so it can be enrolled, the firmware does not trust it yet, so the role
names the key and the `mokutil --import` step, exit 1, and the driver is not installed. A second apply says the same
and changes nothing.

Enrolling the key takes a person at the MOK manager's console after a reboot, which no playbook does: that path is
not run here (the module signing it leads to is DKMS's own).
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
NAME = sandbox_name("vm-secure-boot")
APPLY_TIMEOUT = 2 * 3600  # no DKMS build here: the packages before the check take most of it under emulation

pytestmark = [pytest.mark.slow, pytest.mark.long]


def provision(*args: str, env: dict[str, str], timeout: float, log: Path | None = None) -> subprocess.CompletedProcess:
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
    tmp = tmp_path_factory.mktemp("vm-sb")
    env = os.environ | {"PROVISION_STATE": str(tmp / "state")}
    inventory = tmp / "vm.yml"
    provision("sandbox", "down", NAME, env=env, timeout=120)
    try:
        up = provision("sandbox", "up", "--vm", NAME, "--firmware", "secure-boot", "--os", "debian-13", "--profile",
                       "deskmini", "-o", str(inventory), env=env, timeout=2400)
        assert up.returncode == 0, up.stdout + up.stderr
        yield inventory, env, tmp
    finally:
        provision("sandbox", "down", NAME, env=env, timeout=120)


def on_vm(inventory: Path, command: str, check: bool = True) -> str:
    host = YAML(typ="safe").load(inventory.read_text())["all"]["hosts"][NAME]
    proc = subprocess.run(["ssh", *host["ansible_ssh_common_args"].split(), "-i", host["ansible_ssh_private_key_file"],
                           "-p", str(host["ansible_port"]), f"{host['ansible_user']}@127.0.0.1", command],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 or not check, f"{command}: {proc.stderr}"
    return proc.stdout.strip()


def test_secure_boot_stops_the_driver_before_the_build_with_the_key_to_enrol(vm):
    inventory, env, tmp = vm
    # The guest is what it should be: Secure Boot on (the EFI variable), the kernel locked down by it, stock sources.
    assert on_vm(inventory, "od -An -tu1 -j4 -N1 /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c") == "1"
    assert "[integrity]" in on_vm(inventory, "cat /sys/kernel/security/lockdown")
    assert on_vm(inventory, "grep -h Components /etc/apt/sources.list.d/debian.sources | sort -u") == "Components: main"
    started = time.time()
    first = provision("apply", "-i", str(inventory), "--yes", "--skip-frameworks", "--tags", "nvidia_driver",
                      env=env, timeout=APPLY_TIMEOUT, log=tmp / "first-apply")
    print(f"first apply: exit {first.returncode} in {time.time() - started:.0f} s")
    out = first.stdout + first.stderr
    assert first.returncode == 1, out[-4000:]
    assert re.search(rf"{NAME} boots with Secure Boot on and its firmware does not trust DKMS's signing key "
                     r"/var/lib/dkms/mok\.pub", out), out[-4000:]
    assert "sudo mokutil --import /var/lib/dkms/mok.pub" in out
    assert re.search(r"ok\s+secure_boot \| Say the Secure Boot state", first.stderr), first.stderr[-4000:]
    # Stopped before the build: no driver, no kernel module source, no DKMS tree for it; the key to enrol is there.
    assert on_vm(inventory, "dpkg-query -W -f '${db:Status-Abbrev}' nvidia-kernel-dkms nvidia-driver 2>/dev/null",
                 check=False).strip() in ("", "un un", "un")
    assert on_vm(inventory, "ls /var/lib/dkms | grep -c nvidia || true") == "0"
    assert on_vm(inventory, "sudo -n openssl x509 -inform DER -in /var/lib/dkms/mok.pub -noout -subject") == (
        "subject=CN=DKMS module signing key")
    assert on_vm(inventory, "mokutil --sb-state") == "SecureBoot enabled"

    # Again: the same answer, nothing changed (the key is kept, not made again).
    key = on_vm(inventory, "sudo -n sha256sum /var/lib/dkms/mok.pub")
    again = provision("apply", "-i", str(inventory), "--yes", "--skip-frameworks", "--tags", "nvidia_driver",
                      env=env, timeout=APPLY_TIMEOUT, log=tmp / "second-apply")
    assert again.returncode == 1, again.stdout[-4000:] + again.stderr[-4000:]
    assert "does not trust DKMS's signing key" in again.stdout + again.stderr
    assert not re.search(r"^\S+\s+changed\s", again.stderr, re.M), again.stderr[-4000:]
    assert on_vm(inventory, "sudo -n sha256sum /var/lib/dkms/mok.pub") == key
