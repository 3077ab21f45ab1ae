"""No function in provision/ over 80 lines, no module over 500 (issue 54, part 7): a function or module that grows
past them does more than one job, and is split by job (docs/design.md, "Module layout").

Counted as Python's ast counts them: a function from its `def` line to its last line (end_lineno - lineno + 1,
decorators aside, nested functions inside their parent's count too); a module by its lines. What could not be
split yet is listed below with the reason, so the test passes and shows what remains; an entry that no longer
exceeds its limit fails the test until it is removed from the list.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "provision"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500

# "path relative to provision/:function name" -> why it is still over MAX_FUNCTION_LINES. Empty: every function fits.
ALLOWED_FUNCTIONS: dict[str, str] = {}

# "path relative to provision/" -> why it is still over MAX_MODULE_LINES. Empty: every module fits.
ALLOWED_MODULES: dict[str, str] = {}


def _sources() -> list[tuple[str, str]]:
    found = [(path.relative_to(PACKAGE).as_posix(), path.read_text(encoding="utf-8"))
             for path in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in path.parts]
    assert len(found) > 100, f"{PACKAGE}: not provision's sources"  # a wrong path would pass every test here
    return found


def long_functions(sources: list[tuple[str, str]], limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """`module:function` -> its lines, for every function (or method) longer than `limit`."""
    found = {}
    for name, text in sources:
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found[f"{name}:{node.name}"] = lines
    return found


def long_modules(sources: list[tuple[str, str]], limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """module -> its lines, for every module longer than `limit`."""
    return {name: n for name, text in sources if (n := len(text.splitlines())) > limit}


def test_no_function_is_over_80_lines() -> None:
    found = long_functions(_sources())
    over = {k: v for k, v in found.items() if k not in ALLOWED_FUNCTIONS}
    assert over == {}, (f"functions over {MAX_FUNCTION_LINES} lines (split each by job, into functions with one job "
                        f"and a docstring saying it): {over}")
    stale = sorted(set(ALLOWED_FUNCTIONS) - set(found))
    assert stale == [], f"no longer over {MAX_FUNCTION_LINES} lines: remove from ALLOWED_FUNCTIONS: {stale}"


def test_no_module_is_over_500_lines() -> None:
    found = long_modules(_sources())
    over = {k: v for k, v in found.items() if k not in ALLOWED_MODULES}
    assert over == {}, (f"modules over {MAX_MODULE_LINES} lines (split each by job into sibling modules or a "
                        f"package, keeping the import paths other code uses): {over}")
    stale = sorted(set(ALLOWED_MODULES) - set(found))
    assert stale == [], f"no longer over {MAX_MODULE_LINES} lines: remove from ALLOWED_MODULES: {stale}"


def test_the_counts_catch_a_long_function_and_module() -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(80))
    text = f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}"
    assert long_functions([("m.py", text)]) == {"m.py:long": 81}
    assert long_modules([("m.py", text)], limit=80) == {"m.py": len(text.splitlines())}
    assert long_modules([("m.py", text)]) == {}
