"""Resolver rules, table-driven over the small fixture tables in tests/fixtures/small_db.py (never the live data)."""

from __future__ import annotations

import copy

import pytest

from provision.errors import IncompatibleError
from provision.models import Profile
from provision.resolver import has_kernels, resolve
from provision.resolver.links import driver_runs
from tests.fixtures.small_db import small_db

DB = small_db()
AVX = ["sse4_2", "avx", "avx2"]
NO_AVX = ["sse4_2"]


def profile(gpu="Pascal Card", os="debian-12", kind="baremetal", flags=AVX, arch="x86_64", **software) -> Profile:
    dist, rel = os.split("-")
    target = {"kind": kind, "os": {"distribution": dist, "release": rel}, "arch": arch}
    if kind == "jetson":
        target["jetpack"] = "6.2"
    return Profile.model_validate(
        {
            "name": "t",
            "hardware": {"gpu": {"model": gpu}, "cpu": {"model": "CPU", "flags": flags}, "memory_gb": 16},
            "target": target,
            "software": software,
        }
    )


# --- each link of the chain ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "os", "branch"),
    [
        ("Kepler Card", "debian-12", "470"),  # only R470 drives cc 3.7
        ("Pascal Card", "debian-12", "535"),  # newest branch offered that drives cc 6.1
        ("Pascal Card", "debian-13", "580"),
    ],
)
def test_driver_branch_is_newest_offered_that_drives_the_gpu(gpu, os, branch):
    assert resolve(profile(gpu, os), DB).driver.branch == branch


def test_driver_pin_that_cannot_drive_the_gpu_is_refused_naming_both_sides():
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile("Kepler Card", driver_branch="535"), DB)
    text = exc.value.render()
    assert "driver branch 535 cannot drive Kepler Card" in text and "R470" in text


def test_os_without_a_driver_for_the_gpu_is_refused_with_the_os_that_has_one():
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile("Kepler Card", "debian-13"), DB)
    assert "debian-13 offers no driver branch" in exc.value.render()
    assert "debian-12" in exc.value.render()


def test_cuda_pin_the_toolkit_cannot_build_for_the_gpu_names_the_last_toolkit_that_can():
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile("Kepler Card", cuda="12.1"), DB)
    assert "CUDA 12.1 cannot build for sm_37 (Kepler Card): the last toolkit that can is 11.8" in exc.value.render()


def test_cuda_pin_below_the_gpu_names_the_first_toolkit_that_can():
    # 13.0 is the only toolkit for... no: Turing (7.5) builds everywhere; a cc-9.0-only table is not needed here:
    # refuse an unknown CUDA release instead.
    with pytest.raises(IncompatibleError, match="not a CUDA release"):
        resolve(profile("Pascal Card", cuda="9.0"), DB)


def test_driver_must_run_the_cuda_natively_or_by_minor_version_compat():
    # Without a framework the native 11.4 wins; the framework's 11.8 runs on R470 (11.4) only through
    # minor-version compatibility (>= 450.80.02). CUDA 12 never runs on R470.
    assert resolve(profile("Kepler Card"), DB).cuda.version == "11.4"
    plan = resolve(profile("Kepler Card", frameworks=[{"name": "pytorch"}]), DB)
    assert plan.cuda.version == "11.8"
    assert plan.driver.min_version == "450.80.02"
    assert any("minor-version compatibility" in w for w in plan.warnings)


def test_minor_version_compat_compares_the_branch_first_release_with_the_floor():
    # R580's number is below 13.x's floor 580.65.06, but its first release (shipped with CUDA 13.0) meets it: R580
    # runs 13.1 and 13.2 by minor-version compatibility. A branch whose first release is below the floor does not.
    r580 = next(b for b in DB.branches if b.branch == "580")
    assert driver_runs(DB, r580, "13.0") == "native"
    assert driver_runs(DB, r580, "13.1") == "mvc"
    assert driver_runs(DB, r580, "13.2") == "mvc"
    assert driver_runs(DB, r580, "14.0") is None
    early = r580.model_copy(update={"first_release": "580.42.01"})  # a beta before the floor
    assert driver_runs(DB, early, "13.1") is None
    r535 = next(b for b in DB.branches if b.branch == "535")
    assert driver_runs(DB, r535, "12.6") == "mvc" and driver_runs(DB, r535, "13.0") is None


def test_without_frameworks_a_natively_supported_cuda_is_preferred():
    plan = resolve(profile("Pascal Card", "debian-12"), DB)  # R535 reports 12.2: 12.1 native beats 12.6 by MVC
    assert plan.cuda.version == "12.1"
    assert not any("minor-version" in w for w in plan.warnings)


