"""The compatibility database: typed, validated views of the data files in provision/data/.

Every row carries `source` (URL) and `checked` (date). Nothing here decides anything; `provision.resolver` does.
`load_db()` reads the shipped data; tests build small `CompatDB` objects from fixture tables instead.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationError

from provision.errors import ProvisionError
from provision.resources import data_dir
from provision.versions import V


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    source: str
    checked: str
    confidence: str | None = None
    note: str | None = None


KernelModule = Literal["proprietary", "open"]


class GPU(_Row):
    model: str
    aliases: tuple[str, ...] = ()
    arch: str
    chip: str
    cc: str
    segment: Literal["geforce", "datacenter", "tegra"]
    memory_gb: float | None  # None only in a driver-list row whose SKU's memory varies and no source gives
    # None only in the row made for a GPU a profile describes (resolver.entry.described_gpu); every row of
    # data/gpus.yaml has them (tests/data).
    bandwidth_gbps: float | None
    fp32_tflops: float | None
    fp16_tflops: float | None
    fp64_tflops: float | None
    tdp_w: float | None
    cores: int | None = None  # CUDA cores: with boost_mhz, the FP32 peak is cores x boost x 2 (tests/data checks it)
    boost_mhz: float | None = None
    nvswitch_gpus: int | None = None  # GPUs on the vendor's NVSwitch baseboard (HGX/DGX): Fabric Manager at that count
    kernel_modules: tuple[KernelModule, ...] | None = None  # narrower than its architecture's (GH200: open only)
    # Rows made from NVIDIA's driver list (data/nvidia_devices.yaml): the PCI device ID, and the legacy branch that
    # is the GPU's last driver ("470"); None: a current branch drives it, or the row is one of gpus.yaml's.
    pci_id: str | None = None
    legacy_branch: str | None = None

    @property
    def sm(self) -> str:
        return "sm_" + self.cc.replace(".", "")

    @property
    def tegra(self) -> bool:
        return self.segment == "tegra"


class Architecture(_Row):
    name: str
    cc: tuple[str, ...]
    kernel_modules: tuple[KernelModule, ...]  # the driver's module flavours that drive it (data/gpus.yaml)


class Toolkit(_Row):
    version: str
    min_driver: str
    sm: tuple[int, ...]


class MVC(_Row):
    major: int
    min_driver: str


class Branch(_Row):
    branch: str
    first_release: str  # the branch's driver shipped with its CUDA's toolkit GA: the lowest version a plan installs
    cuda: str
    min_cc: str
    max_cc: str

    def drives(self, gpu: GPU) -> bool:
        """Whether this driver branch supports the GPU's compute capability, and is not newer than the legacy
        branch NVIDIA's driver list names as the GPU's last (`legacybranch`)."""
        if gpu.legacy_branch is not None and V(self.branch) > V(gpu.legacy_branch):
            return False
        return V(self.min_cc) <= V(gpu.cc) <= V(self.max_cc)


class Cudnn(_Row):
    version: str
    cuda_min: str
    cuda_max: str
    min_cc: str
    max_cc: str
    uncertain_cc: tuple[str, ...] = ()  # compute capabilities whose support is the uncertain part of the row


class PypiCuda(_Row):
    cuda: str
    cublas: str | None = None
    runtime: str
    nvrtc: str
    nvcc: str


class PypiCudnn(_Row):
    cudnn: str
    cuda_major: int
    requirement: str


class Tool(_Row):
    name: str
    requirement: str
    python_min: str
    python_max: str


class PythonBuild(_Row):
    """One python-build-standalone archive (data/python.yaml): a managed interpreter a plan can take."""

    version: str  # "3.11.16"
    build: str  # the release tag, "20260814"
    arch: Literal["x86_64", "aarch64"]
    archive: str  # the file name, as the release names it
    sha256: str

    @property
    def minor(self) -> str:
        return ".".join(self.version.split(".")[:2])


class InstallerWheel(_Row):
    """uv's wheel for one architecture (data/installer.yaml), pinned by its sha256."""

    arch: Literal["x86_64", "aarch64"]
    file: str  # the wheel's file name on PyPI
    url: str  # the file on PyPI
    sha256: str


