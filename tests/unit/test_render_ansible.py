"""The Ansible rendering: each role gets its inputs from the Plan, and the playbook is valid Ansible."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from provision.pipeline.plan import plan_for
from provision.render.ansible import HANDOVER, LOCK_NOTE, PREFLIGHT, ROLES, render_ansible, render_fleet
from provision.render.role_vars import ansible_vars
from provision.request import ApplyRequest
from provision.resources import collections_dir, share_dir
from provision.sandbox import inventory as sandbox_inventory

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _specs() -> dict[str, dict]:
    yaml = YAML(typ="safe")
    return {r: yaml.load((share_dir("roles") / r / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]
            ["options"] for r in (*ROLES, PREFLIGHT)}


@pytest.fixture(scope="module")
def deskmini():
    return plan_for(ROOT / "profiles/deskmini.yaml", os_override="debian-13")


@pytest.fixture(scope="module")
def awsp2():
    return plan_for(ROOT / "profiles/aws-p2.yaml", os_override="debian-12")


def test_deskmini_vars_carry_the_plan(deskmini):
    v = ansible_vars(deskmini)
    assert v["nvidia_driver_branch"] == deskmini.driver.branch == "550"
    assert v["nvidia_driver_version"] == deskmini.driver.version
    assert v["nvidia_driver_userspace_packages"] == ["libcuda1", "libnvidia-ml1", "nvidia-smi"]
    assert v["cuda_version"] == "12.6" and v["cuda_source"] == "pypi"
    assert v["cuda_packages"] == list(deskmini.cuda.packages)
    assert v["cudnn_version"] == "9.10.2" and v["cudnn_packages"] == list(deskmini.cudnn.packages)
    assert v["python_env_version"] == "3.13"
    assert v["python_env_frameworks"][0]["index_url"] == deskmini.frameworks[0].index_url
    assert v["jupyter_bind"] == "127.0.0.1" and v["jupyter_auth"] == "token"
    assert v["gpu_verify_target_arch"] == "sm_61"
    assert v["gpu_verify_expect"]["cuda_version"] == "12.6"
    assert {v[k] for k in ("cuda_venv_owner", "cudnn_venv_owner", "python_env_user", "jupyter_user",
                           "gpu_verify_user")} == {deskmini.user}


def test_awsp2_vars_carry_the_plan(awsp2):
    v = ansible_vars(awsp2)
    assert v["nvidia_driver_branch"] == "470"
    assert v["nvidia_driver_userspace_packages"] == list(awsp2.driver.userspace_packages)
    assert "nvidia-tesla-470-smi" in v["nvidia_driver_userspace_packages"]
    assert v["cuda_version"] == awsp2.cuda.version and v["cuda_version"].startswith("11.")
    assert v["cudnn_version"] == "8.5.0"
    assert v["python_env_version"] == "3.11"
    assert v["gpu_verify_target_arch"] == "sm_37"
    # The preflight refuses another branch's driver packages: it is told the planned branch and the plan's own.
    assert v["preflight_driver_branch"] == "470" and "nvidia-tesla-470-smi" in v["preflight_driver_packages"]
    assert v["preflight_account"] == awsp2.user


def test_skip_frameworks_drops_them(deskmini):
    v = ansible_vars(deskmini, skip_frameworks=True)
    assert v["python_env_frameworks"] == [] and v["gpu_verify_expect"]["frameworks"] == []


def _with_containers(engine: str, os_id: str):
    """The DeskMini profile with `software.containers: ENGINE`, planned from the real database on OS_ID."""
    from provision.compat import load_db
    from provision.loader import load_profile
    from provision.resolver import resolve

    profile = load_profile(ROOT / "profiles/deskmini.yaml", os_override=os_id)
    software = profile.software.model_copy(update={"containers": engine})
    return resolve(profile.model_copy(update={"software": software}), load_db())


CONTAINER_PLANS = [(engine, os_id) for os_id in ("debian-12", "debian-13")
                   for engine in ("docker", "docker-ce", "podman", "containerd")]


@pytest.mark.parametrize("plan_name", ["deskmini", "awsp2", *(f"{e}@{o}" for e, o in CONTAINER_PLANS)])
def test_every_var_is_a_role_input_and_required_inputs_are_given(plan_name, request):
    if "@" in plan_name:  # the container roles' inputs (container_engine, nvidia_container_toolkit) from real plans
        plan = _with_containers(*plan_name.split("@"))
        assert plan.containers is not None
    else:
        plan = request.getfixturevalue(plan_name)
    v = ansible_vars(plan)
    specs = _specs()
    known = {name for opts in specs.values() for name in opts}
    assert set(v) - known == set(), "vars no role declares"
    for role, opts in specs.items():
        missing = [n for n, o in opts.items() if o.get("required") and n not in v]
        assert missing == [], f"{role}: required inputs not given"
        for name, opt in opts.items():
            if name in v and "choices" in opt:
                assert v[name] in opt["choices"], f"{name}={v[name]!r} not in {opt['choices']}"


def test_rendered_playbook_passes_syntax_check(deskmini, tmp_path):
    files = render_ansible(deskmini, tmp_path, inventory=sandbox_inventory(["pv-syntax"], connection="docker"))
    assert (tmp_path / "plan.json").is_file()
    preflight, gate, play, fast = YAML(typ="safe").load(files["playbook"].read_text())
    # By the collection's names: the same playbook runs wherever provision.gpu is installed.
    # The full path's roles are included as the play reaches them (not parsed when every host takes the fast path),
    # each tagged with its name, and its tasks too.
    assert [t["ansible.builtin.include_role"]["name"] for t in play["tasks"]] == [f"provision.gpu.{r}" for r in ROLES]
    assert all(t["tags"] == t["ansible.builtin.include_role"]["apply"]["tags"] for t in play["tasks"])
    assert play["become"] is True
    # The hosts whose fingerprint matches their last converged apply (the preflight puts them in provision_fast) run
    # only the verifier and fetch the record, leaving the record and the ledger as they are; the facts come from the preflight's play.
    assert play["hosts"] == ["all", "&provision_full"] and fast["hosts"] == ["all", "&provision_fast"]
    assert [r["role"] for r in fast["roles"]] == ["provision.gpu.gpu_verify", "provision.gpu.host_record"]
    assert fast["vars"] == {"host_record_fast": True, "gpu_verify_assume_installed": True, **HANDOVER,
                            "host_record_notes": f"{{{{ {LOCK_NOTE} }}}}"}
    # The apply lock the gate took goes to host_record, which releases it; the notes of what the apply found and
    # finished (a stale lock taken over, the ledger's finished dpkg work) go to host_record for the summary.
    assert play["vars"] == {**HANDOVER, "host_record_notes": f"{{{{ {LOCK_NOTE} + (ledger_finished | default([])) }}}}"}
    assert [t["name"] for t in gate["tasks"]] == ["Stop when the preflight refused a host of this run"]
    assert play["gather_facts"] is False and fast["gather_facts"] is False
    assert preflight["gather_subset"] == ["min", "virtual"]
    # Every host is read and refused before the first change on any (roles/preflight), under --tags too.
    assert [r["role"] for r in preflight["roles"]] == ["provision.gpu.preflight"]
    assert "always" in preflight["roles"][0]["tags"]
    assert gate["tasks"][0]["ansible.builtin.import_role"] == {"name": "provision.gpu.preflight", "tasks_from": "gate"}
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(files["inventory"]), "site.yml"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path),
                               # The roles and modules as the collection, where `provision apply` points Ansible
                               "ANSIBLE_COLLECTIONS_PATH": str(collections_dir())})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow  # ansible-lint loads every role the play uses: about a minute on 2 cores
@pytest.mark.skipif(shutil.which("ansible-lint", path=str(BIN)) is None, reason="ansible-lint not installed")
def test_rendered_playbook_passes_ansible_lint(deskmini, tmp_path):
    render_ansible(deskmini, tmp_path)
    proc = subprocess.run([str(BIN / "ansible-lint"), "--offline", "--format=pep8", "site.yml"], cwd=tmp_path,
                          capture_output=True, text=True,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path),
                               # The roles and modules as the collection, where `provision apply` points Ansible
                               "ANSIBLE_COLLECTIONS_PATH": str(collections_dir())})
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_destroy_takes_the_hosts_apply_lock_before_anything_is_removed_and_releases_it(deskmini, tmp_path):
    """`provision destroy` has no preflight, but takes the host's apply lock as an apply does (the gate play, which
    refuses a host a live apply holds) before the ledger role removes anything; the destroy play then hands the note
    of a stale lock taken over to the controller and releases the lock."""
    files = render_fleet([(deskmini, None)], tmp_path, ApplyRequest(destroy=True),
                         inventory=sandbox_inventory(["pv-syntax"], connection="docker"),
                         lock={"holder": {"token": "run-1"}, "live_tokens": ["run-1"]})
    gate, play = YAML(typ="safe").load(files["playbook"].read_text())
    assert gate["tasks"][0]["ansible.builtin.import_role"] == {"name": "provision.gpu.preflight", "tasks_from": "gate"}
    assert gate["vars"]["preflight_lock_holder"] == {"token": "run-1"}
    assert [r["role"] for r in play["roles"]] == ["provision.gpu.ledger"]
    note, release = play["post_tasks"]
    assert note["delegate_to"] == "localhost" and note["block"][1]["ansible.builtin.copy"]["dest"].endswith(
        "/reports/{{ inventory_hostname }}/notes.json")
    assert release["provision.gpu.provision_lock"]["state"] == "release"
    assert release["provision.gpu.provision_lock"]["holder"] == {"token": "{{ preflight_lock.token }}"}
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "-i", str(files["inventory"]), "site.yml"],
                          cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path),
                               "ANSIBLE_COLLECTIONS_PATH": str(collections_dir())})
    assert proc.returncode == 0, proc.stdout + proc.stderr
