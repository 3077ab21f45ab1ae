"""`provision doctor`: read the local machine, name the shipped profile that fits it, warn about what would break,
and write a profile for it.

Everything is read below a root directory (`/` on a real machine) so tests can point it at fixture trees
(tests/fixtures/doctor/<machine>/): files are read from <root>/proc/cpuinfo, <root>/etc/os-release, ...; the
output of a command is read from <root>/commands/<name>.txt instead of running it when the root is not `/`.
That is parsing, not a stand-in for a program: on `/` the real nvidia-smi and lspci run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import asdict, dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML

from provision.compat import load_db
from provision.errors import ProvisionError, UsageError, printable
from provision.loader import load_profile
from provision.models import Profile
from provision.resources import share_dir

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


# ---------------------------------------------------------------------------------------------------------------
# matching against the shipped profiles
# ---------------------------------------------------------------------------------------------------------------


def isa_flags(machine: Machine) -> list[str]:
    """The flags worth writing into a profile: instruction-set extensions (x86), every Features entry (arm64)."""
    if machine.arch == "aarch64":
        return list(machine.cpu_flags)
    return [f for f in machine.cpu_flags if ISA_FLAG.match(f)]


def _norm_gpu(name: str) -> str:
    return " ".join(re.sub(r"\b(nvidia|geforce|tesla)\b", " ", name.lower()).split())


def _canonical_gpu(name: str, db: Any) -> str:
    """The compat database's model name for a GPU name, trying shorter prefixes of a CUDA/nvidia-smi name."""
    row = (db.resolve_gpu(name) or db.gpu_by_device_name(name)) if db is not None else None
    return row.model if row is not None else _norm_gpu(name)


def _load_db() -> Any:
    try:
        return load_db()
    except Exception:  # no database in this installation, or broken: match on names alone
        return None


def shipped_profiles(directory: Path | None = None) -> list[tuple[Path, Any]]:
    """(path, Profile) of every profile YAML shipped with provision; unreadable ones are left out."""
    try:
        directory = directory or share_dir("profiles")
    except FileNotFoundError:
        return []
    found = []
    for path in sorted(directory.glob("*.yaml")):
        prof = _load_profile(path)
        if prof is not None:
            found.append((path, prof))
    return found


def _load_profile(path: Path) -> Any:
    try:
        return load_profile(path)
    except ProvisionError:  # a profile that does not load is reported by `provision plan`, not by doctor
        return None


def default_frameworks(profiles: list[tuple[Path, Any]]) -> list[str]:
    """The framework the shipped profiles plan most often (pytorch), for a machine where none is found."""
    counts = Counter(f.name for _, prof in profiles for f in prof.software.frameworks)
    return [counts.most_common(1)[0][0]] if counts else []


def choose_frameworks(machine: Machine, profiles: list[tuple[Path, Any]] | None = None) -> tuple[list[str], str]:
    """(framework names for software.frameworks, why): those the machine's Python environments find, or the shipped
    profiles' default where they find none that provision plans."""
    found = [f for f in machine.frameworks if FRAMEWORK_MODULES.get(f.module)]
    other = [f for f in machine.frameworks if not FRAMEWORK_MODULES.get(f.module)]
    names = sorted({str(FRAMEWORK_MODULES[f.module]) for f in found})
    what = ", ".join(f"{f.module} {f.version or '(version unknown)'} in {f.python}" for f in found)
    if names:
        why = f"found {what}"
    else:
        names = default_frameworks(shipped_profiles() if profiles is None else profiles)
        why = ("the shipped profiles' default: no torch or tensorflow found in this machine's Python environments"
               if names else "none: no framework found, and no shipped profile names one")
    if other:
        why += "; also found " + ", ".join(f"{f.module} {f.version or ''} in {f.python}".replace("  ", " ")
                                           for f in other) + ", which provision does not plan"
    return names, why


@dataclass
class Match:
    profile: str
    path: str
    gpu: bool
    arch: bool
    os: bool
    score: int


