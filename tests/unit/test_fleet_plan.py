"""Fleet planning without hosts: which profile each inventory host gets, refusals before anything is touched,
the controller's records, --failed and --diff-against. The hosts below are documentation addresses (192.0.2.x):
a command that tried to reach them would end unreachable (exit 3), so exit 2 shows that nothing was attempted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from provision import state
from provision.drift import host_differences, pinned_wheels, plan_differences
from provision.errors import IncompatibleError, UsageError
from provision.pipeline.plan import plan_for
from provision.pipeline.run import forks_for
from provision.pipeline.targets import Targets, assign, inventory_hostvars

ROOT = Path(__file__).resolve().parents[2]

INVENTORY = """\
all:
  vars:
    ansible_user: admin
  children:
    p2:
      vars: {provision_profile: aws-p2, provision_os: debian-12}
      hosts:
        p2-a: {ansible_host: 192.0.2.1}
        p2-b: {ansible_host: 192.0.2.2}
    lab:
      vars: {provision_profile: ../profiles/deskmini.yaml}
      hosts:
        desk-1: {ansible_host: 192.0.2.3}
        desk-2: {ansible_host: 192.0.2.4, provision_os: debian-13}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    (tmp_path / "profiles").symlink_to(ROOT / "profiles")
    inv = tmp_path / "inv" / "fleet.yml"
    inv.parent.mkdir()
    inv.write_text(INVENTORY)
    return inv


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


def cli(*args: str, env_state: Path) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=os.environ | {"PROVISION_STATE": str(env_state)})


def test_inventory_groups_carry_their_profiles(inventory: Path) -> None:
    hostvars = inventory_hostvars(inventory)
    assert sorted(hostvars) == ["desk-1", "desk-2", "p2-a", "p2-b"]
    assert hostvars["p2-a"]["provision_profile"] == "aws-p2" and hostvars["desk-2"]["provision_os"] == "debian-13"
    groups = assign(hostvars, None, None, inventory)
    by_hosts = {tuple(g.hosts): g for g in groups}
    assert by_hosts[("p2-a", "p2-b")].plan.gpu.model == "Tesla K80"
    assert by_hosts[("p2-a", "p2-b")].plan.driver.branch == "470"
    assert by_hosts[("desk-1",)].plan.target.os_id == "ubuntu-24.04"  # the profile's own OS
    assert by_hosts[("desk-2",)].plan.target.os_id == "debian-13"
    assert by_hosts[("desk-2",)].plan.driver.branch == "550"


def test_limit_narrows_the_hosts(inventory: Path) -> None:
    assert sorted(inventory_hostvars(inventory, "p2")) == ["p2-a", "p2-b"]
    assert sorted(inventory_hostvars(inventory, "desk-2")) == ["desk-2"]


def test_a_host_without_a_profile_is_refused_by_name() -> None:
    with pytest.raises(UsageError, match="no profile for host.*lonely"):
        assign({"lonely": {}}, None, None, Path("inv.yml"))


def test_an_unknown_profile_name_is_refused_by_host(inventory: Path) -> None:
    with pytest.raises(UsageError, match="host x: provision_profile 'no-such-box' not found"):
        assign({"x": {"provision_profile": "no-such-box"}}, None, None, inventory)


def test_an_impossible_group_is_refused_naming_its_hosts(inventory: Path) -> None:
    hostvars = {"k80-a": {"provision_profile": "aws-p2", "provision_os": "debian-13"},
                "desk": {"provision_profile": "deskmini"}}
    with pytest.raises(IncompatibleError) as info:
        assign(hostvars, None, None, inventory)
    assert "k80-a" in info.value.render() and "debian-12" in info.value.render()


