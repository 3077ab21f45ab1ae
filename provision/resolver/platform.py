"""The stacks a platform owns (Colab, Jetson): the profile's pins checked against what the platform's release ships
(`check_platform_pins()`), and the driver, CUDA and cuDNN as plans that install nothing and tell the verifier what
to expect (`platform_plans()`)."""

from __future__ import annotations

from provision.errors import IncompatibleError
from provision.models import CudaPlan, CudnnPlan, DriverPlan
from provision.resolver.context import Ctx
from provision.resolver.links import pin_matches


def check_platform_pins(ctx: Ctx, owner: str, shipped: tuple[tuple[str | None, str, str], ...], way_out: str) -> None:
    """Refuse the first pin (pin, what the platform ships, what it is) the platform's release does not carry.
    owner: who ships it ("JetPack 6.2"); way_out: the alternative, '{what}' filled in."""
    for pin, have, what in shipped:
        if pin and not pin_matches(pin, have):
            raise IncompatibleError(
                f"{owner} comes with {what} {have}; the profile pins {pin}",
                alternatives=[way_out.format(what=what)],
                where=ctx.where,
            )


def platform_plans(
    ctx: Ctx,
    *,
    driver: tuple[str, str],
    cuda_reason: tuple[str, str],
    source: str,
    branch: str | None,
    driver_version: str,
    max_cuda: str | None,
    min_driver: str | None,
    cuda: str,
    cudnn: str,
) -> tuple[DriverPlan, CudaPlan, CudnnPlan]:
    """The driver, CUDA and cuDNN a platform owns, as plans that install nothing and tell the verifier what to
    expect; `driver` and `cuda_reason` are the (choice, why) of their reasons, `source` the release's URL."""
    ctx.reason("driver", driver[0], driver[1], source)
    ctx.reason("cuda", cuda_reason[0], cuda_reason[1], source)
    policy = ctx.db.policy
    assert policy is not None  # load_db always reads data/policy.yaml
    return (
        DriverPlan(
            install=False,
            branch=branch,
            source="platform",
            packages=(),
            userspace_packages=(),
            version=driver_version,
            max_cuda=max_cuda,
            min_version=min_driver,
            kernel_module="platform",
        ),
        CudaPlan(
            version=cuda,
            full_version=None,
            source="platform",
            kind="toolkit",
            install=False,
            packages=(),
            home=policy.cuda_home["platform"],
        ),
        CudnnPlan(version=cudnn, full_version=None, source="platform", install=False, packages=()),
    )
