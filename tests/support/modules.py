"""provision's own Ansible modules and their shared code (plugins/modules, plugins/module_utils) in tests.

The shared code is imported as Ansible imports it on a host, ansible_collections.provision.gpu.plugins.module_utils.*
(provision.resources.collection_module); a module is run as Ansible runs it, a process given its arguments as JSON,
with the collection on its import path as AnsiballZ puts it there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from provision.resources import collection_module, collections_dir

MODULES = Path(__file__).resolve().parents[2] / "plugins" / "modules"


def utils(name: str) -> ModuleType:
    """plugins/module_utils/<name>.py."""
    return collection_module(f"plugins.module_utils.{name}")


def module(name: str) -> ModuleType:
    """plugins/modules/<name>.py, imported (for its own functions)."""
    return collection_module(f"plugins.modules.{name}")


def run(name: str, args: dict, cwd: Path, python: str = sys.executable) -> tuple[subprocess.CompletedProcess, dict]:
    """Run plugins/modules/<name>.py with `args` (ANSIBLE_MODULE_ARGS) in `cwd`: the process and its JSON answer."""
    argfile = cwd / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=str(collections_dir()))
    proc = subprocess.run([python, str(MODULES / f"{name}.py"), str(argfile)], capture_output=True, text=True,
                          check=False, cwd=cwd, env=env)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"{name} printed no JSON: {proc.stdout[-2000:]}{proc.stderr[-2000:]}") from None
    return proc, result
