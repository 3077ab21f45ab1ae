"""A profile's data validated (`validate_data()`): against the Profile model, then against the database (GPU model,
PCI device ID or description, OS release, instance type, JetPack release), every problem at its line and column."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import ValidationError

from provision.compat import CompatDB
from provision.errors import Problem, ProfileError
from provision.loader.messages import _message
from provision.loader.yamldoc import (
    Path_,
    _Doc,
    _pos_for,
)
from provision.models import GPUSpec, Profile
from provision.plan_rules import dotted


def validate_data(data: Any, doc: _Doc, db: CompatDB | None) -> Profile:
    """Validate plain data against the Profile model, then against the database (GPU, OS, instance type)."""
    file = doc.file
    if not isinstance(data, dict):
        raise ProfileError(
            [Problem("a profile is a mapping of keys (name, hardware, target, ...)", file=file, line=1, column=1)]
        )
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            message, hint = _message(err, doc)
            # An unknown key is the key's fault, not its value's: point at the key.
            at = doc.keys.get(loc) if err["type"] == "extra_forbidden" else None
            line, col = at or _pos_for(doc, loc) or (None, None)
            problems.append(Problem(message, file=file, line=line, column=col, field=dotted(loc) or None, hint=hint))
        raise ProfileError(problems) from None
    if db is not None:
        _check_against_db(profile, doc, db)
    return profile


def _check_against_db(profile: Profile, doc: _Doc, db: CompatDB) -> None:
    problems: list[Problem] = []

    def add(path: Path_, message: str, hint: str | None = None) -> None:
        line, col = _pos_for(doc, path) or (None, None)
        problems.append(Problem(message, file=doc.file, line=line, column=col, field=dotted(path), hint=hint))

    specs: list[tuple[Path_, GPUSpec]] = [(("hardware", "gpu"), profile.hardware.gpu)]
    specs += [(("hardware", "extra_gpus", i), s) for i, s in enumerate(profile.hardware.extra_gpus)]
    for at, spec in specs:
        _check_gpu(spec, at, db, add)
    os_id = f"{profile.target.os.distribution}-{profile.target.os.release}"
    if profile.target.kind not in ("colab", "jetson") and db.system(os_id) is None:
        known = ", ".join(s.os_id for s in db.systems)
        add(("target", "os"), f"no data for {os_id}", f"supported: {known}")
    if profile.target.instance_type and db.instance(profile.target.instance_type) is None:
        names = [i.instance_type for i in db.instances]
        close = difflib.get_close_matches(profile.target.instance_type, names, n=1, cutoff=0.5)
        add(
            ("target", "instance_type"),
            f"unknown instance type '{profile.target.instance_type}'",
            f"did you mean '{close[0]}'?" if close else "known: " + ", ".join(names),
        )
    if profile.target.jetpack and db.jetpack_release(profile.target.jetpack) is None:
        known = ", ".join(j.jetpack for j in db.jetpack)
        add(("target", "jetpack"), f"unknown JetPack release '{profile.target.jetpack}'", f"known: {known}")
    if problems:
        raise ProfileError(problems)


def _check_gpu(spec: GPUSpec, at: Path_, db: CompatDB, add) -> None:
    """A listed GPU is the database's row (a description given beside it must agree); one of NVIDIA's driver list
    that gpus.yaml does not list is planned from the list's chip and compute capability; an unlisted one from its
    compute capability and memory, which the profile must then give."""
    if spec.pci_id is not None:
        dev = db.device(spec.pci_id)
        if dev is None:
            lists = ", ".join(str(lst["driver"]) for lst in db.devices().lists) or "none"
            add((*at, "pci_id"), f"no GPU with PCI device ID {spec.pci_id} in NVIDIA's driver list ({lists})",
                "check it with `lspci -nn -d 10de:`, or give hardware.gpu.model and compute_capability")
            return
        by_name = db.resolve_gpu(spec.model) if spec.model is not None else None
        by_id = db.resolve_gpu(spec.pci_id)
        id_names = {" ".join(d.name.lower().split()) for d in db.devices().by_id.get(int(spec.pci_id, 16), ())}
        if (spec.model is not None and by_name is not None and (by_id is None or by_name.model != by_id.model)
                and " ".join(spec.model.lower().split()) not in id_names):
            add((*at, "model"), f"'{spec.model}' is not the GPU with PCI device ID {spec.pci_id} ({dev.name})",
                "remove one of them, or make them agree")
            return
    name = spec.name
    row = db.resolve_gpu(name)
    if row is None and not spec.described():
        field = "pci_id" if spec.model is None else "model"
        if _legacy_problem(db, name, at, field, add):
            return
        close = difflib.get_close_matches(name, db.gpu_names(), n=1, cutoff=0.5)
        describe = (f"if `provision gpus --all` does not list yours, describe it: {dotted(at)}.compute_capability "
                    "(`nvidia-smi --query-gpu=compute_cap --format=csv,noheader`) and "
                    f"{dotted(at)}.memory_gb")
        add((*at, field), f"unknown GPU '{name}'",
            (f"did you mean '{close[0]}'? " if close else "") + describe)
        return
    if row is None:
        cc = spec.compute_capability
        assert cc is not None  # described() above
        if db.architecture_of(cc) is None:
            known = ", ".join(f"{a.name} {'/'.join(a.cc)}" for a in db.architectures)
            add((*at, "compute_capability"), f"compute capability {cc} is not one of an NVIDIA architecture's",
                f"check it with `nvidia-smi --query-gpu=compute_cap --format=csv,noheader`; known: {known}")
        if spec.memory_gb is None:
            add((*at, "memory_gb"), f"'{name}' is not in the database, so its memory is needed",
                f"set {dotted(at)}.memory_gb: `nvidia-smi --query-gpu=memory.total --format=csv` prints it")
        return
    if row.confidence == "driver-list":  # the list gives no memory or peaks: the profile's figures are the row's
        if spec.compute_capability is not None and spec.compute_capability != row.cc:
            add((*at, "compute_capability"), f"{row.model} ({row.pci_id}, {row.chip}) has compute capability "
                f"{row.cc} ({row.source}), the profile says {spec.compute_capability}",
                f"remove {dotted(at)}.compute_capability")
        return
    given = {"compute_capability": (spec.compute_capability, row.cc), "memory_gb": (spec.memory_gb, row.memory_gb),
             "bandwidth_gbps": (spec.bandwidth_gbps, row.bandwidth_gbps),
             "fp32_tflops": (spec.fp32_tflops, row.fp32_tflops)}
    for key, (mine, theirs) in given.items():
        if mine is not None and mine != theirs:
            add((*at, key), f"{row.model} has {key} {theirs} in the database ({row.source}), the profile says {mine}",
                f"remove {dotted(at)}.{key}: a listed GPU's figures come from the database; or name the model "
                "you have")


def _legacy_problem(db: CompatDB, name: str, at: Path_, field: str, add) -> bool:
    """Say why a GPU NVIDIA's driver list names cannot be planned: it predates CUDA, or NVIDIA reused the name for
    chips of different compute capability. False where the list does not name it."""
    devs = db.devices().chips_named(name) if field == "model" else tuple(d for d in [db.device(name)] if d)
    if not devs:
        return False
    if len({d.cc for d in devs}) > 1:
        chips = "; ".join(sorted({f"{d.chip} (cc {d.cc or 'none'}) {d.pci_id}" for d in devs}))
        add((*at, field), f"NVIDIA's driver list names several chips '{name}': {chips}",
            f"give {dotted(at)}.pci_id: `lspci -nn -d 10de:` prints it after '10de:' (or `provision doctor`)")
        return True
    dev = devs[0]
    if dev.cc_note:  # a CUDA-era chip whose compute capability NVIDIA does not publish: the user can give it
        add((*at, field), f"{dev.name} ({dev.pci_id}, {dev.chip}, {dev.arch}) has no known compute capability: "
            f"{dev.cc_note} ({dev.chip_source})",
            f"describe it: {dotted(at)}.compute_capability (`nvidia-smi --query-gpu=compute_cap --format=csv,noheader`) "
            f"and {dotted(at)}.memory_gb")
        return True
    last = f"its last driver is the {dev.legacy_branch}.xx legacy branch" if dev.legacy_branch else ""
    add((*at, field), f"{dev.name} ({dev.pci_id}, {dev.chip}, {dev.arch or 'unknown architecture'}) predates CUDA"
        + (f"; {last}" if last else ""),
        "provision plans CUDA stacks; no CUDA runs on this GPU")
    return True
