"""What doctor reads of the local machine (`read_machine()`): the OS, CPU and its ISA flags, memory, the GPUs
(nvidia-smi, else lspci), the driver, a Jetson's L4T release and the frameworks its Python environments import,
all below a root directory (`Reader`), and the parsers for each source."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# pci.device_id: "0x1DB110DE", the device ID above NVIDIA's vendor ID (0x10DE)
NVIDIA_SMI_QUERY = ["--query-gpu=name,compute_cap,driver_version,memory.total,pci.device_id",
                    "--format=csv,noheader,nounits"]


# ISA extensions worth recording in a profile (what framework wheels are built against); the rest of /proc/cpuinfo's
# flags are about the platform, not about which binaries run.
ISA_FLAG = re.compile(
    r"^(fpu|sse\d?(_\d)?|ssse3|sse4a|avx.*|fma\d?|f16c|bmi\d|aes|pclmulqdq|popcnt|sha_ni|amx.*|vnni|"
    r"movbe|lzcnt|abm|adx|rdrand|erms)$"
)


class Reader:
    """Reads files and command output below `root`. On `/` commands really run; elsewhere their captured output
    is read from <root>/commands/<name>.txt (absent file = command not installed)."""

    def __init__(self, root: Path | str = "/") -> None:
        self.root = Path(root)
        self.live = self.root.resolve() == Path("/")

    def file(self, path: str) -> str | None:
        try:
            return (self.root / path.lstrip("/")).read_text(errors="replace")
        except OSError:
            return None

    def python_environments(self) -> str | None:
        """One JSON line per Python environment of the machine: the interpreter, its prefix and the framework
        modules it finds. On `/` the probe runs in python3 and python on PATH, $VIRTUAL_ENV's, $CONDA_PREFIX's and
        /usr/bin/python3; elsewhere it is read from <root>/commands/python-frameworks.txt."""
        if not self.live:
            return self.file("commands/python-frameworks.txt")
        candidates = [shutil.which("python3"), shutil.which("python")]
        for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
            if os.environ.get(var):
                candidates.append(str(Path(os.environ[var]) / "bin" / "python"))
        candidates.append("/usr/bin/python3")
        lines = []
        for exe in dict.fromkeys(c for c in candidates if c and os.access(c, os.X_OK)):
            if os.geteuid() == 0 and not _root_may_run(exe):
                continue  # least privilege: root does not run an interpreter another account can replace
            try:
                proc = subprocess.run([exe, "-c", _FRAMEWORK_PROBE, *FRAMEWORK_MODULES], capture_output=True,
                                      text=True, timeout=60, env={**os.environ, "PYTHONNOUSERSITE": "1"})
            except (OSError, subprocess.SubprocessError):
                continue
            if proc.returncode == 0 and proc.stdout.strip():
                lines.append(proc.stdout.strip().splitlines()[-1])
        return "\n".join(lines)

    def command(self, name: str, args: list[str]) -> str | None:
        if not self.live:
            return self.file(f"commands/{name}.txt")
        exe = shutil.which(name)
        if exe is None:
            return None
        try:
            proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None


# The frameworks doctor looks for in the machine's Python environments: import name -> the profile's framework name
# (None: found and reported, but provision does not plan it).
FRAMEWORK_MODULES: dict[str, str | None] = {"torch": "pytorch", "tensorflow": "tensorflow", "jax": None}


# Run in each interpreter: which of the modules its import system finds (without importing them: TensorFlow's import
# takes seconds and may print to the terminal) and their installed versions. One JSON line.
_FRAMEWORK_PROBE = """
import importlib.metadata, importlib.util, json, sys
found = {}
for mod in sys.argv[1:]:
    try:
        spec = importlib.util.find_spec(mod)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        continue
    try:
        found[mod] = importlib.metadata.version(mod)
    except importlib.metadata.PackageNotFoundError:
        found[mod] = None
