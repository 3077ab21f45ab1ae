"""Resolver rules for machines beyond one GPU on x86: refusals that name both links, aarch64 wheels, TensorFlow's
numpy, NVSwitch boxes, instance-fixed counts, mixed GPUs and Jetson direct references. Fixture tables only: the
small tables of tests/fixtures/small_db.py plus the few rows each rule needs, never the live data."""

from __future__ import annotations

import copy

import pytest

from provision.compat import CompatDB
from provision.errors import IncompatibleError
from provision.models import Profile
from provision.resolver import resolve
from tests.fixtures.small_db import TABLES, S, gpu, torch

AVX = ["sse4_2", "avx", "avx2"]


def db_with(**extra) -> CompatDB:
    """The fixture tables plus rows: each list in `extra` is appended to the table of that name."""
    tables = copy.deepcopy(TABLES)
    for name, rows in extra.items():
        tables[name] = list(tables.get(name, [])) + rows
    return CompatDB.model_validate(tables)


def profile(gpu="Pascal Card", os="debian-12", kind="baremetal", arch="x86_64", count=None, extra_gpus=(),
            instance=None, **software) -> Profile:
    dist, rel = os.split("-")
    target = {"kind": kind, "os": {"distribution": dist, "release": rel}, "arch": arch}
    if instance:
        target["instance_type"] = instance
    if kind == "jetson":
        target["jetpack"] = "6.2"
    spec = {"model": gpu} if count is None else {"model": gpu, "count": count}
    return Profile.model_validate(
        {
            "name": "t",
            "hardware": {"gpu": spec, "extra_gpus": list(extra_gpus), "cpu": {"model": "CPU", "flags": AVX},
                         "memory_gb": 16},
            "target": target,
            "software": software,
        }
    )


def refusal(prof: Profile, db: CompatDB) -> IncompatibleError:
    with pytest.raises(IncompatibleError) as exc:
        resolve(prof, db)
    return exc.value


PYTORCH = [{"name": "pytorch"}]


# --- refusals name the two links that conflict and what would work ------------------------------------------------


def test_pinned_release_without_kernels_for_the_gpu_says_so_not_that_another_release_is_not_the_pin():
    db = db_with(torch=[
        torch("2.15.0", "cu126", "12.6", ["5.0", "6.0", "7.0", "7.5", "8.0", "8.6"], "9.10.2"),
        torch("2.15.0", "cu130", "13.0", ["7.5", "8.0", "8.6", "9.0"], "9.20.0", default=True),
    ])
    err = refusal(profile("Kepler Card", frameworks=[{"name": "pytorch", "version": "2.15"}]), db)
    assert "no pytorch 2.15 build has sm_37 kernels" in err.message
    assert "is not the pinned" not in err.message
    assert "2.7.1+cu118" in err.message  # the newest release that has sm_37 kernels: the way out
    assert any("2.0.1" in a for a in err.alternatives)  # and the newest that fits the whole machine


def test_pinned_release_missing_from_the_database_is_named_as_missing():
    err = refusal(profile("Kepler Card", frameworks=[{"name": "pytorch", "version": "2.15"}]), db_with())
    assert "pytorch 2.15 is not in the database" in err.message and "is not the pinned" not in err.message


def test_cudnn_pin_that_does_not_fit_the_cuda_pin_lists_only_cudnn_that_fits_that_cuda():
    err = refusal(profile("Pascal Card", cuda="11.8", cudnn="9.20"), db_with())
    # 9.20 fails both links here (cc 7.5+ and CUDA 12+): both are named
    assert "the pinned cuDNN 9.20 supports neither Pascal Card (cc 6.1) nor the pinned CUDA 11.8" in err.message
    assert "CUDA 12.0-13.2" in err.message  # what the pinned cuDNN needs
    fitting = next(a for a in err.alternatives if a.startswith("cuDNN that fits"))
    assert "9.1.0" in fitting and "9.20.0" not in fitting  # 9.20 needs CUDA 12: never offered for an 11.8 pin


def test_driver_pin_too_old_for_the_cuda_pin_names_both_pins():
    err = refusal(profile("Pascal Card", driver_branch="470", cuda="12.6"), db_with())
    assert "R470" in err.message and "CUDA 12.6" in err.message
    assert "560.28.03" in err.message and "525.60.13" in err.message  # native and minor-version floors
    assert any("R535" in a for a in err.alternatives)


