"""`pip install .` (a real wheel, not editable) carries the data, profiles, roles, templates and inventories."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [whl] = out.glob("provision-*.whl")
    return whl


def test_wheel_carries_everything_the_pipeline_reads(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "provision/data/gpus.yaml",
        "provision/_share/profiles/deskmini.yaml",
        "provision/_share/templates/Dockerfile.j2",
        "provision/_share/roles/cuda/tasks/main.yml",
        "provision/_share/inventory/local.yml",
    ):
        assert required in names, f"{required} missing from {wheel.name}"
    assert not any("/molecule/" in n and n.endswith(".pyc") for n in names)


def test_installed_wheel_plans_from_anywhere(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # Dependencies come from the running environment; provision itself only from the unpacked wheel.
    code = (
        "import provision, sys; from provision.resources import share_dir; "
        "assert '_share' in str(share_dir('profiles')), share_dir('profiles'); "
        "from provision.pipeline import plan_for; "
        "print(plan_for(share_dir('profiles') / 'aws-p2.yaml').driver.branch)"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "470"
