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
    "2.12.0": ["numpy (<1.24,>=1.22)"],  # read from the wheel's METADATA, 2026-11-26
    "2.13.1": ["numpy (<=1.24.3,>=1.22)"],
    "2.15.1": ["numpy (<2.0.0,>=1.23.5)"],
    "2.16.2": ['numpy <2.0.0,>=1.23.5 ; python_version <= "3.11"', 'numpy <2.0.0,>=1.26.0 ; python_version >= "3.12"'],
    "2.18.1": ["numpy <2.1.0,>=1.26.0"],
    "2.19.1": ["numpy <2.2.0,>=1.26.0"],
}


@pytest.mark.parametrize("version", sorted(NUMPY))
def test_the_numpy_each_tensorflow_plan_takes_is_one_its_wheel_accepts(version):
    row = next(r for r in DB.tensorflow if r.version == version)
    assert refresh_db.numpy_problems(DB, row.numpy_major, row.python_min, row.python_max, NUMPY[version], row.numpy_max) == []


def test_a_row_claiming_the_numpy_2_line_for_tensorflow_2_18_is_reported():
    # 2.18 accepts numpy 2.0 but the database's numpy 2 is 2.2.6, which its wheel refuses
    problems = refresh_db.numpy_problems(DB, 2, "3.10", "3.12", NUMPY["2.18.1"])
    assert problems and all("numpy 2.2.6" in p and "<2.1.0" in p for p in problems)


def test_markers_pick_the_numpy_requirement_for_each_python():
    deps = ['numpy <2.0.0,>=1.26.0 ; python_version >= "3.12"', 'numpy <1.0 ; python_version < "3.12"']
    problems = refresh_db.numpy_problems(DB, 1, "3.11", "3.12", deps)
    assert [p.split(":")[0] for p in problems] == ["Python 3.11"]


def test_a_new_torch_release_s_row_is_built_from_its_wheel_s_metadata_and_fat_binaries():
    # torch 2.6.0's x86_64 Requires-Dist (excerpt) and the images its libtorch_cuda.so carries (read 2026-11-26).
    import yaml

    from provision.compat import TorchRow

    x86 = ['nvidia-cuda-nvrtc-cu12 (==12.4.127) ; platform_system == "Linux" and platform_machine == "x86_64"',
           'nvidia-cuda-runtime-cu12 (==12.4.127) ; platform_system == "Linux" and platform_machine == "x86_64"',
           'nvidia-cudnn-cu12 (==9.1.0.70) ; platform_system == "Linux" and platform_machine == "x86_64"',
           'nvidia-cublas-cu12 (==12.4.5.8) ; platform_system == "Linux" and platform_machine == "x86_64"']
    text = refresh_db.torch_row(DB, "2.6.0", "torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl", "https://pypi.org/x.whl",
                                "0" * 64, x86, x86, ["3.9", "3.10", "3.13"], [50, 60, 70, 75, 80, 86, 90], [], 341,
                                "2026-11-26")
    row = TorchRow(**yaml.safe_load(text)[0])
    assert (row.variant, row.cuda, row.cudnn, row.python_min, row.python_max) == ("cu124", "12.4", "9.1.0", "3.9", "3.13")
    assert row.arch == ("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0") and row.ptx is None and row.pypi_default
    assert not row.aarch64_cuda  # every nvidia-* requirement is x86_64-only
    assert row.pins == ()  # the pins agree with pypi.yaml's CUDA 12.4 row
    cu13 = ["cuda-toolkit[cublas,cudart]==13.0.2; platform_system == \"Linux\"",
            "nvidia-cudnn-cu13==9.20.0.48; platform_system == \"Linux\""]
    row = TorchRow(**yaml.safe_load(refresh_db.torch_row(DB, "2.12.0", "w.whl", "https://pypi.org/w.whl", "0" * 64, cu13,
                                                         cu13, ["3.10", "3.14"], [75, 120], [120], 448, "2026-11-26"))[0])
    assert (row.cuda, row.cudnn, row.ptx, row.aarch64_cuda, row.numpy_major) == ("13.0", "9.20.0", "12.0", True, 2)


def test_the_recorded_torch_releases_are_pypi_s_final_releases_in_order():
    data = {"releases": {"2.0.0": [{}], "2.10.0": [{}], "2.9.1": [{}], "2.11.0rc1": [{}], "2.8.0": [{"yanked": True}],
                         "1.13.1": [{}], "2.9.0": []}}
    assert refresh_db.final_releases(data, "2.0.0") == ["2.0.0", "2.9.1", "2.10.0"]


def test_without_its_numpy_cap_tensorflow_2_12_would_take_a_numpy_its_wheel_refuses():
    row = next(r for r in DB.tensorflow if r.version == "2.12.0")
    assert refresh_db.numpy_problems(DB, row.numpy_major, row.python_min, row.python_max, NUMPY["2.12.0"])


# heavy: reads ~350 MB of torch 2.13.0's wheel from PyPI (HTTP range reads of libtorch_cuda.so; 6-60 s).
@pytest.mark.heavy
def test_add_torch_adds_a_missing_release_in_one_run_as_the_shipped_row_says(tmp_path):
    import re
    import shutil

    from provision.compat import _read_db
    from provision.resources import data_dir

    root = tmp_path / "data"
    shutil.copytree(data_dir(), root)
    text = (root / "pytorch.yaml").read_text()
    row = re.search(r'  - \{version: "2\.13\.0", variant: cu130.*?checked: "[0-9-]+"\}\n', text, re.S)
    (root / "pytorch.yaml").write_text(text[: row.start()] + text[row.end():])
    rep = refresh_db.Report()
    refresh_db.add_torch(rep, _read_db(root), root / "pytorch.yaml", "2026-11-26")
    added = next(r for r in _read_db(root).torch if r.version == "2.13.0" and r.pypi_default)
    shipped = next(r for r in DB.torch if r.version == "2.13.0" and r.pypi_default)
    fields = ("variant", "cuda", "cudnn", "python_min", "python_max", "arch", "ptx", "numpy_major", "aarch64_cuda", "pins")
    assert [getattr(added, f) for f in fields] == [getattr(shipped, f) for f in fields]
    assert any("added torch 2.13.0" in c for c in rep.changes)
