"""The entry point: one profile, one machine, one Plan. Looks up the GPUs, settles count and interconnect (an
instance type fixes them), checks the target against its kind, hands the driver/CUDA/framework choice to the lane
of the target kind (installable, Colab, Jetson) and the rest to the common lane; mixed GPU models are planned for
the most constrained one and the same pinned stack is checked for the others."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from provision.compat import GPU, CompatDB, JetPack, OSRow
from provision.errors import IncompatibleError
from provision.models import (
    CPUPlan,
    FrameworkName,
    FrameworkRequest,
    GPUPlan,
    GPUSpec,
    Plan,
    Profile,
    Reason,
    TargetPlan,
)
from provision.resolver.colab import resolve_colab
from provision.resolver.common import (
    image_plan,
    index_reason,
    jupyter_plan,
    numpy_requirement,
    plan_indexes,
    python_plan,
    verify_plan,
    warn_hardware,
)
from provision.resolver.containers import ContainersChoice, plan_containers
from provision.resolver.context import Ctx, Interconnect, ManagedChoice
from provision.resolver.installable import resolve_installable
from provision.resolver.jetson import jetpack_target, resolve_jetson
from provision.resolver.links import pin_matches
from provision.versions import V


def resolve(profile: Profile, db: CompatDB, *, profile_path: str | None = None) -> Plan:
    """Resolve a profile against the database into a frozen Plan, or raise IncompatibleError."""
    specs = [profile.hardware.gpu, *profile.hardware.extra_gpus]
    gpus = []
    for spec in specs:
        g = listed_gpu(spec, db) or described_gpu(spec, db)
        if g is None:
            raise IncompatibleError(
                f"unknown GPU '{spec.name}'",
                alternatives=["a model `provision gpus` lists", "describe it: hardware.gpu.compute_capability and "
                              "hardware.gpu.memory_gb"],
                where=profile.name,
            )
        gpus.append(g)
    count, interconnect, inst_reason = _count_and_interconnect(profile, db, gpus[0])
    if len({g.model for g in gpus}) == 1:
        total = count if len(specs) == 1 else sum(s.count or 1 for s in specs)
        return _resolve_one(profile, db, gpus[0], total, interconnect, inst_reason, profile_path)
    return _resolve_mixed(profile, db, list(zip(specs, gpus, strict=True)), profile_path)


def listed_gpu(spec: GPUSpec, db: CompatDB) -> GPU | None:
    """gpus.yaml's row, or the row NVIDIA's driver list gives (by PCI device ID or the name nvidia-smi prints);
    a driver-list row takes the memory and peaks the profile gives, as the list has none."""
    row = db.resolve_gpu(spec.name)
    if row is None or row.confidence != "driver-list":
        return row
    given: dict[str, float | str] = {k: v for k, v in (("memory_gb", spec.memory_gb),
                                                        ("bandwidth_gbps", spec.bandwidth_gbps),
                                                        ("fp32_tflops", spec.fp32_tflops)) if v is not None}
    if "memory_gb" in given and row.memory_gb is None:
        given["note"] = "memory from the profile (hardware.gpu.memory_gb): the SKU's memory varies"
    return row.model_copy(update=given) if given else row


def described_gpu(spec: GPUSpec, db: CompatDB) -> GPU | None:
    """The row for a GPU the database does not list, from what the profile says of it: the architecture follows
    from the compute capability; peaks it does not give stay unknown (the verifier then reports figures without a
    percentage). None when the profile does not describe it, or describes it with a compute capability that no
    architecture has (the loader says which)."""
    arch = db.architecture_of(spec.compute_capability) if spec.compute_capability else None
    if arch is None or spec.compute_capability is None or spec.memory_gb is None:
        return None
    return GPU(
        model=spec.name, arch=arch.name, chip="unlisted", cc=spec.compute_capability, segment="geforce",
        memory_gb=spec.memory_gb, bandwidth_gbps=spec.bandwidth_gbps, fp32_tflops=spec.fp32_tflops,
        fp16_tflops=None, fp64_tflops=None, tdp_w=None, confidence="described",
        source="the profile's description (hardware.gpu)", checked="-",
    )


def _count_and_interconnect(profile: Profile, db: CompatDB, gpu: GPU) -> tuple[int, Interconnect, Reason | None]:
    """An instance type fixes the GPU model, count and interconnect; a profile may only repeat them."""
    target, spec = profile.target, profile.hardware.gpu
    inst = db.instance(target.instance_type) if target.instance_type else None
    if inst is None:
        count = spec.count or 1
        nvswitch = gpu.nvswitch_gpus is not None and count >= gpu.nvswitch_gpus
        return count, "nvswitch" if nvswitch else "pcie", None
    inst_gpu = db.gpu(inst.gpu)
    if inst_gpu is None or inst_gpu.model != gpu.model:
        raise IncompatibleError(
            f"{inst.instance_type} has {inst.gpus} x {inst.gpu}; hardware.gpu.model says {spec.name}",
            alternatives=[f"set hardware.gpu.model to {inst.gpu}", "an instance type with the GPU you mean"],
            where=profile.name,
        )
    if spec.count is not None and spec.count != inst.gpus:
        same = [i.instance_type for i in db.instances if i.gpu == inst.gpu and i.gpus == spec.count]
        raise IncompatibleError(
            f"{inst.instance_type} has {inst.gpus} x {inst.gpu}; hardware.gpu.count says {spec.count}",
            alternatives=[
                "drop hardware.gpu.count: the instance type fixes it",
                f"instance types with {spec.count} x {inst.gpu}: {', '.join(same) or 'none in the database'}",
            ],
            where=profile.name,
        )
    if profile.hardware.extra_gpus:
        raise IncompatibleError(
            f"{inst.instance_type} has one GPU model ({inst.gpu}); hardware.extra_gpus does not apply",
            alternatives=["remove hardware.extra_gpus"],
            where=profile.name,
        )
    if inst.arch != target.arch:
        raise IncompatibleError(
            f"{inst.instance_type} is {inst.arch}; target.arch says {target.arch}",
            alternatives=[f"set target.arch to {inst.arch}"],
            where=profile.name,
        )
    why = f"{inst.provider} {inst.instance_type}: {inst.gpus} x {inst.gpu}, {inst.interconnect}"
    reason = Reason(
        component="gpu-count",
        choice=f"{inst.gpus} x {inst.gpu}",
        why=why + ("" if spec.count else "; hardware.gpu.count unset, so the instance type's count"),
        source=inst.source,
    )
    return inst.gpus, inst.interconnect, reason


def _mixed_models(profile: Profile, db: CompatDB, pairs) -> list[tuple[GPU, int]]:
    """The GPU models of a mixed box with their counts, the most constrained (oldest architecture) first, each row
    narrowed to the kernel-module flavour they all share; refused when no flavour serves them all."""
    models: dict[str, tuple] = {}
    for spec, g in pairs:
        have = models.get(g.model)
        models[g.model] = (g, (have[1] if have else 0) + (spec.count or 1))
    ordered = sorted(models.values(), key=lambda gc: (V(gc[0].cc), gc[0].model))
    # One driver serves them all, so one kernel-module flavour must: Blackwell runs only on the open modules and a
    # GPU before Turing only on the proprietary ones (data/gpus.yaml, architectures).
    flavours = {g.model: set(db.kernel_modules(g)) for g, _ in ordered}
    common = set.intersection(*flavours.values())
    if not common:
        only_open = [m for m, f in flavours.items() if f == {"open"}]
        only_closed = [m for m, f in flavours.items() if f == {"proprietary"}]
        raise IncompatibleError(
            f"{', '.join(only_closed)} run{'s' if len(only_closed) == 1 else ''} only on NVIDIA's proprietary kernel "
            f"modules and {', '.join(only_open)} only on the open ones: no driver serves both in one machine",
            alternatives=["one GPU generation per machine (Turing to Hopper run on either flavour)"],
            where=profile.name,
        )
    return [(g if common == set(db.kernel_modules(g)) else g.model_copy(update={"kernel_modules": tuple(sorted(common))}),
             c) for g, c in ordered]


def _pinned_software(profile: Profile, base: Plan):
    """The profile's software section with everything `base` chose pinned: driver branch, CUDA, cuDNN, frameworks."""
    return profile.software.model_copy(
        update={
            "driver_branch": base.driver.branch,
            "cuda": base.cuda.version,
            "cudnn": base.cudnn.version,
            # a plan's frameworks are the FrameworkRequests it was resolved from: their names are FrameworkNames
            "frameworks": [
                FrameworkRequest(name=cast(FrameworkName, f.name), version=f.version) for f in base.frameworks
            ],
        }
    )


