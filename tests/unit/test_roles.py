"""Static checks of the Ansible roles: specs agree with defaults, naming rules hold, and the linters pass."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[2]
ROLES_DIR = REPO / "roles"
ROLES = ["nvidia_driver", "cuda", "cudnn", "python_env", "jupyter"]
# Every role shipped, including those without per-OS variables (gpu_verify, host_record).
ALL_ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "tasks" / "main.yml").is_file())
OS_VARS = ["Debian-12", "Debian-13", "Ubuntu-22", "Ubuntu-24"]
BIN = Path(sys.executable).parent


def load(path: Path):
    return YAML(typ="safe").load(path.read_text())


def spec_options(role: str) -> dict:
    return load(ROLES_DIR / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def test_every_role_is_in_the_playbook() -> None:
    from provision.render.ansible import INCLUDED_ROLES, PREFLIGHT
    from provision.render.ansible import ROLES as PLAYBOOK_ROLES

    assert sorted([*PLAYBOOK_ROLES, PREFLIGHT, *INCLUDED_ROLES]) == ALL_ROLES


@pytest.mark.parametrize("role", ["cuda", "cudnn"])
def test_cuda_and_cudnn_share_their_apt_steps(role: str) -> None:
    """One implementation of the apt steps (roles/apt_packages), handed each role's own variables: no copy left."""
    main = load(ROLES_DIR / role / "tasks" / "main.yml")
    steps = [t for t in _flatten(main) if "ansible.builtin.include_role" in t]
    [step] = [t for t in steps if t["ansible.builtin.include_role"]["name"] == "provision.gpu.apt_packages"]
    assert step["vars"]["apt_packages_role"] == role
    handed = {name for name in step["vars"] if name != "apt_packages_role"}
    assert handed <= set(load(ROLES_DIR / "apt_packages" / "defaults" / "main.yml"))
    assert all(f"{role}_" in str(step["vars"][name]) for name in handed), step["vars"]
    assert not (ROLES_DIR / role / "tasks" / "apt.yml").exists()


def _flatten(tasks: list) -> list:
    out = []
    for task in tasks or []:
        out.append(task)
        for key in ("block", "rescue", "always"):
            out += _flatten(task.get(key, []))
    return out


@pytest.mark.parametrize("role", ALL_ROLES)
def test_spec_defaults_equal_defaults_file(role: str) -> None:
    defaults = load(ROLES_DIR / role / "defaults" / "main.yml")
    options = spec_options(role)
    assert sorted(options) == sorted(defaults), "argument_specs options and defaults/main.yml keys differ"
    for name, option in options.items():
        assert "default" in option, f"{role}: {name} has no default in argument_specs"
        assert option["default"] == defaults[name], (
            f"{role}: {name}: spec default {option['default']!r} != {defaults[name]!r}"
        )
        assert option.get("type"), f"{role}: {name} has no type"
        assert option.get("description"), f"{role}: {name} has no description"


REPO_ROLES = ["nvidia_driver", "cuda", "cudnn", "preflight"]


@pytest.mark.parametrize("role", REPO_ROLES)
def test_nvidia_repository_defaults_are_the_data(role: str) -> None:
    """NVIDIA's repository is written once, in data/os.yaml: provision passes it to the roles, and a role's defaults
    (what it uses run on its own) hold the same values."""
    from provision.render.role_vars import nvidia_repo_vars

    passed = nvidia_repo_vars(role)
    defaults = load(ROLES_DIR / role / "defaults" / "main.yml")
    assert passed and {name: defaults.get(name) for name in passed} == passed


@pytest.mark.parametrize("role", REPO_ROLES[:3])
@pytest.mark.parametrize("os_name", OS_VARS)
def test_nvidia_repository_directory_per_os_is_the_data(role: str, os_name: str) -> None:
    """vars/<OS>.yml names the OS's directory in NVIDIA's repository ({slug}) as data/os.yaml does; the URL, the
    keyring and the key are the role's inputs, not retyped per OS."""
    from provision.compat import load_db

    distribution, major = os_name.lower().split("-")
    systems = [s for s in load_db().systems if s.distribution == distribution and s.release.split(".")[0] == major]
    assert len(systems) == 1, os_name
    text = (ROLES_DIR / role / "vars" / f"{os_name}.yml").read_text()
    assert load(ROLES_DIR / role / "vars" / f"{os_name}.yml")[f"__{role}_repo_slug"] == systems[0].nvidia_repo
    assert "developer.download.nvidia.com" not in text and "keyring_package" not in text


def _owned() -> list[tuple[str, str, str]]:
    from provision.compat import load_db

    db = load_db()
    rows = [(name, row.path, where) for table in (db.host_paths, db.venv_files) for name, row in table.items()
            for where in row.roles]
    return rows + [(name, row.name, where) for name, row in db.host_units.items() for where in row.roles]


