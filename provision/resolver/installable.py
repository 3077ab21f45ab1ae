"""The installable lane (target.kind baremetal and cloud): enumerate every (driver branch, CUDA, framework builds,
cuDNN) stack in which every link holds, rank them by data/policy.yaml (frameworks first, then CUDA, cuDNN, driver),
and plan the best one for installing; or refuse with the link that fails."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from provision.compat import Branch, DriverPkg
from provision.errors import IncompatibleError
from provision.resolver.context import Ctx, LanePlans
from provision.resolver.frameworks import (
    Fw,
    candidates,
    check_framework_cuda_pin,
    framework_plan,
    fw_problem,
    refuse_framework,
)
from provision.resolver.links import cudnn_supports, driver_runs, pin_matches, toolkit_builds
from provision.resolver.stack import (
    align_pins,
    check_cuda_pin,
    check_driver_pin_runs_cuda_pin,
    cuda_offered,
    cuda_plan,
    cuda_reason,
    cudnn_options,
    cudnn_plan,
    driver_candidates,
    driver_plan,
    driver_tiers,
    refuse_no_driver,
    with_fabric_manager,
)
from provision.versions import V, major


@dataclass(frozen=True)
class _Stack:
    branch: Branch
    driver_pkg: DriverPkg
    cuda: str
    compat: str  # native | mvc
    fws: tuple[Fw, ...]
    cudnn: str | None


def resolve_installable(ctx: Ctx) -> LanePlans:
    """The best stack of the first driver tier (data/policy.yaml, driver_sources) in which one holds: Debian's own
    packages, else NVIDIA's repository, with the earlier tiers' refusal as the reason for the later one."""
    tiers = driver_tiers(ctx)
    refused: list[tuple[tuple[str, ...], IncompatibleError]] = []
    deeper: list[IncompatibleError] = []  # refusals of tiers that have a driver for the GPU: a link past the driver
    for tier in tiers:
        try:
            best, offered, drivers = _best_stack(ctx, tier)
        except IncompatibleError as exc:
            refused.append((tier, exc))
            if any(ctx.profile.software.driver_branch in (None, b.branch) for b, _ in driver_candidates(ctx, tier)):
                deeper.append(exc)
            continue
        return _plan_installable(ctx, best, offered, drivers, refused)
    # The refusal that says most: the last tier's that got past the driver (it names the most branches), else the
    # first tier's (the distribution's own packages).
    raise deeper[-1] if deeper else refused[0][1]


def _best_stack(ctx: Ctx, tier: tuple[str, ...]) -> tuple[_Stack, dict[str, list[str]], list[tuple[Branch, DriverPkg]]]:
    """The best stack whose driver comes from this tier's sources, or the refusal that names the link that fails."""
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    assert ctx.system is not None and db.policy is not None

    drivers = [d for d in driver_candidates(ctx, tier) if sw.driver_branch in (None, d[0].branch)]
    if not drivers:
        raise refuse_no_driver(ctx, tier)
    if ctx.nvswitch:
        drivers = with_fabric_manager(ctx, drivers)

    offered = cuda_offered(ctx, tier)
    check_cuda_pin(ctx, offered)
    cudas = sorted((v for v in offered if toolkit_builds(db, v, gpu) and pin_matches(sw.cuda, v)), key=V, reverse=True)
    check_driver_pin_runs_cuda_pin(ctx, drivers, cudas)

    fw_cands: list[list[Fw]] = []
    for req in sw.frameworks:
        pool = candidates(ctx, req.name)
        ok = [fw for fw in pool if fw_problem(ctx, fw, req) is None]
        if not ok:
            raise refuse_framework(ctx, req, pool)
        fw_cands.append(ok)
    if fw_cands and sw.cuda:
        check_framework_cuda_pin(ctx, sw.frameworks[0], fw_cands[0])

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
                cudnn_opts = cudnn_options(ctx, cuda)
            cudnn_opts = [c for c in cudnn_opts if pin_matches(sw.cudnn, c)]
            if sw.cudnn and not cudnn_opts:
                continue
            for cudnn in cudnn_opts or (None,):
                stacks.append(_Stack(branch, pkg, cuda, compat, tuple(fws), cudnn))

    if not stacks:
        raise _refuse_stack(ctx, drivers, cudas, fw_cands)

    prefer_native = db.policy.prefer_native_cuda and not sw.frameworks
    prefer_pypi = db.policy.prefer_pypi_builds

    def rank(s: _Stack) -> tuple:
        return (
            tuple(V(f.version) for f in s.fws),
            tuple(f.index == "pypi" for f in s.fws) if prefer_pypi else (),
            (s.compat == "native") if prefer_native else True,
            V(s.cuda),
            V(s.cudnn) if s.cudnn else V("0"),
            V(s.branch.branch),
        )

    return max(stacks, key=rank), offered, drivers