def _resolve_mixed(profile: Profile, db: CompatDB, pairs, profile_path: str | None) -> Plan:
    """Several GPU models in one box: plan the stack for the most constrained one (the oldest architecture), pin
    it, and check that the same pinned stack also resolves for each other model; refuse with the failing link."""
    if profile.target.kind not in ("baremetal",):
        raise IncompatibleError(
            f"mixed GPU models are planned for bare metal only, not target.kind '{profile.target.kind}'",
            alternatives=["remove hardware.extra_gpus"],
            where=profile.name,
        )
    ordered = _mixed_models(profile, db, pairs)
    (first, first_count), rest = ordered[0], ordered[1:]

    def variant(gpu: GPU, count: int, sw) -> Profile:
        hw = profile.hardware.model_copy(update={"gpu": profile.hardware.gpu.model_copy(update={"model": gpu.model, "count": count}), "extra_gpus": []})
        return profile.model_copy(update={"hardware": hw, "software": sw})

    base = _resolve_one(variant(first, first_count, profile.software), db, first, first_count, "pcie", None, profile_path)
    sw = _pinned_software(profile, base)
    others = []
    summary = f"R{base.driver.branch}, CUDA {base.cuda.version}" + "".join(
        f", {f.package} {f.version}" + (f"+{f.variant}" if f.variant else "") for f in base.frameworks
    )
    for g, count in rest:
        try:
            plan = _resolve_one(variant(g, count, sw), db, g, count, "pcie", None, profile_path)
        except IncompatibleError as exc:
            raise IncompatibleError(
                f"{first.model} ({first.sm}) and {g.model} ({g.sm}) in one machine cannot share a stack: the stack "
                f"{first.model} allows ({summary}) does not serve {g.model}: {exc.message}",
                alternatives=[
                    "one GPU model per machine",
                    f"drop {first.model}: the stack is then chosen for {g.model}",
                ],
                where=profile.name,
            ) from None
        diff = [
            f"{a.package} {a.variant} vs {b.variant}" for a, b in zip(base.frameworks, plan.frameworks, strict=True) if a.variant != b.variant
        ]
        if diff:
            raise IncompatibleError(
                f"{first.model} ({first.sm}) and {g.model} ({g.sm}) need different builds: {', '.join(diff)}",
                alternatives=["one GPU model per machine"],
                where=profile.name,
            )
        others.append(plan.gpu)
    reasons = base.reasons + (
        Reason(
            component="gpu",
            choice=", ".join(f"{c} x {g.model} ({g.sm})" for g, c in ordered),
            why=f"mixed GPUs: the stack is chosen for the most constrained ({first.model}, {first.sm}) and the same "
            f"pinned stack resolves for {', '.join(g.model for g, _ in rest)}",
            source=first.source,
        ),
    )
    warnings = base.warnings + (
        f"mixed GPUs: the verifier builds its kernels for {first.sm}; run it per device with CUDA_VISIBLE_DEVICES",
    )
    return base.model_copy(update={"other_gpus": tuple(others), "reasons": reasons, "warnings": warnings})