def test_the_command_refuses_the_whole_fleet_before_touching_any_host(inventory: Path, state_dir: Path) -> None:
    text = inventory.read_text().replace("provision_os: debian-12", "provision_os: debian-13")
    inventory.write_text(text)
    proc = cli("apply", "-i", str(inventory), "--yes", env_state=state_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "p2-a, p2-b" in proc.stderr and "Traceback" not in proc.stderr
    assert not (state_dir / "runs").exists()


def test_forks_follow_the_inventory() -> None:
    assert [forks_for(n) for n in (1, 8, 500)] == [1, 8, 64]


def test_failed_without_a_remembered_run_says_so(inventory: Path, state_dir: Path) -> None:
    proc = cli("apply", "-i", str(inventory), "--yes", "--failed", env_state=state_dir)
    assert proc.returncode == 2 and "no earlier apply" in proc.stderr


def test_failed_after_an_all_green_run_has_nothing_to_do(inventory: Path, state_dir: Path) -> None:
    state.write_run(str(inventory.resolve()), {h: {"result": "ok"} for h in ("p2-a", "p2-b", "desk-1", "desk-2")})
    proc = cli("apply", "-i", str(inventory), "--yes", "--failed", env_state=state_dir)
    assert proc.returncode == 0 and "nothing to retry" in proc.stdout, proc.stdout + proc.stderr


def test_run_records_remember_who_failed() -> None:
    state.write_run("/inv.yml", {"a": {"result": "ok"}, "b": {"result": "unreachable"}, "c": {"result": "interrupted"}})
    assert state.failed_hosts("/inv.yml") == ["b", "c"]
    assert state.failed_hosts("/other.yml") is None


def test_host_names_cannot_escape_the_state_directory(state_dir: Path) -> None:
    path = state.write_record("../../etc/passwd", {"plan": {}})
    assert path.resolve().is_relative_to(state_dir.resolve())
    assert state.read_record("../../etc/passwd") == json.loads(path.read_text())


def test_diff_names_plan_and_host_differences() -> None:
    k80 = plan_for(ROOT / "profiles/aws-p2.yaml", os_override="debian-12")
    desk = plan_for(ROOT / "profiles/deskmini.yaml", os_override="debian-12")
    assert plan_differences(k80, k80.model_dump(mode="json")) == []
    lines = plan_differences(desk, k80.model_dump(mode="json"))
    assert "plan  cuda.version: applied 11.7, now 12.6" in lines
    assert "plan  driver.branch: applied 470, now 535" in lines
    wheels = dict(pinned_wheels(k80, frameworks=False))
    record = {"installed": {"wheels": dict(wheels), "packages": {}}, "frameworks_skipped": True}
    assert host_differences(k80, record) == []
    record["installed"]["wheels"]["numpy"] = "0.1"
    assert any(line.startswith("host  numpy: installed 0.1, the plan now pins") for line in host_differences(k80, record))


def test_a_password_login_without_a_password_in_the_inventory_is_refused_before_any_host(tmp_path):
    from provision.errors import UsageError
    from provision.pipeline.preflight import require_secrets

    text = (Path(__file__).resolve().parents[2] / "profiles/deskmini.yaml").read_text()
    profile = tmp_path / "pw.yaml"
    profile.write_text(text.replace("auth: token", "auth: password"))
    inv = tmp_path / "hosts.yml"

    def found(hostvars: dict, inventory=inv) -> Targets:
        return Targets(assign(hostvars, profile, "debian-13", None), inventory or {"all": {"hosts": hostvars}}, "k")

    two = found({"lab-1": {"jupyter_password": "vaulted"}, "lab-2": {"ansible_become_password": "x" * 8}})
    # The host records hold the secrets by reference: which variables are set, never the values.
    assert {h.name: sorted(h.secrets) for h in two.records} == {"lab-1": ["jupyter_password"],
                                                               "lab-2": ["ansible_become_password"]}
    assert "x" * 8 not in repr(sorted(h.secrets for h in two.records))
    with pytest.raises(UsageError, match=r"host\(s\) lab-2: jupyter.auth is 'password' and no jupyter_password"):
        require_secrets(two, inv)
    one = found({"lab-1": {"jupyter_password": "vaulted"}})
    require_secrets(one, inv)
    assert one.groups[0].plan.jupyter.auth == "password"
    # A sandbox has no inventory: --ask-jupyter-pass is the way, and the refusal says so.
    with pytest.raises(UsageError, match=r"^the sandbox: host\(s\) box: .* give it with --ask-jupyter-pass, or use"):
        require_secrets(found({"box": {}}, None), None)
    # Grouping asks nothing: given at the prompt (apply --ask-jupyter-pass), or not needed (check, destroy), the
    # preflight is told not to ask it of the inventory.
    assert assign({"box": {}}, profile, "debian-13", None)[0].hosts == ["box"]
