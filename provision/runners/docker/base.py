"""The base image of a build: local or pulled (`ensure_base()`), its content digest against the plan's pin
(`check_base_digest()`), its cuDNN against the frameworks' (`check_base_cudnn()`) and its C library, which decides the
wheels (`probe_glibc()`, remembered per image id)."""

from __future__ import annotations

import json
import re
from typing import Any

from provision.errors import IncompatibleError, RunnerError
from provision.models import Plan
from provision.render.docker import base_without_cudnn, cudnn_in_base, frameworks_with_cudnn_wheels
from provision.runners.docker.engine import Progress
from provision.state import cache_root


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
