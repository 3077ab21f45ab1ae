"""Build a profile's image with the Docker SDK: check the engine and the base, fetch wheels, build, summarise.

Steps, each failing with one line that says what, where and what to do:

1. `connect()`: the Docker engine answers (DOCKER_HOST or the default socket).
2. `check_platform()`: the engine can run the plan's platform (Jetson images are linux/arm64).
3. `ensure_base()`: the base image is local, or can be pulled.
4. `fetch_wheels()`: each wheel group is downloaded once, on the controller, into
   `provision.state.cache_root()/wheels`, for the image's interpreter, ABI and C library (probed in the base).
   Why here and not in the build: the build then needs no network (an air-gapped engine, a registry mirror
   for the base only), and the wheels of a plan are fetched once however often its layers are rebuilt.
5. `image_build()` (provision.render.docker): the Dockerfile rendered once, as its two stages, after the inputs
   are fetched (a managed plan's checks the sha256 of the archive the context holds).
6. `make_context()`: a temporary directory with the Dockerfile, the wheels (hard links into the cache), the
   verifier sources and the Jupyter launcher; for a managed plan, the interpreter's archive under python/, fetched
   and checked by `provision.interpreters.fetch` as for the hosts (`fetch_python()`, before the wheels: an archive
   that is refused costs no download).
7. `build()`: BuildKit through the Engine API (`stream_build`; provision.runners.buildkit reads its progress),
   streamed to a callback; returns id, size and labels.

This package holds the steps together (`build()`, `write_context()`, `build_context()`); each job is a module of
its own: engine.py (the engine and its platform), base.py (the base image), wheels.py (fetching wheels),
context.py (the build context, and the environment image's name), stream.py (one BuildKit build) and cache.py (the
context's records in the engine's build cache, removed after a build). The names other code uses are imported
here, so `provision.runners.docker.<name>` keeps working.
"""


from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.models import Plan
from provision.render.docker import DockerBuild, image_build, wheel_groups
from provision.runners.docker.base import (
    NV_CUDNN_ENV,
    base_digest,
    check_base_cudnn,
    check_base_digest,
    ensure_base,
    probe_glibc,
)
from provision.runners.docker.cache import (
    CONTEXT_COPY,
    CONTEXT_DROP_BYTES,
    CONTEXT_TAR,
    _build_cache,
    _created,
    drop_context_cache,
)
from provision.runners.docker.context import (
    ContextArchive,
    _venv_tag,
    fetch_python,
    make_context,
    verifier_source,
)
from provision.runners.docker.engine import PLATFORM_MACHINE, Progress, _image_exists, check_platform, connect
from provision.runners.docker.stream import BUILDKIT_API, is_step_line, stream_build
from provision.runners.docker.wheels import (
    LEGACY_MANYLINUX,
    MANYLINUX_FIRST_MINOR,
    WheelTarget,
    fetch_wheels,
    leave_out_wheels,
    wheel_dir,
)
from provision.state import cache_root

__all__ = [
    "BUILDKIT_API", "CONTEXT_COPY", "CONTEXT_DROP_BYTES", "CONTEXT_TAR", "LEGACY_MANYLINUX", "MANYLINUX_FIRST_MINOR",
    "NV_CUDNN_ENV", "PLATFORM_MACHINE", "BuildResult", "ContextArchive", "Progress", "WheelTarget",
    "base_digest", "build", "build_context", "check_base_cudnn", "check_base_digest", "check_platform", "connect",
    "default_tag", "drop_context_cache", "ensure_base", "fetch_python", "fetch_wheels", "is_step_line",
    "leave_out_wheels", "make_context", "probe_glibc", "stream_build", "verifier_source",
    "wheel_dir", "write_context",
    # Private, but tests/support/images.py and tests/integration/test_image.py read the build cache with them.
    "_build_cache", "_created",
]


