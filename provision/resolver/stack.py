"""The driver, CUDA and cuDNN choice, in one place for every lane: which driver branches the OS offers for the GPU,
which CUDA versions a source offers, which cuDNN fits, the refusals of pins that cannot meet, and the sub-plans
(DriverPlan, CudaPlan, CudnnPlan) with their reasons for installed stacks; the platform-owned ones (Colab, Jetson)
are resolver.platform's."""

from __future__ import annotations

from typing import Literal

from provision.compat import Branch, DriverPkg, PypiCuda
from provision.errors import IncompatibleError
from provision.models import CudaPlan, CudnnPlan, DriverPlan
from provision.resolver.context import Ctx
from provision.resolver.frameworks import Fw
from provision.resolver.links import cudnn_supports, driver_runs, pin_matches, toolkit_builds
from provision.versions import V, major


def driver_tiers(ctx: Ctx) -> list[tuple[str, ...]]:
    """The driver sources of this OS in policy order, as tiers (data/policy.yaml, driver_sources): a later tier is
    tried only where no stack holds with an earlier one. A distribution the policy does not list: one tier of every
    source its rows name."""
    db = ctx.db
    assert db.policy is not None and ctx.system is not None
    named = tuple(dict.fromkeys(p.source for p in db.drivers if p.os_id == ctx.os_id))
    tiers = [tuple(s for s in tier if s in named) for tier in db.policy.driver_sources.get(ctx.system.distribution, ())]
    tiers = [t for t in tiers if t]
    listed = {s for t in tiers for s in t}
    rest = tuple(s for s in named if s not in listed)
    return tiers + [rest] if rest or not tiers else tiers


def driver_candidates(ctx: Ctx, sources: tuple[str, ...] | None = None) -> list[tuple[Branch, DriverPkg]]:
    """(branch row, package row) pairs the OS offers for this GPU (from `sources`, where given), newest first."""
    db, gpu = ctx.db, ctx.gpu
    flavours = db.kernel_modules(gpu)
    out = []
    for pkg in db.drivers:
        if pkg.os_id != ctx.os_id or (pkg.segment not in (None, gpu.segment)):
            continue
        if sources is not None and pkg.source not in sources:
            continue
        if pkg.kernel_module not in flavours:  # Blackwell and Grace Hopper: open only; before Turing: proprietary
            continue
        branch = db.branch(pkg.branch)
        if branch is None or not branch.drives(gpu):
            continue
        out.append((branch, pkg))
    out.sort(key=lambda bp: V(bp[0].branch), reverse=True)
    return out


