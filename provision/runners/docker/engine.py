"""The Docker engine a build talks to: a client that answers (`connect()`), whether it can run a plan's platform
(`check_platform()`), whether an image is there (`_image_exists()`); and the progress callback every step reports to.
The Docker SDK is imported where it is used (see connect())."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from provision.errors import RunnerError
from provision.models import Plan

# Docker platform -> the machine name pip and the kernel use.
PLATFORM_MACHINE = {"linux/amd64": "x86_64", "linux/arm64": "aarch64"}


Progress = Callable[[str], None]


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


def _image_exists(api: Any, tag: str) -> bool:
    import docker.errors

    try:
        api.inspect_image(tag)
    except docker.errors.ImageNotFound:
        return False
    return True
