"""Build a profile's image with the Docker SDK: check the engine and the base, fetch wheels, build, summarise.

Steps, each failing with one line that says what, where and what to do:

1. `connect()`: the Docker engine answers (DOCKER_HOST or the default socket).
2. `check_platform()`: the engine can run the plan's platform (Jetson images are linux/arm64).
3. `ensure_base()`: the base image is local, or can be pulled.
4. `fetch_wheels()`: each wheel group is downloaded once, on the controller, into
   `provision.state.cache_root()/wheels`, for the image's interpreter, ABI and C library (probed in the base).
   Why here and not in the build: the build then needs no network (an air-gapped engine, a registry mirror
   for the base only), and the wheels of a plan are fetched once however often its layers are rebuilt.
5. `make_context()`: a temporary directory with the Dockerfile, the wheels (hard links into the cache), the
   verifier sources and the Jupyter launcher; for a managed plan, the interpreter's archive under python/, fetched
   and checked by `provision.interpreters.fetch` as for the hosts (`fetch_python()`, before the wheels: an archive
   that is refused costs no download).
6. `build()`: BuildKit through the Engine API (`stream_build`; provision.runners.buildkit reads its progress),
   streamed to a callback; returns id, size and labels.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from packaging.utils import parse_wheel_filename

from provision import hashes, interpreters
from provision.errors import IncompatibleError, RunFailed, RunnerError
from provision.models import Plan
from provision.render.docker import (
    LAUNCHER,
    WheelGroup,
    base_without_cudnn,
    cudnn_in_base,
    frameworks_with_cudnn_wheels,
    pin_python_archive,
    python_archive,
    wheel_groups,
)
from provision.resources import share_dir
from provision.runners.buildkit import TRACE_ID, Trace
from provision.state import cache_root

# Docker platform -> the machine name pip and the kernel use.
PLATFORM_MACHINE = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}
# The oldest manylinux the wheel tags go back to (PEP 600 counts from glibc 2.5), and the legacy aliases.
MANYLINUX_FIRST_MINOR = 5
LEGACY_MANYLINUX = ("manylinux2014", "manylinux2010", "manylinux1")

Progress = Callable[[str], None]


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


def _docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def connect() -> Any:
    """A low-level client to a Docker engine that answers."""
    # The Docker SDK is imported where it is used, here and below: 160-255 ms (python -X importtime, 2026-11-23), which
    # `provision render` without --image-context and everything that imports this module for default_tag never need.
    import docker
    import docker.errors

    try:
        api = docker.APIClient(base_url=os.environ.get("DOCKER_HOST") or None, version="auto", timeout=600)
        api.ping()
    except (docker.errors.DockerException, OSError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RunnerError(
            f"the Docker engine at {_docker_host()} does not answer ({first[:160]}); start it "
            "(systemctl start docker) or point DOCKER_HOST at a running engine"
        ) from None
    return api


def check_platform(api: Any, plan: Plan) -> None:
    """Refuse, before anything starts, a platform this engine cannot build (no emulation registered)."""
    want = plan.image.platform
    machine = PLATFORM_MACHINE.get(want)
    if machine is None:
        raise RunnerError(f"{plan.profile}: image.platform {want!r} is not one provision builds ({sorted(PLATFORM_MACHINE)})")
    native = api.info().get("Architecture", "")
    if native == machine:
        return
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    if any(binfmt.glob(f"qemu-{machine}*")):
        return
    raise RunnerError(
        f"{plan.profile}: a {want} image cannot be built here: this Docker engine runs on "
        f"{native or 'an unknown machine'} and has no {machine} emulation (no qemu-{machine} in {binfmt}); "
        f"build on an {machine} machine (the Jetson itself), or register qemu-user-static binfmt handlers; `provision render` still writes the Dockerfile"
    )


def ensure_base(api: Any, image: str, progress: Progress) -> dict[str, Any]:
    """Inspect the base image, pulling it once if it is not local."""
    import docker.errors

    try:
        return api.inspect_image(image)
    except docker.errors.ImageNotFound:
        pass
    progress(f"base image {image} is not local; pulling it")
    try:
        repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        for _ in api.pull(repo, tag=tag or None, stream=True, decode=True):
            pass
        return api.inspect_image(image)
    except (docker.errors.APIError, docker.errors.ImageNotFound) as exc:
        reason = getattr(exc, "explanation", None) or str(exc)
        raise RunnerError(
            f"base image {image} is not on this Docker engine and could not be pulled ({str(reason)[:200]}); "
            "load it (docker load / docker import), choose another with --base-image, or for the local Debian bases "
            "run provision.sandbox.ensure_base_image"
        ) from None


NV_CUDNN_ENV = "NV_CUDNN_VERSION"  # what nvidia/cuda's cuDNN images set (e.g. 9.5.1.17-1), beside a label


def check_base_cudnn(plan: Plan, base: dict[str, Any], *, skip_frameworks: bool, progress: Progress) -> None:
    """On a base that carries cuDNN the image installs none on top (render.docker), so the frameworks use the
    base's: refuse a base whose cuDNN they would refuse at run time. PyTorch and TensorFlow both want the
    major version they were built with and at least its minor one (torch/backends/cudnn/__init__.py,
    `cudnn_compatible`; TensorFlow's "CuDNN library needs to have matching major version and equal or higher
    minor version")."""
    if not cudnn_in_base(plan):
        return
    env = dict(item.split("=", 1) for item in (base.get("Config") or {}).get("Env") or [] if "=" in item)
    found = re.match(r"(\d+)\.(\d+)", env.get(NV_CUDNN_ENV, ""))
    users = [f for f in frameworks_with_cudnn_wheels(plan, skip_frameworks=skip_frameworks) if f.cudnn]
    if found is None:
        progress(f"base image {plan.image.base_image} does not say its cuDNN version ({NV_CUDNN_ENV}); "
                 f"the image uses it as it is (planned: {plan.cudnn.version})")
        return
    have = (int(found.group(1)), int(found.group(2)))
    for fw in users:
        assert fw.cudnn is not None  # users keeps only the frameworks that bring a cuDNN
        want = tuple(int(x) for x in fw.cudnn.split(".")[:2])
        if have[0] != want[0] or have[1] < want[1]:
            alt = base_without_cudnn(plan.image.base_image)
            raise IncompatibleError(
                f"base image {plan.image.base_image} carries cuDNN {env[NV_CUDNN_ENV]} and the image uses it (one "
                f"cuDNN per image), but {fw.package} {fw.version} is built with cuDNN {fw.cudnn} and refuses an "
                "older minor or another major at run time",
                alternatives=[(f"--base-image {alt}" if alt else "a base image without cuDNN")
                              + f" (the planned {', '.join(plan.cudnn.packages)} wheels are then installed)",
                              "--skip-frameworks"],
                where=plan.profile,
            )
    progress(f"cuDNN {env[NV_CUDNN_ENV]} from the base image {plan.image.base_image} (planned: {plan.cudnn.version})")


def probe_glibc(api: Any, image: str) -> tuple[int, int]:
    """The C library of the base image, (2, 41): it decides which manylinux wheels the image can load.

    Remembered per image id in the provision cache: starting a container costs seconds on a loaded engine,
    and an image id never changes its content.
    """
    image_id = api.inspect_image(image)["Id"]
    memo = cache_root() / "glibc.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if image_id in known:
        return tuple(known[image_id])
    found = _run_getconf(api, image)
    memo.write_text(json.dumps({**known, image_id: list(found)}))
    return found


def _run_getconf(api: Any, image: str) -> tuple[int, int]:
    container = api.create_container(image, command=["getconf", "GNU_LIBC_VERSION"], entrypoint=[], user="0")
    try:
        api.start(container)
        status = api.wait(container, timeout=60)
        text = api.logs(container).decode(errors="replace").strip()
    finally:
        api.remove_container(container, force=True)
    found = re.search(r"glibc (\d+)\.(\d+)", text)
    if status.get("StatusCode") != 0 or not found:
        raise RunnerError(
            f"base image {image}: cannot tell its C library (`getconf GNU_LIBC_VERSION` said {text[:120]!r}); "
            "provision images need a glibc-based distribution (Debian, Ubuntu, L4T)"
        )
    return int(found.group(1)), int(found.group(2))


@dataclass(frozen=True)
class WheelTarget:
    """What pip must download for: the image's interpreter, ABI, C library and machine."""

    python: str  # "3.13"
    glibc: tuple[int, int]
    machine: str  # x86_64

    @property
    def key(self) -> str:
        return f"cp{self.python.replace('.', '')}-glibc{self.glibc[0]}.{self.glibc[1]}-{self.machine}"

    def pip_args(self) -> list[str]:
        abi = f"cp{self.python.replace('.', '')}"
        platforms = [f"manylinux_{self.glibc[0]}_{minor}_{self.machine}"
                     for minor in range(self.glibc[1], MANYLINUX_FIRST_MINOR - 1, -1)]
        platforms += [f"{legacy}_{self.machine}" for legacy in LEGACY_MANYLINUX]
        args = ["--only-binary=:all:", "--python-version", self.python, "--implementation", "cp",
                "--abi", abi, "--abi", "abi3", "--abi", "none"]
        for plat in [*platforms, "any"]:
            args += ["--platform", plat]
        return args


def wheel_dir(group: WheelGroup, target: WheelTarget) -> Path:
    key: list[Any] = [group.requirements, group.index_url, group.no_deps]
    if group.leave_out:  # only then, so the directories of groups without it keep their names
        key.append(group.leave_out)
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
    return cache_root() / "wheels" / target.key / f"{group.name}-{digest}"


def fetch_wheels(group: WheelGroup, target: WheelTarget, progress: Progress) -> Path:
    """Download a group's wheels once (with their dependencies, unless `group.no_deps`); later builds reuse them.

    The CUDA/cuDNN group is `no_deps`: the NVIDIA wheels declare unpinned dependencies (nvidia-cudnn-cu11 wants
    any nvidia-cublas-cu11), which the plan pins in the same group; resolving them would fetch what it did not choose.
    """
    dest = wheel_dir(group, target)
    done = dest / ".complete"
    if done.exists() and (dest / hashes.HASHES_FILE).is_file():
        return _checked(dest)
    # One filler per group at a time: a second build on this controller waits here, then finds the group complete
    # (two fillers raced on one directory, and one's clean-up deleted the other's requirements file).
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists() and (dest / hashes.HASHES_FILE).is_file():
            return _checked(dest)
        # A directory without its hashes (an interrupted fill, or a cache from before they were recorded) is
        # downloaded again: hashes recorded now would vouch for files nobody checked.
        shutil.rmtree(dest, ignore_errors=True)
        return _fill_wheel_dir(group, target, progress, dest, done)


def _checked(dest: Path) -> Path:
    """The cached wheel directory, after checking every wheel against the sha256 recorded when it was downloaded."""
    bad = hashes.verify_hashes(dest)
    if bad:
        raise RunFailed(
            f"the cached wheels in {dest} no longer match the sha256 recorded when they were downloaded "
            f"({', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}): a wheel was changed or swapped; remove the "
            "directory and build again (it is downloaded anew)")
    return dest


def _fill_wheel_dir(group: WheelGroup, target: WheelTarget, progress: Progress, dest: Path, done: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "requirements.txt").write_text("".join(f"{r}\n" for r in group.requirements))
    cmd = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--no-cache-dir", "--progress-bar", "off",
           "--disable-pip-version-check", *target.pip_args(), "--requirement", str(dest / "requirements.txt")]
    if group.no_deps:
        cmd.append("--no-deps")
    if group.index_url:
        cmd += ["--index-url", group.index_url]
    progress(f"downloading wheels for {group.name}: {' '.join(group.requirements)}")
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(dest, ignore_errors=True)  # no half-filled directory left in the cache
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.startswith("ERROR")] or proc.stderr.splitlines()[-3:]
        raise RunFailed(
            f"wheels for {group.name} ({', '.join(group.requirements)}) could not be downloaded for Python "
            f"{target.python} on {target.machine} from {group.index_url or 'PyPI'}: {' | '.join(lines)[:400]}; "
            "check the pins in the plan (`provision plan --explain`), or the network (pip download exit "
            f"{proc.returncode})"
        )
    if group.leave_out:
        leave_out_wheels(dest, group, progress)
    # The image installs from requirements.lock with --require-hashes: exactly these files, byte for byte.
    hashes.write_hashes(dest)
    size = sum(p.stat().st_size for p in dest.glob("*.whl"))
    done.write_text(json.dumps({"seconds": round(time.monotonic() - started, 1), "bytes": size}))
    progress(f"wheels for {group.name}: {size / 1e6:.0f} MB in {time.monotonic() - started:.0f}s")
    return dest


