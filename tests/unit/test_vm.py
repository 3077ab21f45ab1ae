"""provision.vm without booting anything (the boot and the driver's kernel side: tests/integration/test_vm_driver.py,
`long`): what is refused, in one line, before QEMU starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from provision import vm
from provision.errors import RunnerError, UsageError


def test_a_vm_that_is_not_running_has_no_inventory_and_says_how_to_start_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path))
    with pytest.raises(UsageError, match=r"VM pv-none is not running; start it with `provision sandbox up --vm pv-none`"):
        vm.host_connection("pv-none")
    assert vm.remove("pv-none") is False


def test_missing_qemu_is_one_line_naming_the_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(RunnerError) as caught:
        vm.ensure_base("13")
    # Every tool is missing with PATH empty: each named, and each package once (mtools carries mcopy and mmd).
    assert caught.value.lines() == [
        "a VM sandbox needs qemu-system-x86_64, qemu-img, mkfs.ext4, debootstrap, mkfs.vfat, mcopy, mmd, sfdisk: "
        "apt-get install debootstrap dosfstools e2fsprogs fdisk mtools qemu-system-x86 qemu-utils"]


def test_an_unknown_release_is_refused():
    with pytest.raises(UsageError, match="no VM sandbox for Debian 11"):
        vm.ensure_base("11")


def test_vm_hosts_are_reached_over_ssh_only():
    proc = subprocess.run([sys.executable, "-m", "provision", "sandbox", "up", "--vm", "pv-x", "--connection", "docker"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --vm hosts are reached over SSH only (no --connection docker)"), proc.stderr


def test_an_unknown_firmware_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path))
    with pytest.raises(UsageError, match=r"--firmware bios: use one of direct, uefi, secure-boot"):
        vm.start("pv-none", "13", firmware="bios")
    assert not (tmp_path / "vm").exists()


def test_firmware_is_for_vms_only():
    proc = subprocess.run([sys.executable, "-m", "provision", "sandbox", "up", "pv-x", "--firmware", "uefi"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--firmware uefi is for --vm hosts" in proc.stderr, proc.stderr


def test_the_secure_boot_firmware_is_ovmfs_secure_build_with_microsofts_keys():
    code, variables = vm.FIRMWARE["secure-boot"] or ("", "")
    assert code.endswith("OVMF_CODE_4M.secboot.fd") and variables.endswith("OVMF_VARS_4M.ms.fd")
    assert vm.FIRMWARE["direct"] is None
