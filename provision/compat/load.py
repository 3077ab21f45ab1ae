"""Reading the shipped database: every data file validated into a `CompatDB` (`_read_db`), kept in-process and, as a
pickle keyed by the files' contents, between processes (`load_db`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from provision.compat.db import CompatDB
from provision.compat.files import DataError, _cache_file, _read, cached
from provision.resources import data_dir


@functools.cache
def load_db(root: Path | None = None) -> CompatDB:
    """Read and validate every data file. Cached in-process (the data is immutable) and, validated, on disk: a
    pickle keyed by the data files' contents saves each command ~50 ms of YAML parsing and validation. Any
    problem with the cache falls back to reading the data files. Two processes that build it at once each write
    their own temporary file and rename it into place, so a reader sees one whole pickle or none."""
    root = root or data_dir()
    return cached(_cache_file(root), CompatDB, lambda: _read_db(root))


def _read_db(root: Path) -> CompatDB:
    try:
        gpus = _read(root / "gpus.yaml")
        cuda = _read(root / "cuda.yaml")
        drivers = _read(root / "drivers.yaml")
        cudnn = _read(root / "cudnn.yaml")
        pypi = _read(root / "pypi.yaml")
        os_ = _read(root / "os.yaml")
        torch = _read(root / "pytorch.yaml")
        tf = _read(root / "tensorflow.yaml")
        jax = _read(root / "jax.yaml")
        plat = _read(root / "platforms.yaml")
        cloud = _read(root / "cloud.yaml")
        images = _read(root / "images.yaml")
        policy = _read(root / "policy.yaml")
        python = _read(root / "python.yaml")
        installer = _read(root / "installer.yaml")
        paths = _read(root / "paths.yaml")
        containers: Any = _read(root / "containers.yaml")  # raw, like every table above: CompatDB validates it
        # Raw rows, like every table above: CompatDB validates them into Instance.
        instances: Any = [{**row, "provider": provider} for provider in ("aws", "gcp", "azure")
                          for row in cloud[provider]]
        db = CompatDB(
            gpus=gpus["rows"],
            architectures=gpus["architectures"],
            toolkits=cuda["toolkits"],
            mvc=cuda["minor_version_compat"],
            branches=drivers["branches"],
            cudnn=cudnn["releases"],
            pypi_cuda=pypi["cuda"],
            pypi_cudnn=pypi["cudnn"],
            tools=pypi["tools"],
            systems=os_["systems"],
            drivers=os_["drivers"],
            fabricmanager=os_.get("fabricmanager", ()),
            cuda_pkgs=os_["cuda"],
            nvidia_repo=os_["nvidia_repo"],
            torch=torch["rows"],
            torch_index_url=torch["index_url"],
            torch_releases=torch.get("pypi_releases"),
            pypi_index_url=pypi["index"]["url"],
            tensorflow=tf["rows"],
            jax=jax["rows"],
            jetpack=plat["jetpack"],
            jetson_torch=plat["jetson_pytorch"],
            colab=plat["colab"],
            instances=instances,
            images=images["rows"],
            image_registry=images["registry"],
            image_tag=images["tag"],
            image_tag_without_cudnn=images["tag_without_cudnn"],
            policy=policy["policy"],
            python_builds=python["builds"],
            python_release_url=python["release_url"],
            python_install_root=python["install_root"],
            installer=installer["uv"],
            host_paths=paths["paths"],
            host_units=paths["units"],
            venv_files=paths["venv_files"],
            containers=containers,
            devices_root=str(root),
        )
        listed = {g.model: db._listed(g) for g in db.gpus}
        return db.model_copy(update={"kernel_open_rows": {
            model: all(d.kernel_open for d in devs) if devs else None for model, devs in listed.items()}})
    except (OSError, KeyError, ValidationError) as exc:
        raise DataError(f"the compatibility database in {root} is broken: {exc}") from exc