@dataclass
class Diagnosis:
    machine: Machine
    matches: list[Match]
    warnings: list[str]
    notes: list[str]
    frameworks: list[str] = field(default_factory=list)  # what `--write` puts in software.frameworks
    frameworks_why: str = ""

    @property
    def best(self) -> Match | None:
        return self.matches[0] if self.matches and self.matches[0].gpu else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "machine": asdict(self.machine),
            "matches": [asdict(m) for m in self.matches],
            "best": asdict(self.best) if self.best else None,
            "warnings": self.warnings,
            "notes": self.notes,
            "frameworks": {"write": self.frameworks, "why": self.frameworks_why},
        }

    def text_lines(self) -> list[str]:
        m = self.machine
        lines = [
            f"os:      {m.os_name or 'unknown'} ({m.os_id or '?'}, {m.arch or '?'})",
            f"cpu:     {m.cpu_model or 'unknown'}, {m.cores or '?'} cores / {m.threads or '?'} threads, "
            f"ISA: {' '.join(isa_flags(m)) or 'none found'}",
            f"memory:  {m.memory_gb if m.memory_gb is not None else '?'} GB",
        ]
        if m.gpus:
            for i, g in enumerate(m.gpus):
                # The name exactly as nvidia-smi prints it (what a profile's hardware.gpu.model may hold), and the
                # PCI device ID beside it (hardware.gpu.pci_id)
                pci = f" [{g.pci_id}]" if g.pci_id else ""
                cc = f", compute capability {g.compute_capability}" if g.compute_capability else ""
                mem = f", {g.memory_mib} MiB" if g.memory_mib else ""
                lines.append(f"gpu {i}:   {g.name}{pci}{cc}{mem} (seen by {g.seen_by})")
        else:
            lines.append("gpu:     no NVIDIA GPU found (nvidia-smi absent or silent, lspci shows none)")
        lines.append(f"driver:  {m.driver_version or 'none loaded'}")
        if m.l4t:
            lines.append(f"jetson:  {m.jetson_model or 'unknown module'}, L4T {m.l4t}")
        if m.gpus:
            names = ", ".join(self.frameworks) or "none"
            lines.append(f"frameworks: {names} ({self.frameworks_why}); --write writes software.frameworks: {names}")
        best = self.best
        if best:
            lines.append(f"profile: {best.profile} matches ({best.path})")
        else:
            lines.append(f"profile: {self.next_step()}")
        lines += [f"note:    {n}" for n in self.notes]
        lines += [f"warning: {w}" for w in self.warnings]
        return lines


    def next_step(self) -> str:
        """What to do when no shipped profile matches: only what `doctor --write` can do here is offered."""
        m = self.machine
        by_hand = ("write a profile by hand for the machine that has the GPU: copy the closest of profiles/*.yaml, "
                   "change hardware: and target:, check it with `provision validate FILE` (`provision schema` "
                   "lists every field)")
        if not m.gpus:
            return f"no NVIDIA GPU here, so doctor cannot write a profile for this machine; {by_hand}"
        if m.distribution not in ("debian", "ubuntu") or not m.release:
            return (f"no shipped profile matches, and profiles support Debian and Ubuntu only (this is "
                    f"{m.os_name or 'an unknown OS'}); {by_hand}")
        return "no shipped profile matches this machine; write one with --write PATH"


def match_profiles(machine: Machine, profiles: list[tuple[Path, Any]], db: Any = None) -> list[Match]:
    gpu_names = {_canonical_gpu(g.name, db) for g in machine.gpus}
    matches = []
    for path, prof in profiles:
        gpu = _canonical_gpu(prof.hardware.gpu.name, db) in gpu_names
        arch = machine.arch == prof.target.arch
        os_ = machine.os_id == f"{prof.target.os.distribution}-{prof.target.os.release}"
        matches.append(
            Match(profile=prof.name, path=str(path), gpu=gpu, arch=arch, os=os_, score=4 * gpu + 2 * arch + os_)
        )
    return sorted(matches, key=lambda m: (-m.score, m.profile))


def _tf_required_flags(db: Any) -> set[str]:
    if db is None:
        return {"avx"}  # every TensorFlow wheel on PyPI since 1.6 is built with AVX
    flags: set[str] = set()
    for row in getattr(db, "tensorflow", ()):
        flags |= set(row.cpu_flags)
    return flags or {"avx"}


