"""The common lane: what every plan gets whatever its target kind, around the driver/CUDA/framework choice of its
lane: the package indexes, hardware warnings (FP16, AVX), Python and its environment, NumPy, Jupyter, the verifier's
requirements and the container image."""

from __future__ import annotations

from provision.compat import CompatDB, JetPack
from provision.errors import IncompatibleError
from provision.models import (
    AptRepoPlan,
    CudaPlan,
    CudnnPlan,
    FrameworkPlan,
    ImagePlan,
    IndexName,
    IndexPlan,
    InstallerPlan,
    JupyterPlan,
    ManagedPython,
    Profile,
    PythonPlan,
    VerifyPlan,
)
from provision.resolver.context import Ctx
from provision.resolver.links import in_range
from provision.resolver.stack import align_pins, pypi_cuda
from provision.versions import V, major


def plan_indexes(profile: Profile, db: CompatDB) -> tuple[dict[str, str | None], tuple[IndexPlan, ...]]:
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


def index_reason(ctx: Ctx, plans: tuple[IndexPlan, ...]) -> None:
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


def warn_hardware(ctx: Ctx) -> None:
    gpu, policy = ctx.gpu, ctx.db.policy
    assert policy is not None  # load_db always reads data/policy.yaml
    if gpu.confidence in ("described", "driver-list"):
        pass  # its FP16 rate is not known: the table's rows are what these warnings rest on
    elif gpu.fp16_tflops is None:
        ctx.warnings.append(
            f"{gpu.model} ({gpu.arch}) has no native FP16 arithmetic: train in FP32; AMP/fp16 gives no speed-up"
        )
    elif gpu.fp32_tflops is not None and gpu.fp16_tflops / gpu.fp32_tflops < policy.fp16_slow_ratio:
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


def _tool(ctx: Ctx, name: str, numpy_major: int | None = None, newest: str | None = None) -> str | None:
    rows = [t for t in ctx.db.tools if t.name == name and in_range(ctx.python, t.python_min, t.python_max)]
    if numpy_major is not None:
        rows = [t for t in rows if major(t.requirement.split("==")[1]) == numpy_major] or rows
    if newest is not None:
        rows = [t for t in rows if V(t.requirement.split("==")[1]) <= V(newest)]
    rows.sort(key=lambda t: V(t.requirement.split("==")[1]), reverse=True)
    return rows[0].requirement if rows else None


def numpy_requirement(ctx: Ctx, fws: tuple[FrameworkPlan, ...]) -> str:
    """The numpy every planned framework accepts: torch < 2.3 is built against numpy 1, TF < 2.18 requires < 2."""
    majors = [r.numpy_major for f in fws for r in ctx.db.torch if f.name == "pytorch" and r.version == f.version][:1]
    majors += [r.numpy_major for f in fws for r in ctx.db.tensorflow if f.name == "tensorflow" and r.version == f.version]
    majors += [r.numpy_major for f in fws for r in ctx.db.jax if f.name == "jax" and r.version == f.version][:1]
    caps = [r.numpy_max for f in fws for r in ctx.db.tensorflow
            if f.name == "tensorflow" and r.version == f.version and r.numpy_max]
    req = _tool(ctx, "numpy", min(majors) if majors else None, min(caps, key=V) if caps else None)
    if req is None:
        raise IncompatibleError(f"no numpy build in the database for Python {ctx.python}", where=ctx.where)
    return req


def python_plan(ctx: Ctx, fws: tuple[FrameworkPlan, ...]) -> PythonPlan:
    """The interpreter and environment (_interpreter_plan), and the installer of its wheels (installer_plan)."""
    plan = _interpreter_plan(ctx, fws)
    installer = installer_plan(ctx)
    return plan.model_copy(update={"installer": installer}) if installer is not None else plan


def installer_plan(ctx: Ctx) -> InstallerPlan | None:
    """uv (data/installer.yaml) for the target's architecture; None where the database names no wheel for it, where
    the environment's Python is older than uv supports, and on Colab, whose environment sees the platform's packages:
    uv does not count what the interpreter's own site-packages hold (it installs a second copy; pip counts them).
    The environment's own pip installs there."""
    uv = ctx.db.installer
    wheel = uv.wheel(ctx.profile.target.arch) if uv is not None else None
    if uv is None or wheel is None or V(ctx.python) < V(uv.python_min) or ctx.profile.target.kind == "colab":
        return None
    ctx.reason(
        "installer",
        f"uv {uv.version}",
        f"the environment's wheels are installed with `uv pip install` (measured against pip on the same hash-checked "
        f"wheelhouse: 2.0-3.5x faster on a real disk, about half the CPU), byte-compiled as pip does; the image's "
        f"with --require-hashes. uv's own wheel {wheel.file}, sha256 {wheel.sha256[:12]}..., checked before it is "
        f"unpacked, root-owned in {uv.prefix}; the environment keeps its pip",
        wheel.source,
    )
    return InstallerPlan(tool="uv", version=uv.version, wheel=wheel.file, url=wheel.url, sha256=wheel.sha256,
                         prefix=uv.prefix)


