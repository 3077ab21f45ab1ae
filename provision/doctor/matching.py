"""Which shipped profile fits the machine (`match_profiles()`), what would break on it (`warnings_for()`), which
frameworks a written profile gets (`choose_frameworks()`), and the whole answer (`diagnose()` -> `Diagnosis`)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from provision.compat import load_db
from provision.doctor.machine import (
    FRAMEWORK_MODULES,
    Machine,
    isa_flags,
    read_machine,
)
from provision.errors import ProvisionError
from provision.loader import load_profile
from provision.resources import share_dir


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