@pytest.mark.parametrize(("name", "path", "where"), _owned(), ids=str)
def test_owned_paths_are_the_roles_defaults(name: str, path: str, where: str) -> None:
    """data/paths.yaml, which the controller's ledger and fingerprint read, says what the roles write: each role
    variable it names holds the path (or a path under it), each task file it names writes the path itself."""
    role, rest = where.split("/", 1)
    if rest.startswith("tasks/"):
        assert path in (ROLES_DIR / role / rest).read_text(), f"{where} does not write {path}"
        return
    values = {**load(ROLES_DIR / role / "defaults" / "main.yml"), **(load(ROLES_DIR / role / "vars" / "main.yml") or {})}
    value = str(values[rest])
    # Named for the role's default unit and kernel names.
    value = value.replace("{{ jupyter_service_name }}", str(values.get("jupyter_service_name", "")))
    value = value.replace("{{ jupyter_kernel_name }}", str(values.get("jupyter_kernel_name", "")))
    assert value == path or value.startswith(path.rstrip("/") + "/"), f"{where} is {value!r}, not under {path}"


def test_the_checks_look_where_the_data_says() -> None:
    """provision/checks (shipped alone, importing nothing of provision) names the Jupyter state directory and unit
    as data/paths.yaml does."""
    from provision.compat import load_db

    db = load_db()
    text = (REPO / "provision" / "checks" / "questions.py").read_text()
    assert f'STATE_DIR = "{db.host_paths["jupyter_state_dir"].path}"' in text
    assert f'SERVICE = "{db.host_units["jupyter"].name}"' in text


def test_every_owned_path_is_tied_to_a_role() -> None:
    from provision.compat import load_db

    db = load_db()
    assert db.host_paths and db.venv_files
    assert all(row.roles for row in [*db.host_paths.values(), *db.host_units.values(), *db.venv_files.values()])


@pytest.mark.parametrize("role", ALL_ROLES)
def test_variables_carry_the_role_prefix(role: str) -> None:
    for name in load(ROLES_DIR / role / "defaults" / "main.yml"):
        assert name.startswith(f"{role}_"), name
    for path in (ROLES_DIR / role / "vars").glob("*.yml"):
        for name in load(path) or {}:
            assert name.startswith(f"__{role}_"), f"{path.name}: {name}"


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("os_name", OS_VARS)
def test_per_os_vars_exist(role: str, os_name: str) -> None:
    assert (ROLES_DIR / role / "vars" / f"{os_name}.yml").is_file()


@pytest.mark.parametrize("role", ROLES)
def test_first_task_asserts_the_platform(role: str) -> None:
    first = load(ROLES_DIR / role / "tasks" / "main.yml")[0]
    assert "ansible.builtin.assert" in first
    message = first["ansible.builtin.assert"]["fail_msg"]
    assert role in message and "ansible_facts['distribution']" in message and "supports" in message


@pytest.mark.parametrize("role", ROLES)
def test_no_ignore_errors(role: str) -> None:
    for path in (ROLES_DIR / role).rglob("*.yml"):
        text = path.read_text()
        assert "ignore_errors" not in text, path


@pytest.mark.parametrize("role", ROLES)
def test_default_scenario_keeps_idempotence(role: str) -> None:
    scenario = load(ROLES_DIR / role / "molecule" / "default" / "molecule.yml")
    sequence = scenario["scenario"]["test_sequence"]
    assert sequence.index("converge") < sequence.index("idempotence") < sequence.index("verify")
    images = {p["image"] for p in scenario["platforms"]}
    assert images <= {"provision/debian:12", "provision/debian:13"}
    assert all(p["pre_build_image"] for p in scenario["platforms"])
    verify = (ROLES_DIR / role / "molecule" / "default" / "verify.yml").read_text()
    assert "that: true" not in verify


def test_lint_config_has_an_empty_skip_list() -> None:
    config = load(REPO / ".ansible-lint")
    assert config["profile"] == "production"
    assert config["skip_list"] == []
    assert {"role-argument-spec", "name[prefix]"} <= set(config["enable_list"])


