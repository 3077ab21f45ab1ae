"""What provision derives from a Plan for a host, in one place: the ledger's planned items (ledger_planned), the
record's packages (record_packages), the plan's digest (plan_digest), the roles' version (roles_version) and the fast
re-apply's fingerprint (fingerprint_vars), with its inputs declared (FINGERPRINT_KEY, PER_RUN).

provision.render.role_vars renders the roles' variables from these; provision.ledger, provision.pipeline.record and
the checks read them without rendering anything. docs/hosts.md, "The fast re-apply" and "The ledger".
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import provision.verify
from provision import __version__
from provision.models import Plan
from provision.resources import share_dir


def plan_digest(plan: Plan) -> str:
    """A short, stable digest of what the Plan decides (not where its profile lies or how its reasons read)."""
    data = plan.model_dump(mode="json", exclude={"profile_path", "reasons", "warnings"})
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def nvidia_repo_planned(plan: Plan) -> bool:
    """Whether the Plan installs anything from NVIDIA's CUDA repository (the roles then add it)."""
    return ((plan.driver.install and plan.driver.source == "nvidia-repo")
            or (plan.cuda.install and plan.cuda.source == "nvidia-repo")
            or (plan.cudnn.install and plan.cudnn.source == "nvidia-repo"))


def nvidia_keyring_package() -> str:
    """The package NVIDIA's repository is added with (data/os.yaml nvidia_repo.keyring_package, its file's name up
    to the version): it writes the repository's entry and keyring, so owning it owns them."""
    from provision.compat import load_db

    repo = load_db().nvidia_repo
    return repo.keyring_package.split("_")[0] if repo is not None else ""


def record_packages(plan: Plan) -> list[str]:
    """The OS packages whose installed versions host_record reports and the ledger owns: the driver's, CUDA's and
    cuDNN's from apt, and NVIDIA's keyring package where the plan adds its repository (removed with the plan that
    named it: the repository's entry and keyring go with it)."""
    names = [*plan.driver.packages, *plan.driver.userspace_packages]
    if plan.cuda.source != "pypi":
        names += plan.cuda.packages
    if plan.cudnn.source not in (None, "pypi"):
        names += plan.cudnn.packages
    if nvidia_repo_planned(plan):
        names.append(nvidia_keyring_package())
    if plan.containers is not None:  # the engine and the toolkit: a plan that drops containers removes them
        names += [*plan.containers.engine_packages, *plan.containers.toolkit.packages]
    return sorted({n.split("=")[0] for n in names if n})


@cache
def host_paths() -> dict[str, str]:
    """The paths provision owns on a host, by name (data/paths.yaml, which names the role variables that hold the same
    values; tests/unit/test_roles.py checks them)."""
    from provision.compat import load_db

    return {name: row.path for name, row in load_db().host_paths.items()}


@cache
def host_units() -> dict[str, str]:
    """provision's systemd units on a host, by name (data/paths.yaml)."""
    from provision.compat import load_db

    return {name: row.name for name, row in load_db().host_units.items()}


def ledger_planned(plan: Plan, *, skip_frameworks: bool = False) -> dict[str, Any]:
    """What the Plan has provision own on a host, for the ledger (roles/ledger, host_record): the packages it names,
    the distributions it names, the paths it writes, its units, its account and its environment. The paths and units
    are data/paths.yaml's, which the roles' defaults hold too (the playbook does not override them)."""
    from packaging.requirements import InvalidRequirement, Requirement

    wheels = []
    for text in plan.pip_requirements(frameworks=not skip_frameworks):
        try:
            wheels.append(Requirement(text).name)
        except InvalidRequirement:
            continue
    at = host_paths()
    paths = [at["config_dir"], at["prefix"], at["state_dir"], at["verify_reports"], at["cache_dir"]]
    if plan.cuda.install:
        paths += [at["cuda_profile_script"], at["cuda_env_file"]]
    if plan.cudnn.install:
        paths += [at["cudnn_profile_script"], at["cudnn_env_file"]]
    if plan.jupyter.enabled:
        paths += [at["jupyter_state_dir"]]
    if plan.driver.install:
        paths += [at["nouveau_blacklist"], at["driver_pin"]]
    if plan.python.managed is not None:  # the interpreter python_env unpacks: a plan that no longer names it removes it
        paths += [plan.python.managed.prefix]
    if plan.python.installer is not None:  # uv, which python_env unpacks: another version's directory is removed
        paths += [str(PurePosixPath(plan.python.installer.prefix).parent), plan.python.installer.prefix]
    if plan.containers is not None:
        paths += container_paths(plan)
    return {
        "packages": record_packages(plan),
        "wheels": sorted(set(wheels)),
        "paths": sorted(paths),
        "units": [host_units()["jupyter"]] if plan.jupyter.enabled else [],
        "accounts": [plan.user],
        "venv": plan.python.venv,
        "python": plan.python.version,
        # The environment is made again when its bin/python is another interpreter (system <-> managed).
        "interpreter": plan.python.interpreter,
    }


