"""`CompatDB`: every table of the database in one frozen model, and the look-ups the resolver asks of it (a GPU by
model, alias, driver-list name or PCI device ID; an OS release; a toolkit; a driver branch; an instance type ...)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from provision.compat.containers import Containers
from provision.compat.devices import (
    _PCI_ID,
    _VARIANT_WORDS,
    Device,
    DeviceTable,
    _exact,
    _family,
    _norm,
    device_gpu,
    device_table,
)
from provision.compat.rows import (
    GPU,
    MVC,
    Architecture,
    BaseImage,
    Branch,
    ColabRuntime,
    CudaPkg,
    Cudnn,
    DriverPkg,
    FabricManager,
    HostPath,
    HostUnit,
    Installer,
    Instance,
    JaxRow,
    JetPack,
    JetsonTorch,
    KernelModule,
    NvidiaRepo,
    OSRow,
    Policy,
    PypiCuda,
    PypiCudnn,
    PypiReleases,
    PythonBuild,
    TFRow,
    Tool,
    Toolkit,
    TorchRow,
)
from provision.versions import V


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
