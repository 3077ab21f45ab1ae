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
    vram_gb: float | None
    fp32_tflops: float | None  # None: a GPU the profile described without its peak
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
        vram_gb=None if plan.gpu.memory_gb is None else plan.gpu.memory_gb * plan.gpu.count,
        fp32_tflops=None if plan.gpu.fp32_tflops is None else plan.gpu.fp32_tflops * plan.gpu.count,
        purchase_usd=cost.purchase_usd,
        power_w=cost.power_w,
        own_usd_hr=own,
        rent_usd_hr=rent,
        source=source,
    )


def comparable(owned: CostLine, rented: CostLine, within: float) -> str | None:
    """Why two machines are not like for like (GPU memory or FP32 rate more than `within` times apart), or None."""
    for what, a, b, unit in (("GPU memory", owned.vram_gb, rented.vram_gb, "GB"),
                             ("FP32 rate", owned.fp32_tflops, rented.fp32_tflops, "TFLOPS")):
        if a is None or b is None:
            return f"{what} of {owned.gpu if a is None else rented.gpu} is not known (give hardware.gpu.fp32_tflops in its profile)"
        if a <= 0 or b <= 0 or max(a, b) / min(a, b) > within:
            return f"{what} {a:g} vs {b:g} {unit} differ by more than {within:g}x"
    return None


def compare_pairs(lines: list[CostLine], within: float, horizon_h: float) -> list[dict]:
    """Owning one machine against renting another, for like-for-like pairs only. break_even_hours is None when
    owning never costs less within `horizon_h` hours of use (the verdict says which)."""
    out = []
    for o in lines:
        for r in lines:
            if o is r or o.purchase_usd is None or r.rent_usd_hr is None:
                continue
            unlike = comparable(o, r, within)
            hours = None if unlike else break_even_hours(o, r)
            if unlike:
                verdict = f"owning {o.profile} is not compared with renting {r.profile}: {unlike}"
            elif hours is None:
                verdict = (f"no break-even: owning {o.profile} never beats renting {r.profile} (renting costs no more "
                           "per hour than owning's power)")
            elif hours > horizon_h:
                gap = r.rent_usd_hr - (o.own_usd_hr or 0.0)
                more = "under $0.001" if gap < 0.001 else f"only ${gap:.3f}"
                verdict = (f"no break-even within {horizon_h:,.0f} h ({horizon_h / 8760:g} years of 24 h use): renting "
                           f"{r.profile} costs {more}/h more than owning {o.profile}'s power")
                hours = None
            else:
                verdict = (f"after {hours:,.0f} h ({hours / 24:,.0f} days of 24 h use) owning {o.profile} costs less "
                           f"than renting {r.profile}")
            out.append({"own": o.profile, "rent": r.profile, "break_even_hours": hours, "comparable": unlike is None,
                        "verdict": verdict})
    return out


def break_even_hours(owned: CostLine, rented: CostLine) -> float | None:
    """Hours of use after which buying `owned` costs less than renting `rented` (None when it never does)."""
    if owned.purchase_usd is None or rented.rent_usd_hr is None:
        return None
    per_hour_saving = rented.rent_usd_hr - (owned.own_usd_hr or 0.0)
    if per_hour_saving <= 0:
        return None
    return owned.purchase_usd / per_hour_saving