def container_paths(plan: Plan) -> list[str]:
    """What the container roles write for a plan with containers (roles/container_engine, nvidia_container_toolkit):
    the toolkit's pin and runtime configuration (its postinst creates config.toml, which dpkg's purge leaves),
    containerd's drop-in, and the keyring and sources entry of each repository added with its published key."""
    assert plan.containers is not None
    at = host_paths()
    paths = [at["container_toolkit_pin"], at["container_runtime_config_dir"]]
    if plan.containers.toolkit.runtime_configure == "containerd":
        paths.append(at["containerd_dropin"])
    for repo in (plan.containers.toolkit.repo, plan.containers.engine_repo):
        if repo is not None:
            paths += [f"{at['apt_keyrings_dir']}/{repo.name}.asc", f"{at['apt_keyrings_dir']}/{repo.name}.gpg",
                      f"{at['apt_sources_dir']}/{repo.name}.sources"]
    return paths


def originals_kept(plan: Plan) -> list[str]:
    """The users' files a tool rewrites for this plan, whose originals provision keeps (plugins/modules/
    provision_originals.py): containerd's config.toml where nvidia-ctk configures containerd. The ledger puts back
    the others it recorded."""
    if plan.containers is not None and plan.containers.toolkit.runtime_configure == "containerd":
        return [host_paths()["containerd_config"]]
    return []


