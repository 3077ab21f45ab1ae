"""The database's row types: one pydantic model per table of provision/data/ (GPUs, CUDA toolkits, driver
branches and packages, cuDNN, wheels, operating systems, frameworks, Jetson, Colab, cloud instances, base images,
policy). Each row carries `source` (URL) and `checked` (date); rows are frozen and forbid unknown fields. The
container tables are compat.containers'."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

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
