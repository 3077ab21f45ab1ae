"""Render a Plan for Ansible: role-prefixed variables, a one-play site.yml over the shipped roles, plan.json.

Every value comes from the Plan; the roles' defaults (meta/argument_specs.yml) cover only what the Plan does
not decide (paths of environment files, timeouts). The play loads vars/plan.yml, whose keys all carry their
role's prefix, so no variable is shared between roles.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import TaggedScalar

import provision.verify
from provision import __version__
from provision.errors import UsageError, printable
from provision.models import Plan
from provision.resources import COLLECTION, collections_dir, share_dir
from provision.verify.expect import Expect

# Order matters: the driver first (libcuda), then the environment, then what installs wheels into it
# (the cuda and cudnn roles refuse to run before python_env has made the venv, for pypi sources).
# host_record runs last and always (even under --tags): it records what is installed now.
# ledger runs first: it removes what the ledger says provision installed for an earlier plan and this one does not
# want, before anything is installed (docs/hosts.md, "The ledger").
ROLES = ("ledger", "nvidia_driver", "python_env", "cuda", "cudnn", "container_engine", "nvidia_container_toolkit",
         "jupyter", "gpu_verify", "host_record")
# Runs in plays of its own before every other play: each host is read once, and when one is refused (a foreign driver,
# a held port, ...) a gate play stops every host of the run before the first change on any (roles/preflight).
PREFLIGHT = "preflight"
# Roles other roles include for the steps they share (roles/apt_packages: cuda's and cudnn's apt steps): never a play's.
INCLUDED_ROLES = ("apt_packages",)
VARS_FILE = "vars/plan.yml"


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


def nvidia_repo_vars(role: str) -> dict[str, Any]:
    """NVIDIA's repository as a role takes it (`<role>_repo_url`, with {slug} and {arch}, the directories per
    architecture, the keyring package and its key's fingerprint), from data/os.yaml: the one place these are written.
    The roles' defaults keep the same values for a run without provision (tests/unit/test_roles.py)."""
    from provision.compat import load_db

    repo = load_db().nvidia_repo
    if repo is None:
        return {}
    if role == "preflight":
        return {"preflight_nvidia_repo_url": repo.url}
    return {f"{role}_repo_url": repo.url, f"{role}_repo_arch_dirs": dict(repo.arch_dirs),
            f"{role}_repo_keyring_package": repo.keyring_package, f"{role}_repo_key_fingerprint": repo.key_fingerprint}


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


@cache
def lab_settings() -> tuple[dict[str, Any], dict[str, Any]]:
    """JupyterLab's settings overrides and page configuration (its news prompt and update check off), as
    roles/jupyter writes them on a host: read from the role's vars/main.yml, the one place they are written, for an
    image's environment (provision.render.docker.jupyter_files)."""
    data = YAML(typ="safe").load((share_dir("roles") / "jupyter" / "vars" / "main.yml").read_text())
    return data["__jupyter_lab_overrides"], data["__jupyter_lab_page_config"]


def kernel_display_name(plan: Plan, *, skip_frameworks: bool = False) -> str:
    """What JupyterLab calls the environment's one kernel: what it runs, e.g. "Python 3.13 · torch 2.7.1 · CUDA 12.6"
    (the frameworks' CUDA, or the plan's where no framework is installed; none for CPU builds)."""
    frameworks = [] if skip_frameworks else list(plan.frameworks)
    parts = [f"Python {plan.python.version}", *(f"{f.package} {f.version}" for f in frameworks)]
    cuda = next((f.cuda for f in frameworks if f.cuda), None) if frameworks else plan.cuda.version
    return " · ".join(parts + ([f"CUDA {cuda}"] if cuda else []))


