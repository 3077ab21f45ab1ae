"""The build context on disk: the Dockerfile, the wheels (hard links into the cache), a managed plan's interpreter
archive (`fetch_python()`), the verifier and the Jupyter launcher (`make_context()`); and the name of the environment
image built from the Dockerfile's first stage (`_venv_tag()`). The stages come rendered apart
(provision.render.docker.DockerBuild): nothing here cuts or edits the rendered text."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from provision import interpreters
from provision.models import Plan
from provision.render.docker import LAUNCHER, python_archive
from provision.resources import share_dir
from provision.runners.docker.engine import Progress

# provision/, the package whose __init__.py and verify/ go into the context.
_PACKAGE = Path(__file__).resolve().parents[2]


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
    """A managed plan's interpreter for the build context: the checked file in the controller's cache and its sha256,
    which the Dockerfile is rendered to check (render.docker.image_build's python_sha256)."""

    source: Path  # provision.state.cache_root()/python/<archive>
    dest: str  # its path in the build context (python/<archive>)
    sha256: str


def fetch_python(plan: Plan, progress: Progress, hold: Path) -> ContextArchive | None:
    """The archive of a managed plan (None otherwise), fetched into the controller's cache and checked against the
    database's sha256 or the named mirror's SHA256SUMS (interpreters.fetch: refused, exit 2, when it is neither),
    and linked into `hold` (a directory the build keeps until its context is made) under the store's lock, so that
    no other provision removes it from under the build. The Dockerfile is then rendered to check the sha256 of that
    very file, so the image's check and the hosts' agree."""
    archive = python_archive(plan)
    if archive is None or plan.python.managed is None:
        return None
    path, sha256 = interpreters.fetch(plan.python.managed, log=progress, hold=hold)
    progress(f"python: {archive.name}, sha256 {sha256[:12]}..., checked")
    return ContextArchive(source=path, dest=archive.context_path, sha256=sha256)


def _link_file(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.unlink(missing_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def verifier_source() -> Path:
    """provision/verify, the verifier's sources the image carries."""
    return _PACKAGE / "verify"


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
    shutil.copy2(_PACKAGE / "__init__.py", pkg / "__init__.py")
    verify = verifier_source()
    if verify.is_dir():
        shutil.copytree(verify, pkg / "verify", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (dest / "docker").mkdir()
    shutil.copy2(share_dir("templates") / LAUNCHER, dest / LAUNCHER)
    return dest


def _venv_tag(plan: Plan, venv_dockerfile: str, base_id: str, wheel_dirs: dict[str, Path]) -> str:
    """Named by what goes into the environment: the stage's text, the base image and the exact wheel files."""
    digest = hashlib.sha256()
    for part in (venv_dockerfile, base_id):
        digest.update(part.encode() + b"\0")
    for name, path in sorted(wheel_dirs.items()):
        digest.update(f"{name}:{sorted(p.name for p in path.glob('*.whl'))}\0".encode())
    return f"provision-venv/{plan.profile}:{digest.hexdigest()[:16]}"
