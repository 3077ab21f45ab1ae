"""scripts/refresh_db.py's comparisons: a row's cuDNN release against the wheels' pins, and the plan's numpy against a
wheel's numpy requirement (no network: the rules, then the shipped rows against metadata read from PyPI)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from provision.compat import load_db

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "refresh_db.py"
spec = importlib.util.spec_from_file_location("refresh_db", SCRIPT)
refresh_db = importlib.util.module_from_spec(spec)
sys.modules["refresh_db"] = refresh_db
spec.loader.exec_module(refresh_db)

DB = load_db()


@pytest.mark.parametrize(
    ("release", "build", "same"),
    [
        ("8.7.0", "8.7.0.84", True),  # the false "changed" refresh_db reported for TensorFlow 2.14.1
        ("8.7", "8.7.0.84", True),  # missing components count as 0
        ("9.10.2", "9.10.2.21", True),
        ("9.1.0", "9.10.2.21", False),  # a string-prefix comparison took these for the same release
        ("8.7.0", "8.7.1.2", False),
        ("8.9.7", "8.9.7.*", True),  # a wildcard pin, by its prefix
        ("9.3.0", "9.30.0.1", False),
    ],
)
def test_a_wheel_build_is_a_release_when_major_minor_patch_agree(release, build, same):
    assert refresh_db.same_release(release, build) is same


@pytest.mark.parametrize(
    ("specifier", "release", "builds", "accepted"),
    [
        ("==8.7.0.84", "8.7.0", [], True),
        ("==8.7.0.84", "8.6.0", ["8.6.0.163"], False),
        (">=9.3.0.75,<10", "9.3.0", ["9.3.0.75"], True),  # a range holds pypi.yaml's build of the release
        (">=9.3.0.75,<10", "9.3.0", [], False),  # without a known build the bare release 9.3.0 is below the range
        (">=9.3.0.75,<10", "9.10.2", ["9.10.2.21"], True),
        (">=9.3.0.75,<10", "8.9.7", ["8.9.7.29"], False),
    ],
)
def test_a_cudnn_requirement_accepts_the_rows_release(specifier, release, builds, accepted):
    assert refresh_db.accepts_release(SpecifierSet(specifier), release, builds) is accepted


def test_the_tensorflow_2_14_row_matches_its_cu11_wheel_pin():
    row = next(r for r in DB.tensorflow if r.version == "2.14.1")
    assert refresh_db.accepts_release(SpecifierSet("==8.7.0.84"), row.cudnn, refresh_db._builds(DB, row.cudnn))


# numpy requirements as the wheels' Requires-Dist states them (read with pip, 2026-11-23).
NUMPY = {
    "2.15.1": ["numpy (<2.0.0,>=1.23.5)"],
    "2.16.2": ['numpy <2.0.0,>=1.23.5 ; python_version <= "3.11"', 'numpy <2.0.0,>=1.26.0 ; python_version >= "3.12"'],
    "2.18.1": ["numpy <2.1.0,>=1.26.0"],
    "2.19.1": ["numpy <2.2.0,>=1.26.0"],
}


@pytest.mark.parametrize("version", sorted(NUMPY))
def test_the_numpy_each_tensorflow_plan_takes_is_one_its_wheel_accepts(version):
    row = next(r for r in DB.tensorflow if r.version == version)
    assert refresh_db.numpy_problems(DB, row.numpy_major, row.python_min, row.python_max, NUMPY[version]) == []


def test_a_row_claiming_the_numpy_2_line_for_tensorflow_2_18_is_reported():
    # 2.18 accepts numpy 2.0 but the database's numpy 2 is 2.2.6, which its wheel refuses
    problems = refresh_db.numpy_problems(DB, 2, "3.10", "3.12", NUMPY["2.18.1"])
    assert problems and all("numpy 2.2.6" in p and "<2.1.0" in p for p in problems)


def test_markers_pick_the_numpy_requirement_for_each_python():
    deps = ['numpy <2.0.0,>=1.26.0 ; python_version >= "3.12"', 'numpy <1.0 ; python_version < "3.12"']
    problems = refresh_db.numpy_problems(DB, 1, "3.11", "3.12", deps)
    assert [p.split(":")[0] for p in problems] == ["Python 3.11"]
