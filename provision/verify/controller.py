"""`provision verify` on the controller side: expectations from a profile's Plan, peaks from the compat database.

This is the only module of provision/verify/ that imports the rest of provision (lazily); the target-side entry
point (`python -m verify`) never imports it, so the directory still works when copied alone.
"""

from __future__ import annotations

from pathlib import Path

from .driver import DeviceInfo
from .expect import Expect
from .report import FAIL, SKIP, Report
from .stack import PeakLookup
from .suite import run


def expectations(profile: Path | None, os_override: str | None = None) -> Expect:
    """From the profile's Plan when given, else nothing (the detected device is the expectation)."""
    if profile is None:
        return Expect(source="device")
    from provision.pipeline.plan import plan_for

    plan = plan_for(str(profile), os_override=os_override)
    return Expect.from_plan(plan)


def compat_peak_lookup() -> PeakLookup | None:
    """Peak bandwidth / FP32 of a detected device from the compat database, when provision.compat is present.
    Tries the CUDA device name ('NVIDIA H100 80GB HBM3'), then shorter prefixes ('NVIDIA H100')."""
    from provision.compat import load_db

    # Loaded here, before any GPU work: a broken database is a ProvisionError the CLI reports (exit 2), never a
    # silent "no peaks".
    db = load_db()

    def lookup(dev: DeviceInfo) -> tuple[float | None, float | None] | None:
        row = db.gpu_by_device_name(dev.name)
        if row is not None and row.sm == f"sm_{dev.cc}":
            return row.bandwidth_gbps, row.fp32_tflops
        return None

    return lookup


def run_verify(
    profile: Path | None,
    *,
    os_override: str | None = None,
    compile_only: bool = False,
    arch: str | None = None,
    nvrtc: str | None = None,
    python: str | None = None,
    report_path: Path | None = None,
    repeats: int = 10,
) -> Report:
    expect = expectations(profile, os_override)
    if compile_only:
        expect.expect_gpu = False
        if arch is None and expect.target_arch is None:
            from provision.errors import UsageError

            raise UsageError("verify --compile-only needs an architecture: pass --arch sm_XY or --profile PROFILE")
    report = run(
        expect,
        compile_only=compile_only,
        arch=arch,
        nvrtc_path=nvrtc,
        python=python,
        peak_lookup=compat_peak_lookup(),
        repeats=repeats,
    )
    if compile_only:
        absent_here(report)
    if report_path is not None:
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(report.to_json())
    return report


def absent_here(report: Report) -> None:
    """`provision verify --compile-only` means "no GPU here", not "everything else fails": this machine need not be
    the profile's target, so a planned part it does not have at all is one SKIP line "absent here", and only what is
    here and wrong fails. The verifier the gpu_verify role runs on a provisioned host (python -m provision.verify)
    stays strict: there every planned part must be present. Nothing compiled (no NVRTC here) is exit 2, with what
    to pass."""
    for check in report.checks:
        if check.status == FAIL and check.absent:
            check.status, check.detail = SKIP, f"absent here: {check.detail}"
    if report.error is None and not any(c.name.startswith("compile:") for c in report.checks):
        report.error = ("nothing was compiled: no NVRTC here; pass --nvrtc PATH (a libnvrtc.so), or install the "
                        "planned nvidia-cuda-nvrtc wheel into this Python")
