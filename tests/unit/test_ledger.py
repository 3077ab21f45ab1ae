"""The ledger's rules (plugins/module_utils/ledger.py, which plugins/modules/provision_ledger.py and the controller
import): what an apply owns (there when it ended, not there when it began), what a new plan removes (owned, named by
the last plan, not by this one), which wheels go with a removed one (only owned ones nothing kept requires), apt's
simulation read; and the controller's install / replace / remove list (provision/ledger.py) against a real Plan."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from provision.ledger import change_lines, changes
from provision.pipeline.plan import plan_for
from tests.support import modules

ROOT = Path(__file__).resolve().parents[2]
mod = modules.utils("ledger")
host = modules.module("provision_ledger")  # what acts on the host: apt's simulation read, the root refusal

PLANNED_PYPI = {"packages": [], "wheels": ["numpy", "nvidia-cuda-runtime-cu12", "torch"], "paths": ["/etc/provision"],
                "units": ["provision-jupyter"], "accounts": ["ml"], "venv": "/opt/provision/venv"}
PLANNED_DEBIAN = {"packages": ["nvidia-cuda-toolkit"], "wheels": ["numpy"], "paths": ["/etc/provision"], "units": [],
                  "accounts": ["ml"], "venv": "/opt/provision/venv"}


def _applied(before_pkgs, after_pkgs, before_wheels, after_wheels, planned, ledger=None, present_after=None,
             present_before=None):
    """One apply: begin on the host as it was, commit on the host as it is after."""
    ledger = ledger or mod.empty_ledger()
    ledger["pending"] = mod.begin(ledger, before_pkgs, before_wheels, present_before or {})
    return mod.commit(ledger, after_pkgs, after_wheels, present_after or {}, planned)


def test_owned_is_what_the_apply_added_and_found_is_what_was_there():
    ledger = _applied({"bash": "5.2", "htop": "3.4"}, {"bash": "5.2", "htop": "3.4", "nvidia-cuda-toolkit": "12.4",
                                                      "libcudart12": "12.4"},
                      {}, {"numpy": "2.2.6", "pip": "25.1"}, PLANNED_DEBIAN | {"packages": ["nvidia-cuda-toolkit",
                                                                                            "htop"]},
                      present_before={"units:provision-jupyter": False, "accounts:ml": False,
                                      "paths:/etc/provision": False},
                      present_after={"accounts:ml": True, "paths:/etc/provision": True})
    assert set(ledger["packages"]) == {"nvidia-cuda-toolkit", "libcudart12"}
    assert ledger["packages"]["nvidia-cuda-toolkit"] == {"version": "12.4", "planned": True}
    assert ledger["packages"]["libcudart12"]["planned"] is False  # a dependency apt pulled in
    assert ledger["found"] == {"htop": "3.4"}  # planned, but the user's: never removed
    assert ledger["wheels"] == {"numpy": "2.2.6", "pip": "25.1"}
    assert ledger["accounts"] == ["ml"] and ledger["paths"] == ["/etc/provision"]
    assert ledger["pending"] is None


def test_what_the_user_adds_between_applies_is_not_owned():
    first = _applied({"bash": "5.2"}, {"bash": "5.2", "libcudart12": "12.4"}, {}, {"numpy": "2.2.6"}, PLANNED_DEBIAN)
    # The user installs htop and a wheel by hand; the next apply finds them there when it begins.
    second = _applied({"bash": "5.2", "libcudart12": "12.4", "htop": "3.4"},
                      {"bash": "5.2", "libcudart12": "12.4", "htop": "3.4"},
                      {"numpy": "2.2.6", "rich": "14.0"}, {"numpy": "2.2.6", "rich": "14.0"}, PLANNED_DEBIAN,
                      ledger=first)
    assert set(second["packages"]) == {"libcudart12"}
    assert set(second["wheels"]) == {"numpy"}


def test_a_pending_note_of_an_unfinished_apply_is_kept():
    ledger = mod.empty_ledger()
    ledger["pending"] = mod.begin(ledger, {"bash": "5.2"}, {}, {})
    # The apply failed after installing libcudart12; the next one begins with it there, but it is still provision's.
    again = mod.begin(ledger, {"bash": "5.2", "libcudart12": "12.4"}, {}, {})
    assert again == ledger["pending"]


def test_a_changed_plan_removes_only_what_the_last_plan_named_and_the_ledger_owns():
    ledger = _applied({}, {"bash": "5.2"}, {}, {"numpy": "2.2.6", "torch": "2.7.1", "nvidia-cuda-runtime-cu12": "12.6.77",
                                               "pip": "25.1"}, PLANNED_PYPI,
                      present_before={"units:provision-jupyter": False}, present_after={"units:provision-jupyter": True})
    ledger["packages"] = {}  # bash was there: pretend nothing was installed
    gone = mod.removals(ledger, PLANNED_DEBIAN)
    assert gone["wheels"] == ["nvidia-cuda-runtime-cu12", "torch"]
    assert gone["units"] == ["provision-jupyter"]
    assert gone["packages"] == [] and gone["accounts"] == []
    assert "pip" not in gone["owned_wheels"]
    assert mod.removals(ledger, PLANNED_PYPI) == mod.removals(ledger, PLANNED_PYPI) and not mod.has_work(
        mod.removals(ledger, PLANNED_PYPI))


def test_destroy_removes_everything_owned_and_nothing_found():
    ledger = _applied({"htop": "3.4"}, {"htop": "3.4", "libcudart12": "12.4", "nvidia-cuda-toolkit": "12.4"}, {},
                      {"numpy": "2.2.6"}, PLANNED_DEBIAN | {"packages": ["nvidia-cuda-toolkit", "htop"]},
                      present_before={"accounts:ml": False, "venvs:/opt/provision/venv": False},
                      present_after={"accounts:ml": True, "venvs:/opt/provision/venv": True})
    gone = mod.removals(ledger, {}, destroy=True)
    assert gone["packages"] == ["libcudart12", "nvidia-cuda-toolkit"]
    assert gone["accounts"] == ["ml"] and gone["venvs"] == ["/opt/provision/venv"]


def test_unneeded_wheels_follow_only_owned_distributions_nothing_kept_requires():
    requires = {"torch": {"nvidia-cuda-runtime-cu12", "jinja2", "filelock"}, "jupyterlab": {"jinja2"},
                "nvidia-cuda-runtime-cu12": set(), "jinja2": {"markupsafe"}, "filelock": set(), "markupsafe": set(),
                "rich": {"markupsafe"}, "numpy": set(), "pip": set()}
    installed = set(requires)
    owned = installed - {"rich"}  # the account installed rich itself
    gone = mod.unneeded_wheels(owned, {"jupyterlab", "numpy"}, requires, installed)
    assert gone == ["filelock", "nvidia-cuda-runtime-cu12", "torch"]  # jinja2 stays for jupyterlab


@pytest.mark.parametrize(("text", "expected"), [
    ("Purg libcudart12 [12.4.131~12.4.1-1]\nPurg nvidia-cuda-toolkit [12.4]\n", {"libcudart12", "nvidia-cuda-toolkit"}),
    ("Remv libfoo:amd64 [1.0]\nInst bar (1)\n", {"libfoo"}),
    ("Reading package lists...\n0 upgraded, 0 newly installed\n", set()),
])
def test_apt_simulation_is_read(text, expected):
    assert host.parse_simulation(text) == expected


def test_the_controller_lists_install_replace_and_remove_against_a_plan():
    plan = plan_for(ROOT / "profiles" / "deskmini.yaml", os_override="debian-13")
    ledger = mod.empty_ledger()
    ledger["planned"] = mod.planned_of({"packages": ["nvidia-cuda-toolkit"], "wheels": ["numpy", "oldthing"],
                                        "units": [], "accounts": ["ml"], "venv": plan.python.venv})
    ledger["packages"] = {"nvidia-cuda-toolkit": {"version": "12.4.131~12.4.1-3", "planned": True}}
    ledger["wheels"] = {"numpy": "0.1", "oldthing": "1.0"}
    ledger["accounts"] = ["ml"]
    lines = change_lines(changes(plan, ledger, skip_frameworks=True))
    assert any(line.split()[:3] == ["replace", "wheel", "numpy"] for line in lines), lines
    assert any(line.split()[:3] == ["remove", "package", "nvidia-cuda-toolkit"] for line in lines), lines
    assert any(line.split()[:3] == ["remove", "wheel", "oldthing"] for line in lines), lines
    assert any(line.split()[:3] == ["install", "unit", "provision-jupyter"] for line in lines), lines
    destroy = change_lines(changes(None, ledger))
    assert [line.split()[0] for line in destroy] == ["remove"] * len(destroy) and any("account" in x for x in destroy)


def test_requirements_are_read_past_a_folded_licence_with_blank_continuation_lines(tmp_path):
    """ipykernel's METADATA folds its licence over lines that are blank but for their indentation: reading stopped
    there once, jupyter-client looked unneeded and was uninstalled from under JupyterLab."""
    site = tmp_path / "lib" / "python3.13" / "site-packages"
    (site / "ipykernel-7.1.0.dist-info").mkdir(parents=True)
    (site / "ipykernel-7.1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.4\nName: ipykernel\nVersion: 7.1.0\nLicense: BSD 3-Clause License\n        \n"
        "        Copyright (c) 2015\nRequires-Dist: jupyter-client>=8.0.0\nRequires-Dist: pytest; extra == 'test'\n"
        "\nDescription body\nRequires-Dist: not-a-header\n")
    (site / "jupyter_client-8.6.3.dist-info").mkdir()
    (site / "jupyter_client-8.6.3.dist-info" / "METADATA").write_text("Name: jupyter_client\nVersion: 8.6.3\n\n")
    installed, requires = mod.read_requires(str(tmp_path))
    assert installed == {"ipykernel", "jupyter-client"}
    assert requires["ipykernel"] == {"jupyter-client", "pytest"}
    assert mod.unneeded_wheels(installed, {"ipykernel"}, requires, installed) == []


def test_an_environment_of_a_renamed_account_is_made_again():
    ledger = _applied({}, {}, {}, {"numpy": "2.2.6"}, PLANNED_DEBIAN,
                      present_before={"venvs:/opt/provision/venv": False, "accounts:ml": False},
                      present_after={"venvs:/opt/provision/venv": True, "accounts:ml": True})
    renamed = PLANNED_DEBIAN | {"accounts": ["ada"]}
    gone = mod.removals(ledger, renamed, venv_owner="ml")
    assert gone["venvs"] == ["/opt/provision/venv"] and gone["accounts"] == []  # the old account and home stay
    assert mod.removals(ledger, PLANNED_DEBIAN, venv_owner="ml")["venvs"] == []


def test_a_commit_without_a_begin_claims_nothing_new():
    """`apply --tags cuda` runs host_record (always) but not the ledger role: the host's packages are not provision's
    for that."""
    ledger = mod.commit(mod.empty_ledger(), {"bash": "5.2", "htop": "3.4"}, {"rich": "14.0"}, {"accounts:ml": True},
                        PLANNED_DEBIAN)
    assert ledger["packages"] == {} and ledger["wheels"] == {} and ledger["accounts"] == []


def test_an_environment_whose_interpreter_is_gone_is_made_again():
    ledger = _applied({}, {}, {}, {"numpy": "2.2.6"}, PLANNED_DEBIAN, present_before={"venvs:/opt/provision/venv": False},
                      present_after={"venvs:/opt/provision/venv": True})
    gone = mod.removals(ledger, PLANNED_DEBIAN, broken=frozenset({"/opt/provision/venv"}))
    assert gone["venvs"] == ["/opt/provision/venv"] and mod.has_work(gone)
    # One the ledger does not own (the user's, or made before the ledger) is not touched.
    assert mod.removals(mod.empty_ledger(), PLANNED_DEBIAN, broken=frozenset({"/opt/provision/venv"}))["venvs"] == []


def test_what_the_prune_removed_and_the_roles_made_again_stays_provisions():
    ledger = _applied({}, {}, {}, {"numpy": "2.2.6"}, PLANNED_DEBIAN, present_before={"venvs:/opt/provision/venv": False},
                      present_after={"venvs:/opt/provision/venv": True})
    # The next apply begins with the environment there, removes it (its interpreter was gone), python_env makes it.
    ledger["pending"] = mod.begin(ledger, {}, {"numpy": "2.2.6"}, {"venvs:/opt/provision/venv": True})
    ledger["venvs"] = []
    ledger["pending"] = mod.pruned_pending(ledger["pending"], {"venvs": ["/opt/provision/venv"], "packages": []})
    after = mod.commit(ledger, {}, {"numpy": "2.2.6", "jupyterlab": "4.4"}, {"venvs:/opt/provision/venv": True},
                       PLANNED_DEBIAN)
    assert after["venvs"] == ["/opt/provision/venv"]
    assert set(after["wheels"]) == {"numpy", "jupyterlab"}


def test_destroy_of_a_sandbox_nothing_was_applied_to_is_refused_in_one_line(tmp_path):
    import os
    import subprocess

    def destroy(flag: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "provision", "destroy", "--sandbox", "pv-never-applied", flag],
                              capture_output=True, text=True, cwd=ROOT,
                              env=os.environ | {"PROVISION_STATE": str(tmp_path)}, stdin=subprocess.DEVNULL,
                              timeout=120)

    proc = destroy("--dry-run")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no apply on it is recorded" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # --check, --dry-run's old name: the same, after one line naming the new flag.
    old = destroy("--check")
    assert old.returncode == 2
    assert old.stderr.strip().splitlines() == ["note: --check is now --dry-run; --check still works",
                                               *proc.stderr.strip().splitlines()]


def test_a_renamed_account_takes_the_old_accounts_directories_along_and_a_failed_apply_still_owns_what_it_made():
    ledger = _applied({}, {}, {}, {}, PLANNED_DEBIAN | {"paths": ["/var/lib/provision/verify"]},
                      present_before={"paths:/var/lib/provision/verify": False, "venvs:/opt/provision/venv": False},
                      present_after={"paths:/var/lib/provision/verify": True, "venvs:/opt/provision/venv": True})
    renamed = PLANNED_DEBIAN | {"accounts": ["ada"], "paths": ["/var/lib/provision/verify"]}
    gone = mod.removals(ledger, renamed, venv_owner="ml", stale=frozenset({"/var/lib/provision/verify"}))
    assert gone["paths"] == ["/var/lib/provision/verify"] and gone["venvs"] == ["/opt/provision/venv"]
    # That apply removed the environment, made it again and failed before its commit: the next one still owns it.
    ledger["venvs"] = []
    ledger["pending"] = {"packages": {}, "wheels": {}, "absent": ["venvs:/opt/provision/venv"]}
    back = mod.removals(ledger, PLANNED_DEBIAN, venv_owner="ada")
    assert back["venvs"] == ["/opt/provision/venv"]


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="the guard is about root: this run is not root")
def test_root_never_runs_the_pip_of_an_environment_another_account_owns(tmp_path):
    import os

    venv = tmp_path / "venv"
    venv.mkdir()
    host.refuse_root_in(str(venv))  # root's own environment: allowed
    os.chown(venv, 1000, 1000)
    with pytest.raises(mod.LedgerError, match="never as root"):
        host.refuse_root_in(str(venv))


def test_an_environment_of_another_python_is_made_again(tmp_path):
    """An environment made by Python 3.11 (its bin/python3.11): with 3.13 planned it is made again, read from its
    links' names alone; one whose interpreter is gone too."""
    import sys

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python3.11").symlink_to(sys.executable)
    (venv / "bin" / "python").symlink_to("python3.11")
    assert mod.venv_runs(str(venv), "3.11") and mod.venv_runs(str(venv), "")
    assert not mod.venv_runs(str(venv), "3.13")
    (venv / "bin" / "python3.11").unlink()
    (venv / "bin" / "python3.11").symlink_to(tmp_path / "gone")  # the interpreter removed: the link dangles
    assert not mod.venv_runs(str(venv), "3.11") and not mod.venv_runs(str(venv), "")