def managed_python_vars(plan: Plan, fetched: tuple[str, str] | None = None) -> dict[str, Any]:
    """python_env_managed: the archive of a managed interpreter, where the host gets it and the sha256s it may have.
    fetched: (path on the controller, sha256) once `provision apply` fetched and checked it (copied to the host);
    else a mirror directory's file is copied, and a URL (the mirror's or the release's) is downloaded by the host."""
    from provision import interpreters

    managed = plan.python.managed
    if managed is None:
        return {}
    where = interpreters.source(managed)
    local = fetched[0] if fetched else ("" if where.startswith(("http://", "https://")) else where)
    return {
        "version": managed.version,
        "archive": managed.archive,
        "prefix": managed.prefix,
        "src": local,
        "url": "" if local else where,
        "sha256": [fetched[1]] if fetched else interpreters.accepted(managed),
    }


def installer_vars(plan: Plan, fetched: tuple[str, str] | None = None) -> dict[str, Any]:
    """python_env_installer: uv's wheel, where the host gets it (src: the controller's checked copy, which `provision
    apply` fetched; else url, downloaded by the host) and the sha256 it must have. {}: the environment's pip."""
    uv = plan.python.installer
    if uv is None:
        return {}
    return {"version": uv.version, "wheel": uv.wheel, "prefix": uv.prefix, "src": fetched[0] if fetched else "",
            "url": "" if fetched else uv.url, "sha256": uv.sha256}