class Installer(_Row):
    """The environment's installer (data/installer.yaml): uv, a wheel per architecture, installed root-owned at prefix."""

    version: str  # "0.13.9"
    prefix: str  # /usr/local/lib/provision/uv/0.13.9
    python_min: str  # the wheel's Requires-Python floor: older environments install with pip
    wheels: tuple[InstallerWheel, ...]

    def wheel(self, arch: str) -> InstallerWheel | None:
        return next((w for w in self.wheels if w.arch == arch), None)


class OSRow(_Row):
    os_id: str
    distribution: Literal["debian", "ubuntu"]
    release: str
    codename: str
    python: str
    python_packages: tuple[str, ...]
    base_image: str
    kernel_headers: str | None
    nvidia_repo: str | None


class HostPath(BaseModel):
    """A path provision owns on a host (data/paths.yaml) and the role variables or task files that write it."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    path: str
    roles: tuple[str, ...]


class HostUnit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    name: str
    roles: tuple[str, ...]


class DriverPkg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    os_id: str
    branch: str
    source: str
    version: str | None
    kernel_module: KernelModule
    segment: Literal["geforce", "datacenter"] | None = None  # None: the same packages for every GPU
    packages: tuple[str, ...]
    userspace_packages: tuple[str, ...]
    source_url: str
    checked: str
    confidence: str | None = None


class CudaPkg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    os_id: str
    cuda: str
    source: str
    kind: Literal["toolkit", "runtime"]
    version: str
    packages: tuple[str, ...]
    source_url: str
    checked: str


class NvidiaRepoEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    slug: str
    cuda: tuple[str, ...]


class NvidiaRepo(_Row):
    url: str
    keyring_package: str
    key_file: str  # the signing key, beside the repository's packages (url + key_file)
    key_fingerprint: str  # 40 hex digits: an image uses the fetched key only when its fingerprint is this
    arch_dirs: dict[str, str]  # machine architecture -> the repository's directory ({arch} in url)
    toolkit_packages: tuple[str, ...]
    runtime_packages: tuple[str, ...]
    repos: tuple[NvidiaRepoEntry, ...]

    def offers(self, slug: str | None, cuda: str) -> bool:
        return any(r.slug == slug and cuda in r.cuda for r in self.repos)


class TorchRow(_Row):
    version: str
    variant: str
    cuda: str
    python_min: str
    python_max: str
    cudnn: str
    arch: tuple[str, ...]
    ptx: str | None
    pypi_default: bool
    numpy_major: int
    # PyPI's aarch64 wheels of this release are CUDA builds (their nvidia-* requirements hold on aarch64). False: the
    # aarch64 wheel is CPU-only (the nvidia-* requirements carry platform_machine == "x86_64" markers).
    aarch64_cuda: bool = False
    arch_from: str | None = None  # where arch/ptx were read from, when from the wheel's own binaries
    pins: tuple[str, ...] = ()  # NVIDIA wheels its Requires-Dist pins where they differ from pypi.yaml's CUDA row


class JaxRow(_Row):
    """One JAX release with one CUDA plugin (jax[cuda12] / jax[cuda13]). arch/ptx: the plugin's own GPU code."""

    version: str
    extra: Literal["cuda12", "cuda13"]
    cuda: str
    cudnn: str
    python_min: str
    python_max: str
    arch: tuple[str, ...]
    ptx: str | None
    numpy_major: int = 2
    aarch64_cuda: bool = False  # the plugin's aarch64 wheels are CUDA builds
    arch_from: str | None = None


class PypiReleases(_Row):
    """The releases a package has on PyPI (final, not yanked), as recorded by scripts/refresh_db.py: what a test
    compares the database's rows with, offline."""

    name: str
    versions: tuple[str, ...]


