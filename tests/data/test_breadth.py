"""The GPU, Jetson and cloud tables: every row's arithmetic and every cross-reference holds.

Tolerances: FP32 peak within 2 % of cores x boost clock x 2 (tables round to 3 significant figures); non-tensor
FP16 within 3 % of FP32 times one of the ratios NVIDIA's architectures have (1/64, 1, 2, 4)."""

from __future__ import annotations

import re

import pytest
from packaging.version import Version

from provision.compat import load_db

DB = load_db()
# Compute capabilities each architecture name may carry: data/gpus.yaml's `architectures` (the CUDA C++ Programming
# Guide's table), the same table a described GPU is planned from.
ARCH_CC = {a.name: set(a.cc) for a in DB.architectures}
FP16_RATIOS = (1 / 64, 1.0, 2.0, 4.0)


@pytest.mark.parametrize("gpu", DB.gpus, ids=lambda g: g.model)
def test_gpu_row_arithmetic(gpu):
    assert gpu.cc in ARCH_CC[gpu.arch], f"{gpu.model}: cc {gpu.cc} is not a {gpu.arch} compute capability"
    # Every row of the table has its peaks (None is only for a GPU a profile describes).
    assert gpu.bandwidth_gbps is not None and gpu.fp32_tflops is not None and gpu.tdp_w is not None, gpu.model
    assert gpu.memory_gb > 0 and gpu.bandwidth_gbps > 0 and gpu.tdp_w > 0
    if gpu.cores is not None:
        assert gpu.boost_mhz, f"{gpu.model}: cores without a clock"
        peak = gpu.cores * gpu.boost_mhz * 2 / 1e6
        assert gpu.fp32_tflops == pytest.approx(peak, rel=0.02), f"{gpu.model}: FP32 {gpu.fp32_tflops} vs {peak:.3f}"
    if gpu.fp16_tflops is None:
        assert gpu.arch in ("Kepler", "Maxwell") and not gpu.tegra, f"{gpu.model}: {gpu.arch} has native FP16"
    else:
        ratio = gpu.fp16_tflops / gpu.fp32_tflops
        assert any(ratio == pytest.approx(r, rel=0.03) for r in FP16_RATIOS), f"{gpu.model}: FP16/FP32 = {ratio:.3f}"
    if gpu.fp64_tflops is not None:
        assert gpu.fp64_tflops <= gpu.fp32_tflops
    assert any(gpu.cc.replace(".", "") == str(sm) for t in DB.toolkits for sm in t.sm), f"no toolkit builds {gpu.sm}"


def test_the_architecture_table_is_the_cuda_guide_s():
    # Pinned: a compute capability moved to another architecture would re-plan every described GPU.
    assert ARCH_CC["Pascal"] == {"6.0", "6.1", "6.2"} and ARCH_CC["Turing"] == {"7.5"} and ARCH_CC["Ada"] == {"8.9"}
    ccs = [cc for a in DB.architectures for cc in a.cc]
    assert len(ccs) == len(set(ccs)), "a compute capability listed under two architectures"
    assert {g.arch for g in DB.gpus} <= ARCH_CC.keys()


def test_gpu_names_and_aliases_are_unique():
    names = [n.lower() for n in DB.gpu_names()]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


@pytest.mark.parametrize(
    ("arch", "segments"),
    [
        ("Kepler", {"geforce", "datacenter"}),
        ("Maxwell", {"geforce", "datacenter", "tegra"}),
        ("Pascal", {"geforce", "datacenter", "tegra"}),
        ("Volta", {"geforce", "datacenter", "tegra"}),
        ("Turing", {"geforce", "datacenter"}),
        ("Ampere", {"geforce", "datacenter", "tegra"}),
        ("Ada", {"geforce", "datacenter"}),
        ("Hopper", {"datacenter"}),
        ("Blackwell", {"geforce", "datacenter", "tegra"}),
    ],
)
def test_every_architecture_is_covered_in_every_segment_it_shipped_in(arch, segments):
    assert {g.segment for g in DB.gpus if g.arch == arch} >= segments


def test_every_jetson_module_has_a_jetpack_release_and_every_release_names_known_modules():
    tegra = {g.model for g in DB.gpus if g.tegra}
    listed = {m for j in DB.jetpack for m in j.modules}
    assert listed <= tegra, listed - tegra
    assert tegra <= listed, tegra - listed
    for jp in DB.jetpack:
        for model in jp.modules:
            gpu = DB.gpu(model)
            assert any(t.version == jp.cuda and int(gpu.cc.replace(".", "")) in t.sm for t in DB.toolkits), (
                f"JetPack {jp.jetpack}'s CUDA {jp.cuda} cannot build for {model} ({gpu.sm})"
            )
        assert DB.system(jp.os_id) is not None, jp.os_id


def test_jetson_pytorch_rows_are_direct_references_whose_file_matches_the_version():
    for row in DB.jetson_torch:
        assert DB.jetpack_release(row.jetpack) is not None
        Version(row.version)  # a version pip can compare
        wheel = row.url.rsplit("/", 1)[-1]
        assert wheel.startswith(f"torch-{row.version}-cp{row.python.replace('.', '')}-"), wheel
        assert row.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", row.sha256)


@pytest.mark.parametrize("inst", DB.instances, ids=lambda i: i.instance_type)
def test_instance_rows_name_known_gpus_and_consistent_interconnects(inst):
    gpu = DB.gpu(inst.gpu)
    assert gpu is not None and gpu.model == inst.gpu, f"{inst.instance_type}: unknown GPU {inst.gpu}"
    assert inst.gpus >= 1 and inst.vcpu >= 1 and inst.ram_gib > 0
    if inst.interconnect != "pcie":
        assert inst.gpus >= 2, f"{inst.instance_type}: one GPU has no {inst.interconnect}"
    if inst.interconnect == "nvswitch":
        assert gpu.nvswitch_gpus is not None, f"{inst.gpu} has no NVSwitch board in gpus.yaml"


def test_instances_cover_the_three_providers():
    assert {i.provider for i in DB.instances} == {"aws", "gcp", "azure"}
    assert len({i.instance_type for i in DB.instances}) == len(DB.instances)


def test_fabric_manager_rows_match_a_driver_row_of_the_same_os_and_branch():
    for fm in DB.fabricmanager:
        assert any(d.os_id == fm.os_id and d.branch == fm.branch for d in DB.drivers), (fm.os_id, fm.branch)
        assert all(fm.branch in p for p in fm.packages), "Fabric Manager must be the driver's branch"