def ansible_vars(plan: Plan, *, skip_frameworks: bool = False, fetch_dir: str | None = None,
                 full_reason: str = "", partial: bool = False, interpreter: tuple[str, str] | None = None,
                 installer: tuple[str, str] | None = None) -> dict[str, Any]:
    """Each role's inputs (names from its meta/argument_specs.yml), all taken from the Plan. full_reason: why every host
    takes the full path ("" lets a host that matches its last converged apply take the fast one); partial: the run
    applies part of the plan (--tags), so the record keeps no fingerprint."""
    venv, user = plan.python.venv, plan.user
    frameworks = [] if skip_frameworks else [
        {"name": f.name, "requirements": list(f.requirements), "index_url": f.index_url or ""} for f in plan.frameworks
    ]
    expect = Expect.from_plan(plan).to_dict()
    if skip_frameworks:
        expect["frameworks"] = []
    expect["source"] = f"plan:{plan.profile}"
    planned = ledger_planned(plan, skip_frameworks=skip_frameworks)
    # Every role that adds wheels to the environment installs them with uv where the plan names it (python_env
    # unpacks it first), from the plan's index: uv does not read the environment's pip.conf.
    uv = plan.python.installer.binary if plan.python.installer is not None else ""
    index = plan.pip_index_url or ""
    out: dict[str, Any] = {
        "ledger_planned": planned,
        "ledger_venv": venv,
        "ledger_components_wanted": components_wanted(plan),
        "ledger_containers_wanted": plan.containers is not None,
        "nvidia_driver_install": plan.driver.install,
        "nvidia_driver_branch": plan.driver.branch or "",
        "nvidia_driver_source": plan.driver.source,
        "nvidia_driver_packages": list(plan.driver.packages),
        "nvidia_driver_userspace_packages": list(plan.driver.userspace_packages),
        "nvidia_driver_version": plan.driver.version or "",
        "nvidia_driver_min_version": plan.driver.min_version or "",
        "nvidia_driver_kernel_module": plan.driver.kernel_module,
        "nvidia_driver_fabric_manager_service": plan.driver.fabric_manager_service or "",
        "cuda_install": plan.cuda.install,
        "cuda_version": plan.cuda.version,
        "cuda_full_version": plan.cuda.full_version or "",
        "cuda_source": plan.cuda.source,
        "cuda_kind": plan.cuda.kind,
        "cuda_packages": list(plan.cuda.packages),
        "cuda_home": plan.cuda.home,
        "cuda_venv": venv,
        "cuda_venv_owner": user,
        "cuda_uv": uv,
        "cuda_index_url": index,
        "cudnn_install": plan.cudnn.install,
        "cudnn_version": plan.cudnn.version or "",
        "cudnn_full_version": plan.cudnn.full_version or "",
        "cudnn_source": plan.cudnn.source or "pypi",
        "cudnn_packages": list(plan.cudnn.packages),
        "cudnn_venv": venv,
        "cudnn_venv_owner": user,
        "cudnn_uv": uv,
        "cudnn_index_url": index,
        "python_env_user": user,
        "python_env_version": plan.python.version,
        "python_env_interpreter": plan.python.interpreter,
        "python_env_packages": list(plan.python.packages),
        "python_env_venv": venv,
        "python_env_system_site_packages": plan.python.system_site_packages,
        "python_env_requirements": [plan.verify.numpy_requirement],
        "python_env_index_url": plan.pip_index_url or "",
        "python_env_frameworks": frameworks,
        "python_env_managed": managed_python_vars(plan, interpreter),
        "python_env_installer": installer_vars(plan, installer),
        "jupyter_enabled": plan.jupyter.enabled,
        "jupyter_user": user,
        "jupyter_venv": venv,
        "jupyter_requirements": list(plan.jupyter.requirements),
        "jupyter_uv": uv,
        "jupyter_index_url": index,
        "jupyter_port": plan.jupyter.port,
        "jupyter_bind": plan.jupyter.bind,
        "jupyter_auth": plan.jupyter.auth,
        "jupyter_tls": plan.jupyter.tls,
        "jupyter_kernel_display_name": kernel_display_name(plan, skip_frameworks=skip_frameworks),
        "gpu_verify_expect_gpu": plan.verify.expect_gpu,
        "gpu_verify_target_arch": plan.verify.target_arch,
        "gpu_verify_expect": expect,
        "gpu_verify_source": str(verifier_source()),
        "gpu_verify_venv": venv,
        "gpu_verify_user": user,
        "gpu_verify_uv": uv,
        "gpu_verify_index_url": index,
        "gpu_verify_requirements": [*plan.verify.nvrtc_requirements, *plan.verify.cuda_python_requirements,
                                    plan.verify.numpy_requirement],
    }
    for role in ("nvidia_driver", "cuda", "cudnn"):
        out.update(nvidia_repo_vars(role))
    out.update(preflight_vars(plan))
    out.update(containers_vars(plan))
    out["host_record_plan"] = {
        "profile": plan.profile,
        "digest": plan_digest(plan),
        "os": plan.target.os_id,
        "gpu": plan.gpu.model,
        "applied_by": f"provision {__version__}",
        "frameworks_skipped": skip_frameworks,
    }
    out["host_record_packages"] = record_packages(plan)
    out["host_record_venv"] = venv
    out["host_record_ledger_planned"] = planned
    # The fast re-apply (docs/hosts.md): keyed by every input above (the fetch directory and the verifier's place on
    # the controller aside, which differ from run to run and change nothing on the host).
    fingerprint = fingerprint_vars(plan, {k: v for k, v in out.items() if k != "gpu_verify_source"},
                                   skip_frameworks=skip_frameworks)
    out["preflight_fingerprint"] = fingerprint
    out["preflight_fast_reapply"] = not full_reason
    out["preflight_full_reason"] = full_reason or "the fast path was not asked for"
    out["host_record_fingerprint"] = fingerprint
    out["host_record_fingerprint_save"] = not partial
    if fetch_dir:
        out["gpu_verify_fetch_dir"] = fetch_dir
        out["host_record_fetch_dir"] = fetch_dir
    return out