@pytest.mark.skipif(not (BIN / "ansible-lint").exists(), reason="ansible-lint is not installed next to this Python")
def test_ansible_lint_production_passes() -> None:
    proc = subprocess.run(
        [str(BIN / "ansible-lint"), "--profile", "production", "roles/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_yamllint_passes() -> None:
    yamllint = BIN / "yamllint"
    exe = [str(yamllint)] if yamllint.exists() else [shutil.which("yamllint") or "yamllint"]
    proc = subprocess.run([*exe, "-s", "roles", ".ansible-lint", ".yamllint"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_roles_read_the_environment_with_provision_facts_not_a_copied_script():
    """The roles that install wheels read the environment through one module (plugins/modules/provision_facts.py),
    which runs its interpreter as the owning account; no role carries a requirement checker of its own."""
    assert not sorted(ROLES_DIR.glob("*/files/check_requirements.py"))
    for role in ["python_env", "cuda", "cudnn", "jupyter", "gpu_verify"]:
        text = "".join(p.read_text() for p in (ROLES_DIR / role / "tasks").glob("*.yml"))
        assert "provision.gpu.provision_facts:" in text and "check_requirements" not in text, role


MODULE_NAMES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("role", ALL_ROLES)
def test_roles_call_provisions_modules_by_the_collections_name(role: str) -> None:
    """provision.gpu.provision_facts, never the short name: the same task resolves in the collection installed
    anywhere, through provision's shipped copy (apply, render) and in molecule, without a library path."""
    for path in (ROLES_DIR / role).rglob("*.yml"):
        for name in MODULE_NAMES:
            assert not re.search(rf"^\s+(- )?{name}:\s*$", path.read_text(), re.M), f"{path}: {name} without provision.gpu."


@pytest.mark.parametrize("scenario", sorted(ROLES_DIR.glob("*/molecule/*/molecule.yml")), ids=lambda p: f"{p.parts[-4]}/{p.parts[-2]}")
def test_scenarios_find_provisions_own_modules(scenario: Path) -> None:
    """Roles call provision.gpu.provision_apt_components, provision_facts and provision_python_apt (plugins/modules);
    molecule finds them through ANSIBLE_COLLECTIONS_PATH: the checkout's collections/ layout."""
    config = load(scenario)
    # molecule's prerun would install the repository's collection into ~/.ansible/collections, to outlive the run.
    assert config["prerun"] is False
    env = config["provisioner"]["env"]
    assert "ANSIBLE_LIBRARY" not in env
    path = env["ANSIBLE_COLLECTIONS_PATH"].replace("${MOLECULE_PROJECT_DIRECTORY}", str(scenario.parents[2]))
    for module in MODULE_NAMES:
        assert (Path(path) / "ansible_collections/provision/gpu/plugins/modules" / f"{module}.py").is_file(), path


@pytest.mark.parametrize("role", ALL_ROLES)
def test_roles_that_use_apt_install_python3_apt_first(role: str) -> None:
    """Ansible's apt module needs python3-apt, which a stock Debian lacks: the role installs it before any apt task."""
    from provision.render.ansible import INCLUDED_ROLES

    tasks = ROLES_DIR / role / "tasks"
    if role in INCLUDED_ROLES:
        pytest.skip(f"{role} runs inside the roles that include it, after their python3-apt step (checked for them)")
    if not any("ansible.builtin.apt:" in p.read_text() or "provision.gpu.apt_packages" in p.read_text()
               for p in tasks.glob("*.yml")):
        pytest.skip(f"{role} does not use ansible.builtin.apt")
    main = load(tasks / "main.yml")
    names = [t.get("name", "") for t in main]
    step = next(i for i, n in enumerate(names) if "python3-apt" in n)
    def uses_apt(task: dict) -> bool:
        included = task.get("ansible.builtin.include_tasks")
        if isinstance(included, str) and (tasks / included).is_file() and "apt" not in (tasks / included).read_text():
            return False  # an included file with nothing of apt (python_env's managed.yml unpacks an archive)
        return "include_tasks" in str(task) or "ansible.builtin.apt" in task or "apt_packages" in str(task)

    first_apt_user = next(i for i, t in enumerate(main) if i != step and uses_apt(t))
    # The step is an include of the role's python3_apt.yml, whose one working step is provision's module.
    included = main[step].get("ansible.builtin.include_tasks")
    assert included == "python3_apt.yml", main[step]
    steps = load(tasks / included)
    assert step < first_apt_user and "provision.gpu.provision_python_apt" in steps[0], steps[0]


def test_the_preflight_checks_the_container_engines_own_paths() -> None:
    """The preflight refuses what roles/container_engine would refuse later: at the same snap path and daemon.json."""
    engine_vars, engine_defaults = load(ROLES_DIR / "container_engine/vars/main.yml"), \
        load(ROLES_DIR / "container_engine/defaults/main.yml")
    pre_vars, pre_defaults = load(ROLES_DIR / "preflight/vars/main.yml"), load(ROLES_DIR / "preflight/defaults/main.yml")
    assert pre_vars["__preflight_snap_docker"] == engine_vars["__container_engine_snap_docker"]
    assert pre_defaults["preflight_container_daemon_json"] == engine_defaults["container_engine_daemon_json"]