class TFRow(_Row):
    version: str
    python_min: str
    python_max: str
    cuda: str
    cudnn: str
    min_cc: str
    cpu_flags: tuple[str, ...]
    requirement: str
    numpy_major: int = 2  # the numpy major the wheels accept (TF < 2.18 requires numpy < 2)
    numpy_max: str | None = None  # the newest numpy the wheels' Requires-Dist admits within that major (2.12: <1.24)
    aarch64_cuda: bool = False  # tensorflow[and-cuda] brings CUDA wheels on aarch64 too


class JetPack(_Row):
    jetpack: str
    l4t: str
    os_id: str
    cuda: str
    cudnn: str
    tensorrt: str
    python: str
    modules: tuple[str, ...]
    base_image: str


class JetsonTorch(_Row):
    jetpack: str
    version: str  # the wheel's own version (its file name), e.g. 2.5.0a0+872d972e41.nv24.08.17622132
    cuda: str
    cudnn: str
    arch: tuple[str, ...]
    python: str  # the one CPython the wheel is built for (cp310)
    url: str  # NVIDIA's directory is not a PEP 503 index: the wheel is planned as a direct reference
    sha256: str | None = None  # None: the file could not be hashed from here; the plan refuses it
    sha256_from: str | None = None  # where the hash was read (an index's link, a published checksum, a download)


