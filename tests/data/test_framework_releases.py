"""Every release a user may pin is in the database: torch's releases on PyPI (the list scripts/refresh_db.py
records in pytorch.yaml, read offline), each with its PyPI build and the architectures read from that wheel; and
the pins users type plan, on the machines they were refused on before."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from provision.compat import load_db
from provision.pipeline import plan_for
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


def _profile(tmp_path: Path, *, gpu: str, os: tuple[str, str], frameworks: list[dict], cpu_flags: list[str]) -> Path:
    base = yaml.safe_load((share_dir("profiles") / "deskmini.yaml").read_text())
    base["name"] = "pin-" + gpu.replace(" ", "-").lower()
    base["hardware"]["gpu"] = {"model": gpu, "count": 1}
    base["hardware"]["cpu"]["flags"] = cpu_flags
    base["target"]["os"] = {"distribution": os[0], "release": os[1]}
    base["software"]["frameworks"] = frameworks
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