@dataclass(frozen=True)
class _Machine:
    """What one plan is resolved for, before its Python is chosen: the profile and database, the GPU model the stack
    is chosen for with its count and interconnect (and the instance type's reason for them), and what the target
    settled first: the JetPack release, the OS and its row, the containers."""

    profile: Profile
    db: CompatDB
    gpu: GPU
    count: int
    interconnect: Interconnect
    inst_reason: Reason | None
    profile_path: str | None
    jp: JetPack | None
    os_id: str
    system: OSRow | None
    containers: ContainersChoice | None = None


def _resolve_one(
    profile: Profile,
    db: CompatDB,
    gpu: GPU,
    count: int,
    interconnect: Interconnect,
    inst_reason: Reason | None,
    profile_path: str | None,
) -> Plan:
    """One GPU model on one target: settle the JetPack release, the OS row and the containers, then the Python (the
    platform's on Colab and Jetson, a host's own or a managed one elsewhere) and the plan on it."""
    target = profile.target
    jp = db.jetpack_release(target.jetpack) if target.jetpack else None
    os_id = f"{target.os.distribution}-{target.os.release}"
    if target.kind == "jetson":
        jp = jetpack_target(profile, jp, gpu, os_id)
    elif gpu.tegra:
        raise IncompatibleError(f"{gpu.model} is a Jetson module: set target.kind to jetson", where=profile.name)
    system = db.system(os_id)
    if system is None and target.kind not in ("colab", "jetson"):
        raise IncompatibleError(f"no data for {os_id}", alternatives=[s.os_id for s in db.systems], where=profile.name)
    # Before the stack: a request for containers the target cannot have is refused on its own line.
    containers = plan_containers(profile, db, os_id, jp)
    machine = _Machine(profile=profile, db=db, gpu=gpu, count=count, interconnect=interconnect, inst_reason=inst_reason,
                       profile_path=profile_path, jp=jp, os_id=os_id, system=system, containers=containers)
    if target.kind == "jetson":
        assert jp is not None  # refused above when unknown
        python = jp.python
    elif target.kind == "colab":
        python = db.colab[-1].python
    else:
        assert system is not None  # refused above for every kind but colab and jetson
        return _resolve_installable_python(machine, system)
    return _resolve_with(machine, python)