def warnings_for(machine: Machine, profile: Any, db: Any = None) -> list[str]:
    """What in `profile` would break on `machine`."""
    out = []
    have = set(machine.cpu_flags)
    if any(f.name == "tensorflow" for f in profile.software.frameworks):
        missing = sorted(_tf_required_flags(db) - have) if machine.arch == "x86_64" else []
        if missing:
            out.append(
                f"profile {profile.name} requests TensorFlow, but this CPU ({machine.cpu_model}) lacks "
                f"{', '.join(missing)}: TensorFlow wheels die with 'Illegal instruction'; drop tensorflow "
                "or use PyTorch"
            )
    claimed = set(profile.hardware.cpu.flags)
    if machine.cpu_flags and claimed - have:
        out.append(
            f"profile {profile.name} says the CPU has {', '.join(sorted(claimed - have))}, this one does not: "
            "fix hardware.cpu.flags (provision doctor --write gives the real list)"
        )
    if machine.memory_gb and machine.memory_gb < 0.9 * profile.hardware.memory_gb:
        out.append(
            f"profile {profile.name} says {profile.hardware.memory_gb:g} GB of memory, this machine has "
            f"{machine.memory_gb:g} GB"
        )
    want_os = f"{profile.target.os.distribution}-{profile.target.os.release}"
    if machine.os_id and machine.os_id != want_os:
        out.append(
            f"profile {profile.name} targets {want_os}, this machine runs {machine.os_id}: plan with "
            f"--os {machine.os_id} or reinstall"
        )
    if machine.arch and machine.arch != profile.target.arch:
        out.append(f"profile {profile.name} is for {profile.target.arch}, this machine is {machine.arch}")
    return out


def diagnose(root: Path | str = "/", profiles_dir: Path | None = None) -> Diagnosis:
    machine = read_machine(root)
    db = _load_db()
    profiles = shipped_profiles(profiles_dir)
    matches = match_profiles(machine, profiles, db)
    warnings: list[str] = []
    notes: list[str] = []
    if not machine.gpus:
        notes.append("no GPU here: `provision verify` can only run with --compile-only on this machine")
    elif machine.gpus[0].seen_by == "lspci":
        notes.append(
            "the GPU is on the PCI bus but no NVIDIA driver answers (nvidia-smi missing or failing): "
            "`provision apply` installs the planned driver"
        )
    names, why = choose_frameworks(machine, profiles)
    diag = Diagnosis(machine=machine, matches=matches, warnings=warnings, notes=notes, frameworks=names,
                     frameworks_why=why)
    if diag.best is not None:
        prof = next(p for path, p in profiles if str(path) == diag.best.path)
        warnings.extend(warnings_for(machine, prof, db))
    return diag


# ---------------------------------------------------------------------------------------------------------------
# writing a profile
# ---------------------------------------------------------------------------------------------------------------


def _label(text: str) -> str:
    """Fit a model name to the profile's Label alphabet ('Intel(R) Core(TM) i7 CPU @ 3.2GHz' -> 'Intel Core i7')."""
    text = re.sub(r"\((R|TM|tm|r)\)", "", text)
    text = re.sub(r"\s*@.*$", "", text)
    text = re.sub(r"\b(CPU|Processor)\b", "", text)
    text = re.sub(r"[^A-Za-z0-9 ._()+/-]", " ", text)
    text = " ".join(text.split())[:80]
    return text or "unknown"


