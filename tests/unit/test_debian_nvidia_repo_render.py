"""Issue 41, rendered: a Debian plan whose driver comes from NVIDIA's repository gives the roles the branch lock,
contrib and the keyring package to own, and its image adds the same repository with a fingerprint-checked key.
Plans from the fixture tables of tests/unit/test_debian_nvidia_repo.py; the pin file from the role's template."""

from __future__ import annotations

from pathlib import Path

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from provision.render.docker import render_dockerfile
from provision.render.role_vars import ansible_vars
from provision.resolver import resolve
from tests.unit.test_debian_nvidia_repo import DB
from tests.unit.test_resolver import profile
from tests.unit.test_role_expressions import trusted

ROLE = Path(__file__).resolve().parents[2] / "roles" / "nvidia_driver"
BLACKWELL = resolve(profile("Blackwell Card"), DB)
DEBIAN = resolve(profile("Turing Card"), DB)


def _pref(os_vars: str, **variables: object) -> str:
    loader = DataLoader()
    merged = {**trusted(loader.load_from_file(str(ROLE / "vars" / os_vars))), "ansible_managed": "managed",
              **variables}
    text = (ROLE / "templates" / "nvidia-driver.pref.j2").read_text()
    return Templar(loader=loader, variables=merged).template(trust_as_template(text))


def test_the_roles_get_the_repository_s_branch_packages_contrib_and_its_keyring_to_own():
    v = ansible_vars(BLACKWELL)
    assert (v["nvidia_driver_source"], v["nvidia_driver_branch"], v["nvidia_driver_version"]) == ("nvidia-repo", "580", "")
    assert v["nvidia_driver_packages"] == ["nvidia-driver-cuda", "nvidia-kernel-open-dkms"]
    assert v["ledger_components_wanted"] is True  # contrib, as NVIDIA's guide for Debian enables
    assert "cuda-keyring" in v["ledger_planned"]["packages"]
    assert "/etc/apt/preferences.d/provision-nvidia-driver.pref" in v["ledger_planned"]["paths"]
    assert v["preflight_nvidia_repo_planned"] is True


def test_debian_s_own_plan_neither_adds_nor_owns_the_repository():
    v = ansible_vars(DEBIAN)
    assert v["nvidia_driver_source"] == "debian" and v["preflight_nvidia_repo_planned"] is False
    assert "cuda-keyring" not in v["ledger_planned"]["packages"]


def test_the_pin_holds_the_repository_s_branch_for_every_nvidia_source_package():
    text = _pref("Debian-13.yml", nvidia_driver_version="", nvidia_driver_branch="595", nvidia_driver_source="nvidia-repo")
    assert "Package: src:*nvidia*\nPin: version 595.*\nPin-Priority: 1001\n" in text


def test_debian_s_own_pin_stays_the_planned_version():
    text = _pref("Debian-13.yml", nvidia_driver_version="550.163.01-2", nvidia_driver_branch="550",
                 nvidia_driver_source="debian")
    assert "Package: src:nvidia-graphics-drivers*\nPin: version 550.163.01-2\n" in text and "*nvidia*" not in text


def test_the_image_adds_the_same_repository_with_a_fingerprint_checked_key():
    text = render_dockerfile(BLACKWELL, "profiles/t.yaml")
    url = "https://example.invalid/nvidia/debian12/x86_64/"
    assert f"curl -fsSL --proto '=https' -o /tmp/cuda.pub '{url}k.pub'" in text
    assert f"if [ \"$fpr\" != '{'A' * 40}' ]" in text
    assert f"deb [signed-by=/usr/share/keyrings/cuda.gpg] {url} /" in text
    assert "cuda-cudart-13-0" in text and "libcudart" not in text