def test_framework_cuda_decides_the_environment_cuda():
    plan = resolve(profile("Pascal Card", frameworks=[{"name": "pytorch"}]), DB)
    assert plan.cuda.version == "12.6"
    fw = plan.frameworks[0]
    assert (fw.version, fw.variant, fw.index_url) == ("2.9.0", "cu126", "https://download.pytorch.org/whl/cu126")
    assert fw.requirements == ("torch==2.9.0+cu126",)


def test_default_pypi_build_without_kernels_for_the_gpu_is_passed_over_with_the_reason():
    plan = resolve(profile("Pascal Card", frameworks=[{"name": "pytorch"}]), DB)
    why = next(r.why for r in plan.reasons if r.component == "framework:pytorch")
    assert "cu130" in why and "none that runs on sm_61" in why


# --- prefer_pypi_builds: within a release, PyPI's build wins whenever it fits -------------------------------------
# Fixture: torch 2.8.0 has a PyPI build (cu126) and an index build (cu130); both carry sm_75, the Turing Card's.
# R580 on debian-13 runs CUDA 13.0 natively, so both stacks hold and only the policy decides.


def _fw(plan):
    fw = plan.frameworks[0]
    return fw.version, fw.variant, fw.index_url, fw.requirements


def test_pypi_build_of_a_release_wins_over_its_index_variants_when_it_fits():
    plan = resolve(profile("Turing Card", "debian-13", frameworks=[{"name": "pytorch", "version": "2.8.0"}]), DB)
    assert _fw(plan) == ("2.8.0", "cu126", None, ("torch==2.8.0",))
    assert plan.cuda.version == "12.6" and plan.cudnn.version == "9.10.2"
    why = next(r.why for r in plan.reasons if r.component == "framework:pytorch")
    assert "the release's cu130 build from the pytorch index would fit too" in why and "prefer_pypi_builds" in why


def test_without_the_policy_the_newest_cuda_of_the_release_wins():
    # The same machine with the policy off: the index's cu130 (the newer CUDA) wins, so the rule above is the policy's.
    db = DB.model_copy(update={"policy": DB.policy.model_copy(update={"prefer_pypi_builds": False})})
    plan = resolve(profile("Turing Card", "debian-13", frameworks=[{"name": "pytorch", "version": "2.8.0"}]), db)
    assert _fw(plan) == ("2.8.0", "cu130", "https://download.pytorch.org/whl/cu130", ("torch==2.8.0+cu130",))
    why = next(r.why for r in plan.reasons if r.component == "framework:pytorch")
    assert "prefer_pypi_builds" not in why


def test_a_cuda_pin_takes_the_index_variant_over_the_pypi_build():
    plan = resolve(profile("Turing Card", "debian-13", cuda="13.0",
                           frameworks=[{"name": "pytorch", "version": "2.8.0"}]), DB)
    assert _fw(plan) == ("2.8.0", "cu130", "https://download.pytorch.org/whl/cu130", ("torch==2.8.0+cu130",))
    assert plan.cudnn.version == "9.20.0"


def test_the_index_variant_when_the_driver_cannot_run_the_pypi_builds_cuda():
    # debian-12 offers R535 (CUDA 12.2): 2.9.0's PyPI build (cu130) cannot run there, its cu126 build can (minor-
    # version compatibility), and a newer release from the index still beats an older one from PyPI (2.8.0's cu126).
    plan = resolve(profile("Turing Card", "debian-12", frameworks=[{"name": "pytorch"}]), DB)
    assert _fw(plan) == ("2.9.0", "cu126", "https://download.pytorch.org/whl/cu126", ("torch==2.9.0+cu126",))


def test_kepler_gets_the_newest_build_with_sm37_and_a_kepler_cudnn():
    plan = resolve(profile("Kepler Card", frameworks=[{"name": "pytorch"}]), DB)
    fw = plan.frameworks[0]
    # 2.7.1 cu118 has sm_37 SASS but bundles cuDNN 9.1 (cc 5.0+): rejected; 2.0.1 cu117 bundles 8.5 (cc 3.5+).
    assert (fw.version, fw.index_url, plan.cudnn.version) == ("2.0.1", None, "8.5.0")
    assert plan.cudnn.packages == ("cudnn-cu11==8.5.0.96",)
    assert plan.verify.numpy_requirement == "numpy==1.24.4"  # torch 2.0 is built against numpy 1.x


def test_cudnn_pin_outside_the_gpu_range_is_refused():
    with pytest.raises(IncompatibleError, match="cuDNN 9.1"):
        resolve(profile("Kepler Card", cudnn="9.1"), DB)


