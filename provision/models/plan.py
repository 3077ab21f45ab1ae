"""`Plan`: what the resolver decided, frozen and fully concrete, every choice with a reason; the Ansible variables
and the Dockerfile are rendered from it and nothing else."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from provision.plan_rules import dotted, problems


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class Reason(_Frozen):
    component: str  # driver, cuda, cudnn, python, framework:pytorch, jupyter, image, ...
    choice: str
    why: str
    source: str  # URL of the fact(s) the choice rests on


class TargetPlan(_Frozen):
    kind: Literal["baremetal", "cloud", "colab", "jetson"]
    distribution: Literal["ubuntu", "debian"]
    release: str
    codename: str
    os_id: str  # e.g. debian-13, ubuntu-24.04: the key of the per-OS data
    arch: Literal["x86_64", "aarch64"]
    instance_type: str | None = None
    jetpack: str | None = None
    l4t: str | None = None


class GPUPlan(_Frozen):
    model: str
    arch: str  # Kepler, Pascal, ...
    chip: str
    compute_capability: str  # "6.1"
    sm: str  # "sm_61"
    count: int
    memory_gb: float | None  # None: the SKU's memory varies and no source gives it (the reasons say so)
    bandwidth_gbps: float | None  # None: a GPU the profile described, without its peaks
    fp32_tflops: float | None
    fp16_tflops: float | None
    fp64_tflops: float | None
    tegra: bool
    interconnect: Literal["pcie", "nvlink", "nvswitch"] = "pcie"


class CPUPlan(_Frozen):
    model: str
    flags: tuple[str, ...]


class DriverPlan(_Frozen):
    install: bool  # False on Colab and Jetson: the platform owns the driver, we verify it
    branch: str | None
    source: str  # debian | ubuntu | nvidia-repo | platform
    packages: tuple[str, ...]  # full driver install (bare metal)
    userspace_packages: tuple[str, ...]  # user-space only (containers)
    version: str | None  # package version as the source has it, when known
    max_cuda: str | None  # CUDA version the driver's API reports (nvidia-smi "CUDA Version")
    min_version: str | None  # lowest driver version the planned CUDA needs (verified on the host)
    kernel_module: Literal["proprietary", "open", "platform"]
    # NVSwitch systems: NVIDIA Fabric Manager of the driver's branch (also in `packages`) and its service
    fabric_manager: tuple[str, ...] = ()
    fabric_manager_service: str | None = None


class CudaPlan(_Frozen):
    version: str  # "12.6"
    full_version: str | None  # "12.6.77" where the source pins one
    source: str  # pypi | debian | nvidia-repo | platform
    kind: Literal["toolkit", "runtime"]  # toolkit has nvcc; runtime is libraries + NVRTC only
    install: bool
    packages: tuple[str, ...]  # apt package names, or pip requirement strings for pypi
    home: str  # CUDA_HOME on the target


class CudnnPlan(_Frozen):
    version: str | None  # "9.10.2" or "8.5.0"; None when no cuDNN is planned
    full_version: str | None
    source: str | None  # pypi | nvidia-repo | platform | framework
    install: bool
    packages: tuple[str, ...]


class ManagedPython(_Frozen):
    """python-build-standalone's CPython (data/python.yaml), unpacked root-owned under /opt/provision/python where the
    distribution's python3 is outside what the pins allow."""

    version: str  # "3.11.16"
    build: str  # the release, "20260814"
    archive: str  # the file name, as the release (and a mirror) names it
    sha256: str  # the database's, from the release's SHA256SUMS
    url: str  # the archive in the release
    mirror: str | None = None  # a directory or URL with the same file names and a SHA256SUMS (--python-mirror)
    prefix: str  # where it is unpacked: /opt/provision/python/cpython-3.11.16+20260814


class InstallerPlan(_Frozen):
    """The installer of the environment's wheels (data/installer.yaml): uv's wheel from PyPI for the target's
    architecture, pinned by sha256, installed root-owned at `prefix` and run as `uv pip install --require-hashes`."""

    tool: Literal["uv"]
    version: str  # "0.13.9"
    wheel: str  # the wheel's file name on PyPI
    url: str  # the file on PyPI, which a host downloads where the controller did not copy it
    sha256: str
    prefix: str  # /usr/local/lib/provision/uv/0.13.9: bin/uv, root's alone

    @property
    def requirement(self) -> str:
        """The hash-pinned requirement line pip downloads and installs it by (`uv==0.13.9 --hash=sha256:...`)."""
        return f"{self.tool}=={self.version} --hash=sha256:{self.sha256}"

    @property
    def binary(self) -> str:
        return f"{self.prefix}/bin/uv"


