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
        # The roles and modules as the collection provision.gpu, laid out for ANSIBLE_COLLECTIONS_PATH.
        "provision/_share/collections/ansible_collections/provision/gpu/roles/cuda/tasks/main.yml",
        "provision/_share/collections/ansible_collections/provision/gpu/plugins/modules/provision_facts.py",
        # The modules' shared code (ansible_collections.provision.gpu.plugins.module_utils), which the controller
        # imports too (provision/ledger.py, provision/state.py).
        "provision/_share/collections/ansible_collections/provision/gpu/plugins/module_utils/ledger.py",
        "provision/_share/collections/ansible_collections/provision/gpu/plugins/module_utils/preflight.py",
        "provision/_share/collections/ansible_collections/provision/gpu/meta/runtime.yml",
        "provision/_share/collections/ansible_collections/provision/gpu/galaxy.yml",
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
        "from provision.pipeline.plan import plan_for; "
        "print(plan_for(share_dir('profiles') / 'aws-p2.yaml').driver.branch); "
        # The ledger's rules, imported from the wheel's collection as the hosts import them.
        "from provision.ledger import ledger_module; "
        "assert '/_share/collections/ansible_collections/provision/gpu/plugins/module_utils/' in ledger_module().__file__, "
        "ledger_module().__file__"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "470"


def test_a_directory_rendered_by_the_installed_wheel_runs_its_collection(wheel, tmp_path):
    """`provision render` from the wheel: site.yml names provision.gpu.<role>, and ansible.cfg's collections_path (the
    wheel's provision/_share/collections) resolves every role and module: ansible-playbook's syntax check passes."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {"PYTHONPATH": str(site), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "provision", "render", str(site / "provision/_share/profiles/deskmini.yaml"),
                           "--os", "debian-13", "--skip-frameworks", "-o", str(out)], cwd=tmp_path, capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"collections_path = {site / 'provision/_share/collections'}:" in (out / "ansible.cfg").read_text()
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "--syntax-check", "site.yml"], cwd=out,
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