class ColabFramework(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    name: str
    package: str
    version: str
    variant: str | None
    cuda: str


class ColabRuntime(_Row):
    runtime: str
    os_id: str
    python: str
    driver: str
    branch: str
    cuda: str
    cudnn: str
    gpus: tuple[str, ...]
    frameworks: tuple[ColabFramework, ...]


class Instance(_Row):
    provider: Literal["aws", "gcp", "azure"]
    instance_type: str
    gpu: str
    gpus: int
    vcpu: int
    ram_gib: float
    usd_hr: float | None = None  # on-demand list price where a source gives one
    interconnect: Literal["pcie", "nvlink", "nvswitch"] = "pcie"
    arch: Literal["x86_64", "aarch64"] = "x86_64"


class FabricManager(BaseModel):
    """NVIDIA Fabric Manager packages for one OS and driver branch (NVSwitch systems: CUDA does not initialise
    without it, and its version must equal the driver's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    os_id: str
    branch: str
    source: str
    packages: tuple[str, ...]
    service: str
    source_url: str
    checked: str
    confidence: str | None = None


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


class BaseImage(_Row):
    cuda: str
    full: str
    cudnn_flavour: str
    ubuntu: tuple[str, ...]


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    order: tuple[str, ...]
    cuda_sources: dict[str, tuple[str, ...]]
    # Driver sources per distribution, in tiers: a later tier is tried only where no stack holds with the drivers of
    # the earlier ones (Debian's own packages first; NVIDIA's repository only where they cannot drive the GPU or run
    # the CUDA the plan needs). A distribution not listed: one tier of every source its rows name.
    driver_sources: dict[str, tuple[tuple[str, ...], ...]] = {}
    # Where the driver comes from one of these sources, CUDA's sources are these instead of the distribution's (a
    # host takes no system CUDA from another vendor than its driver's: Debian's CUDA packages depend on Debian's
    # driver libraries, which NVIDIA's repository's driver replaces).
    cuda_sources_by_driver: dict[str, tuple[str, ...]] = {}
    cudnn_sources: tuple[str, ...]
    prefer_native_cuda: bool
    # Within one framework release, a build PyPI serves (torch's plain `pip install torch==X`) wins over the same
    # release's builds from another index whenever it fits, however new their CUDA.
    prefer_pypi_builds: bool
    fp16_slow_ratio: float
    cuda_home: dict[str, str]
    venv: str
    # `compare`: machines whose GPU memory or FP32 rate differ by more than this factor are not compared
    compare_within: float = 2.0
    # `compare`: a break-even beyond this many hours of use is no break-even (5 years of round-the-clock use)
    break_even_horizon_h: float = 43800


class CompatDB(BaseModel):
    """All tables. Built from the data files by `load_db`, or from fixture tables in tests."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    gpus: tuple[GPU, ...] = ()
    architectures: tuple[Architecture, ...] = ()
    toolkits: tuple[Toolkit, ...] = ()
    mvc: tuple[MVC, ...] = ()
    branches: tuple[Branch, ...] = ()
    cudnn: tuple[Cudnn, ...] = ()
    pypi_cuda: tuple[PypiCuda, ...] = ()
    pypi_cudnn: tuple[PypiCudnn, ...] = ()
    tools: tuple[Tool, ...] = ()
    systems: tuple[OSRow, ...] = ()
    drivers: tuple[DriverPkg, ...] = ()
    fabricmanager: tuple[FabricManager, ...] = ()
    cuda_pkgs: tuple[CudaPkg, ...] = ()
    nvidia_repo: NvidiaRepo | None = None
    torch: tuple[TorchRow, ...] = ()
    torch_index_url: str = "https://download.pytorch.org/whl/{variant}"
    torch_releases: PypiReleases | None = None  # torch's releases on PyPI since the first row's
    pypi_index_url: str = "https://pypi.org/simple"
    tensorflow: tuple[TFRow, ...] = ()
    jax: tuple[JaxRow, ...] = ()
    jetpack: tuple[JetPack, ...] = ()
    jetson_torch: tuple[JetsonTorch, ...] = ()
    colab: tuple[ColabRuntime, ...] = ()
    instances: tuple[Instance, ...] = ()  # AWS, Google Cloud and Azure GPU instance types
    images: tuple[BaseImage, ...] = ()
    image_registry: str = "nvidia/cuda"
    image_tag: str = "{full}-{cudnn_flavour}-{kind}-ubuntu{ubuntu}"
    image_tag_without_cudnn: str = "{full}-{kind}-ubuntu{ubuntu}"
    policy: Policy | None = None
    python_builds: tuple[PythonBuild, ...] = ()  # python-build-standalone's archives (data/python.yaml)
    python_release_url: str = "https://github.com/astral-sh/python-build-standalone/releases/download/{build}/{archive}"
    python_install_root: str = "/opt/provision/python"
    installer: Installer | None = None  # uv (data/installer.yaml); None: the environments install with pip
    host_paths: dict[str, HostPath] = {}  # what provision owns on a host, by name (data/paths.yaml)
    host_units: dict[str, HostUnit] = {}
    venv_files: dict[str, HostPath] = {}  # what the roles write in the environment, relative to it (data/paths.yaml)
    containers: Containers | None = None  # data/containers.yaml; None: a database without it plans no containers
    # Where data/nvidia_devices.yaml and the driver lists it names are: read on first use only (devices()), as most
    # commands never look past gpus.yaml. None (fixture databases): no driver list.
    devices_root: str | None = None
    # Per gpus.yaml model: whether the open kernel modules drive every device NVIDIA's driver lists name for it
    # (`kernelopen`), None where no list names it. Worked out when the database is compiled (load_db), so that a plan
    # does not read the lists (34 ms) for what does not change between plans.
    kernel_open_rows: dict[str, bool | None] = {}

    # --- look-ups -------------------------------------------------------------------------------------------
    def gpu(self, name: str) -> GPU | None:
        key = _norm(name)
        for g in self.gpus:
            if key == _norm(g.model) or key in (_norm(a) for a in g.aliases):
                return g
        return None

    def gpu_by_device_name(self, name: str) -> GPU | None:
        """The row for a name as the driver reports it ('NVIDIA H100 80GB HBM3'), trying shorter prefixes ('NVIDIA
        H100'); never through a variant word (a laptop RTX 4090 is another chip with other peaks than the desktop
        RTX 4090 its prefix names)."""
        words = name.split()
        for end in range(len(words), 0, -1):
            if any(w.lower() in _VARIANT_WORDS for w in words[end:]):
                return None
            row = self.gpu(" ".join(words[:end]))
            if row is not None:
                return row
        return None

    def devices(self) -> DeviceTable:
        """NVIDIA's driver lists with each device's chip, architecture and compute capability (read once)."""
        return device_table(self.devices_root)

    def device(self, name: str) -> Device | None:
        """A driver-list device by the name nvidia-smi prints (case and spacing aside) or by PCI device ID
        ('0x1DB1'). Where one name covers several device IDs, the first; they share chip family (tests/data)."""
        table = self.devices()
        if _PCI_ID.match(name.strip()):
            found = table.by_id.get(int(name.strip(), 16))
        else:
            found = table.by_name.get(_exact(name)) or table.by_norm.get(_norm(name))
        return found[0] if found else None

    def resolve_gpu(self, name: str) -> GPU | None:
        """The row for a name or PCI device ID: gpus.yaml's row by model or alias; else the driver list's device,
        as gpus.yaml's row where the name's prefix names one on the same chip family and compute capability
        ('NVIDIA H100 80GB HBM3'), else a row made from the list (chip, architecture, compute capability, legacy
        branch, kernelopen); None where neither knows it."""
        if not _PCI_ID.match(name.strip()):
            row = self.gpu(name)
            if row is not None:
                return row
        dev = self.device(name)
        if dev is None:
            return None
        if not _PCI_ID.match(name.strip()) and len({d.cc for d in self.devices().chips_named(name)}) > 1:
            return None  # NVIDIA reused the name for chips of different compute capability: the PCI ID decides
        row = self.gpu(dev.name) or self.gpu_by_device_name(dev.name)
        if row is not None and row.cc == dev.cc and _family(row.chip) == dev.chip:
            return row
        made = device_gpu(dev)
        arch = self.architecture_of(made.cc) if made is not None else None
        if made is not None and arch is not None and "proprietary" not in arch.kernel_modules:
            # kernelopen says the open modules drive it; the architecture, that only they do (Blackwell)
            made = made.model_copy(update={"kernel_modules": tuple(m for m in (made.kernel_modules or ())
                                                                   if m in arch.kernel_modules)})
        return made

    def python_build(self, minor: str, arch: str) -> PythonBuild | None:
        """The newest python-build-standalone archive of a minor version ("3.11") for an architecture."""
        rows = [b for b in self.python_builds if b.minor == minor and b.arch == arch]
        return max(rows, key=lambda b: V(b.version), default=None)

    def architecture_of(self, cc: str) -> Architecture | None:
        return next((a for a in self.architectures if cc in a.cc), None)

    def kernel_modules(self, gpu: GPU) -> tuple[KernelModule, ...]:
        """The driver's kernel-module flavours that drive this GPU. Whether the open modules do, NVIDIA's driver
        list decides (`kernelopen` on every device it lists under the row's PCI ID, model or aliases); whether the
        proprietary ones do, the architecture (Blackwell: open only). A row the lists do not name (Jetson's
        integrated GPUs) takes its architecture's flavours; a row may narrow them (GH200: Grace)."""
        if gpu.kernel_modules is not None:
            return gpu.kernel_modules
        arch = self.architecture_of(gpu.cc)
        flavours = arch.kernel_modules if arch is not None else ("proprietary", "open")
        if gpu.model in self.kernel_open_rows and any(g is gpu for g in self.gpus):
            opens = self.kernel_open_rows[gpu.model]
        else:  # a row made or changed after the database was compiled
            listed = self._listed(gpu)
            opens = all(d.kernel_open for d in listed) if listed else None
        if opens is None:
            return flavours
        return tuple(f for f in ("proprietary", "open") if (opens if f == "open" else f in flavours))

    def _listed(self, gpu: GPU) -> tuple[Device, ...]:
        """The driver lists' devices a gpus.yaml row stands for: by its PCI ID, else by its model and aliases."""
        table = self.devices()
        if gpu.pci_id:
            return table.by_id.get(int(gpu.pci_id, 16), ())
        return tuple(d for n in (gpu.model, *gpu.aliases) for d in table.chips_named(n))

    def gpu_names(self) -> list[str]:
        return [g.model for g in self.gpus] + [a for g in self.gpus for a in g.aliases]

    def system(self, os_id: str) -> OSRow | None:
        return next((s for s in self.systems if s.os_id == os_id), None)

    def toolkit(self, version: str) -> Toolkit | None:
        return next((t for t in self.toolkits if t.version == version), None)

    def branch(self, branch: str) -> Branch | None:
        return next((b for b in self.branches if b.branch == branch), None)

    def mvc_floor(self, major: int) -> MVC | None:
        return next((m for m in self.mvc if m.major == major), None)

    def cudnn_release(self, version: str) -> Cudnn | None:
        return next((c for c in self.cudnn if c.version == version), None)

    def instance(self, instance_type: str) -> Instance | None:
        return next((i for i in self.instances if i.instance_type == instance_type), None)

    @property
    def aws(self) -> tuple[Instance, ...]:
        return tuple(i for i in self.instances if i.provider == "aws")

    def fabric_manager(self, os_id: str, branch: str) -> FabricManager | None:
        return next((f for f in self.fabricmanager if f.os_id == os_id and f.branch == branch), None)

    def jetpack_release(self, jetpack: str) -> JetPack | None:
        return next((j for j in self.jetpack if j.jetpack == jetpack), None)


# Words in a device name that make it another part than the model its prefix names (laptop and Max-Q parts).
_VARIANT_WORDS = {"laptop", "mobile", "max-q", "maxq", "notebook"}


def _norm(name: str) -> str:
    """'NVIDIA Tesla V100-SXM2-16GB' and 'Tesla V100 SXM2 16GB' are one name: case, 'NVIDIA'/'GeForce' and the
    hyphens nvidia-smi puts between a model's words aside."""
    return " ".join(name.lower().replace("-", " ").replace("nvidia ", "").replace("geforce ", "").split())


def _exact(name: str) -> str:
    return " ".join(name.lower().split())


def _family(chip: str) -> str:
    """gpus.yaml's chip ('GP104', 'GK110B', 'GA107GL') as the family pci_ids.id_ranges names."""
    return re.sub(r"(GLM|GL|BM|M)$", "", chip.split()[0]) if chip else chip


_PCI_ID = re.compile(r"^0[xX][0-9a-fA-F]{4}$")


class Device(NamedTuple):
    """One entry of a driver's supported-gpus.json with what data/nvidia_devices.yaml says of its chip (a tuple,
    not a validated model: 2224 of them are built in a few milliseconds)."""

    pci_id: str  # "0x1DB1", as the list writes it
    name: str  # as nvidia-smi prints it
    legacy_branch: str | None  # "470" for "470.xx"; None: the list's driver (a current branch) drives it
    kernel_open: bool  # `kernelopen`: the open kernel modules drive it
    chip: str  # family from pci.ids ("GV100"), "unknown" where pci.ids does not name the device
    arch: str | None
    cc: str | None  # None: the chip predates CUDA
    driver: str  # the driver whose list names it ("550.163.01")
    source: str  # the list's package page
    checked: str
    chip_source: str  # the family row's source (compute capability per chip)
    confidence: str | None
    cc_note: str | None = None  # why a CUDA-era chip has no compute capability (NVIDIA publishes none for it)
    list_name: str = ""  # which list names it, for people: "supported-gpus.json of 550.163.01"


@dataclasses.dataclass(frozen=True)
class DeviceTable:
    devices: tuple[Device, ...] = ()
    by_id: dict[int, tuple[Device, ...]] = dataclasses.field(default_factory=dict)
    by_name: dict[str, tuple[Device, ...]] = dataclasses.field(default_factory=dict)
    by_norm: dict[str, tuple[Device, ...]] = dataclasses.field(default_factory=dict)
    lists: tuple[dict, ...] = ()

    def chips_named(self, name: str) -> tuple[Device, ...]:
        """Every device of a name; more than one chip family where NVIDIA reused a name (GeForce GT 730)."""
        return self.by_name.get(_exact(name)) or self.by_norm.get(_norm(name)) or ()


@functools.cache
def device_table(root: str | None) -> DeviceTable:
    """data/nvidia_devices.yaml and the driver lists it names, read on first use only (commands that never look
    past gpus.yaml do not pay it) and kept, like the database, in a pickle keyed by the data files."""
    if root is None:
        return DeviceTable()
    import pickle

    cache = _cache_file(Path(root), "devices")
    try:
        with cache.open("rb") as fh:
            table = pickle.load(fh)
        if isinstance(table, DeviceTable):
            return table
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        pass
    table = _read_devices(Path(root))
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(table))
        tmp.replace(cache)
    except OSError:
        pass
    return table


