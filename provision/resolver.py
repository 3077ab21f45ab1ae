"""resolve(profile, db) -> Plan: the newest stack in which every link holds, with a reason for every choice.

Pure: no I/O, no mutation of its inputs, versions compared with packaging.version. The links checked:
  * the driver branch drives the GPU (compute capability within the branch's range) and the OS packages it;
  * the driver runs the CUDA version, natively (branch CUDA >= planned CUDA) or through minor-version
    compatibility (driver >= the major's floor);
  * the CUDA toolkit can build for the GPU's compute capability;
  * cuDNN supports both the CUDA version and the compute capability;
  * each framework build contains kernels for the compute capability (SASS of the same major and a minor no
    newer, or PTX it can JIT), its bundled cuDNN supports the GPU, its Python range holds the OS's Python, and the
    CPU has the instructions its wheels use;
  * the OS (or PyPI) offers the packages.
Among the stacks that hold, the policy in data/policy.yaml decides (frameworks first, then CUDA, cuDNN, driver).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from provision.compat import GPU, Branch, CompatDB, OSRow, TFRow, TorchRow
from provision.errors import IncompatibleError
from provision.models import (
    CPUPlan,
    CudaPlan,
    CudnnPlan,
    DriverPlan,
    FrameworkPlan,
    FrameworkRequest,
    GPUPlan,
    ImagePlan,
    JupyterPlan,
    Plan,
    Profile,
    PythonPlan,
    Reason,
    TargetPlan,
    VerifyPlan,
)
from provision.versions import V, cc_tuple, major, sm_int

# ---------------------------------------------------------------------------------------------------------------
# Small predicates (each one link of the chain)
# ---------------------------------------------------------------------------------------------------------------


def branch_drives(branch: Branch, gpu: GPU) -> bool:
    return V(branch.min_cc) <= V(gpu.cc) <= V(branch.max_cc)


def toolkit_builds(db: CompatDB, cuda: str, gpu: GPU) -> bool:
    tk = db.toolkit(cuda)
    return tk is not None and sm_int(gpu.cc) in tk.sm


def driver_runs(db: CompatDB, branch: Branch, cuda: str) -> str | None:
    """'native', 'mvc' (minor-version compatibility) or None when the branch cannot run this CUDA."""
    if V(cuda) <= V(branch.cuda):
        return "native"
    floor = db.mvc_floor(major(cuda))
    if floor is not None and major(cuda) == major(branch.cuda) and V(branch.branch) >= V(floor.min_driver):
        return "mvc"
    return None


def has_kernels(arch: tuple[str, ...], ptx: str | None, gpu: GPU) -> str | None:
    """How a build runs on this GPU: 'sass <cc>' or 'ptx <cc>', or None when it has nothing for it.

    SASS built for X.y runs on X.z with z >= y on discrete GPUs; not guaranteed on Tegra, where only the exact
    architecture is trusted. PTX for an older architecture can be JIT-compiled by the driver for a newer one.
    """
    g_major, g_minor = cc_tuple(gpu.cc)
    for a in sorted(arch, key=V, reverse=True):
        a_major, a_minor = cc_tuple(a)
        if a_major == g_major and (a_minor == g_minor or (not gpu.tegra and a_minor <= g_minor)):
            return f"sass {a}"
    if ptx and V(ptx) <= V(gpu.cc):
        return f"ptx {ptx}"
    return None


def cudnn_supports(db: CompatDB, cudnn: str, cuda: str | None, gpu: GPU) -> bool:
    row = db.cudnn_release(cudnn)
    if row is None:
        return False
    if not V(row.min_cc) <= V(gpu.cc) <= V(row.max_cc):
        return False
    return cuda is None or V(row.cuda_min) <= V(cuda) <= V(row.cuda_max)


def _pin_matches(pin: str | None, version: str) -> bool:
    """A pin '2.0' matches 2.0.1; '12' matches 12.6; '12.6' matches 12.6. Compared component-wise."""
    if pin is None:
        return True
    want = V(pin).release
    have = V(version).release
    return have[: len(want)] == want


def _in_range(value: str, low: str, high: str) -> bool:
    return V(low) <= V(value) <= V(high)


# ---------------------------------------------------------------------------------------------------------------
# Context and candidates
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class _Ctx:
    profile: Profile
    db: CompatDB
    gpu: GPU
    os_id: str
    system: OSRow | None
    python: str
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def reason(self, component: str, choice: str, why: str, source: str) -> None:
        self.reasons.append(Reason(component=component, choice=choice, why=why, source=source))

    @property
    def where(self) -> str:
        return self.profile.name


@dataclass(frozen=True)
class _Fw:
    """One framework build candidate (PyTorch or TensorFlow row), normalised."""

    name: str
    package: str
    version: str
    variant: str | None
    cuda: str
    cudnn: str | None
    arch: tuple[str, ...]
    ptx: str | None
    requirement: str
    index_url: str | None
    numpy_major: int
    source: str
    row: TorchRow | TFRow


def _torch_candidates(ctx: _Ctx) -> list[_Fw]:
    out = []
    for r in ctx.db.torch:
        if r.pypi_default:
            req, index = f"torch=={r.version}", None
        else:
            req, index = f"torch=={r.version}+{r.variant}", ctx.db.torch_index_url.format(variant=r.variant)
        out.append(
            _Fw(
                "pytorch",
                "torch",
                r.version,
                r.variant,
                r.cuda,
                r.cudnn,
                r.arch,
                r.ptx,
                req,
                index,
                r.numpy_major,
                r.source,
                r,
            )
        )
    return out


def _tf_candidates(ctx: _Ctx) -> list[_Fw]:
    return [
        _Fw("tensorflow", "tensorflow", r.version, None, r.cuda, r.cudnn, (), None, r.requirement, None, 2, r.source, r)
        for r in ctx.db.tensorflow
    ]


def _fw_problem(ctx: _Ctx, fw: _Fw, req: FrameworkRequest) -> str | None:
    """Why this build cannot serve this machine, or None when it can (ignoring the rest of the stack)."""
    gpu, cpu = ctx.gpu, ctx.profile.hardware.cpu
    if not _pin_matches(req.version, fw.version):
        return f"{fw.name} {fw.version} is not the pinned {req.version}"
    row = fw.row
    if not _in_range(ctx.python, row.python_min, row.python_max):
        return f"{fw.name} {fw.version} supports Python {row.python_min}-{row.python_max}, not {ctx.python}"
    if isinstance(row, TFRow):
        missing = [f for f in row.cpu_flags if f not in cpu.flags]
        if missing:
            return (
                f"TensorFlow {fw.version} wheels use {'/'.join(m.upper() for m in missing)}, which the "
                f"{cpu.model} lacks (they die with SIGILL)"
            )
        if V(gpu.cc) < V(row.min_cc):
            return f"TensorFlow {fw.version} needs compute capability {row.min_cc}+, {gpu.model} has {gpu.cc}"
    else:
        if has_kernels(fw.arch, fw.ptx, gpu) is None:
            return (
                f"torch {fw.version}+{fw.variant} has kernels for {';'.join(fw.arch)}"
                f"{' (+PTX ' + fw.ptx + ')' if fw.ptx else ''}, none that runs on {gpu.sm}"
            )
    if fw.cudnn and not cudnn_supports(ctx.db, fw.cudnn, None, gpu):
        row_c = ctx.db.cudnn_release(fw.cudnn)
        span = f"{row_c.min_cc}-{row_c.max_cc}" if row_c else "unknown"
        return f"{fw.name} {fw.version} {fw.variant or ''} brings cuDNN {fw.cudnn}, which supports cc {span}, not {gpu.cc}".replace(
            "  ", " "
        )
    if not toolkit_builds(ctx.db, fw.cuda, gpu):
        return f"its CUDA {fw.cuda} cannot build for {gpu.sm}"
    return None


def _driver_candidates(ctx: _Ctx) -> list[tuple[Branch, object]]:
    """(branch row, package row) pairs the OS offers for this GPU, newest first."""
    db, gpu = ctx.db, ctx.gpu
    out = []
    for pkg in db.drivers:
        if pkg.os_id != ctx.os_id or (pkg.segment not in (None, gpu.segment)):
            continue
        branch = db.branch(pkg.branch)
        if branch is None or not branch_drives(branch, gpu):
            continue
        out.append((branch, pkg))
    out.sort(key=lambda bp: V(bp[0].branch), reverse=True)
    return out


def _cuda_offered(ctx: _Ctx) -> dict[str, list[str]]:
    """CUDA version -> sources that offer it for this OS/arch, in policy order."""
    db, policy = ctx.db, ctx.db.policy
    assert policy is not None and ctx.system is not None
    offered: dict[str, list[str]] = {}
    for source in policy.cuda_sources.get(ctx.system.distribution, ()):
        versions: list[str] = []
        if source == ctx.system.distribution and source == "debian":
            versions = [c.cuda for c in db.cuda_pkgs if c.os_id == ctx.os_id]
        elif source == "nvidia-repo" and db.nvidia_repo and ctx.profile.target.arch == "x86_64":
            versions = [v for r in db.nvidia_repo.repos if r.slug == ctx.system.nvidia_repo for v in r.cuda]
        elif source == "pypi":
            versions = [p.cuda for p in db.pypi_cuda]
        for v in versions:
            offered.setdefault(v, [])
            if source not in offered[v]:
                offered[v].append(source)
    return offered


def _cudnn_options(ctx: _Ctx, cuda: str) -> list[str]:
    db = ctx.db
    versions = {p.cudnn for p in db.pypi_cudnn if p.cuda_major == major(cuda)}
    return sorted((v for v in versions if cudnn_supports(db, v, cuda, ctx.gpu)), key=V, reverse=True)


# ---------------------------------------------------------------------------------------------------------------
# Installable targets: bare metal and cloud
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stack:
    branch: Branch
    driver_pkg: object
    cuda: str
    compat: str  # native | mvc
    fws: tuple[_Fw, ...]
    cudnn: str | None


def _refuse_no_driver(ctx: _Ctx) -> IncompatibleError:
    db, gpu = ctx.db, ctx.gpu
    pin = ctx.profile.software.driver_branch
    driving = [b for b in db.branches if branch_drives(b, gpu)]
    spans = ", ".join(f"R{b.branch}" for b in driving) or "none in the database"
    offered = sorted({p.os_id for p in db.drivers if p.branch in {b.branch for b in driving}})
    if pin:
        row = db.branch(pin)
        if row is not None and not branch_drives(row, gpu):
            return IncompatibleError(
                f"driver branch {pin} cannot drive {gpu.model} ({gpu.arch}, compute capability {gpu.cc}): "
                f"R{pin} covers {row.min_cc}-{row.max_cc}",
                alternatives=[f"branches that drive it: {spans}", "drop software.driver_branch"],
                where=ctx.where,
            )
        return IncompatibleError(
            f"{ctx.os_id} does not offer driver branch {pin} for {gpu.model}",
            alternatives=[
                f"branches that drive it: {spans}",
                f"systems that package them: {', '.join(offered) or 'none'}",
            ],
            where=ctx.where,
        )
    return IncompatibleError(
        f"{ctx.os_id} offers no driver branch that drives {gpu.model} ({gpu.arch}, compute capability {gpu.cc}); "
        f"it needs one of {spans}",
        alternatives=[f"an OS that packages one: {', '.join(offered) or 'none known'}"],
        where=ctx.where,
    )


def _check_cuda_pin(ctx: _Ctx, offered: dict[str, list[str]]) -> None:
    pin, db, gpu = ctx.profile.software.cuda, ctx.db, ctx.gpu
    if pin is None:
        return
    matching = [t for t in db.toolkits if _pin_matches(pin, t.version)]
    if not matching:
        raise IncompatibleError(
            f"CUDA {pin} is not a CUDA release in the database",
            alternatives=[", ".join(t.version for t in db.toolkits)],
            where=ctx.where,
        )
    if not any(toolkit_builds(db, t.version, gpu) for t in matching):
        can = [t.version for t in db.toolkits if toolkit_builds(db, t.version, gpu)]
        if can and V(can[-1]) < V(matching[0].version):
            tail = f"the last toolkit that can is {can[-1]}"
        elif can:
            tail = f"the first toolkit that can is {can[0]}"
        else:
            tail = "no toolkit in the database can"
        raise IncompatibleError(
            f"CUDA {pin} cannot build for {gpu.sm} ({gpu.model}): {tail}",
            alternatives=[
                "drop the software.cuda pin",
                "a newer GPU" if can and V(can[-1]) < V(matching[0].version) else "a newer CUDA",
            ],
            where=ctx.where,
        )
    if not any(_pin_matches(pin, v) for v in offered):
        raise IncompatibleError(
            f"CUDA {pin} is not offered for {ctx.os_id} ({ctx.profile.target.arch}) by any source",
            alternatives=[", ".join(sorted(offered, key=V))],
            where=ctx.where,
        )


def _refuse_framework(ctx: _Ctx, req: FrameworkRequest, cands: list[_Fw]) -> IncompatibleError:
    problems = [(fw, _fw_problem(ctx, fw, req)) for fw in cands]
    pinned = [p for p in problems if _pin_matches(req.version, p[0].version)]
    shown = pinned or problems
    shown.sort(key=lambda p: V(p[0].version), reverse=True)
    why = shown[0][1] if shown else f"no {req.name} build in the database"
    unpinned = FrameworkRequest(name=req.name)
    works = sorted({fw.version for fw in cands if _fw_problem(ctx, fw, unpinned) is None}, key=V, reverse=True)
    alternatives = []
    if works and req.version:
        alternatives.append(f"{req.name} {works[0]} (drop or change the version pin)")
    if req.name == "tensorflow" and "avx" not in ctx.profile.hardware.cpu.flags:
        alternatives += [
            "PyTorch (its wheels pick CPU kernels at run time and run without AVX)",
            "TensorFlow built from source for this CPU",
        ]
    if not alternatives:
        alternatives.append(f"remove {req.name} from software.frameworks")
    return IncompatibleError(f"no {req.name} build fits: {why}", alternatives=alternatives, where=ctx.where)


def _resolve_installable(ctx: _Ctx) -> tuple[DriverPlan, CudaPlan, CudnnPlan, tuple[FrameworkPlan, ...], str]:
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    assert ctx.system is not None and db.policy is not None

    drivers = [d for d in _driver_candidates(ctx) if sw.driver_branch in (None, d[0].branch)]
    if not drivers:
        raise _refuse_no_driver(ctx)

    offered = _cuda_offered(ctx)
    _check_cuda_pin(ctx, offered)
    cudas = sorted((v for v in offered if toolkit_builds(db, v, gpu) and _pin_matches(sw.cuda, v)), key=V, reverse=True)

    fw_cands: list[list[_Fw]] = []
    for req in sw.frameworks:
        pool = _torch_candidates(ctx) if req.name == "pytorch" else _tf_candidates(ctx)
        ok = [fw for fw in pool if _fw_problem(ctx, fw, req) is None]
        if not ok:
            raise _refuse_framework(ctx, req, pool)
        fw_cands.append(ok)

    stacks: list[_Stack] = []
    for (branch, pkg), cuda in itertools.product(drivers, cudas):
        compat = driver_runs(db, branch, cuda)
        if compat is None:
            continue
        for fws in itertools.product(*fw_cands):
            # The first framework sets the environment's CUDA; the others bring their own libraries and need
            # only a driver that runs them.
            if fws and fws[0].cuda != cuda:
                continue
            if any(driver_runs(db, branch, fw.cuda) is None for fw in fws):
                continue
            if fws and fws[0].cudnn:
                cudnn_opts = [fws[0].cudnn] if cudnn_supports(db, fws[0].cudnn, cuda, gpu) else []
            else:
                cudnn_opts = _cudnn_options(ctx, cuda)
            cudnn_opts = [c for c in cudnn_opts if _pin_matches(sw.cudnn, c)]
            if sw.cudnn and not cudnn_opts:
                continue
            for cudnn in cudnn_opts or [None]:
                stacks.append(_Stack(branch, pkg, cuda, compat, tuple(fws), cudnn))

    if not stacks:
        raise _refuse_stack(ctx, drivers, cudas, fw_cands)

    prefer_native = db.policy.prefer_native_cuda and not sw.frameworks

    def rank(s: _Stack) -> tuple:
        return (
            tuple(V(f.version) for f in s.fws),
            (s.compat == "native") if prefer_native else True,
            V(s.cuda),
            V(s.cudnn) if s.cudnn else V("0"),
            V(s.branch.branch),
        )

    best = max(stacks, key=rank)
    return _plan_installable(ctx, best, fw_cands, drivers, cudas, offered)


def _refuse_stack(ctx: _Ctx, drivers, cudas, fw_cands) -> IncompatibleError:
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    branches = ", ".join(f"R{b.branch} (CUDA {b.cuda})" for b, _ in drivers)
    if not cudas:
        return IncompatibleError(f"no CUDA offered for {ctx.os_id} can build for {gpu.sm}", where=ctx.where)
    if sw.cudnn:
        supported = [c.version for c in db.cudnn if cudnn_supports(db, c.version, None, gpu)]
        return IncompatibleError(
            f"cuDNN {sw.cudnn} does not fit {gpu.model} (cc {gpu.cc}) with the CUDA this stack needs",
            alternatives=[f"cuDNN for cc {gpu.cc}: {', '.join(supported) or 'none'}", "drop software.cudnn"],
            where=ctx.where,
        )
    if fw_cands:
        fw = fw_cands[0][0]
        return IncompatibleError(
            f"{fw.name} needs CUDA {', '.join(sorted({f.cuda for f in fw_cands[0]}, key=V))}, which the driver branches "
            f"{ctx.os_id} offers for {gpu.model} ({branches}) cannot run together with CUDA pins {sw.cuda or 'none'}",
            alternatives=["drop the software.cuda pin", "pin an older framework version"],
            where=ctx.where,
        )
    return IncompatibleError(
        f"no driver branch offered ({branches}) runs a CUDA that builds for {gpu.sm}", where=ctx.where
    )


def _pypi_cuda(ctx: _Ctx, cuda: str):
    return next((p for p in ctx.db.pypi_cuda if p.cuda == cuda), None)


def _cuda_plan(ctx: _Ctx, cuda: str, offered: dict[str, list[str]]) -> CudaPlan:
    db, sw, system = ctx.db, ctx.profile.software, ctx.system
    assert system is not None and db.policy is not None
    kind = "toolkit" if sw.devel else "runtime"
    home_tpl = db.policy.cuda_home
    for source in offered[cuda]:
        if source == "debian":
            row = next((c for c in db.cuda_pkgs if c.os_id == ctx.os_id and c.cuda == cuda and c.kind == kind), None)
            if row is None:
                continue
            home = home_tpl["debian"] if kind == "toolkit" else "/usr"
            ctx.reason(
                "cuda",
                f"CUDA {cuda} ({kind}) from Debian: {', '.join(row.packages)} {row.version}",
                f"{ctx.os_id} packages CUDA {cuda}, the version planned; distribution packages get security updates",
                row.source_url,
            )
            return CudaPlan(
                version=cuda,
                full_version=row.version,
                source="debian",
                kind=kind,
                install=True,
                packages=row.packages,
                home=home,
            )
        if source == "nvidia-repo" and db.nvidia_repo:
            mj, mn = cuda.split(".")
            tpl = db.nvidia_repo.toolkit_packages if kind == "toolkit" else db.nvidia_repo.runtime_packages
            pkgs = tuple(p.format(major=mj, minor=mn) for p in tpl)
            ctx.reason(
                "cuda",
                f"CUDA {cuda} ({kind}) from NVIDIA's repository ({system.nvidia_repo}): {', '.join(pkgs)}",
                f"NVIDIA's {system.nvidia_repo} repository carries CUDA {cuda}; the distribution does not package it",
                db.nvidia_repo.source,
            )
            return CudaPlan(
                version=cuda,
                full_version=None,
                source="nvidia-repo",
                kind=kind,
                install=True,
                packages=pkgs,
                home=home_tpl["nvidia-repo"].format(version=cuda),
            )
        if source == "pypi":
            row = _pypi_cuda(ctx, cuda)
            if row is None:
                continue
            pkgs = (row.runtime, row.nvrtc) + ((row.nvcc,) if kind == "toolkit" else ())
            venv = db.policy.venv
            ctx.reason(
                "cuda",
                f"CUDA {cuda} ({kind}) from PyPI: {', '.join(pkgs)}",
                f"{ctx.os_id} does not package CUDA {cuda}; NVIDIA's wheels carry the exact runtime and NVRTC "
                f"into the environment",
                row.source,
            )
            return CudaPlan(
                version=cuda,
                full_version=row.runtime.split("==")[1],
                source="pypi",
                kind=kind,
                install=True,
                packages=pkgs,
                home=home_tpl["pypi"].format(venv=venv, python=ctx.python),
            )
    raise IncompatibleError(f"no source offers CUDA {cuda} ({kind}) for {ctx.os_id}", where=ctx.where)


def _cudnn_plan(ctx: _Ctx, cudnn: str | None, cuda: str, fws: tuple[_Fw, ...]) -> CudnnPlan:
    db = ctx.db
    if cudnn is None:
        ctx.warnings.append(
            f"no cuDNN in the database supports {ctx.gpu.model} (cc {ctx.gpu.cc}) with CUDA {cuda}: none is planned"
        )
        return CudnnPlan(version=None, full_version=None, source=None, install=False, packages=())
    row = db.cudnn_release(cudnn)
    pip = next((p for p in db.pypi_cudnn if p.cudnn == cudnn and p.cuda_major == major(cuda)), None)
    bundled = bool(fws and fws[0].cudnn == cudnn)
    why = (
        f"the build {fws[0].name} {fws[0].version}+{fws[0].variant} brings, so the environment holds one cuDNN"
        if bundled
        else f"the newest cuDNN for CUDA {major(cuda)}.x that supports compute capability {ctx.gpu.cc}"
    )
    span = f"cc {row.min_cc}-{row.max_cc}, CUDA {row.cuda_min}-{row.cuda_max}" if row else ""
    ctx.reason(
        "cudnn",
        f"cuDNN {cudnn}" + (f" ({pip.requirement})" if pip else ""),
        f"{why} ({span})",
        row.source if row else (pip.source if pip else ""),
    )
    if row is not None and row.confidence == "uncertain":
        ctx.warnings.append(f"cuDNN {cudnn}: {row.note or 'support facts are uncertain'}")
    if pip is None:
        return CudnnPlan(version=cudnn, full_version=None, source="framework", install=False, packages=())
    # cuDNN's wheels depend on cuBLAS unpinned: pin the one of the planned CUDA so pip does not pull another minor.
    cublas = _pypi_cuda(ctx, cuda)
    pins = ((cublas.cublas,) if cublas and cublas.cublas else ()) + (pip.requirement,)
    return CudnnPlan(
        version=cudnn,
        full_version=pip.requirement.split("==")[1],
        source="pypi",
        install=True,
        packages=pins,
    )


def _plan_installable(ctx: _Ctx, best: _Stack, fw_cands, drivers, cudas, offered):
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    branch, pkg = best.branch, best.driver_pkg

    # Driver
    others = [f"R{b.branch}" for b, _ in drivers if b.branch != branch.branch]
    driving = [b for b in db.branches if branch_drives(b, gpu)]
    last = max(driving, key=lambda b: V(b.branch))
    why = (
        f"newest branch {ctx.os_id} offers ({pkg.source}) that drives {gpu.model} ({gpu.arch}, cc {gpu.cc}); "
        f"R{branch.branch} covers cc {branch.min_cc}-{branch.max_cc} and reports CUDA {branch.cuda}"
    )
    if sw.driver_branch:
        why = f"pinned by the profile; it drives {gpu.model} (cc {gpu.cc}) and reports CUDA {branch.cuda}"
    newest = max(db.branches, key=lambda b: V(b.branch))
    if last.note and last.branch != newest.branch:  # the GPU's driver line ends at `last`: say so
        why += f"; R{last.branch} is {last.note}"
    if others:
        why += f" (also offered: {', '.join(others)})"
    ctx.reason(
        "driver",
        f"R{branch.branch} from {pkg.source}: {', '.join(pkg.packages)}" + (f" {pkg.version}" if pkg.version else ""),
        why,
        pkg.source_url,
    )
    if best.compat == "native":
        min_driver = db.toolkit(best.cuda).min_driver
    else:
        min_driver = db.mvc_floor(major(best.cuda)).min_driver
    driver = DriverPlan(
        install=True,
        branch=branch.branch,
        source=pkg.source,
        packages=pkg.packages,
        userspace_packages=pkg.userspace_packages,
        version=pkg.version,
        max_cuda=branch.cuda,
        min_version=min_driver,
        kernel_module=pkg.kernel_module,
    )
    if getattr(pkg, "confidence", None) == "unverified":
        ctx.warnings.append(
            f"driver packages for {ctx.os_id} ({', '.join(pkg.packages)}) are unverified here: "
            f"{pkg.source} is not reachable from the machine this database was built on"
        )

    # Frameworks (reasons first: they decide the CUDA)
    fw_plans = []
    for i, fw in enumerate(best.fws):
        fw_plans.append(_framework_plan(ctx, fw, fw_cands[i], primary=(i == 0)))

    # CUDA
    tk = db.toolkit(best.cuda)
    can = [t.version for t in db.toolkits if toolkit_builds(db, t.version, gpu)]
    if best.fws:
        why = f"the CUDA of the {best.fws[0].name} {best.fws[0].version}+{best.fws[0].variant} wheels, so extensions build against the CUDA they run"
    else:
        why = "the newest CUDA offered that builds for the GPU" + (
            " and the driver runs natively" if best.compat == "native" else ""
        )
    why += f"; toolkit {best.cuda} builds {gpu.sm} (toolkits for {gpu.sm}: {can[0]}-{can[-1]})"
    if best.compat == "mvc":
        floor = db.mvc_floor(major(best.cuda))
        why += (
            f"; R{branch.branch} reports CUDA {branch.cuda} and runs {best.cuda} through minor-version "
            f"compatibility (driver >= {floor.min_driver})"
        )
        ctx.warnings.append(
            f"CUDA {best.cuda} runs on driver R{branch.branch} (CUDA {branch.cuda}) through minor-version compatibility: "
            f"cubins run, but PTX from CUDA {best.cuda} cannot be JIT-compiled by this driver; the verifier builds cubins "
            f"for {gpu.sm}"
        )
    ctx.reason("cuda", f"CUDA {best.cuda}", why, tk.source)
    cuda = _cuda_plan(ctx, best.cuda, offered)
    cudnn = _cudnn_plan(ctx, best.cudnn, best.cuda, best.fws)
    return driver, cuda, cudnn, tuple(fw_plans), best.compat


def _framework_plan(ctx: _Ctx, fw: _Fw, ok: list[_Fw], *, primary: bool) -> FrameworkPlan:
    gpu = ctx.gpu
    how = has_kernels(fw.arch, fw.ptx, gpu) if fw.arch else None
    where = fw.index_url or "PyPI"
    why = f"newest {fw.name} build that fits this machine"
    if how:
        kind, arch = how.split()
        why += (
            f": its {fw.variant} wheels carry {'SASS' if kind == 'sass' else 'PTX'} for {arch}, which "
            f"{'runs' if kind == 'sass' else 'the driver JIT-compiles'} on {gpu.sm}"
        )
    # Say why newer builds were passed over: that is the expert's knowledge the user came for.
    pool = _torch_candidates(ctx) if fw.name == "pytorch" else _tf_candidates(ctx)
    newer = [c for c in pool if V(c.version) > V(fw.version) or (c.version == fw.version and c.variant != fw.variant)]
    req = FrameworkRequest(name=fw.name)
    problems = [(c, _fw_problem(ctx, c, req)) for c in sorted(newer, key=lambda c: V(c.version), reverse=True)]
    problems = [(c, p) for c, p in problems if p]
    # The near misses (builds that have kernels for this GPU but fail another link) teach the most; then the newest.
    near = [p for c, p in problems if "none that runs on" not in p]
    rejected = list(dict.fromkeys(near[:1] + [p for _, p in problems[:1]]))
    if rejected:
        why += "; passed over: " + "; ".join(rejected)
    if fw.index_url:
        why += f"; the plain PyPI wheel is a different CUDA build, so the index {fw.index_url} is required"
    ctx.reason(f"framework:{fw.name}", f"{fw.requirement} from {where}", why, fw.source)
    return FrameworkPlan(
        name=fw.name,
        package=fw.package,
        version=fw.version,
        variant=fw.variant,
        index_url=fw.index_url,
        requirements=(fw.requirement,),
        cuda=fw.cuda,
        cudnn=fw.cudnn,
        arch_list=fw.arch,
    )


# ---------------------------------------------------------------------------------------------------------------
# Platforms: Colab and Jetson (verify, don't install)
# ---------------------------------------------------------------------------------------------------------------


def _resolve_colab(ctx: _Ctx):
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    rt = db.colab[-1]
    if gpu.model not in rt.gpus:
        raise IncompatibleError(
            f"Colab runtime {rt.runtime} offers {', '.join(rt.gpus)}, not {gpu.model}", where=ctx.where
        )
    for pin, have, what in (
        (sw.driver_branch, rt.branch, "driver branch"),
        (sw.cuda, rt.cuda, "CUDA"),
        (sw.cudnn, rt.cudnn, "cuDNN"),
        (sw.python, rt.python, "Python"),
    ):
        if pin and not _pin_matches(pin, have):
            raise IncompatibleError(
                f"Colab's runtime {rt.runtime} comes with {what} {have}; the profile pins {pin}",
                alternatives=[f"drop the {what} pin: Colab's stack is verified, not replaced"],
                where=ctx.where,
            )
    ctx.reason(
        "driver",
        f"R{rt.branch} ({rt.driver}), Colab's",
        "Colab owns the driver: it is verified, never installed",
        rt.source,
    )
    ctx.reason("cuda", f"CUDA {rt.cuda}, Colab's", "preinstalled on the runtime; verified against this plan", rt.source)
    branch = db.branch(rt.branch)
    driver = DriverPlan(
        install=False,
        branch=rt.branch,
        source="platform",
        packages=(),
        userspace_packages=(),
        version=rt.driver,
        max_cuda=branch.cuda if branch else None,
        min_version=db.toolkit(rt.cuda).min_driver if db.toolkit(rt.cuda) else None,
        kernel_module="platform",
    )
    cuda = CudaPlan(
        version=rt.cuda,
        full_version=None,
        source="platform",
        kind="toolkit",
        install=False,
        packages=(),
        home=db.policy.cuda_home["platform"],
    )
    cudnn = CudnnPlan(version=rt.cudnn, full_version=None, source="platform", install=False, packages=())
    fws = []
    for req in sw.frameworks:
        have = next((f for f in rt.frameworks if f.name == req.name), None)
        if have is None or not _pin_matches(req.version, have.version):
            raise IncompatibleError(
                f"Colab runtime {rt.runtime} has {req.name} {have.version if have else 'not installed'}; "
                f"the profile asks for {req.version or 'it'}",
                where=ctx.where,
            )
        row = next((r for r in db.torch if r.version == have.version and r.variant == have.variant), None)
        arch = row.arch if row else ()
        if row and has_kernels(row.arch, row.ptx, gpu) is None:
            raise IncompatibleError(
                f"Colab's {have.package} {have.version}+{have.variant} has no kernels for {gpu.sm}", where=ctx.where
            )
        ctx.reason(
            f"framework:{req.name}",
            f"{have.package} {have.version}" + (f"+{have.variant}" if have.variant else ""),
            "preinstalled on Colab; verified (imports, sees the GPU, a matmul agrees with NumPy)",
            rt.source,
        )
        fws.append(
            FrameworkPlan(
                name=req.name,
                package=have.package,
                version=have.version,
                variant=have.variant,
                index_url=None,
                requirements=(),
                cuda=have.cuda,
                cudnn=None,
                arch_list=arch,
            )
        )
    return driver, cuda, cudnn, tuple(fws), "native"


def _resolve_jetson(ctx: _Ctx, jp):
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    if gpu.model not in jp.modules:
        raise IncompatibleError(
            f"JetPack {jp.jetpack} does not support {gpu.model} (it supports {', '.join(jp.modules)})", where=ctx.where
        )
    for pin, have, what in (
        (sw.cuda, jp.cuda, "CUDA"),
        (sw.cudnn, jp.cudnn, "cuDNN"),
        (sw.python, jp.python, "Python"),
    ):
        if pin and not _pin_matches(pin, have):
            raise IncompatibleError(
                f"JetPack {jp.jetpack} comes with {what} {have}; the profile pins {pin}",
                alternatives=["drop the pin, or flash the JetPack release that carries it"],
                where=ctx.where,
            )
    if sw.driver_branch:
        raise IncompatibleError(
            "Jetson's driver is part of L4T; software.driver_branch does not apply",
            alternatives=["remove software.driver_branch"],
            where=ctx.where,
        )
    if not toolkit_builds(db, jp.cuda, gpu):
        raise IncompatibleError(f"CUDA {jp.cuda} of JetPack {jp.jetpack} cannot build for {gpu.sm}", where=ctx.where)
    ctx.reason(
        "driver",
        f"L4T {jp.l4t} (JetPack {jp.jetpack})",
        "the Jetson driver is part of the flashed L4T release: verified, never installed",
        jp.source,
    )
    ctx.reason(
        "cuda",
        f"CUDA {jp.cuda}, JetPack's",
        f"JetPack {jp.jetpack} fixes CUDA {jp.cuda}, cuDNN {jp.cudnn}, "
        f"TensorRT {jp.tensorrt}; desktop PyPI CUDA wheels do not apply on Jetson",
        jp.source,
    )
    driver = DriverPlan(
        install=False,
        branch=None,
        source="platform",
        packages=(),
        userspace_packages=(),
        version=jp.l4t,
        max_cuda=jp.cuda,
        min_version=None,
        kernel_module="platform",
    )
    cuda = CudaPlan(
        version=jp.cuda,
        full_version=None,
        source="platform",
        kind="toolkit",
        install=False,
        packages=(),
        home=db.policy.cuda_home["platform"],
    )
    cudnn = CudnnPlan(version=jp.cudnn, full_version=None, source="platform", install=False, packages=())
    fws = []
    for req in sw.frameworks:
        rows = [r for r in db.jetson_torch if r.jetpack == jp.jetpack and _pin_matches(req.version, r.version)]
        if req.name != "pytorch" or not rows:
            raise IncompatibleError(
                f"no {req.name} build for JetPack {jp.jetpack} in the database",
                alternatives=[
                    "remove it from software.frameworks",
                    "JetPack releases with PyTorch builds: " + ", ".join(sorted({r.jetpack for r in db.jetson_torch})),
                ],
                where=ctx.where,
            )
        r = rows[-1]
        ctx.reason(
            "framework:pytorch",
            f"{r.requirement} from {r.index_url}",
            f"NVIDIA's PyTorch build for JetPack {jp.jetpack} (CUDA {r.cuda}, {gpu.sm}); desktop wheels do not run on Jetson",
            r.source,
        )
        if r.confidence == "unverified":
            ctx.warnings.append(f"the PyTorch wheel location for JetPack {jp.jetpack} is unverified: {r.index_url}")
        fws.append(
            FrameworkPlan(
                name="pytorch",
                package="torch",
                version=r.version,
                variant="jetpack",
                index_url=r.index_url,
                requirements=(r.requirement,),
                cuda=r.cuda,
                cudnn=r.cudnn,
                arch_list=r.arch,
            )
        )
    return driver, cuda, cudnn, tuple(fws), "native"


# ---------------------------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------------------------


def resolve(profile: Profile, db: CompatDB, *, profile_path: str | None = None) -> Plan:
    """Resolve a profile against the database into a frozen Plan, or raise IncompatibleError."""
    gpu = db.gpu(profile.hardware.gpu.model)
    if gpu is None:
        raise IncompatibleError(f"unknown GPU '{profile.hardware.gpu.model}'", where=profile.name)
    target = profile.target
    jp = db.jetpack_release(target.jetpack) if target.jetpack else None
    os_id = f"{target.os.distribution}-{target.os.release}"
    if target.kind == "jetson":
        if jp is None:
            raise IncompatibleError(f"unknown JetPack {target.jetpack}", where=profile.name)
        if jp.os_id != os_id:
            raise IncompatibleError(
                f"JetPack {jp.jetpack} is {jp.os_id.replace('-', ' ')}, the profile says {os_id}",
                alternatives=[f"set target.os to {jp.os_id}"],
                where=profile.name,
            )
        if not gpu.tegra:
            raise IncompatibleError(f"{gpu.model} is not a Jetson module", where=profile.name)
    elif gpu.tegra:
        raise IncompatibleError(f"{gpu.model} is a Jetson module: set target.kind to jetson", where=profile.name)
    system = db.system(os_id)
    if system is None and target.kind not in ("colab", "jetson"):
        raise IncompatibleError(f"no data for {os_id}", alternatives=[s.os_id for s in db.systems], where=profile.name)
    if target.kind == "jetson":
        python = jp.python
    elif target.kind == "colab":
        python = db.colab[-1].python
    else:
        python = system.python
    ctx = _Ctx(profile=profile, db=db, gpu=gpu, os_id=os_id, system=system, python=python)
    if (
        profile.software.python
        and not _pin_matches(profile.software.python, python)
        and target.kind in ("baremetal", "cloud")
    ):
        raise IncompatibleError(
            f"Python {profile.software.python} is not what {os_id} provides ({python}); provision builds the environment "
            f"on the distribution's Python",
            alternatives=[
                f"drop software.python or pin {python}",
                "an OS whose python3 is "
                + profile.software.python
                + ": "
                + (", ".join(s.os_id for s in db.systems if _pin_matches(profile.software.python, s.python)) or "none"),
            ],
            where=profile.name,
        )

    ctx.reason(
        "gpu",
        f"{gpu.model}: {gpu.arch} {gpu.chip}, compute capability {gpu.cc} ({gpu.sm})",
        f"{gpu.memory_gb:g} GB, {gpu.bandwidth_gbps:g} GB/s, {gpu.fp32_tflops:g} TFLOPS FP32 peak",
        gpu.source,
    )

    if target.kind == "colab":
        driver, cuda, cudnn, fws, compat = _resolve_colab(ctx)
    elif target.kind == "jetson":
        driver, cuda, cudnn, fws, compat = _resolve_jetson(ctx, jp)
    else:
        driver, cuda, cudnn, fws, compat = _resolve_installable(ctx)

    _warn_hardware(ctx)
    python_plan = _python_plan(ctx, fws)
    numpy_req = _numpy(ctx, fws)
    jupyter = _jupyter_plan(ctx)
    verify = _verify_plan(ctx, cuda, numpy_req)
    image = _image_plan(ctx, cuda, jp)
    codename = system.codename if system else (db.system(jp.os_id).codename if jp and db.system(jp.os_id) else "")
    target_plan = TargetPlan(
        kind=target.kind,
        distribution=target.os.distribution,
        release=target.os.release,
        codename=codename,
        os_id=os_id,
        arch=target.arch,
        instance_type=target.instance_type,
        jetpack=jp.jetpack if jp else None,
        l4t=jp.l4t if jp else None,
    )
    return Plan(
        profile=profile.name,
        profile_path=profile_path,
        target=target_plan,
        gpu=GPUPlan(
            model=gpu.model,
            arch=gpu.arch,
            chip=gpu.chip,
            compute_capability=gpu.cc,
            sm=gpu.sm,
            count=profile.hardware.gpu.count,
            memory_gb=gpu.memory_gb,
            bandwidth_gbps=gpu.bandwidth_gbps,
            fp32_tflops=gpu.fp32_tflops,
            fp16_tflops=gpu.fp16_tflops,
            fp64_tflops=gpu.fp64_tflops,
            tegra=gpu.tegra,
        ),
        cpu=CPUPlan(model=profile.hardware.cpu.model, flags=tuple(profile.hardware.cpu.flags)),
        driver=driver,
        cuda=cuda,
        cudnn=cudnn,
        python=python_plan,
        frameworks=fws,
        jupyter=jupyter,
        verify=verify,
        image=image,
        user=profile.software.user,
        reasons=tuple(ctx.reasons),
        warnings=tuple(ctx.warnings),
    )


def _warn_hardware(ctx: _Ctx) -> None:
    gpu, policy = ctx.gpu, ctx.db.policy
    if gpu.fp16_tflops is None:
        ctx.warnings.append(
            f"{gpu.model} ({gpu.arch}) has no native FP16 arithmetic: train in FP32; AMP/fp16 gives no speed-up"
        )
    elif gpu.fp16_tflops / gpu.fp32_tflops < policy.fp16_slow_ratio:
        ratio = round(gpu.fp32_tflops / gpu.fp16_tflops)
        ctx.warnings.append(
            f"FP16/AMP on {gpu.sm} ({gpu.model}) runs at 1/{ratio} of the FP32 rate ({gpu.fp16_tflops:g} vs "
            f"{gpu.fp32_tflops:g} TFLOPS): train in FP32; autocast to float16 would be a slowdown"
        )
    if ctx.profile.target.arch == "x86_64" and "avx" not in ctx.profile.hardware.cpu.flags:
        ctx.warnings.append(
            f"{ctx.profile.hardware.cpu.model} has no AVX: prebuilt TensorFlow wheels (and other AVX "
            f"builds) crash with SIGILL on it; PyTorch selects CPU kernels at run time and works"
        )


def _tool(ctx: _Ctx, name: str, numpy_major: int | None = None) -> str | None:
    rows = [t for t in ctx.db.tools if t.name == name and _in_range(ctx.python, t.python_min, t.python_max)]
    if numpy_major is not None:
        rows = [t for t in rows if major(t.requirement.split("==")[1]) == numpy_major] or rows
    rows.sort(key=lambda t: V(t.requirement.split("==")[1]), reverse=True)
    return rows[0].requirement if rows else None


def _numpy(ctx: _Ctx, fws: tuple[FrameworkPlan, ...]) -> str:
    torch_row = next((r for f in fws for r in ctx.db.torch if f.name == "pytorch" and r.version == f.version), None)
    req = _tool(ctx, "numpy", torch_row.numpy_major if torch_row else None)
    if req is None:
        raise IncompatibleError(f"no numpy build in the database for Python {ctx.python}", where=ctx.where)
    return req


def _python_plan(ctx: _Ctx, fws) -> PythonPlan:
    db = ctx.db
    system = ctx.system
    packages = system.python_packages if system else ()
    ranges = [f"{f.name} {f.version}" for f in fws]
    if ctx.profile.target.kind == "colab":
        runtime = db.colab[-1]
        ctx.reason(
            "python",
            f"Python {ctx.python}, Colab's python3",
            f"the runtime's own interpreter, where Colab preinstalls {', '.join(ranges) or 'its frameworks'}; "
            f"the environment {db.policy.venv} sees those packages and adds only what the verifier needs",
            runtime.source,
        )
        return PythonPlan(
            version=ctx.python,
            source="platform",
            interpreter="/usr/bin/python3",
            packages=packages,
            venv=db.policy.venv,
            system_site_packages=True,
        )
    ctx.reason(
        "python",
        f"Python {ctx.python}, the system python3",
        "the distribution's Python: security updates come with the OS"
        + (f"; fits {', '.join(ranges)}" if ranges else ""),
        system.source if system else "",
    )
    return PythonPlan(
        version=ctx.python, source="system", interpreter="/usr/bin/python3", packages=packages, venv=db.policy.venv
    )


def _jupyter_plan(ctx: _Ctx) -> JupyterPlan:
    spec = ctx.profile.software.jupyter
    enabled = spec.enabled
    if ctx.profile.target.kind == "colab" and enabled:
        ctx.reason("jupyter", "none", "Colab is itself the notebook server", "https://colab.research.google.com/")
        enabled = False
    reqs: tuple[str, ...] = ()
    if enabled:
        lab, kernel = _tool(ctx, "jupyterlab"), _tool(ctx, "ipykernel")
        if lab is None or kernel is None:
            raise IncompatibleError(
                f"JupyterLab in the database needs Python 3.9+, this target has {ctx.python}",
                alternatives=["set software.jupyter.enabled: false"],
                where=ctx.where,
            )
        reqs = (lab, kernel)
        loopback = spec.bind.startswith("127.") or spec.bind == "::1"
        how = (
            "reach it through an SSH tunnel"
            if loopback
            else f"listening on {spec.bind}: {'TLS and ' if spec.tls else ''}{spec.auth} authentication required"
        )
        ctx.reason(
            "jupyter",
            f"{lab} on {spec.bind}:{spec.port}, {spec.auth} auth",
            f"runs as {ctx.profile.software.user} (not root) with a generated {spec.auth} readable only by that user; {how}",
            "https://jupyter-server.readthedocs.io/en/latest/operators/security.html",
        )
        if not loopback and not spec.tls:
            ctx.warnings.append(
                f"Jupyter listens on {spec.bind} without TLS: the {spec.auth} crosses the network in clear; "
                f"set software.jupyter.tls: true or keep 127.0.0.1 and use an SSH tunnel"
            )
    return JupyterPlan(enabled=enabled, port=spec.port, bind=spec.bind, auth=spec.auth, tls=spec.tls, requirements=reqs)


def _verify_plan(ctx: _Ctx, cuda: CudaPlan, numpy_req: str) -> VerifyPlan:
    row = _pypi_cuda(ctx, cuda.version) if cuda.source != "platform" else None
    nvrtc = (row.nvrtc,) if row else ()
    return VerifyPlan(
        expect_gpu=True,
        target_arch=ctx.gpu.sm,
        nvrtc_requirements=nvrtc,
        cuda_python_requirements=(),
        numpy_requirement=numpy_req,
    )


def _image_plan(ctx: _Ctx, cuda: CudaPlan, jp) -> ImagePlan:
    db, sw, target = ctx.db, ctx.profile.software, ctx.profile.target
    platform = "linux/arm64" if target.arch == "aarch64" else "linux/amd64"
    apt: set[str] = set(ctx.system.python_packages if ctx.system else ("python3", "python3-venv"))
    if jp is not None:
        base, why = jp.base_image, f"the L4T base of JetPack {jp.jetpack}: containers must match the host's L4T release"
    else:
        row = next((r for r in db.images if r.cuda == cuda.version), None)
        kind = "devel" if sw.devel else "runtime"
        if target.os.distribution == "ubuntu" and row and target.os.release in row.ubuntu:
            base = f"{db.image_registry}:" + db.image_tag.format(
                full=row.full, cudnn_flavour=row.cudnn_flavour, kind=kind, ubuntu=target.os.release
            )
            why = f"NVIDIA's CUDA {row.full} {kind} image with cuDNN for Ubuntu {target.os.release}"
        else:
            base = ctx.system.base_image if ctx.system else "ubuntu:22.04"
            why = (
                f"no official CUDA {cuda.version} image for {ctx.os_id}: the distribution's image, with CUDA and cuDNN "
                f"installed as planned"
            )
            if cuda.source == "debian":
                apt.update(cuda.packages)
    source = next((r.source for r in db.images if r.cuda == cuda.version), None) or (
        jp.source if jp is not None else (ctx.system.source if ctx.system else "https://hub.docker.com/")
    )
    ctx.reason("image", base, why + f"; {platform}", source)
    return ImagePlan(base_image=base, platform=platform, devel=sw.devel, apt_packages=tuple(sorted(apt)))