def containers_vars(plan: Plan) -> dict[str, Any]:
    """The inputs of roles/container_engine and roles/nvidia_container_toolkit (CONTAINERS-INTERFACE.md), only where
    the Plan has containers: a plan without them renders the same variables, and fingerprints the same, as before.
    Paths and timeouts (daemon.json, the CDI spec directory, the apt lock) are the roles' defaults."""
    c = plan.containers
    if c is None:
        return {}
    t = c.toolkit
    engine_repo, toolkit_repo = c.engine_repo, t.repo
    return {
        "container_engine_enabled": True,
        "container_engine_name": c.engine,
        "container_engine_source": c.engine_source,
        "container_engine_packages": list(c.engine_packages),
        "container_engine_version": c.engine_version or "",
        "container_engine_repo_url": engine_repo.url if engine_repo else "",
        "container_engine_repo_key_url": engine_repo.key_url if engine_repo else "",
        "container_engine_repo_key_fingerprint": engine_repo.key_fingerprint if engine_repo else "",
        "container_engine_repo_name": engine_repo.name if engine_repo else "",
        "container_engine_cdi": c.cdi,
        "container_engine_rootless_user": c.rootless_user or "",
        "nvidia_container_toolkit_enabled": True,
        "nvidia_container_toolkit_version": t.version or "",
        "nvidia_container_toolkit_source": t.source,
        "nvidia_container_toolkit_packages": list(t.packages),
        "nvidia_container_toolkit_repo_url": toolkit_repo.url if toolkit_repo else "",
        "nvidia_container_toolkit_repo_key_url": toolkit_repo.key_url if toolkit_repo else "",
        "nvidia_container_toolkit_repo_key_fingerprint": toolkit_repo.key_fingerprint if toolkit_repo else "",
        "nvidia_container_toolkit_repo_name": toolkit_repo.name if toolkit_repo else "",
        "nvidia_container_toolkit_mode": t.mode,
        "nvidia_container_toolkit_runtime_configure": t.runtime_configure,
        "nvidia_container_toolkit_runtime_mode": t.runtime_mode or "",
    }


def preflight_vars(plan: Plan) -> dict[str, Any]:
    """The preflight role's inputs: what the Plan installs that something found on the host could stop."""
    driver = plan.driver
    return {
        "preflight_driver_branch": (driver.branch or "") if driver.install else "",
        "preflight_driver_packages": sorted({p.split("=")[0] for p in [*driver.packages, *driver.userspace_packages]}),
        "preflight_nvidia_repo_planned": nvidia_repo_planned(plan),
        "preflight_jupyter_port": plan.jupyter.port if plan.jupyter.enabled else 0,
        "preflight_jupyter_bind": plan.jupyter.bind,
        "preflight_account": plan.user,
        **nvidia_repo_vars("preflight"),
        **preflight_containers_vars(plan),
    }


def preflight_containers_vars(plan: Plan) -> dict[str, Any]:
    """What the preflight checks of the container engine (roles/container_engine refuses the same, later): only where
    the Plan has containers, so a plan without them renders and fingerprints as before. daemon.json's path is the
    roles' default; the keys are those container_engine merges (its __container_engine_daemon_values)."""
    c = plan.containers
    if c is None:
        return {}
    return {
        "preflight_container_engine": c.engine,
        "preflight_container_daemon_values": {"features": {"cdi": True}} if c.engine == "docker" and c.cdi else {},
        "preflight_container_rootless_user": c.rootless_user or "",
    }


def _role(name: str) -> dict[str, Any]:
    # By the collection's name (provision.gpu.cuda), so the playbook runs wherever the collection is installed.
    # Each role is tagged with its short name (`provision apply --tags cuda`); host_record also runs under any --tags.
    return {"role": f"{COLLECTION}.{name}", "tags": [name, "always"] if name == "host_record" else [name]}


def _include_role(name: str) -> dict[str, Any]:
    """The role as a task that includes it when the play reaches it (`_role`'s name and tags, the tags applied to
    its tasks too): a play of included roles costs nothing to load when no host takes it. The full path's play is
    written this way, so a fast re-apply does not parse the roles it skips (0.4 s of ansible-playbook's start)."""
    role = _role(name)
    return {"name": f"Run the role {name}",
            "ansible.builtin.include_role": {"name": role["role"], "apply": {"tags": role["tags"]}},
            "tags": role["tags"]}


# The groups the preflight puts each host in (roles/preflight): every role runs on provision_full; only the verifier
# and the record on provision_fast, the hosts whose fingerprint, plan and roles match their last converged apply.
FULL_GROUP, FAST_GROUP = "provision_full", "provision_fast"
FAST_ROLES = ("gpu_verify", "host_record")