# A row of the open kernel modules' "Compatible GPUs" table: name, PCI device ID and, where the name is a subsystem's,
# the subsystem's vendor and device IDs ("| NVIDIA RTX PRO 6000 Blackwell Workstation Edition | 2BB1 10DE 204B |").
_README_ROW = re.compile(r"^\| (\S.*?) +\| ([0-9A-F]{4})(?: ([0-9A-F]{4}) ([0-9A-F]{4}))? +\|$", re.MULTILINE)


def list_entries(file: Path, fmt: str) -> list[dict]:
    """A driver list's entries as supported-gpus.json writes them (devid, name, legacybranch, features).

    `supported-gpus.json`: the driver's own list (every GPU it drives). `open-modules-readme`: the "Compatible
    GPUs" table of NVIDIA's open-gpu-kernel-modules README for one release, the GPUs the open kernel modules drive
    (the list's `kernelopen` rows; it has no legacy branches, the open modules drive no legacy GPU)."""
    import gzip
    import json

    with gzip.open(file, "rt", encoding="utf-8") as fh:
        text = fh.read()
    if fmt == "supported-gpus.json":
        return json.loads(text)["chips"]
    if fmt != "open-modules-readme":
        raise DataError(f"{file.name}: unknown driver list format '{fmt}'")
    _, found, table = text.partition("\n## Compatible GPUs\n")
    if not found:
        raise DataError(f"{file.name}: no 'Compatible GPUs' section")
    rows = []
    for m in _README_ROW.finditer(table.split("\n## ", 1)[0]):
        entry = {"devid": f"0x{m.group(2)}", "name": m.group(1), "features": ["kernelopen"]}
        if m.group(3):
            entry.update(subvendorid=f"0x{m.group(3)}", subdevid=f"0x{m.group(4)}")
        rows.append(entry)
    return rows


