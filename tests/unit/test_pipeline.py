"""The apply's stages with real data and no hosts: events → HostResults (stage events), what the controller keeps
(stage record), the checks beside a fast-path playbook (stage check). End to end: tests/integration/test_apply*.py,
test_fast_reapply.py, test_faults.py."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from provision import state
from provision.pipeline.check import Beside
from provision.pipeline.events import Events
from provision.pipeline.plan import plan_for
from provision.pipeline.record import interrupted, record
from provision.pipeline.targets import Group, Targets
from provision.state import StateError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def group() -> Group:
    plan = plan_for(ROOT / "profiles/deskmini.yaml", os_override="debian-13")
    return Group(plan=plan, profile="deskmini", os="debian-13", hosts=["ok-1", "refused-1", "lost-1", "gone-1"])


def event(kind: str, host: str, task: str = "cuda : Install", **res) -> dict:
    return {"event": kind, "event_data": {"host": host, "task": task, "res": res, "duration": 1.5,
                                          "role": "provision.gpu.preflight"}}


def set_stats(**data) -> dict:
    """A set_stats task's result, as ansible-runner hands it over (measured: ansible-core 2.x, per_host)."""
    return {"changed": False, "ansible_stats": {"data": data, "per_host": True, "aggregate": False}}


def run_events(group: Group, reports: Path) -> tuple[Events, dict]:
    lines: list[tuple[str, str, str, str]] = []
    paths: list[tuple[str, str]] = []
    reader = Events(on_task=lambda *a: lines.append(a), on_path=lambda *a: paths.append(a))
    for e in (event("runner_on_ok", "ok-1", "preflight : Say which path the host takes",
                    **set_stats(provision_path={"path": "full", "why": "the plan changed"})),
              event("runner_on_ok", "ok-1", changed=True),
              event("runner_on_ok", "refused-1", "preflight : Tell provision the host is refused",
                    **set_stats(provision_refused="port 8888 is held")),
              event("runner_on_failed", "refused-1", "preflight : Refuse the host",
                    msg="preflight: refused-1 was not changed: port 8888 is held"),
              event("runner_on_failed", "lost-1", msg="EOF on stream; ssh exited with status 255")):
        reader(e)
    (reports / "ok-1").mkdir(parents=True)
    (reports / "ok-1" / "verify.json").write_text(json.dumps({"status": "pass"}))
    (reports / "ok-1" / "applied.json").write_text(json.dumps({"packages": {"nvidia-driver": "535"}, "wheels": {}}))
    (reports / "ok-1" / "ledger.json").write_text(json.dumps({"schema": state.ledger_schema(), "entries": []}))
    (reports / "ok-1" / "notes.json").write_text(json.dumps(["finished the dpkg work"]))
    stats = {"ok": {"ok-1": 3, "refused-1": 1, "lost-1": 1}, "changed": {"ok-1": 1},
             "failures": {"refused-1": 1, "lost-1": 1}}
    assert ("ok-1", "full") in paths
    assert ("lost-1", "cuda : Install", "unreachable",
            "the connection to the host was lost during this step (EOF on stream; ssh exited with status 255)") in lines
    return reader, stats


def test_events_become_one_result_per_host(group: Group, tmp_path: Path) -> None:
    reader, stats = run_events(group, tmp_path / "reports")
    results = reader.outcomes([group], stats, tmp_path / "reports")
    assert {h: r.result for h, r in results.items()} == {
        "ok-1": "ok", "refused-1": "refused", "lost-1": "unreachable", "gone-1": "not run"}
    ok = results["ok-1"]
    assert (ok.changed, ok.path, ok.path_why, ok.verify, ok.notes) == (
        1, "full", "the plan changed", {"status": "pass"}, ["finished the dpkg work"])
    assert ok.installed == {"packages": {"nvidia-driver": "535"}, "wheels": {}} and ok.ledger is not None
    assert results["refused-1"].message.startswith("preflight: refused-1 was not changed")
    assert results["gone-1"].message == "Ansible did not reach this host (see the lines above)"
    assert reader.task_seconds["cuda : Install"] == 3.0  # summed over hosts (ok-1, lost-1)


def test_what_the_roles_hand_over_is_data_never_their_words(group: Group, tmp_path: Path) -> None:
    # A failed preflight task is a refusal only where the role said so as data (a crash of its module is a
    # failure, exit 1); the words of a message decide nothing, and a dry run's list comes from the data too.
    reader = Events()
    for e in (event("runner_on_ok", "ok-1", "preflight : Say which path the host takes", msg="path: fast (x)"),
              event("runner_on_failed", "refused-1", "preflight : Read what on the host would make the plan fail",
                    msg="preflight: MODULE FAILURE"),
              event("runner_on_ok", "lost-1", "cuda : pypi | Say what a dry run cannot predict",
                    **set_stats(provision_unpredictable=["cuda: the environment does not exist yet"])),
              event("runner_on_ok", "lost-1", "cudnn : pypi | Say what a dry run cannot predict",
                    **set_stats(provision_unpredictable=["cudnn: the environment does not exist yet"]))):
        reader(e)
    results = reader.outcomes([group], {"ok": {"ok-1": 1, "lost-1": 2}, "failures": {"refused-1": 1}},
                              tmp_path / "reports")
    assert (results["ok-1"].result, results["ok-1"].path) == ("ok", "")
    assert results["refused-1"].result == "failed"
    assert results["lost-1"].unpredicted == ["cuda: the environment does not exist yet",
                                             "cudnn: the environment does not exist yet"]