def _hosts_and(hosts: str | list[str], group: str) -> list[str]:
    """A host pattern: `hosts` that are also in `group` (Ansible's `&` in a list of patterns)."""
    return [*([hosts] if isinstance(hosts, str) else hosts), f"&{group}"]


# What one role hands another through the playbook (no role reads another's variables): the apply lock the
# preflight's gate took (preflight_lock, registered there) goes to host_record, which releases it; the notes of what
# the apply found and finished on its way (a stale lock taken over, the ledger's finished dpkg work) go to
# host_record too, which hands them to the controller for the summary (notes.json beside the record).
HANDOVER = {"host_record_lock_token": "{{ preflight_lock.token | default('') }}"}
LOCK_NOTE = "([preflight_lock.note] if preflight_lock.note | default('') else [])"


# What a destroy does with the host's apply lock after the ledger role removed what it lists (the gate play took the
# lock before, and refused a host a live apply holds): the note of a stale lock taken over goes to the controller
# (notes.json, as host_record hands an apply's), and the lock is released. Where /var/lib/provision was provision's,
# the ledger removed it last, lock and all (plugins/modules/provision_ledger.py): the release then finds none.
DESTROY_LOCK_TASKS: list[dict[str, Any]] = [
    {"name": "Hand the note of a stale lock taken over to the controller",
     "when": "preflight_lock.note | default('') | length > 0",
     "delegate_to": "localhost", "become": False, "check_mode": False,
     "block": [
         {"name": "Create the host's folder of the reports",
          "ansible.builtin.file": {"path": "{{ playbook_dir }}/reports/{{ inventory_hostname }}", "state": "directory",
                                   "mode": "0755"},
          "changed_when": False},
         {"name": "Write the note beside where an apply's record goes",
          "ansible.builtin.copy": {"content": "{{ [preflight_lock.note] | to_nice_json }}\n",
                                   "dest": "{{ playbook_dir }}/reports/{{ inventory_hostname }}/notes.json",
                                   "mode": "0644"},
          "changed_when": False}]},
    {"name": "Release the apply lock on the host",
     "provision.gpu.provision_lock": {"state": "release",
                                      "path": "{{ preflight_lock_path | default('/var/lib/provision/apply.lock') }}",
                                      "holder": {"token": "{{ preflight_lock.token }}"}},
     "changed_when": False,
     "when": "preflight_lock.token | default('') | length > 0"},
]


def site_playbook(plan: Plan, hosts: str | list[str] = "all", vars_file: str = VARS_FILE, *,
                  destroy: bool = False) -> list[dict[str, Any]]:
    """The plays of one Plan, after its preflight play: every role on the hosts of the full path, the verifier and
    the record on those of the fast path. The preflight play gathered the facts the roles read (`min`, `virtual`);
    these plays keep them. destroy: one play with only the ledger role, which removes everything the ledger lists
    (no preflight: it gathers its own facts), under the host's apply lock the gate play took (DESTROY_LOCK_TASKS)."""
    title = f"{plan.profile} ({plan.target.os_id}, {plan.gpu.model})"
    if destroy:
        return [{
            "name": f"Destroy {title}",
            "hosts": hosts,
            "become": True,
            "gather_subset": ["min", "virtual"],
            "environment": "{{ provision_environment | default({}) }}",
            "vars_files": [vars_file],
            "roles": [_role("ledger")],
            "post_tasks": DESTROY_LOCK_TASKS,
        }]
    common = {
        "become": True,
        "gather_facts": False,
        # Extra environment for every task, set per host in the inventory (the sandbox points pip at its cache).
        "environment": "{{ provision_environment | default({}) }}",
        "vars_files": [vars_file],
    }
    return [
        {"name": f"Provision {title}", "hosts": _hosts_and(hosts, FULL_GROUP), **common,
         "vars": {**HANDOVER, "host_record_notes": f"{{{{ {LOCK_NOTE} + (ledger_finished | default([])) }}}}"},
         "tasks": [_include_role(name) for name in ROLES]},
        {"name": f"Verify {title} (fingerprint matches its last converged apply: no role has anything to do)",
         "hosts": _hosts_and(hosts, FAST_GROUP), **common,
         "vars": {"host_record_fast": True, "gpu_verify_assume_installed": True, **HANDOVER,
                  "host_record_notes": f"{{{{ {LOCK_NOTE} }}}}"},
         "roles": [_role(name) for name in FAST_ROLES]},
    ]