def test_a_destroy_removes_the_ledgers_own_directory_last_after_the_packages(tmp_path, monkeypatch):
    """The directory that holds the ledger holds the host's apply lock too, which a destroy holds while it removes
    (plugins/modules/provision_lock.py): it goes after the packages' purge, so another apply finds the lock until the
    end. apt cannot purge here: purge is replaced by one that records what was still there when it ran."""
    from types import SimpleNamespace

    ledger_mod = host
    state_dir, other = tmp_path / "var-lib-provision", tmp_path / "opt-provision"
    for directory in (state_dir, other):
        directory.mkdir()
    (state_dir / "apply.lock").write_text("{}")
    (state_dir / "ledger.json").write_text(json.dumps({"schema": "provision.ledger/1", "packages": {"hello": {}}}))
    seen: dict[str, bool] = {}

    def purge(candidates: list[str], owned: set[str]) -> tuple[list[str], list[str]]:
        seen.update(lock=(state_dir / "apply.lock").exists(), other=other.exists())
        return list(candidates), []

    monkeypatch.setattr(ledger_mod, "purge", purge)
    fake = SimpleNamespace(check_mode=False, params={
        "state": "prune", "path": str(state_dir / "ledger.json"), "destroy": True, "purge_home": False,
        "removals": {"packages": ["hello"], "paths": sorted([str(state_dir), str(other)]), "units": [], "accounts": [],
                     "venvs": []}})
    result = ledger_mod.run(fake)
    assert seen == {"lock": True, "other": False}
    assert not state_dir.exists() and not other.exists()
    assert result["removed"]["packages"] == ["hello"] and sorted(result["removed"]["paths"]) == sorted(
        [str(state_dir), str(other)])


