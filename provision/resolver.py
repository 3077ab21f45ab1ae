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
from typing import Literal, cast

from provision.compat import GPU, Branch, CompatDB, DriverPkg, OSRow, PypiCuda, TFRow, TorchRow
from provision.errors import IncompatibleError
from provision.models import (
    CPUPlan,
    CudaPlan,
    CudnnPlan,
    DriverPlan,
    FrameworkName,
    FrameworkPlan,
    FrameworkRequest,
    GPUPlan,
    ImagePlan,
    IndexName,
    IndexPlan,
    JupyterPlan,
    Plan,
    Profile,
    PythonPlan,
    Reason,
    TargetPlan,
    VerifyPlan,
)
from provision.versions import V, cc_tuple, major, sm_int

Interconnect = Literal["pcie", "nvlink", "nvswitch"]

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
    count: int = 1
    interconnect: Interconnect = "pcie"
    indexes: dict[str, str | None] = field(default_factory=dict)  # name -> URL, None = unreachable (off)
    fw_pins: tuple[str, ...] = ()  # NVIDIA wheels the planned framework pins exactly (its Requires-Dist)
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def nvswitch(self) -> bool:
        return self.interconnect == "nvswitch"

    def reason(self, component: str, choice: str, why: str, source: str) -> None:
        self.reasons.append(Reason(component=component, choice=choice, why=why, source=source))

    @property
    def where(self) -> str:
        return self.profile.name


@dataclass(frozen=True)
class _Fw:
    """One framework build candidate (PyTorch or TensorFlow row), normalised."""

    name: FrameworkName
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
    index: str = "pypi"  # the index that serves the build: pypi | pytorch


def _torch_candidates(ctx: _Ctx) -> list[_Fw]:
    out = []
    for r in ctx.db.torch:
        if r.pypi_default:
            req, index, served_by = f"torch=={r.version}", None, "pypi"
        else:
            req, index, served_by = f"torch=={r.version}+{r.variant}", _variant_url(ctx.indexes.get("pytorch"), r.variant), "pytorch"
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
                served_by,
            )
        )
    return out


def _variant_url(base: str | None, variant: str) -> str | None:
    """PyTorch's index of one CUDA variant under a base URL: '{variant}' filled in, or appended as a path."""
    if base is None:
        return None
    return base.format(variant=variant) if "{variant}" in base else f"{base.rstrip('/')}/{variant}"


def _plan_indexes(profile: Profile, db: CompatDB) -> tuple[dict[str, str | None], tuple[IndexPlan, ...]]:
    """The package indexes this machine reaches: the database's URLs, replaced by the profile's software.indexes
    (where `--index NAME=URL|off` lands too). False means unreachable."""
    defaults: dict[IndexName, str] = {"pypi": db.pypi_index_url, "pytorch": db.torch_index_url}
    urls: dict[str, str | None] = {}
    plans = []
    for name, default in defaults.items():
        given = profile.software.indexes.get(name)
        url = None if given is False else (given or default)
        urls[name] = url
        plans.append(IndexPlan(name=name, url=url, default=url == default))
    if urls["pypi"] is None:
        raise IncompatibleError(
            "software.indexes.pypi is off, but every plan installs NumPy, the verifier's NVRTC and Jupyter with pip",
            alternatives=["name a PyPI mirror: --index pypi=URL (devpi, Artifactory, a proxy)", "drop the pypi entry"],
            where=profile.name,
        )
    return urls, tuple(plans)


