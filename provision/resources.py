"""Where the shipped roles, templates, profiles and inventories are.

In a checkout (or an editable install) they sit at the top of the repository; in a wheel they travel
under provision/_share/ (see [tool.hatch.build.targets.wheel.force-include] in pyproject.toml).
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def share_dir(name: str) -> Path:
    """Return the directory `name` (roles, templates, profiles, inventory) for this installation."""
    bundled = _PKG / "_share" / name
    if bundled.is_dir():
        return bundled
    in_tree = _PKG.parent / name
    if in_tree.is_dir():
        return in_tree
    raise FileNotFoundError(f"provision is installed without its {name}/ directory (looked in {bundled} and {in_tree})")


def data_dir() -> Path:
    return _PKG / "data"


def kernels_dir() -> Path:
    return _PKG / "verify" / "kernels"