def test_an_engine_is_due_a_restart_only_while_it_runs_on_a_configuration_older_than_provisions_last_change(tmp_path):
    """restart_engines (the ledger role's last step): an engine that runs and started before provision last wrote the
    record of its configuration is restarted; one that started after (the roles' handlers restart it after their own
    changes), one that is not running, and one whose configuration provision never changed (no record) are left.
    The record's real time on disk; the engine's start as systemd reports it (the VM test runs the real engines)."""
    import os

    record = tmp_path / "json-keys.json"
    record.write_text("{}")
    written = os.path.getmtime(record)
    engines = [{"unit": "docker.service", "record": str(record)},
               {"unit": "containerd.service", "record": str(tmp_path / "originals.json")}]
    starts = {"docker.service": written - 30, "containerd.service": written - 30}
    assert host.engines_due(engines, started=starts.get) == ["docker.service"]  # containerd: no record
    starts["docker.service"] = written + 0.001  # restarted after the change
    assert host.engines_due(engines, started=starts.get) == []
    assert host.engines_due(engines, started=lambda unit: None) == []  # not running


def test_restart_engines_without_systemd_restarts_nothing_and_says_so(tmp_path):
    """On a machine where no systemd runs (this one), no engine is active: nothing is due, nothing changes."""
    record = tmp_path / "json-keys.json"
    record.write_text("{}")
    proc, out = modules.run("provision_ledger", {"state": "restart_engines", "path": str(tmp_path / "ledger.json"),
                                                 "engines": [{"unit": "docker.service", "record": str(record)}]},
                            tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert out["changed"] is False and out["restarted"] == [], out


@pytest.mark.parametrize(("shown", "expected"), [
    ("ActiveState=active\nActiveEnterTimestampMonotonic={mono}\n", "then"),
    ("ActiveState=active\nActiveEnterTimestampMonotonic=n/a\n", "now"),  # not a number: never a traceback
    ("ActiveState=inactive\nActiveEnterTimestampMonotonic=0\n", None),
], ids=["active", "not-a-number", "inactive"])
def test_an_engines_start_is_read_from_what_systemctl_prints(tmp_path, monkeypatch, shown, expected):
    """started_at on what `systemctl show` prints (a script in its place on PATH: no systemd runs here): an active
    unit's monotonic start becomes wall-clock time; a value that is not a number reads as "started now", so the
    engine is not restarted and the module does not fail; an inactive unit has no start."""
    import os
    import time

    mono = time.clock_gettime(time.CLOCK_MONOTONIC) - 100  # started 100 s ago
    script = tmp_path / "systemctl"
    script.write_text("#!/bin/sh\ncat <<'END'\n" + shown.format(mono=int(mono * 1e6)) + "END\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda p: p == "/run/systemd/system" or real_isdir(p))
    since = host.started_at("docker.service")
    if expected is None:
        assert since is None
    elif expected == "then":
        assert abs(since - (time.time() - 100)) < 5, since
    else:
        assert abs(since - time.time()) < 5, since


def _docker_state(root: Path) -> Path:
    """/var/lib/docker as dockerd leaves it after its first start with nothing made yet (Docker 26's layout: the
    overlay2 driver's image store, the volumes' metadata, the engine's own files), written here: no dockerd runs."""
    data = root / "var/lib/docker"
    for sub in ("containers", "image/overlay2/imagedb/content/sha256", "image/overlay2/layerdb", "overlay2/l",
                "volumes", "network/files", "plugins", "runtimes", "swarm", "tmp", "buildkit"):
        (data / sub).mkdir(parents=True, exist_ok=True)
    (data / "volumes/metadata.db").write_bytes(b"\0" * 32)
    (data / "image/overlay2/repositories.json").write_text('{"Repositories":{}}')
    (data / "engine-id").write_text("2b0c6f4e\n")
    return data


@pytest.mark.parametrize("made", ["nothing", "container", "volume", "image", "another-layout", "no-directory"])
def test_an_engines_data_is_the_users_when_it_holds_a_container_a_volume_or_an_image(tmp_path, made):
    """holds_users_data on real directories: the engine's own empty state is not the users'; a container, a volume
    or an image is; a non-empty directory of a layout it does not know counts as the users' too."""
    data = _docker_state(tmp_path)
    if made == "container":
        (data / "containers/4f2a9c").mkdir()
    elif made == "volume":
        (data / "volumes/notebooks/_data").mkdir(parents=True)
    elif made == "image":
        (data / "image/overlay2/imagedb/content/sha256/8a1d").write_text("{}")
    elif made == "another-layout":
        shutil.rmtree(data / "image")
    elif made == "no-directory":
        shutil.rmtree(data)
    assert host.holds_users_data(str(data)) is (made not in ("nothing", "no-directory"))


def test_an_engines_purge_hook_is_disarmed_and_only_its_empty_state_goes(tmp_path):
    """docker.io's prerm copies nuke-graph-directory.sh into /var/lib/docker when the hook is executable, and its
    postrm runs that copy on purge: before the purge the hook loses its x bits and an earlier copy goes; an engine
    not being purged is left alone. After it, the users' data stays (said), the engine's empty state goes."""
    hook = tmp_path / "usr/share/docker.io/contrib/nuke-graph-directory.sh"
    hook.parent.mkdir(parents=True)
    hook.write_text("#!/bin/sh\nrm -rf \"$1\"\n")
    hook.chmod(0o755)
    data = _docker_state(tmp_path)
    saved = data / hook.name
    saved.write_text(hook.read_text())
    saved.chmod(0o755)
    entry = [{"package": "docker.io", "dir": str(data), "hook": str(hook)}]

    host.disarm_data_hooks(entry, {"podman"})  # docker.io is not among the purged: nothing touched
    assert hook.stat().st_mode & 0o777 == 0o755 and saved.exists()
    host.disarm_data_hooks(entry, {"docker.io", "docker-cli"})
    assert hook.stat().st_mode & 0o777 == 0o644 and not saved.exists()
    host.disarm_data_hooks(entry, {"docker.io"})  # again, as after a cut: the same
    assert hook.stat().st_mode & 0o777 == 0o644

    (data / "volumes/notebooks/_data").mkdir(parents=True)
    (data / "volumes/notebooks/_data/run.ipynb").write_text("{}")
    assert host.settle_engine_data(entry, {"docker-cli"}) == [] and data.exists()  # docker.io not purged
    assert host.settle_engine_data(entry, {"docker.io"}) == [str(data)]
    assert (data / "volumes/notebooks/_data/run.ipynb").read_text() == "{}"
    shutil.rmtree(data / "volumes/notebooks")
    assert host.settle_engine_data(entry, {"docker.io"}) == [] and not data.exists()
