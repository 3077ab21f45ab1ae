"""Index-aware plans: which indexes a machine reaches decides which framework build it gets (fixture tables)."""

from __future__ import annotations

import pytest

from provision.errors import IncompatibleError, ProfileError
from provision.loader import parse_index_overrides
from provision.models import Profile
from provision.render.docker import wheel_groups
from provision.render.role_vars import ansible_vars
from provision.resolver import resolve
from tests.fixtures.small_db import small_db

DB = small_db()


def profile(gpu="Pascal Card", os="debian-12", **indexes) -> Profile:
    dist, rel = os.split("-")
    return Profile.model_validate({
        "name": "t",
        "hardware": {"gpu": {"model": gpu}, "cpu": {"model": "CPU", "flags": ["sse4_2", "avx", "avx2"]}, "memory_gb": 16},
        "target": {"kind": "baremetal", "os": {"distribution": dist, "release": rel}},
        "software": {"frameworks": [{"name": "pytorch"}], "indexes": indexes},
    })


def test_with_the_pytorch_index_the_newest_build_with_kernels_comes_from_it():
    plan = resolve(profile(), DB)
    fw = plan.frameworks[0]
    assert (fw.version, fw.variant, fw.index_url) == ("2.9.0", "cu126", "https://download.pytorch.org/whl/cu126")
    assert [(i.name, i.url, i.default) for i in plan.indexes] == [
        ("pypi", DB.pypi_index_url, True), ("pytorch", DB.torch_index_url, True)]
    assert plan.pip_index_url is None


def test_pytorch_index_off_plans_the_newest_pypi_build_that_runs_on_the_gpu():
    plan = resolve(profile(pytorch=False), DB)
    fw = plan.frameworks[0]
    # 2.9.0's PyPI build (cu130) has nothing for sm_61; 2.0.1's PyPI build (cu117) has sm_60 SASS.
    assert (fw.version, fw.variant, fw.index_url, fw.requirements) == ("2.0.1", "cu117", None, ("torch==2.0.1",))
    why = next(r for r in plan.reasons if r.component == "framework:pytorch")
    assert "from the pypi index" in why.choice
    assert "torch 2.9.0+cu126 comes only from the pytorch index, which is off" in why.why
    indexes = next(r for r in plan.reasons if r.component == "indexes")
    assert "pytorch off" in indexes.choice


def test_pytorch_index_off_still_refuses_when_no_pypi_build_runs_on_the_gpu():
    # Kepler (sm_37): 2.7.1+cu118 is index-only; 2.0.1's PyPI build has sm_37 -> that one.
    plan = resolve(profile("Kepler Card", pytorch=False), DB)
    assert plan.frameworks[0].requirements == ("torch==2.0.1",)


def test_a_pytorch_mirror_serves_the_variant_under_its_url():
    plan = resolve(profile(pytorch="https://mirror.example/pt/whl"), DB)
    assert plan.frameworks[0].index_url == "https://mirror.example/pt/whl/cu126"
    plan = resolve(profile(pytorch="https://mirror.example/{variant}/simple"), DB)
    assert plan.frameworks[0].index_url == "https://mirror.example/cu126/simple"


@pytest.mark.parametrize(("indexes", "where"), [
    ({}, "torch==2.9.0+cu126 --index-url https://download.pytorch.org/whl/cu126"),
    ({"pytorch": False}, "torch==2.0.1 (PyPI)"),
    ({"pytorch": False, "pypi": "https://devpi.example/root/pypi/+simple"},
     "torch==2.0.1 --index-url https://devpi.example/root/pypi/+simple"),
])
def test_the_short_plan_names_the_index_of_every_framework(indexes, where):
    from provision.report import plan_text

    line = next(ln for ln in plan_text(resolve(profile(**indexes), DB)) if ln.startswith("  framework"))
    assert line.split(None, 1)[1] == where


def test_a_pypi_mirror_reaches_the_role_and_the_image():
    plan = resolve(profile(pypi="https://devpi.example/root/pypi/+simple"), DB)
    assert plan.pip_index_url == "https://devpi.example/root/pypi/+simple"
    assert ansible_vars(plan)["python_env_index_url"] == plan.pip_index_url
    groups = {g.name: g.index_url for g in wheel_groups(plan)}
    assert groups["framework-pytorch"] == "https://download.pytorch.org/whl/cu126"
    assert groups["verify"] == plan.pip_index_url


def test_pypi_off_is_refused_with_the_way_out():
    with pytest.raises(IncompatibleError) as exc:
        resolve(profile(pypi=False), DB)
    assert "--index pypi=URL" in " ".join(exc.value.lines())


def test_the_frameworks_own_pins_replace_the_cuda_rows_patch():
    rows = tuple(r.model_copy(update={"pins": ("nvrtc==12.6.1",)}) if r.variant == "cu126" else r for r in DB.torch)
    plan = resolve(profile(), DB.model_copy(update={"torch": rows}))
    assert [r for r in plan.pip_requirements() if r.startswith("nvrtc")] == ["nvrtc==12.6.1"]
    assert plan.verify.nvrtc_requirements == ("nvrtc==12.6.1",)
    assert any(r.component == "pins" for r in plan.reasons)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["pytorch=off"], {"pytorch": False}),
        (["pypi=https://devpi.example/root/pypi/+simple", "pytorch=false"],
         {"pypi": "https://devpi.example/root/pypi/+simple", "pytorch": False}),
    ],
)
def test_index_options_parse(values, expected):
    assert parse_index_overrides(values) == expected


@pytest.mark.parametrize("value", ["pytorch", "conda=off", "pytorch=ftp://x", "pypi=https://a b", "pypi=https://x;rm"])
def test_bad_index_options_are_one_line_each(value):
    with pytest.raises(ProfileError) as exc:
        parse_index_overrides([value])
    assert len(exc.value.lines()) == 1 and "--index" in exc.value.lines()[0]
