"""Framework builds: the PyTorch, TensorFlow and JAX candidates, why one cannot serve this machine, the refusals that
name the conflict, and the FrameworkPlan of the chosen build with the builds it passed over. Installable targets
only; Colab and Jetson take the platform's builds (provision.resolver.colab, .jetson)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from provision.compat import GPU, JaxRow, TFRow, TorchRow
from provision.errors import IncompatibleError
from provision.models import FrameworkName, FrameworkPlan, FrameworkRequest
from provision.resolver.context import Ctx
from provision.resolver.links import cudnn_supports, has_kernels, in_range, pin_matches, toolkit_builds
from provision.versions import V


@dataclass(frozen=True)
class Fw:
    """One framework build candidate (PyTorch, TensorFlow or JAX row), normalised."""

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
    row: TorchRow | TFRow | JaxRow
    index: str = "pypi"  # the index that serves the build: pypi | pytorch


def torch_candidates(ctx: Ctx) -> list[Fw]:
    out = []
    for r in ctx.db.torch:
        if r.pypi_default:
            req, index, served_by = f"torch=={r.version}", None, "pypi"
        else:
            req, index, served_by = f"torch=={r.version}+{r.variant}", _variant_url(ctx.indexes.get("pytorch"), r.variant), "pytorch"
        out.append(
            Fw(
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


def tf_candidates(ctx: Ctx) -> list[Fw]:
    return [
        Fw("tensorflow", "tensorflow", r.version, None, r.cuda, r.cudnn, (), None, r.requirement, None, r.numpy_major, r.source, r)
        for r in ctx.db.tensorflow
    ]


def jax_candidates(ctx: Ctx) -> list[Fw]:
    """jax[cuda12] / jax[cuda13] of each release: the extra brings jaxlib, the CUDA plugin and NVIDIA's wheels."""
    return [
        Fw("jax", "jax", r.version, r.extra, r.cuda, r.cudnn, r.arch, r.ptx, f"jax[{r.extra}]=={r.version}", None,
           r.numpy_major, r.source, r)
        for r in ctx.db.jax
    ]


def candidates(ctx: Ctx, name: str) -> list[Fw]:
    """Every build of the named framework the database has."""
    if name == "pytorch":
        return torch_candidates(ctx)
    return jax_candidates(ctx) if name == "jax" else tf_candidates(ctx)


def _build(fw: Fw) -> str:
    """How a build is named in messages: torch 2.6.0+cu124, jax 0.12.0.1[cuda13]."""
    if fw.name == "jax":
        return f"jax {fw.version}[{fw.variant}]"
    return f"torch {fw.version}+{fw.variant}"


def _runs_on(fw: Fw, gpu: GPU) -> bool:
    """Whether the build has code for this GPU at all (torch: kernels or PTX; TensorFlow: its compute capability
    floor). A build that runs on the GPU but fails another link is a near miss worth explaining."""
    if isinstance(fw.row, TFRow):
        return V(gpu.cc) >= V(fw.row.min_cc)
    return has_kernels(fw.arch, fw.ptx, gpu) is not None