def preflight_play(plan: Plan, hosts: str | list[str] = "all", vars_file: str = VARS_FILE) -> dict[str, Any]:
    """Read each host of a group once and refuse it, before any play changes anything (tagged always: it runs
    under --tags too)."""
    return {
        "name": f"Preflight {plan.profile}: refuse what would make the plan fail, before the first change",
        "hosts": hosts,
        "become": True,
        # What the roles read too (distribution, architecture, kernel, service manager, Python, FQDN,
        # virtualization): the plays after this one keep these facts and gather none.
        "gather_subset": ["min", "virtual"],
        "vars_files": [vars_file],
        "roles": [{"role": f"{COLLECTION}.{PREFLIGHT}", "tags": [PREFLIGHT, "always"]}],
    }


def gate_play(hosts: str | list[str], lock: dict[str, Any] | None = None) -> dict[str, Any]:
    """After every group's preflight: when any host was refused, every other host of the run stops too. Then each
    host's apply lock is taken (plugins/modules/provision_lock.py); lock: {"holder": who takes it, "live_tokens":
    the runs still going on that controller}, as provision.pipeline.render.lock_holder says (a rendered playbook run by hand: the lock
    module makes a token of its own)."""
    return {
        "name": "Preflight gate: change every host or none",
        "hosts": hosts,
        "gather_facts": False,
        **({"vars": unsafe_strings({"preflight_lock_holder": lock.get("holder") or {},
                                    "preflight_lock_live_tokens": lock.get("live_tokens") or []})} if lock else {}),
        "tasks": [{"name": "Stop when the preflight refused a host of this run",
                   "ansible.builtin.import_role": {"name": f"{COLLECTION}.{PREFLIGHT}", "tasks_from": "gate"},
                   "tags": [PREFLIGHT, "always"]}],
    }


def write_yaml(data: Any, path: Path) -> None:
    """YAML as yamllint and ansible-lint want it (a play list at column 0, two-space indents), behind `---`."""
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)  # yamllint's (and ansible-lint's) indentation
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    if isinstance(data, list):  # a play list: top-level items at column 0, nested sequences indented
        for item in data:
            inner = io.StringIO()
            yaml.dump(item, inner)
            buf.write("- " + "\n  ".join(inner.getvalue().rstrip("\n").split("\n")) + "\n")
    else:
        yaml.dump(data, buf)
    path.write_text("---\n" + buf.getvalue())


def render_ansible(plan: Plan, out_dir: str | Path, *, inventory: dict[str, Any] | str | Path | None = None,
                   skip_frameworks: bool = False) -> dict[str, Path]:
    """Write site.yml, vars/plan.yml, plan.json (and inventory.yml when given) into out_dir. Returns the paths."""
    return render_fleet([(plan, None)], out_dir, inventory=inventory, skip_frameworks=skip_frameworks)