def _managed(db: CompatDB, profile: Profile, minor: str, why: str) -> ManagedChoice:
    build = db.python_build(minor, profile.target.arch)
    assert build is not None  # minors come from the table
    mirror = profile.software.python_mirror
    return ManagedChoice(build=build, why=why, mirror=mirror)


def _resolve_installable_python(machine: _Machine, system: OSRow) -> Plan:
    """A host or instance: the distribution's python3 where it fits every pin (the framework's Python range,
    Jupyter's, software.python), else the newest python-build-standalone CPython that does (a managed one)."""
    profile, db, os_id = machine.profile, machine.db, machine.os_id
    pin = profile.software.python
    arch = profile.target.arch
    minors = sorted({b.minor for b in db.python_builds if b.arch == arch}, key=V, reverse=True)
    if pin and not pin_matches(pin, system.python):
        if len(V(pin).release) > 2:
            raise IncompatibleError(
                f"software.python {pin} names a patch release: the environment is built on a minor version's "
                f"newest build (the distribution's python3, or python-build-standalone's)",
                alternatives=[f"pin {'.'.join(pin.split('.')[:2])}"],
                where=profile.name,
            )
        fitting = [m for m in minors if pin_matches(pin, m)]
        if not fitting:
            raise IncompatibleError(
                f"software.python {pin}: {os_id} has {system.python}, and python-build-standalone ships no {pin} "
                f"for {arch}; it ships {', '.join(sorted(minors, key=V)) or 'none in the database'}",
                alternatives=[f"pin one of {', '.join(sorted(minors, key=V))}", f"drop software.python ({system.python})"],
                where=profile.name,
            )
        choice = _managed(db, profile, fitting[0], f"software.python pins {pin}; {os_id} has {system.python}")
        return _resolve_with(machine, fitting[0], choice)
    try:
        return _resolve_with(machine, system.python)
    except IncompatibleError as exc:
        if pin:  # the pin is the distribution's Python: it holds, and so does the refusal
            raise
        for minor in minors:
            if minor == system.python:
                continue
            choice = _managed(db, profile, minor, f"{exc.message}; {os_id} has {system.python}")
            try:
                plan = _resolve_with(machine, minor, choice)
            except IncompatibleError:
                continue
            return plan
        raise


def _gpu_reason(ctx: Ctx) -> None:
    """The plan's first reason, what the GPU is and where that comes from, with the warnings its row's kind needs
    (a GPU the profile describes; one from NVIDIA's driver list whose memory is unknown)."""
    gpu, db = ctx.gpu, ctx.db
    peaks = ", ".join(
        f"{value:g} {unit}" if value is not None else f"{unit} unknown"
        for value, unit in ((gpu.bandwidth_gbps, "GB/s"), (gpu.fp32_tflops, "TFLOPS FP32 peak"))
    )
    if gpu.confidence == "described":
        ctx.reason(
            "gpu",
            f"{gpu.model}: {gpu.arch}, compute capability {gpu.cc} ({gpu.sm}), as the profile describes it",
            f"not in the database: the stack follows from the compute capability; {gpu.memory_gb:g} GB, {peaks}",
            arch.source if (arch := db.architecture_of(gpu.cc)) else gpu.source,
        )
        ctx.warnings.append(
            f"{gpu.model} is not in provision's GPU table: the plan rests on the compute capability the profile gives "
            f"({gpu.cc}, {gpu.arch}); `provision verify` on the machine checks it against the device"
        )
    elif gpu.confidence == "driver-list":
        memory = (f"{gpu.memory_gb:g} GB ({gpu.note})" if gpu.memory_gb is not None else
                  "memory unknown: this SKU's memory varies and no source gives it (`provision doctor` reads it "
                  "from nvidia-smi; hardware.gpu.memory_gb sets it)")
        legacy = f"; its last driver is the R{gpu.legacy_branch} legacy branch" if gpu.legacy_branch else ""
        ctx.reason(
            "gpu",
            f"{gpu.model} ({gpu.pci_id}): {gpu.arch} {gpu.chip}, compute capability {gpu.cc} ({gpu.sm})",
            f"NVIDIA's driver list names it{legacy}; chip from pci.ids, compute capability per chip; {memory}; "
            f"{peaks}",
            gpu.source,
        )
        if gpu.memory_gb is None:
            ctx.warnings.append(
                f"{gpu.model}'s memory varies by SKU and no source gives it: the plan leaves it unknown; "
                "`provision doctor` on the machine reads it, or set hardware.gpu.memory_gb"
            )
    else:
        ctx.reason(
            "gpu",
            f"{gpu.model}: {gpu.arch} {gpu.chip}, compute capability {gpu.cc} ({gpu.sm})",
            f"{gpu.memory_gb:g} GB, {peaks}",
            gpu.source,
        )