def test_framework_python_range_message_names_both_versions():
    with pytest.raises(IncompatibleError, match="supports Python 3.8-3.11, not 3.13"):
        resolve(profile("Pascal Card", "debian-13", frameworks=[{"name": "pytorch", "version": "2.0"}]), DB)


@pytest.mark.parametrize(
    ("arch", "ptx", "gpu", "expected"),
    [
        (("6.0",), None, "Pascal Card", "sass 6.0"),  # SASS 6.0 runs on 6.1 (same major, dGPU)
        (("7.0",), None, "Pascal Card", None),  # newer SASS never runs on an older GPU
        (("8.0",), None, "Tegra Board", None),  # Tegra: only the exact architecture is trusted
        (("8.7",), None, "Tegra Board", "sass 8.7"),
        (("5.0",), "7.0", "Turing Card", "ptx 7.0"),  # PTX JIT for a newer GPU
        (("5.0",), "8.0", "Turing Card", None),  # PTX for a newer architecture cannot run
    ],
)
def test_has_kernels(arch, ptx, gpu, expected):
    assert has_kernels(arch, ptx, DB.gpu(gpu)) == expected


def test_tensorflow_is_refused_on_a_cpu_without_avx_with_what_would_work():
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile("Pascal Card", "debian-13", flags=NO_AVX, frameworks=[{"name": "tensorflow"}]), DB)
    text = exc.value.render()
    assert "AVX" in text and "SIGILL" in text and "PyTorch" in text


def test_tensorflow_plans_on_a_cpu_with_avx():
    plan = resolve(profile("Pascal Card", "debian-13", frameworks=[{"name": "tensorflow"}]), DB)
    assert plan.frameworks[0].requirements == ("tensorflow[and-cuda]==2.20.0",)


@pytest.mark.parametrize(
    ("gpu", "os", "requirement", "cuda"),
    [
        # Turing on R580: the CUDA 13 plugin has its kernels, and the newest CUDA wins between builds of a release.
        ("Turing Card", "debian-13", "jax[cuda13]==0.9.0", "13.0"),
        # Pascal: the CUDA 13 plugin starts at sm_75, so the CUDA 12 one (sm_60 cubins run on sm_61).
        ("Pascal Card", "debian-13", "jax[cuda12]==0.9.0", "12.6"),
        # Turing on a driver (R535) that cannot run CUDA 13 (580+): the CUDA 12 plugin, by minor version compat.
        ("Turing Card", "debian-12", "jax[cuda12]==0.9.0", "12.6"),
    ],
)
def test_jax_plans_the_cuda_plugin_the_gpu_and_driver_allow(gpu, os, requirement, cuda):
    plan = resolve(profile(gpu=gpu, os=os, frameworks=[{"name": "jax"}]), DB)
    fw = plan.framework("jax")
    assert fw.requirements == (requirement,) and fw.cuda == cuda and plan.cuda.version == cuda
    assert plan.verify.numpy_requirement == "numpy==2.2.6"


def test_a_gpu_the_jax_plugins_have_no_kernels_for_is_refused_with_their_architectures():
    with pytest.raises(IncompatibleError) as err:
        resolve(profile(gpu="Kepler Card", os="debian-12", frameworks=[{"name": "jax"}]), DB)
    msg = str(err.value)
    assert "no jax build has sm_37 kernels" in msg and "5.0;6.0;7.0;7.5;8.0;9.0" in msg, msg


def test_framework_python_range_must_hold_the_os_python():
    with pytest.raises(IncompatibleError, match="Python"):
        resolve(profile("Pascal Card", "debian-13", frameworks=[{"name": "pytorch", "version": "2.0"}]), DB)


def test_python_pin_other_than_the_os_python_needs_a_managed_build():
    # The fixture database lists no python-build-standalone build: the pin is refused, saying so. (With the shipped
    # data such a pin takes a managed interpreter: tests/unit/test_python_choice.py.)
    with pytest.raises(IncompatibleError, match="debian-12 has 3.11, and python-build-standalone ships no 3.12"):
        resolve(profile(python="3.12"), DB)


def test_distribution_cuda_is_preferred_when_it_is_the_planned_version():
    plan = resolve(profile("Kepler Card", cuda="11.8"), DB)
    assert (plan.cuda.source, plan.cuda.packages) == ("debian", ("libcudart11.0",))


def test_pypi_cuda_when_the_distribution_lacks_the_version():
    plan = resolve(profile("Pascal Card", frameworks=[{"name": "pytorch"}]), DB)
    assert plan.cuda.source == "pypi" and plan.cuda.packages == ("rt==12.6", "nvrtc==12.6")


def test_devel_plans_the_compiler():
    plan = resolve(profile("Pascal Card", frameworks=[{"name": "pytorch"}], devel=True), DB)
    assert plan.cuda.kind == "toolkit" and "nvcc==12.6" in plan.cuda.packages