def cuda_offered(ctx: Ctx, driver_sources: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """CUDA version -> sources that offer it for this OS/arch, in policy order. Where the driver comes from a source
    the policy's cuda_sources_by_driver names (NVIDIA's repository), CUDA's sources are that entry's."""
    db, policy = ctx.db, ctx.db.policy
    assert policy is not None and ctx.system is not None
    offered: dict[str, list[str]] = {}
    sources = policy.cuda_sources.get(ctx.system.distribution, ())
    by_driver = [policy.cuda_sources_by_driver[s] for s in driver_sources if s in policy.cuda_sources_by_driver]
    if by_driver and len(driver_sources) == 1:
        sources = by_driver[0]
    for source in sources:
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


def cudnn_options(ctx: Ctx, cuda: str) -> list[str]:
    db = ctx.db
    versions = {p.cudnn for p in db.pypi_cudnn if p.cuda_major == major(cuda)}
    return sorted((v for v in versions if cudnn_supports(db, v, cuda, ctx.gpu)), key=V, reverse=True)


def refuse_no_driver(ctx: Ctx, sources: tuple[str, ...] | None = None) -> IncompatibleError:
    """Why no driver package of this OS (from `sources`, where given) drives the GPU."""
    db, gpu = ctx.db, ctx.gpu
    if sources is not None:
        db = db.model_copy(update={"drivers": tuple(p for p in db.drivers if p.os_id != ctx.os_id or p.source in sources)})
    pin = ctx.profile.software.driver_branch
    driving = [b for b in db.branches if b.drives(gpu)]
    spans = ", ".join(f"R{b.branch}" for b in driving) or "none in the database"
    offered = sorted({p.os_id for p in db.drivers if p.branch in {b.branch for b in driving}})
    if pin:
        row = db.branch(pin)
        if row is not None and not row.drives(gpu):
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
    flavours = db.kernel_modules(gpu)
    if flavours == ("open",):
        # Branches the OS has for the GPU, but only with the proprietary modules: say that, not "no branch".
        closed = sorted({p.branch for p in db.drivers if p.os_id == ctx.os_id and p.branch in {b.branch for b in driving}
                         and p.kernel_module == "proprietary"})
        offered = sorted({p.os_id for p in db.drivers if p.branch in {b.branch for b in driving}
                          and p.kernel_module == "open" and p.segment in (None, gpu.segment)})
        if closed:
            return IncompatibleError(
                f"{gpu.model} ({gpu.arch}) runs only on NVIDIA's open kernel modules, and {ctx.os_id} packages "
                f"{', '.join('R' + b for b in closed)} for it with the proprietary ones only",
                alternatives=[f"an OS that packages the open modules of {spans}: {', '.join(offered) or 'none known'}"],
                where=ctx.where,
            )
    if not driving and gpu.legacy_branch is not None:
        oldest = min(db.branches, key=lambda b: V(b.branch)).branch
        return IncompatibleError(
            f"{gpu.model} ({gpu.pci_id}, {gpu.arch}, compute capability {gpu.cc}): its last driver is the "
            f"R{gpu.legacy_branch} legacy branch (NVIDIA's driver list), older than any branch provision plans "
            f"(R{oldest} and later)",
            alternatives=[f"a GPU a branch from R{oldest} on drives", "install NVIDIA's legacy driver by hand"],
            where=ctx.where,
        )
    return IncompatibleError(
        f"{ctx.os_id} offers no driver branch that drives {gpu.model} ({gpu.arch}, compute capability {gpu.cc}); "
        f"it needs one of {spans}",
        alternatives=[f"an OS that packages one: {', '.join(offered) or 'none known'}"],
        where=ctx.where,
    )


def check_cuda_pin(ctx: Ctx, offered: dict[str, list[str]]) -> None:
    pin, db, gpu = ctx.profile.software.cuda, ctx.db, ctx.gpu
    if pin is None:
        return
    matching = [t for t in db.toolkits if pin_matches(pin, t.version)]
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
    if not any(pin_matches(pin, v) for v in offered):
        raise IncompatibleError(
            f"CUDA {pin} is not offered for {ctx.os_id} ({ctx.profile.target.arch}) by any source",
            alternatives=[", ".join(sorted(offered, key=V))],
            where=ctx.where,
        )


def with_fabric_manager(ctx: Ctx, drivers: list[tuple[Branch, DriverPkg]]) -> list[tuple[Branch, DriverPkg]]:
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


def check_driver_pin_runs_cuda_pin(ctx: Ctx, drivers: list[tuple[Branch, DriverPkg]], cudas: list[str]) -> None:
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
        if b.drives(gpu) and driver_runs(db, b, cuda) and any(p.branch == b.branch for p in db.drivers if p.os_id == ctx.os_id)
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


def driver_plan(ctx: Ctx, branch: Branch, pkg: DriverPkg, drivers: list[tuple[Branch, DriverPkg]], cuda: str,
                compat: str, passed_over: str = "") -> DriverPlan:
    """The chosen branch as installed: its packages, Fabric Manager where NVSwitch needs it, and the lowest driver
    version the planned CUDA runs on (natively, or through minor-version compatibility)."""
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    others = list(dict.fromkeys(f"R{b.branch}" for b, _ in drivers if b.branch != branch.branch))  # a branch once
    driving = [b for b in db.branches if b.drives(gpu)]
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
    if pkg.source == "nvidia-repo" and pkg.version is None:
        flavours = db.kernel_modules(gpu)
        why += (f"; {pkg.kernel_module} kernel modules ("
                + ("the only ones that drive it" if len(flavours) == 1 else
                   "NVIDIA recommends them from Turing on" if pkg.kernel_module == "open" else "its choice")
                + f"); an apt preferences file holds the host on R{branch.branch}, so an upgrade cannot change branch")
    if passed_over:
        # A later tier of data/policy.yaml's driver_sources: say why the distribution's own packages were passed over.
        why += f"; {passed_over}"
    ctx.reason(
        "driver",
        f"R{branch.branch} from {pkg.source}: {', '.join(pkg.packages)}" + (f" {pkg.version}" if pkg.version else ""),
        why,
        pkg.source_url,
    )
    tk = db.toolkit(cuda)
    floor = db.mvc_floor(major(cuda))
    assert tk is not None  # every planned CUDA passed toolkit_builds, which needs its toolkit row
    if compat == "native":
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
    return driver


def cuda_reason(ctx: Ctx, branch: Branch, cuda: str, compat: str, fw: Fw | None) -> None:
    """Why this CUDA: the primary framework's (when there is one) or the newest offered, and how the driver runs it."""
    db, gpu = ctx.db, ctx.gpu
    tk, floor = db.toolkit(cuda), db.mvc_floor(major(cuda))
    assert tk is not None  # every planned CUDA passed toolkit_builds, which needs its toolkit row
    can = [t.version for t in db.toolkits if toolkit_builds(db, t.version, gpu)]
    if fw is not None:
        why = f"the CUDA of the {fw.name} {fw.version}+{fw.variant} wheels, so extensions build against the CUDA they run"
    else:
        why = "the newest CUDA offered that builds for the GPU" + (
            " and the driver runs natively" if compat == "native" else ""
        )
    why += f"; toolkit {cuda} builds {gpu.sm} (toolkits for {gpu.sm}: {can[0]}-{can[-1]})"
    if compat == "mvc":
        assert floor is not None  # driver_runs says "mvc" only where the major has a floor
        why += (
            f"; R{branch.branch} reports CUDA {branch.cuda} and runs {cuda} through minor-version "
            f"compatibility (driver >= {floor.min_driver})"
        )
        ctx.warnings.append(
            f"CUDA {cuda} runs on driver R{branch.branch} (CUDA {branch.cuda}) through minor-version compatibility: "
            f"cubins run, but PTX from CUDA {cuda} cannot be JIT-compiled by this driver; the verifier builds cubins "
            f"for {gpu.sm}"
        )
    ctx.reason("cuda", f"CUDA {cuda}", why, tk.source)


def pypi_cuda(ctx: Ctx, cuda: str) -> PypiCuda | None:
    return next((p for p in ctx.db.pypi_cuda if p.cuda == cuda), None)


def cuda_plan(ctx: Ctx, cuda: str, offered: dict[str, list[str]]) -> CudaPlan:
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
                f"NVIDIA's {system.nvidia_repo} repository carries CUDA {cuda}; "
                + ("the driver comes from it, and Debian's CUDA packages would bring Debian's driver libraries beside it"
                   if system.distribution == "debian" else "the distribution does not package it"),
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
            wheels = pypi_cuda(ctx, cuda)
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


def cudnn_plan(ctx: Ctx, cudnn: str | None, cuda: str, fws: tuple[Fw, ...]) -> CudnnPlan:
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
    cublas = pypi_cuda(ctx, cuda)
    pins = ((cublas.cublas,) if cublas and cublas.cublas else ()) + (pip.requirement,)
    return CudnnPlan(
        version=cudnn,
        full_version=pip.requirement.split("==")[1],
        source="pypi",
        install=True,
        packages=pins,
    )


def align_pins(reqs: tuple[str, ...], pins: tuple[str, ...]) -> tuple[str, ...]:
    """Each requirement replaced by the pin of the same distribution from `pins`, where there is one."""
    by_name = {p.split("==")[0]: p for p in pins}
    return tuple(by_name.get(r.split("==")[0], r) for r in reqs)
