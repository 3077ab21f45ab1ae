"""Owning versus renting: the numbers `provision compare` prints."""

from __future__ import annotations

from dataclasses import dataclass

from provision.compat import CompatDB
from provision.models import Plan, Profile


@dataclass(frozen=True)
class CostLine:
    profile: str
    gpu: str
    count: int
    vram_gb: float
    fp32_tflops: float
    purchase_usd: float | None
    power_w: float | None
    own_usd_hr: float | None  # electricity only, once bought
    rent_usd_hr: float | None
    source: str


def cost_line(profile: Profile, plan: Plan, db: CompatDB) -> CostLine:
    cost = profile.cost
    rent = cost.hourly_usd
    source = "profile"
    if rent is None and profile.target.instance_type:
        inst = db.instance(profile.target.instance_type)
        if inst:
            rent, source = inst.usd_hr, inst.source
    own = None
    if cost.power_w is not None and cost.electricity_usd_per_kwh is not None:
        own = cost.power_w / 1000 * cost.electricity_usd_per_kwh
    return CostLine(
        profile=profile.name,
        gpu=plan.gpu.model,
        count=plan.gpu.count,
        vram_gb=plan.gpu.memory_gb * plan.gpu.count,
        fp32_tflops=plan.gpu.fp32_tflops * plan.gpu.count,
        purchase_usd=cost.purchase_usd,
        power_w=cost.power_w,
        own_usd_hr=own,
        rent_usd_hr=rent,
        source=source,
    )


def break_even_hours(owned: CostLine, rented: CostLine) -> float | None:
    """Hours of use after which buying `owned` costs less than renting `rented` (None when it never does)."""
    if owned.purchase_usd is None or rented.rent_usd_hr is None:
        return None
    per_hour_saving = rented.rent_usd_hr - (owned.own_usd_hr or 0.0)
    if per_hour_saving <= 0:
        return None
    return owned.purchase_usd / per_hour_saving
