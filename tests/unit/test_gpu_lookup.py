"""A GPU by the name nvidia-smi prints or by its PCI device ID (hardware.gpu.pci_id), through NVIDIA's driver list
(data/nvidia_devices.yaml); `provision gpus` lists the list's devices behind --all and filters either list."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from provision.compat import load_db
from provision.errors import IncompatibleError, ProfileError
from provision.loader import load_profile
from provision.resolver import resolve

DB = load_db()
ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, gpu: str, os_: str = 'debian, release: "12"', frameworks: str = "[{name: pytorch}]") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        f"name: t\nhardware:\n  gpu: {gpu}\n  cpu: {{model: x, cores: 8, flags: [sse4_2, avx, avx2]}}\n"
        f"  memory_gb: 32\ntarget:\n  kind: baremetal\n  os: {{distribution: {os_}}}\n  arch: x86_64\n"
        f"software:\n  frameworks: {frameworks}\n"
    )
    return path


def problem(path: Path):
    with pytest.raises(ProfileError) as exc:
        load_profile(path, db=DB)
    (p,) = exc.value.problems
    return p


def test_a_pci_id_plans_the_gpu_it_names(tmp_path):
    plan = resolve(load_profile(write(tmp_path, '{pci_id: "0x1DB1"}'), db=DB), DB)
    assert (plan.gpu.model, plan.gpu.compute_capability) == ("Tesla V100 SXM2 16GB", "7.0")


def test_the_name_nvidia_smi_prints_plans_the_gpus_yaml_row(tmp_path):
    plan = resolve(load_profile(write(tmp_path, '{model: "Tesla P100-PCIE-16GB"}'), db=DB), DB)
    assert plan.gpu.model == "Tesla P100 PCIe 16GB" and plan.gpu.fp32_tflops == 9.3


@pytest.mark.parametrize("gpu, message", [
    ('{pci_id: "1DB1"}', "'1DB1' is not a PCI device ID"),
    ('{pci_id: 0x1DB1}', "read by YAML as a number"),
    ('{pci_id: "0xFFFF"}', "no GPU with PCI device ID 0xFFFF in NVIDIA's driver list (550.163.01, 580.105.08)"),
    ('{count: 1}', "give the GPU's model (as nvidia-smi prints it) or its pci_id"),
    ('{model: "GeForce GTX 1070", pci_id: "0x1DB1"}', "'GeForce GTX 1070' is not the GPU with PCI device ID 0x1DB1"),
])
def test_a_bad_pci_id_is_one_line_at_its_field(tmp_path, gpu, message):
    p = problem(write(tmp_path, gpu))
    assert message in f"{p.message} {p.hint}", p
    assert p.field.startswith("hardware.gpu") and p.line == 3


def test_a_model_and_the_pci_id_of_one_of_its_devices_agree(tmp_path):
    # the list names the laptop RTX 3060 on GA104, GA106 and GA107: any of its IDs goes with the name
    path = write(tmp_path, '{model: "NVIDIA GeForce RTX 3060 Laptop GPU", pci_id: "0x2520", memory_gb: 6}')
    plan = resolve(load_profile(path, db=DB), DB)
    assert (plan.gpu.chip, plan.gpu.memory_gb) == ("GA106", 6)


def test_a_laptop_part_plans_from_the_list_and_the_plan_says_its_memory_varies(tmp_path):
    plan = resolve(load_profile(write(tmp_path, '{model: "NVIDIA GeForce RTX 3060 Laptop GPU"}'), db=DB), DB)
    assert (plan.gpu.arch, plan.gpu.compute_capability, plan.gpu.memory_gb) == ("Ampere", "8.6", None)
    assert any("memory varies by SKU" in w and "provision doctor" in w for w in plan.warnings)
    reason = next(r for r in plan.reasons if r.component == "gpu")
    assert "memory unknown" in reason.why and "supported-gpus.json of 550.163.01" in reason.source
    assert plan.driver.kernel_module == "open" or "open" in DB.resolve_gpu(plan.gpu.model).kernel_modules


def test_a_kepler_card_the_list_caps_at_470_plans_on_470_and_says_why(tmp_path):
    # (no framework: PyTorch's builds start at sm_37)
    plan = resolve(load_profile(write(tmp_path, '{model: "Tesla K40c"}', frameworks="[]"), db=DB), DB)
    assert plan.driver.branch == "470"
    reason = next(r for r in plan.reasons if r.component == "gpu")
    assert "R470 legacy branch" in reason.why


@pytest.mark.parametrize("gpu, legacy", [('{model: "GRID K2"}', "R367"), ('{model: "GeForce GTX 580"}', "R390")])
def test_a_card_whose_last_driver_is_older_than_470_is_refused_with_its_legacy_branch(tmp_path, gpu, legacy):
    with pytest.raises(IncompatibleError) as exc:
        resolve(load_profile(write(tmp_path, gpu), db=DB), DB)
    assert f"its last driver is the {legacy} legacy branch" in str(exc.value)


def test_the_open_modules_are_not_planned_for_a_card_the_list_does_not_mark_kernelopen():
    assert DB.resolve_gpu("NVIDIA CMP 40HX").kernel_modules == ("proprietary",)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, cwd=ROOT,
                          check=True)


def test_provision_gpus_lists_the_driver_list_behind_all_and_filters():
    rows = json.loads(cli("gpus", "--all", "--json").stdout)
    # 1273 (device ID, name) pairs of the 550 list and 50 device IDs only the 580 open modules' table names
    assert len(rows) == 1323 and all({"pci_id", "name", "cc", "drivers", "kernel_open", "driver_lists"} <= r.keys()
                                     for r in rows)
    assert sum(r["driver_lists"] == ["580.105.08"] for r in rows) == 50
    cmp50 = next(r for r in rows if r["name"] == "NVIDIA CMP 50HX")
    assert cmp50["driver_lists"] == ["550.163.01", "580.105.08"] and cmp50["kernel_open"] is False
    k2000 = next(r for r in rows if r["name"] == "Quadro K2000")
    assert (k2000["cc"], k2000["drivers"], k2000["kernel_open"]) == ("3.0", ["470"], False)
    fx = next(r for r in rows if r["name"] == "GeForce FX 5200")
    assert (fx["cc"], fx["driver"]) == (None, "173.xx legacy only")
    table = cli("gpus", "0x1DB1").stdout
    assert "Tesla V100-SXM2-16GB" in table and "GV100" in table and "R470-R580" in table
    five090 = cli("gpus", "0x2B85").stdout
    assert "NVIDIA GeForce RTX 5090" in five090 and "GB202" in five090 and "12.0" in five090 and " 580" in five090
    short = cli("gpus", "1070").stdout.splitlines()
    assert [line.split()[:3] for line in short[1:]] == [["GeForce", "GTX", "1070"], ["GeForce", "GTX", "1070"]]
    assert len(json.loads(cli("gpus", "--json").stdout)) == len(DB.gpus)


def test_a_cuda_era_chip_without_a_published_compute_capability_asks_for_it_and_plans_when_given(tmp_path):
    # GB102 (the DRIVE P2021 of the 580 open modules' table): Blackwell, yet NVIDIA's CUDA GPUs table names no
    # product on it, so no compute capability is guessed; a profile that gives one plans
    for gpu, field in (('{model: "NVIDIA DRIVE P2021"}', "hardware.gpu.model"),
                       ('{pci_id: "0x29BB"}', "hardware.gpu.pci_id")):
        p = problem(write(tmp_path, gpu, os_='debian, release: "13"'))
        assert p.field == field and "(0x29BB, GB102, Blackwell) has no known compute capability" in p.message, p
        assert "hardware.gpu.compute_capability" in p.hint and "predates" not in p.message
    plan = resolve(load_profile(write(tmp_path, '{model: "NVIDIA DRIVE P2021", compute_capability: "10.0", '
                                               'memory_gb: 32}', os_='debian, release: "13"'), db=DB), DB)
    assert plan.gpu.compute_capability == "10.0"


def test_blackwell_names_only_the_580_table_lists_plan_on_the_open_modules(tmp_path):
    plan = resolve(load_profile(write(tmp_path, '{model: "NVIDIA GeForce RTX 5090 Laptop GPU"}',
                                      os_='debian, release: "13"'), db=DB), DB)
    assert (plan.gpu.compute_capability, plan.driver.kernel_module) == ("12.0", "open")
    assert plan.gpu.memory_gb is None
