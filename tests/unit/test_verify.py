"""Checking and reporting logic of the GPU verifier (no GPU, no NVRTC needed)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from provision.verify import libs
from provision.verify.driver import DeviceInfo, format_cuda_version
from provision.verify.expect import Expect
from provision.verify.kernel_checks import _pct_check, ptxas_usage, sgemm_size, sgemm_tolerance
from provision.verify.nvrtc import NvrtcError, arch_number, choose_target, cubin_sm
from provision.verify.report import FAIL, PASS, SKIP, Check, Report, validate
from provision.verify.stack import (
    _versions_match,
    check_device,
    check_driver,
    decode_cudnn_version,
    device_peak_bandwidth,
    peaks_for,
)
from provision.verify.suite import NO_ARCH, NO_DRIVER, run
from tests.support import plans


def _dev(name="NVIDIA GeForce GTX 1070", cc=61, sms=15, mem_mhz=4004.0, bus=256, gib=8) -> DeviceInfo:
    return DeviceInfo(
        index=0,
        name=name,
        cc=cc,
        sm_count=sms,
        clock_mhz=1683.0,
        memory_clock_mhz=mem_mhz,
        bus_width_bits=bus,
        total_memory_bytes=gib * 2**30,
        integrated=False,
    )


# --- report --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "error", "code", "status"),
    [
        ([PASS, SKIP], None, 0, "pass"),
        ([PASS, FAIL, SKIP], None, 1, "fail"),
        ([], None, 0, "pass"),
        ([PASS], "no NVIDIA driver", 2, "error"),
    ],
)
def test_exit_code_and_status(statuses, error, code, status) -> None:
    r = Report(mode="full", expect={}, error=error)
    for i, s in enumerate(statuses):
        r.add(Check(f"c{i}", s, "detail"))
    assert r.exit_code == code
    assert r.status == status
    data = json.loads(r.to_json())
    assert validate(data) == []
    assert data["exit_code"] == code and data["summary"]["failed"] == statuses.count(FAIL)


def test_text_lines_have_one_line_per_check_and_a_verdict() -> None:
    r = Report(mode="compile-only", expect={})
    r.add(Check("compile:sgemm", PASS, "cubin for sm_61"))
    r.add(Check("cudnn", SKIP, "no cuDNN planned and none found"))
    r.figures["triad_gbps"] = 201.23456
    lines = r.text_lines()
    assert lines[0].startswith("PASS  compile:sgemm") and lines[1].startswith("SKIP  cudnn")
    assert "triad_gbps=201.2" in lines[2]
    assert lines[-1] == "PASS: 1 passed, 0 failed, 1 skipped (exit 0)"


def test_validate_names_what_is_wrong() -> None:
    data = json.loads(Report(mode="full", expect={}).to_json())
    data["schema"] = "other/9"
    data["checks"] = [{"name": "x", "status": "MAYBE"}]
    problems = validate(data)
    assert any(p.startswith("schema:") for p in problems)
    assert any(p.startswith("checks[0]") for p in problems)


# --- expectations ----------------------------------------------------------------------------------------------


def test_expect_from_a_plan_carries_what_verify_compares() -> None:
    e = Expect.from_plan(plans.deskmini())
    assert (e.target_arch, e.compute_capability, e.driver_branch, e.cuda_version, e.cudnn_version) == (
        "sm_61",
        "6.1",
        "550",
        "12.6",
        "9.10.2",
    )
    assert e.bandwidth_gbps == 256 and e.fp32_tflops == 6.5
    assert e.frameworks[0]["name"] == "pytorch" and e.jupyter is True
    assert e.source == "plan:deskmini"


def test_expect_json_round_trip_and_unknown_keys(tmp_path: Path) -> None:
    f = tmp_path / "expect.json"
    f.write_text(json.dumps(Expect.from_plan(plans.aws_p2()).to_dict()))
    e = Expect.from_json(f)
    assert e.target_arch == "sm_37" and e.source == f"file:{f}"
    f.write_text(json.dumps({"target_arch": "sm_37", "cuda": "11.8"}))
    with pytest.raises(ValueError, match="unknown expectation key.*cuda"):
        Expect.from_json(f)


# --- version and architecture logic ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "expected", "ok"),
    [
        ("12.6", "12.6", True),
        ("12.6", "12.6.85", True),
        ("12.8", "12.6", False),
        ("11.8", "12.8", False),
        ("9.10.2", "9.10.2", True),
        ("9.10.1", "9.10.2", False),
        ("8.5.0", "8.5", True),
        ("12", "12.6", False),
    ],
)
def test_versions_match(found, expected, ok) -> None:
    assert _versions_match(found, expected) is ok


@pytest.mark.parametrize(("raw", "text"), [(91002, "9.10.2"), (8500, "8.5.0"), (8907, "8.9.7"), (90300, "9.3.0")])
def test_cudnn_version_encoding(raw, text) -> None:
    assert decode_cudnn_version(raw) == text


@pytest.mark.parametrize(("raw", "text"), [(12060, "12.6"), (11080, "11.8"), (13050, "13.5"), (10020, "10.2")])
def test_cuda_version_encoding(raw, text) -> None:
    assert format_cuda_version(raw) == text


@pytest.mark.parametrize(("arch", "num"), [("sm_61", 61), ("compute_90", 90), ("6.1", 61), ("sm_90a", 90)])
def test_arch_number(arch, num) -> None:
    assert arch_number(arch) == num


ARCHS_12_6 = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90]


def test_choose_target_prefers_a_cubin_for_the_exact_arch() -> None:
    assert choose_target(61, ARCHS_12_6, (12, 6), 12040)[0] == "sm_61"


def test_choose_target_falls_back_to_ptx_only_when_the_driver_can_jit_it() -> None:
    arch, why = choose_target(120, ARCHS_12_6, (12, 6), 12080)
    assert arch == "compute_90" and "PTX" in why
    with pytest.raises(NvrtcError, match="cannot be JIT-compiled by this driver"):
        choose_target(120, ARCHS_12_6, (12, 6), 12040)


def test_choose_target_refuses_a_gpu_older_than_the_toolkit() -> None:
    with pytest.raises(NvrtcError, match="cannot build for sm_37"):
        choose_target(37, ARCHS_12_6, (12, 6), 12040)


def _elf(osabi: int, abiver: int, flags: int, machine: int = 190) -> bytes:
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    head[4], head[7], head[8] = 2, osabi, abiver
    struct.pack_into("<H", head, 18, machine)
    struct.pack_into("<I", head, 48, flags)
    return bytes(head)


def test_cubin_sm_reads_both_elf_encodings() -> None:
    # header values read from cubins NVRTC 12.6 (sm_61) and 13.5 (sm_90) produced
    assert cubin_sm(_elf(0x33, 7, 0x3D053D)) == 61
    assert cubin_sm(_elf(0x41, 8, 0x6005A04)) == 90
    assert cubin_sm(_elf(0x33, 7, 0x3D053D, machine=62)) is None  # x86-64 ELF, not CUDA
    assert cubin_sm(b"// PTX") is None


def test_ptxas_usage() -> None:
    log = (
        "ptxas info    : Compiling entry function 'sgemm_128x128' for 'sm_61'\n"
        "ptxas info    : Function properties for sgemm_128x128\n"
        "    0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Used 117 registers, 8192 bytes smem, 368 bytes cmem[0]"
    )
    assert ptxas_usage(log) == {"registers": 117, "spill_bytes": 12}
    assert ptxas_usage("") == {}


# --- driver / device checks ----------------------------------------------------------------------------------


def test_driver_branch_as_planned() -> None:
    e = Expect.from_plan(plans.deskmini())
    assert check_driver("550.163.01", 12040, e).status == PASS
    wrong = check_driver("535.247.01", 12020, e)
    assert wrong.status == FAIL and "branch 535, planned 550" in wrong.detail


def test_driver_older_than_the_cuda_minimum_fails() -> None:
    e = Expect(driver_min_version="525.60.13", cuda_version="12.6")
    c = check_driver("520.61.05", 11080, e)
    assert c.status == FAIL and "older than 525.60.13" in c.detail


def test_device_compute_capability_as_planned() -> None:
    e = Expect.from_plan(plans.deskmini())
    assert check_device(_dev(), e).status == PASS
    c = check_device(_dev(name="Tesla K80", cc=37), e)
    assert c.status == FAIL and "compute capability 3.7, planned 6.1" in c.detail


# --- peaks and sizes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mem_mhz", "bus", "gbps"),
    [(4004, 256, 256.3), (2505, 384, 240.5), (2619, 5120, 3352.3)],  # GTX 1070, one K80 GK210, H100 SXM
)
def test_peak_bandwidth_from_device_attributes(mem_mhz, bus, gbps) -> None:
    assert device_peak_bandwidth(_dev(mem_mhz=mem_mhz, bus=bus)) == pytest.approx(gbps, abs=0.1)


def test_peaks_are_the_plans_only_for_the_planned_model_and_never_divided() -> None:
    # The database lists the K80 per GK210 device (240 GB/s, 4.37 TFLOPS), as CUDA shows it: used as they are.
    k80 = Expect(gpu_model="Tesla K80", compute_capability="3.7", memory_gb=12, bandwidth_gbps=240, fp32_tflops=4.37,
                 source="plan:aws-p2")
    p = peaks_for(_dev(name="Tesla K80", cc=37, mem_mhz=2505, bus=384, sms=13, gib=12), k80, None)
    assert (p["bandwidth_gbps"], p["fp32_tflops"], p["source"]) == (240, 4.37, "plan:aws-p2")


def test_peaks_belong_to_the_device_that_answered() -> None:
    sxm = Expect(gpu_model="H100 SXM", compute_capability="9.0", memory_gb=80, bandwidth_gbps=3352, fp32_tflops=66.9,
                 source="plan:h100")
    pcie = _dev(name="NVIDIA H100 PCIe", cc=90, sms=114, mem_mhz=1593, bus=5120, gib=80)
    # Another model with the same compute capability: the plan's peaks are not its peaks ...
    assert check_device(pcie, sxm).status == FAIL
    assert "2039 GB/s" in check_device(pcie, sxm).detail
    # ... so that model's own row is looked up, and without one there is no FP32 peak (the % check SKIPs).
    p = peaks_for(pcie, sxm, lambda dev: (2039.0, 51.2))
    assert (p["bandwidth_gbps"], p["fp32_tflops"]) == (2039.0, 51.2) and "device's own row" in p["source"]
    p = peaks_for(pcie, sxm, None)
    assert p["fp32_tflops"] is None and p["bandwidth_gbps"] == pytest.approx(2039.0, abs=1)
    same = _dev(name="NVIDIA H100 80GB HBM3", cc=90, sms=132, mem_mhz=2619, bus=5120, gib=80)
    assert check_device(same, sxm).status == PASS
    assert peaks_for(same, sxm, None)["fp32_tflops"] == 66.9


def test_peaks_from_lookup_then_device_attributes() -> None:
    p = peaks_for(_dev(), Expect(), lambda dev: (256.0, 6.46))
    assert (p["bandwidth_gbps"], p["fp32_tflops"]) == (256.0, 6.46) and p["source"].startswith("compat database")
    p = peaks_for(_dev(), Expect(), None)
    assert p["fp32_tflops"] is None and p["bandwidth_gbps"] == pytest.approx(256.3, abs=0.1)
    assert p["source"].startswith("bandwidth from device attributes")


def test_percent_of_peak_decides_pass_and_fail() -> None:
    figs: dict = {}
    ok = _pct_check("triad", True, 220.0, "GB/s", 256.0, 50, 80, "bad", figs, "triad_gbps")
    assert ok.status == PASS and figs["triad_pct_peak"] == pytest.approx(85.9, abs=0.1)
    slow = _pct_check("triad", True, 100.0, "GB/s", 256.0, 50, 80, "bad", {}, "triad_gbps")
    assert slow.status == FAIL and "39.1% of peak" in slow.detail
    nopeak = _pct_check("sgemm", True, 5000.0, "GFLOPS", None, 20, 50, "bad", {}, "sgemm_gflops")
    assert nopeak.status == SKIP and "no peak figure" in nopeak.detail  # never a PASS without a peak
    wrong = _pct_check("triad", False, 999.0, "GB/s", 256.0, 50, 80, "wrong result", {}, "triad_gbps")
    assert wrong.status == FAIL and wrong.detail == "wrong result"


def test_sgemm_tolerance_catches_an_indexing_bug_but_not_rounding() -> None:
    rng = np.random.default_rng(0)
    k = 512
    a = rng.uniform(-1, 1, (128, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, 128)).astype(np.float32)
    tol = sgemm_tolerance(a, b, k)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs((a @ b) - ref)) <= tol  # float32 BLAS is within it
    shifted = np.roll(a @ b, 1, axis=1)  # an off-by-one column
    assert np.max(np.abs(shifted - ref)) > 100 * tol


def test_sgemm_size_scales_with_the_gpu() -> None:
    assert sgemm_size(_dev(gib=80), 67) == 4096
    assert sgemm_size(_dev(gib=8), 4.4) == 2048
    assert sgemm_size(_dev(gib=4), 0.236) == 1024


# --- library search and the no-driver path ------------------------------------------------------------------------


def test_wheel_layouts_are_searched_first(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    for rel in (
        "nvidia/cu13/lib/libnvrtc.so.13",
        "nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
        "nvidia/cuda_nvrtc/lib/libnvrtc-builtins.so.12.6",
        "nvidia/cublas/lib/libcublasLt.so.12",
        "nvidia/cublas/lib/libcublas.so.12",
    ):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(b"")
    found = libs.find("libnvrtc", ("nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"), sites=[site], cuda_home=None)
    assert found[:2] == [site / "nvidia/cu13/lib/libnvrtc.so.13", site / "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"]
    assert not any("builtins" in p.name for p in found)
    cublas = libs.find("libcublas", ("nvidia/cublas/lib",), sites=[site])
    assert cublas[0].name == "libcublas.so.12" and all("Lt" not in p.name for p in cublas)


def test_without_a_driver_verify_says_so_and_exits_2(tmp_path: Path) -> None:
    report = run(Expect(), libcuda=str(tmp_path / "libcuda.so.1"), frameworks=False, jupyter=False)
    assert report.exit_code == 2 and report.status == "error"
    assert report.error == NO_DRIVER
    assert "no NVIDIA driver found (libcuda.so.1 not loadable)" in report.text_lines()[-2]


def test_a_missing_nvrtc_is_a_failed_check_with_the_way_out(tmp_path: Path) -> None:
    report = run(
        Expect(),
        compile_only=True,
        arch="sm_61",
        nvrtc_path=str(tmp_path / "libnvrtc.so.12"),
        frameworks=False,
        jupyter=False,
    )
    assert report.exit_code == 1
    nvrtc = next(c for c in report.checks if c.name == "nvrtc")
    assert nvrtc.status == FAIL and "could not be loaded" in nvrtc.detail
    assert not any(c.name.startswith("compile:") for c in report.checks)


def test_a_compile_only_run_without_an_architecture_stops_before_any_check(tmp_path: Path) -> None:
    report = run(Expect(), compile_only=True, nvrtc_path=str(tmp_path / "libnvrtc.so.12"))
    assert report.exit_code == 2 and report.error == NO_ARCH
    assert report.checks == []
