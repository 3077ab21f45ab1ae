"""Dependencies point one way: data -> models -> resolver -> plan -> render -> runners -> fleet/apply -> cli.

Every module of the package is placed in a layer below; an import (at module level or inside a function) of a
module in a higher layer fails here, and so does a module nobody placed: a new file says where it belongs."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "provision"

# Lowest first. A module may import its own layer and the ones before it.
LAYERS: list[tuple[str, set[str]]] = [
    ("foundations", {"errors", "versions", "resources", "hashes", "state", "procs"}),
    ("shipped to hosts (no imports of the rest)", {"verify", "checks"}),
    ("data", {"compat", "plan_rules"}),
    ("models", {"models"}),
    ("profiles and the resolver", {"loader", "resolver", "costs", "report", "drift"}),
    ("plan", {"pipeline", "doctor", "interpreters", "installer"}),
    ("render", {"render", "ledger"}),
    ("runners and hosts", {"runners", "tunnel", "sandbox", "vm", "verify.controller"}),
    ("fleet and apply", {"fleet", "apply"}),
    ("cli (the package provision/cli/: common, plans, apply, destroy, sandbox, build, verify)", {"cli", "__main__"}),
]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


def layer_of(module: str) -> int:
    """The layer of the longest placed prefix of `module` (verify.controller before verify)."""
    best: tuple[int, int] | None = None
    for index, (_, names) in enumerate(LAYERS):
        for name in names:
            if module == name or module.startswith(name + "."):
                if best is None or len(name) > best[0]:
                    best = (len(name), index)
    assert best is not None, f"provision.{module} is in no layer of tests/unit/test_layers.py: place it"
    return best[1]


def imports(path: Path, root: Path = PACKAGE) -> set[str]:
    """The provision modules a file imports, relative imports resolved."""
    here = module_name(path, root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.removeprefix("provision.") for a in node.names if a.name.startswith("provision.")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and (node.module == "provision" or node.module.startswith("provision.")):
                target = node.module.removeprefix("provision").lstrip(".")
            else:
                continue
            if target:
                found.add(target)
            else:  # `from provision import x`: x is a module or a name of the package's own __init__
                found |= {a.name for a in node.names if (PACKAGE / a.name).exists()
                          or (PACKAGE / f"{a.name}.py").exists()}
    return found


def test_every_import_points_down_the_pipeline():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = module_name(path)
        if not me:
            continue  # the package's own __init__: its version only
        mine = layer_of(me)
        for dep in imports(path):
            if dep and layer_of(dep) > mine:
                wrong.append(f"provision.{me} ({LAYERS[mine][0]}) imports provision.{dep} "
                             f"({LAYERS[layer_of(dep)][0]})")
    assert wrong == []


def test_what_ships_to_hosts_imports_nothing_else_of_provision():
    # provision/verify and provision/checks are copied onto hosts alone: an import of the rest would fail there.
    for sub in ("verify", "checks"):
        for path in sorted((PACKAGE / sub).rglob("*.py")):
            if path.name == "controller.py":
                continue  # the controller's side of `provision verify`, never shipped
            outside = {d for d in imports(path) if d.split(".")[0] != sub}
            assert outside == set(), f"{path.relative_to(PACKAGE)} imports {sorted(outside)}"


def test_the_check_finds_an_import_that_points_back(tmp_path):
    # The rule itself can fail: a resolver module importing the renderer is caught.
    bad = tmp_path / "provision" / "resolver" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("from provision.render.docker import render\n\n\ndef f():\n    from ..runners import ansible\n")
    assert imports(bad, tmp_path / "provision") == {"render.docker", "runners"}
    assert layer_of("render.docker") > layer_of("resolver.bad") and layer_of("runners") > layer_of("resolver.bad")