def test_the_record_keeps_what_each_host_reported_and_the_run_for_failed(group: Group, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    from provision.pipeline.events import FleetResult

    reader, stats = run_events(group, tmp_path / "reports")
    fleet = FleetResult([group], reader.outcomes([group], stats, tmp_path / "reports"))
    record(fleet, "/inv.yml", tags=None, skip_frameworks=True)
    kept = state.read_record("ok-1")
    assert kept is not None and kept["profile"] == "deskmini" and kept["frameworks_skipped"] is True
    assert kept["path"] == "full (the plan changed)" and kept["installed"]["packages"] == {"nvidia-driver": "535"}
    assert kept["plan"]["profile"] == group.plan.profile
    assert state.read_record("refused-1") is None
    assert state.read_ledger("ok-1") is not None
    assert state.failed_hosts("/inv.yml") == ["gone-1", "lost-1", "refused-1"]
    interrupted([group], "/inv.yml")
    assert state.failed_hosts("/inv.yml") == sorted(group.hosts)


def test_a_record_that_cannot_be_written_is_raised_after_the_runs_results(group: Group, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVISION_STATE", str(tmp_path / "state"))
    from provision.pipeline.events import FleetResult

    reader, stats = run_events(group, tmp_path / "reports")
    fleet = FleetResult([group], reader.outcomes([group], stats, tmp_path / "reports"))
    (tmp_path / "state" / "hosts").mkdir(parents=True)
    (tmp_path / "state" / "hosts" / "ok-1").write_text("a file where the host's folder goes")
    with pytest.raises(StateError):
        record(fleet, "/inv.yml")
    assert state.failed_hosts("/inv.yml") == ["gone-1", "lost-1", "refused-1"]  # written all the same


def test_checks_start_beside_the_playbook_only_when_every_host_takes_the_fast_path() -> None:
    started = threading.Event()

    def checks(echo):
        started.set()
        echo("a: 12 passed")
        return {"a": 0, "b": 0}

    beside = Beside(["a", "b"], checks, lambda: {"a": "token-a"})
    beside.path("a", "fast")
    assert beside.checked is None  # b has not said
    beside.path("b", "fast")
    assert beside.checked is not None and beside.other is not None
    result = beside.checked.result(timeout=10)
    assert (result.codes, result.lines) == ({"a": 0, "b": 0}, ["a: 12 passed"]) and started.is_set()
    assert beside.other.result(timeout=10) == {"a": "token-a"}
    beside.close()

    mixed = Beside(["a", "b"], checks)
    mixed.path("a", "fast")
    mixed.path("b", "full")
    assert mixed.checked is None


def test_what_the_checks_beside_raise_is_raised_where_their_result_is_read() -> None:
    def checks(echo):
        raise RuntimeError("testinfra could not start")

    beside = Beside(["a"], checks)
    beside.path("a", "fast")
    assert beside.checked is not None
    with pytest.raises(RuntimeError, match="testinfra could not start"):
        beside.checked.result(timeout=10)
    beside.close()


@pytest.mark.parametrize("command", ["apply", "destroy"])
def test_a_sandbox_the_plan_cannot_run_in_is_refused_before_anything_is_asked_of_docker(command: str, tmp_path: Path):
    # No docker on PATH: the preflight's refusal comes first, exit 2, one line (not "docker is missing", exit 3).
    import subprocess
    import sys

    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    proc = subprocess.run([sys.executable, "-m", "provision", command, str(ROOT / "profiles/deskmini.yaml"),
                           "--sandbox", "box", "--os", "ubuntu-24.04", "--yes"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=os.environ | {"PATH": str(bare),
                                                                       "PROVISION_STATE": str(tmp_path / "state")})
    assert proc.returncode == 2, proc.stderr
    assert "the sandbox runs debian-12, debian-13 only, and this plan targets ubuntu-24.04" in proc.stderr
    assert "docker" not in proc.stderr and "Traceback" not in proc.stderr


def test_render_writes_the_folder_with_each_hosts_key_settings_and_why_no_host_takes_the_fast_path(
        group: Group, tmp_path: Path) -> None:
    import yaml

    from provision.pipeline.render import render
    from provision.request import ApplyRequest, Secrets
    from provision.ssh import host_keys

    hostvars = {"ok-1": {"ansible_host_key_checking": False}, "refused-1": {}, "lost-1": {}, "gone-1": {}}
    inventory = {"all": {"hosts": hostvars}}
    asked = ApplyRequest(secrets=Secrets(jupyter_password="hunter2-jp", become_password="hunter2-bp"))
    assert "hunter2" not in repr(asked)  # a request is printable: its secrets are not in it
    found = Targets([group], inventory, "sandbox:x").with_keys(host_keys(hostvars, mitogen=True))
    assert found.record("ok-1").keys.off and found.record("ok-1").vars == {"ansible_host_key_checking": False}
    files = render(found, tmp_path / "run", asked)
    assert sorted(p.name for p in (tmp_path / "run" / "host_vars").iterdir()) == ["ok-1.yml"]
    assert yaml.safe_load((tmp_path / "run" / "host_vars" / "ok-1.yml").read_text()) == {
        "ansible_host_key_checking": False}
    role_vars = yaml.safe_load(files["vars"].read_text())
    assert role_vars["preflight_fast_reapply"] is False
    assert role_vars["preflight_full_reason"] == "--ask-jupyter-pass gave a password"
    assert "hunter2" not in "".join(p.read_text() for p in (tmp_path / "run").rglob("*") if p.is_file())
    gate = yaml.safe_load(files["playbook"].read_text())[1]
    assert gate["vars"]["preflight_lock_holder"]["pid"] == os.getpid()
    assert ApplyRequest().full_reason == ""  # each host's fingerprint decides
    assert ApplyRequest(full=True).full_reason == "--full asked for it"
    assert ApplyRequest(tags="python_env").full_reason == "--tags applies part of the plan"
