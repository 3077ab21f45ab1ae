"""Render the Dockerfile of a profile's image from its `Plan` (templates/Dockerfile.j2).

Everything the template prints comes from the Plan; this module only derives the few things a template should
not compute (which wheel groups to install, the label list, the driver requirement, a managed interpreter's
archive) and keeps them sorted so the output is byte-for-byte deterministic. The build context that goes with the Dockerfile is made by
`provision.runners.docker`.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import jinja2

from provision import __version__
from provision.errors import UsageError, printable, show
from provision.hostfacts import kernel_display_name
from provision.models import FrameworkPlan, ManagedPython, Plan
from provision.plan_rules import IMAGE_REF
from provision.render.role_vars import lab_settings
from provision.resources import share_dir

TEMPLATE = "Dockerfile.j2"
LAUNCHER = Path("docker") / "jupyter_launch.py"  # under templates/, copied into the build context
IMAGE_UID = 1000  # the first regular account on Debian/Ubuntu; matches a typical host user for bind mounts
# The account name the image's shell commands receive; the profile's `software.user` has the same rule.
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
# NVIDIA's cuDNN wheels on PyPI are nvidia-cudnn-cu11, -cu12, -cu13: a framework's dependency on one of them is
# left out where the base image carries cuDNN itself (one cuDNN per image).
CUDNN_WHEEL_PREFIX = "nvidia-cudnn-"

# A managed plan's interpreter (python-build-standalone's install_only archive): its folder in the build context, the
# one top folder of the archive, and where the venv stage reads it (the archive and its SHA256SUMS line).
PYTHON_CONTEXT_DIR = "python"
PYTHON_ARCHIVE_TOP = "python"
PYTHON_TMP = "/tmp/python"
_SHA256 = re.compile(r"[0-9a-f]{64}")

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
    """Whether cuDNN ships in the base: L4T images (JetPack's), and nvidia/cuda images whose tag says `cudnn`."""
    return base_kind(image) == "l4t" or base_kind(image) == "cuda" and "cudnn" in _split_reference(image)[1]


def base_without_cudnn(image: str) -> str | None:
    """The same nvidia/cuda image without cuDNN (`12.6.3-cudnn-runtime-ubuntu24.04` -> `12.6.3-runtime-ubuntu24.04`),
    or None where the base is no nvidia/cuda cuDNN image."""
    if base_kind(image) != "cuda" or not base_has_cudnn(image):
        return None
    repo, tag = _split_reference(image)
    return f"{repo}:{re.sub(r'-cudnn[0-9]*-', '-', tag, count=1)}"


def with_base_image(plan: Plan, image: str | None) -> Plan:
    """The same plan with a user-given base image (`--base-image`: a mirror, an air-gapped registry, a local image)."""
    if not image or image == plan.image.base_image:
        return plan
    if not IMAGE_REF.fullmatch(image) or len(image) > 255:
        raise UsageError(f"--base-image {show(image, 120)!r} is not an image reference "
                         "([registry[:port]/]name[:tag][@sha256:digest], lower-case name)")
    # Another base: the digest seen for the old one (if any) says nothing about it.
    return plan.model_copy(update={"image": plan.image.model_copy(update={"base_image": image, "base_digest": None})})


@dataclass(frozen=True)
class WheelGroup:
    """One directory of wheels in the build context, installed by one layer of the venv stage."""

    name: str
    title: str
    why: str
    requirements: tuple[str, ...]
    index_url: str | None = None  # where the controller downloads them from (None: PyPI)
    no_deps: bool = False  # exactly the listed wheels: download and install with --no-deps
    # Distributions (name prefixes, canonical form) dropped from the group's resolved dependencies: the controller
    # downloads with dependencies, deletes these wheels and lists the rest exactly; the image installs that list
    # with --no-deps. Used for a framework's cuDNN wheels on a base that carries cuDNN.
    leave_out: tuple[str, ...] = ()
    # The installer itself (uv's wheel, plan.python.installer): pip installs it outside the environment, root's,
    # and it installs every group after it.
    installer: bool = False

    @property
    def install_no_deps(self) -> bool:
        """The Dockerfile installs this group with --no-deps (its requirements.txt is then the complete list)."""
        return self.no_deps or bool(self.leave_out)


def _cuda_from_wheels(plan: Plan) -> bool:
    return plan.cuda.install and plan.cuda.source == "pypi" and base_kind(plan.image.base_image) == "plain"


def _cudnn_from_wheels(plan: Plan) -> bool:
    return (
        plan.cudnn.install
        and plan.cudnn.source == "pypi"
        and base_kind(plan.image.base_image) != "l4t"
        and not base_has_cudnn(plan.image.base_image)
    )


def cudnn_in_base(plan: Plan) -> bool:
    """The image's cuDNN is the base image's: no cuDNN is installed on top of it, by wheel or package."""
    return plan.cudnn.version is not None and base_has_cudnn(plan.image.base_image)


def cudnn_origin(plan: Plan, *, skip_frameworks: bool = False) -> str:
    """Where the image's cuDNN comes from, for the Dockerfile's header (a phrase without a final stop)."""
    base = plan.image.base_image
    if plan.cudnn.version is None:
        return "none planned"
    if base_kind(base) == "l4t":
        return f"JetPack's, in the L4T base {base}"
    if cudnn_in_base(plan):
        dropped = [f.package for f in frameworks_with_cudnn_wheels(plan, skip_frameworks=skip_frameworks)]
        return (f"the base image's (its tag says cudnn; `provision build` checks it against the planned "
                f"{plan.cudnn.version})" + (f". One cuDNN: {', '.join(dropped)}'s {CUDNN_WHEEL_PREFIX}* wheels are left out"
                                            if dropped else ""))
    if _cudnn_from_wheels(plan):
        return f"PyPI wheels ({', '.join(sorted(plan.cudnn.packages))}), in the cuda wheel group"
    if plan.cudnn.install and plan.cudnn.source not in ("pypi", "platform", "framework", None):
        return f"the distribution's packages ({', '.join(sorted(plan.cudnn.packages))})"
    return f"as the plan's frameworks bring it ({plan.cudnn.source})"


def frameworks_with_cudnn_wheels(plan: Plan, *, skip_frameworks: bool = False) -> list[FrameworkPlan]:
    """The frameworks whose PyPI wheels depend on NVIDIA's cuDNN wheels, which the image leaves out (cuDNN in base)."""
    if skip_frameworks or not cudnn_in_base(plan) or plan.cudnn.source != "pypi":
        return []
    return [f for f in sorted(plan.frameworks, key=lambda f: f.name) if f.cudnn]


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
        if source == "nvidia-repo" and kind == "plain" and plan.image.apt_repository is None:
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
    uv = plan.python.installer
    if uv is not None:
        groups.append(WheelGroup(
            "installer", f"the installer, uv {uv.version}",
            "it installs every group below; it changes only with data/installer.yaml",
            (uv.requirement,), no_deps=True, installer=True,
        ))
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
        drop_cudnn = {f.name for f in frameworks_with_cudnn_wheels(plan)}
        for fw in sorted(plan.frameworks, key=lambda f: f.name):
            leave_out = (CUDNN_WHEEL_PREFIX,) if fw.name in drop_cudnn else ()
            groups.append(WheelGroup(
                f"framework-{fw.name}", f"{fw.package} {fw.version}" + (f" ({fw.variant})" if fw.variant else ""),
                "large; changes with the framework pin, less often than the tools after it",
                tuple(sorted(fw.requirements)), fw.index_url, leave_out=leave_out,
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
    if plan.pip_index_url:  # a PyPI mirror the profile or --index named: every group not from its own index
        groups = [g if g.index_url else replace(g, index_url=plan.pip_index_url) for g in groups]
    return groups


def frameworks_label(plan: Plan, *, skip_frameworks: bool = False) -> str:
    if skip_frameworks and plan.frameworks:
        return "skipped"
    if not plan.frameworks:
        return "none"
    return ",".join(_framework_label(f) for f in sorted(plan.frameworks, key=lambda f: f.name))


def _framework_label(fw: FrameworkPlan) -> str:
    """torch==2.6.0+cu126 (a build variant), jax[cuda13]==0.12.0.1 (a variant that is an extra of the package, as
    jax's CUDA plugins are: jax==0.12.0.1+cuda13 names no release)."""
    if fw.variant and any(r.startswith(f"{fw.package}[{fw.variant}]") for r in fw.requirements):
        return f"{fw.package}[{fw.variant}]=={fw.version}"
    return f"{fw.package}=={fw.version}" + (f"+{fw.variant}" if fw.variant else "")


@dataclass(frozen=True)
class PythonArchive:
    """A managed plan's interpreter as the image gets it: the archive the build context holds, the sha256 the venv
    stage checks it against before unpacking it, and the prefix it is unpacked to (plan.python.managed.prefix)."""

    name: str  # the archive's file name, as the release and the mirror name it
    sha256: str
    prefix: str
    top: str = PYTHON_ARCHIVE_TOP

    @property
    def context_path(self) -> str:
        """Where the build context holds it (`provision build`, `provision render --image-context`)."""
        return f"{PYTHON_CONTEXT_DIR}/{self.name}"

    @property
    def tmp(self) -> str:
        """Where the venv stage holds the archive and its SHA256SUMS until it is unpacked."""
        return PYTHON_TMP

    @property
    def image_path(self) -> str:
        return f"{PYTHON_TMP}/{self.name}"

    @property
    def sums_file(self) -> str:
        return f"{PYTHON_TMP}/SHA256SUMS"

    @property
    def sums_line(self) -> str:
        """The SHA256SUMS line `sha256sum --check` reads in the venv stage (two spaces, as the releases write it)."""
        return f"{self.sha256}  {self.image_path}"


def python_archive(plan: Plan, sha256: str | None = None) -> PythonArchive | None:
    """The archive of a managed plan (None for the distribution's or the platform's python3), checked against
    `sha256` (default: the database's, plan.python.managed.sha256)."""
    managed: ManagedPython | None = plan.python.managed
    if plan.python.source != "managed" or managed is None:
        return None
    digest = sha256 or managed.sha256
    if not _SHA256.fullmatch(digest):
        raise UsageError(f"{plan.profile}: {digest!r} is not a sha256 for {managed.archive} (64 lower-case hex digits)")
    return PythonArchive(name=managed.archive, sha256=digest, prefix=managed.prefix)


def cudnn_label(plan: Plan) -> str:
    """io.provision.cudnn.source: base-image | pypi | the plan's source (platform, framework, a distribution)."""
    if plan.cudnn.version is None:
        return "none"
    if cudnn_in_base(plan):
        return "base-image"
    return plan.cudnn.source or "none"


def image_account(plan: Plan) -> tuple[str, int, str]:
    """(name, uid, home) of the account the image runs as, checked here as well as in the profile: these go into
    a shell command of the Dockerfile."""
    if not _ACCOUNT.fullmatch(plan.user):
        raise UsageError(f"{plan.profile}: user {plan.user!r} is not a valid account name for the image "
                         "(lower-case letters, digits, '_' and '-', starting with a letter or '_', at most 32); "
                         "set software.user in the profile")
    return plan.user, IMAGE_UID, f"/home/{plan.user}"


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
        "io.provision.cudnn.source": cudnn_label(plan),
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
    if plan.image.base_digest:  # known once `provision build` has seen the base (a saved plan from a build)
        values["org.opencontainers.image.base.digest"] = plan.image.base_digest
    for key, value in values.items():
        # Inside LABEL's double quotes: a quote or backslash would end or escape the value, `$` is substituted.
        if '"' in value or "\\" in value or "$" in value or printable(value) != value:
            raise UsageError(f"{plan.profile}: label {key} would contain a quote, backslash, '$' or control "
                             f"character: {show(value, 120)}")
    return sorted(values.items())


def source_name(plan: Plan, profile_path: str | Path | None) -> str:
    """`profiles/<name>.yaml`: the profile's folder and file name, never an absolute path (golden files, privacy),
    with control characters escaped: it goes into a comment line, which a line break would end."""
    path = Path(profile_path or plan.profile_path or f"profiles/{plan.profile}.yaml")
    return printable(f"{path.parent.name}/{path.name}" if path.parent.name else path.name)


def _one_line(value: object) -> object:
    """The Jinja `finalize` of the Dockerfile: every `{{ value }}` the template prints stays on its line. A value
    with a line break (or any control character) would start a new instruction; the plan's allow-lists
    (provision.plan_rules) keep them out, and this refuses one that got past them rather than writing it."""
    if isinstance(value, str) and printable(value) != value:
        raise UsageError(f"a value for the Dockerfile has control characters ({show(value, 120)}); "
                         "make the plan again with `provision plan`")
    return value


@functools.cache
def _env() -> jinja2.Environment:
    """One per process: Jinja keeps the template compiled (compiling was 94 % of a render: docs/testing.md)."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(share_dir("templates"))), undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
        autoescape=False,  # a Dockerfile, not HTML  # noqa: S701
        finalize=_one_line,
    )


_BASE_TEXT = {
    "cuda": "NVIDIA CUDA image: CUDA user-space from the base",
    "l4t": "NVIDIA L4T image: CUDA and cuDNN from JetPack",
    "plain": "plain distribution image: CUDA user-space installed as planned",
}


@dataclass(frozen=True)
class DockerBuild:
    """The image's Dockerfile as data (issue 54 part 4): rendered once from templates/Dockerfile.j2, whose two
    blocks are its two stages. `venv`: the header and stage 1, the environment built from the wheel directories;
    `runtime`: stage 2, which copies the environment from stage 1. `dockerfile` is the whole file (`provision
    render`, `docker build DIR`); `runtime_from(image)` is stage 2 copying from an image already built from stage 1
    (provision.runners.docker builds the two apart, so the wheels are sent only when the environment changes)."""

    venv: str
    runtime: str
    context: dict[str, Any] = field(repr=False, compare=False)

    @property
    def dockerfile(self) -> str:
        return self.venv + self.runtime

    def runtime_from(self, venv_image: str) -> str:
        """Stage 2 with its `COPY --from` naming `venv_image`, rendered from the same block with that one value."""
        return _render_block("runtime", self.context | {"venv_from": venv_image})


def _render_block(name: str, context: dict[str, Any]) -> str:
    template = _env().get_template(TEMPLATE)
    return "".join(template.blocks[name](template.new_context(context)))


def image_build(plan: Plan, profile_path: str | Path | None = None, *, skip_frameworks: bool = False,
                python_sha256: str | None = None) -> DockerBuild:
    """The Dockerfile for `plan` (its `image.base_image` already chosen; see `with_base_image`), as its two stages.

    Args:
        plan: the resolved plan.
        profile_path: the profile the plan came from, named in the header (`profiles/<name>.yaml`).
        skip_frameworks: leave the framework wheels out (quick builds, tests); recorded in io.provision.frameworks.
        python_sha256: a managed plan's archive is checked against this sha256: the one provision.interpreters.fetch
            verified for the file the build context holds (a mirror named with --python-mirror may hold another
            build of the same name, which its own SHA256SUMS vouches for). None: the database's.

    Raises:
        UsageError: the plan cannot be built on its base image (e.g. NVIDIA's apt repository on a plain base).
    """
    kind = base_kind(plan.image.base_image)
    cuda_apt = cuda_apt_packages(plan)
    apt = sorted({*plan.image.apt_packages, *plan.python.packages, *cuda_apt})
    require, require_why = require_cuda(plan)
    user, uid, home = image_account(plan)
    context: dict[str, Any] = {
        "plan": plan,
        "version": __version__,
        "source": source_name(plan, profile_path),
        "base_kind_text": _BASE_TEXT[kind],
        "frameworks_label": frameworks_label(plan, skip_frameworks=skip_frameworks),
        "apt_packages": apt,
        "cuda_apt_packages": cuda_apt,
        # On an nvidia/cuda base (a --base-image) the repository is configured already; a second entry with another
        # key file would make apt refuse both ("Conflicting values set for option Signed-By").
        "apt_repository": plan.image.apt_repository if kind == "plain" else None,
        "wheel_groups": wheel_groups(plan, skip_frameworks=skip_frameworks),
        "require_cuda": require,
        "require_cuda_why": require_why,
        "labels": labels(plan, skip_frameworks=skip_frameworks),
        "uid": uid,
        "home": home,
        "sh_user": shlex.quote(user),
        "sh_home": shlex.quote(home),
        "cudnn_origin": cudnn_origin(plan, skip_frameworks=skip_frameworks),
        "cuda_home": plan.cuda.home if kind == "plain" else None,  # CUDA in the base: its own layout, not the host's
        "jupyter_files": jupyter_files(plan, skip_frameworks=skip_frameworks) if plan.jupyter.enabled else {},
        "python_archive": python_archive(plan, python_sha256),
        "venv_from": "venv",  # stage 2 copies from stage 1 by its name (runtime_from: from an image built from it)
    }
    return DockerBuild(venv=_render_block("venv", context), runtime=_render_block("runtime", context), context=context)


def render_dockerfile(plan: Plan, profile_path: str | Path | None = None, *, skip_frameworks: bool = False,
                      python_sha256: str | None = None) -> str:
    """The whole Dockerfile for `plan` (image_build's two stages, one after the other)."""
    return image_build(plan, profile_path, skip_frameworks=skip_frameworks, python_sha256=python_sha256).dockerfile


def jupyter_files(plan: Plan, *, skip_frameworks: bool = False) -> dict[str, str]:
    """The files the image's environment gets beside JupyterLab, as the jupyter role writes them on a host: {path:
    its JSON, shell-quoted for `printf '%s\\n'`}. The one kernel (python3, the spec ipykernel ships, rewritten with
    the name of what it runs), JupyterLab's settings overrides (no news prompt, no update check) and its page
    configuration (the announcements plugin off, as the Jupyter Docker Stacks have it)."""
    venv = plan.python.venv
    spec = {"argv": [f"{venv}/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": kernel_display_name(plan, skip_frameworks=skip_frameworks), "language": "python",
            "metadata": {"debugger": True}}
    overrides, page_config = lab_settings()
    files = {
        f"{venv}/share/jupyter/kernels/python3/kernel.json": spec,
        f"{venv}/share/jupyter/lab/settings/overrides.json": overrides,
        f"{venv}/etc/jupyter/labconfig/page_config.json": page_config,
    }
    # ASCII JSON (the name's middle dot as \u00b7): printf's %s copies it byte for byte.
    return {path: shlex.quote(json.dumps(content, sort_keys=True)) for path, content in files.items()}