@dataclass(frozen=True)
class BuildResult:
    image_id: str
    tag: str
    size_bytes: int
    labels: dict[str, str]
    seconds: float
    steps_cached: int
    steps_run: int
    log: list[str] = field(default_factory=list, repr=False)
    venv_image: str = ""  # the environment image the runtime stage copied from
    base_digest: str = ""  # the base image's digest (registry digest, else local image ID); also a label

    def pinned_plan(self, plan: Plan) -> Plan:
        """`plan` with the base digest this build used: saved (`--json`), it rebuilds on exactly that base."""
        if not self.base_digest.startswith("sha256:"):
            return plan
        return plan.model_copy(update={"image": plan.image.model_copy(update={"base_digest": self.base_digest})})

    @property
    def stack_labels(self) -> dict[str, str]:
        return {k: v for k, v in sorted(self.labels.items()) if k.startswith("io.provision.")}


@contextmanager
def _inputs(plan: Plan, api: Any, *, skip_frameworks: bool,
            progress: Progress) -> Iterator[tuple[ContextArchive | None, dict[str, Path]]]:
    """Every input of the build fetched and checked on the controller before anything is rendered or sent: a managed
    plan's interpreter first (an archive nobody vouches for is refused before gigabytes of wheels are downloaded;
    held by a link of the build's own until the block ends), then each wheel group for the base image's Python and
    C library."""
    tmp_root = cache_root() / "tmp"  # beside the caches, so the hard links work (same file system)
    tmp_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"inputs-{plan.profile}-", dir=tmp_root) as held:
        python = fetch_python(plan, progress, Path(held))
        target = WheelTarget(python=plan.python.version, glibc=probe_glibc(api, plan.image.base_image),
                             machine=PLATFORM_MACHINE[plan.image.platform])
        yield python, {g.name: fetch_wheels(g, target, progress)
                       for g in wheel_groups(plan, skip_frameworks=skip_frameworks)}


def _stages(plan: Plan, profile_path: str | Path | None, python: ContextArchive | None, *,
            skip_frameworks: bool) -> DockerBuild:
    """The Dockerfile rendered once the inputs are known: a managed plan's archive checked against the sha256 of the
    file the context holds (the database's, or a mirror's build its SHA256SUMS vouches for)."""
    return image_build(plan, profile_path, skip_frameworks=skip_frameworks,
                       python_sha256=python.sha256 if python else None)


@contextmanager
def build_context(plan: Plan, *, skip_frameworks: bool, api: Any, progress: Progress,
                  profile_path: str | Path | None = None) -> Iterator[Path]:
    """Fetch the inputs and lay out the whole context in a temporary directory (removed afterwards)."""
    with _inputs(plan, api, skip_frameworks=skip_frameworks, progress=progress) as (python, dirs):
        dockerfile = _stages(plan, profile_path, python, skip_frameworks=skip_frameworks).dockerfile
        # Beside the wheel cache, so the hard links work (same file system).
        with tempfile.TemporaryDirectory(prefix=f"build-{plan.profile}-", dir=cache_root() / "tmp") as tmp:
            yield make_context(Path(tmp), dockerfile, dirs, python=python)


