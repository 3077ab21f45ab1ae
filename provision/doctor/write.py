"""A profile for the machine (`profile_dict()`), written to a file with a comment on where its frameworks came
from (`write_profile()`)."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML

from provision.doctor.machine import (
    Machine,
    isa_flags,
)
from provision.doctor.matching import (
    _canonical_gpu,
    _load_db,
    choose_frameworks,
)
from provision.errors import UsageError, printable
from provision.models import Profile


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
