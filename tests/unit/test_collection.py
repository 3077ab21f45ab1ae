"""The roles and modules as the Ansible collection provision.gpu (galaxy.yml at the top of the repository): it builds
with `ansible-galaxy collection build`, holds the roles and modules and nothing else, carries the package's version,
`ansible-doc` reads every role and module from the installed tarball, and `ansible-test sanity` passes on it.

The collection used from a playbook of one's own against a stock Debian 13 host: tests/integration/test_collection.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tomllib
import types
from pathlib import Path

import pytest
from ruamel.yaml import YAML

import provision
from provision.resources import COLLECTION, collections_dir
from provision.state import cache_root

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NAMESPACE, NAME = COLLECTION.split(".")
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
# The modules' shared code, which Ansible packs with each module that imports it (AnsiballZ, Mitogen).
MODULE_UTILS = sorted(p.stem for p in (ROOT / "plugins" / "module_utils").glob("*.py"))
# Every role of the repository, those the site playbook applies and those it runs around them (preflight).
ROLES = sorted(p.parent.parent.name for p in (ROOT / "roles").glob("*/tasks/main.yml"))


def galaxy() -> dict:
    return YAML(typ="safe").load((ROOT / "galaxy.yml").read_text())


def run(*cmd: str, env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 300):
    # As a user's shell has it: none of provision's or the test run's ANSIBLE_* settings (a collections path that
    # already holds provision.gpu would make `ansible-galaxy collection install` do nothing).
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    return subprocess.run(list(cmd), capture_output=True, text=True, env=env or clean, cwd=cwd, timeout=timeout)


def test_the_collection_carries_the_package_version_and_name():
    """One version: pyproject.toml's. galaxy.yml cannot read it (ansible-galaxy takes a literal), so it is held here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert galaxy()["version"] == project["version"] == provision.__version__, (
        "galaxy.yml's version must be pyproject.toml's: change both")
    assert f"{galaxy()['namespace']}.{galaxy()['name']}" == COLLECTION


def test_the_checkout_links_the_collection_where_ansible_looks():
    """collections/ansible_collections/provision/gpu in a checkout: links to the top-level roles, plugins, meta."""
    root = collections_dir() / "ansible_collections" / NAMESPACE / NAME
    for role in ROLES:
        assert (root / "roles" / role / "tasks" / "main.yml").is_file(), role
    for module in MODULES:
        assert (root / "plugins" / "modules" / f"{module}.py").is_file(), module
    assert (root / "meta" / "runtime.yml").is_file()


