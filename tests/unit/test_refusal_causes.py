"""Refusals that name their real cause, found by an audit of issue 15 (plans of machines beyond the shipped
profiles). The live database."""

from __future__ import annotations

import pytest

from provision.compat import load_db
from provision.errors import IncompatibleError
from provision.models import Profile
from provision.resolver import resolve
from tests.unit.test_kernel_modules import profile

DB = load_db()



def test_tensorflow_on_aarch64_is_not_refused_for_lacking_x86_instruction_sets():
    prof = profile({"model": "GH200"}, arch="aarch64", flags=("fp", "asimd"), frameworks=("tensorflow",))
    with pytest.raises(IncompatibleError) as exc:
        resolve(prof, DB)
    text = exc.value.message + " ".join(exc.value.alternatives)
    assert "AVX" not in text and "no aarch64 CUDA wheel" in text


def test_a_framework_whose_cuda_no_offered_driver_runs_does_not_blame_a_cuda_pin_that_is_not_there():
    prof = Profile.model_validate({
        "name": "t",
        "hardware": {"gpu": {"model": "H100 SXM5 80GB"}, "cpu": {"model": "CPU", "flags": ["avx", "avx2"]},
                     "memory_gb": 64},
        "target": {"kind": "baremetal", "os": {"distribution": "debian", "release": "13"}, "arch": "x86_64"},
        "software": {"frameworks": [{"name": "pytorch", "version": "2.15"}]},
    })
    # Without NVIDIA's repository for Debian (issue 41 plans this one from it), Debian's own R550 cannot run CUDA 13.
    db = DB.model_copy(update={"drivers": tuple(d for d in DB.drivers if d.source != "nvidia-repo")})
    with pytest.raises(IncompatibleError) as exc:
        resolve(prof, db)
    assert "cannot run" in exc.value.message and "pin" not in exc.value.message
    assert "drop the software.cuda pin" not in exc.value.alternatives


@pytest.mark.parametrize(("model", "jetpack", "release"), [("Jetson Xavier NX", "5.1.4", "20.04"),
                                                           ("Jetson AGX Thor", "7.0", "24.04")])
def test_a_jetson_refusal_suggests_only_jetpack_releases_the_module_runs(model, jetpack, release):
    prof = Profile.model_validate({
        "name": "t",
        "hardware": {"gpu": {"model": model}, "cpu": {"model": "ARM", "flags": ["fp", "asimd"]}, "memory_gb": 8},
        "target": {"kind": "jetson", "jetpack": jetpack, "os": {"distribution": "ubuntu", "release": release},
                   "arch": "aarch64"},
        "software": {"frameworks": [{"name": "pytorch"}], "jupyter": {"enabled": False}},
    })
    with pytest.raises(IncompatibleError) as exc:
        resolve(prof, DB)
    offered = exc.value.alternatives[-1]
    assert offered.startswith(f"JetPack releases for {model} with PyTorch builds: ")
    runs = {j.jetpack for j in DB.jetpack if model in j.modules}
    listed = offered.split(": ", 1)[1]
    assert listed == "none" or set(listed.split(", ")) <= runs


def test_an_unknown_os_given_with_os_is_the_command_line_s_fault_not_the_file_s():
    from pathlib import Path

    from provision.errors import ProfileError
    from provision.loader import load_profile

    with pytest.raises(ProfileError) as exc:
        load_profile(Path(__file__).resolve().parents[2] / "profiles" / "deskmini.yaml", os_override="debian-11", db=DB)
    (p,) = exc.value.problems
    assert p.message == "--os debian-11: no data for it" and p.file is None and p.line is None
    assert "debian-13" in p.hint


def test_a_cudnn_pin_that_cannot_drive_the_gpu_blames_the_gpu_not_the_cuda_pin():
    prof = Profile.model_validate({
        "name": "t",
        "hardware": {"gpu": {"model": "Tesla K80"}, "cpu": {"model": "CPU", "flags": ["avx", "avx2"]}, "memory_gb": 64},
        "target": {"kind": "baremetal", "os": {"distribution": "debian", "release": "12"}, "arch": "x86_64"},
        "software": {"frameworks": [{"name": "pytorch"}], "cuda": "11.7", "cudnn": "9.1"},
    })
    with pytest.raises(IncompatibleError) as exc:
        resolve(prof, DB)
    assert "the pinned cuDNN 9.1 does not support Tesla K80 (cc 3.7), whatever the CUDA" in exc.value.message
    assert "does not fit the pinned CUDA" not in exc.value.message
