"""Where the shipped roles, templates, profiles and inventories are.

In a checkout (or an editable install) they sit at the top of the repository; in a wheel they travel
under provision/_share/ (see [tool.hatch.build.targets.wheel.force-include] in pyproject.toml).

The roles and modules are also the Ansible collection provision.gpu (galaxy.yml): collections_dir() is a directory
whose ansible_collections/provision/gpu is that collection, for ANSIBLE_COLLECTIONS_PATH. A checkout has one made of
links (collections/ansible_collections/provision/gpu/{roles,plugins,meta,galaxy.yml} -> the top of the repository);
a wheel carries the files themselves there, under provision/_share/collections/.
"""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def share_dir(name: str) -> Path:
    """Return the directory `name` (roles, templates, profiles, inventory) for this installation."""
    bundled = _PKG / "_share" / name
    if name in ("roles", "plugins"):  # a wheel carries them inside its collection (collections_dir)
        bundled = _PKG / "_share" / "collections" / "ansible_collections" / Path(*COLLECTION.split(".")) / name
    if bundled.is_dir():
        return bundled
    in_tree = _PKG.parent / name
    if in_tree.is_dir():
        return in_tree
    raise FileNotFoundError(f"provision is installed without its {name}/ directory (looked in {bundled} and {in_tree})")


COLLECTION = "provision.gpu"  # galaxy.yml's namespace.name: the roles' and modules' fully qualified prefix


def collections_dir() -> Path:
    """The directory to put on ANSIBLE_COLLECTIONS_PATH for the shipped roles as the collection provision.gpu."""
    namespace, name = COLLECTION.split(".")
    for root in (_PKG / "_share" / "collections", _PKG.parent / "collections"):
        if (root / "ansible_collections" / namespace / name / "roles").is_dir():
            return root
    raise FileNotFoundError(f"provision is installed without its collection {COLLECTION} (looked in "
                            f"{_PKG / '_share' / 'collections'} and {_PKG.parent / 'collections'})")


def data_dir() -> Path:
    return _PKG / "data"


def kernels_dir() -> Path:
    return _PKG / "verify" / "kernels"
