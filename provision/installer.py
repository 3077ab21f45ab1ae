"""The installer's wheel on the controller: uv's wheel the plan names (plan.python.installer, data/installer.yaml),
downloaded once into the controller's wheelhouse with its sha256 required, and checked again when it is taken from
there. `provision apply` copies it to the hosts, whose python_env role checks the same sha256 before it unpacks it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from packaging.utils import parse_wheel_filename

from provision import procs
from provision.artifacts import Store
from provision.errors import RunnerError
from provision.hashes import sha256_file
from provision.models import InstallerPlan
from provision.state import cache_root


def wheelhouse() -> Store:
    """The controller's wheelhouse, an artifact store (provision.artifacts; the sandboxes mount it read-only:
    provision.sandbox.wheelhouse_store), which keeps uv's wheel beside the plans' wheels."""
    path = cache_root() / "wheels"
    path.mkdir(parents=True, exist_ok=True)
    return Store(path, "wheelhouse")


def fetch(installer: InstallerPlan, *, index_url: str | None = None, log=None) -> tuple[Path, str]:
    """The wheel in the wheelhouse, checked: (path, its sha256). A file of that name that is not whole, or whose
    sha256 is not the plan's, is downloaded again; `pip download` requires the plan's sha256 (hash-checking mode),
    and the file is admitted into the wheelhouse (renamed and recorded) only once whole. Raises RunnerError with one
    line when it cannot be had."""
    store = wheelhouse()
    have = store.ready(installer.wheel, [installer.sha256])
    if have:
        return have
    with store.lock():
        have = store.get(installer.wheel, [installer.sha256])
        if have:
            return have
        platforms = sorted({tag.platform for tag in parse_wheel_filename(installer.wheel)[3]})
        with tempfile.TemporaryDirectory(prefix=".download-", dir=store.root.parent) as tmp:
            lock = Path(tmp) / "requirements.txt"
            lock.write_text(installer.requirement + "\n")
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--only-binary", ":all:", "--dest", tmp, "--require-hashes", "--requirement", str(lock),
                   *[arg for tag in platforms for arg in ("--platform", tag)]]
            if index_url:
                cmd += ["--index-url", index_url]
            if log:
                log(f"installer: downloading {installer.wheel} into {store.root}")
            proc = procs.run(cmd)
            got = Path(tmp) / installer.wheel
            if proc.returncode != 0 or not got.is_file() or sha256_file(got) != installer.sha256:
                said = " | ".join(" ".join(line.split()) for line in proc.stderr.strip().splitlines()[-2:])
                raise RunnerError(f"installer: {installer.wheel} (sha256 {installer.sha256[:12]}...) could not be had "
                                  f"from {index_url or 'PyPI'}: {said or 'another file came'}; check the network or "
                                  "the index (software.indexes.pypi, --index pypi=URL)")
            return store.admit(got, installer.sha256), installer.sha256
