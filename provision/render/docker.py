"""Render the Dockerfile of a profile's image from its `Plan` (templates/Dockerfile.j2).

Everything the template prints comes from the Plan; this module only derives the few things a template should
not compute (which wheel groups to install, the label list, the driver requirement) and keeps them sorted so
the output is byte-for-byte deterministic. The build context that goes with the Dockerfile is made by
`provision.runners.docker`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import jinja2

from provision import __version__
from provision.errors import UsageError
from provision.models import Plan
from provision.resources import share_dir

TEMPLATE = "Dockerfile.j2"
LAUNCHER = Path("docker") / "jupyter_launch.py"  # under templates/, copied into the build context
IMAGE_UID = 1000  # the first regular account on Debian/Ubuntu; matches a typical host user for bind mounts

BaseKind = Literal["cuda", "l4t", "plain"]


def base_kind(image: str) -> BaseKind:
    """What a base image brings, judged from its repository name (mirrors keep the last path parts).

    `nvidia/cuda` images carry the CUDA user-space (and cuDNN when the tag says `cudnn`); NVIDIA's L4T images
    (`l4t-base`, `l4t-jetpack`, `l4t-cuda`, `l4t-ml`) are Jetson bases whose CUDA comes with JetPack. Anything
    else is a plain distribution image on which the plan's packages are installed.
    """
    repo, _ = _split_reference(image)
    if repo == "nvidia/cuda" or repo.endswith("/nvidia/cuda"):
        return "cuda"
    if repo.rsplit("/", 1)[-1].startswith("l4t-"):
        return "l4t"
    return "plain"


def _split_reference(image: str) -> tuple[str, str]:
    """'reg:5000/nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04@sha256:..' -> ('reg:5000/nvidia/cuda', '12.6.3-...')."""
    name = image.split("@", 1)[0]
    repo, sep, tag = name.rpartition(":")
    if not sep or "/" in tag:
        return name, ""
    return repo, tag


def base_has_cudnn(image: str) -> bool:
    return base_kind(image) == "l4t" or base_kind(image) == "cuda" and "cudnn" in _split_reference(image)[1]


def with_base_image(plan: Plan, image: str | None) -> Plan:
    """The same plan with a user-given base image (`--base-image`: a mirror, an air-gapped registry, a local image)."""
    if not image or image == plan.image.base_image:
        return plan
    return plan.model_copy(update={"image": plan.image.model_copy(update={"base_image": image})})


@dataclass(frozen=True)
class WheelGroup:
    """One directory of wheels in the build context, installed by one layer of the venv stage."""

    name: str
    title: str
    why: str
    requirements: tuple[str, ...]
    index_url: str | None = None  # where the controller downloads them from (None: PyPI)
    no_deps: bool = False  # exactly the listed wheels: download and install with --no-deps


def _cuda_from_wheels(plan: Plan) -> bool:
    return plan.cuda.install and plan.cuda.source == "pypi" and base_kind(plan.image.base_image) == "plain"


def _cudnn_from_wheels(plan: Plan) -> bool:
    return (
        plan.cudnn.install
        and plan.cudnn.source == "pypi"
        and base_kind(plan.image.base_image) != "l4t"
        and not base_has_cudnn(plan.image.base_image)
    )


def cuda_apt_packages(plan: Plan) -> tuple[str, ...]:
    """CUDA/cuDNN packages from the distribution's archive that the image installs (empty when the base has them)."""
    kind = base_kind(plan.image.base_image)
    packages: set[str] = set()
    for part, source in (("cuda", plan.cuda.source), ("cudnn", plan.cudnn.source)):
        install = plan.cuda.install if part == "cuda" else plan.cudnn.install
        if not install or source in ("pypi", "platform", "framework", None):
            continue
        if part == "cuda" and kind != "plain" or part == "cudnn" and base_has_cudnn(plan.image.base_image):
            continue  # already in the base image
        if source == "nvidia-repo" and kind == "plain":
            raise UsageError(
                f"{plan.profile}: the plan installs {part} from NVIDIA's apt repository, which the plain base image "
                f"{plan.image.base_image} does not have configured; use an nvidia/cuda base image (--base-image) "
                "or a profile whose CUDA comes from PyPI"
            )
        packages.update(plan.cuda.packages if part == "cuda" else plan.cudnn.packages)
    return tuple(sorted(packages))


def wheel_groups(plan: Plan, *, skip_frameworks: bool = False) -> list[WheelGroup]:
    """The wheel directories, in layer order: what changes least first."""
    groups: list[WheelGroup] = []
    cuda_reqs: list[str] = []
    if _cuda_from_wheels(plan):
        cuda_reqs += plan.cuda.packages
    if _cudnn_from_wheels(plan):
        cuda_reqs += plan.cudnn.packages
    if cuda_reqs:
        groups.append(WheelGroup(
            "cuda", "CUDA user-space and cuDNN from PyPI wheels",
            "the largest layer; it changes only when the planned CUDA or cuDNN does",
            tuple(sorted(set(cuda_reqs))), no_deps=True,
        ))
    if not skip_frameworks:
        for fw in sorted(plan.frameworks, key=lambda f: f.name):
            groups.append(WheelGroup(
                f"framework-{fw.name}", f"{fw.package} {fw.version}" + (f" ({fw.variant})" if fw.variant else ""),
                "large; changes with the framework pin, less often than the tools after it",
                tuple(sorted(fw.requirements)), fw.index_url,
            ))
    verify = plan.verify
    verify_reqs = {*verify.nvrtc_requirements, *verify.cuda_python_requirements, verify.numpy_requirement}
    groups.append(WheelGroup(
        "verify", "the verification program's NVRTC and NumPy",
        "`python -m provision.verify` compiles its kernels with NVRTC and checks the results with NumPy",
        tuple(sorted(verify_reqs)),
    ))
    if plan.jupyter.enabled:
        groups.append(WheelGroup(
            "jupyter", "JupyterLab", "the wheels most likely to change, so they come last",
            tuple(sorted(plan.jupyter.requirements)),
        ))
    return groups