def leave_out_wheels(dest: Path, group: WheelGroup, progress: Progress) -> None:
    """Delete the group's `leave_out` wheels and rewrite requirements.txt as the exact list of the wheels kept,
    which the Dockerfile installs with --no-deps (pip has no option to skip one dependency)."""
    kept, dropped = [], []
    for wheel in sorted(dest.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        if name.startswith(group.leave_out):
            dropped.append(f"{name}=={version}")
            wheel.unlink()
        else:
            kept.append(f"{name}=={version}")
    (dest / "requirements.txt").write_text("".join(f"{r}\n" for r in sorted(kept)))
    progress(f"wheels for {group.name}: left out {', '.join(dropped) or 'nothing'} "
             f"({', '.join(p + '*' for p in group.leave_out)}: the base image has its own)")


def _link_tree(src: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for item in sorted(src.iterdir()):
        if item.name.startswith("."):
            continue
        try:
            os.link(item, dest / item.name)  # the wheels can be GBs: link, do not copy
        except OSError:
            shutil.copy2(item, dest / item.name)


@dataclass(frozen=True)
class ContextArchive:
    """A managed plan's interpreter for the build context: the checked file in the controller's cache, and the
    Dockerfile that checks it against that file's sha256."""

    source: Path  # provision.state.cache_root()/python/<archive>
    dest: str  # its path in the build context (python/<archive>)
    dockerfile: str


def fetch_python(plan: Plan, dockerfile: str, progress: Progress) -> ContextArchive | None:
    """The archive of a managed plan (None otherwise), fetched into the controller's cache and checked against the
    database's sha256 or the named mirror's SHA256SUMS (interpreters.fetch: refused, exit 2, when it is neither),
    with the Dockerfile pinned to the sha256 of that very file, so the image's check and the hosts' agree."""
    archive = python_archive(plan)
    if archive is None or plan.python.managed is None:
        return None
    path, sha256 = interpreters.fetch(plan.python.managed, log=progress)
    progress(f"python: {archive.name}, sha256 {sha256[:12]}..., checked")
    return ContextArchive(source=path, dest=archive.context_path, dockerfile=pin_python_archive(dockerfile, plan, sha256))


def _link_file(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def verifier_source() -> Path:
    return Path(__file__).resolve().parent.parent / "verify"


def make_context(dest: Path, dockerfile: str, wheel_dirs: dict[str, Path], *, tools: bool = True,
                 python: ContextArchive | None = None) -> Path:
    """The build context: Dockerfile, wheels/<group>/, a managed plan's python/<archive> and, with `tools`,
    provision/{__init__.py,verify/} and docker/jupyter_launch.py."""
    (dest / "Dockerfile").write_text(dockerfile)
    (dest / ".dockerignore").write_text("**/__pycache__\n")
    for name, src in wheel_dirs.items():
        _link_tree(src, dest / "wheels" / name)
    if python is not None:
        _link_file(python.source, dest / python.dest)
    if not tools:
        return dest
    pkg = dest / "provision"
    pkg.mkdir()
    shutil.copy2(Path(__file__).resolve().parent.parent / "__init__.py", pkg / "__init__.py")
    verify = verifier_source()
    if verify.is_dir():
        shutil.copytree(verify, pkg / "verify", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / "docker").mkdir()
    shutil.copy2(share_dir("templates") / LAUNCHER, dest / LAUNCHER)
    return dest


@contextmanager
def build_context(plan: Plan, dockerfile: str, *, skip_frameworks: bool, api: Any,
                  progress: Progress) -> Iterator[Path]:
    """Fetch the wheels and lay out the context in a temporary directory (removed afterwards)."""
    python = fetch_python(plan, dockerfile, progress)
    glibc = probe_glibc(api, plan.image.base_image)
    target = WheelTarget(python=plan.python.version, glibc=glibc, machine=PLATFORM_MACHINE[plan.image.platform])
    dirs = {g.name: fetch_wheels(g, target, progress) for g in wheel_groups(plan, skip_frameworks=skip_frameworks)}
    # Beside the wheel cache, so the hard links work (same file system).
    tmp_root = cache_root() / "tmp"
    tmp_root.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"build-{plan.profile}-", dir=tmp_root) as tmp:
        yield make_context(Path(tmp), python.dockerfile if python else dockerfile, dirs, python=python)


_RUNTIME_FROM = re.compile(r"^FROM \S+ AS runtime$", re.M)
VENV_COPY = "COPY --from=venv "


def split_stages(dockerfile: str, venv_image: str) -> tuple[str, str]:
    """The rendered Dockerfile as two builds: the `venv` stage alone, and the `runtime` stage copying from the
    image that the first build tagged `venv_image` (the environment, and a managed plan's interpreter before it).
    Same instructions, same layers, same cache keys."""
    found = _RUNTIME_FROM.search(dockerfile)
    venv, runtime = (dockerfile[:found.start()], dockerfile[found.start():]) if found else (dockerfile, "")
    if found is None or VENV_COPY in venv or VENV_COPY not in runtime:
        raise RunFailed("the rendered Dockerfile has no `FROM ... AS runtime` stage copying from `venv`; "
                        "templates/Dockerfile.j2 and provision.runners.docker disagree (a provision bug: report it)")
    return venv, runtime.replace(VENV_COPY, f"COPY --from={venv_image} ")


def _venv_tag(plan: Plan, venv_dockerfile: str, base_id: str, wheel_dirs: dict[str, Path]) -> str:
    """Named by what goes into the environment: the stage's text, the base image and the exact wheel files."""
    digest = hashlib.sha256()
    for part in (venv_dockerfile, base_id):
        digest.update(part.encode() + b"\0")
    for name, path in sorted(wheel_dirs.items()):
        digest.update(f"{name}:{sorted(p.name for p in path.glob('*.whl'))}\0".encode())
    return f"provision-venv/{plan.profile}:{digest.hexdigest()[:16]}"


# BuildKit pads the step number to the width of the total (`[ 2/10]`, `[venv  2/10]`).
_STEP_LINE = re.compile(r"^(?:CACHED |DONE )?\[[^\]]*?\d+/\d+\] ")


def is_step_line(line: str) -> bool:
    """A progress line about a Dockerfile step (`[2/7] RUN ...`, `CACHED [2/7] ...`, `DONE [2/7] ... 3.1s`)."""
    return bool(_STEP_LINE.match(line))


@contextmanager
def _context_tar(ctx: Path) -> Iterator[IO[bytes]]:
    """The build context as the tar BuildKit takes in a request body: the Dockerfile first, GNU format.

    Not `docker.utils.build.tar`: it writes POSIX (pax) tars, and Python adds a pax header to any member whose
    mtime has a fraction of a second, which is most files. The engine tells a tar body from a bare Dockerfile
    by its first bytes; behind a pax header it takes the whole body for a Dockerfile and fails on line 1
    (`unknown instruction: ././@PaxHeader`, Docker 20.10). GNU format, whole-second mtimes, no owners.
    """
    def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = int(info.mtime), 0, 0, "", ""
        return info

    names = [p for p in sorted(ctx.rglob("*")) if "__pycache__" not in p.parts and p.name != "Dockerfile"]
    with tempfile.TemporaryFile(dir=ctx.parent) as body:
        with tarfile.open(fileobj=body, mode="w", format=tarfile.GNU_FORMAT) as archive:
            for path in [ctx / "Dockerfile", *names]:
                archive.add(path, arcname=str(path.relative_to(ctx)), recursive=False, filter=normalise)
        body.seek(0)
        yield body


# The Engine API version that has BuildKit behind `POST /build?version=2` (Docker Engine 18.09).
BUILDKIT_API = (1, 39)


def base_digest(base: dict[str, Any]) -> str:
    """The content digest of an inspected base image: its registry digest (RepoDigests, `repo@sha256:...`) when it
    was pulled, else its local image ID (`sha256:...`, the digest of its configuration) for an image built or
    loaded here, which no registry knows."""
    for ref in base.get("RepoDigests") or []:
        _, _, digest = str(ref).partition("@")
        if digest.startswith("sha256:"):
            return digest
    return str(base.get("Id") or "")


def check_base_digest(plan: Plan, base: dict[str, Any]) -> str:
    """The base's digest; a plan that pins one (a saved plan from a build) refuses a base whose content differs."""
    found = base_digest(base)
    pinned = plan.image.base_digest
    known = {found, str(base.get("Id") or "")}
    if pinned and pinned not in known:
        raise IncompatibleError(
            f"the base image {plan.image.base_image} is {found or 'of unknown digest'} on this engine, but the plan "
            f"pins {pinned}",
            alternatives=[f"pull the pinned base ({plan.image.base_image.split('@')[0].rsplit(':', 1)[0]}@{pinned})",
                          "make the plan again (`provision plan --json`) to take the base as it is now"],
        )
    return found


# What BuildKit keeps of a build context sent as a tar to `POST /build`: the tar itself, fetched from a URL made up
# for that one request (`http url http://build-context-<random>`), and the files copied out of it (`fileop target`,
# the trace's "copy /context /"). Neither can serve another build (the next request gets another URL), and no image
# shares them, but they stay in the engine's build cache: 1-2.5 GB for an environment's wheels, each build (13.3 GB
# after one test run, 2026-11-27).
CONTEXT_TAR = "http url http://build-context-"
CONTEXT_COPY = "fileop target"
# Below this a context's copy is not worth the listing (on Docker 20.10, API 1.41, the engine answers a build-cache
# listing with its whole disk usage: 9-20 s here, one at a time): the runtime stage's few kB, a Dockerfile alone.
CONTEXT_DROP_BYTES = 64 << 20


def _build_cache(api: Any) -> dict[str, dict[str, Any]] | None:
    """The engine's build-cache records by ID, or None where it cannot say (another disk-usage query kept it busy for
    a minute, or an engine without the query)."""
    import docker.errors

    for attempt in range(20):  # about a minute of tries: the engine runs one disk-usage query at a time
        try:
            data = api._result(api._get(api._url("/system/df"), params={"type": "build-cache"}), json=True)
            return {str(b["ID"]): b for b in data.get("BuildCache") or []}
        except docker.errors.APIError as exc:  # "a disk usage operation is already running": another build's
            if "already running" not in str(exc):
                return None
            time.sleep(min(0.5 * (attempt + 1), 4.0))
    return None


def _created(record: dict[str, Any]) -> float:
    """A record's CreatedAt (RFC 3339, nanoseconds) as seconds since the epoch; 0 where it cannot be read."""
    import datetime

    stamp = re.sub(r"(\.\d{6})\d*", r"\1", str(record.get("CreatedAt") or "")).replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return 0.0


def drop_context_cache(api: Any, since: float, progress: Progress) -> int:
    """After a build: remove the build-cache records of contexts sent as tars since `since` (CONTEXT_TAR: no build
    can use one again) and the unshared copies made out of them (CONTEXT_COPY), none in use, made since this build
    began (`since`: time.time() then, less a few seconds), by their IDs alone; the layers, every other record and
    whatever was there before this build stay.
    Returns the bytes freed. A failure here costs disk only, never the build: it is said and left."""
    import docker.errors

    records = _build_cache(api)
    if records is None:
        progress("the build context's copy stays in the engine's build cache (the engine was too busy to list it)")
        return 0
    ids = [i for i, rec in records.items() if not rec.get("Shared") and not rec.get("InUse")
           and _created(rec) >= since and (str(rec.get("Description") or "").startswith(CONTEXT_TAR)
                                           or rec.get("Description") == CONTEXT_COPY)]
    freed, failed = 0, ""
    for record in ids:  # one at a time: the engine takes one value per filter, and one prune at once
        for attempt in range(12):  # about 30 s of tries while another prune (another build's) runs
            try:
                freed += int((api.prune_builds(filters={"id": record}) or {}).get("SpaceReclaimed") or 0)
                break
            except docker.errors.APIError as exc:
                failed = str(exc.explanation or exc)[:160]
                time.sleep(min(0.5 * (attempt + 1), 4.0))
        else:
            progress(f"the build context's copy stays in the engine's build cache ({failed})")
            return freed
    progress(f"removed the build context's copy from the engine's build cache ({freed / 1e6:.0f} MB)")
    return freed


def _context_bytes(ctx: Path) -> int:
    return sum(f.stat().st_size for f in ctx.rglob("*") if f.is_file() and not f.is_symlink())


def stream_build(api: Any, ctx: Path, tag: str, *, no_cache: bool, platform: str | None, progress: Progress,
            log: list[str], labels: dict[str, str] | None = None) -> tuple[int, int]:
    """One BuildKit build of the context directory `ctx`, streamed; returns (steps cached, steps run).

    BuildKit, not the classic builder: the classic builder commits a container for every instruction, ENV and
    EXPOSE included (10-30 s each on a fuse-overlayfs engine), where BuildKit writes settings into the image
    config without running anything. The SDK's `build()` has no parameter for the builder version, so the
    request is made through the SDK's own client (`_post`, `_stream_helper`, which `APIClient.build` itself
    uses). A failed step is RunFailed, with its last output.
    """
    import docker.errors

    version = tuple(int(p) for p in str(api.api_version).split(".")[:2])
    if version < BUILDKIT_API:
        raise RunnerError(f"the Docker engine at {_docker_host()} speaks API {api.api_version}; provision builds "
                          "with BuildKit, which needs API 1.39 (Docker Engine 18.09) or newer: upgrade the engine")
    trace = Trace()
    params = {"t": tag, "version": "2", "rm": "1", "forcerm": "1", "nocache": "1" if no_cache else "0", "pull": "0"}
    if platform:
        params["platform"] = platform
    if labels:  # set on the image as LABEL lines would be (BuildKit's label:<key> frontend options)
        params["labels"] = json.dumps(labels)
    progress(f"building {tag}")
    since = time.time() - 5  # the engine's clock may lag this one's a little; a remote engine's more (see drop_...)
    try:
        with _context_tar(ctx) as context:
            response = api._post(api._url("/build"), params=params, data=context, stream=True, timeout=None,
                                 headers={"Content-Type": "application/tar"})
            api._raise_for_status(response)
            for chunk in api._stream_helper(response, decode=True):
                if chunk.get("id") == TRACE_ID and isinstance(chunk.get("aux"), str):
                    lines = trace.add(chunk["aux"])
                elif "error" in chunk:
                    detail = (chunk.get("errorDetail") or {}).get("message") or chunk["error"]
                    failed = trace.failed
                    tail = " | ".join(trace.last_output(failed)) if failed else ""
                    raise RunFailed(
                        f"building {tag}: {failed.describe() if failed else 'a step'} failed: {detail.strip()[:300]}"
                        + (f"; last output: {tail[-500:]}" if tail else "")
                        + "; fix the plan or profile it comes from, then run `provision build` again"
                    )
                else:
                    lines = [ln for ln in str(chunk.get("stream", "")).splitlines() if ln.strip()]
                for line in lines:
                    log.append(line)
                    progress(line)
    except docker.errors.APIError as exc:
        raise RunnerError(f"building {tag}: the Docker engine refused the build: {exc.explanation or exc}") from None
    finally:
        if _context_bytes(ctx) >= CONTEXT_DROP_BYTES:
            drop_context_cache(api, since, progress)
    steps = [v for v in trace.steps if not v.name.split("] ", 1)[-1].startswith("FROM ")]
    cached = sum(1 for v in steps if v.cached)
    return cached, len(steps) - cached


def _image_exists(api: Any, tag: str) -> bool:
    import docker.errors

    try:
        api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def build(plan: Plan, dockerfile: str, *, tag: str, no_cache: bool = False, skip_frameworks: bool = False,
          progress: Progress = lambda line: None, api: Any = None) -> BuildResult:
    """Build `dockerfile` (rendered from `plan`) and tag it. Raises RunnerError / RunFailed with one clear line.

    Two builds of the one rendered Dockerfile: its `venv` stage with the wheels as context, tagged
    `provision-venv/<profile>:<digest of the stage, base and wheel files>` and skipped when that image exists;
    then its `runtime` stage, copying from that image, with a context of a few kB. Why: the engine receives the
    whole context (1-2 GB of wheels) with every build request, cached or not, and unpacks it before it looks at
    its cache; a change after the environment (a Jupyter port) would otherwise cost that upload each time.
    """
    api = api or connect()
    check_platform(api, plan)
    base = ensure_base(api, plan.image.base_image, progress)
    digest = check_base_digest(plan, base)
    check_base_cudnn(plan, base, skip_frameworks=skip_frameworks, progress=progress)
    started = time.monotonic()
    platform = plan.image.platform or None
    # The interpreter first: an archive nobody vouches for is refused before gigabytes of wheels are downloaded.
    python = fetch_python(plan, dockerfile, progress)
    target = WheelTarget(python=plan.python.version, glibc=probe_glibc(api, plan.image.base_image),
                         machine=PLATFORM_MACHINE[plan.image.platform])
    dirs = {g.name: fetch_wheels(g, target, progress) for g in wheel_groups(plan, skip_frameworks=skip_frameworks)}
    if python is not None:
        dockerfile = python.dockerfile  # checks the archive the context holds: the database's, or the mirror's build
    venv_part = split_stages(dockerfile, "")[0]
    venv_image = _venv_tag(plan, venv_part, base["Id"], dirs)
    _, runtime_part = split_stages(dockerfile, venv_image)
    log: list[str] = []
    cached = ran = 0
    tmp_root = cache_root() / "tmp"  # beside the wheel cache, so the hard links work (same file system)
    tmp_root.mkdir(exist_ok=True)
    progress(f"building {tag} from {plan.image.base_image} ({plan.image.platform})")
    if no_cache or not _image_exists(api, venv_image):
        with tempfile.TemporaryDirectory(prefix=f"venv-{plan.profile}-", dir=tmp_root) as tmp:
            ctx = make_context(Path(tmp), venv_part, dirs, tools=False, python=python)
            c, r = stream_build(api, ctx, venv_image, no_cache=no_cache, platform=platform, progress=progress, log=log)
            cached, ran = cached + c, ran + r
    else:
        progress(f"environment {venv_image} is built already: its wheels are not sent again")
    header = (f"# The runtime stage of the Dockerfile `provision render` writes for {plan.profile}; its environment "
              f"comes from {venv_image}, built from the venv stage.\n")
    with tempfile.TemporaryDirectory(prefix=f"build-{plan.profile}-", dir=tmp_root) as tmp:
        ctx = make_context(Path(tmp), header + runtime_part, {}, tools=True)
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


def write_context(plan: Plan, dockerfile: str, dest: Path, *, skip_frameworks: bool, progress: Progress) -> Path:
    """The whole build context in `dest` (`provision render -o DIR --image-context`), so that `docker build DIR`
    builds the image without provision: the Dockerfile, wheels/<group>/ (downloaded once into the cache for the
    base image's Python and C library, then linked), a managed plan's python/<archive> (fetched and checked into
    the cache; the Dockerfile is rewritten to check that file's sha256), provision/verify and the Jupyter launcher."""
    api = connect()
    check_platform(api, plan)
    ensure_base(api, plan.image.base_image, progress)
    python = fetch_python(plan, dockerfile, progress)  # refused (exit 2) before any wheel is downloaded
    target = WheelTarget(python=plan.python.version, glibc=probe_glibc(api, plan.image.base_image),
                         machine=PLATFORM_MACHINE[plan.image.platform])
    dirs = {g.name: fetch_wheels(g, target, progress) for g in wheel_groups(plan, skip_frameworks=skip_frameworks)}
    dest.mkdir(parents=True, exist_ok=True)
    for part in ("wheels", "provision", "docker", "python"):  # what an earlier --image-context wrote here
        shutil.rmtree(dest / part, ignore_errors=True)
    return make_context(dest, python.dockerfile if python else dockerfile, dirs, python=python)