class PythonPlan(_Frozen):
    version: str  # "3.11"
    source: str  # system | platform | managed
    interpreter: str  # /usr/bin/python3, or the managed interpreter's bin/python3.11
    packages: tuple[str, ...]  # apt packages needed to make a venv
    venv: str  # path of the virtual environment on the target
    # The environment also sees the interpreter's own site-packages: where the platform preinstalls the frameworks
    # (Colab), they are verified in place rather than installed a second time.
    system_site_packages: bool = False
    managed: ManagedPython | None = None  # source managed: the archive, its hash and where it goes
    # The environment's wheels are installed with uv where the plan names it; None (plans recorded before, or a
    # database without data/installer.yaml): with the environment's pip.
    installer: InstallerPlan | None = None


class IndexPlan(_Frozen):
    name: str  # pypi | pytorch
    url: str | None  # None: not reachable (off); pytorch's has {variant}
    default: bool  # the database's own URL (not a mirror the profile or --index named)


class FrameworkPlan(_Frozen):
    name: str  # pytorch | tensorflow
    package: str  # torch | tensorflow
    version: str  # "2.6.0"
    variant: str | None  # cu126, cu117, cpu, jetpack
    index_url: str | None  # non-default wheel index, None = the pypi index (Plan.pip_index_url or PyPI)
    requirements: tuple[str, ...]  # pip requirement strings, exact
    cuda: str | None  # CUDA the wheels are built with
    cudnn: str | None  # cuDNN the wheels bring, if they bring one
    arch_list: tuple[str, ...]  # compute capabilities compiled into the wheels ("3.7", "5.0", ...)


class JupyterPlan(_Frozen):
    enabled: bool
    port: int
    bind: str
    auth: Literal["token", "password"]
    tls: bool
    requirements: tuple[str, ...]


class VerifyPlan(_Frozen):
    expect_gpu: bool
    target_arch: str  # "sm_61": NVRTC compiles cubins for this
    nvrtc_requirements: tuple[str, ...]  # pip requirement(s) that bring NVRTC matching the planned CUDA
    cuda_python_requirements: tuple[str, ...]  # runtime libs for the verifier where the stack has none
    numpy_requirement: str


class AptRepoPlan(_Frozen):
    """An apt repository the image adds on a plain distribution base (NVIDIA's CUDA repository): the image fetches
    the signing key and uses it only when its fingerprint is `key_fingerprint`."""

    url: str  # the repository's directory, ending in '/': `deb [signed-by=...] URL /`
    key_url: str
    key_fingerprint: str  # 40 upper-case hex digits
    name: str  # file stem under /etc/apt/sources.list.d and /usr/share/keyrings


class ImagePlan(_Frozen):
    base_image: str  # for the GPU runtime stage, e.g. nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
    platform: str  # linux/amd64 | linux/arm64
    devel: bool
    apt_packages: tuple[str, ...]  # runtime OS packages the image needs (sorted)
    # The base image's content digest (sha256:...) when `provision build` has seen it: the plan's JSON then pins
    # the base, and a build from that saved plan refuses a base whose content differs. None in a resolved plan.
    base_digest: str | None = None
    # NVIDIA's CUDA repository, added by the image where the base is a plain distribution image and the plan installs
    # CUDA or cuDNN from it (no nvidia/cuda image for that CUDA and OS release). None otherwise.
    apt_repository: AptRepoPlan | None = None


class ContainerToolkitPlan(_Frozen):
    """NVIDIA's Container Toolkit on the host (data/containers.yaml toolkit, or JetPack's packages on a Jetson)."""

    version: str | None  # "1.20.0"; None on a Jetson: the JetPack release's own, not pinned
    source: Literal["nvidia-repo", "jetpack"]
    packages: tuple[str, ...]  # apt packages, pinned (`nvidia-container-toolkit-base=1.20.0-1`) from NVIDIA's repository
    repo: AptRepoPlan | None  # NVIDIA's libnvidia-container repository; None on a Jetson (JetPack's own is there)
    mode: Literal["cdi", "csv"]  # csv: Tegra, the runtime mounts what the CSV files list
    runtime_configure: Literal["docker", "containerd", "none"]  # `nvidia-ctk runtime configure --runtime=X`
    runtime_mode: Literal["cdi"] | None = None  # the nvidia runtime's mode in config.toml, where the engine uses it