def build(plan: Plan, *, tag: str, profile_path: str | Path | None = None, no_cache: bool = False,
          skip_frameworks: bool = False, progress: Progress = lambda line: None, api: Any = None) -> BuildResult:
    """Build the plan's image and tag it. Raises RunnerError / RunFailed with one clear line.

    The inputs first (the interpreter, the wheels), then the Dockerfile rendered once as its two stages
    (render.docker.image_build; profile_path is named in its header), built apart: the `venv` stage with the
    wheels as context, tagged `provision-venv/<profile>:<digest of the stage, base and wheel files>` and skipped when
    that image exists; then the `runtime` stage, copying from that image, with a context of a few kB. Why: the engine
    receives the whole context (1-2 GB of wheels) with every build request, cached or not, and unpacks it before it
    looks at its cache; a change after the environment (a Jupyter port) would otherwise cost that upload each time.
    """
    api = api or connect()
    check_platform(api, plan)
    base = ensure_base(api, plan.image.base_image, progress)
    digest = check_base_digest(plan, base)
    check_base_cudnn(plan, base, skip_frameworks=skip_frameworks, progress=progress)
    started = time.monotonic()
    platform = plan.image.platform or None
    log: list[str] = []
    cached = ran = 0
    tmp_root = cache_root() / "tmp"  # beside the wheel cache, so the hard links work (same file system)
    with _inputs(plan, api, skip_frameworks=skip_frameworks, progress=progress) as (python, dirs):
        stages = _stages(plan, profile_path, python, skip_frameworks=skip_frameworks)
        venv_image = _venv_tag(plan, stages.venv, base["Id"], dirs)
        progress(f"building {tag} from {plan.image.base_image} ({plan.image.platform})")
        if no_cache or not _image_exists(api, venv_image):
            with tempfile.TemporaryDirectory(prefix=f"venv-{plan.profile}-", dir=tmp_root) as tmp:
                ctx = make_context(Path(tmp), stages.venv, dirs, tools=False, python=python)
                c, r = stream_build(api, ctx, venv_image, no_cache=no_cache, platform=platform, progress=progress,
                                    log=log)
                cached, ran = cached + c, ran + r
        else:
            progress(f"environment {venv_image} is built already: its wheels are not sent again")
    header = (f"# The runtime stage of the Dockerfile `provision render` writes for {plan.profile}; its environment "
              f"comes from {venv_image}, built from the venv stage.\n")
    with tempfile.TemporaryDirectory(prefix=f"build-{plan.profile}-", dir=tmp_root) as tmp:
        ctx = make_context(Path(tmp), header + stages.runtime_from(venv_image), {}, tools=True)
        # The base by content, not only by tag: OCI's base.digest label (a registry digest, or the local image ID).
        c, r = stream_build(api, ctx, tag, no_cache=no_cache, platform=platform, progress=progress, log=log,
                            labels={"org.opencontainers.image.base.digest": digest} if digest else None)
        cached, ran = cached + c, ran + r
    info = api.inspect_image(tag)
    return BuildResult(
        image_id=info["Id"], tag=tag, size_bytes=int(info.get("Size", 0)),
        labels=dict((info.get("Config") or {}).get("Labels") or {}), seconds=time.monotonic() - started,
        steps_cached=cached, steps_run=ran, log=log, venv_image=venv_image, base_digest=digest,
    )


def default_tag(plan: Plan, *, skip_frameworks: bool = False) -> str:
    return f"provision/{plan.profile}:{plan.target.os_id}" + ("-noframeworks" if skip_frameworks else "")


def write_context(plan: Plan, dest: Path, *, skip_frameworks: bool, progress: Progress,
                  profile_path: str | Path | None = None) -> Path:
    """The whole build context in `dest` (`provision render -o DIR --image-context`), so that `docker build DIR`
    builds the image without provision: the Dockerfile (rendered once its inputs are fetched: a managed plan's
    checks that archive's sha256), wheels/<group>/ (downloaded once into the cache for the base image's Python and
    C library, then linked), a managed plan's python/<archive> (fetched and checked into the cache),
    provision/verify and the Jupyter launcher."""
    api = connect()
    check_platform(api, plan)
    ensure_base(api, plan.image.base_image, progress)
    with _inputs(plan, api, skip_frameworks=skip_frameworks, progress=progress) as (python, dirs):
        dest.mkdir(parents=True, exist_ok=True)
        for part in ("wheels", "provision", "docker", "python"):  # what an earlier --image-context wrote here
            shutil.rmtree(dest / part, ignore_errors=True)
        dockerfile = _stages(plan, profile_path, python, skip_frameworks=skip_frameworks).dockerfile
        return make_context(dest, dockerfile, dirs, python=python)
