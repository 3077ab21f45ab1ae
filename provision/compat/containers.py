"""The row types of data/containers.yaml (issue 51): the engines each OS release packages, from which version an
engine requests devices by CDI name, Docker's apt repository, NVIDIA's Container Toolkit and JetPack's packages."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from provision.compat.rows import _Row

ContainerEngine = Literal["docker", "podman", "containerd"]


class EngineRow(_Row):
    """A container engine an OS release packages (data/containers.yaml engines)."""

    os_id: str
    engine: ContainerEngine
    packages: tuple[str, ...]  # what a host installs for it (with the Recommends rootless use needs)
    version: str  # the upstream version, compared with packaging.version
    package_version: str  # as the archive has it


class NotPackaged(_Row):
    engine: ContainerEngine
    os_ids: tuple[str, ...]
    why: str


class CdiSupport(_Row):
    """From which version an engine requests devices by CDI name, and how it is switched on."""

    engine: ContainerEngine
    min_version: str
    default_from: str | None = None
    how: str


class DockerCE(_Row):
    """Docker's own apt repository ({distribution}: debian | ubuntu)."""

    url: str
    key_url: str
    key_fingerprint: str
    key_fingerprint_from: str
    name: str
    component: str
    packages: tuple[str, ...]
    os_ids: tuple[str, ...]
    install_page: str  # {distribution}: the install page of that distribution


class ContainerToolkit(_Row):
    """NVIDIA Container Toolkit from NVIDIA's libnvidia-container repository (a flat repository per architecture)."""

    version: str  # "1.20.0"
    package_version: str  # "1.20.0-1": every package is pinned to it
    packages: tuple[str, ...]
    url: str  # with {arch}
    arch_dirs: dict[str, str]
    key_url: str
    key_fingerprint: str
    key_fingerprint_from: str  # where the fingerprint was read (NVIDIA's guide does not print it)
    name: str
    package_files_from: str


class JetpackContainers(_Row):
    jetpack: str  # the JetPack major release the row covers
    packages: tuple[str, ...]


class ContainerFact(_Row):
    text: str


class Containers(BaseModel):
    """data/containers.yaml: GPU containers on the hosts provision makes (issue 51)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    engines: tuple[EngineRow, ...] = ()
    not_packaged: tuple[NotPackaged, ...] = ()
    cdi: tuple[CdiSupport, ...] = ()
    docker_ce: DockerCE
    toolkit: ContainerToolkit
    jetpack: tuple[JetpackContainers, ...] = ()
    facts: dict[str, ContainerFact] = {}

    def engine(self, os_id: str, engine: str) -> EngineRow | None:
        return next((e for e in self.engines if e.os_id == os_id and e.engine == engine), None)

    def cdi_support(self, engine: str) -> CdiSupport | None:
        return next((c for c in self.cdi if c.engine == engine), None)

    def jetpack_packages(self, jetpack: str) -> JetpackContainers | None:
        major = jetpack.split(".")[0]
        return next((j for j in self.jetpack if j.jetpack == major), None)
