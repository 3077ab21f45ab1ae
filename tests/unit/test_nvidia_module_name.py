"""The name nvidia_driver asks modinfo for (roles/nvidia_driver/tasks/module.yml), rendered by Ansible itself.

Debian installs the module as nvidia-current (or nvidia-tesla-470) and loads it through an `install nvidia` rule,
not an alias, so `modinfo nvidia` finds nothing there: the VM test's first complete run failed on exactly that, after
DKMS had built the module (docs/hosts.md). The fixture is Debian 13's own modprobe file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_driver"
DEBIAN = (ROOT / "tests" / "fixtures" / "nvidia" / "debian-13-nvidia-modprobe.conf").read_text()


def module_file_expression() -> str:
    tasks = YAML(typ="safe").load((ROLE / "tasks" / "module.yml").read_text())
    task = next(t for t in tasks if t["name"] == "module | Read the NVIDIA module built for the running kernel")
    return task["vars"]["__nvidia_driver_module_file"]


def render(showconfig: str) -> str:
    rule = YAML(typ="safe").load((ROLE / "vars" / "main.yml").read_text())["__nvidia_driver_install_rule"]
    extra = {"nvidia_driver_modprobe_config": {"stdout": showconfig}, "__nvidia_driver_install_rule": rule}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-m", "ansible.builtin.debug",
         "-a", "msg=" + module_file_expression(), "-e", json.dumps(extra)],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "ANSIBLE_LOCALHOST_WARNING": "0",
                                             "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "HOME": "/tmp"},
        check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.split('"msg": "', 1)[1].split('"', 1)[0]


@pytest.mark.parametrize(("showconfig", "name"), [
    # `modprobe --showconfig` prints modprobe.d's rules among the kernel's own aliases.
    ("alias pci:v00008086d* e1000e\n" + DEBIAN + "options nvidia-current NVreg_PreserveVideoMemoryAllocations=1\n",
     "nvidia-current"),
    (DEBIAN.replace("nvidia-current", "nvidia-tesla-470"), "nvidia-tesla-470"),
    # NVIDIA's and Ubuntu's packages install the module as nvidia, with no rule.
    ("alias pci:v000010DEd*sv*sd*bc03sc00i00* nvidia\nblacklist nouveau\n", "nvidia"),
    ("", "nvidia"),
])
def test_modinfo_is_asked_for_the_file_the_module_is_installed_under(showconfig: str, name: str) -> None:
    assert render(showconfig) == name