def _index_reason(ctx: _Ctx, plans: tuple[IndexPlan, ...]) -> None:
    parts = []
    for i in plans:
        if i.url is None:
            parts.append(f"{i.name}: off (unreachable; builds only it serves are passed over)")
        else:
            parts.append(f"{i.name}: {i.url}" + (" (the database's)" if i.default else " (a mirror named by the profile or --index)"))
    ctx.reason(
        "indexes",
        "; ".join(f"{i.name} {'off' if i.url is None else i.url}" for i in plans),
        "; ".join(parts) + "; every wheel that is not a framework's comes from the pypi index",
        "https://pip.pypa.io/en/stable/cli/pip_install/#cmdoption-i",
    )


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
    if ctx.profile.target.arch == "aarch64" and not getattr(row, "aarch64_cuda", False):
        if isinstance(row, TorchRow) and row.pypi_default:
            return (
                f"torch {fw.version}'s aarch64 wheel on PyPI is a CPU-only build (its nvidia-* requirements carry "
                f'platform_machine == "x86_64" markers)'
            )
        return f"{fw.name} {fw.version}{'+' + fw.variant if fw.variant else ''} has no aarch64 CUDA wheel in the database"
    if fw.cudnn and not cudnn_supports(ctx.db, fw.cudnn, None, gpu):
        row_c = ctx.db.cudnn_release(fw.cudnn)
        span = f"{row_c.min_cc}-{row_c.max_cc}" if row_c else "unknown"
        return f"{fw.name} {fw.version} {fw.variant or ''} brings cuDNN {fw.cudnn}, which supports cc {span}, not {gpu.cc}".replace(
            "  ", " "
        )
    if not toolkit_builds(ctx.db, fw.cuda, gpu):
        return f"its CUDA {fw.cuda} cannot build for {gpu.sm}"
    if ctx.indexes and ctx.indexes.get(fw.index) is None:
        return (
            f"torch {fw.version}+{fw.variant} comes only from the {fw.index} index, which is off here "
            f"(software.indexes.{fw.index}: false, or --index {fw.index}=off)"
        )
    return None


def _driver_candidates(ctx: _Ctx) -> list[tuple[Branch, DriverPkg]]:
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
    driver_pkg: DriverPkg
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
    gpu = ctx.gpu
    unpinned = FrameworkRequest(name=req.name)
    works = sorted({fw.version for fw in cands if _fw_problem(ctx, fw, unpinned) is None}, key=V, reverse=True)
    pinned = [fw for fw in cands if _pin_matches(req.version, fw.version)]
    if req.version and not pinned:
        # The pinned release is not in the database: say so, instead of blaming another release for not being it.
        known = sorted({fw.version for fw in cands}, key=V)
        why = (
            f"{req.name} {req.version} is not in the database (known releases: {', '.join(known) or 'none'}), so "
            f"nothing says which architectures its builds carry"
        )
    else:
        ranked = sorted(
            ((fw, _fw_problem(ctx, fw, unpinned)) for fw in (pinned or cands)), key=lambda p: V(p[0].version), reverse=True
        )
        problems = [(fw, p) for fw, p in ranked if p]
        no_kernels = [fw for fw, p in problems if "none that runs on" in p]
        if req.name == "pytorch" and problems and len(no_kernels) == len(problems):
            # Every build of the pinned release lacks kernels for this GPU: that is the conflict, name both sides.
            arch = sorted({a for fw in no_kernels for a in fw.arch}, key=V)
            last = max((fw for fw in cands if has_kernels(fw.arch, fw.ptx, gpu)), key=lambda f: V(f.version), default=None)
            why = (
                f"no {req.name} {req.version or ''} build has {gpu.sm} kernels ({gpu.model}): its builds "
                f"({', '.join(sorted({f.variant or '' for f in no_kernels}))}) carry {';'.join(arch)}"
            ).replace("  ", " ")
            if last is not None:
                why += f"; the newest release with {gpu.sm} kernels is {last.version}+{last.variant}"
        else:
            why = problems[0][1] if problems else f"no {req.name} build in the database"
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
    if ctx.nvswitch:
        drivers = _with_fabric_manager(ctx, drivers)

    offered = _cuda_offered(ctx)
    _check_cuda_pin(ctx, offered)
    cudas = sorted((v for v in offered if toolkit_builds(db, v, gpu) and _pin_matches(sw.cuda, v)), key=V, reverse=True)
    _check_driver_pin_runs_cuda_pin(ctx, drivers, cudas)

    fw_cands: list[list[_Fw]] = []
    for req in sw.frameworks:
        pool = _torch_candidates(ctx) if req.name == "pytorch" else _tf_candidates(ctx)
        ok = [fw for fw in pool if _fw_problem(ctx, fw, req) is None]
        if not ok:
            raise _refuse_framework(ctx, req, pool)
        fw_cands.append(ok)
    if fw_cands and sw.cuda:
        _check_framework_cuda_pin(ctx, sw.frameworks[0], fw_cands[0])

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
            for cudnn in cudnn_opts or (None,):
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