def render_fleet(groups: list[tuple[Plan, list[str] | None]], out_dir: str | Path, *,
                 inventory: dict[str, Any] | str | Path | None = None, skip_frameworks: bool = False,
                 destroy: bool = False, purge_home: bool = False, full_reason: str = "",
                 partial: bool = False, interpreters: dict[str, tuple[str, str]] | None = None,
                 lock: dict[str, Any] | None = None) -> dict[str, Path]:
    """One play per (plan, hosts) group, in one playbook: Ansible runs every host in parallel, each with its own
    profile's variables. hosts None means every host in the inventory (a single plan). With one group the files are
    site.yml, vars/plan.yml and plan.json; with more, vars/plan-<n>.yml and plan-<n>.json per group.
    full_reason: why no host may take the fast path ("" lets them); partial: --tags (ansible_vars); interpreters: the managed
    interpreters' archives and the installer's wheel apply fetched and checked, {file name: (path on the controller,
    sha256)}; lock: who takes each host's apply lock (gate_play)."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    files = {"playbook": out / "site.yml"}
    plays: list[dict[str, Any]] = []
    preflights: list[dict[str, Any]] = []
    sources = []
    for n, (plan, hosts) in enumerate(groups, start=1):
        suffix = "" if len(groups) == 1 else f"-{n}"
        vars_rel = f"vars/plan{suffix}.yml"
        files[f"vars{suffix}"] = out / vars_rel
        files[f"plan{suffix}"] = out / f"plan{suffix}.json"
        if not destroy:  # destroy removes only what the ledger lists: nothing found on the host can stop that
            preflights.append(preflight_play(plan, hosts if hosts is not None else "all", vars_rel))
        plays += site_playbook(plan, hosts if hosts is not None else "all", vars_rel, destroy=destroy)
        fetched = (interpreters or {}).get(plan.python.managed.archive) if plan.python.managed else None
        uv = (interpreters or {}).get(plan.python.installer.wheel) if plan.python.installer else None
        role_vars = ansible_vars(plan, skip_frameworks=skip_frameworks, fetch_dir=str(out / "reports"), full_reason=full_reason,
                                 partial=partial, interpreter=fetched, installer=uv)
        if destroy:
            role_vars |= {"ledger_destroy": True, "ledger_purge_home": purge_home}
        write_yaml(unsafe_strings(role_vars), files[f"vars{suffix}"])
        _header(files[f"vars{suffix}"], plan.profile_path or plan.profile)
        files[f"plan{suffix}"].write_text(json.dumps(plan.model_dump(mode="json"), indent=2) + "\n")
        sources.append(plan.profile_path or plan.profile)
    every: str | list[str] = "all" if any(h is None for _, h in groups) else sorted({h for _, hs in groups for h in hs or []})
    # destroy has no preflight, but takes the host's apply lock as an apply does (the gate play): a live apply is
    # refused before anything is removed.
    write_yaml([*preflights, gate_play(every, lock), *plays] if preflights or destroy else plays, files["playbook"])
    _header(files["playbook"], ", ".join(sources))
    if inventory is not None:
        files["inventory"] = out / "inventory.yml"
        if isinstance(inventory, dict):
            write_yaml(inventory, files["inventory"])
        else:
            files["inventory"].write_text(Path(inventory).read_text())
    return files


JINJA_MARKS = ("{{", "{%", "{#")


def unsafe_strings(data: Any) -> Any:
    """`data` with every string that holds a Jinja delimiter tagged `!unsafe`, which Ansible never templates. The
    Plan's values cannot hold one (provision.plan_rules); the paths of the controller (the -o directory, where
    provision is installed) can, and a variable's value is otherwise templated when a task uses it."""
    if isinstance(data, dict):
        return {key: unsafe_strings(value) for key, value in data.items()}
    if isinstance(data, list):
        return [unsafe_strings(value) for value in data]
    if isinstance(data, str) and any(mark in data for mark in JINJA_MARKS):
        return TaggedScalar(data, style='"', tag="!unsafe")
    return data


def _header(path: Path, source: str) -> None:
    # A comment line: a line break in a file name would end it, and what followed would be YAML (a play, say).
    header = f"# Generated by provision from {printable(source)}; edit the profile, not this file.\n"
    path.write_text("---\n" + header + path.read_text().removeprefix("---\n"))


