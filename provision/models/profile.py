"""`Profile`: what the user wrote, as validated (extra keys forbidden; an optional field means "let the resolver
decide"), and the constrained string types that keep what reaches templates, file names and commands narrow."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

# Strings that reach templates, file names or commands are restricted to what they need to be.
# Nothing from a profile is ever evaluated, but a narrow alphabet keeps templates and logs boring.
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")]


Label = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()+/-]{0,79}$")]


Version = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+){0,3}$")]


# A framework release may be a PEP 440 post-release (tensorflow 2.15.0.post1): a version too.
ReleaseVersion = Annotated[str, StringConstraints(pattern=r"^[0-9]+(\.[0-9]+){0,3}(\.post[0-9]+)?$")]


UnixUser = Annotated[str, StringConstraints(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")]


ComputeCapability = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]?\.[0-9]$")]


PciDeviceId = Annotated[str, StringConstraints(pattern=r"^0[xX][0-9a-fA-F]{4}$")]  # NVIDIA's driver list: "0x1DB1"


CpuFlag = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_.]{1,32}$")]


IndexName = Literal["pypi", "pytorch"]


# software.containers: `docker` is the distribution's docker.io, `docker-ce` Docker's own repository.
ContainersRequest = Literal["none", "docker", "docker-ce", "podman", "containerd"]


FrameworkName = Literal["pytorch", "tensorflow", "jax"]


# An index URL reaches pip's command line and pip.conf: http(s), no spaces, quotes or shell characters; {variant}
# is the only brace.
IndexURL = Annotated[str, StringConstraints(pattern=r"^https?://[A-Za-z0-9._~:/?@%+=&-]+(\{variant\}[A-Za-z0-9._~:/%-]*)?$",
                                            max_length=300)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, defer_build=True)


class GPUSpec(_Strict):
    model: Label | None = Field(
        None,
        description="GPU model as in `provision gpus`, or as `nvidia-smi --query-gpu=name --format=csv,noheader` "
        "prints it, e.g. 'GeForce GTX 1070', 'Tesla V100-SXM2-16GB', 'NVIDIA GeForce RTX 3060 Laptop GPU'.",
    )
    pci_id: PciDeviceId | None = Field(
        None,
        description="Instead of (or beside) model: the GPU's PCI device ID as NVIDIA's driver list and "
        "`lspci -nn -d 10de:` give it, e.g. '0x1DB1' (`provision doctor` prints it).",
    )
    count: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Number of GPUs of this model in the machine. Unset: 1, or what the cloud instance type has "
        "(a count that contradicts the instance type is refused).",
    )
    # A GPU that `provision gpus` does not list (a laptop part, a rare workstation card) is planned from what the
    # stack depends on: its compute capability. Given for a listed GPU, each must agree with the database's row.
    compute_capability: ComputeCapability | None = Field(
        None,
        description="For a GPU `provision gpus` does not list: its compute capability, as "
        "`nvidia-smi --query-gpu=compute_cap --format=csv,noheader` prints it (e.g. '8.6'). The driver, CUDA, "
        "cuDNN and framework builds are chosen from it.",
    )
    memory_gb: float | None = Field(None, gt=0, le=1024, description="For an unlisted GPU: its memory in GB.")
    bandwidth_gbps: float | None = Field(
        None, gt=0, le=100_000, description="For an unlisted GPU, optional: peak memory bandwidth in GB/s (the "
        "verifier reports its bandwidth as a percentage of it)."
    )
    fp32_tflops: float | None = Field(
        None, gt=0, le=10_000, description="For an unlisted GPU, optional: FP32 peak in TFLOPS (the verifier reports "
        "SGEMM as a percentage of it)."
    )

    @model_validator(mode="after")
    def _named(self) -> GPUSpec:
        if self.model is None and self.pci_id is None:
            raise ValueError("give the GPU's model (as nvidia-smi prints it) or its pci_id (e.g. '0x1DB1')")
        return self

    @property
    def name(self) -> str:
        """What the database looks the GPU up by: its PCI device ID where given (one device), else its model."""
        return self.pci_id if self.pci_id is not None else str(self.model)

    def described(self) -> bool:
        return self.compute_capability is not None


class CPUSpec(_Strict):
    model: Label = Field(description="CPU model, e.g. 'Intel Pentium G4600'.")
    flags: list[CpuFlag] = Field(
        description="Instruction-set flags as /proc/cpuinfo lists them (sse4_2, avx, avx2, ...). "
        "`provision doctor` fills them in from the local machine.",
    )
    cores: int | None = Field(None, ge=1, le=1024)
    threads: int | None = Field(None, ge=1, le=4096)

    @field_validator("flags")
    @classmethod
    def _lower_unique(cls, flags: list[str]) -> list[str]:
        return sorted({f.lower() for f in flags})


class StorageDevice(_Strict):
    name: Name
    kind: Literal["nvme", "ssd", "hdd", "emmc", "sd", "network"]
    size_gb: float = Field(gt=0, le=1_000_000)


class Hardware(_Strict):
    gpu: GPUSpec
    extra_gpus: list[GPUSpec] = Field(
        default_factory=list,
        description="Further GPU models in the same machine (mixed boxes). The plan is the one stack that serves "
        "every model, or a refusal that says which link they cannot share.",
    )
    cpu: CPUSpec
    memory_gb: float = Field(gt=0, le=65536, description="System memory in GB.")
    storage: list[StorageDevice] = Field(default_factory=list)


class OSSpec(_Strict):
    distribution: Literal["ubuntu", "debian"]
    release: Version = Field(description="'24.04', '22.04' for Ubuntu; '12', '13' for Debian.")


class Target(_Strict):
    kind: Literal["baremetal", "cloud", "colab", "jetson"]
    os: OSSpec
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    instance_type: Name | None = Field(None, description="Cloud instance type, e.g. p2.xlarge (kind: cloud).")
    jetpack: Version | None = Field(None, description="JetPack release flashed on the module (kind: jetson).")

    @model_validator(mode="after")
    def _kind_fields(self) -> Target:
        if self.kind == "cloud" and not self.instance_type:
            raise ValueError("target.kind 'cloud' needs target.instance_type (e.g. p2.xlarge)")
        if self.kind != "cloud" and self.instance_type:
            raise ValueError(f"target.instance_type is only for kind 'cloud', not '{self.kind}'")
        if self.kind == "jetson":
            if not self.jetpack:
                raise ValueError("target.kind 'jetson' needs target.jetpack (e.g. '4.6.1', '6.2')")
            if self.arch != "aarch64":
                raise ValueError("Jetson modules are aarch64: set target.arch to aarch64")
        elif self.jetpack:
            raise ValueError(f"target.jetpack is only for kind 'jetson', not '{self.kind}'")
        return self


class FrameworkRequest(_Strict):
    name: FrameworkName
    version: ReleaseVersion | None = Field(
        None, description="Pin a release ('2.0', '2.0.1', '2.15.0.post1'); unset = newest that fits."
    )


class JupyterSpec(_Strict):
    enabled: bool = True
    port: int = Field(8888, ge=1024, le=65535)
    bind: str = Field("127.0.0.1", description="Address to listen on. Anything but loopback requires auth (always on).")
    auth: Literal["token", "password"] = "token"
    tls: bool = False

    @field_validator("bind")
    @classmethod
    def _ip(cls, value: str) -> str:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            raise ValueError(
                f"'{value}' is not an IP address (use 127.0.0.1, or 0.0.0.0 to listen everywhere)"
            ) from None


class Software(_Strict):
    """Pins mean 'I need this'. Anything left out is the resolver's to choose."""

    driver_branch: Annotated[str, StringConstraints(pattern=r"^[0-9]{3}$")] | None = None
    cuda: Version | None = None
    cudnn: Version | None = None
    python: Version | None = None
    frameworks: list[FrameworkRequest] = Field(default_factory=list)
    user: UnixUser = Field("ml", description="Non-root account that owns the environment and runs Jupyter.")
    jupyter: JupyterSpec = Field(default_factory=JupyterSpec)
    devel: bool = Field(
        False,
        description="Install the CUDA compiler toolchain (nvcc) on hosts and keep it in images (runtime only when false).",
    )
    containers: ContainersRequest = Field(
        "none",
        description="GPU containers on the host: docker (the distribution's docker.io), docker-ce (Docker's own "
        "repository), podman (rootless, for software.user) or containerd (a Kubernetes node), each with NVIDIA's "
        "Container Toolkit; none (the default) plans no container engine.",
    )
    python_mirror: str | None = Field(
        None,
        description="Where managed interpreters come from instead of python-build-standalone's releases: a directory "
        "or http(s) URL holding the archives as the releases name them and a SHA256SUMS (`--python-mirror`, "
        "`provision_python_mirror` in an inventory). The archive must match the database's sha256 or that SHA256SUMS.",
    )
    indexes: dict[IndexName, IndexURL | Literal[False]] = Field(
        default_factory=dict,
        description="Package indexes the machine can reach: name -> URL (a mirror: devpi, Artifactory, a proxy) or "
        "false (unreachable). pypi: every wheel's default; pytorch: PyTorch's per-CUDA indexes ({variant} in the URL, "
        "or appended). Unset names use the database's URLs; `--index NAME=URL|off` overrides.",
    )

    @field_validator("user")
    @classmethod
    def _not_root(cls, user: str) -> str:
        if user == "root":
            raise ValueError("the environment and Jupyter must not run as root: name a non-root account, e.g. 'ml' "
                             "(provision creates it)")
        return user

    @field_validator("frameworks")
    @classmethod
    def _unique(cls, frameworks: list[FrameworkRequest]) -> list[FrameworkRequest]:
        names = [f.name for f in frameworks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"framework listed twice: {', '.join(dupes)}")
        return frameworks


class Cost(_Strict):
    purchase_usd: float | None = Field(None, ge=0)
    power_w: float | None = Field(None, ge=0, description="Average wall power under load, for the owning cost.")
    electricity_usd_per_kwh: float | None = Field(None, ge=0)
    hourly_usd: float | None = Field(None, ge=0, description="Rental price; for cloud defaults to the database.")


class Profile(_Strict):
    name: Name
    description: str | None = Field(None, max_length=500)
    hardware: Hardware
    target: Target
    software: Software = Field(default_factory=Software)
    cost: Cost = Field(default_factory=Cost)
