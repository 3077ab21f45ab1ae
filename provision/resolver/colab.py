"""The Colab lane (target.kind colab): the newest runtime in the database owns the driver, CUDA, cuDNN, Python and
the frameworks. Pins must match what it ships; the plan verifies the runtime and installs only what the verifier
needs."""

from __future__ import annotations

from provision.errors import IncompatibleError
from provision.models import FrameworkPlan
from provision.resolver.context import Ctx, LanePlans
from provision.resolver.links import has_kernels, pin_matches
from provision.resolver.platform import check_platform_pins, platform_plans


def resolve_colab(ctx: Ctx) -> LanePlans:
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    rt = db.colab[-1]
    if gpu.model not in rt.gpus:
        raise IncompatibleError(
            f"Colab runtime {rt.runtime} offers {', '.join(rt.gpus)}, not {gpu.model}", where=ctx.where
        )
    check_platform_pins(
        ctx,
        f"Colab's runtime {rt.runtime}",
        (
            (sw.driver_branch, rt.branch, "driver branch"),
            (sw.cuda, rt.cuda, "CUDA"),
            (sw.cudnn, rt.cudnn, "cuDNN"),
            (sw.python, rt.python, "Python"),
        ),
        "drop the {what} pin: Colab's stack is verified, not replaced",
    )
    branch = db.branch(rt.branch)
    tk = db.toolkit(rt.cuda)
    driver, cuda, cudnn = platform_plans(
        ctx,
        driver=(f"R{rt.branch} ({rt.driver}), Colab's", "Colab owns the driver: it is verified, never installed"),
        cuda_reason=(f"CUDA {rt.cuda}, Colab's", "preinstalled on the runtime; verified against this plan"),
        source=rt.source,
        branch=rt.branch,
        driver_version=rt.driver,
        max_cuda=branch.cuda if branch else None,
        min_driver=tk.min_driver if tk else None,
        cuda=rt.cuda,
        cudnn=rt.cudnn,
    )
    fws = []
    for req in sw.frameworks:
        have = next((f for f in rt.frameworks if f.name == req.name), None)
        if have is None or not pin_matches(req.version, have.version):
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
    return LanePlans(driver, cuda, cudnn, tuple(fws))