print(json.dumps({"python": sys.executable, "prefix": sys.prefix, "found": found}))
"""


@dataclass
class FrameworkSeen:
    module: str  # torch | tensorflow | jax
    version: str | None
    python: str  # the interpreter that finds it
    prefix: str  # its environment (sys.prefix)


def _root_may_run(path: str) -> bool:
    """The interpreter (symlinks resolved) and every directory above it belong to root and are not group- or
    world-writable, so no other account could have put it there."""
    try:
        real = Path(path).resolve(strict=True)
        for part in (real, *real.parents):
            st = part.stat()
            if st.st_uid != 0 or st.st_mode & 0o022:
                return False
    except OSError:
        return False
    return True


@dataclass
class GpuSeen:
    name: str
    compute_capability: str | None = None
    driver_version: str | None = None
    memory_mib: int | None = None
    seen_by: str = "nvidia-smi"
    pci_id: str | None = None  # "0x1DB1", as NVIDIA's driver list writes it


@dataclass
class Machine:
    os_id: str | None = None  # debian-12
    distribution: str | None = None
    release: str | None = None
    os_name: str | None = None
    arch: str | None = None  # x86_64 | aarch64
    cpu_model: str | None = None
    cpu_flags: list[str] = field(default_factory=list)  # every flag /proc/cpuinfo lists
    cores: int | None = None
    threads: int | None = None
    memory_gb: float | None = None
    gpus: list[GpuSeen] = field(default_factory=list)
    driver_version: str | None = None
    jetson_model: str | None = None
    l4t: str | None = None  # Jetson: L4T release from /etc/nv_tegra_release, e.g. 32.7.1
    frameworks: list[FrameworkSeen] = field(default_factory=list)  # found in the machine's Python environments


def parse_os_release(text: str | None) -> dict[str, str]:
    out = {}
    for line in (text or "").splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return out


def parse_cpuinfo(text: str | None) -> dict[str, Any]:
    """Model, ISA flags, physical cores, threads and the architecture (x86 lists 'flags', arm64 'Features')."""
    info: dict[str, Any] = {"model": None, "flags": [], "cores": None, "threads": 0, "arch": None}
    cores: set[tuple[str, str]] = set()
    phys = core = None
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        key, val = (s.strip() for s in line.split(":", 1))
        if key == "processor":
            info["threads"] += 1
        elif key == "model name" and not info["model"]:
            info["model"] = val
        elif key == "flags" and not info["flags"]:
            info["flags"], info["arch"] = val.split(), "x86_64"
        elif key == "Features" and not info["flags"]:
            info["flags"], info["arch"] = val.split(), "aarch64"
        elif key == "physical id":
            phys = val
        elif key == "core id":
            core = val
            cores.add((phys or "0", core))
    info["cores"] = len(cores) or None
    info["threads"] = info["threads"] or None
    return info


def parse_meminfo(text: str | None) -> float | None:
    m = re.search(r"^MemTotal:\s+(\d+)\s*kB", text or "", re.M)
    return round(int(m.group(1)) / 1024**2, 1) if m else None


def parse_nvidia_smi(text: str | None) -> list[GpuSeen]:
    gpus = []
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0]:
            continue
        cc = parts[1] if re.fullmatch(r"\d+\.\d+", parts[1]) else None
        mem = int(float(parts[3])) if re.fullmatch(r"[\d.]+", parts[3]) else None
        dev = re.fullmatch(r"0[xX]([0-9a-fA-F]{4})10[dD][eE]", parts[4]) if len(parts) > 4 else None
        gpus.append(GpuSeen(name=parts[0], compute_capability=cc, driver_version=parts[2] or None, memory_mib=mem,
                            pci_id=f"0x{dev.group(1).upper()}" if dev else None))
    return gpus


def parse_lspci(text: str | None) -> list[GpuSeen]:
    """NVIDIA display/3D controllers from `lspci -mm -nn` ("GP104 [GeForce GTX 1070] [1b81]" -> "GeForce GTX 1070",
    device 0x1B81; `lspci -mm` without -nn: the name only)."""
    gpus = []
    for line in (text or "").splitlines():
        fields = re.findall(r'"([^"]*)"', line)
        if len(fields) >= 3 and "NVIDIA" in fields[1] and re.search(r"VGA|3D|Display", fields[0]):
            dev = re.search(r"\s*\[([0-9a-f]{4})\]$", fields[2]) if "[10de]" in fields[1] else None
            device = fields[2][: dev.start()] if dev else fields[2]
            m = re.search(r"\[(.+)\]", device)
            gpus.append(GpuSeen(name=m.group(1) if m else device, seen_by="lspci",
                                pci_id=f"0x{dev.group(1).upper()}" if dev else None))
    return gpus


def parse_tegra_release(text: str | None) -> str | None:
    """'# R32 (release), REVISION: 7.1, ...' -> '32.7.1'."""
    m = re.search(r"R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def parse_python_environments(text: str | None) -> list[FrameworkSeen]:
    """The framework probe's JSON lines -> what each environment finds, one entry per (environment, module); an
    environment seen through two interpreters (python3 and python on PATH) counts once."""
    seen: list[FrameworkSeen] = []
    prefixes: set[str] = set()
    for line in (text or "").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if not isinstance(row, dict) or not isinstance(row.get("found"), dict) or row.get("prefix") in prefixes:
            continue
        prefixes.add(str(row.get("prefix")))
        for module, version in sorted(row["found"].items()):
            if module in FRAMEWORK_MODULES:
                seen.append(FrameworkSeen(module, version if isinstance(version, str) else None,
                                          str(row.get("python")), str(row.get("prefix"))))
    return seen


def read_machine(root: Path | str = "/") -> Machine:
    r = Reader(root)
    osr = parse_os_release(r.file("etc/os-release"))
    cpu = parse_cpuinfo(r.file("proc/cpuinfo"))
    m = Machine(
        distribution=osr.get("ID"),
        release=osr.get("VERSION_ID"),
        os_name=osr.get("PRETTY_NAME"),
        arch=cpu["arch"],
        cpu_model=cpu["model"],
        cpu_flags=sorted(set(cpu["flags"])),
        cores=cpu["cores"],
        threads=cpu["threads"],
        memory_gb=parse_meminfo(r.file("proc/meminfo")),
    )
    if m.distribution and m.release:
        m.os_id = f"{m.distribution}-{m.release}"
    m.gpus = parse_nvidia_smi(r.command("nvidia-smi", NVIDIA_SMI_QUERY))
    if not m.gpus:
        m.gpus = parse_lspci(r.command("lspci", ["-mm", "-nn"]))
    ver = r.file("proc/driver/nvidia/version")
    if ver:
        vm = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.[\d.]+)", ver)
        m.driver_version = vm.group(1) if vm else None
    if not m.driver_version and m.gpus:
        m.driver_version = m.gpus[0].driver_version
    m.frameworks = parse_python_environments(r.python_environments())
    m.l4t = parse_tegra_release(r.file("etc/nv_tegra_release"))
    if m.l4t:
        model = (r.file("proc/device-tree/model") or "").strip("\x00 \n") or None
        m.jetson_model = model
        if model and not m.gpus:
            m.gpus = [GpuSeen(name=_jetson_gpu_name(model), seen_by="device-tree")]
    return m


def _jetson_gpu_name(model: str) -> str:
    """'NVIDIA Jetson Nano Developer Kit' -> 'Jetson Nano'; 'NVIDIA Jetson Orin Nano Engineering Reference
    Developer Kit Super' -> 'Jetson Orin Nano'."""
    name = re.sub(r"^NVIDIA\s+", "", model)
    name = re.split(r"\s+(Developer Kit|Engineering Reference|Module)", name)[0]
    return name.strip()


def isa_flags(machine: Machine) -> list[str]:
    """The flags worth writing into a profile: instruction-set extensions (x86), every Features entry (arm64)."""
    if machine.arch == "aarch64":
        return list(machine.cpu_flags)
    return [f for f in machine.cpu_flags if ISA_FLAG.match(f)]
