"""The links of the chain, one predicate each: what drives, builds, runs and matches what. Pure facts over database
rows; every lane and the stack choice ask these, nothing here chooses."""

from __future__ import annotations

from provision.compat import GPU, Branch, CompatDB
from provision.versions import V, cc_tuple, major, sm_int


def toolkit_builds(db: CompatDB, cuda: str, gpu: GPU) -> bool:
    tk = db.toolkit(cuda)
    return tk is not None and sm_int(gpu.cc) in tk.sm


def driver_runs(db: CompatDB, branch: Branch, cuda: str) -> str | None:
    """'native', 'mvc' (minor-version compatibility) or None when the branch cannot run this CUDA.

    Minor-version compatibility needs a driver at or above the major's floor (580.65.06 for 13.x): the branch's first
    release is compared, not its number, since "580" is below "580.65.06" while every R580 driver meets it.
    """
    if V(cuda) <= V(branch.cuda):
        return "native"
    floor = db.mvc_floor(major(cuda))
    if floor is not None and major(cuda) == major(branch.cuda) and V(branch.first_release) >= V(floor.min_driver):
        return "mvc"
    return None


def has_kernels(arch: tuple[str, ...], ptx: str | None, gpu: GPU) -> str | None:
    """How a build runs on this GPU: 'sass <cc>' or 'ptx <cc>', or None when it has nothing for it.

    SASS built for X.y runs on X.z with z >= y on discrete GPUs; not guaranteed on Tegra, where only the exact
    architecture is trusted. PTX for an older architecture can be JIT-compiled by the driver for a newer one.
    """
    g_major, g_minor = cc_tuple(gpu.cc)
    for a in sorted(arch, key=V, reverse=True):
        a_major, a_minor = cc_tuple(a)
        if a_major == g_major and (a_minor == g_minor or (not gpu.tegra and a_minor <= g_minor)):
            return f"sass {a}"
    if ptx and V(ptx) <= V(gpu.cc):
        return f"ptx {ptx}"
    return None


def cudnn_supports(db: CompatDB, cudnn: str, cuda: str | None, gpu: GPU) -> bool:
    row = db.cudnn_release(cudnn)
    if row is None:
        return False
    if not V(row.min_cc) <= V(gpu.cc) <= V(row.max_cc):
        return False
    return cuda is None or V(row.cuda_min) <= V(cuda) <= V(row.cuda_max)


def pin_matches(pin: str | None, version: str) -> bool:
    """A pin '2.0' matches 2.0.1; '12' matches 12.6; '12.6' matches 12.6. Compared component-wise."""
    if pin is None:
        return True
    want, have = V(pin), V(version)
    if want.post is not None and have.post != want.post:  # '2.15.0.post1' is that post-release, not 2.15.0
        return False
    return have.release[: len(want.release)] == want.release


def in_range(value: str, low: str, high: str) -> bool:
    return V(low) <= V(value) <= V(high)