@cache
def roles_version() -> str:
    """provision's version and a digest of what the hosts run (the collection's roles and modules, and the verifier
    gpu_verify installs; a wheel carries these, not the collection's meta/): a host whose record names another took
    its last apply from another provision, and takes the full path (the fast re-apply)."""
    digest = hashlib.sha256()
    for top in (share_dir("roles"), share_dir("plugins"), verifier_source()):
        for path in sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(str(path.relative_to(top.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{__version__}+{digest.hexdigest()[:16]}"


# Packages the roles need that a stock host may already have (so the ledger does not list them): changed by hand,
# they make the next apply take the full path too.
ROLE_PREREQUISITES = ("acl", "python3-apt", "python3-packaging", "python3-venv", "sudo")
# What the fast re-apply leaves out of the files it reads (names in data/paths.yaml): the environment (its
# distributions count instead), the verifier's reports, the record, the ledger and the lock (written on every apply),
# the downloads' cache.
FINGERPRINT_SKIP = ("verify_reports", "record", "ledger", "lock", "cache_dir")


def fingerprint_vars(plan: Plan, key_vars: dict[str, Any], *, skip_frameworks: bool = False) -> dict[str, Any]:
    """What the fast re-apply reads on a host (the fingerprint option of provision_preflight, which compares it, and of
    provision_facts, which reads it for the record) and what must match besides:
    the roles' inputs (key_vars, the rendered variables) and the roles' version."""
    from provision.compat import load_db

    planned = ledger_planned(plan, skip_frameworks=skip_frameworks)
    at = host_paths()
    files = [*planned["paths"], at["lib_dir"]]
    skip = {*(at[name] for name in FINGERPRINT_SKIP), plan.python.venv}
    if plan.jupyter.enabled:
        files.append(at["jupyter_unit_file"])
    if plan.containers is not None and "docker" in (plan.containers.engine, plan.containers.toolkit.runtime_configure):
        # provision's keys in Docker's configuration (roles/container_engine, nvidia_container_toolkit): an edit
        # takes the full path, which puts a key provision owns back or refuses the user's conflicting one.
        files.append(at["docker_daemon_json"])
    if plan.python.managed is not None:
        # A managed interpreter counts by its directory's owner and mode and by the stamp python_env writes once it
        # is whole (the archive's sha256 in it), not file by file: thousands of root-owned files read on every apply.
        skip.add(plan.python.managed.prefix)
        files.append(f"{plan.python.managed.prefix}/.provision-complete")
    if plan.python.installer is not None:  # uv the same way: by its stamp, not its 38 MB binary read each time
        skip.add(plan.python.installer.prefix)
        files.append(f"{plan.python.installer.prefix}/.provision-complete")
    return {
        "ledger": at["ledger"],
        "record": at["record"],
        "packages": sorted({*planned["packages"], *(p.split("=")[0] for p in plan.python.packages),
                            *ROLE_PREREQUISITES}),
        "files": sorted(files),
        "skip": sorted(skip),
        "units": list(planned["units"]),
        "accounts": list(planned["accounts"]),
        # The environment's files the roles write (data/paths.yaml venv_files), read by the environment's account.
        "venv": {"path": plan.python.venv, "owner": plan.user,
                 "checksums": [row.path for row in load_db().venv_files.values()]},
        "key": {"vars": hashlib.sha256(json.dumps(key_vars, sort_keys=True, default=str).encode()).hexdigest()[:16],
                "roles": roles_version()},
    }


def components_wanted(plan: Plan) -> bool:
    """Whether the Plan installs from Debian's archive (the components provision adds: contrib, non-free)."""
    # NVIDIA's repository on Debian needs contrib (roles/nvidia_driver, __nvidia_driver_repo_debian_components).
    return plan.target.os_id.startswith("debian") and (
        (plan.driver.install and plan.driver.source in ("debian", "nvidia-repo"))
        or (plan.cuda.install and plan.cuda.source == "debian")
        or (plan.cudnn.install and plan.cudnn.source == "debian"))


def verifier_source() -> Path:
    """provision/verify on the controller: the gpu_verify role copies it to the hosts."""
    return Path(provision.verify.__file__).resolve().parent


def kernel_display_name(plan: Plan, *, skip_frameworks: bool = False) -> str:
    """What JupyterLab calls the environment's one kernel: what it runs, e.g. "Python 3.13 · torch 2.7.1 · CUDA 12.6"
    (the frameworks' CUDA, or the plan's where no framework is installed; none for CPU builds)."""
    frameworks = [] if skip_frameworks else list(plan.frameworks)
    parts = [f"Python {plan.python.version}", *(f"{f.package} {f.version}" for f in frameworks)]
    cuda = next((f.cuda for f in frameworks if f.cuda), None) if frameworks else plan.cuda.version
    return " · ".join(parts + ([f"CUDA {cuda}"] if cuda else []))


# The fast re-apply's key (fingerprint_vars' key.vars): the role variables whose values decide what the roles converge
# a host to. A host whose recorded key differs takes the full path. Every role variable provision renders (the vars
# file, the plays' vars) is declared here or in PER_RUN; tests/unit/test_fingerprint_schema.py fails on one in neither,
# and fingerprint_key counts such a one in the key (a host takes the full path once too often, never the fast path
# wrongly). Declared per role, as its meta/argument_specs.yml names them.
FINGERPRINT_KEY = frozenset({
    "ledger_planned", "ledger_venv", "ledger_components_wanted", "ledger_containers_wanted", "ledger_originals_kept",
    "nvidia_driver_install", "nvidia_driver_branch", "nvidia_driver_source", "nvidia_driver_packages",
    "nvidia_driver_userspace_packages", "nvidia_driver_version", "nvidia_driver_min_version",
    "nvidia_driver_kernel_module", "nvidia_driver_fabric_manager_service", "nvidia_driver_repo_url",
    "nvidia_driver_repo_arch_dirs", "nvidia_driver_repo_keyring_package", "nvidia_driver_repo_key_fingerprint",
    "cuda_install", "cuda_version", "cuda_full_version", "cuda_source", "cuda_kind", "cuda_packages", "cuda_home",
    "cuda_venv", "cuda_venv_owner", "cuda_uv", "cuda_index_url", "cuda_repo_url", "cuda_repo_arch_dirs",
    "cuda_repo_keyring_package", "cuda_repo_key_fingerprint",
    "cudnn_install", "cudnn_version", "cudnn_full_version", "cudnn_source", "cudnn_packages", "cudnn_venv",
    "cudnn_venv_owner", "cudnn_uv", "cudnn_index_url", "cudnn_repo_url", "cudnn_repo_arch_dirs",
    "cudnn_repo_keyring_package", "cudnn_repo_key_fingerprint",
    # python_env_managed and python_env_installer hold the controller's checked copy (src): the cache's path, the
    # same on every apply from one controller.
    "python_env_user", "python_env_version", "python_env_interpreter", "python_env_packages", "python_env_venv",
    "python_env_system_site_packages", "python_env_requirements", "python_env_index_url", "python_env_frameworks",
    "python_env_managed", "python_env_installer",
    "jupyter_enabled", "jupyter_user", "jupyter_venv", "jupyter_requirements", "jupyter_uv", "jupyter_index_url",
    "jupyter_port", "jupyter_bind", "jupyter_auth", "jupyter_tls", "jupyter_kernel_display_name",
    "gpu_verify_expect_gpu", "gpu_verify_target_arch", "gpu_verify_expect", "gpu_verify_venv", "gpu_verify_user",
    "gpu_verify_uv", "gpu_verify_index_url", "gpu_verify_requirements",
    "preflight_driver_branch", "preflight_driver_packages", "preflight_nvidia_repo_planned",
    "preflight_jupyter_port", "preflight_jupyter_bind", "preflight_account", "preflight_nvidia_repo_url",
    "preflight_container_engine", "preflight_container_daemon_values", "preflight_container_rootless_user",
    "container_engine_enabled", "container_engine_name", "container_engine_source", "container_engine_packages",
    "container_engine_version", "container_engine_repo_url", "container_engine_repo_key_url",
    "container_engine_repo_key_fingerprint", "container_engine_repo_name", "container_engine_cdi",
    "container_engine_rootless_user",
    "nvidia_container_toolkit_enabled", "nvidia_container_toolkit_version", "nvidia_container_toolkit_source",
    "nvidia_container_toolkit_packages", "nvidia_container_toolkit_repo_url", "nvidia_container_toolkit_repo_key_url",
    "nvidia_container_toolkit_repo_key_fingerprint", "nvidia_container_toolkit_repo_name",
    "nvidia_container_toolkit_mode", "nvidia_container_toolkit_runtime_configure",
    "nvidia_container_toolkit_runtime_mode", "nvidia_container_toolkit_containerd_cdi",
    "host_record_plan", "host_record_packages", "host_record_venv", "host_record_ledger_planned",
})

# The role variables that differ from run to run and change nothing the roles converge a host to: left out of the
# key, each with why.
_REPORTS = "the run's folder on the controller the reports come back to: nothing on the host"
_FAST = "whether this run lets a host take the fast path (--full, --tags, a password given): the full path converges"
_FINGERPRINT = "the fingerprint itself (what is read on the host and its key), not an input to it"
_PLAY = "set by the fast play: which path the preflight chose, from the fingerprint"
_LOCK = "this run's apply lock and notes, handed from role to role (render.ansible.HANDOVER): nothing converges from them"
_DESTROY = "destroy: removes what the ledger lists and keeps no fingerprint, never a fast path"
PER_RUN: dict[str, str] = {
    "gpu_verify_source": "where provision lies on the controller: the verifier's files count in key.roles "
                         "(roles_version digests them), not by their place",
    "gpu_verify_fetch_dir": _REPORTS,
    "host_record_fetch_dir": _REPORTS,
    "preflight_fast_reapply": _FAST,
    "preflight_full_reason": _FAST,
    "host_record_fingerprint_save": "--tags: a partial run keeps no fingerprint, so the next apply takes the full path",
    "preflight_fingerprint": _FINGERPRINT,
    "host_record_fingerprint": _FINGERPRINT,
    "host_record_fast": _PLAY,
    "gpu_verify_assume_installed": _PLAY,
    "host_record_lock_token": _LOCK,
    "host_record_notes": _LOCK,
    "preflight_lock_holder": _LOCK,
    "preflight_lock_live_tokens": _LOCK,
    "ledger_destroy": _DESTROY,
    "ledger_purge_home": _DESTROY,
}


def fingerprint_key(role_vars: dict[str, Any]) -> dict[str, Any]:
    """The role variables the fingerprint is keyed by: all but the per-run ones (PER_RUN). One declared in neither
    FINGERPRINT_KEY nor PER_RUN counts too (the safe side: a changed input sends a host down the full path)."""
    return {name: value for name, value in role_vars.items() if name not in PER_RUN}


def undeclared(names: Any) -> list[str]:
    """The role variables among `names` declared neither part of the fingerprint's key nor per-run."""
    return sorted(set(names) - FINGERPRINT_KEY - set(PER_RUN))