def _read_devices(path: Path) -> DeviceTable:
    import bisect

    root = path
    try:
        meta = _read(path / "nvidia_devices.yaml")
        families = {f["chip"]: f for f in meta["families"]}
        ranges = sorted((int(r["first"], 16), int(r["last"], 16), r["chip"]) for r in meta["pci_ids"]["id_ranges"])
        firsts = [r[0] for r in ranges]
        devices: list[Device] = []
        for lst in meta["driver_lists"]:
            fmt = lst.get("format", "supported-gpus.json")
            list_name = (f"supported-gpus.json of {lst['driver']}" if fmt == "supported-gpus.json"
                         else f"the open kernel modules' table of {lst['driver']}")
            for entry in list_entries(path / lst["file"], fmt):
                devid = int(entry["devid"], 16)
                at = bisect.bisect_right(firsts, devid) - 1
                chip = ranges[at][2] if at >= 0 and ranges[at][1] >= devid else "unknown"
                fam = families.get(chip, {})
                legacy = entry.get("legacybranch")
                devices.append(Device(
                    entry["devid"], entry["name"], legacy.split(".")[0] if legacy else None,
                    "kernelopen" in entry.get("features", ()), chip, fam.get("arch"), fam.get("cc"), lst["driver"],
                    lst["source"], lst["checked"], fam.get("source", meta["pci_ids"]["source"]),
                    fam.get("confidence"), fam.get("cc_note"), list_name,
                ))
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"the device table in {root} is broken: {exc}") from exc
    by_id: dict[int, list[Device]] = {}
    by_name: dict[str, list[Device]] = {}
    by_norm: dict[str, list[Device]] = {}
    for d in devices:
        by_id.setdefault(int(d.pci_id, 16), []).append(d)
        by_name.setdefault(_exact(d.name), []).append(d)
        by_norm.setdefault(_norm(d.name), []).append(d)

    def freeze(m: dict) -> dict:
        return {k: tuple(v) for k, v in m.items()}

    return DeviceTable(devices=tuple(devices), by_id=freeze(by_id), by_name=freeze(by_name),
                       by_norm=freeze(by_norm), lists=tuple(meta["driver_lists"]))