def _with_fabric_manager(ctx: _Ctx, drivers):
    """NVSwitch boxes: only driver branches whose Fabric Manager this OS packages (it must equal the driver)."""
    db, gpu = ctx.db, ctx.gpu
    kept = [(b, p) for b, p in drivers if db.fabric_manager(ctx.os_id, b.branch) is not None]
    if kept:
        return kept
    where = sorted({f"{f.os_id} R{f.branch}" for f in db.fabricmanager})
    raise IncompatibleError(
        f"{ctx.count} x {gpu.model} on NVSwitch need NVIDIA Fabric Manager of the driver's branch (CUDA does not "
        f"initialise without it), and {ctx.os_id} packages none for the branches it offers "
        f"({', '.join('R' + b.branch for b, _ in drivers)})",
        alternatives=[f"an OS and branch that package it: {', '.join(where) or 'none in the database'}"],
        where=ctx.where,
    )


def _check_driver_pin_runs_cuda_pin(ctx: _Ctx, drivers, cudas: list[str]) -> None:
    """A driver pin and a CUDA pin that cannot meet: name both pins and what each would need."""
    db, sw, gpu = ctx.db, ctx.profile.software, ctx.gpu
    if not (sw.driver_branch and sw.cuda and cudas):
        return
    if any(driver_runs(db, b, c) for b, _ in drivers for c in cudas):
        return
    cuda = cudas[-1]  # the oldest matching the pin: the easiest to run
    tk, floor = db.toolkit(cuda), db.mvc_floor(major(cuda))
    branch = drivers[0][0]
    need = f"driver >= {tk.min_driver}" if tk else "a newer driver"
    if floor is not None:
        need += f", or >= {floor.min_driver} through minor-version compatibility (a CUDA {major(cuda)}.x branch)"
    runs = [
        f"R{b.branch}"
        for b in db.branches
        if branch_drives(b, gpu) and driver_runs(db, b, cuda) and any(p.branch == b.branch for p in db.drivers if p.os_id == ctx.os_id)
    ]
    raise IncompatibleError(
        f"the pinned driver branch R{sw.driver_branch} (reports CUDA {branch.cuda}) cannot run the pinned CUDA {sw.cuda}: "
        f"CUDA {cuda} needs {need}",
        alternatives=[
            f"keep CUDA {sw.cuda} and pin a branch that runs it: {', '.join(runs) or f'none that {ctx.os_id} offers for {gpu.model}'}",
            f"keep R{sw.driver_branch} and pin a CUDA it runs (up to {branch.cuda}"
            + (" and its major through minor-version compatibility" if db.mvc_floor(major(branch.cuda)) else "")
            + ")",
        ],
        where=ctx.where,
    )


def _check_framework_cuda_pin(ctx: _Ctx, req: FrameworkRequest, ok: list[_Fw]) -> None:
    """The first framework sets the environment's CUDA: a CUDA pin no fitting build is made with is a conflict
    between the pin and the GPU's kernels in that CUDA's builds. Say which builds, and from which arch they start."""
    sw, gpu = ctx.profile.software, ctx.gpu
    if any(_pin_matches(sw.cuda, fw.cuda) for fw in ok):
        return
    pool = _torch_candidates(ctx) if req.name == "pytorch" else _tf_candidates(ctx)
    with_pin = [fw for fw in pool if _pin_matches(sw.cuda, fw.cuda) and _pin_matches(req.version, fw.version)]
    fits = sorted(ok, key=lambda f: V(f.version), reverse=True)
    best = fits[0]
    if with_pin:
        lowest = sorted({a for fw in with_pin for a in fw.arch}, key=V)
        variants = ", ".join(sorted({fw.variant or fw.cuda for fw in with_pin}))
        problem = _fw_problem(ctx, with_pin[-1], FrameworkRequest(name=req.name))
        if lowest and V(lowest[0]) > V(gpu.cc):
            why = f"the {variants} builds start at sm_{lowest[0].replace('.', '')}"
        else:
            why = problem or f"no {variants} build fits"
    else:
        why = f"no {req.name} build in the database is made with CUDA {sw.cuda}"
    raise IncompatibleError(
        f"CUDA {sw.cuda} is pinned, but no {req.name} build for CUDA {sw.cuda} runs on {gpu.sm} ({gpu.model}): {why}; "
        f"{req.name} for {gpu.sm} is built with CUDA {best.cuda} ({best.version}"
        + (f"+{best.variant}" if best.variant else "")
        + ")",
        alternatives=[f"pin CUDA {best.cuda}", "drop the software.cuda pin"],
        where=ctx.where,
    )


