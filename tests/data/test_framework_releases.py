"""Every release a user may pin is in the database: torch's releases on PyPI (the list scripts/refresh_db.py
records in pytorch.yaml, read offline), each with its PyPI build and the architectures read from that wheel; and
the pins users type plan, on the machines they were refused on before."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.compat import load_db
from provision.pipeline.plan import plan_for
from provision.resources import share_dir
from provision.versions import V

DB = load_db()


def test_every_tensorflow_release_since_2_10_is_a_row():
    versions = [r.version for r in DB.tensorflow]
    assert versions == sorted(versions, key=V) and len(versions) == len(set(versions))
    # the final releases on PyPI from 2.10.0 to 2.21.0, 2026-11-26
    expected = ["2.10.0", "2.10.1", "2.11.0", "2.11.1", "2.12.0", "2.12.1", "2.13.0", "2.13.1", "2.14.0", "2.14.1",
                "2.15.0", "2.15.0.post1", "2.15.1", "2.16.1", "2.16.2", "2.17.0", "2.17.1", "2.18.0", "2.18.1",
                "2.19.0", "2.19.1", "2.20.0", "2.21.0"]
    assert [v for v in versions if V(v) >= V("2.10")] == expected


def test_every_torch_release_on_pypi_between_the_first_and_the_last_row_has_its_pypi_build():
    releases = DB.torch_releases
    assert releases is not None and releases.name == "torch" and releases.source.startswith("https://pypi.org/")
    pypi_rows = {r.version for r in DB.torch if r.pypi_default}
    first, last = min(pypi_rows, key=V), max(pypi_rows, key=V)
    missing = [v for v in releases.versions if V(first) <= V(v) <= V(last) and v not in pypi_rows]
    assert not missing, f"torch releases on PyPI without a row in pytorch.yaml: {missing} (scripts/refresh_db.py --add-torch)"
    # and no row claims a release PyPI does not have; the list reaches the newest row
    assert {r.version for r in DB.torch} <= set(releases.versions)
    assert list(releases.versions) == sorted(releases.versions, key=V)
    assert V(releases.versions[-1]) >= V(last)


def test_each_release_has_one_pypi_build_and_variants_are_unique():
    for version in {r.version for r in DB.torch}:
        rows = [r for r in DB.torch if r.version == version]
        assert sum(r.pypi_default for r in rows) == 1, f"torch {version}: {sum(r.pypi_default for r in rows)} PyPI builds"
        variants = [r.variant for r in rows]
        assert len(variants) == len(set(variants)), f"torch {version}: a variant twice"
        for r in rows:
            assert r.variant == "cu" + r.cuda.replace(".", ""), f"torch {version}: variant {r.variant} is not CUDA {r.cuda}"
            assert V(r.python_min) <= V(r.python_max)


@pytest.mark.parametrize("row", [r for r in DB.torch if r.pypi_default], ids=lambda r: r.version)
def test_pypi_builds_carry_the_architectures_read_from_their_wheel(row):
    # The PyPI build's arch list is what its wheel's libtorch_cuda.so holds (provision/verify/fatbin.py); the other
    # variants' lists come from PyTorch's matrix and build scripts, and say so by having no arch_from.
    # A PyPI row whose wheel was not read yet says so: confidence matrix.
    read = bool(row.arch_from) and "libtorch_cuda.so" in (row.arch_from or "")
    assert read or row.confidence == "matrix", f"torch {row.version}: arch neither read from the wheel nor marked matrix"
    assert list(row.arch) == sorted(row.arch, key=V)


def test_matrix_rows_do_not_claim_to_be_read_from_a_wheel():
    for r in DB.torch:
        if not r.pypi_default:
            assert r.arch_from is None, f"torch {r.version}+{r.variant}"


# PyTorch's release matrix (pytorch/pytorch RELEASE.md, "Release Compatibility Matrix": the stable and experimental
# CUDA builds of each minor release, read 2026-11-26 up to 2.14). 2.15: PyPI's build only, pytorch.yaml says why.
# Every release on PyPI has one row per variant of its minor release: a missing (or invented) row fails by name.
MATRIX_VARIANTS = {
    "2.0": {"cu117", "cu118"},
    "2.1": {"cu118", "cu121"},
    "2.2": {"cu118", "cu121"},
    "2.3": {"cu118", "cu121"},
    "2.4": {"cu118", "cu121", "cu124"},
    "2.5": {"cu118", "cu121", "cu124"},
    "2.6": {"cu118", "cu124", "cu126"},
    "2.7": {"cu118", "cu126", "cu128"},
    "2.8": {"cu126", "cu128", "cu129"},
    "2.9": {"cu126", "cu128", "cu130"},
    "2.10": {"cu126", "cu128", "cu130"},
    "2.11": {"cu126", "cu128", "cu130"},
    "2.12": {"cu126", "cu130", "cu132"},
    "2.13": {"cu126", "cu130", "cu132"},
    "2.14": {"cu126", "cu130", "cu132"},
    "2.15": {"cu132"},
}


@pytest.mark.parametrize("version", DB.torch_releases.versions if DB.torch_releases else [])
def test_every_torch_release_has_a_row_for_each_variant_of_pytorchs_matrix(version):
    minor = ".".join(version.split(".")[:2])
    assert minor in MATRIX_VARIANTS, f"torch {version}: a minor release this test's matrix does not list yet"
    have = {r.variant for r in DB.torch if r.version == version}
    assert have == MATRIX_VARIANTS[minor], (
        f"torch {version}: rows for {sorted(have, key=len)}, the matrix lists {sorted(MATRIX_VARIANTS[minor], key=len)}"
    )


@pytest.mark.parametrize("row", DB.torch, ids=lambda r: f"{r.version}+{r.variant}")
def test_each_torch_variant_has_its_architectures_pythons_and_a_cudnn_pin_the_plan_can_install(row):
    assert row.arch and list(row.arch) == sorted(set(row.arch), key=V), "arch: a sorted list without repeats"
    assert V("3.8") <= V(row.python_min) <= V(row.python_max)
    # "Pythons as the PyPI wheels": every variant of a release has the range of the release's PyPI wheels
    pypi = next(r for r in DB.torch if r.version == row.version and r.pypi_default)
    assert (row.python_min, row.python_max) == (pypi.python_min, pypi.python_max)
    cudnn = DB.cudnn_release(row.cudnn)
    assert cudnn is not None, f"cuDNN {row.cudnn} is not in cudnn.yaml"
    assert V(cudnn.cuda_min) <= V(row.cuda) <= V(cudnn.cuda_max), f"cuDNN {row.cudnn} is not made for CUDA {row.cuda}"
    # the plan pins the cuDNN the wheels bring: NVIDIA's wheel of it for the variant's CUDA major must be in pypi.yaml
    assert any(p.cudnn == row.cudnn and p.cuda_major == int(row.cuda.split(".")[0]) for p in DB.pypi_cudnn)
    # pins replace the plan's own NVIDIA wheels of the variant's CUDA (pypi.yaml): each names one of them
    wheels = next((p for p in DB.pypi_cuda if p.cuda == row.cuda), None)
    names = {r.split("==")[0] for r in (wheels.cublas, wheels.runtime, wheels.nvrtc, wheels.nvcc) if r} if wheels else set()
    assert {p.split("==")[0] for p in row.pins} <= names, f"pins {row.pins} name no wheel of pypi.yaml's CUDA {row.cuda}"
    assert row.confidence in {"verified", "matrix", "uncertain"}, "confidence says where arch, CUDA and cuDNN came from"
    assert row.source.startswith("https://") and row.checked
    if row.confidence == "verified":
        assert row.pypi_default and row.arch_from, "only a PyPI build read from its wheel is verified"


@pytest.mark.parametrize("pin", ["2.9.1", "2.10.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"])
def test_pypi_build_stays_the_plan_and_the_release_s_newest_cuda_variant_serves_a_cuda_pin(tmp_path, pin):
    # An H100 on Ubuntu 24.04 (R595) runs every variant of these releases: PyPI's build is planned (policy
    # prefer_pypi_builds), not the variant with the newest CUDA; pinning that CUDA plans the variant with its cuDNN.
    fws = [{"name": "pytorch", "version": pin}]
    plan = plan_for(_profile(tmp_path, gpu="H100 SXM5 80GB", os=("ubuntu", "24.04"), frameworks=fws, cpu_flags=AVX2))
    fw = plan.framework("pytorch")
    pypi = next(r for r in DB.torch if r.version == pin and r.pypi_default)
    assert (fw.version, fw.variant, fw.index_url, fw.requirements) == (pin, pypi.variant, None, (f"torch=={pin}",))
    newest = max((r for r in DB.torch if r.version == pin), key=lambda r: V(r.cuda))
    assert not newest.pypi_default
    plan = plan_for(_profile(tmp_path, gpu="H100 SXM5 80GB", os=("ubuntu", "24.04"), frameworks=fws, cpu_flags=AVX2,
                             cuda=newest.cuda))
    fw = plan.framework("pytorch")
    assert (fw.variant, fw.requirements) == (newest.variant, (f"torch=={pin}+{newest.variant}",))
    assert fw.index_url and fw.index_url.endswith("/" + newest.variant)
    wheel = next(p.requirement for p in DB.pypi_cudnn if p.cudnn == newest.cudnn and p.cuda_major == 13)
    assert plan.cudnn.version == newest.cudnn and wheel in plan.cudnn.packages
    # the variant's pins replace pypi.yaml's patch of the same wheels in what pip installs next to it
    assert set(newest.pins) <= set(plan.pip_requirements(frameworks=False)), (newest.pins, plan.pip_requirements())


def _profile(tmp_path: Path, *, gpu: str, os: tuple[str, str], frameworks: list[dict], cpu_flags: list[str],
             cuda: str | None = None) -> Path:
    base = yaml.safe_load((share_dir("profiles") / "deskmini.yaml").read_text())
    base["name"] = "pin-" + gpu.replace(" ", "-").lower()
    base["hardware"]["gpu"] = {"model": gpu, "count": 1}
    base["hardware"]["cpu"]["flags"] = cpu_flags
    base["target"]["os"] = {"distribution": os[0], "release": os[1]}
    base["software"]["frameworks"] = frameworks
    if cuda:
        base["software"]["cuda"] = cuda
    path = tmp_path / f"{base['name']}.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


AVX2 = ["fpu", "sse", "sse2", "ssse3", "sse4_1", "sse4_2", "popcnt", "avx", "avx2", "fma"]


@pytest.mark.parametrize(
    ("gpu", "os", "name", "pin"),
    [
        # The refusals of issue 31: "pytorch 2.6.0 is not in the database".
        ("GeForce RTX 3090", ("debian", "12"), "pytorch", "2.6.0"),
        ("Tesla T4", ("ubuntu", "22.04"), "pytorch", "2.4.1"),
        ("GeForce RTX 3090", ("ubuntu", "22.04"), "pytorch", "2.12.0"),
        ("GeForce RTX 3090", ("ubuntu", "24.04"), "pytorch", "2.2.1"),
        ("Tesla T4", ("ubuntu", "22.04"), "tensorflow", "2.16.1"),
        ("Tesla T4", ("ubuntu", "22.04"), "tensorflow", "2.12.0"),
        ("GeForce RTX 3090", ("debian", "12"), "tensorflow", "2.15.0"),
    ],
)
def test_pinned_framework_releases_plan(tmp_path, gpu, os, name, pin):
    plan = plan_for(_profile(tmp_path, gpu=gpu, os=os, frameworks=[{"name": name, "version": pin}], cpu_flags=AVX2))
    fw = plan.framework(name)
    # a pin takes the release's post-release where there is one (2.15.0 -> 2.15.0.post1: the same build, its
    # [and-cuda] extra without the tensorrt PyPI does not serve)
    assert fw.version == pin or fw.version.startswith(pin + ".post")
    if name == "pytorch":
        row = next(r for r in DB.torch if (r.version, r.variant) == (fw.version, fw.variant))
        cc = DB.gpu(gpu).cc
        assert any(V(a).major == V(cc).major and V(a) <= V(cc) for a in row.arch), (fw, row.arch)
    else:
        tf = next(r for r in DB.tensorflow if r.version == pin)
        numpy = plan.verify.numpy_requirement
        assert tf.numpy_max is None or V(numpy.split("==")[1]) <= V(tf.numpy_max)


def test_jupyter_plans_on_python_3_8_jetpack_5(tmp_path):
    base = yaml.safe_load((share_dir("profiles") / "jetson-orin-nano.yaml").read_text())
    base["target"]["jetpack"] = "5.1.2"
    base["target"]["os"] = {"distribution": "ubuntu", "release": "20.04"}
    base["software"]["jupyter"] = {"enabled": True}
    base["software"]["frameworks"] = []  # JetPack 5 has no hashed PyTorch in the database
    path = tmp_path / "orin-jp5.yaml"
    path.write_text(yaml.safe_dump(base))
    plan = plan_for(path)
    assert plan.python.version == "3.8"
    assert plan.jupyter.enabled and "jupyterlab==4.3.8" in plan.jupyter.requirements


@pytest.mark.parametrize(
    ("profile", "os", "requirement"),
    [
        ("h100", ("ubuntu", "24.04"), "jax[cuda13]==0.12.0.1"),  # Python 3.12, R580+: the CUDA 13 plugin
        ("deskmini", ("ubuntu", "24.04"), "jax[cuda12]==0.12.0.1"),  # Pascal: the CUDA 13 plugin starts at sm_75
        ("h100", ("ubuntu", "22.04"), "jax[cuda12]==0.6.2"),  # Python 3.10: the last JAX for it
    ],
)
def test_jax_plans_the_plugin_the_gpu_driver_and_python_allow(tmp_path, profile, os, requirement):
    base = yaml.safe_load((share_dir("profiles") / f"{profile}.yaml").read_text())
    base["target"]["os"] = {"distribution": os[0], "release": os[1]}
    base["software"]["frameworks"] = [{"name": "jax"}]
    path = tmp_path / f"{profile}-jax.yaml"
    path.write_text(yaml.safe_dump(base))
    plan = plan_for(path)
    assert plan.framework("jax").requirements == (requirement,)
    row = next(r for r in DB.jax if f"jax[{r.extra}]=={r.version}" == requirement)
    assert plan.cuda.version == row.cuda and plan.cudnn.version == row.cudnn


def test_a_kepler_gpu_is_refused_jax_with_the_architectures_its_plugins_carry(tmp_path):
    from provision.errors import IncompatibleError

    base = yaml.safe_load((share_dir("profiles") / "aws-p2.yaml").read_text())
    base["software"]["frameworks"] = [{"name": "jax"}]
    path = tmp_path / "k80-jax.yaml"
    path.write_text(yaml.safe_dump(base))
    with pytest.raises(IncompatibleError) as err:
        plan_for(path)
    assert "no jax build has sm_37 kernels" in str(err.value) and "5.0;6.0;7.0" in str(err.value)


def test_every_jax_row_pins_wheels_the_database_has():
    for r in DB.jax:
        assert any(p.cuda == r.cuda for p in DB.pypi_cuda), r
        assert any(p.cudnn == r.cudnn and p.cuda_major == int(r.cuda.split(".")[0]) for p in DB.pypi_cudnn), r
        assert r.extra == f"cuda{r.cuda.split('.')[0]}" and r.arch_from and "xla_cuda" in r.arch_from


@pytest.mark.parametrize("row", [r for r in DB.jetson_torch if r.sha256], ids=lambda r: f"{r.jetpack}-{r.version}")
def test_hashed_jetson_wheels_say_where_the_hash_came_from_and_an_index_path_agrees(row):
    assert row.sha256_from and len(row.sha256) == 64 and int(row.sha256, 16) >= 0
    if "/+f/" in row.url:  # devpi (the Jetson AI Lab index) files the wheel under +f/<sha256[:3]>/<sha256[3:16]>/
        first, rest = row.url.split("/+f/", 1)[1].split("/")[:2]
        assert first + rest == row.sha256[:16], row.url


def test_jetpack_6_plans_pytorch_as_a_hashed_direct_reference_naming_the_hash_s_source():
    plan = plan_for(share_dir("profiles") / "jetson-orin-nano.yaml")
    fw = plan.framework("pytorch")
    [req] = fw.requirements
    assert req.startswith("torch @ https://pypi.jetson-ai-lab.io/jp6/cu126/") and "#sha256=" in req
    reason = next(r for r in plan.reasons if r.component == "framework:pytorch")
    assert "Jetson AI Lab index" in reason.why and reason.source.startswith("https://")