def fw_problem(ctx: Ctx, fw: Fw, req: FrameworkRequest) -> str | None:
    """Why this build cannot serve this machine, or None when it can (ignoring the rest of the stack)."""
    gpu, cpu = ctx.gpu, ctx.profile.hardware.cpu
    if not pin_matches(req.version, fw.version):
        return f"{fw.name} {fw.version} is not the pinned {req.version}"
    row = fw.row
    if isinstance(row, TFRow):
        # The wheels' instruction-set flags are x86's (AVX, AVX2): an aarch64 CPU has none of them and needs none.
        x86 = ctx.profile.target.arch == "x86_64"
        missing = [f for f in row.cpu_flags if f not in cpu.flags] if x86 else []
        if missing:
            return (
                f"TensorFlow {fw.version} wheels use {'/'.join(m.upper() for m in missing)}, which the "
                f"{cpu.model} lacks (they die with SIGILL)"
            )
        if V(gpu.cc) < V(row.min_cc):
            return f"TensorFlow {fw.version} needs compute capability {row.min_cc}+, {gpu.model} has {gpu.cc}"
    else:
        if has_kernels(fw.arch, fw.ptx, gpu) is None:
            what = "'s CUDA plugin" if isinstance(row, JaxRow) else ""
            return (
                f"{_build(fw)}{what} has kernels for {';'.join(fw.arch) or 'no architecture'}"
                f"{' (+PTX ' + fw.ptx + ')' if fw.ptx else ''}, none that runs on {gpu.sm}"
            )
    # Python after the GPU: the hardware cannot change, the Python can, so the hardware's reason is the one to give.
    if not in_range(ctx.python, row.python_min, row.python_max):
        return f"{fw.name} {fw.version} supports Python {row.python_min}-{row.python_max}, not {ctx.python}"
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
            f"{_build(fw)} comes only from the {fw.index} index, which is off here "
            f"(software.indexes.{fw.index}: false, or --index {fw.index}=off)"
        )
    return None


def refuse_framework(ctx: Ctx, req: FrameworkRequest, cands: list[Fw]) -> IncompatibleError:
    gpu = ctx.gpu
    unpinned = FrameworkRequest(name=req.name)
    works = sorted({fw.version for fw in cands if fw_problem(ctx, fw, unpinned) is None}, key=V, reverse=True)
    pinned = [fw for fw in cands if pin_matches(req.version, fw.version)]
    if req.version and not pinned:
        # The pinned release is not in the database: say so, instead of blaming another release for not being it.
        known = sorted({fw.version for fw in cands}, key=V)
        why = (
            f"{req.name} {req.version} is not in the database (known releases: {', '.join(known) or 'none'}), so "
            f"nothing says which architectures its builds carry"
        )
    else:
        ranked = sorted(
            ((fw, fw_problem(ctx, fw, unpinned)) for fw in (pinned or cands)), key=lambda p: V(p[0].version), reverse=True
        )
        problems = [(fw, p) for fw, p in ranked if p]
        no_kernels = [fw for fw, p in problems if "none that runs on" in p]
        if req.name in ("pytorch", "jax") and problems and len(no_kernels) == len(problems):
            # Every build of the pinned release lacks kernels for this GPU: that is the conflict, name both sides.
            arch = sorted({a for fw in no_kernels for a in fw.arch}, key=V)
            last = max((fw for fw in cands if has_kernels(fw.arch, fw.ptx, gpu)), key=lambda f: V(f.version), default=None)
            why = (
                f"no {req.name} {req.version or ''} build has {gpu.sm} kernels ({gpu.model}): its builds "
                f"({', '.join(sorted({f.variant or '' for f in no_kernels}))}) carry {';'.join(arch)}"
            ).replace("  ", " ")
            if last is not None:
                why += f"; the newest release with {gpu.sm} kernels is {_build(last).split(' ', 1)[1]}"
        else:
            why = problems[0][1] if problems else f"no {req.name} build in the database"
    gap = None if req.version else _python_gap(ctx, req, cands)
    if gap is not None:
        why = gap[0]
    alternatives = [gap[1]] if gap is not None else []
    if works and req.version:
        alternatives.append(f"{req.name} {works[0]} (drop or change the version pin)")
    if req.name == "tensorflow" and ctx.profile.target.arch == "x86_64" and "avx" not in ctx.profile.hardware.cpu.flags:
        alternatives += [
            "PyTorch (its wheels pick CPU kernels at run time and run without AVX)",
            "TensorFlow built from source for this CPU",
        ]
    if not alternatives:
        alternatives.append(f"remove {req.name} from software.frameworks")
    return IncompatibleError(f"no {req.name} build fits: {why}", alternatives=alternatives, where=ctx.where)


