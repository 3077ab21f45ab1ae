"""A GPU the table does not list (a laptop part, a rare workstation card) is planned from the compute capability the
profile gives for it, and refused with one line that says what to give when the profile does not describe it.
The live database: the stack a described GPU gets must be the one its listed twin gets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from provision.compat import load_db
from provision.costs import compare_pairs, cost_line
from provision.errors import ProfileError
from provision.loader import load_profile
from provision.resolver import resolve
from provision.verify.expect import Expect

ROOT = Path(__file__).resolve().parents[2]
DB = load_db()


def write(tmp_path: Path, gpu: str, os_release: str = '"13"', extra: str = "", cost: str = "") -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: t\n"
        "hardware:\n"
        f"  gpu: {gpu}\n"
        f"{extra}"
        "  cpu: {model: CPU, flags: [sse4_2, avx, avx2]}\n"
        "  memory_gb: 32\n"
        "target:\n"
        "  kind: baremetal\n"
        f"  os: {{distribution: debian, release: {os_release}}}\n"
        "software:\n"
        "  frameworks: [{name: pytorch}]\n"
        f"{cost}"
    )
    return path


def stack(plan) -> tuple:
    return (plan.driver, plan.cuda, plan.cudnn, plan.python, plan.frameworks, plan.image, plan.gpu.sm,
            plan.verify.target_arch)


def problems(path: Path) -> list:
    with pytest.raises(ProfileError) as exc:
        load_profile(path, db=DB)
    return exc.value.problems


@pytest.mark.parametrize(
    ("listed", "cc", "memory", "release"),
    [("GeForce GTX 1070", "6.1", 8, '"13"'), ("Tesla K80", "3.7", 12, '"12"'), ("GeForce RTX 4090", "8.9", 24, '"13"')],
)
def test_a_described_gpu_gets_the_stack_of_the_listed_gpu_with_its_compute_capability(tmp_path, listed, cc, memory,
                                                                                       release):
    twin = resolve(load_profile(write(tmp_path, f'{{model: "{listed}"}}', release), db=DB), DB)
    described = resolve(load_profile(write(
        tmp_path, f'{{model: "Unlisted Card", compute_capability: "{cc}", memory_gb: {memory}}}', release), db=DB), DB)
    assert stack(described) == stack(twin)
    assert described.gpu.model == "Unlisted Card" and described.gpu.arch == twin.gpu.arch
    assert described.gpu.bandwidth_gbps is None and described.gpu.fp32_tflops is None
    assert any("not in provision's GPU table" in w and f"({cc}, {twin.gpu.arch})" in w for w in described.warnings)
    gpu_reason = next(r for r in described.reasons if r.component == "gpu")
    assert "as the profile describes it" in gpu_reason.choice and "docs.nvidia.com" in gpu_reason.source


def test_the_verifier_checks_a_described_gpu_against_the_device_and_reports_figures_without_a_percentage(tmp_path):
    plan = resolve(load_profile(write(
        tmp_path, '{model: "GeForce RTX 3060 Laptop GPU", compute_capability: "8.6", memory_gb: 6}'), db=DB), DB)
    expect = Expect.from_plan(plan)
    assert (expect.compute_capability, expect.memory_gb) == ("8.6", 6.0)
    assert expect.bandwidth_gbps is None and expect.fp32_tflops is None
    with_peaks = resolve(load_profile(write(
        tmp_path, '{model: "GeForce RTX 3060 Laptop GPU", compute_capability: "8.6", memory_gb: 6, '
        'bandwidth_gbps: 336, fp32_tflops: 10.94}'), db=DB), DB)
    assert (Expect.from_plan(with_peaks).bandwidth_gbps, Expect.from_plan(with_peaks).fp32_tflops) == (336, 10.94)


def test_an_unknown_gpu_says_how_to_describe_it(tmp_path):
    # Not in gpus.yaml, nor in any of NVIDIA's driver lists
    (p,) = problems(write(tmp_path, '{model: "GeForce RTX 5095"}'))
    assert (p.line, p.field) == (3, "hardware.gpu.model")
    assert "did you mean 'GeForce RTX 5090'?" in p.hint
    assert "hardware.gpu.compute_capability" in p.hint and "nvidia-smi --query-gpu=compute_cap" in p.hint


def test_a_compute_capability_no_architecture_has_is_refused_at_its_line(tmp_path):
    (p,) = problems(write(tmp_path, '{model: "Unlisted Card", compute_capability: "6.4", memory_gb: 2}'))
    assert p.field == "hardware.gpu.compute_capability" and p.line == 3
    assert "6.4 is not one of an NVIDIA architecture's" in p.message and "Pascal 6.0/6.1/6.2" in p.hint


def test_a_described_gpu_needs_its_memory(tmp_path):
    (p,) = problems(write(tmp_path, '{model: "Unlisted Card", compute_capability: "6.1"}'))
    assert p.field == "hardware.gpu.memory_gb" and "memory.total" in p.hint


def test_a_listed_gpu_with_another_compute_capability_is_refused_and_an_agreeing_one_is_not(tmp_path):
    (p,) = problems(write(tmp_path, '{model: "GeForce GTX 1070", compute_capability: "7.5"}'))
    assert p.field == "hardware.gpu.compute_capability"
    assert "GeForce GTX 1070 has compute_capability 6.1 in the database" in p.message
    load_profile(write(tmp_path, '{model: "GeForce GTX 1070", compute_capability: "6.1", memory_gb: 8}'), db=DB)


def test_an_unknown_extra_gpu_is_refused_at_its_own_line(tmp_path):
    path = write(tmp_path, '{model: "GeForce GTX 1070"}', extra="  extra_gpus:\n    - {model: \"GTX 99999\"}\n")
    (p,) = problems(path)
    assert (p.field, p.line) == ("hardware.extra_gpus[0].model", 5)


def test_compare_does_not_guess_a_peak_the_profile_did_not_give(tmp_path):
    owned_path = write(tmp_path, '{model: "Unlisted Card", compute_capability: "6.1", memory_gb: 8}',
                       cost="cost: {purchase_usd: 1000, power_w: 150, electricity_usd_per_kwh: 0.3}\n")
    owned = load_profile(owned_path, db=DB)
    rented = load_profile(ROOT / "profiles" / "aws-p2.yaml", db=DB)
    lines = [cost_line(p, resolve(p, DB), DB) for p in (owned, rented)]
    (pair,) = compare_pairs(lines, within=4, horizon_h=100_000)
    assert pair["break_even_hours"] is None and not pair["comparable"]
    assert "FP32 rate of Unlisted Card is not known" in pair["verdict"]


def test_the_cli_plans_and_renders_a_described_gpu(tmp_path):
    path = write(tmp_path, '{model: "Unlisted Card", compute_capability: "6.1", memory_gb: 2}')
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "provision", "render", str(path), "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "sm_61" in (out / "plan.json").read_text() and (out / "Dockerfile").is_file()
    proc = subprocess.run([sys.executable, "-m", "provision", "compare", str(path), "profiles/aws-p2.yaml"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr


def test_a_laptop_device_name_is_not_taken_for_the_desktop_model_its_prefix_names():
    assert DB.gpu_by_device_name("NVIDIA GeForce RTX 4090 Laptop GPU") is None
    assert DB.gpu_by_device_name("NVIDIA GeForce GTX 1070 with Max-Q Design") is None
    assert DB.gpu_by_device_name("NVIDIA GeForce RTX 4090").model == "GeForce RTX 4090"
    assert DB.gpu_by_device_name("NVIDIA H100 80GB HBM3") is not None  # a prefix still finds the row
