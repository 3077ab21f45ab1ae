"""provision's own Ansible modules (plugins/modules) document themselves as Ansible's modules do: `ansible-doc` must
read their DOCUMENTATION, EXAMPLES and RETURN, and the documented options must be the ones the module accepts, with
the same types, element types, choices and defaults. (A ': ' inside a plain YAML scalar made two of them unreadable
to ansible-doc until 2026-11-25, and nothing noticed.)"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

MODULES = Path(__file__).resolve().parents[2] / "plugins" / "modules"
ANSIBLE_DOC = Path(sys.executable).parent / "ansible-doc"
NAMES = sorted(p.stem for p in MODULES.glob("provision_*.py"))


def argument_spec(path: Path) -> dict:
    """The literal argument_spec= given to AnsibleModule(...) in the module's source."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "AnsibleModule":
            for keyword in node.keywords:
                if keyword.arg == "argument_spec":
                    return ast.literal_eval(keyword.value)
    raise AssertionError(f"{path.name}: no AnsibleModule(argument_spec=...) found")


def test_every_module_is_checked() -> None:
    assert NAMES == ["provision_apt_components", "provision_facts", "provision_json_keys", "provision_ledger", "provision_lock",
                     "provision_originals", "provision_preflight",
                     "provision_python_apt", "provision_repo_keyring", "provision_wheels"]


@pytest.mark.parametrize("name", NAMES)
def test_ansible_doc_reads_the_module_and_its_options_match_what_it_accepts(name: str) -> None:
    proc = subprocess.run([str(ANSIBLE_DOC), "-M", str(MODULES), "--json", name], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)[name]
    assert doc["doc"]["module"] == name and doc["doc"]["short_description"]
    assert yaml.safe_load(doc["examples"]), "EXAMPLES is empty or not YAML"
    assert isinstance(doc["return"], dict)
    documented = doc["doc"].get("options") or {}
    accepted = argument_spec(MODULES / f"{name}.py")
    assert sorted(documented) == sorted(accepted)
    for option, spec in accepted.items():
        said = documented[option]
        assert said.get("description"), f"{name}: option {option} has no description"
        for key in ("type", "elements", "choices", "default"):
            assert said.get(key) == spec.get(key), f"{name}: option {option}: documented {key} {said.get(key)!r}, " \
                                                   f"accepted {spec.get(key)!r}"