_MEMORY_IN_NAME = re.compile(r"(?<![\w.])(\d+)\s?GB\b", re.IGNORECASE)


def device_gpu(dev: Device) -> GPU | None:
    """The row for a driver-list device that gpus.yaml does not list: chip, architecture and compute capability
    from data/nvidia_devices.yaml, memory from the name where NVIDIA's name states it ('Tesla P100-PCIE-12GB'),
    else unknown (the SKU's memory varies); peaks unknown. None for a chip that predates CUDA."""
    if dev.cc is None or dev.arch is None:
        return None
    m = _MEMORY_IN_NAME.search(dev.name)
    memory = float(m.group(1)) if m else None
    modules: tuple[KernelModule, ...] = ("proprietary", "open") if dev.kernel_open else ("proprietary",)
    return GPU(
        model=dev.name, arch=dev.arch, chip=dev.chip, cc=dev.cc, segment="geforce", memory_gb=memory,
        bandwidth_gbps=None, fp32_tflops=None, fp16_tflops=None, fp64_tflops=None, tdp_w=None,
        kernel_modules=modules, pci_id=dev.pci_id, legacy_branch=dev.legacy_branch,
        confidence="driver-list",
        note="memory from NVIDIA's name for it" if m else None,
        source=f"{dev.source} ({dev.list_name or dev.driver}, {dev.pci_id}); chip: pci.ids; "
               f"compute capability: {dev.chip_source}",
        checked=dev.checked,
    )