@pytest.fixture(scope="module")
def tarball(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("build")
    proc = run(str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [built] = out.glob(f"{NAMESPACE}-{NAME}-*.tar.gz")
    assert built.name == f"{NAMESPACE}-{NAME}-{provision.__version__}.tar.gz"
    return built


@pytest.fixture(scope="module")
def installed(tarball, tmp_path_factory) -> Path:
    """A collections path holding only the built tarball, installed as a user would."""
    path = tmp_path_factory.mktemp("collections")
    proc = run(str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p", str(path), str(tarball))
    assert proc.returncode == 0 and (path / "ansible_collections" / NAMESPACE / NAME / "MANIFEST.json").is_file(), (
        proc.stdout + proc.stderr)
    return path


def test_the_tarball_holds_the_roles_and_modules_and_nothing_else(tarball):
    names = set(tarfile.open(tarball).getnames())
    for role in ROLES:
        for part in ("tasks/main.yml", "meta/main.yml", "meta/argument_specs.yml", "defaults/main.yml"):
            assert f"roles/{role}/{part}" in names, f"roles/{role}/{part} missing"
    for module in MODULES:
        assert f"plugins/modules/{module}.py" in names
    assert {"dpkg", "ledger", "preflight", "sources"} <= set(MODULE_UTILS)
    for name in MODULE_UTILS:
        assert f"plugins/module_utils/{name}.py" in names
    assert {"MANIFEST.json", "FILES.json", "meta/runtime.yml", "roles/README.md"} <= names
    tops = {n.split("/")[0] for n in names}
    assert tops == {"MANIFEST.json", "FILES.json", "meta", "roles", "plugins", "tests"}, tops
    # Of tests/, only ansible-test's ignore file (a new directory under tests/ goes into galaxy.yml's build_ignore).
    assert {n for n in names if n.startswith("tests/")} <= {"tests/sanity", *(f"tests/sanity/{p.name}" for p in
                                                                                (ROOT / "tests" / "sanity").iterdir())}
    leaked = [n for n in names if "/molecule" in n or "__pycache__" in n or n.endswith(".pyc")]
    assert leaked == []
    manifest = json.load(tarfile.open(tarball).extractfile("MANIFEST.json"))  # type: ignore[arg-type]
    assert manifest["collection_info"]["version"] == provision.__version__


def _doc(installed: Path, kind: str, *names: str) -> dict:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(installed), "ANSIBLE_COLLECTIONS_PATH": str(installed)}
    proc = run(str(BIN / "ansible-doc"), "-t", kind, "--json", *names, env=env)
    assert proc.returncode == 0 and "WARNING" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_ansible_doc_reads_every_role_of_the_installed_collection(installed):
    """`ansible-doc -t role` reads meta/argument_specs.yml: each role says what it does and documents every input."""
    docs = _doc(installed, "role", *(f"{COLLECTION}.{r}" for r in ROLES))
    assert sorted(docs) == sorted(f"{COLLECTION}.{r}" for r in ROLES)
    for name, doc in docs.items():
        main = doc["entry_points"]["main"]
        assert main.get("short_description") and main.get("description"), name
        for option, spec in main["options"].items():
            assert spec.get("description") and spec.get("type"), f"{name}: {option}"


def test_ansible_doc_reads_every_module_of_the_installed_collection(installed):
    docs = _doc(installed, "module", *(f"{COLLECTION}.{m}" for m in MODULES))
    assert sorted(docs) == sorted(f"{COLLECTION}.{m}" for m in MODULES)
    for name, doc in docs.items():
        assert doc["doc"]["short_description"] and doc["examples"] and doc["return"], name


# ansible-test bootstraps pip in each sanity test's virtual environment with a script it downloads from
# ci-files.testing.ansible.com (ansible/ansible#77304 for machines that cannot reach it), else reads from
# ~/.ansible/test/cache/get_pip_<version>.py. This one does what that script does with the pip bundled in the
# interpreter (ensurepip), then installs the packages ansible-test asked for (the pinned pip) from the index.
GET_PIP = """\
import subprocess, sys
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
"""


@pytest.mark.slow  # 20 s on 2 cores with ansible-test's virtual environments kept; 5 min 16 s the first time (made from PyPI)
def test_ansible_test_sanity_passes(installed):
    """Every sanity test ansible-core ships, with this interpreter (no container): compile, import, pylint, pep8,
    validate-modules (documentation against the argument spec), ansible-doc, yamllint, runtime-metadata, shebang...
    None is skipped; pslint and shellcheck find nothing to check (no PowerShell, no shell scripts)."""
    from ansible.release import __version__ as core
    from ansible_test._internal.python_requirements import get_venv_packages

    core = ".".join(core.split(".")[:2])
    assert (ROOT / "tests" / "sanity" / f"ignore-{core}.txt").is_file(), (
        f"ansible-core {core}: ansible-test reads tests/sanity/ignore-{core}.txt; copy ignore-2.19.txt's entries (each "
        "with its reason) into it, then check that they are still needed")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    # ansible-test's virtual environments live under HOME: one kept with provision's caches, reused run to run.
    home = cache_root() / "ansible-test"
    pip = get_venv_packages(types.SimpleNamespace(version=version))["pip"]  # type: ignore[arg-type]
    get_pip = home / ".ansible" / "test" / "cache" / f"get_pip_{pip.replace('.', '_')}.py"
    if not get_pip.exists():
        get_pip.parent.mkdir(parents=True, exist_ok=True)
        get_pip.write_text(GET_PIP)
    root = installed / "ansible_collections" / NAMESPACE / NAME
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    proc = run(str(BIN / "ansible-test"), "sanity", "--python", version, "--color", "no", env=env, cwd=root,
               timeout=1500)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    assert 'Running sanity test "validate-modules"' in proc.stdout + proc.stderr
