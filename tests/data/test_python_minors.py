"""Every managed Python minor provision offers (data/python.yaml) plans with numpy, JupyterLab and PyTorch; a
framework with no build for a minor is refused naming the newest release and the Pythons it has."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.compat import load_db
from provision.errors import IncompatibleError
from provision.loader import load_profile
from provision.resolver import resolve
from provision.versions import V

DB = load_db()
MINORS = sorted({b.minor for b in DB.python_builds}, key=lambda m: tuple(map(int, m.split("."))))


def write(tmp_path: Path, python: str, framework: str) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(
        "name: t\nhardware:\n  gpu: {model: GeForce RTX 3060}\n  cpu: {model: x, cores: 8, flags: [sse4_2, avx, avx2]}\n"
        "  memory_gb: 32\ntarget:\n  kind: baremetal\n  os: {distribution: ubuntu, release: \"24.04\"}\n"
        f"  arch: x86_64\nsoftware:\n  python: \"{python}\"\n  frameworks: [{{name: {framework}}}]\n"
    )
    return path


def test_the_managed_minors_are_3_8_to_3_14():
    assert MINORS[0] == "3.8" and MINORS[-1] == "3.14" and len(MINORS) == 7


@pytest.mark.parametrize("minor", MINORS)
def test_every_managed_minor_plans_numpy_jupyterlab_and_pytorch(tmp_path, minor):
    plan = resolve(load_profile(write(tmp_path, minor, "pytorch"), db=DB), DB)
    assert plan.python.version == minor
    reqs = plan.pip_requirements()
    assert any(r.startswith("numpy==") for r in reqs) and any(r.startswith("jupyterlab==") for r in reqs), reqs
    assert [f.name for f in plan.frameworks] == ["pytorch"]


def test_a_minor_a_framework_has_no_build_for_names_its_newest_release_and_its_pythons(tmp_path):
    with pytest.raises(IncompatibleError) as exc:
        resolve(load_profile(write(tmp_path, "3.14", "tensorflow"), db=DB), DB)
    newest = max((r.version for r in DB.tensorflow), key=V)
    assert "no tensorflow release in the database has wheels for Python 3.14" in str(exc.value)
    assert f"the newest for Python 3.13 is tensorflow {newest}, which supports Python 3.10-3.13" in str(exc.value)
    assert exc.value.alternatives[0].startswith(f'software.python: "3.13" (tensorflow {newest})')


FRAMEWORKS = {"pytorch": DB.torch, "tensorflow": DB.tensorflow, "jax": DB.jax}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
@pytest.mark.parametrize("minor", MINORS)
def test_every_minor_plans_each_framework_with_wheels_for_it_or_names_the_nearest(tmp_path, minor, framework):
    rows = FRAMEWORKS[framework]
    fits = [r for r in rows if V(r.python_min) <= V(minor) <= V(r.python_max) and getattr(r, "pypi_default", True)]
    if fits:
        plan = resolve(load_profile(write(tmp_path, minor, framework), db=DB), DB)
        reqs = plan.pip_requirements()
        assert any(r.startswith("numpy==") for r in reqs) and any(r.startswith("jupyterlab==") for r in reqs)
        newest = max((r.version for r in fits), key=V)
        assert [f.version for f in plan.frameworks] == [newest], (minor, framework)
        return
    with pytest.raises(IncompatibleError) as exc:
        resolve(load_profile(write(tmp_path, minor, framework), db=DB), DB)
    assert f"no {framework} release in the database has wheels for Python {minor}" in str(exc.value)
    assert exc.value.alternatives[0].startswith("software.python: ")


def test_jax_on_python_3_9_is_0_4_30_and_3_8_is_refused_naming_it(tmp_path):
    plan = resolve(load_profile(write(tmp_path, "3.9", "jax"), db=DB), DB)
    assert "jax[cuda12]==0.4.30" in plan.pip_requirements() and "numpy==1.26.4" in plan.pip_requirements()
    with pytest.raises(IncompatibleError) as exc:
        resolve(load_profile(write(tmp_path, "3.8", "jax"), db=DB), DB)
    assert "the newest for Python 3.9 is jax 0.4.30" in str(exc.value)
