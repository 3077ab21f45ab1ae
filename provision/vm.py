"""Throwaway Debian virtual machines (QEMU) as test hosts: a kernel of their own, for the driver's kernel side.

Containers share the controller's kernel, so on them the nvidia_driver role installs the user-space half only. A
bare-metal box takes the other path: DKMS builds the module for the running kernel, nouveau is blacklisted, the
initramfs is regenerated, the host reboots, and the module loads or does not. A VM runs that path for real:

- the guest is the same stock Debian a sandbox container is (provision.sandbox: debootstrap, `main` only, an `admin`
  account with the controller's key and sudo, the controller's extra CAs), plus what an installed machine has and a
  container lacks: `linux-image-amd64` and `initramfs-tools`, an fstab, a network configuration (ifupdown, as
  Debian's installer writes it, with QEMU's user-mode address);
- its disk is what Debian's installer makes on a UEFI machine: a GPT with an EFI system partition (Debian's signed
  shim, GRUB and MokManager, from shim-signed, grub-efi-amd64-signed and shim-helpers-amd64-signed, and a grub.cfg
  that boots /vmlinuz and /initrd.img from the root partition) and an ext4 root (`mkfs.ext4 -d`), both labelled and
  mounted by label. It is kept as a qcow2 base under `$PROVISION_CACHE/vm/debian-<release>/`; each VM boots a
  copy-on-write overlay of it (`qemu-img create -b`), so a VM starts from a clean disk in seconds and `down` throws
  the overlay away;
- firmware, per VM (`provision sandbox up --vm NAME --firmware ...`):
  - `direct` (the default, the fastest): QEMU boots the guest's kernel and initrd itself (`-kernel`/`-initrd`,
    copied out of /boot when the base is built). A reboot restarts the same kernel; an initramfs the guest
    regenerates is written but not the one QEMU loads (the nouveau blacklist works either way, from modprobe.d);
  - `uefi`: OVMF (Debian's `ovmf`), then shim, GRUB and the guest's own /vmlinuz and /initrd.img, as a machine boots;
  - `secure-boot`: the same with Secure Boot on and Microsoft's keys enrolled (OVMF_VARS_4M.ms.fd, SMM): shim
    checks GRUB, GRUB the kernel, and the kernel locks down and refuses modules no trusted key signed;
- software emulation (TCG), not KVM: /dev/kvm on the machines this is built on does not run a Debian kernel (its
  instruction emulation fails early in boot). Boot to SSH takes about 40 s; work inside runs 10-15x slower;
- user-mode networking, with the guest's SSH forwarded to a port on the controller's 127.0.0.1; the guest's host
  key is made when the base is built and pinned in the same known_hosts as the containers'.

Nothing here is for a user's machine: `provision sandbox up --vm NAME` (tests/integration/test_vm_driver.py).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision import sandbox
from provision.errors import RunnerError, UsageError
from provision.procs import run_tool, run_tool_streamed, tool_packages
from provision.state import cache_root

VM_RECIPE = "vm-2"  # bump when the guest's recipe changes: an older base is rebuilt
GUEST_PACKAGES = (*sandbox.BASE_PACKAGES, "linux-image-amd64", "initramfs-tools", "zstd", "kmod", "udev", "ifupdown")
DISK_SIZE = "12G"  # sparse: the base takes ~1 GB; the driver, DKMS, compilers and headers ~1.5 GB more
MEMORY_MB = int(os.environ.get("PROVISION_VM_MEMORY_MB", "3072"))
CPUS = int(os.environ.get("PROVISION_VM_CPUS", str(min(os.cpu_count() or 1, 4))))
BOOT_TIMEOUT = float(os.environ.get("PROVISION_VM_BOOT_TIMEOUT", "300"))
# Debian's signed boot chain for the EFI system partition: (package, file in it, name on the partition).
EFI_FILES = (
    ("shim-signed", "usr/lib/shim/shimx64.efi.signed", "BOOTX64.EFI"),  # the removable-media path firmware tries
    ("grub-efi-amd64-signed", "usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed", "grubx64.efi"),
    ("shim-helpers-amd64-signed", "usr/lib/shim/mmx64.efi.signed", "mmx64.efi"),  # MokManager, to enrol a key
)
ESP_MIB = 64
# The firmware per --firmware: OVMF's code and the template of its variables (copied per VM); None boots directly.
OVMF = "/usr/share/OVMF"
FIRMWARE: dict[str, tuple[str, str] | None] = {
    "direct": None,
    "uefi": (f"{OVMF}/OVMF_CODE_4M.fd", f"{OVMF}/OVMF_VARS_4M.fd"),
    "secure-boot": (f"{OVMF}/OVMF_CODE_4M.secboot.fd", f"{OVMF}/OVMF_VARS_4M.ms.fd"),
}
# QEMU's user-mode network: the guest's address, its gateway (the controller) and its DNS forwarder.
GUEST_ADDRESS, GATEWAY, DNS = "10.0.2.15", "10.0.2.2", "10.0.2.3"


VM_TOOLS = ("qemu-system-x86_64", "qemu-img", "mkfs.ext4", "debootstrap", "mkfs.vfat", "mcopy", "mmd", "sfdisk")


def _tools() -> None:
    missing = [tool for tool in VM_TOOLS if not shutil.which(tool)]
    if missing:
        packages = sorted({tool_packages().get(tool, tool) for tool in missing})
        raise RunnerError(f"a VM sandbox needs {', '.join(missing)}: apt-get install {' '.join(packages)}")


def _firmware(firmware: str) -> tuple[str, str] | None:
    if firmware not in FIRMWARE:
        raise UsageError(f"--firmware {firmware}: use one of {', '.join(FIRMWARE)}")
    files = FIRMWARE[firmware]
    if files and not all(os.path.isfile(f) for f in files):
        raise RunnerError(f"--firmware {firmware} needs OVMF ({files[0]}, {files[1]}): apt-get install ovmf")
    return files


def base_dir(release: str) -> Path:
    return cache_root() / "vm" / f"debian-{release}"


def vm_dir(name: str) -> Path:
    return cache_root() / "vm" / "hosts" / name


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def ensure_base(release: str, *, log=None, progress=None) -> Path:
    """Build the guest's base disk, kernel and initrd for Debian `release` once; returns their directory."""
    codenames = sandbox.debian_codenames()
    if release not in codenames:
        raise UsageError(f"no VM sandbox for Debian {release}; this machine builds {sorted(codenames)}")
    _tools()
    dest = base_dir(release)
    key_pub = sandbox.ssh_key().with_suffix(".pub").read_text()
    stamp = _read_json(dest / "base.json")
    if stamp.get("recipe") == VM_RECIPE and stamp.get("authorized_key") == key_pub and (dest / "base.qcow2").is_file():
        return dest
    if os.geteuid() != 0:
        raise RunnerError("building the VM sandbox's disk needs root (debootstrap and chroot): run it as root once")
    codename = codenames[release]
    if log:
        log(f"building the Debian {release} VM disk with debootstrap and a kernel (once; 3-6 minutes)")
    debs = cache_root() / "debootstrap" / codename
    debs.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix=f"provision-vm-{codename}-") as tmp:
        root = Path(tmp) / "root"
        run_tool_streamed(["debootstrap", "--variant=minbase", f"--cache-dir={debs}",
                           "--include=" + ",".join(GUEST_PACKAGES), "--components=main", codename, str(root),
                           sandbox.MIRROR], f"debootstrap {codename} (VM)", progress)
        path, text = sandbox.default_sources(release)
        (root / "etc/apt/sources.list").unlink(missing_ok=True)
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
        efi_files = _signed_boot_files(root, Path(tmp) / "efi", progress)
        # What Debian's installer writes for a UEFI machine with one disk and one network card.
        (root / "etc/fstab").write_text("LABEL=root / ext4 errors=remount-ro 0 1\n"
                                        "LABEL=ESP /boot/efi vfat umask=0077 0 1\n")
        (root / "boot/efi").mkdir(parents=True, exist_ok=True)
        (root / "etc/hostname").write_text("debian\n")
        (root / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 debian\n")
        (root / "etc/network/interfaces").write_text(
            "source /etc/network/interfaces.d/*\n\nauto lo\niface lo inet loopback\n\n"
            f"auto eth0\niface eth0 inet static\n  address {GUEST_ADDRESS}/24\n  gateway {GATEWAY}\n")
        resolv = root / "etc/resolv.conf"
        resolv.unlink(missing_ok=True)
        resolv.write_text(f"nameserver {DNS}\n")
        sandbox.trust_controller_cas(root)
        run_tool(["chroot", str(root), "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo",
                  sandbox.ADMIN], "create the admin account in the VM disk")
        ssh = root / "home" / sandbox.ADMIN / ".ssh"
        ssh.mkdir(mode=0o700)
        (ssh / "authorized_keys").write_text(key_pub)
        (ssh / "authorized_keys").chmod(0o600)
        run_tool(["chroot", str(root), "chown", "-R", f"{sandbox.ADMIN}:{sandbox.ADMIN}",
                  f"/home/{sandbox.ADMIN}/.ssh"], "own the admin account's SSH directory")
        sudoers = root / "etc/sudoers.d" / f"90-{sandbox.ADMIN}"
        sudoers.write_text(f"{sandbox.ADMIN} ALL=(ALL:ALL) NOPASSWD:ALL\n")
        sudoers.chmod(0o440)
        # One host key for every VM made from this disk: each gets its own port, and the key is pinned before the
        # first connection (nothing is trusted on first use).
        for old in (root / "etc/ssh").glob("ssh_host_*"):
            old.unlink()
        run_tool(["chroot", str(root), "ssh-keygen", "-A"], "make the VM's SSH host keys")
        host_key = (root / "etc/ssh/ssh_host_ed25519_key.pub").read_text()
        kernels = sorted((root / "boot").glob("vmlinuz-*"))
        initrds = sorted((root / "boot").glob("initrd.img-*"))
        if not kernels or not initrds:
            raise RunnerError(f"the VM disk has no kernel or initrd in /boot ({[p.name for p in (root / 'boot').iterdir()]})")
        shutil.copyfile(kernels[-1], dest / "vmlinuz")
        shutil.copyfile(initrds[-1], dest / "initrd.img")
        shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
        (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        # GRUB boots the root partition's /vmlinuz and /initrd.img (links the kernel's packages keep current), so a
        # regenerated initramfs is the one the next boot loads.
        links = (root / "vmlinuz").is_symlink() and (root / "initrd.img").is_symlink()
        kernel, initrd = ("/vmlinuz", "/initrd.img") if links else (f"/boot/{kernels[-1].name}", f"/boot/{initrds[-1].name}")
        grub_cfg = (f"set timeout=0\nsearch --no-floppy --label --set=root root\n"
                    f"linux {kernel} root=LABEL=root ro console=ttyS0 net.ifnames=0\ninitrd {initrd}\nboot\n")
        if progress:
            progress("making the VM's disk (EFI system partition and ext4 root)")
        _make_disk(root, efi_files, grub_cfg, Path(tmp), dest / "base.qcow2")
    (dest / "base.json").write_text(json.dumps({"recipe": VM_RECIPE, "kernel": kernels[-1].name,
                                                "authorized_key": key_pub, "host_key": host_key}, indent=2))
    return dest


def _signed_boot_files(root: Path, work: Path, progress=None) -> dict[str, Path]:
    """Debian's signed shim, GRUB and MokManager for the guest's release, fetched with the guest's own apt (a state
    directory of its own, removed after: the guest's apt lists stay as debootstrap left them). {name on the EFI
    system partition: file}."""
    if progress:
        progress("fetching Debian's signed shim and GRUB for the VM's EFI system partition")
    scratch = root / "tmp" / "provision-efi"
    scratch.mkdir(parents=True)
    inside = "/tmp/provision-efi"
    opts = [f"-oDir::State::Lists={inside}/lists", f"-oDir::Cache={inside}/cache", "-oAPT::Sandbox::User=root",
            "-qq"]
    (scratch / "lists" / "partial").mkdir(parents=True)
    (scratch / "cache" / "archives" / "partial").mkdir(parents=True)
    run_tool(["chroot", str(root), "apt-get", *opts, "update"], "apt-get update (VM boot files)")
    packages = sorted({package for package, _, _ in EFI_FILES})
    run_tool(["chroot", str(root), "sh", "-c", f"cd {inside} && apt-get {' '.join(opts)} download {' '.join(packages)}"],
             "apt-get download " + " ".join(packages))
    for deb in scratch.glob("*.deb"):
        run_tool(["chroot", str(root), "dpkg-deb", "-x", f"{inside}/{deb.name}", f"{inside}/x"], f"dpkg-deb -x {deb.name}")
    work.mkdir(parents=True)
    found: dict[str, Path] = {}
    for package, member, name in EFI_FILES:
        source = scratch / "x" / member
        if not source.is_file():
            raise RunnerError(f"the VM's boot files: {package} has no {member}")
        found[name] = Path(shutil.copyfile(source, work / name))
    shutil.rmtree(scratch)
    return found


def _make_disk(root: Path, efi_files: dict[str, Path], grub_cfg: str, work: Path, dest: Path) -> None:
    """A GPT disk as Debian's installer makes it on a UEFI machine, built from files (no loop devices, no root
    mounts): the EFI system partition (FAT, label ESP; shim as the removable-media boot file, GRUB and MokManager
    beside it, grub.cfg where the signed GRUB looks) and the ext4 root (label root, `mkfs.ext4 -d`)."""
    esp, rootfs, raw = work / "esp.img", work / "root.img", work / "disk.raw"
    run_tool(["mkfs.vfat", "-n", "ESP", "-C", str(esp), str(ESP_MIB * 1024)], "mkfs.vfat (EFI system partition)")
    run_tool(["mmd", "-i", str(esp), "::/EFI", "::/EFI/BOOT", "::/EFI/debian"], "mmd (EFI system partition)")
    (work / "grub.cfg").write_text(grub_cfg)
    # Debian's signed GRUB reads $prefix/grub.cfg (/EFI/debian) and falls back to the directory it was loaded from.
    placed = [(path, f"::/EFI/BOOT/{name}") for name, path in efi_files.items()]
    placed += [(work / "grub.cfg", "::/EFI/BOOT/grub.cfg"), (work / "grub.cfg", "::/EFI/debian/grub.cfg")]
    for source, target in placed:
        run_tool(["mcopy", "-i", str(esp), str(source), target], f"mcopy {target}")
    run_tool(["mkfs.ext4", "-q", "-L", "root", "-d", str(root), str(rootfs), DISK_SIZE], "mkfs.ext4 -d")
    esp_sectors, root_sectors = esp.stat().st_size // 512, rootfs.stat().st_size // 512
    first = 2048  # 1 MiB, as partitioning tools align
    with raw.open("wb") as handle:  # sparse: the backup GPT needs 1 MiB at the end
        handle.truncate((first + esp_sectors + root_sectors + 2048) * 512)
    table = ("label: gpt\n"
             f"start={first}, size={esp_sectors}, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=ESP\n"
             f"start={first + esp_sectors}, size={root_sectors}, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n")
    run_tool(["sfdisk", "-q", str(raw)], "sfdisk (the VM's partition table)", input=table)
    for image, start in ((esp, first), (rootfs, first + esp_sectors)):
        run_tool(["dd", f"if={image}", f"of={raw}", "bs=512", f"seek={start}", "conv=notrunc,sparse", "status=none"],
                 f"dd {image.name}")
    run_tool(["qemu-img", "convert", "-O", "qcow2", str(raw), str(dest)], "qemu-img convert")


@dataclass(frozen=True)
class VM:
    name: str
    release: str
    port: int
    pid: int


def _pid(name: str) -> int | None:
    try:
        pid = int((vm_dir(name) / "qemu.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    try:  # the pid is QEMU's, not a reused number
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if str(vm_dir(name)).encode() in cmdline else None


def is_running(name: str) -> bool:
    return _pid(name) is not None


def state(name: str) -> dict[str, Any]:
    return _read_json(vm_dir(name) / "vm.json")


def start(name: str, release: str = "13", *, firmware: str = "direct", log=None, progress=None) -> VM:
    """Boot VM `name` from a fresh overlay of the base disk (or its existing overlay, if it was only stopped) with
    `firmware` (FIRMWARE) and wait until the admin account gets in over SSH."""
    ovmf = _firmware(firmware)
    base = ensure_base(release, log=log, progress=progress)
    here = vm_dir(name)
    if is_running(name):
        meta = state(name)
        if meta.get("firmware", "direct") != firmware:
            raise UsageError(f"VM {name} runs with --firmware {meta.get('firmware', 'direct')}, not {firmware}: "
                             f"`provision sandbox down {name}` first")
        return VM(name, meta["release"], meta["port"], _pid(name) or 0)
    here.mkdir(parents=True, exist_ok=True)
    overlay = here / "disk.qcow2"
    if not overlay.is_file():
        run_tool(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(base / "base.qcow2"), "-F", "qcow2",
                  str(overlay)], f"VM {name}: overlay disk")
    port = state(name).get("port") or sandbox.free_port()
    machine = "q35,smm=on" if firmware == "secure-boot" else "q35"  # OVMF's Secure Boot build needs SMM
    cmd = ["qemu-system-x86_64", "-name", name, "-machine", machine, "-accel", "tcg,thread=multi", "-cpu", "max",
           "-smp", str(CPUS), "-m", str(MEMORY_MB)]
    if ovmf is None:
        cmd += ["-kernel", str(base / "vmlinuz"), "-initrd", str(base / "initrd.img"),
                # systemd waits 90 s for a device in fstab (the ESP) before it gives up and drops to emergency mode
                # with no sshd: under emulation on a loaded machine udev took longer (2026-11-28, load 16-17). The
                # wait is given on the emulated boot's command line (systemd(1), v254+), not in the guest's fstab.
                "-append", "root=LABEL=root rw console=ttyS0 net.ifnames=0 quiet "
                "systemd.default_device_timeout_sec=900"]
    else:
        code, template = ovmf
        variables = here / "efivars.fd"  # the VM's own EFI variables (its Secure Boot keys, MokManager's requests)
        if not variables.is_file():
            shutil.copyfile(template, variables)
        if firmware == "secure-boot":  # only SMM code may write the flash that holds the Secure Boot keys
            cmd += ["-global", "driver=cfi.pflash01,property=secure,value=on"]
        cmd += ["-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={code}",
                "-drive", f"if=pflash,format=raw,unit=1,file={variables}"]
    cmd += [
        "-drive", f"file={overlay},if=virtio,format=qcow2,cache=unsafe",
        "-netdev", f"user,id=net0,hostfwd=tcp:127.0.0.1:{port}-:22", "-device", "virtio-net-pci,netdev=net0",
        "-display", "none", "-serial", f"file:{here / 'console.log'}", "-monitor", "none",
        "-daemonize", "-pidfile", str(here / "qemu.pid"),
    ]
    if progress:
        how = "QEMU" if ovmf is None else f"QEMU, {firmware} firmware"
        progress(f"booting VM {name} ({how}, software emulation: {'about 40 s' if ovmf is None else '1-3 min'} to SSH)")
    run_tool(cmd, f"start VM {name}")
    (here / "vm.json").write_text(json.dumps({"release": release, "port": port, "base": str(base),
                                              "firmware": firmware}))
    sandbox.pin_host_key(port, json.loads((base / "base.json").read_text())["host_key"])
    sandbox.wait_ssh(name, port, sandbox.ssh_key(), timeout=BOOT_TIMEOUT * (1 if ovmf is None else 2))
    return VM(name, release, port, _pid(name) or 0)


def stop(name: str, timeout: float = 60) -> None:
    """Power the VM off (its overlay stays): SIGTERM to QEMU, then SIGKILL."""
    pid = _pid(name)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _pid(name) is not None:
        time.sleep(0.2)
    if _pid(name) is not None:
        os.kill(pid, signal.SIGKILL)


def remove(name: str) -> bool:
    """Stop the VM and delete its overlay; False when there is no VM of this name."""
    here = vm_dir(name)
    if not here.is_dir():
        return False
    port = state(name).get("port")
    stop(name, timeout=10)
    shutil.rmtree(here, ignore_errors=True)
    if port:
        sandbox.pin_host_key(int(port), None)
    return True


def host_connection(name: str) -> dict[str, Any]:
    """Inventory variables for VM `name`: over SSH as the admin account with sudo, as a user's machine."""
    port = state(name).get("port")
    if not port or not is_running(name):
        raise UsageError(f"VM {name} is not running; start it with `provision sandbox up --vm {name}`")
    return {
        "ansible_host": "127.0.0.1",
        "ansible_port": int(port),
        "ansible_user": sandbox.ADMIN,
        "ansible_ssh_private_key_file": str(sandbox.ssh_key()),
        "ansible_ssh_common_args": sandbox.ssh_args(),
        "ansible_become": True,
        "ansible_python_interpreter": "/usr/bin/python3",
        # A VM has no GPU either: the verifier compiles its kernels only, and says so (chosen for this host alone).
        "gpu_verify_compile_only": True,
    }