def test_cuda_pin_whose_framework_builds_lack_the_gpu_says_where_those_builds_start():
    db = db_with(
        toolkits=[],
        torch=[torch("2.9.0", "cu128", "12.8", ["7.5", "8.0", "8.6", "9.0", "12.0"], "9.10.2")],
    )
    tables = copy.deepcopy(TABLES)
    tables["toolkits"].insert(4, {"version": "12.8", "min_driver": "570.26",
                                  "sm": [50, 60, 61, 70, 75, 80, 86, 87, 89, 90, 100, 120], **S})
    tables["pypi_cuda"].append({"cuda": "12.8", "runtime": "rt==12.8", "nvrtc": "nvrtc==12.8", "nvcc": "nvcc==12.8", **S})
    tables["torch"] = list(tables["torch"]) + [dict(r) for r in db.model_dump()["torch"] if r["variant"] == "cu128"]
    err = refusal(profile("Pascal Card", "debian-13", cuda="12.8", frameworks=PYTORCH), CompatDB.model_validate(tables))
    assert "the cu128 builds start at sm_75" in err.message
    assert "CUDA 12.6" in err.message and any("pin CUDA 12.6" in a for a in err.alternatives)


# --- aarch64: PyPI's CPU-only wheels are not GPU builds -----------------------------------------------------------


def test_pypi_torch_without_aarch64_cuda_wheels_is_not_planned_as_a_gpu_build_on_aarch64():
    err = refusal(profile("Turing Card", "debian-13", arch="aarch64", frameworks=PYTORCH), db_with())
    assert "CPU-only" in err.message or "no aarch64 CUDA wheel" in err.message


def test_pypi_torch_with_aarch64_cuda_wheels_is_planned_on_aarch64():
    tables = copy.deepcopy(TABLES)
    for row in tables["torch"]:
        if row["variant"] == "cu130":
            row["aarch64_cuda"] = True
    plan = resolve(profile("Turing Card", "debian-13", arch="aarch64", frameworks=PYTORCH),
                   CompatDB.model_validate(tables))
    assert plan.frameworks[0].variant == "cu130" and plan.image.platform == "linux/arm64"


# --- TensorFlow ---------------------------------------------------------------------------------------------------


def test_tensorflow_that_requires_numpy_1_gets_numpy_1():
    tables = copy.deepcopy(TABLES)
    tables["tensorflow"][0] = {**tables["tensorflow"][0], "version": "2.14.1", "cuda": "11.8", "cudnn": "8.5.0",
                               "min_cc": "3.5", "requirement": "tensorflow[and-cuda]==2.14.1", "numpy_major": 1,
                               "python_max": "3.11"}
    plan = resolve(profile("Pascal Card", frameworks=[{"name": "tensorflow"}]), CompatDB.model_validate(tables))
    assert plan.verify.numpy_requirement == "numpy==1.24.4"


def test_an_uncertain_cudnn_fact_warns_only_the_gpus_it_concerns():
    tables = copy.deepcopy(TABLES)
    for row in tables["cudnn"]:
        if row["version"] == "9.10.2":
            row.update(confidence="uncertain", uncertain_cc=["3.5", "3.7"], note="Kepler story uncertain")
    db = CompatDB.model_validate(tables)
    plan = resolve(profile("Pascal Card", "debian-13", frameworks=PYTORCH), db)
    assert plan.cudnn.version == "9.10.2"
    assert not any("Kepler" in w for w in plan.warnings)


# --- counts, NVSwitch and Fabric Manager ----------------------------------------------------------------------------

HOPPER = gpu("Hopper Board", "9.0", "Hopper", segment="datacenter", fp16=100.0)
HOPPER["nvswitch_gpus"] = 8
INSTANCES = [
    {"provider": "aws", "instance_type": "hx.48xlarge", "gpu": "Hopper Board", "gpus": 8, "vcpu": 192,
     "ram_gib": 2048, "usd_hr": 50.0, "interconnect": "nvswitch", **S},
    {"provider": "gcp", "instance_type": "t-1", "gpu": "Turing Card", "gpus": 1, "vcpu": 4, "ram_gib": 16, **S},
]
FM = [{"os_id": "debian-13", "branch": "580", "source": "debian", "packages": ["nvidia-fabricmanager-580"],
       "service": "nvidia-fabricmanager", "source_url": S["source"], "checked": S["checked"]}]


def nvswitch_db(fabricmanager=FM) -> CompatDB:
    return db_with(gpus=[HOPPER], instances=INSTANCES, fabricmanager=fabricmanager)


def test_instance_type_fixes_the_count_when_the_profile_gives_none():
    plan = resolve(profile("Hopper Board", "debian-13", kind="cloud", instance="hx.48xlarge"), nvswitch_db())
    assert plan.gpu.count == 8 and plan.gpu.interconnect == "nvswitch"
    assert any(r.component == "gpu-count" for r in plan.reasons)


def test_a_count_that_contradicts_the_instance_type_is_refused():
    err = refusal(profile("Hopper Board", "debian-13", kind="cloud", instance="hx.48xlarge", count=1), nvswitch_db())
    assert "hx.48xlarge has 8 x Hopper Board" in err.message and "count says 1" in err.message