def test_colab_is_verified_not_installed():
    plan = resolve(profile("Turing Card", "ubuntu-22.04", kind="colab", frameworks=[{"name": "pytorch"}]), DB)
    assert not plan.driver.install and not plan.cuda.install and not plan.cudnn.install
    assert plan.frameworks[0].requirements == ()
    assert not plan.jupyter.enabled  # Colab is the notebook server


def test_colab_pin_that_differs_from_the_runtime_is_refused():
    with pytest.raises(IncompatibleError, match="Colab"):
        resolve(profile("Turing Card", "ubuntu-22.04", kind="colab", cuda="11.8"), DB)


def test_jetson_takes_its_stack_from_jetpack():
    plan = resolve(profile("Tegra Board", "ubuntu-22.04", kind="jetson", arch="aarch64"), DB)
    assert (plan.driver.install, plan.cuda.version, plan.cudnn.version) == (False, "12.6", "9.3.0")
    assert plan.image.platform == "linux/arm64"


PLATFORMS = {
    "colab": {"gpu": "Turing Card", "os": "ubuntu-22.04", "kind": "colab"},
    "jetson": {"gpu": "Tegra Board", "os": "ubuntu-22.04", "kind": "jetson", "arch": "aarch64"},
}


@pytest.mark.parametrize(
    ("kind", "driver", "max_cuda", "min_driver", "cuda", "cudnn"),
    [("colab", ("580", "580.82.07"), "13.0", "560.28.03", "12.6", "9.10.2"), ("jetson", (None, "36.4.3"), "12.6", None, "12.6", "9.3.0")],
)
def test_platform_stack_is_recorded_for_the_verifier_and_installs_nothing(kind, driver, max_cuda, min_driver, cuda, cudnn):
    plan = resolve(profile(**PLATFORMS[kind]), DB)
    d, c, n = plan.driver, plan.cuda, plan.cudnn
    assert (d.install, d.source, d.kernel_module, d.packages) == (False, "platform", "platform", ())
    assert ((d.branch, d.version), d.max_cuda, d.min_version) == (driver, max_cuda, min_driver)
    assert (c.version, c.source, c.kind, c.install, c.packages, c.home) == (
        cuda, "platform", "toolkit", False, (), "/usr/local/cuda")
    assert (n.version, n.source, n.install, n.packages) == (cudnn, "platform", False, ())
    assert [r.component for r in plan.reasons][2:4] == ["driver", "cuda"]


@pytest.mark.parametrize(
    ("kind", "pin", "message", "way_out"),
    [
        ("colab", {"cudnn": "8"}, "Colab's runtime r1 comes with cuDNN 9.10.2; the profile pins 8",
         "drop the cuDNN pin: Colab's stack is verified, not replaced"),
        ("colab", {"python": "3.10"}, "Colab's runtime r1 comes with Python 3.13; the profile pins 3.10",
         "drop the Python pin"),
        ("jetson", {"cuda": "12.8"}, "JetPack 6.2 comes with CUDA 12.6; the profile pins 12.8",
         "flash the JetPack release that carries it"),
    ],
)
def test_platform_pin_that_differs_from_what_it_ships_is_refused_with_the_way_out(kind, pin, message, way_out):
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile(**PLATFORMS[kind], **pin), DB)
    assert message in exc.value.message and any(way_out in a for a in exc.value.alternatives)


def test_jetson_os_must_match_jetpack():
    with pytest.raises(IncompatibleError, match="JetPack 6.2 is ubuntu 22.04"):
        resolve(profile("Tegra Board", "debian-12", kind="jetson", arch="aarch64"), DB)


def test_fp16_warning_on_slow_half_precision():
    plan = resolve(profile("Pascal Card"), DB)
    assert any("FP16/AMP on sm_61" in w and "1/67" in w for w in plan.warnings)
    assert not any("FP16/AMP" in w for w in resolve(profile("Turing Card"), DB).warnings)


def test_resolve_is_pure_and_deterministic():
    p = profile("Pascal Card", frameworks=[{"name": "pytorch"}])
    before = copy.deepcopy(p.model_dump())
    a, b = resolve(p, DB), resolve(p, DB)
    assert a == b
    assert p.model_dump() == before


def test_every_choice_has_a_reason_with_a_source():
    plan = resolve(profile("Kepler Card", frameworks=[{"name": "pytorch"}]), DB)
    components = {r.component for r in plan.reasons}
    assert {"gpu", "driver", "cuda", "cudnn", "python", "framework:pytorch", "jupyter", "image"} <= components
    assert all(r.source for r in plan.reasons)
