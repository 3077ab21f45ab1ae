"""Where the shipped roles, templates, profiles and inventories are.

In a checkout (or an editable install) they sit at the top of the repository; in a wheel they travel
under provision/_share/ (see [tool.hatch.build.targets.wheel.force-include] in pyproject.toml).

The roles and modules are also the Ansible collection provision.gpu (galaxy.yml): collections_dir() is a directory
whose ansible_collections/provision/gpu is that collection, for ANSIBLE_COLLECTIONS_PATH. A checkout has one made of
links (collections/ansible_collections/provision/gpu/{roles,plugins,meta,galaxy.yml} -> the top of the repository);
a wheel carries the files themselves there, under provision/_share/collections/.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

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


def collection_module(name: str) -> ModuleType:
    """The collection's own Python module `name` (plugins.module_utils.ledger: plugins/module_utils/ledger.py),
    imported as Ansible imports it (ansible_collections.provision.gpu.plugins.module_utils.ledger) through Ansible's
    collection loader, as ansible-test imports a collection's code for its unit tests: the controller runs the very
    code the hosts run. The loader is installed here with collections_dir() unless one that knows it is installed
    already (ansible's init_plugin_loader, in a process that templates as ansible-playbook does); collections_dir()
    joins sys.path too, where a loader installed later looks."""
    from ansible.utils.collection_loader import AnsibleCollectionConfig
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    root = str(collections_dir())
    if root not in sys.path:
        sys.path.append(root)
    installed = AnsibleCollectionConfig.collection_finder is not None
    known = list(AnsibleCollectionConfig.collection_paths) if installed else []
    if root not in known:
        _AnsibleCollectionFinder(paths=known)._install()  # and every sys.path entry holding ansible_collections
    return importlib.import_module(f"ansible_collections.{COLLECTION}.{name}")


def data_dir() -> Path:
    return _PKG / "data"


def kernels_dir() -> Path:
    return _PKG / "verify" / "kernels"
