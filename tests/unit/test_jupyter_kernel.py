"""One Jupyter kernel, named for what it runs, and JupyterLab's news prompt and update check off: the name provision
gives it, the role's inputs, and the same files in an image's environment. In a browser on a host:
tests/integration/test_browser.py."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from provision.hostfacts import kernel_display_name
from provision.pipeline.plan import plan_for
from provision.render.docker import render_dockerfile
from provision.render.role_vars import ansible_vars, lab_settings

ROOT = Path(__file__).resolve().parents[2]
DESKMINI = ROOT / "profiles/deskmini.yaml"


def test_the_kernel_is_named_for_the_python_the_framework_and_the_cuda_it_runs():
    plan = plan_for(DESKMINI, os_override="debian-13", indexes={"pytorch": False})  # the demo's plan
    assert kernel_display_name(plan) == "Python 3.13 · torch 2.7.1 · CUDA 12.6"
    assert kernel_display_name(plan, skip_frameworks=True) == "Python 3.13 · CUDA 12.6"
    assert ansible_vars(plan)["jupyter_kernel_display_name"] == "Python 3.13 · torch 2.7.1 · CUDA 12.6"
    assert ansible_vars(plan, skip_frameworks=True)["jupyter_kernel_display_name"] == "Python 3.13 · CUDA 12.6"


def test_the_role_writes_python3_and_the_settings_that_turn_the_news_off():
    role = ROOT / "roles/jupyter"
    assert "jupyter_kernel_name: python3" in (role / "defaults/main.yml").read_text()
    # The templates render the role's settings (vars/main.yml, the one place they are written), which provision reads
    # for an image too.
    assert "__jupyter_lab_page_config | to_nice_json" in (role / "templates/lab_page_config.json.j2").read_text()
    assert "__jupyter_lab_overrides | to_nice_json" in (role / "templates/lab_overrides.json.j2").read_text()
    overrides, page = lab_settings()
    announcements = {"@jupyterlab/apputils-extension:announcements": True}
    assert page == {"disabledExtensions": announcements, "lockedExtensions": announcements}
    # fetchNews is a string in JupyterLab's settings schema ("true", "false", "none"), checkForUpdates a boolean.
    assert overrides == {"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}


def test_the_image_gets_the_same_kernel_and_settings():
    plan = plan_for(DESKMINI, os_override="debian-13", indexes={"pytorch": False})
    dockerfile = render_dockerfile(plan, DESKMINI)
    written = {}
    for content, path in re.findall(r"printf '%s\\n' ('.*?') > (\S+)", dockerfile):
        [text] = shlex.split(content)
        written[path] = json.loads(text)
    venv = plan.python.venv
    assert written == {
        f"{venv}/share/jupyter/kernels/python3/kernel.json": {
            "argv": [f"{venv}/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3.13 · torch 2.7.1 · CUDA 12.6", "language": "python",
            "metadata": {"debugger": True}},
        f"{venv}/share/jupyter/lab/settings/overrides.json": lab_settings()[0],
        f"{venv}/etc/jupyter/labconfig/page_config.json": lab_settings()[1],
    }
    assert "python3" in dockerfile.split("# --- Stage 2")[0]  # in the environment's stage, copied whole to the image