def _interpreter_plan(ctx: Ctx, fws: tuple[FrameworkPlan, ...]) -> PythonPlan:
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
    if ctx.managed is not None:
        return _managed_python(ctx, ranges)
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


def _managed_python(ctx: Ctx, ranges: list[str]) -> PythonPlan:
    """python-build-standalone's CPython, where the distribution's python3 is outside what the pins allow."""
    db, choice = ctx.db, ctx.managed
    assert choice is not None and db.policy is not None
    build = choice.build
    prefix = f"{db.python_install_root}/cpython-{build.version}+{build.build}"
    where = f"the mirror {choice.mirror} (or its SHA256SUMS)" if choice.mirror else "python-build-standalone's release"
    ctx.reason(
        "python",
        f"Python {ctx.python} (managed)",
        f"{choice.why}. python-build-standalone's CPython {build.version} (release {build.build}, the build uv "
        f"installs), from {where}, sha256 {build.sha256[:12]}... checked before it is unpacked, root-owned in "
        f"{prefix}" + (f"; fits {', '.join(ranges)}" if ranges else ""),
        build.source,
    )
    return PythonPlan(
        version=ctx.python,
        source="managed",
        interpreter=f"{prefix}/bin/python{ctx.python}",
        packages=(),
        venv=db.policy.venv,
        managed=ManagedPython(
            version=build.version,
            build=build.build,
            archive=build.archive,
            sha256=build.sha256,
            url=db.python_release_url.format(build=build.build, archive=build.archive.replace("+", "%2B")),
            mirror=choice.mirror,
            prefix=prefix,
        ),
    )


def jupyter_plan(ctx: Ctx) -> JupyterPlan:
    spec = ctx.profile.software.jupyter
    enabled = spec.enabled
    if ctx.profile.target.kind == "colab" and enabled:
        ctx.reason("jupyter", "none", "Colab is itself the notebook server", "https://colab.research.google.com/")
        enabled = False
    reqs: tuple[str, ...] = ()
    if enabled:
        lab, kernel = _tool(ctx, "jupyterlab"), _tool(ctx, "ipykernel")
        if lab is None or kernel is None:
            floor = min((t.python_min for t in ctx.db.tools if t.name == "jupyterlab"), key=V, default="?")
            raise IncompatibleError(
                f"JupyterLab in the database needs Python {floor}+, this target has {ctx.python}",
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


def verify_plan(ctx: Ctx, cuda: CudaPlan, numpy_req: str) -> VerifyPlan:
    row = pypi_cuda(ctx, cuda.version) if cuda.source != "platform" else None
    nvrtc = align_pins((row.nvrtc,), ctx.fw_pins) if row else ()
    return VerifyPlan(
        expect_gpu=True,
        target_arch=ctx.gpu.sm,
        nvrtc_requirements=nvrtc,
        cuda_python_requirements=(),
        numpy_requirement=numpy_req,
    )


def image_plan(ctx: Ctx, cuda: CudaPlan, cudnn: CudnnPlan, jp: JetPack | None) -> ImagePlan:
    db, sw, target = ctx.db, ctx.profile.software, ctx.profile.target
    platform = "linux/arm64" if target.arch == "aarch64" else "linux/amd64"
    # The environment's interpreter: the distribution's python3 and its venv module, or, for a managed Python, the
    # archive the Dockerfile unpacks (python-build-standalone's builds are self-contained: no OS package needed).
    apt: set[str] = set() if ctx.managed is not None else set(
        ctx.system.python_packages if ctx.system else ("python3", "python3-venv"))
    repo: AptRepoPlan | None = None
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
            repo = nvidia_apt_repository(ctx, cuda, cudnn)
            if repo is not None:
                why += (f"; NVIDIA's repository {repo.url} is added, with its key used only when its fingerprint is "
                        f"{repo.key_fingerprint}")
    source = next((r.source for r in db.images if r.cuda == cuda.version), None) or (
        jp.source if jp is not None else (ctx.system.source if ctx.system else "https://hub.docker.com/")
    )
    ctx.reason("image", base, why + f"; {platform}", source)
    return ImagePlan(base_image=base, platform=platform, devel=sw.devel, apt_packages=tuple(sorted(apt)),
                     apt_repository=repo)


def nvidia_apt_repository(ctx: Ctx, cuda: CudaPlan, cudnn: CudnnPlan) -> AptRepoPlan | None:
    """NVIDIA's CUDA repository for an image on the distribution's own base, where the plan installs CUDA or cuDNN
    from it (as the hosts' cuda role adds it); None where nothing planned comes from it."""
    wanted = (cuda.install and cuda.source == "nvidia-repo") or (cudnn.install and cudnn.source == "nvidia-repo")
    repo, system = ctx.db.nvidia_repo, ctx.system
    if not wanted or repo is None or system is None or system.nvidia_repo is None:
        return None
    arch = repo.arch_dirs.get(ctx.profile.target.arch)
    if arch is None:
        return None
    url = repo.url.format(slug=system.nvidia_repo, arch=arch)
    return AptRepoPlan(url=url, key_url=url + repo.key_file, key_fingerprint=repo.key_fingerprint, name="cuda")


