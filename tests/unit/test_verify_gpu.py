"""The whole verifier on a real GPU. Marked `gpu`; skipped with the reason where no NVIDIA driver is loadable."""

from __future__ import annotations

import ctypes

import pytest

from provision.verify import checks
from provision.verify.expect import Expect
from provision.verify.nvrtc import Nvrtc, NvrtcError
from provision.verify.report import validate


def _no_gpu_reason() -> str | None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver on this machine (libcuda.so.1 not loadable)"
    count = ctypes.c_int()
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "the NVIDIA driver is loaded but reports no GPU"
    try:
        Nvrtc.load()
    except NvrtcError as exc:
        return f"GPU present but no NVRTC: {exc}"
    return None


REASON = _no_gpu_reason()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(REASON is not None, reason=REASON or "")]


def test_every_kernel_runs_correctly_and_reports_figures() -> None:
    report = checks.run(Expect(source="device"), peak_lookup=None, repeats=5, frameworks=False, jupyter=False)
    data = report.to_dict()
    assert validate(data) == []
    by_name = {c.name: c for c in report.checks}
    for name in ("device", "compile:triad", "compile:reduce", "compile:sgemm", "sgemm-correct"):
        assert by_name[name].status == "PASS", by_name[name].detail
    assert by_name["triad"].status == "PASS", by_name["triad"].detail  # correct and >= 50 % of attribute peak
    assert data["figures"]["triad_gbps"] > 0 and data["figures"]["sgemm_gflops"] > 0