def check_ansible_path(path: str | Path, what: str) -> None:
    """Refuse a path Ansible would not open: it expands $NAME (and ${NAME}) in the paths it is given (an inventory,
    a playbook, a directory's ansible.cfg), so it would read another file, or none."""
    text = str(Path(path).resolve())
    if os.path.expandvars(text) != text:
        raise UsageError(f"{what} {path}: Ansible reads '$NAME' in a path as an environment variable and would open "
                         "another file; use a file and directory whose path has no '$'")


EXAMPLE_INVENTORY = {"all": {"hosts": {"gpu-box": {
    "ansible_host": "192.0.2.10",  # TEST-NET-1: never a real machine; put the host's address here
    "ansible_user": "admin",
}}}}


def write_standalone(out_dir: str | Path, files: dict[str, Path], *, profile: str, os_override: str | None,
                     skip_frameworks: bool, image_tag: str, image_context: bool,
                     base_image: str | None = None) -> dict[str, Path]:
    """What makes a rendered directory run on its own (`provision render -o DIR`): ansible.cfg naming the shipped
    collection provision.gpu (as `provision apply` passes it to ansible-runner) and the inventory, an example
    inventory when none was given, and README.md with the exact commands. Returns the paths it wrote."""
    out = Path(out_dir).resolve()
    written: dict[str, Path] = {}
    if "inventory" not in files:
        written["inventory"] = out / "inventory.yml"
        write_yaml(EXAMPLE_INVENTORY, written["inventory"])
        text = written["inventory"].read_text().removeprefix("---\n")
        written["inventory"].write_text("---\n# An example: replace gpu-box's address and account with your machine's "
                                        "(or render with -i INVENTORY).\n" + text)
    written["ansible.cfg"] = out / "ansible.cfg"
    written["ansible.cfg"].write_text(
        "# Generated by provision: the collection provision.gpu (roles and modules) of the provision installation\n"
        "# that rendered this directory, ahead of Ansible's usual places (without the collections_path line, the one\n"
        "# installed with ansible-galaxy runs instead).\n"
        "[defaults]\n"
        "inventory = inventory.yml\n"
        f"collections_path = {collections_dir()}:~/.ansible/collections:/usr/share/ansible/collections\n"
        "retry_files_enabled = false\n"
        "\n"
        "[ssh_connection]\n"
        "pipelining = true\n"
    )
    # The commands a person copies: each word shell-quoted (a profile path with a space, a quote or a `$` runs on
    # that file), the profile absolute so that they run from any directory, `cd` included.
    args = [str(Path(profile).resolve()), *(["--os", os_override] if os_override else []),
            *(["--skip-frameworks"] if skip_frameworks else []), *(["--base-image", base_image] if base_image else [])]
    docker_build = shlex.join(["docker", "build", "-t", image_tag, str(out)])
    if image_context:
        docker = (f"    {docker_build}\n\n"
                  "The build context (wheels/, provision/, docker/) is in this directory; the wheels were downloaded "
                  "for the base image's Python and C library.\n")
    else:
        docker = (f"    {shlex.join(['provision', 'render', *args, '-o', str(out), '--image-context'])}\n"
                  f"    {docker_build}\n\n"
                  "The Dockerfile installs the plan's wheels from its build context (no step needs the network); "
                  "`--image-context` downloads them into this directory first, beside provision/ and docker/. "
                  f"`{shlex.join(['provision', 'build', *args])}` does both in one step.\n")
    written["readme"] = out / "README.md"
    written["readme"].write_text(
        f"# Rendered by provision from {printable(profile)}\n\n"
        "Edit the profile and render again rather than editing these files.\n\n"
        "## Provision hosts with Ansible\n\n"
        f"Put your hosts in inventory.yml, then, in this directory:\n\n"
        f"    {shlex.join(['cd', str(out)])}\n"
        "    ansible-playbook site.yml\n\n"
        "ansible.cfg names the collection provision.gpu (the roles and provision's Ansible modules) and the "
        "inventory. Add `--check` for a dry run, "
        "`-K` when sudo asks for a password. The play escalates with sudo (`become: true`).\n\n"
        "## Build the Docker image\n\n"
        f"{docker}"
    )
    return written