def frameworks_label(plan: Plan, *, skip_frameworks: bool = False) -> str:
    if skip_frameworks and plan.frameworks:
        return "skipped"
    if not plan.frameworks:
        return "none"
    return ",".join(f"{f.package}=={f.version}" + (f"+{f.variant}" if f.variant else "") for f in
                    sorted(plan.frameworks, key=lambda f: f.name))


def require_cuda(plan: Plan) -> tuple[str, str]:
    """NVIDIA_REQUIRE_CUDA and why. The toolkit compares it with the host driver before starting a container.

    `cuda>=X.Y` is what NVIDIA's images say, but it refuses drivers that run CUDA X.Y through minor-version
    compatibility (a 12.4 driver runs the 12.6 runtime); where the plan knows the lowest driver that runs its
    CUDA, the requirement names that driver instead.
    """
    if plan.driver.min_version:
        return (f"driver>={plan.driver.min_version}",
                f"The plan's CUDA {plan.cuda.version} runs on drivers from {plan.driver.min_version} on.")
    return f"cuda>={plan.cuda.version}", f"The plan's CUDA {plan.cuda.version} needs a driver that reports it."


def labels(plan: Plan, *, skip_frameworks: bool = False) -> list[tuple[str, str]]:
    """OCI labels plus the resolved stack, sorted by key (no build date: the output must be reproducible)."""
    values = {
        "org.opencontainers.image.title": f"provision-{plan.profile}",
        "org.opencontainers.image.description": (
            f"{plan.gpu.model} deep-learning image: CUDA {plan.cuda.version}, cuDNN {plan.cudnn.version or 'none'}, "
            f"Python {plan.python.version}, frameworks {frameworks_label(plan, skip_frameworks=skip_frameworks)}"
        ),
        "org.opencontainers.image.version": __version__,
        "org.opencontainers.image.base.name": plan.image.base_image,
        "org.opencontainers.image.vendor": "provision",
        "io.provision.profile": plan.profile,
        "io.provision.os": plan.target.os_id,
        "io.provision.platform": plan.image.platform,
        "io.provision.cuda": plan.cuda.version,
        "io.provision.cuda.source": plan.cuda.source,
        "io.provision.cudnn": plan.cudnn.version or "none",
        "io.provision.driver.min": plan.driver.min_version or "unknown",
        "io.provision.driver.branch": plan.driver.branch or "platform",
        "io.provision.gpu.model": plan.gpu.model,
        "io.provision.gpu.sm": plan.gpu.sm,
        "io.provision.python": plan.python.version,
        "io.provision.frameworks": frameworks_label(plan, skip_frameworks=skip_frameworks),
        "io.provision.devel": "true" if plan.image.devel else "false",
        # Not the port: it is in the image's ExposedPorts, and a label that held it would make a port change
        # rerun the LABEL step too (see the template's last lines).
        "io.provision.jupyter": "enabled" if plan.jupyter.enabled else "disabled",
        "io.provision.user": plan.user,
        "io.provision.version": __version__,
    }
    for key, value in values.items():
        if '"' in value or "\\" in value or "\n" in value:
            raise UsageError(f"{plan.profile}: label {key} would contain a quote, backslash or newline: {value!r}")
    return sorted(values.items())


def source_name(plan: Plan, profile_path: str | Path | None) -> str:
    """`profiles/<name>.yaml`: the profile's folder and file name, never an absolute path (golden files, privacy)."""
    path = Path(profile_path or plan.profile_path or f"profiles/{plan.profile}.yaml")
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(share_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # a Dockerfile, not HTML  # noqa: S701
    )


_BASE_TEXT = {
    "cuda": "NVIDIA CUDA image: CUDA user-space from the base",
    "l4t": "NVIDIA L4T image: CUDA and cuDNN from JetPack",
    "plain": "plain distribution image: CUDA user-space installed as planned",
}


def render_dockerfile(plan: Plan, profile_path: str | Path | None = None, *, skip_frameworks: bool = False) -> str:
    """The Dockerfile for `plan` (its `image.base_image` already chosen; see `with_base_image`).

    Args:
        plan: the resolved plan.
        profile_path: the profile the plan came from, named in the header (`profiles/<name>.yaml`).
        skip_frameworks: leave the framework wheels out (quick builds, tests); recorded in io.provision.frameworks.

    Raises:
        UsageError: the plan cannot be built on its base image (e.g. NVIDIA's apt repository on a plain base).
    """
    kind = base_kind(plan.image.base_image)
    cuda_apt = cuda_apt_packages(plan)
    apt = sorted({*plan.image.apt_packages, *plan.python.packages, *cuda_apt})
    require, require_why = require_cuda(plan)
    return _env().get_template(TEMPLATE).render(
        plan=plan,
        version=__version__,
        source=source_name(plan, profile_path),
        base_kind_text=_BASE_TEXT[kind],
        frameworks_label=frameworks_label(plan, skip_frameworks=skip_frameworks),
        apt_packages=apt,
        cuda_apt_packages=cuda_apt,
        wheel_groups=wheel_groups(plan, skip_frameworks=skip_frameworks),
        require_cuda=require,
        require_cuda_why=require_why,
        labels=labels(plan, skip_frameworks=skip_frameworks),
        uid=IMAGE_UID,
        cuda_home=plan.cuda.home if kind == "plain" else None,  # CUDA in the base: its own layout, not the host's
    )