def _target_plan(machine: _Machine) -> TargetPlan:
    """The plan's target: the profile's, with the OS codename and the JetPack release settled."""
    target, jp, system = machine.profile.target, machine.jp, machine.system
    jp_system = machine.db.system(jp.os_id) if jp else None
    codename = system.codename if system else (jp_system.codename if jp_system else "")
    return TargetPlan(
        kind=target.kind,
        distribution=target.os.distribution,
        release=target.os.release,
        codename=codename,
        os_id=machine.os_id,
        arch=target.arch,
        instance_type=target.instance_type,
        jetpack=jp.jetpack if jp else None,
        l4t=jp.l4t if jp else None,
    )


def _gpu_plan(gpu: GPU, count: int, interconnect: Interconnect) -> GPUPlan:
    """The plan's GPU: the row's facts, how many and how they are linked."""
    return GPUPlan(
        model=gpu.model,
        arch=gpu.arch,
        chip=gpu.chip,
        compute_capability=gpu.cc,
        sm=gpu.sm,
        count=count,
        memory_gb=gpu.memory_gb,
        bandwidth_gbps=gpu.bandwidth_gbps,
        fp32_tflops=gpu.fp32_tflops,
        fp16_tflops=gpu.fp16_tflops,
        fp64_tflops=gpu.fp64_tflops,
        tegra=gpu.tegra,
        interconnect=interconnect,
    )


def _resolve_with(machine: _Machine, python: str, managed: ManagedChoice | None = None) -> Plan:
    """One plan on one Python: the distribution's or platform's (managed None), or a managed one."""
    profile, db, gpu, jp, containers = machine.profile, machine.db, machine.gpu, machine.jp, machine.containers
    target = profile.target
    indexes, index_plans = plan_indexes(profile, db)
    ctx = Ctx(
        profile=profile, db=db, gpu=gpu, os_id=machine.os_id, system=machine.system, python=python,
        count=machine.count, interconnect=machine.interconnect, indexes=indexes, managed=managed,
    )
    _gpu_reason(ctx)
    if machine.inst_reason is not None:
        ctx.reasons.append(machine.inst_reason)
    index_reason(ctx, index_plans)
    if gpu.confidence == "unverified":
        ctx.warnings.append(
            f"the {gpu.model} row (compute capability {gpu.cc}, memory, peaks) is unverified: compiled from "
            f"{gpu.source} without re-reading it; `provision verify` measures the real device"
        )

    if target.kind == "colab":
        lane = resolve_colab(ctx)
    elif target.kind == "jetson":
        assert jp is not None  # refused above when unknown
        lane = resolve_jetson(ctx, jp)
    else:
        lane = resolve_installable(ctx)
    driver, cuda, cudnn, fws = lane

    warn_hardware(ctx)
    python_env = python_plan(ctx, fws)
    numpy_req = numpy_requirement(ctx, fws)
    jupyter = jupyter_plan(ctx)
    verify = verify_plan(ctx, cuda, numpy_req)
    image = image_plan(ctx, cuda, cudnn, jp)
    target_plan = _target_plan(machine)
    if containers is not None:  # its reasons and warnings last: a plan without containers reads as before
        ctx.reasons += containers.reasons
        ctx.warnings += containers.warnings
    return Plan(
        profile=profile.name,
        profile_path=machine.profile_path,
        target=target_plan,
        gpu=_gpu_plan(gpu, machine.count, machine.interconnect),
        cpu=CPUPlan(model=profile.hardware.cpu.model, flags=tuple(profile.hardware.cpu.flags)),
        driver=driver,
        cuda=cuda,
        cudnn=cudnn,
        python=python_env,
        frameworks=fws,
        jupyter=jupyter,
        verify=verify,
        image=image,
        user=profile.software.user,
        reasons=tuple(ctx.reasons),
        warnings=tuple(ctx.warnings),
        indexes=index_plans,
        containers=containers.plan if containers is not None else None,
    )