def _refuse_stack(ctx: Ctx, drivers: list[tuple[Branch, DriverPkg]], cudas: list[str],
                  fw_cands: list[list[Fw]]) -> IncompatibleError:
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
        pin_rows = [c for c in db.cudnn if pin_matches(sw.cudnn, c.version)]
        span = "; ".join(f"cuDNN {c.version} supports CUDA {c.cuda_min}-{c.cuda_max}, cc {c.min_cc}-{c.max_cc}" for c in pin_rows)
        cuda_side = f"the pinned CUDA {sw.cuda}" if sw.cuda else f"CUDA {', '.join(stack_cudas)}"
        # Name the link that breaks: the GPU (no CUDA helps) before the CUDA.
        gpu_out = bool(pin_rows) and all(not V(c.min_cc) <= V(gpu.cc) <= V(c.max_cc) for c in pin_rows)
        cuda_out = bool(pin_rows) and all(not V(c.cuda_min) <= V(cu) <= V(c.cuda_max) for c in pin_rows
                                          for cu in stack_cudas)
        if gpu_out and cuda_out:
            what = f"the pinned cuDNN {sw.cudnn} supports neither {gpu.model} (cc {gpu.cc}) nor {cuda_side}"
        elif gpu_out:
            what = f"the pinned cuDNN {sw.cudnn} does not support {gpu.model} (cc {gpu.cc}), whatever the CUDA"
        else:
            what = f"the pinned cuDNN {sw.cudnn} does not fit {cuda_side} on {gpu.model} (cc {gpu.cc})"
        return IncompatibleError(
            what + (f": {span}" if span else ": it is not in the database"),
            alternatives=[
                f"cuDNN that fits {cuda_side} and cc {gpu.cc}: {', '.join(supported) or 'none'}",
                "drop software.cudnn",
            ],
            where=ctx.where,
        )
    if fw_cands:
        fw = fw_cands[0][0]
        needs = ", ".join(sorted({f.cuda for f in fw_cands[0]}, key=V))
        return IncompatibleError(
            f"{fw.name} needs CUDA {needs}, which the driver branches {ctx.os_id} offers for {gpu.model} ({branches}) "
            + (f"cannot run together with the pinned CUDA {sw.cuda}" if sw.cuda else "cannot run"),
            alternatives=[*(["drop the software.cuda pin"] if sw.cuda else []), "pin an older framework version",
                          "an OS whose driver branch runs CUDA " + needs],
            where=ctx.where,
        )
    return IncompatibleError(
        f"no driver branch offered ({branches}) runs a CUDA that builds for {gpu.sm}", where=ctx.where
    )


def _plan_installable(ctx: Ctx, best: _Stack, offered: dict[str, list[str]],
                      drivers: list[tuple[Branch, DriverPkg]],
                      refused: list[tuple[tuple[str, ...], IncompatibleError]]) -> LanePlans:
    passed_over = "; ".join(f"not from {' or '.join(tier)}: {exc.message}" for tier, exc in refused)
    driver = driver_plan(ctx, best.branch, best.driver_pkg, drivers, best.cuda, best.compat, passed_over)
    # Frameworks (reasons first: they decide the CUDA)
    fw_plans = tuple(framework_plan(ctx, fw) for fw in best.fws)
    cuda_reason(ctx, best.branch, best.cuda, best.compat, best.fws[0] if best.fws else None)
    cuda = cuda_plan(ctx, best.cuda, offered)
    cudnn = cudnn_plan(ctx, best.cudnn, best.cuda, best.fws)
    # The framework's wheels pin NVIDIA's wheels exactly (torch 2.7.1: nvidia-cuda-nvrtc-cu12==12.6.77, where the
    # CUDA 12.6 row's newest patch is 12.6.85): take its pins, or pip has two answers for one package.
    ctx.fw_pins = tuple(getattr(best.fws[0].row, "pins", ())) if best.fws else ()
    if ctx.fw_pins:
        cuda = cuda.model_copy(update={"packages": align_pins(cuda.packages, ctx.fw_pins)})
        cudnn = cudnn.model_copy(update={"packages": align_pins(cudnn.packages, ctx.fw_pins)})
        ctx.reason("pins", ", ".join(ctx.fw_pins),
                   f"{best.fws[0].requirement} pins these NVIDIA wheels in its Requires-Dist; the plan takes its pins",
                   best.fws[0].source)
    return LanePlans(driver, cuda, cudnn, fw_plans)
