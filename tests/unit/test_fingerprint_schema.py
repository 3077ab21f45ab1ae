"""The fast re-apply's key is declared (provision.hostfacts.FINGERPRINT_KEY and PER_RUN), as a Terraform provider
declares which attributes of a resource force a change: every role variable provision renders is in one of the two,
a per-run one says why it changes nothing on the host, and the key of a known plan is pinned, so a host converged by
an earlier provision still takes the fast path (docs/hosts.md, "The fast re-apply").

The fingerprint as the hosts read it is tests/unit/test_fingerprint.py; the whole path,
tests/integration/test_fast_reapply.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from provision.hostfacts import FINGERPRINT_KEY, PER_RUN, fingerprint_key, undeclared
from provision.models import Plan
from provision.render.ansible import render_fleet
from provision.render.role_vars import ansible_vars
from provision.request import ApplyRequest
from provision.resolver import resolve
from tests.unit.test_containers_plan import DB, profile

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_PLANS = sorted((ROOT / "tests" / "golden" / "plans").glob("*.json"))
ROLES_DIR = ROOT / "roles"


def golden(name: str) -> Plan:
    return Plan.model_validate_json((ROOT / "tests" / "golden" / "plans" / f"{name}.json").read_text())


def plans() -> list[Plan]:
    """The golden plans, and plans with each container engine (their roles' variables are rendered only then)."""
    found = [Plan.model_validate_json(p.read_text()) for p in GOLDEN_PLANS]
    return found + [resolve(profile(os, engine), DB) for os, engine in
                    (("debian-12", "docker-ce"), ("debian-13", "docker"), ("debian-13", "podman"))]


def rendered_names(plan: Plan, **options) -> set[str]:
    """Every variable the rendered directory sets: the vars file's and each play's own."""
    yaml = YAML(typ="safe")
    with tempfile.TemporaryDirectory() as tmp:
        files = render_fleet([(plan, None)], tmp, **options)
        names = set(yaml.load(files["vars"].read_text()))
        for play in yaml.load(files["playbook"].read_text()):
            names |= set(play.get("vars") or {})
    return names


RUNS = {
    "apply": {"lock": {"holder": {"user": "me"}, "live_tokens": ["t"]}},
    "apply --full --tags": {"request": ApplyRequest(full=True, tags="python_env")},
    "apply --skip-frameworks": {"request": ApplyRequest(skip_frameworks=True)},
    "destroy --purge-home": {"request": ApplyRequest(destroy=True, purge_home=True)},
}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_every_rendered_role_variable_is_declared_key_or_per_run(run):
    names: set[str] = set()
    for plan in plans():
        names |= rendered_names(plan, **RUNS[run])
    assert undeclared(names) == [], (
        "role variables declared neither part of the fast re-apply's key nor per-run: add each to "
        "provision.hostfacts.FINGERPRINT_KEY, or to PER_RUN with why it changes nothing the roles converge a host to")


def test_a_variable_is_declared_once_each_per_run_one_with_its_reason_and_each_a_role_input():
    assert not FINGERPRINT_KEY & set(PER_RUN)
    assert all(len(why) > 20 for why in PER_RUN.values())
    yaml = YAML(typ="safe")
    inputs: set[str] = set()
    for spec in ROLES_DIR.glob("*/meta/argument_specs.yml"):
        for entry in yaml.load(spec.read_text())["argument_specs"].values():
            inputs |= set(entry.get("options") or {})
    # A misspelt or stale declaration would leave the variable it meant undeclared.
    assert sorted((FINGERPRINT_KEY | set(PER_RUN)) - inputs) == []


def test_a_variable_in_neither_counts_in_the_key():
    """The safe side: an undeclared variable sends a changed host down the full path, never down the fast one."""
    assert fingerprint_key({"cuda_version": "12.6", "new_role_input": 1, "gpu_verify_fetch_dir": "/r"}) == {
        "cuda_version": "12.6", "new_role_input": 1}
    assert undeclared(["cuda_version", "new_role_input", "gpu_verify_fetch_dir"]) == ["new_role_input"]


def key(out: dict) -> dict:
    return out["preflight_fingerprint"]["key"]


def test_what_differs_from_run_to_run_leaves_the_key_as_it_is_and_a_plan_input_changes_it():
    plan = golden("deskmini")
    base = ansible_vars(plan)
    assert key(ansible_vars(plan, fetch_dir="/elsewhere/reports", full_reason="--full", partial=True)) == key(base)
    assert base["host_record_fingerprint"] == base["preflight_fingerprint"]
    moved = plan.model_copy(update={"jupyter": plan.jupyter.model_copy(update={"port": plan.jupyter.port + 1})})
    assert key(ansible_vars(moved))["vars"] != key(base)["vars"]


# key.vars of the golden plans as provision 0.1.0 renders them (issue 54 moved the code; the values stayed). A change
# here means every host converged before it takes the full path once: right for a version bump or a data refresh of
# what the roles are given (data/os.yaml's NVIDIA repository, data/paths.yaml), wrong for a refactor. Changed for the
# ledger's new input ledger_originals_kept (issue 51: containerd's config.toml put back), with the roles themselves:
# a converged host takes the full path once for the new roles' version anyway.
PINNED = {"deskmini": "7d220bcfdbc6a36e", "h100": "a6d026e1075b4bcd"}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_key_of_a_known_plan_is_the_one_hosts_converged_with(name):
    assert key(ansible_vars(golden(name)))["vars"] == PINNED[name]
