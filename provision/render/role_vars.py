"""The roles' variables, rendered from a Plan (names from each role's meta/argument_specs.yml, all prefixed with
their role's name): what vars/plan.yml holds. provision.render.ansible writes them out with the plays.

Every value comes from the Plan; the roles' defaults cover only what the Plan does not decide (paths of environment
files, timeouts). What the Plan decides about the host itself (the ledger's items, the record's packages, the
fingerprint and which variables key it) is provision.hostfacts'.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ruamel.yaml import YAML

from provision import __version__
from provision.hostfacts import (
    components_wanted,
    fingerprint_key,
    fingerprint_vars,
    kernel_display_name,
    ledger_planned,
    nvidia_repo_planned,
    originals_kept,
    plan_digest,
    record_packages,
    verifier_source,
)
from provision.models import Plan
from provision.resources import share_dir
from provision.verify.expect import Expect


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


@cache
def lab_settings() -> tuple[dict[str, Any], dict[str, Any]]:
    """JupyterLab's settings overrides and page configuration (its news prompt and update check off), as
    roles/jupyter writes them on a host: read from the role's vars/main.yml, the one place they are written, for an
    image's environment (provision.render.docker.jupyter_files)."""
    data = YAML(typ="safe").load((share_dir("roles") / "jupyter" / "vars" / "main.yml").read_text())
    return data["__jupyter_lab_overrides"], data["__jupyter_lab_page_config"]


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
    planned = ledger_planned(plan, skip_frameworks=skip_frameworks)
    shared = _shared(plan)
    out: dict[str, Any] = {
        **_stack_vars(plan, planned, shared),
        **_environment_vars(plan, shared, skip_frameworks=skip_frameworks, interpreter=interpreter, installer=installer),
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
    out["host_record_venv"] = plan.python.venv
    out["host_record_ledger_planned"] = planned
    # The fast re-apply (docs/hosts.md): keyed by the variables provision.hostfacts.FINGERPRINT_KEY declares, wherever
    # they are added (the per-run ones, hostfacts.PER_RUN, left out: the verifier's place on the controller here).
    fingerprint = fingerprint_vars(plan, fingerprint_key(out), skip_frameworks=skip_frameworks)
    out["preflight_fingerprint"] = fingerprint
    out["preflight_fast_reapply"] = not full_reason
    out["preflight_full_reason"] = full_reason or "the fast path was not asked for"
    out["host_record_fingerprint"] = fingerprint
    out["host_record_fingerprint_save"] = not partial
    if fetch_dir:
        out["gpu_verify_fetch_dir"] = fetch_dir
        out["host_record_fetch_dir"] = fetch_dir
    return out


def _shared(plan: Plan) -> dict[str, Any]:
    """What several roles take alike: the environment, its account, and how wheels go into it (every role that adds
    wheels installs them with uv where the plan names it, which python_env unpacks first, from the plan's index: uv
    does not read the environment's pip.conf)."""
    return {"venv": plan.python.venv, "user": plan.user,
            "uv": plan.python.installer.binary if plan.python.installer is not None else "",
            "index": plan.pip_index_url or ""}


def _stack_vars(plan: Plan, planned: dict[str, Any], shared: dict[str, Any]) -> dict[str, Any]:
    """The inputs of roles/ledger, nvidia_driver, cuda and cudnn."""
    venv, user, uv, index = shared["venv"], shared["user"], shared["uv"], shared["index"]
    return {
        "ledger_planned": planned,
        "ledger_venv": venv,
        "ledger_components_wanted": components_wanted(plan),
        "ledger_containers_wanted": plan.containers is not None,
        "ledger_originals_kept": originals_kept(plan),
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
    }


def _environment_vars(plan: Plan, shared: dict[str, Any], *, skip_frameworks: bool,
                      interpreter: tuple[str, str] | None, installer: tuple[str, str] | None) -> dict[str, Any]:
    """The inputs of roles/python_env, jupyter and gpu_verify."""
    venv, user, uv, index = shared["venv"], shared["user"], shared["uv"], shared["index"]
    frameworks = [] if skip_frameworks else [
        {"name": f.name, "requirements": list(f.requirements), "index_url": f.index_url or ""} for f in plan.frameworks
    ]
    expect = Expect.from_plan(plan).to_dict()
    if skip_frameworks:
        expect["frameworks"] = []
    expect["source"] = f"plan:{plan.profile}"
    return {
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
        "nvidia_container_toolkit_containerd_cdi": c.cdi and t.runtime_configure == "containerd",
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