class DataError(ProvisionError):
    """The shipped database itself is broken (a packaging bug, not the user's fault)."""


def _read(path: Path) -> dict:
    # The shipped data is trusted and needs no line numbers: libyaml's C loader reads it ~20x faster than a
    # pure-Python parser, which matters for the cold start of every command.
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with path.open() as fh:
        return yaml.load(fh, Loader=loader) or {}


def _cache_file(root: Path, what: str = "db") -> Path:
    """Where the validated database is kept between processes, keyed by provision's version, the data folder, the
    validating code (compat.py, models.py) and the data files' names and contents (sha256 of all ~350 KB: about a
    millisecond). Keyed by content, not by size and mtime, so an edit that keeps both (a copied file, a checkout, a
    coarse clock) still makes a new cache: it is never stale."""
    import hashlib

    from provision import __version__

    digest = hashlib.sha256(__version__.encode())
    # The database records its folder, and the code that validates the rows decides what they hold: a cache written
    # by another checkout (another folder, or the same data read by other code) is another key (2026-11-28: a
    # cache from a worktree's checkout came back with that checkout's folder).
    digest.update(f"{root.resolve()}\0".encode())
    here = Path(__file__).resolve().parent
    for code in (here / "compat.py", here / "models.py"):
        digest.update(hashlib.sha256(code.read_bytes()).digest())
    for path in sorted([*root.glob("*.yaml"), *root.glob("*.json.gz")]):
        digest.update(f"{path.name}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    base = Path(os.environ.get("PROVISION_CACHE", Path.home() / ".cache" / "provision"))
    return base / "compat" / f"{what}-{digest.hexdigest()[:20]}.pickle"


@functools.cache
def load_db(root: Path | None = None) -> CompatDB:
    """Read and validate every data file. Cached in-process (the data is immutable) and, validated, on disk: a
    pickle keyed by the data files' contents saves each command ~50 ms of YAML parsing and validation. Any
    problem with the cache falls back to reading the data files. Two processes that build it at once each write
    their own temporary file and rename it into place, so a reader sees one whole pickle or none."""
    import pickle

    root = root or data_dir()
    cache = _cache_file(root)
    try:
        with cache.open("rb") as fh:
            db = pickle.load(fh)
        if isinstance(db, CompatDB):
            return db
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError):
        pass
    db = _read_db(root)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(db))
        tmp.replace(cache)
    except OSError:
        pass  # read-only home: no cache, same result
    return db


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


__all__ = ["CompatDB", "load_db", "V"]