def profile_dict(machine: Machine, name: str) -> dict[str, Any]:
    """A profile (as the YAML's data) describing `machine`. Raises UsageError for what a profile cannot hold."""
    if not machine.gpus:
        raise UsageError(
            "doctor --write: no NVIDIA GPU found on this machine, and a profile needs hardware.gpu.model; "
            "write the profile by hand for the machine that has the GPU"
        )
    if machine.distribution not in ("debian", "ubuntu") or not machine.release:
        raise UsageError(
            f"doctor --write: this machine runs {machine.os_name or 'an unknown OS'}; profiles support "
            "Debian and Ubuntu (target.os)"
        )
    db = _load_db()
    gpu_name = machine.gpus[0].name
    canonical = _canonical_gpu(gpu_name, db) if db is not None else _label(re.sub(r"^NVIDIA\s+", "", gpu_name))
    names = [g.name for g in machine.gpus]
    target: dict[str, Any] = {
        "kind": "jetson" if machine.l4t else "baremetal",
        "os": {"distribution": machine.distribution, "release": machine.release},
        "arch": machine.arch or "x86_64",
    }
    if machine.l4t:
        row = next((j for j in getattr(db, "jetpack", ()) if _same_release(j.l4t, machine.l4t)), None)
        if row is None:
            raise UsageError(
                f"doctor --write: L4T {machine.l4t} is not in the JetPack table; write target.jetpack by "
                "hand, starting from profiles/jetson-*.yaml"
            )
        target["jetpack"] = row.jetpack
    cpu: dict[str, Any] = {"model": _label(machine.cpu_model or "unknown"), "flags": isa_flags(machine)}
    if machine.cores:
        cpu["cores"] = machine.cores
    if machine.threads:
        cpu["threads"] = machine.threads
    gpu: dict[str, Any] = {"model": _label(canonical), "count": names.count(gpu_name)}
    seen = machine.gpus[0]
    listed = None
    if db is not None and db.gpu_by_device_name(gpu_name) is None:
        listed = db.resolve_gpu(seen.pci_id or gpu_name)
    if listed is not None and listed.confidence == "driver-list":
        # In NVIDIA's driver list, not in gpus.yaml: the name as nvidia-smi prints it and its PCI device ID; the
        # memory the driver reports where the list's name does not say it (the SKU's memory varies)
        gpu["model"] = _label(gpu_name)
        if seen.pci_id:
            gpu["pci_id"] = seen.pci_id
        if seen.compute_capability:
            gpu["compute_capability"] = seen.compute_capability
        if listed.memory_gb is None and seen.memory_mib:
            gpu["memory_gb"] = round(seen.memory_mib / 1024, 1)
    elif db is not None and listed is None and db.gpu_by_device_name(gpu_name) is None and seen.compute_capability \
            and seen.memory_mib:
        # Not in the table (a laptop part): described by what the driver reports, which is what the plan needs.
        gpu["model"] = _label(re.sub(r"^NVIDIA\s+", "", gpu_name))  # the driver's name, as written
        gpu["compute_capability"] = seen.compute_capability
        gpu["memory_gb"] = round(seen.memory_mib / 1024, 1)
    return {
        "name": re.sub(r"[^A-Za-z0-9._-]", "-", name)[:63].strip("-") or "this-machine",
        "description": f"Written by provision doctor from {machine.os_name or 'this machine'} with {gpu_name}",
        "hardware": {
            "gpu": gpu,
            "cpu": cpu,
            "memory_gb": machine.memory_gb or 1,
        },
        "target": target,
    }


def _same_release(a: str, b: str) -> bool:
    """'32.7.1' == '32.7.1'; '36.4' == '36.4.0'."""
    pa, pb = [int(x) for x in a.split(".")], [int(x) for x in b.split(".")]
    n = max(len(pa), len(pb))
    return pa + [0] * (n - len(pa)) == pb + [0] * (n - len(pb))


def write_profile(machine: Machine, path: Path, name: str | None = None,
                  profiles: list[tuple[Path, Any]] | None = None) -> Path:
    """Write a profile YAML for `machine`, validated by the same model the loader uses. Its software.frameworks are
    the frameworks the machine's Python environments find, or the shipped profiles' default (`profiles`, read from
    the shipped directory when None); a comment in the file says which and why."""
    data = profile_dict(machine, name or path.stem)
    names, why = choose_frameworks(machine, profiles)
    data["software"] = {"frameworks": [{"name": n} for n in names]}
    try:
        Profile.model_validate(data)
    except ValidationError as exc:
        raise UsageError(
            f"doctor --write: the profile read from this machine is not valid: {exc.errors()[0]['msg']}"
        ) from None
    yaml = YAML()
    yaml.default_flow_style = False
    buf = StringIO()
    buf.write("# Written by `provision doctor --write`; check it, then `provision plan` it.\n")
    buf.write(f"# software.frameworks: {', '.join(names) or 'none'} ({printable(why)}).\n")
    yaml.dump(data, buf)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(buf.getvalue())
    return path
