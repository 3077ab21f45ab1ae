"""Dependencies point one way: data -> models -> resolver -> plan -> render -> runners -> pipeline/apply -> cli.

Every module of the package is placed in a layer below; an import (at module level or inside a function) of a
module in a higher layer fails here, and so does a module nobody placed: a new file says where it belongs."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "provision"

# Lowest first. A module may import its own layer and the ones before it.
LAYERS: list[tuple[str, set[str]]] = [
    ("foundations", {"errors", "versions", "resources", "hashes", "artifacts", "state", "procs", "request"}),
    ("shipped to hosts (no imports of the rest)", {"verify", "checks"}),
    ("data", {"compat", "plan_rules"}),
    ("models", {"models"}),
    ("profiles and the resolver", {"loader", "resolver", "costs", "report", "drift"}),
    ("plan", {"pipeline.plan", "doctor", "interpreters", "installer", "hostfacts"}),
    ("render", {"render", "ledger"}),
    ("runners and hosts", {"runners", "ssh", "tunnel", "sandbox", "vm", "verify.controller", "image_hosts"}),
    ("the pipeline's stages and apply", {"pipeline", "apply"}),
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


# The apply's stages (provision/pipeline/), in the order a stage may import: each only the ones before it. plan is a
# layer of its own above; apply (provision/apply.py) calls them all. probe runs before render and run (on the hosts it
# finds converged, instead of them) but answers in events' HostResult, so it stands after events.
STAGES = ["targets", "preflight", "render", "run", "events", "probe", "record", "check", "connect", "report"]


def test_each_stage_imports_only_the_stages_before_it():
    found = sorted(p.stem for p in (PACKAGE / "pipeline").glob("*.py") if p.stem not in ("__init__", "plan"))
    assert found == sorted(STAGES), "a new stage says where it stands in STAGES"
    wrong = []
    for stage in STAGES:
        for dep in imports(PACKAGE / "pipeline" / f"{stage}.py"):
            if dep.startswith("pipeline.") and dep != "pipeline.plan" and (
                    dep.split(".")[1] not in STAGES or STAGES.index(dep.split(".")[1]) >= STAGES.index(stage)):
                wrong.append(f"pipeline.{stage} imports {dep}")
    assert wrong == []


def test_only_events_reads_the_roles_output():
    # ansible-runner's task results and the data the roles hand over are read in one place: pipeline/events.py.
    needles = ('"runner_on_', '"res"', '"ansible_stats"', "provision_unpredictable", '"notes.json"')
    readers = sorted({str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                      for needle in needles if needle in p.read_text()})
    assert readers == ["pipeline/events.py"], readers


def test_the_check_finds_an_import_that_points_back(tmp_path):
    # The rule itself can fail: a resolver module importing the renderer is caught.
    bad = tmp_path / "provision" / "resolver" / "bad.py"
    bad.parent.mkdir(parents=True)
    bad.write_text("from provision.render.docker import render\n\n\ndef f():\n    from ..runners import ansible\n")
    assert imports(bad, tmp_path / "provision") == {"render.docker", "runners"}
    assert layer_of("render.docker") > layer_of("resolver.bad") and layer_of("runners") > layer_of("resolver.bad")