def test_nvswitch_box_gets_fabric_manager_of_the_driver_branch():
    plan = resolve(profile("Hopper Board", "debian-13", kind="cloud", instance="hx.48xlarge"), nvswitch_db())
    assert plan.driver.branch == "580"
    assert plan.driver.fabric_manager == ("nvidia-fabricmanager-580",)
    assert "nvidia-fabricmanager-580" in plan.driver.packages
    assert any(r.component == "fabric-manager" for r in plan.reasons)
    # The role installs the packages with the driver and enables the service (roles/nvidia_driver/tasks/main.yml).
    from provision.render.role_vars import ansible_vars

    role_vars = ansible_vars(plan)
    assert role_vars["nvidia_driver_fabric_manager_service"] == "nvidia-fabricmanager"
    assert "nvidia-fabricmanager-580" in role_vars["nvidia_driver_packages"]


def test_a_box_without_nvswitch_enables_no_fabric_manager():
    from provision.render.role_vars import ansible_vars

    plan = resolve(profile("Hopper Board", "debian-13", count=1), nvswitch_db())
    assert plan.driver.fabric_manager == () and ansible_vars(plan)["nvidia_driver_fabric_manager_service"] == ""


def test_bare_metal_nvswitch_board_count_needs_fabric_manager_and_is_refused_where_none_is_packaged():
    err = refusal(profile("Hopper Board", "debian-13", count=8), nvswitch_db(fabricmanager=[]))
    assert "Fabric Manager" in err.message and "debian-13" in err.message


def test_fewer_gpus_than_the_nvswitch_board_need_no_fabric_manager():
    plan = resolve(profile("Hopper Board", "debian-13", count=2), nvswitch_db(fabricmanager=[]))
    assert plan.driver.fabric_manager == () and plan.gpu.interconnect == "pcie"


# --- mixed GPU models in one box ------------------------------------------------------------------------------------


def test_mixed_gpus_are_planned_with_the_stack_that_serves_all_of_them():
    plan = resolve(profile("Turing Card", "debian-13", extra_gpus=[{"model": "Pascal Card"}], frameworks=PYTORCH),
                   db_with())
    # chosen for the more constrained Pascal card (cu126 has sm_61; cu130 does not), checked for the Turing card
    assert plan.gpu.model == "Pascal Card" and [g.model for g in plan.other_gpus] == ["Turing Card"]
    assert plan.frameworks[0].variant == "cu126"


def test_mixed_gpus_that_cannot_share_a_stack_are_refused_with_the_failing_link():
    # R470, the only branch for the Kepler card, cannot drive cc 9.0
    err = refusal(profile("Hopper Board", "debian-12", extra_gpus=[{"model": "Kepler Card"}]), db_with(gpus=[HOPPER]))
    assert "cannot share a stack" in err.message and "Kepler Card" in err.message and "Hopper Board" in err.message
    assert "R470" in err.message


# --- Jetson: a file, not an index entry -----------------------------------------------------------------------------

JAMMY = {"os_id": "ubuntu-22.04", "distribution": "ubuntu", "release": "22.04", "codename": "jammy", "python": "3.10",
         "python_packages": ["python3", "python3-venv"], "base_image": "ubuntu:22.04", "kernel_headers": None,
         "nvidia_repo": None, **S}
JT = {"jetpack": "6.2", "version": "2.5.0a0+nv24.08.1", "cuda": "12.6", "cudnn": "9.3.0", "arch": ["8.7"],
      "python": "3.10", "url": "https://example.invalid/torch-2.5.0a0+nv24.08.1-cp310-cp310-linux_aarch64.whl", **S}


def test_jetson_pytorch_is_a_hashed_direct_reference():
    plan = resolve(profile("Tegra Board", "ubuntu-22.04", kind="jetson", arch="aarch64", frameworks=PYTORCH),
                   db_with(jetson_torch=[{**JT, "sha256": "ab" * 32}], systems=[JAMMY]))
    fw = plan.frameworks[0]
    assert fw.requirements == (f"torch @ {JT['url']}#sha256={'ab' * 32}",) and fw.index_url is None
    assert fw.version == "2.5.0a0+nv24.08.1"  # the file's own version, not a pin pip would not match


def test_jetson_pytorch_without_a_hash_is_refused():
    err = refusal(profile("Tegra Board", "ubuntu-22.04", kind="jetson", arch="aarch64", frameworks=PYTORCH),
                  db_with(jetson_torch=[{**JT, "sha256": None}], systems=[JAMMY]))
    assert "sha256" in err.message and any("remove pytorch" in a for a in err.alternatives)


def test_a_plan_that_relies_on_an_unverified_gpu_row_says_so():
    card = gpu("Odd Card", "7.5", "Turing", fp16=20.0)
    card["confidence"] = "unverified"
    plan = resolve(profile("Odd Card", "debian-13"), db_with(gpus=[card]))
    assert any("Odd Card row" in w and "unverified" in w for w in plan.warnings)
