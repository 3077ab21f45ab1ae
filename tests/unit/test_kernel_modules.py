"""The driver's kernel-module flavour follows the GPU: Blackwell and Grace Hopper run only on NVIDIA's open modules,
GPUs before Turing only on the proprietary ones (data/gpus.yaml, architectures). The live database."""

from __future__ import annotations

import pytest

from provision.compat import load_db
from provision.errors import IncompatibleError
from provision.models import Profile
from provision.resolver import resolve

DB = load_db()


def profile(gpu: dict, os: str = "ubuntu-24.04", arch: str = "x86_64", flags=("sse4_2", "avx", "avx2"),
            frameworks=()) -> Profile:
    dist, rel = os.split("-")
    return Profile.model_validate({
        "name": "t",
        "hardware": {"gpu": gpu, "cpu": {"model": "CPU", "flags": list(flags)}, "memory_gb": 64},
        "target": {"kind": "baremetal", "os": {"distribution": dist, "release": rel}, "arch": arch},
        "software": {"frameworks": [{"name": f} for f in frameworks]},
    })


@pytest.mark.parametrize("gpu", [{"model": "GeForce RTX 5090"}, {"model": "NVIDIA RTX PRO 6000 Blackwell"},
                                 {"model": "Laptop Blackwell", "compute_capability": "12.0", "memory_gb": 24}])
@pytest.mark.parametrize("os", ["ubuntu-22.04", "ubuntu-24.04"])
def test_blackwell_gets_the_open_kernel_modules(gpu, os):
    plan = resolve(profile(gpu, os), DB)
    assert plan.driver.kernel_module == "open"
    assert all("open" in p for p in plan.driver.packages if p.startswith("nvidia-driver") or p.startswith("nvidia-open"))


def test_grace_hopper_gets_the_open_kernel_modules():
    plan = resolve(profile({"model": "GH200"}, arch="aarch64", flags=("fp", "asimd")), DB)
    assert plan.driver.kernel_module == "open"


@pytest.mark.parametrize("model", ["GeForce GTX 1070", "Tesla V100 PCIe 16GB", "GeForce GTX 970"])
def test_gpus_before_turing_get_the_proprietary_modules(model):
    assert resolve(profile({"model": model}), DB).driver.kernel_module == "proprietary"


def test_an_os_with_only_the_proprietary_modules_for_blackwell_is_refused_with_that_reason():
    closed_only = DB.model_copy(update={"drivers": tuple(d for d in DB.drivers if d.kernel_module != "open")})
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile({"model": "GeForce RTX 5090"}), closed_only)
    assert "runs only on NVIDIA's open kernel modules" in exc.value.message
    assert "with the proprietary ones only" in exc.value.message



def test_a_box_mixing_turing_and_blackwell_gets_the_open_modules_for_both():
    prof = profile({"model": "GeForce RTX 2080 Ti"})
    prof = Profile.model_validate({**prof.model_dump(), "hardware": {**prof.model_dump()["hardware"],
                                                                     "extra_gpus": [{"model": "GeForce RTX 5090"}]}})
    plan = resolve(prof, DB)
    assert plan.driver.kernel_module == "open" and plan.driver.packages == ("nvidia-driver-580-open",)
    assert resolve(profile({"model": "GeForce RTX 2080 Ti"}), DB).driver.kernel_module == "proprietary"  # alone


def test_a_box_mixing_pascal_and_blackwell_is_refused_for_the_kernel_modules():
    prof = profile({"model": "GeForce GTX 1070"})
    prof = Profile.model_validate({**prof.model_dump(), "hardware": {**prof.model_dump()["hardware"],
                                                                     "extra_gpus": [{"model": "GeForce RTX 5090"}]}})
    with pytest.raises(IncompatibleError) as exc:
        resolve(prof, DB)
    assert "GeForce GTX 1070 runs only on NVIDIA's proprietary kernel modules" in exc.value.message
    assert "GeForce RTX 5090 only on the open ones" in exc.value.message
