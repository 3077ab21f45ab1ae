"""Issue 41: Debian plans take NVIDIA's CUDA repository as the driver source only where Debian's own branches cannot
drive the GPU or run the CUDA the plan needs (data/policy.yaml, driver_sources), with the kernel modules the GPU
needs and the CUDA from the same repository. Fixture tables (tests/fixtures/small_db.py plus the rows below)."""

from __future__ import annotations

import copy

import pytest

from provision.compat import CompatDB
from provision.errors import IncompatibleError
from provision.resolver import resolve
from tests.fixtures.small_db import TABLES, S, gpu
from tests.unit.test_resolver import profile

URL = "https://example.invalid/nvidia/{slug}/{arch}/"


def _db(with_repo: bool = True) -> CompatDB:
    t = copy.deepcopy(TABLES)
    for row in t["gpus"]:  # the fixture has no architecture rows: the flavours its GPUs take, as data/gpus.yaml has them
        row["kernel_modules"] = {"Kepler": ["proprietary"], "Pascal": ["proprietary"]}.get(row["arch"])
    t["gpus"].append(gpu("Blackwell Card", "12.0", "Blackwell", fp16=100.0, kernel_modules=["open"]))
    t["systems"][0]["nvidia_repo"] = "debian12"
    t["policy"]["driver_sources"] = {"debian": [["debian"], ["nvidia-repo"]]}
    t["policy"]["cuda_sources_by_driver"] = {"nvidia-repo": ["nvidia-repo", "pypi"]}
    t["nvidia_repo"] = {
        "url": URL, "keyring_package": "cuda-keyring_1.1-1_all.deb", "key_file": "k.pub",
        "key_fingerprint": "A" * 40, "arch_dirs": {"x86_64": "x86_64"},
        "toolkit_packages": ["cuda-toolkit-{major}-{minor}"],
        "runtime_packages": ["cuda-cudart-{major}-{minor}", "cuda-nvrtc-{major}-{minor}"],
        "repos": [{"slug": "debian12", "cuda": ["12.6", "13.0"]}], **S,
    }
    if with_repo:
        for module, pkgs in (("open", ["nvidia-driver-cuda", "nvidia-kernel-open-dkms"]),
                             ("proprietary", ["nvidia-driver-cuda", "nvidia-kernel-dkms"])):
            t["drivers"].append({
                "os_id": "debian-12", "branch": "580", "source": "nvidia-repo", "version": None, "kernel_module": module,
                "packages": pkgs, "userspace_packages": ["nvidia-driver-cuda"], "confidence": "unverified",
                "source_url": S["source"], "checked": S["checked"],
            })
    return CompatDB.model_validate(t)


DB = _db()


def _reason(plan, component: str) -> str:
    return " ".join(r.why for r in plan.reasons if r.component == component)


def test_debian_s_own_driver_stays_first_wherever_it_fits():
    plan = resolve(profile("Turing Card"), DB)
    assert (plan.driver.source, plan.driver.branch) == ("debian", "535")
    assert plan.image.apt_repository is None


def test_a_framework_release_debian_s_driver_runs_is_planned_on_it_not_on_nvidia_s():
    # torch 2.9.0's PyPI build is CUDA 13.0 (R535 cannot run it); its cu126 build runs on R535: Debian's driver wins.
    plan = resolve(profile("Turing Card", frameworks=[{"name": "pytorch", "version": "2.9.0"}]), DB)
    assert (plan.driver.source, plan.frameworks[0].variant) == ("debian", "cu126")


def test_a_gpu_debian_cannot_drive_gets_nvidia_s_repository_with_open_modules_and_its_cuda():
    plan = resolve(profile("Blackwell Card"), DB)
    d = plan.driver
    assert (d.source, d.branch, d.kernel_module) == ("nvidia-repo", "580", "open")
    assert d.packages == ("nvidia-driver-cuda", "nvidia-kernel-open-dkms") and d.version is None
    assert (plan.cuda.source, plan.cuda.version) == ("nvidia-repo", "13.0")
    assert plan.cuda.packages == ("cuda-cudart-13-0", "cuda-nvrtc-13-0")
    why = _reason(plan, "driver")
    assert "not from debian: debian-12 offers no driver branch that drives Blackwell Card" in why
    assert "holds the host on R580" in why
    assert plan.image.apt_repository is not None and "debian12" in plan.image.apt_repository.url


def test_a_cuda_debian_s_branches_cannot_run_takes_the_repository_and_open_modules_from_turing_on():
    plan = resolve(profile("Turing Card", cuda="13.0"), DB)
    assert (plan.driver.source, plan.driver.kernel_module) == ("nvidia-repo", "open")
    assert "NVIDIA recommends them from Turing on" in _reason(plan, "driver")
    assert "not from debian: " in _reason(plan, "driver")


def test_a_gpu_before_turing_gets_the_proprietary_modules_from_the_repository():
    plan = resolve(profile("Pascal Card", driver_branch="580"), DB)
    assert (plan.driver.source, plan.driver.kernel_module) == ("nvidia-repo", "proprietary")
    assert plan.driver.packages == ("nvidia-driver-cuda", "nvidia-kernel-dkms")


def test_without_the_repository_rows_the_refusal_is_debian_s_as_before():
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile("Blackwell Card"), _db(with_repo=False))
    assert "debian-12 offers no driver branch that drives Blackwell Card" in exc.value.message


def test_a_refusal_past_the_driver_is_not_hidden_by_a_tier_without_a_driver_for_the_gpu():
    # Kepler: no repository branch drives it; the Debian tier's deeper refusal (the cuDNN pin) is what is said.
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile("Kepler Card", cudnn="9.20"), DB)
    assert "cuDNN" in exc.value.message