class ContainersPlan(_Frozen):
    """The container engine and how its containers get the GPU (software.containers, issue 51)."""

    engine: Literal["docker", "podman", "containerd"]
    engine_source: Literal["distribution", "docker-ce", "jetpack"]
    engine_packages: tuple[str, ...]
    engine_version: str | None  # the version the OS release ships (data); None for docker-ce (the repository's newest)
    engine_repo: AptRepoPlan | None = None  # docker-ce: Docker's repository, its key checked by fingerprint
    cdi: bool  # the engine requests devices by CDI name itself (docker >= 25 with features.cdi, podman >= 4.1)
    gpu_run_args: tuple[str, ...]  # how a container gets the GPU here: --device nvidia.com/gpu=all, --runtime nvidia
    rootless_user: str | None = None  # podman: the account that runs its containers rootless
    toolkit: ContainerToolkitPlan


class Plan(_Frozen):
    schema_version: int = 1
    profile: str
    profile_path: str | None
    target: TargetPlan
    gpu: GPUPlan
    other_gpus: tuple[GPUPlan, ...] = ()  # mixed boxes: the further models the same stack serves
    cpu: CPUPlan
    driver: DriverPlan
    cuda: CudaPlan
    cudnn: CudnnPlan
    python: PythonPlan
    frameworks: tuple[FrameworkPlan, ...]
    jupyter: JupyterPlan
    verify: VerifyPlan
    image: ImagePlan
    user: str
    reasons: tuple[Reason, ...]
    warnings: tuple[str, ...]
    indexes: tuple[IndexPlan, ...] = ()  # () in plans recorded before indexes were planned: PyPI and PyTorch's own
    # software.containers; None (none, and plans recorded before issue 51). Left out of the plan's JSON when None, so
    # a plan without containers dumps, digests and fingerprints as it did before the field existed.
    containers: ContainersPlan | None = None

    @model_serializer(mode="wrap")
    def _without_absent_containers(self, handler):
        data = handler(self)
        if isinstance(data, dict) and data.get("containers", ...) is None:
            del data["containers"]
        return data

    @property
    def pip_index_url(self) -> str | None:
        """The index every pip install uses when it is not PyPI itself (a mirror), else None (pip's default)."""
        pypi = next((i for i in self.indexes if i.name == "pypi"), None)
        return pypi.url if pypi is not None and not pypi.default else None

    @model_validator(mode="after")
    def _only_safe_values(self, info: ValidationInfo) -> Plan:
        """Every value within its allow-list (provision.plan_rules). A saved plan is read with the context
        {"plan_rules": "report"}, which leaves the check to the reader so that it reports each field on its own line."""
        if (info.context or {}).get("plan_rules") != "report":
            found = problems(self.model_dump())
            if found:
                raise ValueError("; ".join(f"{dotted(path)}: {what}" for path, what in found))
        return self

    def pip_requirements(self, *, frameworks: bool = True, default_index_only: bool = False) -> list[str]:
        """Every pip requirement the roles install into the environment (sorted, unique). default_index_only
        leaves out framework wheels that come from their own index (PyTorch's cu126 index, say)."""
        reqs = [self.verify.numpy_requirement, *self.verify.nvrtc_requirements, *self.verify.cuda_python_requirements]
        if self.cuda.source == "pypi" and self.cuda.install:
            reqs += self.cuda.packages
        if self.cudnn.source == "pypi" and self.cudnn.install:
            reqs += self.cudnn.packages
        if self.jupyter.enabled:
            reqs += self.jupyter.requirements
        if frameworks:
            reqs += [r for f in self.frameworks if not (default_index_only and f.index_url) for r in f.requirements]
        return sorted(set(reqs))

    def framework(self, name: str) -> FrameworkPlan | None:
        return next((f for f in self.frameworks if f.name == name), None)


def cc_to_sm(cc: str) -> str:
    """'6.1' -> 'sm_61'."""
    if not re.fullmatch(r"\d+\.\d+", cc):
        raise ValueError(f"not a compute capability: {cc!r}")
    major, minor = cc.split(".")
    return f"sm_{major}{minor}"
