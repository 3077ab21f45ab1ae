"""Check that each exact pip requirement ("name==version", "name[extra]==version") is installed at that version.

Shipped with the python_env role and run inside the environment by `ansible.builtin.script`. Prints one JSON
object ({"ok": [...], "wrong": [...]}) and exits 1 when anything is missing or at another version.
A local version label on the installed wheel ("2.6.0+cu126") satisfies a requirement without one, as pip does.
"""

import json
import re
import sys
from importlib import metadata


def check(requirement: str) -> dict:
    spec = requirement.split(";", 1)[0].strip()
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*(\S+)", spec)
    if not match:
        return {"requirement": requirement, "installed": None, "error": "not an exact 'name==version' requirement"}
    name, wanted = match.group(1), match.group(3)
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        return {"requirement": requirement, "installed": None, "error": "not installed"}
    same = installed == wanted or ("+" not in wanted and installed.split("+", 1)[0] == wanted)
    return {"requirement": requirement, "installed": installed, "error": None if same else "other version"}


def main(argv: list[str]) -> int:
    results = [check(r) for r in argv]
    report = {"ok": [r for r in results if not r["error"]], "wrong": [r for r in results if r["error"]]}
    print(json.dumps(report))
    return 1 if report["wrong"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
