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


def module_file_task() -> dict:
    tasks = YAML(typ="safe").load((ROLE / "tasks" / "module.yml").read_text())
    return next(t for t in tasks if t["name"] == "module | Read the NVIDIA module built for the running kernel")


def render(showconfig: str, tmp_path: Path) -> str:
    """The role's own task, run by ansible-playbook as the role runs it (its task vars templated into a command's
    argv), with `echo` in place of modinfo: an ad-hoc `-a msg=...` unescapes backslashes on its way in and hid a
    regex_search argument that failed in the VM test."""
    rule = YAML(typ="safe").load((ROLE / "vars" / "main.yml").read_text())["__nvidia_driver_install_rule"]
    task = module_file_task()
    argv = ["echo" if a == "/usr/sbin/modinfo" else a for a in task["ansible.builtin.command"]["argv"]]
    play = [{"name": "Render", "hosts": "localhost", "gather_facts": False,
             "vars": {"nvidia_driver_modprobe_config": {"stdout": showconfig}, "__nvidia_driver_install_rule": rule},
             "tasks": [{"name": "Run the role's task", "vars": task["vars"], "register": "asked",
                        "ansible.builtin.command": {"argv": argv}},
                       {"name": "Show it", "ansible.builtin.debug": {"msg": "ASKED={{ asked.stdout }}"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))  # JSON is YAML
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-c", "local", "-i", "localhost,", "play.yml"],
        capture_output=True, text=True, cwd=tmp_path, check=False,
        env={"PATH": "/usr/bin:/bin", "ANSIBLE_LOCALHOST_WARNING": "0", "HOME": "/tmp"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # modinfo is asked `-F version NAME`: the name is the last word echo printed.
    return proc.stdout.split('"msg": "ASKED=', 1)[1].split('"', 1)[0].split()[-1]


@pytest.mark.parametrize(("showconfig", "name"), [
    # `modprobe --showconfig` prints modprobe.d's rules among the kernel's own aliases.
    ("alias pci:v00008086d* e1000e\n" + DEBIAN + "options nvidia-current NVreg_PreserveVideoMemoryAllocations=1\n",
     "nvidia-current"),
    (DEBIAN.replace("nvidia-current", "nvidia-tesla-470"), "nvidia-tesla-470"),
    # NVIDIA's and Ubuntu's packages install the module as nvidia, with no rule.
    ("alias pci:v000010DEd*sv*sd*bc03sc00i00* nvidia\nblacklist nouveau\n", "nvidia"),
    ("", "nvidia"),
])
def test_modinfo_is_asked_for_the_file_the_module_is_installed_under(showconfig: str, name: str,
                                                                     tmp_path: Path) -> None:
    assert render(showconfig, tmp_path) == name
