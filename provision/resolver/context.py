"""What every lane shares while it resolves one machine: the context (profile, database, GPU, OS, Python, the
reasons and warnings collected so far) and the shape of a lane's answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from provision.compat import GPU, CompatDB, OSRow, PythonBuild
from provision.models import CudaPlan, CudnnPlan, DriverPlan, FrameworkPlan, Profile, Reason

Interconnect = Literal["pcie", "nvlink", "nvswitch"]


@dataclass(frozen=True)
class ManagedChoice:
    """A python-build-standalone CPython the plan takes, and why the distribution's python3 did not do."""

    build: PythonBuild
    why: str
    mirror: str | None = None


@dataclass
class Ctx:
    profile: Profile
    db: CompatDB
    gpu: GPU
    os_id: str
    system: OSRow | None
    python: str
    count: int = 1
    interconnect: Interconnect = "pcie"
    indexes: dict[str, str | None] = field(default_factory=dict)  # name -> URL, None = unreachable (off)
    managed: ManagedChoice | None = None  # None: the distribution's (or the platform's) python3
    fw_pins: tuple[str, ...] = ()  # NVIDIA wheels the planned framework pins exactly (its Requires-Dist)
    reasons: list[Reason] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def nvswitch(self) -> bool:
        return self.interconnect == "nvswitch"

    def reason(self, component: str, choice: str, why: str, source: str) -> None:
        self.reasons.append(Reason(component=component, choice=choice, why=why, source=source))

    @property
    def where(self) -> str:
        return self.profile.name


class LanePlans(NamedTuple):
    """What a lane (installable, Colab, Jetson) decides; the common lane plans the rest around it."""

    driver: DriverPlan
    cuda: CudaPlan
    cudnn: CudnnPlan
    frameworks: tuple[FrameworkPlan, ...]