def _python_gap(ctx: Ctx, req: FrameworkRequest, cands: list[Fw]) -> tuple[str, str] | None:
    """Where builds run on the GPU but none has wheels for the plan's Python: the reason, naming the newest release
    for the nearest Python that has them, and that Python as the way out. None where the Python is not the cause."""
    runs = [fw for fw in cands if _runs_on(fw, ctx.gpu)]
    if not runs or any(in_range(ctx.python, fw.row.python_min, fw.row.python_max) for fw in runs):
        return None
    low = min((fw.row.python_min for fw in runs), key=V)
    nearest = low if V(ctx.python) < V(low) else max((fw.row.python_max for fw in runs), key=V)
    best = max((fw for fw in runs if in_range(nearest, fw.row.python_min, fw.row.python_max)), key=lambda f: V(f.version))
    if fw_problem(dataclasses.replace(ctx, python=nearest), best, FrameworkRequest(name=req.name)) is not None:
        return None  # another Python would not be enough (a CPU without AVX, an aarch64 build): that reason stands
    return (
        f"no {req.name} release in the database has wheels for Python {ctx.python}; the newest for Python {nearest} "
        f"is {req.name} {best.version}, which supports Python {best.row.python_min}-{best.row.python_max}",
        f'software.python: "{nearest}" ({req.name} {best.version}), or remove {req.name} from software.frameworks',
    )


def check_framework_cuda_pin(ctx: Ctx, req: FrameworkRequest, ok: list[Fw]) -> None:
    """The first framework sets the environment's CUDA: a CUDA pin no fitting build is made with is a conflict
    between the pin and the GPU's kernels in that CUDA's builds. Say which builds, and from which arch they start."""
    sw, gpu = ctx.profile.software, ctx.gpu
    if any(pin_matches(sw.cuda, fw.cuda) for fw in ok):
        return
    pool = candidates(ctx, req.name)
    with_pin = [fw for fw in pool if pin_matches(sw.cuda, fw.cuda) and pin_matches(req.version, fw.version)]
    fits = sorted(ok, key=lambda f: V(f.version), reverse=True)
    best = fits[0]
    if with_pin:
        lowest = sorted({a for fw in with_pin for a in fw.arch}, key=V)
        variants = ", ".join(sorted({fw.variant or fw.cuda for fw in with_pin}))
        problem = fw_problem(ctx, with_pin[-1], FrameworkRequest(name=req.name))
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


def framework_plan(ctx: Ctx, fw: Fw) -> FrameworkPlan:
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
    pool = candidates(ctx, fw.name)
    newer = [c for c in pool if V(c.version) > V(fw.version) or (c.version == fw.version and c.variant != fw.variant)]
    req = FrameworkRequest(name=fw.name)
    ranked = [(c, fw_problem(ctx, c, req)) for c in sorted(newer, key=lambda c: V(c.version), reverse=True)]
    problems = [(c, p) for c, p in ranked if p]
    # The near misses (builds that have kernels for this GPU but fail another link) teach the most; then the newest.
    near = [p for c, p in problems if _runs_on(c, gpu)]
    rejected = list(dict.fromkeys(near[:1] + [p for _, p in problems[:1]]))
    if rejected:
        why += "; passed over: " + "; ".join(rejected)
    # Same release, other index: builds that fit as well and lost only to the policy's preference for PyPI's build.
    policy = ctx.db.policy
    if policy is not None and policy.prefer_pypi_builds and fw.index == "pypi":
        also = [c for c, p in ranked if p is None and c.version == fw.version and c.index != "pypi"]
        if also:
            variants = sorted({c.variant or "" for c in also}, key=lambda v: (len(v), v))
            why += (
                f"; the release's {', '.join(variants)} build{'s' if len(variants) > 1 else ''} from the "
                f"{' and '.join(sorted({c.index for c in also}))} index would fit too, but PyPI's own build of a "
                f"release is preferred (policy prefer_pypi_builds)"
            )
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


