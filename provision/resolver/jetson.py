"""The Jetson lane (target.kind jetson): the flashed JetPack release owns the driver (L4T), CUDA, cuDNN and Python;
the module and OS must be the release's, pins must match it, and PyTorch is NVIDIA's JetPack wheel as a hashed
direct reference. The plan verifies the platform's stack and installs nothing of it."""

from __future__ import annotations

from provision.compat import GPU, JetPack
from provision.errors import IncompatibleError
from provision.models import FrameworkPlan, FrameworkRequest, Profile
from provision.resolver.context import Ctx, LanePlans
from provision.resolver.links import pin_matches, toolkit_builds
from provision.resolver.platform import check_platform_pins, platform_plans
from provision.versions import V


def jetpack_target(profile: Profile, jp: JetPack | None, gpu: GPU, os_id: str) -> JetPack:
    """The profile's JetPack release, refused when unknown, on another OS, or for a GPU that is no Jetson module."""
    if jp is None:
        raise IncompatibleError(f"unknown JetPack {profile.target.jetpack}", where=profile.name)
    if jp.os_id != os_id:
        raise IncompatibleError(
            f"JetPack {jp.jetpack} is {jp.os_id.replace('-', ' ')}, the profile says {os_id}",
            alternatives=[f"set target.os to {jp.os_id}"],
            where=profile.name,
        )
    if not gpu.tegra:
        raise IncompatibleError(f"{gpu.model} is not a Jetson module", where=profile.name)
    return jp


def resolve_jetson(ctx: Ctx, jp: JetPack) -> LanePlans:
    """The Jetson lane's driver, CUDA, cuDNN and frameworks: the flashed release's, verified and never installed;
    pins must match the release."""
    db, gpu, sw = ctx.db, ctx.gpu, ctx.profile.software
    if gpu.model not in jp.modules:
        raise IncompatibleError(
            f"JetPack {jp.jetpack} does not support {gpu.model} (it supports {', '.join(jp.modules)})", where=ctx.where
        )
    check_platform_pins(
        ctx,
        f"JetPack {jp.jetpack}",
        ((sw.cuda, jp.cuda, "CUDA"), (sw.cudnn, jp.cudnn, "cuDNN"), (sw.python, jp.python, "Python")),
        "drop the pin, or flash the JetPack release that carries it",
    )
    if sw.driver_branch:
        raise IncompatibleError(
            "Jetson's driver is part of L4T; software.driver_branch does not apply",
            alternatives=["remove software.driver_branch"],
            where=ctx.where,
        )
    if not toolkit_builds(db, jp.cuda, gpu):
        raise IncompatibleError(f"CUDA {jp.cuda} of JetPack {jp.jetpack} cannot build for {gpu.sm}", where=ctx.where)
    driver, cuda, cudnn = platform_plans(
        ctx,
        driver=(
            f"L4T {jp.l4t} (JetPack {jp.jetpack})",
            "the Jetson driver is part of the flashed L4T release: verified, never installed",
        ),
        cuda_reason=(
            f"CUDA {jp.cuda}, JetPack's",
            f"JetPack {jp.jetpack} fixes CUDA {jp.cuda}, cuDNN {jp.cudnn}, "
            f"TensorRT {jp.tensorrt}; desktop PyPI CUDA wheels do not apply on Jetson",
        ),
        source=jp.source,
        branch=None,
        driver_version=jp.l4t,
        max_cuda=jp.cuda,
        min_driver=None,
        cuda=jp.cuda,
        cudnn=jp.cudnn,
    )
    fws = tuple(_jetson_framework(ctx, jp, req) for req in sw.frameworks)
    return LanePlans(driver, cuda, cudnn, fws)


def _jetson_framework(ctx: Ctx, jp: JetPack, req: FrameworkRequest) -> FrameworkPlan:
    """One requested framework on Jetson: only PyTorch, as NVIDIA's wheel for the release, a hashed direct
    reference; refused for anything else, a wheel for another Python, or a wheel without a hash."""
    db, gpu = ctx.db, ctx.gpu
    rows = [r for r in db.jetson_torch if r.jetpack == jp.jetpack and pin_matches(req.version, r.version)]
    if req.name != "pytorch" or not rows:
        # Only releases this module runs: a JetPack for another module is no way out.
        mine = {j.jetpack for j in db.jetpack if gpu.model in j.modules}
        with_torch = sorted({r.jetpack for r in db.jetson_torch if r.jetpack in mine}, key=V)
        raise IncompatibleError(
            f"no {req.name} build for JetPack {jp.jetpack} in the database",
            alternatives=[
                "remove it from software.frameworks",
                f"JetPack releases for {gpu.model} with PyTorch builds: " + (", ".join(with_torch) or "none"),
            ],
            where=ctx.where,
        )
    r = rows[-1]
    if not pin_matches(r.python, jp.python):
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
                *[f"torch {h.version} for JetPack {jp.jetpack}, hashed (drop or change the version pin)"
                  for h in [x for x in db.jetson_torch if x.jetpack == jp.jetpack and x.sha256][-1:]],
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
        f"the PyTorch build for JetPack {jp.jetpack} (CUDA {r.cuda}, {gpu.sm}, Python {r.python}); desktop wheels "
        f"do not run on Jetson, so pip gets this file and checks its sha256, "
        f"{'from ' + r.sha256_from if r.sha256_from else 'hashed where the file was downloaded'}",
        r.source,
    )
    if r.confidence == "unverified":
        ctx.warnings.append(f"the PyTorch wheel for JetPack {jp.jetpack} is unverified here: {r.url}")
    return FrameworkPlan(
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