def _refuse_stack(ctx: _Ctx, drivers, cudas, fw_cands) -> IncompatibleError:
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    branches = ", ".join(f"R{b.branch} (CUDA {b.cuda})" for b, _ in drivers)
    if not cudas:
        return IncompatibleError(f"no CUDA offered for {ctx.os_id} can build for {gpu.sm}", where=ctx.where)
    if sw.cudnn:
        # Only cuDNN releases that fit both the GPU and a CUDA this stack can have are offered as the way out.
        stack_cudas = sorted(({f.cuda for f in fw_cands[0]} & set(cudas) if fw_cands else set()) or set(cudas), key=V)
        wheels = {(p.cudnn, p.cuda_major) for p in db.pypi_cudnn}
        supported = [
            c.version
            for c in db.cudnn
            if any(cudnn_supports(db, c.version, cu, gpu) and (c.version, major(cu)) in wheels for cu in stack_cudas)
        ]
        pin_rows = [c for c in db.cudnn if _pin_matches(sw.cudnn, c.version)]
        span = "; ".join(f"cuDNN {c.version} supports CUDA {c.cuda_min}-{c.cuda_max}, cc {c.min_cc}-{c.max_cc}" for c in pin_rows)
        cuda_side = f"the pinned CUDA {sw.cuda}" if sw.cuda else f"CUDA {', '.join(stack_cudas)}"
        return IncompatibleError(
            f"the pinned cuDNN {sw.cudnn} does not fit {cuda_side} on {gpu.model} (cc {gpu.cc})"
            + (f": {span}" if span else ": it is not in the database"),
            alternatives=[
                f"cuDNN that fits {cuda_side} and cc {gpu.cc}: {', '.join(supported) or 'none'}",
                "drop software.cudnn",
            ],
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


def _pypi_cuda(ctx: _Ctx, cuda: str) -> PypiCuda | None:
    return next((p for p in ctx.db.pypi_cuda if p.cuda == cuda), None)


def _cuda_plan(ctx: _Ctx, cuda: str, offered: dict[str, list[str]]) -> CudaPlan:
    db, sw, system = ctx.db, ctx.profile.software, ctx.system
    assert system is not None and db.policy is not None
    kind: Literal["toolkit", "runtime"] = "toolkit" if sw.devel else "runtime"
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
            wheels = _pypi_cuda(ctx, cuda)
            if wheels is None:
                continue
            pkgs = (wheels.runtime, wheels.nvrtc) + ((wheels.nvcc,) if kind == "toolkit" else ())
            venv = db.policy.venv
            ctx.reason(
                "cuda",
                f"CUDA {cuda} ({kind}) from PyPI: {', '.join(pkgs)}",
                f"{ctx.os_id} does not package CUDA {cuda}; NVIDIA's wheels carry the exact runtime and NVRTC "
                f"into the environment",
                wheels.source,
            )
            return CudaPlan(
                version=cuda,
                full_version=wheels.runtime.split("==")[1],
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
    if row is not None and row.confidence == "uncertain" and (not row.uncertain_cc or ctx.gpu.cc in row.uncertain_cc):
        # Only when the uncertain part of the row concerns this GPU (8.6/8.7's Kepler story is no Pascal's concern).
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
    tk = db.toolkit(best.cuda)
    floor = db.mvc_floor(major(best.cuda))
    assert tk is not None  # every planned CUDA passed toolkit_builds, which needs its toolkit row
    if best.compat == "native":
        min_driver = tk.min_driver
    else:
        assert floor is not None  # driver_runs says "mvc" only where the major has a floor
        min_driver = floor.min_driver
    fm = db.fabric_manager(ctx.os_id, branch.branch) if ctx.nvswitch else None
    if fm is not None:
        ctx.reason(
            "fabric-manager",
            f"{', '.join(fm.packages)} ({fm.service} service)",
            f"{ctx.count} x {gpu.model} are connected through NVSwitch: CUDA does not initialise until NVIDIA Fabric "
            f"Manager runs, and its version must equal the driver's, so it comes from {fm.source} for R{branch.branch}",
            fm.source_url,
        )
        if fm.confidence == "unverified":
            ctx.warnings.append(
                f"Fabric Manager packages for {ctx.os_id} R{branch.branch} ({', '.join(fm.packages)}) are unverified here"
            )
    driver = DriverPlan(
        install=True,
        branch=branch.branch,
        source=pkg.source,
        packages=pkg.packages + (fm.packages if fm else ()),
        userspace_packages=pkg.userspace_packages,
        version=pkg.version,
        max_cuda=branch.cuda,
        min_version=min_driver,
        kernel_module=pkg.kernel_module,
        fabric_manager=fm.packages if fm else (),
        fabric_manager_service=fm.service if fm else None,
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
    can = [t.version for t in db.toolkits if toolkit_builds(db, t.version, gpu)]
    if best.fws:
        why = f"the CUDA of the {best.fws[0].name} {best.fws[0].version}+{best.fws[0].variant} wheels, so extensions build against the CUDA they run"
    else:
        why = "the newest CUDA offered that builds for the GPU" + (
            " and the driver runs natively" if best.compat == "native" else ""
        )
    why += f"; toolkit {best.cuda} builds {gpu.sm} (toolkits for {gpu.sm}: {can[0]}-{can[-1]})"
    if best.compat == "mvc":
        assert floor is not None  # as above
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
    # The framework's wheels pin NVIDIA's wheels exactly (torch 2.7.1: nvidia-cuda-nvrtc-cu12==12.6.77, where the
    # CUDA 12.6 row's newest patch is 12.6.85): take its pins, or pip has two answers for one package.
    ctx.fw_pins = tuple(getattr(best.fws[0].row, "pins", ())) if best.fws else ()
    if ctx.fw_pins:
        cuda = cuda.model_copy(update={"packages": _align_pins(cuda.packages, ctx.fw_pins)})
        cudnn = cudnn.model_copy(update={"packages": _align_pins(cudnn.packages, ctx.fw_pins)})
        ctx.reason("pins", ", ".join(ctx.fw_pins),
                   f"{best.fws[0].requirement} pins these NVIDIA wheels in its Requires-Dist; the plan takes its pins",
                   best.fws[0].source)
    return driver, cuda, cudnn, tuple(fw_plans), best.compat


def _align_pins(reqs: tuple[str, ...], pins: tuple[str, ...]) -> tuple[str, ...]:
    """Each requirement replaced by the pin of the same distribution from `pins`, where there is one."""
    by_name = {p.split("==")[0]: p for p in pins}
    return tuple(by_name.get(r.split("==")[0], r) for r in reqs)


def _framework_plan(ctx: _Ctx, fw: _Fw, ok: list[_Fw], *, primary: bool) -> FrameworkPlan:
    gpu = ctx.gpu
    how = has_kernels(fw.arch, fw.ptx, gpu) if fw.arch else None
    where = f"the pytorch index {fw.index_url}" if fw.index_url else f"the pypi index {ctx.indexes.get('pypi') or 'PyPI'}"
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
    ranked = [(c, _fw_problem(ctx, c, req)) for c in sorted(newer, key=lambda c: V(c.version), reverse=True)]
    problems = [(c, p) for c, p in ranked if p]
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
    for pin, shipped, what in (
        (sw.driver_branch, rt.branch, "driver branch"),
        (sw.cuda, rt.cuda, "CUDA"),
        (sw.cudnn, rt.cudnn, "cuDNN"),
        (sw.python, rt.python, "Python"),
    ):
        if pin and not _pin_matches(pin, shipped):
            raise IncompatibleError(
                f"Colab's runtime {rt.runtime} comes with {what} {shipped}; the profile pins {pin}",
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
    tk = db.toolkit(rt.cuda)
    driver = DriverPlan(
        install=False,
        branch=rt.branch,
        source="platform",
        packages=(),
        userspace_packages=(),
        version=rt.driver,
        max_cuda=branch.cuda if branch else None,
        min_version=tk.min_driver if tk else None,
        kernel_module="platform",
    )
    assert db.policy is not None  # load_db always reads data/policy.yaml
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
    assert db.policy is not None  # load_db always reads data/policy.yaml
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
        if not _pin_matches(r.python, jp.python):
            raise IncompatibleError(
                f"NVIDIA's PyTorch wheel for JetPack {jp.jetpack} is built for Python {r.python}, the release has {jp.python}",
                where=ctx.where,
            )
        if r.sha256 is None:
            # NVIDIA's directory is not an index and the file is not hashed in the database: a direct reference
            # without a hash would install whatever the URL serves that day.
            raise IncompatibleError(
                f"NVIDIA's PyTorch wheel for JetPack {jp.jetpack} (torch {r.version}) is a file, not an index entry, and "
                f"the database has no sha256 for it: provision plans it only as a hashed direct reference ({r.url})",
                alternatives=[
                    "hash it where developer.download.nvidia.com is reachable: scripts/refresh_db.py --hash-jetson, "
                    "then re-plan",
                    "remove pytorch from software.frameworks (CUDA, cuDNN and TensorRT still come with JetPack)",
                ],
                where=ctx.where,
            )
        requirement = f"torch @ {r.url}#sha256={r.sha256}"
        ctx.reason(
            "framework:pytorch",
            f"torch {r.version} as a direct reference",
            f"NVIDIA's PyTorch build for JetPack {jp.jetpack} (CUDA {r.cuda}, {gpu.sm}, Python {r.python}); desktop wheels "
            f"do not run on Jetson, and NVIDIA's directory is not a package index, so pip gets the file and its hash",
            r.source,
        )
        if r.confidence == "unverified":
            ctx.warnings.append(f"the PyTorch wheel for JetPack {jp.jetpack} is unverified here: {r.url}")
        fws.append(
            FrameworkPlan(
                name="pytorch",
                package="torch",
                version=r.version,
                variant="jetpack",
                index_url=None,
                requirements=(requirement,),
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
    specs = [profile.hardware.gpu, *profile.hardware.extra_gpus]
    gpus = []
    for spec in specs:
        g = db.gpu(spec.model)
        if g is None:
            raise IncompatibleError(f"unknown GPU '{spec.model}'", where=profile.name)
        gpus.append(g)
    count, interconnect, inst_reason = _count_and_interconnect(profile, db, gpus[0])
    if len({g.model for g in gpus}) == 1:
        total = count if len(specs) == 1 else sum(s.count or 1 for s in specs)
        return _resolve_one(profile, db, gpus[0], total, interconnect, inst_reason, profile_path)
    return _resolve_mixed(profile, db, list(zip(specs, gpus, strict=True)), profile_path)


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
            f"{inst.instance_type} has {inst.gpus} x {inst.gpu}; hardware.gpu.model says {spec.model}",
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


def _resolve_mixed(profile: Profile, db: CompatDB, pairs, profile_path: str | None) -> Plan:
    """Several GPU models in one box: plan the stack for the most constrained one (the oldest architecture), pin
    it, and check that the same pinned stack also resolves for each other model; refuse with the failing link."""
    if profile.target.kind not in ("baremetal",):
        raise IncompatibleError(
            f"mixed GPU models are planned for bare metal only, not target.kind '{profile.target.kind}'",
            alternatives=["remove hardware.extra_gpus"],
            where=profile.name,
        )
    models: dict[str, tuple] = {}
    for spec, g in pairs:
        have = models.get(g.model)
        models[g.model] = (g, (have[1] if have else 0) + (spec.count or 1))
    ordered = sorted(models.values(), key=lambda gc: (V(gc[0].cc), gc[0].model))
    (first, first_count), rest = ordered[0], ordered[1:]

    def variant(gpu: GPU, count: int, sw) -> Profile:
        hw = profile.hardware.model_copy(update={"gpu": profile.hardware.gpu.model_copy(update={"model": gpu.model, "count": count}), "extra_gpus": []})
        return profile.model_copy(update={"hardware": hw, "software": sw})

    base = _resolve_one(variant(first, first_count, profile.software), db, first, first_count, "pcie", None, profile_path)
    sw = profile.software.model_copy(
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


def _resolve_one(
    profile: Profile,
    db: CompatDB,
    gpu: GPU,
    count: int,
    interconnect: Interconnect,
    inst_reason: Reason | None,
    profile_path: str | None,
) -> Plan:
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
        assert jp is not None  # refused above when unknown
        python = jp.python
    elif target.kind == "colab":
        python = db.colab[-1].python
    else:
        assert system is not None  # refused above for every kind but colab and jetson
        python = system.python
    indexes, index_plans = _plan_indexes(profile, db)
    ctx = _Ctx(
        profile=profile, db=db, gpu=gpu, os_id=os_id, system=system, python=python, count=count, interconnect=interconnect,
        indexes=indexes,
    )
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
    if inst_reason is not None:
        ctx.reasons.append(inst_reason)
    _index_reason(ctx, index_plans)
    if gpu.confidence == "unverified":
        ctx.warnings.append(
            f"the {gpu.model} row (compute capability {gpu.cc}, memory, peaks) is unverified: compiled from "
            f"{gpu.source} without re-reading it; `provision verify` measures the real device"
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
    image = _image_plan(ctx, cuda, cudnn, jp)
    jp_system = db.system(jp.os_id) if jp else None
    codename = system.codename if system else (jp_system.codename if jp_system else "")
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
            count=count,
            memory_gb=gpu.memory_gb,
            bandwidth_gbps=gpu.bandwidth_gbps,
            fp32_tflops=gpu.fp32_tflops,
            fp16_tflops=gpu.fp16_tflops,
            fp64_tflops=gpu.fp64_tflops,
            tegra=gpu.tegra,
            interconnect=interconnect,
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
        indexes=index_plans,
    )


def _warn_hardware(ctx: _Ctx) -> None:
    gpu, policy = ctx.gpu, ctx.db.policy
    assert policy is not None  # load_db always reads data/policy.yaml
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
    """The numpy every planned framework accepts: torch < 2.3 is built against numpy 1, TF < 2.18 requires < 2."""
    majors = [r.numpy_major for f in fws for r in ctx.db.torch if f.name == "pytorch" and r.version == f.version][:1]
    majors += [r.numpy_major for f in fws for r in ctx.db.tensorflow if f.name == "tensorflow" and r.version == f.version]
    req = _tool(ctx, "numpy", min(majors) if majors else None)
    if req is None:
        raise IncompatibleError(f"no numpy build in the database for Python {ctx.python}", where=ctx.where)
    return req


def _python_plan(ctx: _Ctx, fws) -> PythonPlan:
    db = ctx.db
    assert db.policy is not None  # load_db always reads data/policy.yaml
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
    nvrtc = _align_pins((row.nvrtc,), ctx.fw_pins) if row else ()
    return VerifyPlan(
        expect_gpu=True,
        target_arch=ctx.gpu.sm,
        nvrtc_requirements=nvrtc,
        cuda_python_requirements=(),
        numpy_requirement=numpy_req,
    )


def _image_plan(ctx: _Ctx, cuda: CudaPlan, cudnn: CudnnPlan, jp) -> ImagePlan:
    db, sw, target = ctx.db, ctx.profile.software, ctx.profile.target
    platform = "linux/arm64" if target.arch == "aarch64" else "linux/amd64"
    apt: set[str] = set(ctx.system.python_packages if ctx.system else ("python3", "python3-venv"))
    if jp is not None:
        base, why = jp.base_image, f"the L4T base of JetPack {jp.jetpack}: containers must match the host's L4T release"
    else:
        row = next((r for r in db.images if r.cuda == cuda.version), None)
        kind = "devel" if sw.devel else "runtime"
        if target.os.distribution == "ubuntu" and row and target.os.release in row.ubuntu:
            # cuDNN as wheels (the plan's or a framework's): the image without cuDNN, or the environment would load
            # one of two copies, and the base's may be older than the one the framework was built with.
            wheels = cudnn.source in ("pypi", "framework")
            pattern = db.image_tag_without_cudnn if wheels else db.image_tag
            base = f"{db.image_registry}:" + pattern.format(
                full=row.full, cudnn_flavour=row.cudnn_flavour, kind=kind, ubuntu=target.os.release
            )
            why = (f"NVIDIA's CUDA {row.full} {kind} image for Ubuntu {target.os.release}, without cuDNN: cuDNN "
                   f"{cudnn.version} comes as wheels, one copy" if wheels else
                   f"NVIDIA's CUDA {row.full} {kind} image with cuDNN for Ubuntu {target.os.release}")
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
