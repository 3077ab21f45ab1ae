"""Render a Plan for Ansible: role-prefixed variables, a one-play site.yml over the shipped roles, plan.json.

Every value comes from the Plan; the roles' defaults (meta/argument_specs.yml) cover only what the Plan does
not decide (paths of environment files, timeouts). The play loads vars/plan.yml, whose keys all carry their
role's prefix, so no variable is shared between roles.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from provision.models import Plan

# Order matters: the driver first (libcuda), then the environment, then what installs wheels into it
# (the cuda and cudnn roles refuse to run before python_env has made the venv, for pypi sources).
ROLES = ("nvidia_driver", "python_env", "cuda", "cudnn", "jupyter", "gpu_verify")
VARS_FILE = "vars/plan.yml"


def verifier_source() -> Path:
    """provision/verify on the controller: the gpu_verify role copies it to the hosts."""
    import provision.verify

    return Path(provision.verify.__file__).resolve().parent


def ansible_vars(plan: Plan, *, skip_frameworks: bool = False, fetch_dir: str | None = None) -> dict[str, Any]:
    """Each role's inputs (names from its meta/argument_specs.yml), all taken from the Plan."""
    from provision.verify.expect import Expect

    venv, user = plan.python.venv, plan.user
    frameworks = [] if skip_frameworks else [
        {"name": f.name, "requirements": list(f.requirements), "index_url": f.index_url or ""} for f in plan.frameworks
    ]
    expect = Expect.from_plan(plan).to_dict()
    if skip_frameworks:
        expect["frameworks"] = []
    expect["source"] = f"plan:{plan.profile}"
    out: dict[str, Any] = {
        "nvidia_driver_install": plan.driver.install,
        "nvidia_driver_branch": plan.driver.branch or "",
        "nvidia_driver_source": plan.driver.source,
        "nvidia_driver_packages": list(plan.driver.packages),
        "nvidia_driver_userspace_packages": list(plan.driver.userspace_packages),
        "nvidia_driver_version": plan.driver.version or "",
        "nvidia_driver_min_version": plan.driver.min_version or "",
        "nvidia_driver_kernel_module": plan.driver.kernel_module,
        "cuda_install": plan.cuda.install,
        "cuda_version": plan.cuda.version,
        "cuda_full_version": plan.cuda.full_version or "",
        "cuda_source": plan.cuda.source,
        "cuda_kind": plan.cuda.kind,
        "cuda_packages": list(plan.cuda.packages),
        "cuda_home": plan.cuda.home,
        "cuda_venv": venv,
        "cuda_venv_owner": user,
        "cudnn_install": plan.cudnn.install,
        "cudnn_version": plan.cudnn.version or "",
        "cudnn_full_version": plan.cudnn.full_version or "",
        "cudnn_source": plan.cudnn.source or "pypi",
        "cudnn_packages": list(plan.cudnn.packages),
        "cudnn_venv": venv,
        "cudnn_venv_owner": user,
        "python_env_user": user,
        "python_env_version": plan.python.version,
        "python_env_interpreter": plan.python.interpreter,
        "python_env_packages": list(plan.python.packages),
        "python_env_venv": venv,
        "python_env_requirements": [plan.verify.numpy_requirement],
        "python_env_frameworks": frameworks,
        "jupyter_enabled": plan.jupyter.enabled,
        "jupyter_user": user,
        "jupyter_venv": venv,
        "jupyter_requirements": list(plan.jupyter.requirements),
        "jupyter_port": plan.jupyter.port,
        "jupyter_bind": plan.jupyter.bind,
        "jupyter_auth": plan.jupyter.auth,
        "jupyter_tls": plan.jupyter.tls,
        "gpu_verify_expect_gpu": plan.verify.expect_gpu,
        "gpu_verify_target_arch": plan.verify.target_arch,
        "gpu_verify_expect": expect,
        "gpu_verify_source": str(verifier_source()),
        "gpu_verify_venv": venv,
        "gpu_verify_user": user,
        "gpu_verify_requirements": [*plan.verify.nvrtc_requirements, *plan.verify.cuda_python_requirements,
                                    plan.verify.numpy_requirement],
    }
    if fetch_dir:
        out["gpu_verify_fetch_dir"] = fetch_dir
    return out


def site_playbook(plan: Plan) -> list[dict[str, Any]]:
    return [{
        "name": f"Provision {plan.profile} ({plan.target.os_id}, {plan.gpu.model})",
        "hosts": "all",
        "become": True,
        # Extra environment for every task, set per host in the inventory (the sandbox points pip at its cache).
        "environment": "{{ provision_environment | default({}) }}",
        "vars_files": [VARS_FILE],
        "roles": [{"role": name} for name in ROLES],
    }]


def _dump(data: Any, path: Path) -> None:
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)  # yamllint's (and ansible-lint's) indentation
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    if isinstance(data, list):  # a play list: top-level items at column 0, nested sequences indented
        for item in data:
            inner = io.StringIO()
            yaml.dump(item, inner)
            buf.write("- " + "\n  ".join(inner.getvalue().rstrip("\n").split("\n")) + "\n")
    else:
        yaml.dump(data, buf)
    path.write_text("---\n" + buf.getvalue())


def render_ansible(plan: Plan, out_dir: str | Path, *, inventory: dict[str, Any] | str | Path | None = None,
                   skip_frameworks: bool = False) -> dict[str, Path]:
    """Write site.yml, vars/plan.yml, plan.json (and inventory.yml when given) into out_dir. Returns the paths."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    files = {"playbook": out / "site.yml", "vars": out / VARS_FILE, "plan": out / "plan.json"}
    header = f"# Generated by provision from {plan.profile_path or plan.profile}; edit the profile, not this file.\n"
    _dump(site_playbook(plan), files["playbook"])
    _dump(ansible_vars(plan, skip_frameworks=skip_frameworks, fetch_dir=str(out / "reports")), files["vars"])
    for path in (files["playbook"], files["vars"]):
        path.write_text("---\n" + header + path.read_text().removeprefix("---\n"))
    files["plan"].write_text(json.dumps(plan.model_dump(mode="json"), indent=2) + "\n")
    if inventory is not None:
        files["inventory"] = out / "inventory.yml"
        if isinstance(inventory, dict):
            _dump(inventory, files["inventory"])
        else:
            files["inventory"].write_text(Path(inventory).read_text())
    return files


def sandbox_inventory(name: str) -> dict[str, Any]:
    """Inventory for a provision.sandbox container, reached with `docker exec`."""
    return {"all": {"hosts": {name: {
        "ansible_connection": "community.docker.docker",
        "ansible_python_interpreter": "/usr/bin/python3",
        # The sandbox mounts the controller's pip cache here; pip runs as the non-root account.
        "provision_environment": {"PIP_CACHE_DIR": "/var/cache/provision/pip/users"},
    }}}}
